"""`cost build` and `cost report` on a warehouse file holding the hand-computed scenario."""

from __future__ import annotations

import json

import duckdb
from click.testing import CliRunner

from gpu_platform.cli.cost import cost
from tests.sqlmodels.finops_scenario import DAY, load_scenario


def test_build_then_report(tmp_path):
    wh = tmp_path / "wh.duckdb"
    con = duckdb.connect(str(wh))
    load_scenario(con)
    con.close()
    runner = CliRunner()
    res = runner.invoke(cost, ["build", "--day", DAY, "--warehouse", str(wh)])
    assert res.exit_code == 0, res.output
    assert "data tests:" in res.output and "0 failed" in res.output

    res = runner.invoke(cost, ["report", "--day", DAY, "--warehouse", str(wh), "--format", "json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    (usd,) = data["totals"]
    assert (usd["currency"], usd["billed_cost"], usd["allocated_cost"]) == ("USD", "837.600000", "388.540000")
    units = {u["unit"]: u["cost_per_unit"] for u in data["unit_costs"]}
    assert units["replay_hour"] == "9.720000" and units["training_run"] == "129.600000"
    assert {t["team"] for t in data["chargeback_by_team"]} == {"perception", "labeling", "safety", "mapping"}

    res = runner.invoke(cost, ["report", "--day", DAY, "--warehouse", str(wh)])
    assert res.exit_code == 0 and "Chargeback by team" in res.output


def test_build_rejects_bad_day_and_policy(tmp_path):
    runner = CliRunner()
    res = runner.invoke(cost, ["build", "--day", "28/11/2026", "--warehouse", str(tmp_path / "w.duckdb")])
    assert res.exit_code == 2 and "YYYY-MM-DD" in res.output
    res = runner.invoke(cost, ["build", "--day", DAY, "--idle-policy", "weighted"])
    assert res.exit_code == 2


def test_select_builds_only_the_selection(tmp_path):
    wh = tmp_path / "wh.duckdb"
    res = CliRunner().invoke(cost, ["build", "--day", DAY, "--warehouse", str(wh), "--select", "+int_gpu_nodes"])
    assert res.exit_code == 0, res.output
    tables = {r[0] for r in duckdb.connect(str(wh)).execute("select table_name from information_schema.tables").fetchall()}
    assert {"int_gpu_nodes", "int_gpu_busy"} <= tables and "chargeback" not in tables


def test_backfill_range(tmp_path):
    wh = tmp_path / "wh.duckdb"
    con = duckdb.connect(str(wh))
    load_scenario(con)
    con.close()
    res = CliRunner().invoke(cost, ["build", "--day", "2026-11-27", "--until", DAY, "--warehouse", str(wh)])
    assert res.exit_code == 0, res.output
    assert "2026-11-27..2026-11-28" in res.output and "0 failed" in res.output
    with duckdb.connect(str(wh), read_only=True) as c:
        days = c.execute("select distinct day from reconciliation order by day").fetchall()
    assert [str(d[0]) for d in days] == [DAY]  # nothing billed or sampled on the 27th
