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
    warehouse = _warehouse_or_none()
    try:
        ex = explain_request(ledger, pol, request_id, warehouse=warehouse)
    except LedgerError as exc:
        click.echo(f"explain: {exc}", err=True)
        sys.exit(2)
    finally:
        if warehouse is not None:
            warehouse.close()
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
    if ex.aging is not None:
        console.print(f"aging: {plain(ex.aging['text'])} (effective priority {ex.aging['effective_priority']} = "
                      f"{ex.aging['priority']} + {ex.aging['boost']})", markup=False, highlight=False)
    for line in budget_lines(ex.budgets):
        console.print(line, markup=False, highlight=False)
    if ex.cost_exception:
        console.print(f"cost exception (the way past the gate's budget): {ex.cost_exception}", markup=False,
                      highlight=False)
    for c in ex.admission_checks:
        message = f": {plain(c['message'])}" if c.get("message") else ""
        console.print(
            f"admission check {plain(c.get('name'))} (Kueue, last read back): {plain(c.get('state'))}{message} "
            f"[{plain(c.get('rule'))}]",
            markup=False,
            highlight=False,
        )


def _warehouse_or_none():
    """The warehouse, read-only, for FinOps' side of the budgets; None when there is none or a
    writer holds it (explain then shows the gate's side only)."""
    from pathlib import Path

    from gpu_platform.finops.warehouse import WarehouseBusy, connect
    from gpu_platform.paths import default_warehouse

    path = default_warehouse()
    if not Path(path).exists():
        return None
    import duckdb

    try:
        return connect(str(path), wait_s=0)
    except (WarehouseBusy, duckdb.Error, OSError):
        return None


def _money(v) -> str:
    return "n/a" if v is None else f"{v:,.2f}"


def budget_lines(budgets: list[dict]) -> list[str]:
    """The budgets side by side, one line each: the gate's (which admits) and FinOps' (measured)."""
    from gpu_platform.safeload.text import plain

    out = []
    for b in budgets:
        cur = plain(b["currency"])
        gate = (f"gate (admits): {_money(b['gate_remaining'])} of {_money(b['gate_budget'])} {cur} per "
                f"{plain(b['period'])} left after {_money(b['gate_reserved'])} reserved since {plain(b['gate_since'])}"
                if b["gate_budget"] is not None and b["gate_reserved"] is not None
                else "gate: reserves against lane budgets only" if b["scope"] == "team" else "gate: no ledger")
        finops = (f"FinOps (measured, as of {plain(b['finops_as_of'])}): {_money(b['finops_left'])} of "
                  f"{_money(b['month_budget'])} {cur} left this month after {_money(b['month_to_date_cost'])} "
                  f"spent, forecast {_money(b['forecast_month_end_cost'])} ({plain(b['finops_status'])})"
                  if b["month_budget"] is not None else "FinOps: budget_burn not built (gpu-platform cost build)")
        out.append(f"budget {plain(b['scope'])} {plain(b['subject'])}: {gate}; {finops}")
    return out
