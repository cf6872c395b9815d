"""Month-end forecast and budget burn on a seeded month (real DuckDB, the project's models).

November 2026 (30 days), chargeback seeded for days 1..10, the forecast made as of 2026-11-10
(10 days elapsed, 20 left):
- perception / candidate_train: 1,000 a day, 100 GPU-h a day; planning / candidate_train: 500 a
  day, 50 GPU-h; perception / (bypass): 50 a day, 10 GPU-h; (unallocated) 77 a day (no team's).
  candidate_train's unit rate: 15,000 / 1,500 GPU-h = 10.00; every lane's: 15,500 / 1,600 = 9.6875.
- pending: perception 8 GPUs x 10 h in candidate_train (80 GPU-h -> 800); planning 4 GPUs x 30
  days (capped at the 20 days left: 1,920 GPU-h -> 19,200); perception 2 GPUs x 5 h in
  research_best_effort, which spent nothing this month (every lane's rate: 96.875); one without
  expected_duration (counted, not priced); one submitted after the day (not counted); a finished one.
- an EUR row of a team (its own currency; no budget in EUR).
"""

from __future__ import annotations

import json
import math
from datetime import date, datetime, timedelta
from decimal import Decimal as D

import duckdb
import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from gpu_platform.cli import main
from gpu_platform.finops.sqlmodels import Project, default_project_path, load_ledger_snapshot
from gpu_platform.finops.sqlmodels.raw import load_scorecard_snapshot
from gpu_platform.observe.metrics.forecast import ForecastCollector

DAY = date(2026, 11, 10)
BUDGETS = ["lane|candidate_train|60000", "lane|research_best_effort|96.874", "lane|release_eval|0",
           "team|perception|32000", "team|planning|34200"]


def _request(rid, team, lane, gpus, state, submitted):
    return dict(request_id=rid, team=team, cost_center="CC-1", lane=lane, site="sf", workload="training_run",
                gpu_type="h100", gpu_count=gpus, state=state, attempts=0, submitted_at=submitted)


def _meta(rid, hours):
    return dict(request_id=rid, owner="lead@example.com", expected_duration_s=None if hours is None else hours * 3600.0)


@pytest.fixture(scope="module")
def wh(tmp_path_factory):
    path = tmp_path_factory.mktemp("forecast") / "warehouse.duckdb"
    con = duckdb.connect(str(path))
    con.execute("""create table chargeback (day date, team varchar, cost_center varchar, site varchar, lane varchar,
                   bypass boolean, currency varchar, allocated_gpu_hours double, total_cost decimal(18, 6))""")
    rows = []
    for i in range(1, 11):
        d = date(2026, 11, i)
        rows += [(d, "perception", "candidate_train", "USD", 100.0, D(1000)),
                 (d, "planning", "candidate_train", "USD", 50.0, D(500)),
                 (d, "perception", "(bypass)", "USD", 10.0, D(50)),
                 (d, "(unallocated)", "(unallocated)", "USD", 0.0, D(77)),
                 (d, "mapping", "map_semantic_batch", "EUR", 4.0, D(40))]
    rows.append((date(2026, 10, 31), "perception", "candidate_train", "USD", 100.0, D(99999)))  # last month
    con.executemany("insert into chargeback values (?, ?, 'CC', 'sf', ?, false, ?, ?, ?)", rows)
    now = datetime(2026, 11, 10, 9)
    reqs = [_request("p1", "perception", "candidate_train", 8, "waiting", now),
            _request("p2", "planning", "candidate_train", 4, "submitted", now),
            _request("p3", "perception", "research_best_effort", 2, "requeued", now),
            _request("p4", "perception", "candidate_train", 8, "waiting", now),
            _request("p5", "perception", "candidate_train", 8, "waiting", now + timedelta(days=2)),
            _request("f1", "perception", "candidate_train", 8, "finished", now)]
    load_ledger_snapshot(con, reqs, [])
    load_scorecard_snapshot(con, [], [_meta("p1", 10), _meta("p2", 24 * 30), _meta("p3", 5), _meta("p4", None),
                                      _meta("p5", 10), _meta("f1", 10)], [])
    project = Project.load(default_project_path())
    variables = {"budgets": BUDGETS}
    names = ["stg_requests", "stg_request_metadata", "cost_forecast", "budget_burn"]
    for n in names:
        project.build_model(con, n, day=DAY, variables=variables)
    failures = [(t.model, t.test_name) for t in project.run_tests(con, DAY, select=names[2:], variables=variables)
                if t.failures]
    con.close()
    assert failures == []
    return path


def q(path, sql, params=None):
    with duckdb.connect(str(path), read_only=True) as con:
        return con.execute(sql, params or {}).fetchall()


