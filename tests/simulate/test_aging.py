"""Aging toward a lane's wait target (`targets.boost_after`, `targets.boost`): waiting work gains
priority step by step (Kueue's `kueue.x-k8s.io/priority-boost`, KEP-7990), so a
large job that BestEffortFIFO lets smaller work pass is not starved: once older than a step it
preempts its lane's younger running work."""

from __future__ import annotations

from pathlib import Path

import yaml

from gpu_platform.policy import default_policy_path, load_policy, parse_policy
from gpu_platform.simulate import TraceJob, simulate
from gpu_platform.simulate.scenarios import lane_boosts, policy_scenario

FIX = Path(__file__).parents[1] / "fixtures" / "simulate"


def _policy(targets):
    raw = yaml.safe_load((FIX / "policy-one-flavor.yaml").read_text())
    raw["lanes"]["low"]["queueing_strategy"] = "BestEffortFIFO"
    raw["lanes"]["low"]["targets"] = targets
    raw["lanes"]["low"]["quotas"] = [{"flavor_name": "gpu", "nominal_quota": 4}]  # within nominal
    raw["lanes"]["high"]["quotas"] = [{"flavor_name": "gpu", "nominal_quota": 0, "borrowing_limit": 4}]
    return parse_policy(raw)


def _stream():
    # 4 GPUs. A 1-GPU job every 10 s for 300 s, each running 30 s: 3 run at a time, so a GPU is
    # always free for the next small one and the 4 the big job needs never are.
    jobs = [TraceJob(f"s{i:02d}", 10 * i, 30, 1, "low") for i in range(31)]
    return [*jobs, TraceJob("big", 1, 10, 4, "low")]


def _big(pol):
    res = simulate(policy_scenario(pol), _stream(), checkpoint_interval_s=5)
    return {r.job.job_id: r for r in res.runs}


def test_without_aging_the_big_job_waits_for_the_stream_to_end():
    runs = _big(_policy({"wait_p95": "100s", "boost_after": None}))
    assert runs["big"].first_admit >= 300


def test_aging_admits_it_one_step_after_submission():
    runs = _big(_policy({"wait_p95": "100s", "boost_after": 0.5}))  # a step of 50 s
    assert runs["big"].first_admit == 51
    assert runs["big"].wl.priority == 101
    assert sum(r.preemptions for r in runs.values()) >= 3  # its lane's younger running work


def test_the_boost_stops_below_the_next_lane():
    b = lane_boosts(load_policy(default_policy_path()))
    assert b["candidate_train"] == (24 * 3600.0, 1, 99)  # a step of its 24 h; map_semantic_batch is 700
    assert b["release_eval"] == (900.0, 1, 99)  # online_serving is 900
    assert b["research_best_effort"] == (72 * 3600.0, 1, 99)  # baseline_rebuild is 200
    assert b["baseline_rebuild"] == (48 * 3600.0, 1, 99)  # labeler_batch is 300
    raw = yaml.safe_load(default_policy_path().read_text())
    del raw["lanes"]["research_best_effort"]["targets"]["wait_p95"]
    assert "research_best_effort" not in lane_boosts(parse_policy(raw))  # no wait target: no aging
