"""Gate and Kueue cannot disagree silently: lane rules hold on the cluster because the gate holds
work back.

On a cluster a Job exists only for a request the gate admitted, and a preemptor's Job is created
only once the victims the gate chose (under the lane rules) are gone (`held_preemptors`). Kueue
is modelled by the same engine on the exported ClusterQueues with the lane rules removed
(`yields_to`, `protected`, evidence checkpoints are not Kueue's): given exactly the Jobs the gate
creates, it must admit all of them, on the flavors the gate predicted, preempting nothing. Had
the Jobs been created at once, Kueue would have chosen victims the lane rules protect.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from gpu_platform.admission.cases import load_cases, state_from_case
from gpu_platform.admission.engine import admit_until_stable
from gpu_platform.admission.model import ClusterState
from gpu_platform.admission.policy_view import AdmittedRequest, PendingRequest, from_policy
from gpu_platform.requests.model import validate_request_file
from tests.k8s.cluster_run import as_kueue

ROOT = Path(__file__).resolve().parents[2]
EX = ROOT / "examples" / "requests"
LANE_CASES = [c for c in load_cases(ROOT / "tests" / "fixtures" / "admission" / "lanes.yaml") if c["kind"] == "schedule_cycle"]


def _protected(state: ClusterState, victim: str, preemptor: str) -> bool:
    """Would the lane rules forbid this eviction?"""
    w = next(x for x in state.admitted if x.name == victim)
    p = next(x for x in state.pending if x.name == preemptor)
    cq = next(c for c in state.cluster_queues if c.name == w.cq)
    if cq.protected or (w.evidence and not w.checkpointed):
        return True
    return cq.yields_to is not None and p.cq not in cq.yields_to and not p.safety_approval


def gate_then_cluster(state: ClusterState) -> tuple[dict[str, str], list]:
    """Two gate ticks (victims stop in between) and what Kueue does with the Jobs each creates.

    Returns (request -> flavor the gate admitted it on, Kueue's preemptions) and asserts Kueue
    admitted every Job on the gate's flavor.
    """
    gate = admit_until_stable(state)
    victims = {p.victim for p in gate.preempted}
    launched = {a.name: a.flavor for a in gate.admitted}
    pending_by = {w.name: w for w in state.pending}

    # Tick 1: Jobs for what fits now; victims still hold their quota on the cluster.
    k1 = admit_until_stable(as_kueue(replace(state, pending=tuple(pending_by[n] for n in launched))))
    assert {a.name: a.flavor for a in k1.admitted} == launched
    kueue_preempted = list(k1.preempted)

    # Tick 2: the victims are gone; the held preemptors get their Jobs.
    running = tuple(
        [w for w in state.admitted if w.name not in victims]
        + [replace(pending_by[n], flavor=f, admitted_at=state.now) for n, f in launched.items()]
    )
    rest = tuple(w for w in state.pending if w.name not in launched)
    gate2 = admit_until_stable(replace(state, admitted=running, pending=rest))
    assert not gate2.preempted or not victims, "the gate preempts once per preemptor"
    second = {a.name: a.flavor for a in gate2.admitted}
    k2 = admit_until_stable(as_kueue(replace(state, admitted=running, pending=tuple(pending_by[n] for n in second))))
    assert {a.name: a.flavor for a in k2.admitted} == second
    kueue_preempted += list(k2.preempted)
    return {**launched, **second}, kueue_preempted


def _policy_cases(policy) -> dict[str, ClusterState]:
    """Lane-rule situations on the default policy (what the gate builds from the ledger)."""

    def req(name: str, rid: str, **update):
        return validate_request_file(EX / name, policy).model_copy(update={"request_id": rid, **update})

    # platform_maintenance (protected) borrows 2 L4s; a release replay wants them back.
    l4_full = [
        AdmittedRequest(req("release_eval.yaml", "eval-a", gpu_type="l4-inference", gpu_count=6), "l4-inference", 1, True),
        AdmittedRequest(req("map_semantic_batch.yaml", "tiles-a"), "l4-inference", 2),
        AdmittedRequest(req("labeler_batch.yaml", "label-a", gpu_count=4), "l4-inference", 3),
        AdmittedRequest(req("platform_maintenance.yaml", "burnin-a", gpu_type="l4-inference", gpu_count=2), "l4-inference", 4),
        # the serving lane's 8 L4s busy with replicas (idle, it would lend them to the replay)
        AdmittedRequest(req("online_serving.yaml", "svc-a"), "l4-inference", 0, replicas=6),
        AdmittedRequest(req("online_serving.yaml", "svc-b"), "l4-inference", 0, replicas=2),
    ]
    protected = from_policy(
        policy, l4_full, [PendingRequest(req("release_eval.yaml", "eval-b", gpu_type="l4-inference", gpu_count=2), 10)]
    )
    # Candidates borrow H100s; the incident may reclaim only the checkpointed one.
    h100 = [
        AdmittedRequest(req("candidate_train.yaml", "cand-a", gpu_count=8), "h100-ondemand", 5, False),
        AdmittedRequest(req("candidate_train.yaml", "cand-b", gpu_count=8), "h100-ondemand", 1, True),
        *[AdmittedRequest(req("release_eval.yaml", f"eval-{i}", gpu_count=4), "h100-ondemand", 2, True) for i in range(4)],
    ]
    evidence = from_policy(policy, h100, [PendingRequest(req("incident_response.yaml", "incident-1", gpu_count=8), 10)])
    return {"policy-protected-lane-borrowing": protected, "policy-uncheckpointed-evidence": evidence}


@pytest.mark.parametrize("case", LANE_CASES, ids=[c["id"] for c in LANE_CASES])
def test_lane_cases_kueue_admits_the_gates_jobs_without_preempting(case) -> None:
    admitted, kueue_preempted = gate_then_cluster(state_from_case(case))
    assert kueue_preempted == []
    assert admitted, "the preemptor is admitted once its victims are gone"


def test_policy_cases_kueue_admits_the_gates_jobs_without_preempting(policy) -> None:
    cases = _policy_cases(policy)
    state = cases["policy-uncheckpointed-evidence"]
    assert [p.victim for p in admit_until_stable(state).preempted] == ["cand-b"], "the gate takes the checkpointed one"
    admitted, kueue_preempted = gate_then_cluster(state)
    assert kueue_preempted == [] and admitted == {"incident-1": "h100-ondemand"}
    admitted, kueue_preempted = gate_then_cluster(cases["policy-protected-lane-borrowing"])
    assert kueue_preempted == [] and admitted == {}, "the protected lane keeps its GPUs; the replay waits"


def test_jobs_created_at_once_would_let_kueue_break_the_lane_rules(policy) -> None:
    """Why the gate holds work back: Kueue alone, given every pending Job, evicts protected work."""
    states = {c["id"]: state_from_case(c) for c in LANE_CASES} | _policy_cases(policy)
    broken = {}
    for name, state in states.items():
        kueue = admit_until_stable(as_kueue(state))
        bad = [p.victim for p in kueue.preempted if _protected(state, p.victim, p.preemptor)]
        if bad:
            broken[name] = bad
    assert broken == {
        # reclaimWithinCohort Any lets the map batch take release evaluation back: yields_to is not Kueue's.
        "lanes-03-release-eval-yields-only-to-incident": ["eval-1"],
        "policy-protected-lane-borrowing": ["burnin-a"],
        "policy-uncheckpointed-evidence": ["cand-a"],
    }
