"""Kueue's fair-sharing victim order when cluster queues have equal dominant resource shares.

pkg/scheduler/preemption/fairsharing/ordering.go `TargetClusterQueueOrdering.nextTarget`
(kubernetes-sigs/kueue, v1beta2 sources): among the child cluster queues of a cohort, the one with
the highest DominantResourceShare is visited next; when two have the same share
(`CompareDRS(drs, highestCqDrs) == 0`) their first remaining candidates are compared with
`preemptioncommon.CandidatesOrdering` (common/ordering.go, Admission Fair Sharing off) and the
queue whose candidate sorts first wins. The order the queues are listed in does not matter."""

from __future__ import annotations

import pytest

from gpu_platform.admission.cases import run_case


def _case(order: list[str], victims: dict[str, dict], expected: str) -> dict:
    """Queue `a` (nominal 4 CPUs) takes back 2 CPUs; `x` and `y` (nominal 0) each borrow 2 CPUs
    with one workload, so both have the same share of the cohort."""
    queues = {
        name: {
            "name": name,
            "cohort": "c",
            "quotas": [{"flavor": "default", "resource": "cpu", "nominal": 0}],
        }
        for name in ("x", "y")
    }
    return {
        "id": "fair-tie",
        "kind": "preemption_targets",
        "fair_sharing": True,
        "flavors": ["default"],
        "cohorts": ["c"],
        "cluster_queues": [
            {
                "name": "a",
                "cohort": "c",
                "preemption": {"reclaimWithinCohort": "Any"},
                "quotas": [{"flavor": "default", "resource": "cpu", "nominal": 4}],
            },
            *(queues[n] for n in order),
        ],
        "admitted": [
            {"name": f"{cq}1", "cq": cq, "requests": {"cpu": 2}, "flavor": "default", **w}
            for cq, w in victims.items()
        ],
        "pending": [{"name": "p", "cq": "a", "priority": 10, "requests": {"cpu": 2}, "flavor": "default"}],
        "expected": {"preempted": [{"name": expected, "reason": "InCohortReclamation"}]},
    }


@pytest.mark.parametrize("order", [["x", "y"], ["y", "x"]])
@pytest.mark.parametrize(
    ("victims", "expected"),
    [
        # equal priority: the more recent reservation goes first
        ({"x": {"admitted_at": 100}, "y": {"admitted_at": 200}}, "y1"),
        ({"x": {"admitted_at": 200}, "y": {"admitted_at": 100}}, "x1"),
        # lower priority before recency
        ({"x": {"admitted_at": 100, "priority": -1}, "y": {"admitted_at": 200}}, "x1"),
        # same priority, same second: the smaller UID
        ({"x": {"admitted_at": 100, "uid": "b"}, "y": {"admitted_at": 100, "uid": "a"}}, "y1"),
        ({"x": {"admitted_at": 100}, "y": {"admitted_at": 100}}, "x1"),
        # a workload already being evicted first
        ({"x": {"admitted_at": 200}, "y": {"admitted_at": 100, "priority": 3, "evicted": True}}, "y1"),
    ],
)
def test_equal_shares_visit_the_queue_whose_candidate_sorts_first(order, victims, expected):
    out = run_case(_case(order, victims, expected))
    assert out.ok, out.failures
    assert [p["name"] for p in out.output["preempted"]] == [expected]
