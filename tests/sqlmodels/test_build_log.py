"""A failed build leaves the report saying which day is stale (issue 24, class 3)."""

from __future__ import annotations

import json
from datetime import date
from decimal import Decimal

import duckdb
import pytest
from click.testing import CliRunner

from gpu_platform.cli.cost import cost
from gpu_platform.finops.feeds.load import note_loaded
from gpu_platform.finops.sqlmodels import Project, default_project_path
from gpu_platform.finops.sqlmodels.report import staleness
from tests.sqlmodels.finops_scenario import DAY, load_scenario


@pytest.fixture
def built(tmp_path):
    wh = tmp_path / "wh.duckdb"
    con = duckdb.connect(str(wh))
    load_scenario(con)
    con.close()
    res = CliRunner().invoke(cost, ["build", "--day", DAY, "--warehouse", str(wh), "--no-tests"])
    assert res.exit_code == 0, res.output
    return wh


def _report(wh, *args):
    return CliRunner().invoke(cost, ["report", "--day", DAY, "--warehouse", str(wh), *args])


def test_every_build_is_recorded_and_a_fresh_day_is_not_stale(built):
    con = duckdb.connect(str(built))
    rows = con.execute("select model, day, status, error, built_at = last_success_at from model_builds").fetchall()
    assert rows and all(status == "success" and error is None and same for _, _, status, error, same in rows)
    assert {m for m, d, *_ in rows if d == date.fromisoformat(DAY)} >= {"stg_focus_billing", "chargeback"}
    assert {m for m, d, *_ in rows if d is None} >= {"price_book", "unit_cost_training_run"}  # unpartitioned
    assert staleness(con, DAY) is None
    con.close()
    res = _report(built, "--format", "json")
    assert res.exit_code == 0 and json.loads(res.stdout)["stale"] is None and "WARNING" not in res.output


def test_a_failed_build_makes_the_report_say_the_day_is_stale(built):
    # a billing row the staging cast cannot hold (written around the loader, as an older loader did)
    con = duckdb.connect(str(built))
    con.execute("insert into raw_focus_billing (BilledCost, EffectiveCost, BillingCurrency, ChargePeriodStart, "
                "ChargePeriodEnd, ChargeCategory, source, source_row, focus_version, day) "
                "values (1e20, 1e20, 'USD', ?, ?, 'Usage', 'focus/huge.csv', 1, '1.0', ?)",
                [f"{DAY} 03:00:00", f"{DAY} 04:00:00", DAY])
    before = con.execute("select chargeback_total from reconciliation where day = ?", [DAY]).fetchone()[0]
    con.close()
    res = CliRunner().invoke(cost, ["build", "--day", DAY, "--warehouse", str(built), "--no-tests"])
    assert res.exit_code == 1 and "Conversion Error" in res.output

    res = _report(built, "--format", "json")
    assert res.exit_code == 0, res.output  # stale is a warning unless asked
    data = json.loads(res.stdout)
    stale = data["stale"]
    assert stale["day"] == DAY and stale["rebuild"] == f"gpu-platform cost build --day {DAY}"
    (failed,) = stale["failed_models"]
    assert failed["model"] == "stg_focus_billing" and "Conversion Error" in failed["error"]
    assert failed["last_success_at"] is not None and failed["failed_at"] > failed["last_success_at"]
    assert "the last build of 1 model(s) failed: stg_focus_billing" in stale["reasons"][0]
    assert Decimal(data["totals"][0]["chargeback_total"]) == before  # the previous numbers, said to be stale
    assert "WARNING: the figures for 2026-11-28 are stale" in res.stderr

    text = _report(built)
    assert text.exit_code == 0 and "Chargeback by team" in text.stdout
    assert "WARNING: the figures for 2026-11-28 are stale" in text.stderr
    assert "stg_focus_billing failed at" in text.stderr and "Conversion Error" in text.stderr
    assert _report(built, "--fail-on-stale").exit_code == 1
    assert _report(built, "--format", "json", "--fail-on-stale").exit_code == 1

    # fixed and rebuilt: current again
    con = duckdb.connect(str(built))
    con.execute("delete from raw_focus_billing where source = 'focus/huge.csv'")
    con.close()
    assert CliRunner().invoke(cost, ["build", "--day", DAY, "--warehouse", str(built), "--no-tests"]).exit_code == 0
    assert json.loads(_report(built, "--format", "json", "--fail-on-stale").stdout)["stale"] is None


def test_feeds_ingested_after_the_last_build_make_the_day_stale(built):
    con = duckdb.connect(str(built))
    note_loaded(con, "focus", date.fromisoformat(DAY))
    stale = staleness(con, DAY)
    assert stale is not None and stale["failed_models"] == []
    assert "after the day's last successful build" in stale["reasons"][0]
    Project.load(default_project_path()).build(con, day=DAY)
    assert staleness(con, DAY) is None
    note_loaded(con, "dcgm", date(2026, 11, 30))  # a day never built
    assert "never built" in staleness(con, "2026-11-30")["reasons"][0]
    con.close()
