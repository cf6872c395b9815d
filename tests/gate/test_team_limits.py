"""Team limits through the real gate: a real ledger, the admission sensor, `gpu-platform queue`."""

from __future__ import annotations

import json

from click.testing import CliRunner

from gpu_platform.cli import main
from gpu_platform.gate.tick import TAG_REQUEST_ID, TAG_TEAM
from tests.gate.helpers import submit, tick

PLANNING = {"team": "planning", "cost_center": "CC-1020", "data_access_scope": "sim", "owner": "pat@example.com"}


def test_one_teams_sweep_is_capped_and_another_team_still_runs(env, policy):
    """research_best_effort caps each team at half of what the lane can hold (43 of 86 GPU
    units, the assurance reserve and the serving lane's idle L4s lending): perception's sweep of
    8-GPU jobs gets 5, its 6th waits with a TeamLimit reason that
    `gpu-platform queue` shows, and planning's job is admitted beside it."""
    instance, ledger, resources, home = env
    sweep = [
        submit(
            ledger, policy, "research_best_effort", gpu_type="any", gpu_count=8,
            experiment_id=f"sweep-{i}", output_artifact_ids=[f"sweep-{i}"],
        )
        for i in range(6)
    ]
    other = submit(
        ledger, policy, "research_best_effort", gpu_type="any", gpu_count=8,
        experiment_id="plan-1", output_artifact_ids=["plan-1"], **PLANNING,
    )
    result = tick(instance, resources)
    launched = {r.tags[TAG_REQUEST_ID]: r.tags for r in result.run_requests}
    assert set(launched) == {*sweep[:5], other}
    # The run carries the team tag the instance's per-team run limit counts.
    assert launched[other][TAG_TEAM] == "planning"
    assert launched[other]["gpu-platform/team.research_best_effort"] == "planning"
    capped = ledger.state(sweep[5])
    assert capped.state == "waiting" and capped.details["reason_code"] == "TeamLimit"
    assert capped.reason.startswith(
        "TeamLimit: team perception in lane research_best_effort uses 40 of 43 GPUs (this job needs 8)"
    )
    out = CliRunner().invoke(
        main, ["queue", "--format", "json", "--ledger", ledger.url], env={"GPU_PLATFORM_HOME": str(home)},
        catch_exceptions=False,
    )
    assert out.exit_code == 0, out.output
    rows = {r["request_id"]: r for r in json.loads(out.output)}
    assert rows[sweep[5]]["reason_code"] == "TeamLimit"
    assert "team perception in lane research_best_effort uses 40 of 43 GPUs" in rows[sweep[5]]["reason"]
    assert rows[other]["state"] == "admitted"
    table = CliRunner().invoke(
        main, ["queue", "--ledger", ledger.url], env={"GPU_PLATFORM_HOME": str(home)}, catch_exceptions=False
    )
    assert "TeamLimit: team perception" in table.output


def test_capped_job_starts_once_its_team_frees_room(env, policy):
    instance, ledger, resources, _home = env
    sweep = [
        submit(
            ledger, policy, "research_best_effort", gpu_type="any", gpu_count=8,
            experiment_id=f"sweep-{i}", output_artifact_ids=[f"sweep-{i}"],
        )
        for i in range(6)
    ]
    tick(instance, resources)
    assert ledger.state(sweep[5]).details["reason_code"] == "TeamLimit"
    ledger.record(sweep[0], "finished", "run succeeded")
    result = tick(instance, resources)
    assert [r.tags[TAG_REQUEST_ID] for r in result.run_requests if r.tags[TAG_REQUEST_ID] == sweep[5]] == [sweep[5]]


def test_explain_names_the_team_limit_rule(env, policy):
    from gpu_platform.observe.queueview import explain

    instance, ledger, resources, _home = env
    sweep = [
        submit(
            ledger, policy, "research_best_effort", gpu_type="any", gpu_count=8,
            experiment_id=f"sweep-{i}", output_artifact_ids=[f"sweep-{i}"],
        )
        for i in range(6)
    ]
    tick(instance, resources)
    wait = explain(ledger, policy, sweep[5]).steps[-1]
    assert wait.event == "waiting" and wait.details["reason_code"] == "TeamLimit"
    assert wait.rule == "lanes.research_best_effort.team_limits default: max_share=0.5, max_running=12"
