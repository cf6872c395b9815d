"""Cost report for one day: billed vs allocated, unit costs, chargeback by team (per currency)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import duckdb

from gpu_platform.finops.tables import markdown_table

# (label, table, cost column, units expression or None for "one per row"), lifetime to date
UNIT_COSTS: tuple[tuple[str, str, str, str | None], ...] = (
    ("training_run", "unit_cost_training_run", "cost_per_training_run", None),
    ("accepted_label", "unit_cost_accepted_label", "cost", "accepted_labels"),
    ("replay_hour", "unit_cost_replay_hour", "cost", "replay_hours"),
    ("released_model", "unit_cost_released_model", "cost_per_released_model", None),
    ("released_map", "unit_cost_released_map", "cost_per_released_map", None),
    ("odd_cell_approval", "unit_cost_odd_cell_approval", "cost", "approvals"),
    ("evidence_pack", "unit_cost_evidence_pack", "cost_per_evidence_pack", None),
)


def _rows(con: duckdb.DuckDBPyConnection, sql: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    cur = con.execute(sql, params or {})
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def _tables(con: duckdb.DuckDBPyConnection) -> set[str]:
    return {r[0] for r in con.execute("select table_name from information_schema.tables").fetchall()}


def staleness(con: duckdb.DuckDBPyConnection, day: str | date) -> dict[str, Any] | None:
    """Why the day's figures may not be current, or None when nothing says so.

    Stale when a model's last build of the day failed (or an unpartitioned model's last build:
    it serves every day), when the day's feeds were loaded after the oldest successful build of
    the day's models, or when feeds were loaded for a day never built. Reads `model_builds`
    (written by the runner) and `raw_feed_loads` (written by the feed loaders); a warehouse
    without `model_builds` (built before it existed) is never called stale.
    """
    d = date.fromisoformat(str(day))
    have = _tables(con)
    if "model_builds" not in have:
        return None
    builds = _rows(con, """
        select model, day, status, built_at, error, last_success_at from model_builds
        where day = $day or day is null order by model""", {"day": d})
    failed = [
        {"model": b["model"], "day": b["day"], "failed_at": b["built_at"], "error": b["error"],
         "last_success_at": b["last_success_at"]}
        for b in builds if b["status"] != "success"
    ]
    successes = [b["last_success_at"] for b in builds if b["day"] is not None and b["last_success_at"] is not None]
    last_success = min(successes) if successes else None
    loaded = None
    if "raw_feed_loads" in have:
        loaded = con.execute("select max(loaded_at) from raw_feed_loads where day = $day", {"day": d}).fetchone()[0]
    reasons = []
    if failed:
        names = ", ".join(f["model"] for f in failed)
        reasons.append(f"the last build of {len(failed)} model(s) failed: {names}; the figures are those of the "
                       "last successful build")
    if loaded is not None and last_success is None:
        reasons.append(f"feeds were ingested for {d} at {loaded:%Y-%m-%d %H:%M:%S} UTC but the day was never built")
    elif loaded is not None and last_success is not None and loaded > last_success:
        reasons.append(f"feeds were ingested at {loaded:%Y-%m-%d %H:%M:%S} UTC, after the day's last successful "
                       f"build at {last_success:%Y-%m-%d %H:%M:%S} UTC")
    if not reasons:
        return None
    return {"day": d.isoformat(), "reasons": reasons, "failed_models": failed,
            "last_successful_build_at": last_success, "feeds_ingested_at": loaded,
            "rebuild": f"gpu-platform cost build --day {d}"}


_DUPLICATE = "%: duplicate of %"


def quarantined_money(con: duckdb.DuckDBPyConnection, day: str | date) -> dict[str, Any]:
    """What the day's FOCUS loads left out: `rows`, one per (file, reason, currency) with its row
    count and the BilledCost / EffectiveCost its rows carry (exact Decimals; NULL cells count 0,
    `missing_amounts` counts them), `files`: FOCUS files quarantined whole (their money unknown),
    and `incomplete`: the reasons the day's totals lack money (empty: none). Duplicates of an
    accepted row are listed (`counted` false) but are not missing money.

    The report and the chargeback/reconciliation partitions' metadata both read it."""
    d = date.fromisoformat(str(day))
    have = _tables(con)
    out: dict[str, Any] = {"rows": [], "files": [], "incomplete": []}
    if "raw_focus_quarantine" in have:
        cols = {r[0] for r in con.execute("describe raw_focus_quarantine").fetchall()}
        if "BilledCost" in cols:
            out["rows"] = _rows(con, f"""
                select source as file, regexp_replace(reason, '^row [0-9]+: ', '') as reason,
                       upper(BillingCurrency) as currency, count(*) as rows,
                       coalesce(sum(BilledCost), 0) as billed, coalesce(sum(EffectiveCost), 0) as effective,
                       count(*) filter (where BilledCost is null or EffectiveCost is null) as missing_amounts,
                       not (reason like '{_DUPLICATE}') as counted
                from raw_focus_quarantine where day = $day
                group by all order by counted desc, currency nulls last, billed desc, file, reason""", {"day": d})
    if "raw_feed_file_quarantine" in have:
        out["files"] = _rows(con, """
            select source as file, size_bytes, reason from raw_feed_file_quarantine
            where feed = 'focus' and day = $day order by source""", {"day": d})
    counted = [r for r in out["rows"] if r["counted"]]
    if counted:
        out["incomplete"].append(f"{sum(r['rows'] for r in counted)} FOCUS row(s) quarantined: their money is in "
                                 "no total (quarantined_billed / quarantined_effective)")
    if out["files"]:
        out["incomplete"].append(f"{len(out['files'])} FOCUS file(s) quarantined whole: their money is unknown")
    return out


