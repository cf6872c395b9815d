"""The day's allocation as FOCUS 1.2 rows: what a finance stack reads (`gpu-platform cost export`).

One row per (team, request) and currency: its EffectiveCost is the request's fully loaded share of
the day (direct GPU cost, CPU and storage by use, and its share of idle, shared, tax and credit),
with every part in an `x_`-prefixed column. Money charged to a team without a request (bypass,
CPU-node time of its namespace's pods) is a team row; money charged to no team keeps its own row
('(unallocated)', '(unused commitment)', '(unreconciled)'). Reconciling lines, per currency, make
the file add up to the invoice (docs/finops.md, "FOCUS export"):

- `price_book`: nodes priced from the price book (no bill) are charged to teams, not invoiced:
  BilledCost and EffectiveCost minus that cost;
- `billed_minus_effective`: BilledCost of the day minus its EffectiveCost (a commitment's fee billed
  up front against the amortized cost of the usage it covers), EffectiveCost 0;
- `rounding`: what the rows, priced at 1e-6, leave of the day's exact sums (the money below the 1e-6
  each priced piece is rounded to: the reconciliation's rounding_effective_cost, within half a
  cent; more is an error naming it);
- `quarantined`: what the day's quarantined FOCUS rows carry (in no model's total).

So sum(BilledCost) = the day's billed cost + quarantined billed, and sum(EffectiveCost) = the day's
effective cost + quarantined effective, per currency, exactly; :func:`focus_export` checks it and
fails closed. Every row is checked against the FOCUS 1.2 column rules (`focus.FOCUS_COLUMNS`:
Mandatory columns present, non-nullable ones set, types, allowed values) by :func:`validate_focus`.

Pieces of a row's money are split at 1e-6 with the largest remainder, so a team's request rows add
up to its chargeback row exactly.
"""

from __future__ import annotations

import csv
import io
import json
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import ROUND_FLOOR, Decimal
from typing import Any

import duckdb

from gpu_platform.finops.feeds.focus import FOCUS_COLUMNS, ISO_4217_CODES

__all__ = [
    "ALLOCATION_COLUMNS",
    "ExportError",
    "FocusExport",
    "focus_export",
    "validate_focus",
    "write_export",
]

PROVIDER = "gpu_platform"
"""ProviderName, PublisherName and InvoiceIssuerName of every row: the platform charges its teams
(the cloud bills behind it are the platform's, reconciled by the reconciling lines)."""

STEP = Decimal("0.000001")
HALF_CENT = Decimal("0.005")

CHARGE_CATEGORIES = frozenset({"Usage", "Purchase", "Tax", "Credit", "Adjustment"})
CHARGE_CLASSES = frozenset({"Correction"})
CHARGE_FREQUENCIES = frozenset({"One-Time", "Recurring", "Usage-Based"})
SERVICE_CATEGORIES = frozenset({
    "AI and Machine Learning", "Analytics", "Business Applications", "Compute", "Databases", "Developer Tools",
    "Multicloud", "Identity", "Integration", "Internet of Things", "Management and Governance", "Media",
    "Migration", "Mobile", "Networking", "Security", "Storage", "Web", "Other",
})
"""FOCUS 1.2 ServiceCategory allowed values."""

PARTS = ("allocated", "cpu", "storage", "idle", "shared", "tax", "credit", "unused_commitment", "unreconciled")
"""Chargeback's money columns (`<part>_cost`), in the order they add up to a row's total."""

X_COLUMNS: tuple[str, ...] = (
    "x_AllocationLine", "x_Team", "x_CostCenter", "x_Site", "x_Lane", "x_RequestId", "x_ReleasePacketId",
    "x_Bypass", "x_AllocatedGpuHours", "x_UsedGpuHours", "x_AllocatedCost", "x_CpuCost", "x_StorageCost",
    "x_IdleCost", "x_SharedCost", "x_TaxCost", "x_CreditCost", "x_UnusedCommitmentCost", "x_UnreconciledCost",
    "x_IdlePolicy", "x_SharedPolicy",
)
_X_PART = dict(zip(PARTS, ("x_AllocatedCost", "x_CpuCost", "x_StorageCost", "x_IdleCost", "x_SharedCost",
                           "x_TaxCost", "x_CreditCost", "x_UnusedCommitmentCost", "x_UnreconciledCost"), strict=True))
