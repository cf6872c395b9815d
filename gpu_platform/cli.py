"""`gpu-platform`: the platform's command line.

Exit codes: 0 success, 2 invalid input (every problem is printed), 1 any other failure.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import click
import sqlalchemy as sa
from rich.console import Console
from rich.table import Table
from rich.tree import Tree

from gpu_platform.cli_common import ledger_option, policy_option, policy_or_exit
from gpu_platform.ledger import PENDING_STATES, BatchConflict, Ledger, content_request_id, default_ledger_url
from gpu_platform.queueview.rows import dry_run, queue_rows
from gpu_platform.requests import RequestError, validate_request_file
from gpu_platform.units import format_duration

console = Console(width=None if sys.stdout.isatty() else 200)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 200)

@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Govern a shared GPU pool: lanes, admission, lineage and cost."""


@main.group()
def policy() -> None:
    """Inspect and validate the GPU pool policy."""


def cohort_tree(pol) -> Tree:
    """The cohort tree with each cohort's own quota and lending limit, and the lanes under it."""
    tree = Tree("cohorts")
    nodes: dict[str, Tree] = {}

    def label(c) -> str:
        parts = [
            f"{q.flavor_name} {q.nominal_quota:g}" + (f" (lends ≤ {q.lending_limit:g})" if q.lending_limit is not None else "")
            for q in c.quotas
        ]
        return f"[bold]{c.name}[/bold]" + (f": {', '.join(parts)}" if parts else "")

    pending = list(pol.cohorts)
    while pending:
        rest = []
        for c in pending:
            parent = tree if c.parent_name is None else nodes.get(c.parent_name)
            if parent is None:
                rest.append(c)
                continue
            nodes[c.name] = parent.add(label(c))
        if len(rest) == len(pending):
            break
        pending = rest
    for lane in pol.lanes_by_priority():
        if lane.cohort_name in nodes:
            nodes[lane.cohort_name].add(lane.name)
    return tree


@policy.command("check")
@click.argument("file", required=False, type=click.Path(dir_okay=False))
def policy_check(file: str | None) -> None:
    """Validate FILE (default: the packaged policy) and print its lanes; exit 2 listing every error."""
    pol = policy_or_exit(file)
    table = Table(title=f"{len(pol.lanes)} lanes (currency {pol.currency}, budget per {pol.budget_period})")
    for col in ("lane", "priority", "cohort", "quotas (GPUs: nominal/borrow/lend)", "preemption", "evidence", "max runs", "max duration", "budget"):
        table.add_column(col)
    for lane in pol.lanes_by_priority():
        quotas = ", ".join(
            f"{q.flavor_name} {q.nominal_quota:g}/{'∞' if q.borrowing_limit is None else f'{q.borrowing_limit:g}'}"
            f"/{'all' if q.lending_limit is None else f'{q.lending_limit:g}'}"
            for q in lane.quotas
        )
        p = lane.preemption
        pre = f"within={p.within_cluster_queue} reclaim={p.reclaim_within_cohort}"
        if lane.protected:
            pre += " protected"
        if lane.yields_to:
            pre += f" yields_to={','.join(lane.yields_to)}"
        table.add_row(
            lane.name,
            str(lane.priority),
            lane.cohort_name or "-",
            quotas,
            pre,
            "yes" if lane.evidence else "no",
            str(lane.max_concurrent_runs),
            format_duration(lane.max_run_duration),
            f"{lane.budget:,}",
        )
    console.print(table)
    console.print(f"flavors: {', '.join(f'{f.name} ({f.gpus} GPUs, {f.node_pool})' for f in pol.flavors)}")
    console.print(cohort_tree(pol))


@main.group()
def request() -> None:
    """Validate job requests."""


@request.command("validate")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@policy_option
def request_validate(files: tuple[str, ...], policy_path: str | None) -> None:
    """Validate request FILES (YAML or JSON); exit 2 listing every problem with its field path."""
    pol = policy_or_exit(policy_path)
    failed = 0
    for f in files:
        try:
            req = validate_request_file(f, pol)
        except RequestError as exc:
            failed += 1
            err_console.print(f"[bold red]invalid[/] {f}: {len(exc.errors)} problem(s)", soft_wrap=True)
            for e in exc.errors:
                err_console.print(f"  {e}", markup=False, highlight=False, soft_wrap=True)
            continue
        console.print(f"[green]ok[/] {f}: lane {req.lane}, {req.gpu_count} x {req.gpu_type}, workload {req.workload}")
    if failed:
        sys.exit(2)