def day_flags(con: duckdb.DuckDBPyConnection, day: str | date) -> list[dict[str, Any]]:
    """What flags a built day without stopping it (docs/finops.md, "What blocks a day"): per
    currency, unreconciled money over `unreconciled_limit` (the chargeback check
    unreconciled_within_threshold, severity warn). Empty when nothing is flagged."""
    d = date.fromisoformat(str(day))
    if "chargeback" not in _tables(con):
        return []
    cols = {r[0] for r in con.execute("describe chargeback").fetchall()}
    if "unreconciled_limit" not in cols:
        return []
    return [
        {**r, "flag": "unreconciled_over_threshold",
         "message": f"{_shown(r['unreconciled'])} {r['currency']} unreconciled is over the limit "
                    f"{_shown(r['limit'])} (unreconciled_threshold of the day's cost): the day is built, the money "
                    "stays on the (unreconciled) row; see the exceptions"}
        for r in _rows(con, """
            select currency, sum(unreconciled_cost) as unreconciled, max(unreconciled_limit) as "limit"
            from chargeback where day = $day and unreconciled_limit is not null
            group by currency having sum(unreconciled_cost) > max(unreconciled_limit)
            order by currency""", {"day": d})
    ]


def quarantined_markdown(q: dict[str, Any]) -> str:
    """:func:`quarantined_money` as a markdown table (one line per file, reason and currency; whole
    files after), amounts rounded once, here, for display."""
    rows = [{**r, "billed": _shown(r["billed"]), "effective": _shown(r["effective"])} for r in q["rows"]]
    rows += [{"file": f["file"], "reason": f"file quarantined whole: {f['reason']}", "currency": None, "rows": None,
              "billed": "unknown", "effective": "unknown", "missing_amounts": None, "counted": True} for f in q["files"]]
    if not rows:
        return "no quarantined FOCUS rows"
    return markdown_table(rows, ["file", "reason", "currency", "rows", "billed", "effective", "counted"])


