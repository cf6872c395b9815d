"""Month-end forecast and budget burn, read from the warehouse's `cost_forecast` and `budget_burn`
models (dbt_like_sql/marts; the arithmetic lives there, docs/finops.md "Forecast and budget burn").

One query per figure, shared by `cost report`, the Dagster metadata of the two models and
`/metrics`, so the three always say the same thing.
"""

from __future__ import annotations

import math
from datetime import date
from decimal import Decimal
from typing import Any

import duckdb

FORECAST_COLUMNS = (
    "team", "lane", "currency", "month_to_date_cost", "run_rate_per_day", "pending_requests",
    "pending_gpu_hours", "unit_rate", "pending_cost", "run_rate_cost", "forecast_month_end_cost",
)
BURN_COLUMNS = (
    "scope", "subject", "currency", "month_budget", "month_to_date_cost", "forecast_month_end_cost",
    "fired", "status", "days_left", "projected_exceed_day", "bypass_cost",
)


def _tables(con: duckdb.DuckDBPyConnection) -> set[str]:
    return {r[0] for r in con.execute("select table_name from information_schema.tables").fetchall()}


def _rows(con: duckdb.DuckDBPyConnection, sql: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    cur = con.execute(sql, params)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def forecast_rows(con: duckdb.DuckDBPyConnection, day: str | date) -> list[dict[str, Any]]:
    """The day's forecast per team, lane and currency, largest month-end forecast first."""
    if "cost_forecast" not in _tables(con):
        return []
    return _rows(con, f"""
        select {', '.join(FORECAST_COLUMNS)} from cost_forecast where day = $day
        order by currency, forecast_month_end_cost desc, team, lane""", {"day": date.fromisoformat(str(day))})


def budget_rows(con: duckdb.DuckDBPyConnection, day: str | date) -> list[dict[str, Any]]:
    """The day's budget burn per lane and team budget: fired first, soonest to pass first."""
    if "budget_burn" not in _tables(con):
        return []
    have = {r[0] for r in con.execute("describe budget_burn").fetchall()}
    cols = [c if c in have else f"0 as {c}" for c in BURN_COLUMNS]  # bypass_cost: built before it existed
    return _rows(con, f"""
        select {', '.join(cols)} from budget_burn where day = $day
        order by fired desc, days_left nulls last, scope, subject""", {"day": date.fromisoformat(str(day))})


def latest_day(con: duckdb.DuckDBPyConnection) -> date | None:
    """The newest day a forecast was built for (None: never built)."""
    if "cost_forecast" not in _tables(con):
        return None
    (d,) = con.execute("select max(day) from cost_forecast").fetchone()
    return d


def days_left_value(days_left: int | None) -> float:
    """`/metrics` value of days_left: +Inf when the budget is not passed this month."""
    return math.inf if days_left is None else float(days_left)


def forecast_metadata(con: duckdb.DuckDBPyConnection, model: str, day: str | date) -> dict[str, Any]:
    """Dagster metadata of one day of `cost_forecast` / `budget_burn`: floats per currency for the
    UI's plots over the daily partitions (month to date against month-end forecast and budget: the
    burn-down) and a markdown table of the day."""
    from gpu_platform.finops.tables import markdown_table

    out: dict[str, Any] = {}
    if model == "cost_forecast":
        rows = forecast_rows(con, day)
        totals: dict[str, dict[str, Decimal]] = {}
        for r in rows:
            t = totals.setdefault(r["currency"], {"mtd": Decimal(0), "forecast": Decimal(0), "pending": Decimal(0)})
            t["mtd"] += r["month_to_date_cost"]
            t["forecast"] += r["forecast_month_end_cost"]
            t["pending"] += r["pending_cost"]
        for cur, t in sorted(totals.items()):
            out[f"month_to_date_cost_{cur}"] = float(t["mtd"])
            out[f"forecast_month_end_cost_{cur}"] = float(t["forecast"])
            out[f"pending_cost_{cur}"] = float(t["pending"])
        out["forecast_md"] = markdown_table(rows[:15], ["team", "lane", "currency", "month_to_date_cost",
                                                       "pending_cost", "run_rate_cost", "forecast_month_end_cost"])
    elif model == "budget_burn":
        rows = budget_rows(con, day)
        out["budgets_fired"] = sum(1 for r in rows if r["fired"])
        out["budgets_over"] = sum(1 for r in rows if r["status"] == "over_budget")
        left = [r["days_left"] for r in rows if r["days_left"] is not None]
        if left:
            out["soonest_days_left"] = min(left)
        for r in rows:
            # one float per budget: spend left before it is passed (negative: over), plotted per partition
            out[f"budget_left_{r['scope']}_{r['subject']}_{r['currency']}"] = float(
                r["month_budget"] - r["month_to_date_cost"])
        out["budget_burn_md"] = markdown_table(rows[:15], ["scope", "subject", "currency", "month_budget",
                                                          "month_to_date_cost", "forecast_month_end_cost",
                                                          "status", "projected_exceed_day"])
    return out
