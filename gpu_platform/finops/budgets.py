"""The two budgets side by side: the gate's (max_cost reserved at admission) and FinOps' (measured
spend, `budget_burn`), for `explain` and `cost report` (docs/finops.md, "Which budget admits").

One rule: **the gate's budget admits.** A request waits (BudgetExhausted) while its max_cost is
more than its lane's budget for the period less the max_cost of the requests admitted in that
period, whatever they spent; measured spend never admits or holds back a request. The gate's
figure is known the moment a request is admitted (bills come a day or more later, and a running
job has spent only part of its max_cost), and a reservation can only overstate spend, so a lane
never runs past its budget on late bills. FinOps' figure (`budget_burn`: month to date, forecast
and what is left of the month's budget) is shown beside it, so a lane whose reservations are used
up while little was spent is plain to see, and a cost exception (`gpu-platform approve REQUEST_ID
--kind cost`) is the way past it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date, datetime
from decimal import Decimal
from typing import Any

import duckdb

from gpu_platform.policy import Policy

__all__ = ["RULE", "budget_rows", "cost_approvers", "cost_exception_command"]

RULE = ("the gate's budget admits: a request waits while its max_cost is more than its lane's budget for "
        "the period less the max_cost reserved by requests admitted in it; measured spend (FinOps) is "
        "shown beside it and never admits or holds back a request")


def cost_approvers(policy: Policy) -> list[str]:
    """Roster roles that may grant a `cost` exception, in the policy's order."""
    return [name for name, role in policy.approvers.items() if "cost" in role.may_approve]


def cost_exception_command(policy: Policy, request_id: str = "REQUEST_ID") -> str:
    """The command that grants a cost exception for `request_id`, naming the roles that may."""
    roles = "|".join(cost_approvers(policy)) or "ROLE"
    return f"gpu-platform approve {request_id} --kind cost --role {roles} --reason TEXT"


def _finops(con: duckdb.DuckDBPyConnection | None, day: date) -> tuple[date | None, dict[tuple[str, str], dict]]:
    """budget_burn's rows of the newest day built on or before `day`, by (scope, subject)."""
    if con is None:
        return None, {}
    have = {r[0] for r in con.execute("select table_name from information_schema.tables").fetchall()}
    if "budget_burn" not in have:
        return None, {}
    (as_of,) = con.execute("select max(day) from budget_burn where day <= $day", {"day": day}).fetchone()
    if as_of is None:
        return None, {}
    cur = con.execute("""
        select scope, subject, currency, month_budget, month_to_date_cost, forecast_month_end_cost, status
        from budget_burn where day = $day""", {"day": as_of})
    names = [d[0] for d in cur.description]
    return as_of, {(r[0], r[1]): dict(zip(names, r, strict=True)) for r in cur.fetchall()}


def budget_rows(
    policy: Policy,
    reserved: Mapping[str, Decimal] | None,
    since: datetime | None,
    con: duckdb.DuckDBPyConnection | None,
    day: date,
    lanes: list[str] | None = None,
    teams: list[str] | None = None,
) -> list[dict[str, Any]]:
    """One row per lane and team budget of the policy (or of `lanes` / `teams` only): the gate's
    budget (`gate_budget` per `period`, `gate_reserved` since `since`, `gate_remaining`; None for
    a team budget, which the gate does not reserve against, or when `reserved` is None: no
    ledger) beside FinOps' (`month_budget`, `month_to_date_cost`, `forecast_month_end_cost`,
    `finops_left`, `finops_status`, `finops_as_of`: budget_burn of the newest day built on or
    before `day`; None when not built), and `admits`: which of the two decides (always the gate's
    for a lane; none for a team: no budget admits by team)."""
    as_of, burn = _finops(con, day)
    out: list[dict[str, Any]] = []
    subjects = [("lane", n, lane.budget) for n, lane in policy.lanes.items() if lane.budget is not None]
    subjects += [("team", n, t.budget) for n, t in policy.teams.items() if getattr(t, "budget", None) is not None]
    for scope, name, budget in subjects:
        if (scope == "lane" and lanes is not None and name not in lanes) or (
                scope == "team" and teams is not None and name not in teams):
            continue
        gate = scope == "lane" and reserved is not None
        spent = Decimal(str(reserved.get(name, 0))) if gate else None
        f = burn.get((scope, name))
        row = {
            "scope": scope, "subject": name, "currency": policy.currency, "period": policy.budget_period,
            "admits": "gate" if scope == "lane" else "none",
            "gate_budget": Decimal(str(budget)) if scope == "lane" else None,
            "gate_reserved": spent,
            "gate_remaining": max(Decimal(0), Decimal(str(budget)) - spent) if gate else None,
            "gate_since": since.date().isoformat() if gate and since is not None else None,
            "month_budget": f["month_budget"] if f else None,
            "month_to_date_cost": f["month_to_date_cost"] if f else None,
            "forecast_month_end_cost": f["forecast_month_end_cost"] if f else None,
            "finops_left": f["month_budget"] - f["month_to_date_cost"] if f else None,
            "finops_status": f["status"] if f else None,
            "finops_as_of": as_of.isoformat() if f and as_of else None,
        }
        out.append(row)
    return out