def _shown(value: Any) -> str:
    return str(Decimal(value).quantize(Decimal("0.000001")))


def _complete_by(con: duckdb.DuckDBPyConnection, table: str, have: set[str]) -> str:
    """The filter keeping a unit-cost mart's units complete by the end of `$day`: their last day with
    priced GPU time (`last_day`) on or before it; a mart without one, by its release request's last
    priced day, else the day it was submitted."""
    cols = {r[0] for r in con.execute(f"describe {table}").fetchall()}
    if "last_day" in cols:
        return "m.last_day <= $day"
    if "request_id" in cols and {"int_request_cost", "stg_requests"} <= have:
        return ("coalesce((select max(c.last_day) from int_request_cost as c where c.request_id = m.request_id), "
                "(select cast(max(r.submitted_at) as date) from stg_requests as r where r.request_id = m.request_id)"
                ") <= $day")
    return "cast($day as date) is not null"  # every row (the mart names no day)


def unit_costs(con: duckdb.DuckDBPyConnection, day: str | date) -> list[dict[str, Any]]:
    """The unit costs of day D, per unit and currency: every unit complete by the end of D (its last
    day with priced GPU time on or before D) at its lifetime cost (every day, every attempt), so a
    later day's pricing (today so far) never changes D's figures. `cost report --day D` and the
    unit-cost assets' metadata (as of :func:`unit_cost_day`) both read it."""
    d = date.fromisoformat(str(day))
    have = _tables(con)
    out: list[dict[str, Any]] = []
    for label, table, cost_col, units in UNIT_COSTS:
        if table not in have:
            continue
        # a row without units (an ODD cell not approved yet, a batch without accepted labels) adds
        # its cost to no unit's: the headline is the cost of the rows that have units over their
        # units (each row's own figure is the mart's); the rest is cost_without_units
        if units:
            has = f"coalesce(m.{units}, 0) > 0"
            sums = (f"coalesce(sum(m.{cost_col}) filter (where {has}), 0) as cost, sum(m.{units}) as units, "
                    f"coalesce(sum(m.{cost_col}) filter (where not ({has})), 0) as cost_without_units")
        else:
            sums = f"sum(m.{cost_col}) as cost, count(*) as units, 0 as cost_without_units"
        for r in _rows(con, f"""
                select m.currency, {sums}
                from {table} as m where m.currency is not null and {_complete_by(con, table, have)}
                group by m.currency order by m.currency""", {"day": d}):
            per = None
            if r["units"] and r["cost"] is not None:
                per = (Decimal(r["cost"]) / Decimal(str(r["units"]))).quantize(Decimal("0.000001"))
            out.append({"unit": label, "currency": r["currency"], "cost": r["cost"], "units": r["units"],
                        "cost_per_unit": per, "cost_without_units": r["cost_without_units"],
                        "as_of_day": d.isoformat()})
    return out


def unit_cost_day(con: duckdb.DuckDBPyConnection, today: date | None = None) -> date | None:
    """The day a unit-cost asset shows: the newest day priced before today (UTC; today is "so far"
    and changes), else the newest priced day; None before any day is priced."""
    if "fct_gpu_cost_by_request" not in _tables(con):
        return None
    today = today or datetime.now(UTC).date()
    (before, newest) = con.execute(
        "select max(day) filter (where day < $today), max(day) from fct_gpu_cost_by_request",
        {"today": today}).fetchone()
    return before or newest


TEAM_COLUMNS = ["team", "cost_center", "currency", "allocated_gpu_hours", "allocated_cost", "bypass_gpu_hours",
                "bypass_cost", "cpu_cost", "storage_cost", "idle_cost", "shared_cost", "tax_cost", "credit_cost",
                "unused_commitment_cost", "unreconciled_cost", "total_cost"]
"""Chargeback by team, as `cost report` and the chargeback asset's metadata show it (one query:
:func:`chargeback_by_team`). allocated_cost includes bypass_cost."""