X_DECIMALS = frozenset(_X_PART.values()) | {"x_AllocatedGpuHours", "x_UsedGpuHours"}

FOCUS_OUT: tuple[str, ...] = tuple(c.name for c in FOCUS_COLUMNS)
"""Every FOCUS 1.2 column, in the spec's (alphabetical) order; NULL where the allocation has no value."""

ALLOCATION_COLUMNS: tuple[str, ...] = (
    "day", "line", "team", "cost_center", "site", "lane", "request_id", "release_packet_id", "bypass", "currency",
    "allocated_gpu_hours", "used_gpu_hours", *(f"{p}_cost" for p in PARTS), "billed_cost", "effective_cost",
)
"""`--format csv`: the same rows in our own snake_case columns."""

EXACT_LINES = frozenset({"quarantined", "rounding", "billed_minus_effective", "price_book"})
"""Lines whose amounts are kept exact (not cut to 1e-6): they carry what makes the sums exact."""

LINES = ("request", "team", "bypass", "unallocated", "unused_commitment", "unreconciled", "price_book",
         "billed_minus_effective", "rounding", "quarantined")


class ExportError(Exception):
    """The day cannot be exported (not built, or its figures do not add up): the message says why
    and what to run."""


@dataclass
class FocusExport:
    """The rows (FOCUS column -> value: Decimal, aware datetime, str or None) and, per currency,
    what they must add up to (`expected`: billed, effective) and do (`totals`)."""

    day: str
    rows: list[dict[str, Any]]
    expected: dict[str, dict[str, Decimal]] = field(default_factory=dict)
    totals: dict[str, dict[str, Decimal]] = field(default_factory=dict)


def _q(x: Any) -> Decimal:
    return Decimal(x or 0).quantize(STEP)


def split(amount: Decimal, weights: list[Decimal]) -> list[Decimal]:
    """`amount` split by `weights` at 1e-6, the pieces adding up to it exactly (largest remainder;
    all-zero weights: equal shares)."""
    amount = _q(amount)
    n = len(weights)
    if n == 0:
        return []
    total = sum(weights, Decimal(0))
    if total == 0:
        weights, total = [Decimal(1)] * n, Decimal(n)
    units = amount / STEP
    raw = [units * w / total for w in weights]
    floors = [r.to_integral_value(rounding=ROUND_FLOOR) for r in raw]
    left = int(units - sum(floors, Decimal(0)))
    order = sorted(range(n), key=lambda i: (-(raw[i] - floors[i]), i))
    for i in order[:left]:
        floors[i] += 1
    return [(f * STEP).quantize(STEP) for f in floors]