def test_forecast_is_month_to_date_plus_pending_queue_plus_run_rate(wh):
    rows = {(t, lane, c): rest for t, lane, c, *rest in q(wh, """
        select team, lane, currency, month_to_date_cost, run_rate_per_day, pending_requests, pending_without_duration,
               pending_gpu_hours, unit_rate, pending_cost, run_rate_cost, forecast_month_end_cost
        from cost_forecast where day = $d""", {"d": DAY})}
    assert rows[("perception", "candidate_train", "USD")] == [
        D(10000), D(1000), 2, 1, 80.0, pytest.approx(10.0), D(800), D(20000), D(30800)]
    assert rows[("planning", "candidate_train", "USD")] == [
        D(5000), D(500), 1, 0, 1920.0, pytest.approx(10.0), D(19200), D(10000), D(34200)]
    assert rows[("perception", "(bypass)", "USD")][-1] == D(1500)
    assert rows[("perception", "research_best_effort", "USD")] == [
        D(0), D(0), 1, 0, 10.0, pytest.approx(9.6875), D("96.875"), D(0), D("96.875")]
    assert rows[("mapping", "map_semantic_batch", "EUR")][-1] == D(400) + D(800)
    assert not any(t.startswith("(") for t, _, _ in rows)  # (unallocated) is no team's


def test_budget_burn_fires_exactly_when_the_forecast_is_over_the_budget(wh):
    burn = {(s, n): rest for s, n, *rest in q(wh, """
        select scope, subject, month_budget, forecast_month_end_cost, fired, status, days_left, projected_exceed_day
        from budget_burn where day = $d""", {"d": DAY})}
    # 65,000 against 60,000: 15,000 so far, 2,500 a day from here: passes on day 18 from now
    assert burn[("lane", "candidate_train")] == [D(60000), D(65000), True, "will_exceed", 18, date(2026, 11, 28)]
    # 96.875 against 96.874: over by a thousandth, on the last day
    assert burn[("lane", "research_best_effort")][2:] == [True, "will_exceed", 20, date(2026, 11, 30)]
    # forecast equal to the budget: not over
    assert burn[("team", "planning")][1:] == [D(34200), False, "within_budget", None, None]
    # 32,396.875 against 32,000: 10,500 so far, 1,094.84 a day: 19.6 days -> the 20th
    assert burn[("team", "perception")][1:] == [D("32396.875"), True, "will_exceed", 20, date(2026, 11, 30)]
    # nothing spent against 0: not over either
    assert burn[("lane", "release_eval")][2:4] == [False, "within_budget"]
    assert ("team", "mapping") not in burn  # no budget


def test_cost_report_and_metrics_show_the_same_forecast_per_team(wh, monkeypatch):
    out = CliRunner().invoke(main, ["cost", "report", "--day", DAY.isoformat(), "--warehouse", str(wh),
                                    "--format", "json"])
    assert out.exit_code == 0, out.output
    report = json.loads(out.output)
    fc = {(r["team"], r["lane"], r["currency"]): D(r["forecast_month_end_cost"]) for r in report["forecast"]}
    burn = {(r["scope"], r["subject"]): r for r in report["budget_burn"]}
    assert fc[("perception", "candidate_train", "USD")] == D(30800)
    assert burn[("lane", "candidate_train")]["projected_exceed_day"] == "2026-11-28"
    assert report["budget_burn"][0]["fired"] is True  # fired first
    text = CliRunner().invoke(main, ["cost", "report", "--day", DAY.isoformat(), "--warehouse", str(wh)],
                              env={"COLUMNS": "240"})
    assert "will_exceed" in text.output and "2026-11-28" in text.output

    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(ForecastCollector(wh))
    families = {f.name: f for f in text_string_to_metric_families(generate_latest(registry).decode())}
    cost = {(s.labels["team"], s.labels["lane"], s.labels["currency"]): s.value
            for s in families["gpu_platform_forecast_month_end_cost"].samples}
    assert cost == {k: float(v) for k, v in fc.items()}
    assert cost[("perception", "candidate_train", "USD")] != cost[("planning", "candidate_train", "USD")]
    left = {(s.labels["scope"], s.labels["subject"]): s.value for s in families["gpu_platform_budget_burn_days_left"].samples}
    assert left[("lane", "candidate_train")] == 18 and left[("team", "perception")] == 20
    assert math.isinf(left[("team", "planning")])
    fired = {(s.labels["scope"], s.labels["subject"]): s.value for s in families["gpu_platform_budget_burn_fired"].samples}
    assert fired[("lane", "candidate_train")] == 1 and fired[("team", "planning")] == 0
    assert [s.value for s in families["gpu_platform_forecast_up"].samples] == [1.0]


def test_metrics_answer_without_a_warehouse(tmp_path):
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(ForecastCollector(tmp_path / "missing.duckdb"))
    text = generate_latest(registry).decode()
    assert "gpu_platform_forecast_up 0.0" in text and "gpu_platform_forecast_month_end_cost{" not in text
