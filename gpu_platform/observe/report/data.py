"""The numbers behind `gpu-platform report`: queue waits from the ledger, cost and utilization
from the DuckDB marts. Each function returns plain rows; none of them draws."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import duckdb
import sqlalchemy as sa

from gpu_platform.finops.sqlmodels.report import UNIT_COSTS
from gpu_platform.observe.queueview.demand import percentile
from gpu_platform.policy import Policy
from gpu_platform.requests.ledger import Ledger, events_table, requests_table


@dataclass(frozen=True, slots=True)
class WaitRow:
    """Queue waits of one lane's admissions on one day (seconds)."""

    day: date
    lane: str
    admissions: int
    p50_s: float
    p95_s: float
    max_s: float


def _utc(dt: datetime) -> datetime:
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)


def queue_waits(ledger: Ledger, since: datetime) -> list[WaitRow]:
    """Wait of every admission since `since`, by day of admission and lane.

    A wait starts at submission, or at the requeue after a preemption (the request keeps its
    place, but it waits again), and ends at the admission.
    """
    e, r = events_table, requests_table
    admitted_since = sa.select(e.c.request_id).where(e.c.event == "admitted", e.c.at >= since).distinct().subquery()
    q = (
        sa.select(e.c.request_id, r.c.lane, e.c.event, e.c.at)
        .join(r, r.c.request_id == e.c.request_id)
        .join(admitted_since, admitted_since.c.request_id == e.c.request_id)
        .where(e.c.event.in_(("submitted", "requeued", "admitted")))
        .order_by(e.c.request_id, e.c.id)
    )
    waits: dict[tuple[date, str], list[float]] = defaultdict(list)
    start: dict[str, datetime] = {}
    with ledger.engine.connect() as conn:
        for rid, lane, event, at in conn.execute(q):
            at = _utc(at)
            if event in ("submitted", "requeued"):
                start[rid] = at
            elif rid in start:
                if at >= since:
                    waits[(at.date(), lane)].append(max(0.0, (at - start[rid]).total_seconds()))
                del start[rid]
    return [
        WaitRow(day, lane, len(v), percentile(v, 50), percentile(v, 95), max(v))
        for (day, lane), v in sorted(waits.items())
    ]


def _tables(con: duckdb.DuckDBPyConnection) -> set[str]:
    return {row[0] for row in con.execute("select table_name from information_schema.tables").fetchall()}


def _rows(con: duckdb.DuckDBPyConnection, sql: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    cur = con.execute(sql, params)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def utilization_by_pool(con: duckdb.DuckDBPyConnection, policy: Policy, first: date, last: date) -> list[dict[str, Any]]:
    """Per day and node pool: allocated and busy GPU-hours and their ratio (from fct_gpu_cost_by_request)."""
    if "fct_gpu_cost_by_request" not in _tables(con):
        return []
    rows = _rows(
        con,
        """
        select day, flavor_name, sum(allocated_gpu_hours) as allocated, sum(used_gpu_hours) as used
        from fct_gpu_cost_by_request where day between $first and $last
        group by day, flavor_name order by day, flavor_name""",
        {"first": first, "last": last},
    )
    pool_of = {f.name: f.node_pool for f in policy.flavors}
    acc: dict[tuple[date, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for row in rows:
        key = (row["day"], pool_of.get(row["flavor_name"], row["flavor_name"] or "unknown"))
        acc[key][0] += float(row["allocated"] or 0)
        acc[key][1] += float(row["used"] or 0)
    return [
        {"day": d, "node_pool": p, "allocated_gpu_hours": a, "used_gpu_hours": u, "utilization": u / a if a else 0.0}
        for (d, p), (a, u) in sorted(acc.items())
    ]


IN_PROGRESS = "in progress"
NO_BUSY_TIME = "incomplete: GPUs allocated but no busy time recorded (its DCGM samples are not loaded yet)"


def partial_days(util: list[dict[str, Any]], now: datetime) -> dict[date, str]:
    """The days whose figures are not final, and why: today and any later day (in progress), and
    the newest earlier day with utilization rows when none of its allocated GPU-hours is busy (its
    DCGM feed not ingested yet: not an idle pool). `util`: `utilization_by_pool` rows."""
    today = _utc(now).date()
    out = {today: IN_PROGRESS}
    out.update({r["day"]: IN_PROGRESS for r in util if r["day"] >= today})
    earlier = [r for r in util if r["day"] < today]
    if earlier:
        newest = max(r["day"] for r in earlier)
        rows = [r for r in earlier if r["day"] == newest]
        if sum(r["allocated_gpu_hours"] for r in rows) > 0 and not sum(r["used_gpu_hours"] for r in rows):
            out[newest] = NO_BUSY_TIME
    return dict(sorted(out.items()))


def cost_by_team(con: duckdb.DuckDBPyConnection, first: date, last: date) -> list[dict[str, Any]]:
    """Per day, team and currency: total chargeback cost (platform_cost_per_tenant)."""
    if "platform_cost_per_tenant" not in _tables(con):
        return []
    return _rows(
        con,
        """
        select day, team, currency, sum(total_cost) as total_cost, sum(allocated_gpu_hours) as gpu_hours
        from platform_cost_per_tenant where day between $first and $last
        group by day, team, currency order by day, currency, team""",
        {"first": first, "last": last},
    )


def unit_costs(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """Lifetime cost per unit (per training run, accepted label, replay hour, ...), per currency."""
    have = _tables(con)
    out = []
    for label, table, cost_col, units in UNIT_COSTS:
        if table not in have:
            continue
        unit_expr = f"sum({units})" if units else "count(*)"
        for cur, cost, n in con.execute(
            f"select currency, sum({cost_col}), {unit_expr} from {table} group by currency order by currency"
        ).fetchall():
            per = (Decimal(cost) / Decimal(str(n))).quantize(Decimal("0.000001")) if n and cost is not None else None
            out.append({"unit": label, "currency": cur, "cost": cost, "units": n, "cost_per_unit": per})
    return out


def unpriced_request_count(con: duckdb.DuckDBPyConnection) -> tuple[int, float]:
    """(requests, GPU-hours) of GPU time no price covers (`unpriced_requests`): in no unit cost."""
    if "unpriced_requests" not in _tables(con):
        return 0, 0.0
    n, hours = con.execute("select count(*), coalesce(sum(unpriced_gpu_hours), 0) from unpriced_requests").fetchone()
    return int(n), float(hours)


def fired_signals(con: duckdb.DuckDBPyConnection, first: date, last: date) -> list[dict[str, Any]] | None:
    """Rows of a `capacity_signals` table that fired in the period; None: the warehouse has no such table."""
    have = _tables(con)
    if "capacity_signals" not in have:
        return None
    cols = {row[0] for row in con.execute("describe capacity_signals").fetchall()}
    where, params = [], {}
    if "fired" in cols:
        where.append("fired")
    if "day" in cols:
        where.append("day between $first and $last")
        params = {"first": first, "last": last}
    sql = "select * from capacity_signals" + (" where " + " and ".join(where) if where else "")
    return _rows(con, sql, params)
