"""`cost build` binds the policy's thresholds; `scorecard` prints the day and the signals that fired."""

from __future__ import annotations

import json

import duckdb
from click.testing import CliRunner

from gpu_platform.cli import main
from tests.scorecards import scenario


def test_cost_build_then_scorecard_json_and_table(tmp_path):
    path = str(tmp_path / "warehouse.duckdb")
    with duckdb.connect(path) as con:
        scenario.load(con)
    res = CliRunner().invoke(main, ["cost", "build", "--day", scenario.DAY, "--warehouse", path])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(main, ["scorecard", "--day", scenario.DAY, "--warehouse", path, "--format", "json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    # the pod without a request id is in team-platform's namespace: charged to platform as bypass
    assert data["scorecard_bypass"] == [{"attributed_gpu_hours": 60.5, "unattributed_gpu_hours": 0.5,
                                         "unattributed_pods": 1, "charged_bypass_gpu_hours": 0.5,
                                         "unowned_gpu_hours": 0.0, "bypass_teams": "platform",
                                         "bypass_share": 0.5 / 61, "unmatched_jobs": 2,
                                         "unmatched_unknown_request_jobs": 1, "unmatched_ended_request_jobs": 1,
                                         "approved_exceptions": 2,
                                         "safety_approvals": 1, "cost_exceptions": 1, "approvers": 2,
                                         "break_glass_grants": 0, "break_glass_unreviewed": 0,
                                         "retrospectives_done": 0}]
    fired = {(s["signal"], s["subject"]): s["severity"] for s in data["capacity_signals"]}
    assert fired[("release_replay_delayed_by_research", "release_eval")] == "ERROR"
    assert ("incident_waiting_for_capacity", "incident_response") not in fired  # did not fire
    assert data["capacity_signals"][0]["severity"] == "ERROR"  # ERROR first
    res = CliRunner().invoke(main, ["scorecard", "--day", scenario.DAY, "--warehouse", path])
    assert res.exit_code == 0, res.output
    assert "ERROR release_replay_delayed_by_research release_eval: release_eval waited up to 3600 s" in res.output
    assert "scorecard_queue_wait" in res.output


def test_cost_build_uses_the_policy_file(tmp_path):
    path = str(tmp_path / "warehouse.duckdb")
    with duckdb.connect(path) as con:
        scenario.load(con)
    policy = tmp_path / "policy.yaml"
    from gpu_platform.policy.loading import default_policy_path

    policy.write_text(default_policy_path().read_text().replace("incident_wait_s: 300", "incident_wait_s: 100"))
    res = CliRunner().invoke(main, ["cost", "build", "--day", scenario.DAY, "--warehouse", path,
                                    "--policy", str(policy), "--select", "+capacity_signals"])
    assert res.exit_code == 0, res.output
    with duckdb.connect(path, read_only=True) as con:
        row = con.execute("select fired, threshold from capacity_signals "
                          "where signal = 'incident_waiting_for_capacity'").fetchone()
    assert row == (True, 100.0)


def test_scorecard_without_warehouse_says_where_it_looked(tmp_path):
    res = CliRunner().invoke(main, ["scorecard", "--day", "2026-11-28", "--warehouse", str(tmp_path / "none.duckdb")])
    assert res.exit_code == 1 and "no warehouse at" in res.output