def chargeback_by_team(con: duckdb.DuckDBPyConnection, day: str | date) -> list[dict[str, Any]]:
    """The day's chargeback per team, cost center and currency, from `chargeback` (so its own
    materialization can show it before `platform_cost_per_tenant` is built): largest first."""
    if "chargeback" not in _tables(con):
        return []
    have = {r[0] for r in con.execute("describe chargeback").fetchall()}
    # a column a chargeback table lacks (built before it existed) counts 0
    c = {k: k if k in have else "cast(0 as decimal(18, 6))" for k in (
        "allocated_gpu_hours", "allocated_cost", "cpu_cost", "storage_cost", "idle_cost", "shared_cost", "tax_cost",
        "credit_cost", "unused_commitment_cost", "unreconciled_cost", "total_cost")}
    bypass = "bypass" if "bypass" in have else "false"
    return _rows(con, f"""
        select team, cost_center, currency, sum({c['allocated_gpu_hours']}) as allocated_gpu_hours,
               sum({c['allocated_cost']}) as allocated_cost,
               coalesce(sum({c['allocated_gpu_hours']}) filter (where {bypass}), 0.0) as bypass_gpu_hours,
               coalesce(sum({c['allocated_cost']}) filter (where {bypass}), 0) as bypass_cost,
               sum({c['cpu_cost']}) as cpu_cost, sum({c['storage_cost']}) as storage_cost,
               sum({c['idle_cost']}) as idle_cost, sum({c['shared_cost']}) as shared_cost,
               sum({c['tax_cost']}) as tax_cost, sum({c['credit_cost']}) as credit_cost,
               sum({c['unused_commitment_cost']}) as unused_commitment_cost,
               sum({c['unreconciled_cost']}) as unreconciled_cost, sum({c['total_cost']}) as total_cost
        from chargeback where day = $day group by team, cost_center, currency
        order by currency, total_cost desc, team""", {"day": date.fromisoformat(str(day))})


def team_table_markdown(rows: list[dict[str, Any]]) -> str:
    """:func:`chargeback_by_team` as the chargeback asset leads with it: allocated (admitted
    requests' GPU time), bypass, by use (CPU and storage), idle, shared, tax, credit, other (unused
    commitment, unreconciled) and total, which the columns add up to."""
    shown = [{"team": r["team"], "currency": r["currency"],
              "allocated": r["allocated_cost"] - r["bypass_cost"], "bypass": r["bypass_cost"],
              "by_use": r["cpu_cost"] + r["storage_cost"], "idle": r["idle_cost"], "shared": r["shared_cost"],
              "tax": r["tax_cost"], "credit": r["credit_cost"],
              "other": r["unused_commitment_cost"] + r["unreconciled_cost"], "total": r["total_cost"]}
             for r in rows]
    return markdown_table(shown, ["team", "currency", "allocated", "bypass", "by_use", "idle", "shared", "tax",
                                  "credit", "other", "total"])