def _rows(con: duckdb.DuckDBPyConnection, sql: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    cur = con.execute(sql, params)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def _tables(con: duckdb.DuckDBPyConnection) -> set[str]:
    return {r[0] for r in con.execute("select table_name from information_schema.tables").fetchall()}


def _request_parts(con: duckdb.DuckDBPyConnection, d: date, have: set[str]) -> dict[tuple, dict[str, dict]]:
    """Per chargeback key (team, cost_center, site, lane, currency): request id -> its measured
    money (allocated, cpu, storage) and GPU-hours on the day."""
    parts = ["""
        select team, cost_center, site, lane, currency, request_id, allocated_cost, cast(0 as decimal(18, 6)) as cpu,
               cast(0 as decimal(18, 6)) as storage, allocated_gpu_hours, used_gpu_hours
        from fct_gpu_cost_by_request where day = $day and currency is not null"""]
    for table, part in (("int_cpu_node_cost", "cpu"), ("int_volume_cost", "storage")):
        if table in have:
            cpu = "cost" if part == "cpu" else "0"
            storage = "cost" if part == "storage" else "0"
            parts.append(f"""
                select team, cost_center, site, lane, currency, request_id, 0, {cpu}, {storage}, 0.0, 0.0
                from {table} where day = $day and team is not null and request_id is not null""")
    out: dict[tuple, dict[str, dict]] = defaultdict(dict)
    for r in _rows(con, f"""
            select team, cost_center, site, lane, currency, request_id, sum(allocated_cost) as allocated,
                   sum(cpu) as cpu, sum(storage) as storage, sum(allocated_gpu_hours) as gpu_hours,
                   sum(used_gpu_hours) as used_gpu_hours
            from ({' union all '.join(parts)}) group by all order by request_id""", {"day": d}):
        key = (r["team"], r["cost_center"], r["site"], r["lane"], r["currency"])
        out[key][r["request_id"]] = r
    return out


def _line_kind(team: str, bypass: bool) -> str:
    if bypass:
        return "bypass"
    return {"(unallocated)": "unallocated", "(unused commitment)": "unused_commitment",
            "(unreconciled)": "unreconciled"}.get(team, "team")


def allocation_rows(con: duckdb.DuckDBPyConnection, day: str | date) -> tuple[list[dict[str, Any]], dict]:
    """The day's chargeback split per request (snake_case), and the reconciliation's figures per
    currency. Raises :class:`ExportError` when the day is not built."""
    d = date.fromisoformat(str(day))
    have = _tables(con)
    missing = [t for t in ("reconciliation", "chargeback", "fct_gpu_cost_by_request") if t not in have]
    recon = [] if missing else _rows(con, """
        select currency, billed_cost, effective_cost, price_book_cost,
               coalesce(rounding_effective_cost, 0) as rounding, coalesce(quarantined_billed_cost, 0) as q_billed,
               coalesce(quarantined_effective_cost, 0) as q_effective
        from reconciliation where day = $day order by currency""", {"day": d})
    if not recon:
        why = f"no {', '.join(missing)} table" if missing else "no reconciliation row for it"
        raise ExportError(f"{d} is not built ({why}): run `gpu-platform cost build --day {d}` first")
    cb = _rows(con, f"""
        select team, cost_center, site, lane, currency, bypass, allocated_gpu_hours, used_gpu_hours,
               {', '.join(f'{p}_cost' for p in PARTS)}, total_cost, idle_policy, shared_policy
        from chargeback where day = $day order by currency, team, cost_center, site, lane""", {"day": d})
    by_key = _request_parts(con, d, have)
    releases = {}
    if "stg_requests" in have:
        releases = dict(con.execute("select request_id, release_packet_id from stg_requests "
                                    "where release_packet_id is not null").fetchall())
    rows: list[dict[str, Any]] = []
    for c in cb:
        base = {"day": d, "team": c["team"], "cost_center": c["cost_center"], "site": c["site"], "lane": c["lane"],
                "currency": c["currency"], "bypass": bool(c["bypass"]), "idle_policy": c["idle_policy"],
                "shared_policy": c["shared_policy"]}
        key = (c["team"], c["cost_center"], c["site"], c["lane"], c["currency"])
        reqs = list(by_key.get(key, {}).values()) if not c["bypass"] and not c["team"].startswith("(") else []
        if not reqs:
            rows.append({**base, "line": _line_kind(c["team"], base["bypass"]), "request_id": None,
                         "release_packet_id": None, "allocated_gpu_hours": c["allocated_gpu_hours"] or 0.0,
                         "used_gpu_hours": c["used_gpu_hours"] or 0.0,
                         **{f"{p}_cost": _q(c[f"{p}_cost"]) for p in PARTS}})
            continue
        # measured parts per request; the distributed parts by the request's measured money (as the
        # chargeback row's own share came by it), equal shares when none has any
        measured = {p: [_q(r[p]) for r in reqs] for p in ("allocated", "cpu", "storage")}
        weights = [a + cp + s for a, cp, s in zip(*measured.values(), strict=True)]
        pieces: dict[str, list[Decimal]] = {}
        for p in PARTS:
            row_total = _q(c[f"{p}_cost"])
            if p in measured and sum(measured[p], Decimal(0)) == row_total:
                pieces[p] = measured[p]
            else:  # a part not measured per request, or measured sums that differ from the row's
                pieces[p] = split(row_total, measured[p] if p in measured else weights)
        for i, r in enumerate(reqs):
            rows.append({**base, "line": "request", "request_id": r["request_id"],
                         "release_packet_id": releases.get(r["request_id"]),
                         "allocated_gpu_hours": float(r["gpu_hours"] or 0), "used_gpu_hours": float(r["used_gpu_hours"] or 0),
                         **{f"{p}_cost": pieces[p][i] for p in PARTS}})
    for r in rows:
        r["effective_cost"] = sum((r[f"{p}_cost"] for p in PARTS), Decimal(0))
        r["billed_cost"] = r["effective_cost"]
    figures = {x["currency"]: x for x in recon}
    for cur, x in figures.items():
        base = {"day": d, "team": None, "cost_center": None, "site": None, "lane": None, "currency": cur,
                "bypass": False, "request_id": None, "release_packet_id": None, "allocated_gpu_hours": 0.0,
                "used_gpu_hours": 0.0, "idle_policy": None, "shared_policy": None,
                **{f"{p}_cost": Decimal(0) for p in PARTS}}
        pb = Decimal(x["price_book_cost"] or 0)
        billed_exact, effective_exact = Decimal(x["billed_cost"] or 0), Decimal(x["effective_cost"] or 0)
        lines = [
            ("price_book", -pb, -pb),
            ("billed_minus_effective", billed_exact - effective_exact, Decimal(0)),
            ("quarantined", Decimal(x["q_billed"]), Decimal(x["q_effective"])),
        ]
        # rounding: what the rows priced at 1e-6 leave of the exact sums (the reconciliation's
        # rounding_effective_cost, and below half a cent besides); more is no rounding: an error
        mine = [r for r in rows if r["currency"] == cur]
        got_billed = sum((r["billed_cost"] for r in mine), Decimal(0)) + sum((b for _, b, _ in lines), Decimal(0))
        got_effective = sum((r["effective_cost"] for r in mine), Decimal(0)) + sum((e for _, _, e in lines), Decimal(0))
        rest_billed = billed_exact + Decimal(x["q_billed"]) - got_billed
        rest_effective = effective_exact + Decimal(x["q_effective"]) - got_effective
        known = Decimal(x["rounding"])
        if abs(rest_effective - known) > HALF_CENT or abs(rest_billed - rest_effective) > HALF_CENT:
            x["problem"] = (f"{cur}: the allocation leaves {rest_billed} billed and {rest_effective} effective "
                            f"unexplained, more than the rounding ({known}) and half a cent: rebuild the day "
                            f"(`gpu-platform cost build --day {d}`); if it stays, the day's reconciliation "
                            "difference says where")
        lines.append(("rounding", rest_billed, rest_effective))
        for line, billed, effective in lines:
            if billed or effective:
                rows.append({**base, "line": line, "billed_cost": billed, "effective_cost": effective})
    return rows, figures


def _ts(d: date) -> datetime:
    return datetime(d.year, d.month, d.day, tzinfo=UTC)


_DESCRIPTIONS = {
    "request": "GPU platform chargeback of request {request_id} (team {team}, lane {lane}): direct, CPU and "
               "storage cost by use plus its share of idle, shared, tax and credit",
    "team": "GPU platform chargeback of team {team} (lane {lane}) without a request: CPU and storage by use "
            "plus shares",
    "bypass": "GPU time of team {team}'s pods on no admitted request (bypass), charged to the team",
    "unallocated": "idle, shared, tax or credit the distribution policies left with no team",
    "unused_commitment": "the unused part of a commitment, charged to no team",
    "unreconciled": "exception money charged to no team (see the day's reconciliation exceptions)",
    "price_book": "nodes priced from the price book (no bill) are charged to teams but not invoiced",
    "billed_minus_effective": "BilledCost minus EffectiveCost of the day's bill (commitment fees billed up "
                              "front against the amortized cost of the usage they cover)",
    "rounding": "money below the 1e-6 each priced piece of the bill is rounded to",
    "quarantined": "money of the day's quarantined FOCUS rows, in no allocation",
}


def to_focus(r: dict[str, Any]) -> dict[str, Any]:
    """One allocation row as a FOCUS 1.2 row (every FOCUS column, then the `x_` columns)."""
    d: date = r["day"]
    month = date(d.year, d.month, 1)
    next_month = date(d.year + (d.month == 12), d.month % 12 + 1, 1)
    line = r["line"]
    usage = line in ("request", "team", "bypass", "unallocated", "unused_commitment", "unreconciled")
    gpu_hours = Decimal(str(r["allocated_gpu_hours"] or 0)).quantize(STEP)
    account = r["cost_center"] or f"({line.replace('_', ' ')})"
    tags = {k: v for k, v in (("team", r["team"]), ("cost_center", r["cost_center"]), ("lane", r["lane"]),
                              ("request", r["request_id"]), ("release", r["release_packet_id"])) if v is not None}
    out: dict[str, Any] = dict.fromkeys(FOCUS_OUT)
    out.update({
        "BilledCost": _q(r["billed_cost"]) if line not in EXACT_LINES else Decimal(r["billed_cost"]),
        "EffectiveCost": _q(r["effective_cost"]) if line not in EXACT_LINES else Decimal(r["effective_cost"]),
        "BillingAccountId": account,
        "BillingAccountName": r["team"] or account,
        "BillingAccountType": "Cost Center",
        "BillingCurrency": r["currency"],
        "BillingPeriodStart": _ts(month),
        "BillingPeriodEnd": _ts(next_month),
        "ChargeCategory": "Usage" if usage else "Adjustment",
        "ChargeClass": None,
        "ChargeDescription": _DESCRIPTIONS[line].format(**{k: r.get(k) for k in ("request_id", "team", "lane")}),
        "ChargeFrequency": "Usage-Based" if usage else "One-Time",
        "ChargePeriodStart": _ts(d),
        "ChargePeriodEnd": _ts(d + timedelta(days=1)),
        "InvoiceIssuerName": PROVIDER,
        "ProviderName": PROVIDER,
        "PublisherName": PROVIDER,
        "PricingQuantity": gpu_hours if gpu_hours else None,
        "PricingUnit": "GPU-Hours" if gpu_hours else None,
        "ConsumedQuantity": gpu_hours if gpu_hours else None,
        "ConsumedUnit": "GPU-Hours" if gpu_hours else None,
        "ResourceId": r["request_id"],
        "ResourceName": r["request_id"],
        "ResourceType": "GPU request" if r["request_id"] else None,
        "ServiceCategory": "Compute" if usage else "Other",
        "ServiceName": "GPU platform",
        "ServiceSubcategory": "Containers" if usage else "Other (Other)",
        "SubAccountId": r["team"],
        "SubAccountName": r["team"],
        "SubAccountType": "Team" if r["team"] else None,
        "Tags": json.dumps(tags, sort_keys=True) if tags else None,
    })
    # ListCost and ContractedCost: the platform's transfer price is what it charges (no list discount)
    out["ListCost"] = out["ContractedCost"] = out["BilledCost"]
    out.update({
        "x_AllocationLine": line, "x_Team": r["team"], "x_CostCenter": r["cost_center"], "x_Site": r["site"],
        "x_Lane": r["lane"], "x_RequestId": r["request_id"], "x_ReleasePacketId": r["release_packet_id"],
        "x_Bypass": "true" if r["bypass"] else "false",
        "x_AllocatedGpuHours": gpu_hours,
        "x_UsedGpuHours": Decimal(str(r["used_gpu_hours"] or 0)).quantize(STEP),
        **{_X_PART[p]: _q(r[f"{p}_cost"]) for p in PARTS},
        "x_IdlePolicy": r["idle_policy"], "x_SharedPolicy": r["shared_policy"],
    })
    return out


def validate_focus(rows: list[dict[str, Any]]) -> list[str]:
    """Every way `rows` break the FOCUS 1.2 column rules, one line each naming the row (1-based)
    and column: a Mandatory column missing, NULL in a column that allows none, a value of the wrong
    type (Decimal, Date/Time as an aware UTC datetime, String, JSON object text), a value outside
    the spec's allowed values (ChargeCategory, ChargeClass, ChargeFrequency, ServiceCategory,
    BillingCurrency ISO 4217), a charge period that ends before it starts, a quantity without its
    unit, a custom column without the `x_` prefix, or allocation parts that do not add up to
    EffectiveCost. Empty: valid."""
    problems: list[str] = []
    known = {c.name: c for c in FOCUS_COLUMNS}
    for n, row in enumerate(rows, start=1):
        for c in FOCUS_COLUMNS:
            if c.name not in row:
                if c.feature_level == "Mandatory":
                    problems.append(f"row {n}: column {c.name}: Mandatory column missing")
                continue
            v = row[c.name]
            if v is None:
                if not c.allows_nulls and c.feature_level in ("Mandatory", "Recommended"):
                    problems.append(f"row {n}: column {c.name}: NULL in a column that allows none")
                continue
            if c.data_type == "Decimal" and not (isinstance(v, Decimal) and v.is_finite()):
                problems.append(f"row {n}: column {c.name}: {v!r} is not a finite decimal")
            elif c.data_type == "Date/Time" and not (
                    isinstance(v, datetime) and v.tzinfo is not None and v.utcoffset() == timedelta(0)):
                problems.append(f"row {n}: column {c.name}: {v!r} is not a UTC date/time")
            elif c.data_type == "String" and not isinstance(v, str):
                problems.append(f"row {n}: column {c.name}: {v!r} is not a string")
            elif c.data_type == "JSON":
                try:
                    ok = isinstance(v, str) and isinstance(json.loads(v), dict)
                except ValueError:
                    ok = False
                if not ok:
                    problems.append(f"row {n}: column {c.name}: {v!r} is not a JSON object")
        for col, allowed in (("ChargeCategory", CHARGE_CATEGORIES), ("ChargeClass", CHARGE_CLASSES),
                             ("ChargeFrequency", CHARGE_FREQUENCIES), ("ServiceCategory", SERVICE_CATEGORIES),
                             ("BillingCurrency", ISO_4217_CODES)):
            v = row.get(col)
            if v is not None and v not in allowed:
                problems.append(f"row {n}: column {col}: {v!r} is not an allowed value")
        for start, end in (("ChargePeriodStart", "ChargePeriodEnd"), ("BillingPeriodStart", "BillingPeriodEnd")):
            s, e = row.get(start), row.get(end)
            if isinstance(s, datetime) and isinstance(e, datetime) and e <= s:
                problems.append(f"row {n}: column {end}: {e.isoformat()} is not after {start} {s.isoformat()}")
        for qty, unit in (("PricingQuantity", "PricingUnit"), ("ConsumedQuantity", "ConsumedUnit")):
            if row.get(qty) is not None and row.get(unit) is None:
                problems.append(f"row {n}: column {unit}: NULL while {qty} is set")
        for col in row:
            if col not in known and not col.startswith("x_"):
                problems.append(f"row {n}: column {col}: a custom column must start with x_")
        if row.get("x_AllocationLine") in ("request", "team", "bypass", "unallocated", "unused_commitment",
                                           "unreconciled"):
            parts = sum((row.get(x) or Decimal(0) for x in _X_PART.values()), Decimal(0))
            if isinstance(row.get("EffectiveCost"), Decimal) and parts != row["EffectiveCost"]:
                problems.append(f"row {n}: column EffectiveCost: {row['EffectiveCost']} is not the sum of its "
                                f"x_ parts {parts}")
    return problems


def focus_export(con: duckdb.DuckDBPyConnection, day: str | date) -> FocusExport:
    """The day's allocation as FOCUS 1.2 rows, checked: valid (:func:`validate_focus`) and adding
    up, per currency, to the day's billed and effective cost plus its quarantined money, to the
    1e-9. Raises :class:`ExportError` naming every problem otherwise."""
    rows, figures = allocation_rows(con, day)
    focus = [to_focus(r) for r in rows]
    export = FocusExport(day=str(date.fromisoformat(str(day))), rows=focus)
    for cur, x in figures.items():
        export.expected[cur] = {"billed": Decimal(x["billed_cost"] or 0) + Decimal(x["q_billed"]),
                                "effective": Decimal(x["effective_cost"] or 0) + Decimal(x["q_effective"])}
    for r in focus:
        t = export.totals.setdefault(r["BillingCurrency"], {"billed": Decimal(0), "effective": Decimal(0)})
        t["billed"] += r["BilledCost"]
        t["effective"] += r["EffectiveCost"]
    problems = validate_focus(focus)
    problems += [x["problem"] for x in figures.values() if x.get("problem")]
    for cur in sorted(set(export.expected) | set(export.totals)):
        want = export.expected.get(cur, {"billed": Decimal(0), "effective": Decimal(0)})
        got = export.totals.get(cur, {"billed": Decimal(0), "effective": Decimal(0)})
        for k in ("billed", "effective"):
            if abs(want[k] - got[k]) > Decimal("1e-9"):
                problems.append(f"{cur}: the rows' {k} cost {got[k]} is not the day's {want[k]} (difference "
                                f"{got[k] - want[k]}): rebuild the day (`gpu-platform cost build --day {export.day}`)")
    if problems:
        raise ExportError(f"the FOCUS export of {export.day} fails its checks:\n" + "\n".join(problems))
    return export


def _text(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, datetime):
        return v.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if isinstance(v, Decimal):
        return format(v.normalize() if v == v.to_integral_value() else v, "f")
    return str(v)


def write_export(export: FocusExport, fmt: str, out: Any) -> None:
    """Write `export` to the binary stream `out`: `focus` (FOCUS 1.2 as CSV: every FOCUS column, then
    the x_ columns; date/times as `YYYY-MM-DDTHH:MM:SSZ`, an empty cell is NULL), `parquet` (the
    same columns, typed: DECIMAL(38, 15), UTC timestamps) or `csv` (the allocation in our own
    snake_case columns, ALLOCATION_COLUMNS)."""
    columns = [*FOCUS_OUT, *X_COLUMNS]
    if fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        types = {c.name: (pa.decimal128(38, 15) if c.data_type == "Decimal" else
                          pa.timestamp("us", tz="UTC") if c.data_type == "Date/Time" else pa.string())
                 for c in FOCUS_COLUMNS}
        types.update({x: pa.decimal128(38, 15) if x in X_DECIMALS else pa.string() for x in X_COLUMNS})
        table = pa.table({c: pa.array([r.get(c) for r in export.rows], type=types[c]) for c in columns})
        pq.write_table(table, out)
        return
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    if fmt == "focus":
        writer.writerow(columns)
        for r in export.rows:
            writer.writerow([_text(r.get(c)) for c in columns])
    elif fmt == "csv":
        writer.writerow(ALLOCATION_COLUMNS)
        for r in export.rows:
            writer.writerow([_text(v) for v in _allocation(r, export.day)])
    else:
        raise ValueError(f"unknown export format {fmt!r}; expected focus, csv or parquet")
    out.write(text.getvalue().encode("utf-8"))


def _allocation(r: dict[str, Any], day: str) -> list[Any]:
    return [day, r["x_AllocationLine"], r["x_Team"], r["x_CostCenter"], r["x_Site"], r["x_Lane"], r["x_RequestId"],
            r["x_ReleasePacketId"], r["x_Bypass"], r["BillingCurrency"], r["x_AllocatedGpuHours"],
            r["x_UsedGpuHours"], *(r[_X_PART[p]] for p in PARTS), r["BilledCost"], r["EffectiveCost"]]
