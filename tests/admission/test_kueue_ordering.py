"""Kueue's preemption candidate order for equal priorities, checked against its source.

pkg/scheduler/preemption/common/ordering.go `CandidatesOrdering` (kubernetes-sigs/kueue, read at
commit 04b063c3): evicted first; other ClusterQueues before the preemptor's; lower priority first;
`quotaReservationTime(b).Compare(quotaReservationTime(a))`, the more recent reservation first;
then `cmp.Compare(a.Obj.UID, b.Obj.UID)`, the smaller UID first. `quotaReservationTime` is the
QuotaReserved condition's `LastTransitionTime`, a `metav1.Time`, which the API server keeps as
RFC 3339 with whole seconds: two reservations within one second are equally recent and the UID
decides (`preemption.reserved_second`). classical/candidate_generator.go `NewCandidateIterator`
sorts each group (same queue, priority reclaim, hierarchical reclaim) with that ordering and puts
every group's evicted prefix first."""

from __future__ import annotations

import pytest

from gpu_platform.admission.cases import run_case
from gpu_platform.admission.model import Workload
from gpu_platform.admission.preemption import reserved_second


def _case(admitted: list[dict], expected: list[str]) -> dict:
    """`a` reclaims 2 CPUs it lends to `b` (which holds all 4 of the cohort's); one of b's two
    2-CPU workloads of equal priority is the victim."""
    return {
        "id": "ordering",
        "kind": "preemption_targets",
        "flavors": ["default"],
        "cohorts": ["c"],
        "cluster_queues": [
            {"name": "a", "cohort": "c", "preemption": {"reclaimWithinCohort": "Any"},
             "quotas": [{"flavor": "default", "resource": "cpu", "nominal": 4}]},
            {"name": "b", "cohort": "c", "quotas": [{"flavor": "default", "resource": "cpu", "nominal": 0}]},
        ],
        "admitted": [{"cq": "b", "requests": {"cpu": 2}, "flavor": "default", **w} for w in admitted],
        "pending": [{"name": "preemptor", "cq": "a", "priority": 10, "requests": {"cpu": 2}, "flavor": "default"}],
        "expected": {"preempted": [{"name": n, "reason": "InCohortReclamation"} for n in expected]},
    }


@pytest.mark.parametrize(
    ("admitted", "victim"),
    [
        # within one second: equally recent, the smaller UID (here the name) goes first, even
        # though b2's reservation is 0.7 s newer
        ([{"name": "b1", "admitted_at": 10.2}, {"name": "b2", "admitted_at": 10.9}], "b1"),
        # an explicit UID decides, not the name
        ([{"name": "b1", "admitted_at": 10.2, "uid": "ff"}, {"name": "b2", "admitted_at": 10.9, "uid": "0a"}], "b2"),
        # whole seconds apart: the more recent reservation first, whatever the UIDs
        ([{"name": "b1", "admitted_at": 10.9}, {"name": "b2", "admitted_at": 11.0}], "b2"),
        ([{"name": "b1", "admitted_at": 11.0, "uid": "zz"}, {"name": "b2", "admitted_at": 10.9, "uid": "aa"}], "b1"),
        # lower priority before recency
        ([{"name": "b1", "admitted_at": 5, "priority": -1}, {"name": "b2", "admitted_at": 11}], "b1"),
        # a workload already being evicted before anything else
        ([{"name": "b1", "admitted_at": 5, "evicted": True}, {"name": "b2", "admitted_at": 11, "priority": -5}], "b1"),
    ],
)
def test_equal_priority_victims_follow_kueues_ordering(admitted, victim):
    out = run_case(_case(admitted, [victim]))
    assert out.ok, out.failures
    assert [p["name"] for p in out.output["preempted"]] == [victim]


def test_reservation_time_is_compared_to_the_second():
    w = Workload(name="w", cq="q", requests={}, admitted_at=1733.999)
    assert reserved_second(w) == 1733
    assert reserved_second(Workload(name="v", cq="q", requests={}, admitted_at=1734.0)) == 1734