def cost_report(con: duckdb.DuckDBPyConnection, day: str | date, top: int = 10) -> dict[str, Any]:
    """The day's totals per currency, lifetime unit costs, chargeback by team and the top requests,
    and `stale` (:func:`staleness`: None when the figures are current).

    Money stays Decimal, one entry per currency; nothing is summed across currencies.
    """
    d = date.fromisoformat(str(day))
    have = _tables(con)
    out: dict[str, Any] = {"day": d.isoformat(), "stale": staleness(con, d), "totals": [], "exceptions": [],
                           "unit_costs": [], "unpriced_requests": [], "chargeback_by_team": [], "top_requests": [],
                           "price_book_nodes": [], "services": []}
    if "reconciliation" in have:
        recon_cols = {r[0] for r in con.execute("describe reconciliation").fetchall()}
        quarantine_cols = ("r.quarantined_rows, r.quarantined_billed_cost as quarantined_billed, "
                           "r.quarantined_effective_cost as quarantined_effective"
                           if "quarantined_rows" in recon_cols else  # built before it kept quarantined money
                           "0 as quarantined_rows, 0 as quarantined_billed, 0 as quarantined_effective")
        # money below the 1e-6 each priced piece is rounded to (counted in difference)
        quarantine_cols += (", r.rounding_effective_cost as rounding" if "rounding_effective_cost" in recon_cols
                            else ", 0 as rounding")
        # billed: BilledCost of every FOCUS piece of the day (the invoice); effective: their
        # EffectiveCost (amortized), which chargeback distributes; allocated / idle: all priced GPU
        # nodes (billed and price book); shared / tax / credit / unused_commitment: the day's other
        # homes (docs/finops.md); cpu_nodes / storage: CPU nodes and volumes charged to the pods that
        # used them (measured); unmounted_volumes: the part of shared that volumes cost while no pod
        # mounted them; unreconciled: exception money charged to no team
        out["totals"] = _rows(con, f"""
            select r.currency, r.billed_cost as billed, r.effective_cost as effective,
                   r.billed_minus_effective, r.commitment_purchase_billed as commitment_purchases,
                   r.allocated_cost as billed_allocated_cost, r.bypass_cost as billed_bypass_cost,
                   r.idle_cost as billed_idle_cost, coalesce(i.idle, 0) as idle, r.shared_cost as shared,
                   r.cpu_node_cost as cpu_nodes, r.storage_cost as storage,
                   r.unmounted_volume_cost as unmounted_volumes, r.tax_cost as tax, r.credit_cost as credit, r.unused_commitment_cost as unused_commitment,
                   r.unreconciled_cost as unreconciled, r.price_book_cost as price_book, r.chargeback_total,
                   r.charged_to_teams, r.exceptions, r.correction_rows, r.difference,
                   {quarantine_cols},
                   r.billed_cost, r.effective_cost, r.shared_cost, r.price_book_cost
            from reconciliation as r
            left join (select currency, sum(idle_cost) as idle from int_idle_capacity where day = $day
                       group by currency) as i on i.currency = r.currency
            where r.day = $day order by r.currency""", {"day": d})
    # money the loads left out, beside the totals: per file, reason and currency; the day is
    # incomplete while any is there (docs/finops.md, "Money never leaves unseen")
    q = quarantined_money(con, d)
    out["quarantined"] = q["rows"] + [{"file": f["file"], "reason": f"file quarantined whole: {f['reason']}",
                                       "size_bytes": f["size_bytes"]} for f in q["files"]]
    out["incomplete"] = q["incomplete"]
    out["flags"] = day_flags(con, d)
    if "int_node_hour_prices" in have:
        # nodes without a bill (on-prem hardware, a cloud node whose bill is late): the price book's
        # rate and the entry it came from; their cost is the totals' price_book, never unreconciled
        cols = {r[0] for r in con.execute("describe int_node_hour_prices").fetchall()}
        basis = "price_book_basis" if "price_book_basis" in cols else "cast(null as varchar)"  # built before on-prem
        out["price_book_nodes"] = _rows(con, f"""
            select hostname, gpus, model_name, currency, price_per_gpu_hour, node_hours, node_cost,
                   price_source, {basis} as basis, price_book_source as source, price_book_as_of as as_of
            from int_node_hour_prices where day = $day and price_source = 'price_book'
            order by currency, node_cost desc, hostname""", {"day": d})
    if "reconciliation_exceptions" in have:
        out["exceptions"] = _rows(con, """
            select kind, treatment, currency, amount, gpu_hours, hostname, namespace, pod, source, source_row,
                   price_source, reason
            from reconciliation_exceptions where day = $day
            order by treatment = 'unreconciled' desc, amount desc, exception_id""", {"day": d})
    if "fct_gpu_cost_by_request" in have:
        hours = _rows(con, """
            select currency, sum(allocated_cost) as allocated_cost, sum(allocated_gpu_hours) as allocated_gpu_hours,
                   sum(used_gpu_hours) as used_gpu_hours
            from fct_gpu_cost_by_request where day = $day group by currency""", {"day": d})
        by_cur = {h["currency"]: h for h in hours}
        for t in out["totals"]:
            h = by_cur.get(t["currency"], {})
            t["allocated"] = t["allocated_cost"] = h.get("allocated_cost", Decimal(0))
            t["allocated_gpu_hours"] = h.get("allocated_gpu_hours", 0.0)
            t["used_gpu_hours"] = h.get("used_gpu_hours", 0.0)
    if "int_unattributed_gpu_hours" in have:
        # bypass: GPU time on no admitted request in a team's namespace, charged to that team
        bypass = {r["currency"]: r for r in _rows(con, """
            select currency, sum(cost) as cost, sum(gpu_hours) as gpu_hours from int_unattributed_gpu_hours
            where day = $day and bypass and currency is not null group by currency""", {"day": d})}
        for t in out["totals"]:
            b = bypass.get(t["currency"], {})
            t["bypass"] = b.get("cost", Decimal(0))
            t["bypass_gpu_hours"] = b.get("gpu_hours", 0.0)
        out["top_requests"] = _rows(con, """
            select request_id, team, lane, workload, currency, sum(allocated_gpu_hours) as gpu_hours,
                   sum(allocated_cost) as cost
            from fct_gpu_cost_by_request where day = $day
            group by all order by cost desc, request_id limit $top""", {"day": d, "top": top})
    # units complete by the end of the day, at their lifetime cost (the unit-cost assets show the same)
    out["unit_costs"] = unit_costs(con, d)
    if "unpriced_requests" in have:
        # GPU time no price covers: in no unit cost above (lifetime, like them)
        out["unpriced_requests"] = _rows(con, """
            select request_id, team, workload, first_day, last_day, unpriced_gpu_hours, priced_gpu_hours, reason
            from unpriced_requests order by unpriced_gpu_hours desc, request_id limit $top""", {"top": top})
    from gpu_platform.finops.forecast import budget_rows, forecast_rows

    # month-end forecast per team and lane, and every budget against it (cost_forecast, budget_burn)
    # inference services: cost per 1,000 requests of the day (unit_cost_inference_request)
    out["services"] = service_rows(con, d)
    out["forecast"] = forecast_rows(con, d)
    out["budget_burn"] = budget_rows(con, d)
    # per team from chargeback itself: the chargeback asset's metadata shows the same rows
    out["chargeback_by_team"] = chargeback_by_team(con, d)
    return out


