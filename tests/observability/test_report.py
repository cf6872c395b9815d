"""`gpu-platform report`: HTML + PNG from the ledger and a real DuckDB warehouse built by the SQL models."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import duckdb
import pytest
from click.testing import CliRunner

from gpu_platform.cli import main
from gpu_platform.finops.sqlmodels import Project, default_project_path
from gpu_platform.observe.report import build_report
from gpu_platform.observe.report.data import queue_waits
from gpu_platform.requests.ledger import Ledger
from gpu_platform.requests.model import validate_request
from tests.gate.helpers import raw_request
from tests.sqlmodels.finops_scenario import DAY, load_scenario

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory):
    path = tmp_path_factory.mktemp("wh") / "warehouse.duckdb"
    con = duckdb.connect(str(path))
    load_scenario(con)
    project = Project.load(default_project_path())
    assert project.build(con, day=DAY)
    assert not [t for t in project.run_tests(con, DAY) if t.failures]
    con.close()
    return path


@pytest.fixture
def ledger(tmp_path, policy):
    led = Ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    t0 = NOW - timedelta(days=2)
    # release_eval waits 10 and 30 minutes; research waits 2 h, is preempted, requeued and waits 1 h more
    for i, wait in enumerate((10, 30)):
        rid = led.submit(validate_request(raw_request("release_eval", output_artifact_ids=[f"e{i}"]), policy), at=t0)
        led.record(rid, "admitted", "test", flavor="h100-ondemand", at=t0 + timedelta(minutes=wait))
    rid = led.submit(validate_request(raw_request("research_best_effort", output_artifact_ids=["r"]), policy), at=t0)
    led.record(rid, "admitted", "test", flavor="h100-ondemand", at=t0 + timedelta(hours=2))
    led.record(rid, "preempted", "Preempted", at=t0 + timedelta(hours=3), details={"by": "x", "kueue_reason": "InCohortReclamation"})
    led.record(rid, "requeued", "requeued", at=t0 + timedelta(hours=3))
    led.record(rid, "admitted", "test", flavor="h100-ondemand", at=t0 + timedelta(hours=4))
    old = led.submit(validate_request(raw_request("labeler_batch", output_artifact_ids=["o"]), policy), at=NOW - timedelta(days=30))
    led.record(old, "admitted", "test", flavor="l4-inference", at=NOW - timedelta(days=29))  # before the period
    return led


def test_queue_waits_start_at_submission_or_requeue(ledger):
    rows = {(r.lane, r.day): r for r in queue_waits(ledger, NOW - timedelta(days=7))}
    release = rows[("release_eval", (NOW - timedelta(days=2)).date())]
    assert release.admissions == 2 and release.max_s == 1800 and release.p50_s == 600
    research = rows[("research_best_effort", (NOW - timedelta(days=2)).date())]
    assert research.admissions == 2 and sorted([research.p50_s, research.max_s]) == [3600, 7200]
    assert not any(lane == "labeler_batch" for lane, _ in rows)


def test_report_writes_html_and_every_plot_as_png(ledger, policy, warehouse, tmp_path):
    out = tmp_path / "report"
    rep = build_report(ledger, policy, out, days=7, warehouse=warehouse, now=NOW)
    names = {p.name for p in rep.pngs}
    assert names == {"queue_wait_by_lane.png", "utilization_by_pool.png", "cost_by_team_USD.png", "unit_costs_USD.png"}
    for p in rep.pngs:
        assert p.read_bytes()[:8] == PNG and p.stat().st_size > 5000
    page = rep.html.read_text()
    for name in names:
        assert f'src="{name}"' in page
    for team in ("perception", "safety", "mapping", "labeling"):
        assert team in page
    assert "training_run" in page and "accepted_label" in page
    assert "release_eval" in page and "research_best_effort" in page
    assert rep.notes == {}  # the cost build made capacity_signals too


def test_fired_capacity_signals_are_listed(ledger, policy, warehouse, tmp_path):
    copy = tmp_path / "wh.duckdb"
    copy.write_bytes(warehouse.read_bytes())
    con = duckdb.connect(str(copy))
    con.execute("create or replace table capacity_signals (day date, signal varchar, fired boolean, action varchar)")
    con.execute(
        "insert into capacity_signals values (?, 'pool_utilization_low', true, 'consolidate onto fewer nodes'), "
        "(?, 'queue_wait_gt_training', false, 'add capacity')",
        [NOW.date(), NOW.date()],
    )
    con.close()
    page = build_report(ledger, policy, tmp_path / "r", days=7, warehouse=copy, now=NOW).html.read_text()
    assert "consolidate onto fewer nodes" in page and "add capacity" not in page


def test_without_a_warehouse_the_page_says_what_is_missing(ledger, policy, tmp_path):
    out = CliRunner().invoke(
        main,
        ["report", "--out", str(tmp_path / "r"), "--days", "3", "--ledger", ledger.url, "--warehouse", str(tmp_path / "none.duckdb")],
    )
    assert out.exit_code == 0, out.output
    page = (tmp_path / "r" / "index.html").read_text()
    assert "Not available: no warehouse at" in page
    assert "no warehouse at" in out.output


def test_rows_without_a_currency_or_team_do_not_break_the_report(ledger, policy, warehouse, tmp_path):
    """Pods of the local machine have no bill line: their chargeback and unit-cost rows carry no
    currency (and a bypass pod may carry no team). The page is still written, says so, and
    plots the priced rows."""
    copy = tmp_path / "wh.duckdb"
    copy.write_bytes(warehouse.read_bytes())
    con = duckdb.connect(str(copy))
    con.execute("insert into platform_cost_per_tenant (day, team, currency, total_cost, allocated_gpu_hours) "
                "values (?, null, null, null, 3.0), (?, 'perception', null, null, 1.0)", [DAY, DAY])
    con.execute("insert into unit_cost_training_run (currency) values (null)")
    con.close()
    out = CliRunner().invoke(
        main, ["report", "--out", str(tmp_path / "r"), "--days", "7", "--ledger", ledger.url, "--warehouse", str(copy)]
    )
    assert out.exit_code == 0, out.output
    rep = build_report(ledger, policy, tmp_path / "r2", days=7, warehouse=copy, now=NOW)
    assert {p.name for p in rep.pngs} >= {"cost_by_team_USD.png", "unit_costs_USD.png"}
    assert rep.notes["chargeback_unpriced"].startswith("2 chargeback row(s) without a currency")
    assert rep.notes["unit-cost_unpriced"].startswith("1 unit-cost row(s) without a currency")
    assert "not priced by any bill line" in rep.html.read_text()
