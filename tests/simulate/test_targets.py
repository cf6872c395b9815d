"""Lane targets (`lanes.<lane>.targets`): validated with the policy, judged by `simulate`
(met / missed / not judged, exit 1 with --fail-on-missed), shown in the report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from gpu_platform.cli import main
from gpu_platform.policy import PolicyError, default_policy_path, parse_policy
from gpu_platform.simulate import TraceJob, lane_report, simulate
from gpu_platform.simulate.scenarios import SCENARIOS
from gpu_platform.simulate.targets import judge

FIX = Path(__file__).parents[1] / "fixtures" / "simulate"


def _policy(**targets):
    raw = yaml.safe_load(default_policy_path().read_text())
    for lane, t in targets.items():
        raw["lanes"][lane]["targets"] = t
    return parse_policy(raw)


def _doc(pol, jobs, names=("policy", "fifo-backfill")):
    return {n: lane_report(simulate(SCENARIOS[n](pol, None), jobs)) for n in names}


def test_targets_are_judged_by_hand():
    # 72 whole GPUs. Research asks for all of them at t=0 (72 jobs of 1 GPU, 1000 s; under FIFO it gets
    # them all, under the policy what its cohort lends it); an incident of 16 GPUs
    # at t=10 takes the free H100s and reclaims the rest from research at once (wait 0: met; research
    # loses the reclaimed GPUs' 10 s); a release of 4 at t=20 takes free L4s. A candidate job of 64
    # GPUs can never fit its lane: rejected, so its wait is not judged.
    pol = _policy(incident_response={"wait_p95": "1m"}, release_eval={"wait_p95": "30s", "wait_p95_vs_fifo": 0.5},
                  research_best_effort={"max_lost_gpu_hours_share": 0.0},
                  candidate_train={"wait_p95": "1h"})
    jobs = [TraceJob(f"r{i}", 0, 1000, 1, "research_best_effort") for i in range(72)]
    jobs += [TraceJob("inc", 10, 100, 16, "incident_response"), TraceJob("rel", 20, 100, 4, "release_eval"),
             TraceJob("huge", 30, 100, 64, "candidate_train")]
    verdict = judge(pol, _doc(pol, jobs))
    rows = {(lane, r["target"]): r for lane, rs in verdict["lanes"].items() for r in rs}
    assert rows[("incident_response", "wait_p95")]["met"] is True
    assert rows[("incident_response", "wait_p95")]["value"] == 0
    assert rows[("release_eval", "wait_p95")]["met"] is True
    # under FIFO the release job waits behind research; 0 <= half of that
    fifo_wait = rows[("release_eval", "wait_p95_vs_fifo")]["limit"]
    assert fifo_wait > 0 and rows[("release_eval", "wait_p95_vs_fifo")]["met"] is True
    lost = rows[("research_best_effort", "max_lost_gpu_hours_share")]
    assert lost["value"] > 0 and lost["met"] is False  # the reclaims cost research work
    assert rows[("candidate_train", "wait_p95")]["met"] is None
    assert "no job of the lane was admitted" in rows[("candidate_train", "wait_p95")]["not_judged"]
    # the packaged policy's other wait targets: lanes this trace does not have, never passed
    absent = ("online_serving", "map_semantic_batch", "labeler_batch", "platform_maintenance", "baseline_rebuild")
    assert all(rows[(lane, "wait_p95")]["met"] is None and rows[(lane, "wait_p95")]["not_judged"] for lane in absent)
    assert (verdict["met"], verdict["missed"], verdict["not_judged"]) == (3, 1, 6)


def test_a_vs_fifo_target_needs_the_baseline():
    pol = _policy(release_eval={"wait_p95_vs_fifo": 0.1})
    verdict = judge(pol, _doc(pol, [TraceJob("rel", 0, 10, 4, "release_eval")], names=("policy",)))
    (row,) = verdict["lanes"]["release_eval"]
    assert row["met"] is None and "--compare fifo-backfill" in row["not_judged"]


@pytest.mark.parametrize(
    ("targets", "field"),
    [({"wait_p95_vs_fifo": 0}, "wait_p95_vs_fifo"), ({"max_lost_gpu_hours_share": 1.5}, "max_lost_gpu_hours_share"),
     ({"wait_p95": "soon"}, "wait_p95"), ({"wait_p50": "1m"}, "wait_p50")],
)
def test_bad_targets_are_refused_naming_the_field(targets, field):
    with pytest.raises(PolicyError) as info:
        _policy(release_eval=targets)
    assert f"lanes.release_eval.targets.{field}" in str(info.value)


def test_cli_reports_targets_and_fails_on_missed(tmp_path):
    res = CliRunner().invoke(main, ["simulate", "--trace", str(FIX / "elasticflow-cluster04-head2000.csv"),
                                    "--lane-map", "elasticflow-fleet", "--capacity", "96", "--quiet",
                                    "--out", str(tmp_path / "out"), "--fail-on-missed"])
    doc = json.loads(res.stdout)
    targets = doc["targets"]
    assert {r["target"] for r in targets["lanes"]["incident_response"]} == {"wait_p95"}
    missed = [(lane, r["target"]) for lane, rs in targets["lanes"].items() for r in rs if r["met"] is False]
    assert res.exit_code == (1 if missed else 0)
    assert ("candidate_train", "wait_p95") in missed  # the slice overloads 96 GPUs with training
    assert "lane target(s) missed:" in res.stderr and "candidate_train wait_p95" in res.stderr
    assert "Lane targets:" in (tmp_path / "out" / "report.html").read_text()
