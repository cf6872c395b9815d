"""Reading a day's scorecards and signals back from the warehouse (for `gpu-platform scorecard`)."""

from __future__ import annotations

from datetime import date
from typing import Any

SCORECARD_TABLES: tuple[str, ...] = (
    "scorecard_queue_wait",
    "scorecard_utilization",
    "scorecard_failures",
    "scorecard_preemption",
    "scorecard_cache_efficiency",
    "scorecard_allocation_coverage",
    "scorecard_bypass",
)


def day_scorecards(con: Any, day: str | date) -> dict[str, Any]:
    """{table: rows (dicts) of the day, or None when the table was never built}, plus `capacity_signals`
    (every row of the day, fired first)."""
    present = {r[0] for r in con.execute(
        "select table_name from information_schema.tables where table_schema = 'main'").fetchall()}
    out: dict[str, Any] = {}
    for table in (*SCORECARD_TABLES, "capacity_signals"):
        if table not in present:
            out[table] = None
            continue
        order = "not fired, severity, signal, subject" if table == "capacity_signals" else "all"
        cur = con.execute(f"select * exclude (day) from {table} where day = $day order by {order}", {"day": day})
        cols = [d[0] for d in cur.description]
        out[table] = [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
    return out
