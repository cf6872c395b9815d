"""`gpu-platform report --out DIR [--days N]`: one HTML page and the same plots as PNG files.

Plots are drawn with matplotlib's object API on the Agg canvas (no display, no global pyplot
state). Sections whose data does not exist say so instead of disappearing: no warehouse (or no
priced day in the period) means no cost, unit-cost or utilization plot; no `capacity_signals`
table means no signal list.

Output encoding: the page is rendered by Jinja2 from `index.html.j2` (beside this module) with
autoescaping on, so a team, lane, currency or request id from the ledger or the warehouse is
always text, never markup; no HTML is built from strings here. Plot file names come from
:func:`safe_name` (`[A-Za-z0-9_-]` plus a hash of the value when it had other characters),
never from a raw value, so every file lands in the output directory. Text drawn by matplotlib
has its `$` escaped (no mathtext from data).
"""

from __future__ import annotations

import hashlib
import io
import re
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from typing import Any

import duckdb
import jinja2
from matplotlib import dates as mdates
from matplotlib.figure import Figure

from gpu_platform.finops.warehouse import WarehouseBusy
from gpu_platform.finops.warehouse import connect as warehouse_connect
from gpu_platform.observe.report.data import (
    WaitRow,
    cost_by_team,
    fired_signals,
    partial_days,
    queue_waits,
    unit_costs,
    unpriced_request_count,
    utilization_by_pool,
)
from gpu_platform.policy import Policy
from gpu_platform.requests.ledger import Ledger
from gpu_platform.safeload.files import OutputDir, write_file


@dataclass(slots=True)
class Report:
    """What was written: the page, the PNGs, and a note per section that has no data."""

    html: Path
    pngs: list[Path] = field(default_factory=list)
    notes: dict[str, str] = field(default_factory=dict)


_TEMPLATE = "index.html.j2"
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def safe_name(value: str, limit: int = 40) -> str:
    """A file-name part for `value`: its characters outside `[A-Za-z0-9_-]` replaced by `_`, cut
    to `limit`; when that changed anything, `-` and 10 hex of the value's SHA-256 follow, so two
    values never share a file. `USD` stays `USD`; `USD/../x` becomes `USD___x-<hash>`."""
    slug = _UNSAFE.sub("_", value)[:limit]
    if slug == value and slug:
        return slug
    return f"{slug}-{hashlib.sha256(value.encode('utf-8', 'surrogatepass')).hexdigest()[:10]}"


def _plain(text: object) -> str:
    """Text for matplotlib: `$` escaped (no mathtext from data), `_` first kept visible in legends."""
    out = str(text).replace("$", r"\$")
    return "\u200b" + out if out.startswith("_") else out


def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(__file__).parent),
        autoescape=jinja2.select_autoescape(default=True, default_for_string=True),
        undefined=jinja2.StrictUndefined,
    )


def _save(fig: Figure, path: Path) -> Path:
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, dpi=110, format="png")
    return write_file(path, buf.getvalue())


def _midnight(day: date) -> datetime:
    return datetime.combine(day, time.min)