SERVICE_COLUMNS = ["service", "team", "currency", "replica_hours", "allocated_gpu_hours", "idle_gpu_hours",
                   "allocated_cost", "idle_cost", "requests", "cost_per_1k_requests",
                   "idle_cost_per_1k_requests", "reason"]
"""What `cost report`, the unit_cost_inference_request asset's metadata and `/metrics` show of a
service's day (one query: `service_rows`)."""


def service_rows(con: duckdb.DuckDBPyConnection, day: str | date) -> list[dict[str, Any]]:
    """Each service's day from unit_cost_inference_request: replica and GPU time, cost, its idle
    part, requests, cost per 1,000 requests (NULL with a reason). [] before the mart is built."""
    if "unit_cost_inference_request" not in _tables(con):
        return []
    return _rows(con, f"""
        select {", ".join(SERVICE_COLUMNS)} from unit_cost_inference_request
        where day = $day order by currency nulls last, allocated_cost desc nulls last, service""",
                 {"day": date.fromisoformat(str(day))})


def service_markdown(rows: list[dict[str, Any]]) -> str:
    """`service_rows` as a markdown table for the UI: money to the cent, cost per 1,000 requests to
    1e-6 (a fraction of a cent is the figure), requests whole, no reason shown as empty."""
    def per_1k(v: Any) -> str:
        return "" if v is None else _shown(v)

    def count(v: Any) -> str:
        n = float(v or 0)
        return f"{n:,.0f}" if n.is_integer() else f"{n:,.2f}"

    shown = [{**{k: ("" if v is None else v) for k, v in r.items()}, "requests": count(r["requests"]),
              "cost_per_1k_requests": per_1k(r["cost_per_1k_requests"]),
              "idle_cost_per_1k_requests": per_1k(r["idle_cost_per_1k_requests"])}
             for r in rows]
    return markdown_table(shown, SERVICE_COLUMNS)


