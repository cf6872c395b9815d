"""`gpu-platform queue`: requests by lane with position, reason and estimated start."""

from __future__ import annotations

import json
import os
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import click

from gpu_platform.cli.common import ledger_option, make_console, policy_option, policy_or_exit, print_table

if TYPE_CHECKING:
    from gpu_platform.requests.ledger import Ledger


@click.command("queue")
@ledger_option
@policy_option
@click.option("--all", "show_all", is_flag=True, help="Include finished, failed and rejected requests.")
@click.option("--owner", default=None, help="Only this owner's requests (exact, e.g. ana@example.com).")
@click.option("--team", default=None, help="Only this team's requests.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table")
def queue(
    ledger_url: str | None, policy_path: str | None, show_all: bool, owner: str | None, team: str | None, fmt: str
) -> None:
    """Show requests by lane: name, owner, target, position, the reason each one waits, and its
    estimated start.

    Positions, reasons and estimates come from a dry run of the next gate tick over the whole
    queue (nothing recorded), so `--owner` / `--team` show the same positions as the full view;
    on a cluster the last column says what Kueue last said about the request's Job.
    """
    from rich.table import Table
    from rich.text import Text

    from gpu_platform.observe.queueview.rows import dry_run, queue_rows
    from gpu_platform.requests.ledger import PENDING_STATES, Ledger, default_ledger_url
    from gpu_platform.safeload.text import plain, term
    from gpu_platform.units import format_duration

    ledger = Ledger(ledger_url or default_ledger_url())
    pol = policy_or_exit(policy_path)
    now = datetime.now(UTC)
    live = ledger.states((*PENDING_STATES, "admitted"))
    on_cluster = os.environ.get("GPU_PLATFORM_ENV") == "prod"  # the gate's k8s executor (resources/build.py)
    plan = dry_run(pol, ledger, live, now, Path(os.environ.get("GPU_PLATFORM_HOME", "var")), on_cluster=on_cluster)
    states = ledger.states(None) if show_all else ledger.states((*PENDING_STATES, "admitted", "preempted"))
    rows = queue_rows(states, plan, now, owner=owner, team=team, policy=pol)
    # a request no identity source vouched for says so wherever it is shown (docs/approvals.md)
    unverified = {rid for rid, d in ledger.submitters([r.request_id for r in rows]).items() if not d.get("verified")}
    if fmt == "json":
        click.echo(json.dumps([{**r.to_json(), **({"unverified": True} if r.request_id in unverified else {})}
                               for r in rows], indent=2))
        return
    table = Table(title="GPU queue")
    kueue = any(r.cluster for r in rows)  # the column only where a cluster said something
    for col in ("lane", "request (name, id)", "owner, team, target", "state", "GPUs", "flavor",
                "position, est. start"):
        table.add_column(col, overflow="fold")
    # the reason and Kueue's word are what people read: they keep some width, the ids fold
    table.add_column("reason", overflow="fold", min_width=24 if kueue else 36)
    if kueue:
        table.add_column("cluster (Kueue)", overflow="fold", min_width=30)
    for r in rows:
        est = ""
        if r.estimated_start is not None:
            ahead = (r.estimated_start - now).total_seconds()
            est = "now" if ahead <= 0 else f"in {format_duration(timedelta(seconds=round(ahead)))}"
        elif r.position:
            est = "unknown"
        # each value escaped on its own (`plain`): a newline between values is the table's, one
        # inside a value (an owner stored before validation refused it) prints as \n
        cells = [
            plain(r.lane),
            plain(r.request_id) if r.name == r.request_id else f"{plain(r.name)}\n{plain(r.request_id)}",
            "\n".join(plain(x) for x in (r.owner, r.team, r.target) if x)
            + (" (unverified)" if r.request_id in unverified else ""),
            plain(r.state) + _boost(r.aging),
            str(r.gpus),
            plain(r.flavor or ""),
            "\n".join(x for x in (f"{r.position} of {r.of}" if r.position else "", est) if x),
            plain(r.reason),
        ]
        if kueue:
            cells.append(plain((r.cluster or {}).get("reason", "")))
        table.add_row(*(Text(c) for c in cells))
    out = make_console()
    print_table(out, table)
    counts = Counter(r.state for r in rows)
    who = " and ".join(x for x in (owner and f"owner {term(owner)}", team and f"team {term(team)}") if x)
    empty = f"no requests of {who}" if who else "queue is empty"
    if not rows:
        empty += f" in {_where(ledger, count_ended=not (show_all or who))}"
    out.print(", ".join(f"{k}: {v}" for k, v in sorted(counts.items())) or empty)


def _boost(aging: dict | None) -> str:
    """The state cell's line for a waiting request that aging has lifted: its boost and effective
    priority (what Kueue orders and preempts by); nothing before the first step."""
    if not aging or not aging.get("boost"):
        return ""
    return f"\naged +{aging['boost']} (priority {aging['effective_priority']})"


def _where(ledger: Ledger, count_ended: bool) -> str:
    """Which ledger an empty answer came from, and what else it holds: an empty queue read from
    the wrong home (the demo's state is under `.demo`) says so at once."""
    import sqlalchemy as sa

    url = sa.make_url(ledger.url).render_as_string(hide_password=True)
    if not count_ended:
        return f"ledger {url}"
    ended = len(ledger.states(None))
    if not ended:
        return f"ledger {url} (it holds no requests)"
    return f"ledger {url} (nothing waits or runs; {ended} ended request(s): --all lists them)"
