"""`gpu-platform report`: the newest day, still in progress (or without its DCGM samples), is marked
partial instead of plotted as 0 % utilization, and the header counts the days shown."""

from __future__ import annotations

from datetime import UTC, date, datetime

import duckdb
import pytest

from gpu_platform.observe.report import build as report_build
from gpu_platform.observe.report.data import IN_PROGRESS, NO_BUSY_TIME, partial_days
from tests.observability.test_report import NOW, ledger, warehouse  # noqa: F401

TODAY = NOW.date()  # 2026-11-30; the scenario's priced day is 2026-11-28


def _util(day: date, allocated: float, used: float) -> dict:
    return {"day": day, "node_pool": "h100", "allocated_gpu_hours": allocated, "used_gpu_hours": used,
            "utilization": used / allocated if allocated else 0.0}


def test_today_is_in_progress_and_a_newest_day_without_busy_time_is_incomplete():
    assert partial_days([], NOW) == {TODAY: IN_PROGRESS}
    done = [_util(date(2026, 11, 28), 10, 4), _util(TODAY, 5, 0)]
    assert partial_days(done, NOW) == {TODAY: IN_PROGRESS}
    # yesterday allocated GPUs but recorded no busy time at all: its DCGM feed is not in yet
    missing = [_util(date(2026, 11, 28), 10, 4), _util(date(2026, 11, 29), 10, 0)]
    assert partial_days(missing, NOW) == {date(2026, 11, 29): NO_BUSY_TIME, TODAY: IN_PROGRESS}
    # an older idle day is data, not a gap
    assert partial_days([_util(date(2026, 11, 27), 10, 0), _util(date(2026, 11, 28), 10, 4)], NOW) == {
        TODAY: IN_PROGRESS}


@pytest.fixture
def with_today(warehouse, tmp_path):  # noqa: F811
    """The scenario's warehouse plus today's first hours: GPUs allocated, no DCGM busy time yet."""
    copy = tmp_path / "wh.duckdb"
    copy.write_bytes(warehouse.read_bytes())
    con = duckdb.connect(str(copy))
    con.execute("insert into fct_gpu_cost_by_request (day, request_id, flavor_name, allocated_gpu_hours, used_gpu_hours) "
                "values (?, 'req-today', 'h100-ondemand', 6.0, 0.0)", [TODAY])
    con.close()
    return copy


def test_the_newest_day_is_marked_partial_not_plotted_as_zero(ledger, policy, with_today, tmp_path, monkeypatch):  # noqa: F811
    figures = {}
    save = report_build._save

    def keep(fig, path):
        figures[path.name] = fig
        return save(fig, path)

    monkeypatch.setattr(report_build, "_save", keep)
    rep = report_build.build_report(ledger, policy, tmp_path / "r", days=7, warehouse=with_today, now=NOW)
    ax = figures["utilization_by_pool.png"].axes[0]
    plotted = [(x, y) for line in ax.get_lines() for x, y in zip(line.get_xdata(), line.get_ydata(), strict=True)]
    assert plotted, "the complete day is plotted"
    assert all(_as_date(x) != TODAY for x, _ in plotted), "today is not a point on the utilization lines"
    assert all(y > 0 for _, y in plotted)
    assert any("partial" in t.get_text() for t in ax.texts)
    page = rep.html.read_text()
    assert "7 day(s) shown: 2026-11-24 to 2026-11-30 (UTC)" in page
    assert "Partial (figures not final, not plotted as complete days): 2026-11-30 (in progress)" in page
    assert "2026-11-30 is partial (in progress): not plotted; so far 0.0 of 6.0 allocated GPU-hours busy" in page


def test_the_header_counts_the_days_it_shows(ledger, policy, tmp_path):  # noqa: F811
    page = report_build.build_report(ledger, policy, tmp_path / "r", days=3, now=NOW).html.read_text()
    assert "3 day(s) shown: 2026-11-28 to 2026-11-30 (UTC)" in page
    assert "2026-11-30 (in progress)" in page


def _as_date(x) -> date:
    from matplotlib import dates as mdates

    if isinstance(x, datetime):
        return x.astimezone(UTC).date() if x.tzinfo else x.date()
    if isinstance(x, date):
        return x
    return mdates.num2date(x).date()