def to_jsonable(value: Any) -> Any:
    """Decimals become strings (exact), dates ISO strings."""
    if isinstance(value, dict):
        return {k: to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if isinstance(value, Decimal):
        return str(value.quantize(Decimal("0.000001")))
    if isinstance(value, date | datetime):
        return value.isoformat()
    return value


def model_metrics(
    con: duckdb.DuckDBPyConnection, model: str, day: str | date | tuple[Any, Any] | None
) -> dict[str, Any]:
    """Numbers for a model's materialization: GPU-hours, utilization, cost per currency, top tables.

    Keys: `gpu_hours`, `used_gpu_hours`, `utilization`, `<money column>_<CUR>` (e.g.
    `total_cost_USD`), and `top_teams_md` / `top_requests_md` markdown where they apply.
    """
    cols = {r[0] for r in con.execute(f"describe {model}").fetchall()}
    first, last = day if isinstance(day, tuple) else (day, day)
    where, params = ("", {})
    if first is not None and "day" in cols:
        where = "where day between $first and $last"
        params = {"first": date.fromisoformat(str(first)), "last": date.fromisoformat(str(last))}
    out: dict[str, Any] = {}
    if model == "chargeback" and first is not None and first == last:
        # leads the partition's metadata: the day per team, as `cost report` shows it
        out["by_team_md"] = team_table_markdown(chargeback_by_team(con, first))
    if "allocated_gpu_hours" in cols:
        used_expr = "sum(used_gpu_hours)" if "used_gpu_hours" in cols else "null"
        alloc, used = con.execute(
            f"select sum(allocated_gpu_hours), {used_expr} from {model} {where}", params).fetchall()[0]
        out["gpu_hours"] = float(alloc or 0.0)
        if used is not None:
            out["used_gpu_hours"] = float(used)
            out["utilization"] = float(used) / float(alloc) if alloc else 0.0
    money_cols = [c for c in ("billed_cost", "effective_cost", "allocated_cost", "idle_cost", "shared_cost",
                              "tax_cost", "credit_cost", "unused_commitment_cost", "price_book_cost",
                              "chargeback_total", "quarantined_billed_cost", "quarantined_effective_cost",
                              "difference") if c in cols] if model == "reconciliation" else [
        next((c for c in ("total_cost", "allocated_cost", "billed_cost", "node_cost", "shared_cost", "cost")
              if c in cols), None)]
    for money in (c for c in money_cols if c and "currency" in cols):
        for cur, total in con.execute(
                f"select currency, sum({money}) from {model} {where} group by currency order by currency",
                params).fetchall():
            out[f"{money}_{cur}"] = float(total or 0)
    if model in ("reconciliation", "chargeback") and first is not None and first == last:
        # the money the day's loads left out, as `cost report` shows it (one function for both)
        q = quarantined_money(con, first)
        out["incomplete"] = 1.0 if q["incomplete"] else 0.0
        out["quarantined_md"] = quarantined_markdown(q)
        if q["incomplete"]:
            out["incomplete_md"] = "\n".join(f"- {reason}" for reason in q["incomplete"])
        flags = day_flags(con, first)
        out["over_unreconciled_threshold"] = 1.0 if flags else 0.0
        if flags:
            out["flags_md"] = "\n".join(f"- {f['message']}" for f in flags)
    unit = next((u for u in UNIT_COSTS if u[1] == model), None)
    as_of = unit_cost_day(con) if unit is not None else None
    if unit is not None and as_of is not None:
        # what `cost report --day <as_of_day>` shows (unit_costs): the units complete by the end of
        # the newest day priced before today, never today's pricing so far
        label = unit[0]
        out["as_of_day"] = as_of.isoformat()
        for u in (u for u in unit_costs(con, as_of) if u["unit"] == label):
            cur = u["currency"]
            out[f"cost_{cur}"] = float(u["cost"] or 0)
            out[f"units_{cur}"] = float(u["units"] or 0)
            if u["cost_per_unit"] is not None:
                out[f"cost_per_{label}_{cur}"] = float(u["cost_per_unit"])
    if model.startswith("unit_cost_") and "int_pod_gpu_hours" in _tables(con):
        # requests whose GPU time has no price are in no unit-cost mart: how many (unpriced_requests lists them)
        (n,) = con.execute("select count(distinct request_id) from int_pod_gpu_hours "
                           "where currency is null and allocated_gpu_hours > 0").fetchone()
        out["unpriced_requests"] = int(n)
    if model == "platform_cost_per_tenant":
        if first is not None and first == last:
            # the day per team with its split, as the chargeback partition leads with it
            out["by_team_md"] = team_table_markdown(chargeback_by_team(con, first))
        rows = _rows(con, f"select team, currency, allocated_gpu_hours, total_cost from {model} {where} "
                          "order by total_cost desc limit 10", params)
        out["top_teams_md"] = markdown_table(rows, ["team", "currency", "allocated_gpu_hours", "total_cost"])
    if model == "fct_gpu_cost_by_request":
        rows = _rows(con, f"select request_id, team, workload, currency, sum(allocated_gpu_hours) as gpu_hours, "
                          f"sum(allocated_cost) as cost from {model} {where} group by all "
                          "order by cost desc, request_id limit 10", params)
        out["top_requests_md"] = markdown_table(rows, ["request_id", "team", "workload", "currency", "gpu_hours", "cost"])
    if model == "unit_cost_inference_request" and first is not None and first == last:
        # the day's services as `cost report` shows them (service_rows), and each priced one's figure
        rows = service_rows(con, first)
        out["services_md"] = service_markdown(rows)
        for r in rows:
            if r["cost_per_1k_requests"] is not None:
                out[f"cost_per_1k_requests_{r['service']}_{r['currency']}"] = float(r["cost_per_1k_requests"])
    if model in ("cost_forecast", "budget_burn") and first is not None and first == last:
        from gpu_platform.finops.forecast import forecast_metadata

        out.update(forecast_metadata(con, model, first))
    return out


def day_model_metrics(
    con: duckdb.DuckDBPyConnection, model: str, span: tuple[Any, Any]
) -> dict[str, dict[str, Any]]:
    """Each day of `span` (inclusive) on its own: `{"YYYY-MM-DD": {"rows": n, **model_metrics}}`.

    What a daily partition shows when one run builds a range of days: its own day's figures,
    never the range's total. A model without a `day` column has no per-day figures ({}).
    """
    cols = {r[0] for r in con.execute(f"describe {model}").fetchall()}
    if "day" not in cols:
        return {}
    first, last = (date.fromisoformat(str(d)) for d in span)
    counts = {
        date.fromisoformat(str(day)[:10]): n
        for day, n in con.execute(
            f"select day, count(*) from {model} where day between $first and $last group by day",
            {"first": first, "last": last},
        ).fetchall()
    }
    out: dict[str, dict[str, Any]] = {}
    d = first
    while d <= last:
        out[d.isoformat()] = {"rows": int(counts.get(d, 0)), **model_metrics(con, model, (d, d))}
        d += timedelta(days=1)
    return out