def _days_axis(ax, first: date, last: date) -> None:
    """The report's period on the x axis, one tick label per day at most (not matplotlib's years
    around a single point)."""
    # datetimes: a date less 12 hours is the same date
    ax.set_xlim(_midnight(first) - timedelta(hours=12), _midnight(last) + timedelta(hours=12))
    ax.xaxis.set_major_locator(mdates.DayLocator(interval=max(1, (last - first).days // 10)))
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%Y-%m-%d"))


def _plot_waits(rows: list[WaitRow], first: date, last: date, path: Path) -> Path:
    fig = Figure(figsize=(9, 4.5))
    ax = fig.add_subplot()
    by_lane: dict[str, list[WaitRow]] = defaultdict(list)
    for r in rows:
        by_lane[r.lane].append(r)
    for lane, rs in sorted(by_lane.items()):
        ax.plot([r.day for r in rs], [r.p95_s / 60 for r in rs], marker="o", label=_plain(lane))
    _days_axis(ax, first, last)
    ax.set_title("Queue wait p95 by lane (submission or requeue to admission)")
    ax.set_ylabel("minutes")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    fig.autofmt_xdate()
    return _save(fig, path)


def _plot_utilization(
    rows: list[dict[str, Any]], first: date, last: date, path: Path, partial: dict[date, str] | None = None
) -> Path:
    """Complete days as lines; a partial day (`partial_days`) is a shaded band labelled partial,
    never a point (today's few hours, or a day without its DCGM samples, are not 0 %)."""
    partial = partial or {}
    fig = Figure(figsize=(9, 4))
    ax = fig.add_subplot()
    by_pool: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        if r["day"] not in partial:
            by_pool[r["node_pool"]].append(r)
    for pool, rs in sorted(by_pool.items()):
        ax.plot([r["day"] for r in rs], [100 * r["utilization"] for r in rs], marker="o", label=_plain(pool))
    for day, why in partial.items():
        if first <= day <= last:
            ax.axvspan(_midnight(day) - timedelta(hours=12), _midnight(day) + timedelta(hours=12), color="0.85", zorder=0)
            ax.text(_midnight(day), 50, "partial\n(" + ("in progress" if why == "in progress" else "incomplete") + ")",
                    ha="center", va="center", fontsize=8, color="0.3")
    _days_axis(ax, first, last)
    ax.set_title("GPU utilization by node pool (busy / allocated GPU-hours)")
    ax.set_ylabel("%")
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.3)
    if by_pool:
        ax.legend(fontsize=8)
    fig.autofmt_xdate()
    return _save(fig, path)


def _plot_cost(rows: list[dict[str, Any]], currency: str, path: Path, partial: dict[date, str] | None = None) -> Path:
    fig = Figure(figsize=(9, 4.5))
    ax = fig.add_subplot()
    days = sorted({r["day"] for r in rows})
    teams = sorted({r["team"] for r in rows})
    value = {(r["day"], r["team"]): float(r["total_cost"] or 0) for r in rows}
    labels = [d.isoformat() + (" (partial)" if d in (partial or {}) else "") for d in days]
    bottom = [0.0] * len(days)
    for team in teams:
        heights = [value.get((d, team), 0.0) for d in days]
        ax.bar(labels, heights, bottom=bottom, label=_plain(team))
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    ax.set_title(f"Cost by team per day ({_plain(currency)}, chargeback incl. idle and shared)")
    ax.set_ylabel(_plain(currency))
    ax.legend(fontsize=7)
    ax.tick_params(axis="x", labelrotation=30, labelsize=7)
    return _save(fig, path)


def _plot_unit_costs(rows: list[dict[str, Any]], currency: str, path: Path) -> Path:
    fig = Figure(figsize=(9, 4))
    ax = fig.add_subplot()
    rs = [r for r in rows if r["cost_per_unit"] is not None]
    ax.barh([_plain(r["unit"]) for r in rs], [float(r["cost_per_unit"]) for r in rs])
    for i, r in enumerate(rs):
        ax.text(float(r["cost_per_unit"]), i, f" {float(r['cost_per_unit']):,.2f}", va="center", fontsize=8)
    ax.set_title(f"Unit costs ({_plain(currency)} per unit, lifetime)")
    ax.set_xlabel(_plain(currency))
    return _save(fig, path)


Block = dict[str, Any]
"""One piece of the page, rendered by the template: `{"kind": "h2" | "p" | "em", "text": ...}`,
`{"kind": "img", "src": ..., "alt": ...}` or `{"kind": "table", "columns": [...], "rows": [[...]]}`."""


def _table(rows: list[dict[str, Any]], columns: list[str]) -> Block:
    cells = [
        [f"{v:,.2f}" if isinstance(v, float) else ("" if v is None else str(v)) for v in (r.get(c) for c in columns)]
        for r in rows
    ]
    return {"kind": "table", "columns": [str(c) for c in columns], "rows": cells}


def _h2(text: str) -> Block:
    return {"kind": "h2", "text": text}


def _p(text: str) -> Block:
    return {"kind": "p", "text": text}


def _em(text: str) -> Block:
    return {"kind": "em", "text": text}


def _img(src: str, alt: str) -> Block:
    return {"kind": "img", "src": src, "alt": alt}


def build_report(
    ledger: Ledger,
    policy: Policy,
    out_dir: str | Path,
    days: int = 7,
    warehouse: str | Path | None = None,
    now: datetime | None = None,
) -> Report:
    """Write `index.html` and the PNGs into out_dir for the last `days` calendar days (UTC), today
    the newest: it is in progress, so it is marked partial, as is the newest earlier day whose
    utilization data is incomplete (`partial_days`); the header counts the days shown."""
    now = now or datetime.now(UTC)
    out = Path(out_dir)
    OutputDir(out).close()  # created or checked before any query runs: a bad --out fails first
    last = now.astimezone(UTC).date()
    first = last - timedelta(days=days - 1)
    since = datetime.combine(first, time.min, UTC)
    report = Report(out / "index.html")
    partial = partial_days([], now)
    blocks: list[Block] = []

    waits = queue_waits(ledger, since)
    blocks.append(_h2("Queue wait by lane"))
    if waits:
        report.pngs.append(_plot_waits(waits, first, last, out / "queue_wait_by_lane.png"))
        blocks.append(_img("queue_wait_by_lane.png", "queue wait p95 by lane"))
        wait_rows = [
            {"day": w.day, "lane": w.lane, "admissions": w.admissions,
             "p50 (min)": w.p50_s / 60, "p95 (min)": w.p95_s / 60, "max (min)": w.max_s / 60}
            for w in waits
        ]
        blocks.append(_table(wait_rows, ["day", "lane", "admissions", "p50 (min)", "p95 (min)", "max (min)"]))
    else:
        report.notes["queue_wait"] = f"no admissions in the ledger since {since:%Y-%m-%d %H:%M} UTC"
        blocks.append(_p(report.notes["queue_wait"]))

    con = None
    if warehouse is not None and Path(warehouse).exists():
        try:
            con = warehouse_connect(warehouse)
        except (WarehouseBusy, duckdb.Error) as exc:
            report.notes["warehouse"] = f"cannot open {warehouse} read-only: {exc}"
    else:
        report.notes["warehouse"] = f"no warehouse at {warehouse}" if warehouse else "no warehouse given"
    if con is None:
        blocks += [_h2("Utilization, cost by team, unit costs"), _p(f"Not available: {report.notes['warehouse']}")]
    else:
        try:
            warehouse_blocks, partial = _warehouse_sections(con, policy, first, last, out, report, now)
            blocks.extend(warehouse_blocks)
        finally:
            con.close()

    shown = {d: why for d, why in partial.items() if first <= d <= last}
    page = _environment().get_template(_TEMPLATE).render(
        days=(last - first).days + 1, first=first, last=last, written=f"{now:%Y-%m-%d %H:%M}",
        currency=policy.currency, blocks=blocks, partial=[(d.isoformat(), why) for d, why in shown.items()],
    )
    write_file(report.html, page)
    return report


def _priced(rows: list[dict[str, Any]], what: str, report: Report) -> list[dict[str, Any]]:
    """Rows with a currency (a row without one was never priced: no bill line covers it, such
    as a pod on the local machine); how many were left out is a note on the page."""
    priced = [{**r, "team": r.get("team") or "(none)"} if "team" in r else r for r in rows if r.get("currency")]
    if len(priced) < len(rows):
        report.notes[f"{what}_unpriced"] = (
            f"{len(rows) - len(priced)} {what} row(s) without a currency (not priced by any bill line) are not shown"
        )
    return priced


def _warehouse_sections(
    con: duckdb.DuckDBPyConnection, policy: Policy, first: date, last: date, out: Path, report: Report,
    now: datetime,
) -> tuple[list[Block], dict[date, str]]:
    """The warehouse's sections, and the days whose figures are partial (`partial_days`)."""
    blocks: list[Block] = [_h2("Utilization by pool")]
    util = utilization_by_pool(con, policy, first, last)
    partial = partial_days(util, now)
    if util:
        report.pngs.append(_plot_utilization(util, first, last, out / "utilization_by_pool.png", partial))
        blocks.append(_img("utilization_by_pool.png", "utilization by pool"))
        for day, why in partial.items():
            rows = [r for r in util if r["day"] == day]
            if rows:
                busy, allocated = sum(r["used_gpu_hours"] for r in rows), sum(r["allocated_gpu_hours"] for r in rows)
                blocks.append(_em(f"{day} is partial ({why}): not plotted; so far {busy:,.1f} of "
                                  f"{allocated:,.1f} allocated GPU-hours busy"))
    else:
        report.notes["utilization"] = "no priced GPU-hours (fct_gpu_cost_by_request) in the period"
        blocks.append(_p(report.notes["utilization"]))
    cost = _priced(cost_by_team(con, first, last), "chargeback", report)
    if cost:
        for cur in sorted({r["currency"] for r in cost}):
            rows = [r for r in cost if r["currency"] == cur]
            name = f"cost_by_team_{safe_name(cur)}.png"
            report.pngs.append(_plot_cost(rows, cur, out / name, partial))
            blocks += [_h2(f"Cost by team ({cur})"), _img(name, "cost by team")]
            totals: dict[str, float] = defaultdict(float)
            for r in rows:
                totals[r["team"]] += float(r["total_cost"] or 0)
            blocks.append(_table([{"team": t, "total": v} for t, v in sorted(totals.items(), key=lambda x: -x[1])],
                                 ["team", "total"]))
    else:
        report.notes["cost"] = "no chargeback rows (platform_cost_per_tenant) in the period"
        blocks += [_h2("Cost by team"), _p(report.notes["cost"])]
    if "chargeback_unpriced" in report.notes:
        blocks.append(_em(report.notes["chargeback_unpriced"]))
    units = _priced(unit_costs(con), "unit-cost", report)
    if units:
        for cur in sorted({r["currency"] for r in units}):
            rows = [r for r in units if r["currency"] == cur]
            name = f"unit_costs_{safe_name(cur)}.png"
            report.pngs.append(_plot_unit_costs(rows, cur, out / name))
            blocks += [_h2(f"Unit costs ({cur})"), _img(name, "unit costs")]
            blocks.append(_table([{**r, "cost_per_unit": None if r["cost_per_unit"] is None else float(r["cost_per_unit"]),
                                   "cost": float(r["cost"] or 0)} for r in rows],
                                 ["unit", "units", "cost", "cost_per_unit"]))
    else:
        report.notes["unit_costs"] = "no unit-cost marts in the warehouse"
        blocks += [_h2("Unit costs"), _p(report.notes["unit_costs"])]
    if "unit-cost_unpriced" in report.notes:
        blocks.append(_em(report.notes["unit-cost_unpriced"]))
    unpriced, unpriced_hours = unpriced_request_count(con)
    if unpriced:
        report.notes["unpriced_requests"] = (
            f"{unpriced} request(s) with {unpriced_hours:.1f} GPU-hours no price covers are in no unit cost "
            "(listed in unpriced_requests, with the reason)"
        )
        blocks.append(_em(report.notes["unpriced_requests"]))
    signals = fired_signals(con, first, last)
    blocks.append(_h2("Capacity signals that fired"))
    if signals is None:
        report.notes["signals"] = "the warehouse has no capacity_signals table"
        blocks.append(_p(report.notes["signals"]))
    else:
        blocks.append(_table(signals, list(signals[0]) if signals else []))
    return blocks, partial
