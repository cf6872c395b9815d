"""`gpu-platform explain REQUEST_ID`: one request's decision history (table or JSON)."""

from __future__ import annotations

import json
import sys

import click

from gpu_platform.cli.common import (
    checked_id,
    ledger_option,
    make_console,
    policy_option,
    policy_or_exit,
    print_table,
)


@click.command("explain")
@click.argument("request_id", callback=checked_id)
@policy_option
@ledger_option
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table")
def explain(request_id: str, policy_path: str | None, ledger_url: str | None, fmt: str) -> None:
    """Print every decision on REQUEST_ID: reason, position, flavor, preemptor or victims, policy rule.

    Exit 2 when the request id is unknown.
    """
    from rich.table import Table

    from gpu_platform.observe.queueview.explain import explain as explain_request
    from gpu_platform.requests.ledger import Ledger, LedgerError, default_ledger_url

    pol = policy_or_exit(policy_path)
    ledger = Ledger(ledger_url or default_ledger_url())
    try:
        ex = explain_request(ledger, pol, request_id)
    except LedgerError as exc:
        click.echo(f"explain: {exc}", err=True)
        sys.exit(2)
    if fmt == "json":
        click.echo(json.dumps(ex.to_json(), indent=2, default=str))
        return
    from gpu_platform.safeload.text import plain, term

    console = make_console()
    target = f", target {term(ex.target)}" if ex.target else ""
    table = Table(
        title=f"{term(ex.name)} ({term(ex.request_id)}): {term(ex.lane)}, owner {term(ex.owner)}, "
        f"team {term(ex.team)}{target}, {ex.gpus} x {term(ex.gpu_type)}, now {term(ex.state)}"
    )
    for col in ("at (UTC)", "event", "position", "flavor", "preemptor / victims", "reason", "policy rule"):
        table.add_column(col, overflow="fold")
    for s in ex.steps:
        who = (
            f"by {s.preempted_by}"
            if s.preempted_by
            else (", ".join(s.victims) and f"preempted {', '.join(s.victims)}")
        )
        table.add_row(
            s.at.strftime("%Y-%m-%d %H:%M:%S"),
            term(s.event),
            f"{s.position} of {s.of}" if s.position else "",
            term(s.flavor or ""),
            term(who or ""),
            term(s.reason),
            term(s.rule),
        )
    print_table(console, table)
    for a in ex.approvals:
        state = "honoured" if a["honoured"] else "not honoured under the current policy"
        console.print(
            f"approval: {plain(a.get('kind'))} by {plain(a.get('approver'))} ({plain(a.get('role'))}) at "
            f"{plain(a.get('at'))}: {plain(a.get('reason'))} [{state}]",
            markup=False,
            highlight=False,
        )
    if not ex.approvals:
        console.print("approvals: none recorded", markup=False)
    for c in ex.admission_checks:
        message = f": {plain(c['message'])}" if c.get("message") else ""
        console.print(
            f"admission check {plain(c.get('name'))} (Kueue, last read back): {plain(c.get('state'))}{message} "
            f"[{plain(c.get('rule'))}]",
            markup=False,
            highlight=False,
        )
