"""The cluster-observed cases are the default policy's H100s as the cluster ran them: every H100
quota row, cohort and preemption policy in tests/fixtures/admission/cluster-observed.yaml is what
gpu_platform/policy/default.yaml gives the engine, except the H100 borrowing limits the training
lanes had then and the policy no longer sets (`OBSERVED_BORROWING_LIMITS`: the policy now lends
them whatever is idle, docs/simulator.md), and the assurance reserve's lending limits and the
StrictFIFO of release and incident work, which the policy dropped for work-conserving defaults
(issue 45: `OBSERVED_LENDING_LIMITS`, `OBSERVED_QUEUEING`), and candidate training's
borrow-within-cohort threshold, raised with every lane's wait target (`OBSERVED_THRESHOLDS`), so the cases keep describing the
policy the cluster ran and any other drift fails here."""

from __future__ import annotations

from pathlib import Path

from gpu_platform.admission.cases import load_cases, state_from_case
from gpu_platform.admission.policy_view import from_policy
from gpu_platform.policy import load_policy

CASES = load_cases(Path(__file__).resolve().parents[1] / "fixtures" / "admission" / "cluster-observed.yaml")
H100 = "h100-ondemand"
OBSERVED_BORROWING_LIMITS = {"candidate_train": 12.0, "baseline_rebuild": 4.0, "research_best_effort": 16.0}
"""H100 borrowing limits of the policy the cluster ran (the packaged policy sets none now)."""
OBSERVED_LENDING_LIMITS = {"candidate_train": 4.0, "release_eval": 2.0, "assurance": 10.0}
"""H100 lending limits of the policy the cluster ran (the packaged policy's reserve lends now)."""
OBSERVED_QUEUEING = {"incident_response": "StrictFIFO", "release_eval": "StrictFIFO"}
"""Queueing strategies of the policy the cluster ran (BestEffortFIFO now)."""
OBSERVED_THRESHOLDS = {"candidate_train": 200}
"""borrow_within_cohort thresholds of the policy the cluster ran (299 now: research and rebuilds
age toward their wait targets, up to 199 and 299)."""


def _h100(quotas):
    return sorted((q.resource, q.nominal, q.borrowing_limit, q.lending_limit) for q in quotas if q.flavor == H100)


def test_the_cases_hold_the_default_policys_h100s() -> None:
    policy = from_policy(load_policy())
    lanes = {c.name: c for c in policy.cluster_queues}
    cohorts = {c.name: c for c in policy.cohorts}
    for case in CASES:
        state = state_from_case(case)
        on_h100 = {name for name, cq in lanes.items() if _h100(cq.quotas)}
        assert {cq.name for cq in state.cluster_queues} == on_h100, case["id"]
        for cq in state.cluster_queues:
            lane = lanes[cq.name]
            expected = [
                (r, nominal, OBSERVED_BORROWING_LIMITS.get(cq.name, borrowing), OBSERVED_LENDING_LIMITS.get(cq.name, lending))
                for r, nominal, borrowing, lending in _h100(lane.quotas)
            ]
            assert _h100(cq.quotas) == expected, (case["id"], cq.name)
            strategy = OBSERVED_QUEUEING.get(cq.name, lane.queueing_strategy)
            assert (cq.cohort, cq.queueing_strategy) == (lane.cohort, strategy), cq.name
            assert (cq.within_cluster_queue, cq.reclaim_within_cohort, cq.borrow_within_cohort) == (
                lane.within_cluster_queue,
                lane.reclaim_within_cohort,
                lane.borrow_within_cohort,
            ), cq.name
            assert cq.max_priority_threshold == OBSERVED_THRESHOLDS.get(cq.name, lane.max_priority_threshold), cq.name
        for co in state.cohorts:
            want = [
                (r, nominal, borrowing, OBSERVED_LENDING_LIMITS.get(co.name, lending))
                for r, nominal, borrowing, lending in _h100(cohorts[co.name].quotas)
            ]
            assert (co.parent, _h100(co.quotas)) == (cohorts[co.name].parent, want), co.name
        assert {f.name: f.capacity["nvidia.com/gpu"] for f in state.flavors} == {
            H100: next(f for f in policy.flavors if f.name == H100).capacity["nvidia.com/gpu"]
        }
        priority = {lane.name: lane.priority for lane in load_policy().lanes.values()}
        for w in (*state.admitted, *state.pending):
            assert w.priority == priority[w.cq], w.name