@main.command("submit")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@policy_option
@ledger_option
def submit(files: tuple[str, ...], policy_path: str | None, ledger_url: str | None) -> None:
    """Validate and record requests in the ledger; print each request id.

    Every file is validated first; then all are recorded in one transaction, or none (exit 2
    listing every problem, or naming the file whose request_id exists with other content).
    A file without `request_id` gets a content-derived id, so re-running a batch never
    records a request twice.
    """
    pol = policy_or_exit(policy_path)
    valid, problems = [], 0
    for f in files:
        try:
            valid.append(validate_request_file(f, pol))
        except RequestError as exc:
            problems += 1
            err_console.print(f"[bold red]invalid[/] {f}: {len(exc.errors)} problem(s)", markup=True, highlight=False, soft_wrap=True)
            for e in exc.errors:
                err_console.print(f"  {e}", markup=False, highlight=False, soft_wrap=True)
    if problems:
        sys.exit(2)
    keyed = [r if r.request_id else r.model_copy(update={"request_id": content_request_id(r)}) for r in valid]
    try:
        ledger = Ledger(ledger_url or default_ledger_url())
        before = ledger.known_ids([r.request_id for r in keyed if r.request_id])
        ids = ledger.submit_batch(keyed, sources=list(files))
    except BatchConflict as exc:
        for source, message in exc.conflicts:
            err_console.print(f"[bold red]conflict[/] {source}: {message}", highlight=False, soft_wrap=True)
        err_console.print("nothing was recorded", highlight=False, soft_wrap=True)
        sys.exit(2)
    except sa.exc.SQLAlchemyError as exc:
        # One line, without the URL or statement parameters.
        reason = str(getattr(exc, "orig", None) or type(exc).__name__).strip().splitlines()[0][:300]
        err_console.print(f"ledger unavailable: {type(exc).__name__}: {reason}; nothing was recorded", markup=False, soft_wrap=True)
        sys.exit(1)
    for f, rid in zip(files, ids, strict=True):
        click.echo(rid)
        if rid in before:
            err_console.print(f"{f}: already recorded as {rid}", markup=False, highlight=False, soft_wrap=True)


@main.command("queue")
@ledger_option
@policy_option
@click.option("--all", "show_all", is_flag=True, help="Include finished, failed and rejected requests.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table")
def queue(ledger_url: str | None, policy_path: str | None, show_all: bool, fmt: str) -> None:
    """Show requests by lane: position, the reason each one waits, and its estimated start.

    Positions, reasons and estimates come from a dry run of the next gate tick (nothing recorded);
    on a cluster the last column says what Kueue last said about the request's Job.
    """
    ledger = Ledger(ledger_url or default_ledger_url())
    pol = policy_or_exit(policy_path)
    now = datetime.now(UTC)
    live = ledger.states((*PENDING_STATES, "admitted"))
    plan = dry_run(pol, ledger, live, now, Path(os.environ.get("GPU_PLATFORM_HOME", "var")))
    states = ledger.states(None) if show_all else ledger.states((*PENDING_STATES, "admitted", "preempted"))
    rows = queue_rows(states, plan, now)
    if fmt == "json":
        click.echo(json.dumps([r.to_json() for r in rows], indent=2))
        return
    table = Table(title="GPU queue")
    for col in ("lane", "request", "team", "state", "GPUs", "flavor", "position", "est. start", "reason", "cluster (Kueue)"):
        table.add_column(col, overflow="fold")
    for r in rows:
        est = ""
        if r.estimated_start is not None:
            ahead = (r.estimated_start - now).total_seconds()
            est = "now" if ahead <= 0 else f"in {format_duration(timedelta(seconds=round(ahead)))}"
        elif r.position:
            est = "unknown"
        table.add_row(
            r.lane,
            r.request_id,
            r.team,
            r.state,
            str(r.gpus),
            r.flavor or "",
            f"{r.position} of {r.of}" if r.position else "",
            est,
            r.reason,
            (r.cluster or {}).get("reason", ""),
        )
    console.print(table)
    counts = Counter(r.state for r in rows)
    console.print(", ".join(f"{k}: {v}" for k, v in sorted(counts.items())) or "queue is empty")


def _register_optional() -> None:
    """Attach command groups that live beside their domain modules."""
    from gpu_platform import cli_extensions

    for cmd in cli_extensions.commands():
        main.add_command(cmd)


_register_optional()


if __name__ == "__main__":  # pragma: no cover
    main()

