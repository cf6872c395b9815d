"""Kueue's queue order and cycles until stable, checked against its source.

- cache/queue/cluster_queue.go `queueOrderingFunc`: a queue's heap orders by priority (higher
  first), then the queue-order timestamp (creation time), then `cmp.Compare(a.Obj.UID, b.Obj.UID)`.
- scheduler/scheduler.go `processEntry` / `issuePreemptions`: a preemptor issues its preemptions
  and is requeued (`RequeueReasonPendingPreemption`); it is admitted in a later cycle, never in
  the cycle that evicts its victims.
- cache/queue/cluster_queue.go `RequeueIfNotPresent` / `requeueIfNotPresent`: in a BestEffortFIFO
  queue a head that cannot be admitted (NoFit, no preemption candidates) goes to the inadmissible
  list; it returns to the heap only through `QueueInadmissibleWorkloads`, which the workload
  controller calls when quota is released in the cohort tree (`QueueAssociatedInadmissible
  WorkloadsAfter`: an eviction or a finish), not when another workload is admitted.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from gpu_platform.admission.cases import load_cases, run_case, state_from_case
from gpu_platform.admission.cycle import Engine


def _one_queue(pending: list[dict], strategy: str = "BestEffortFIFO") -> dict:
    return {
        "id": "order",
        "kind": "schedule_cycle",
        "flavors": ["f"],
        "cluster_queues": [
            {
                "name": "a",
                "queueingStrategy": strategy,
                "quotas": [{"flavor": "f", "resource": "cpu", "nominal": 2}],
            }
        ],
        "pending": [{"cq": "a", "requests": {"cpu": 2}, "created_at": 5, **w} for w in pending],
        "expected": {},
    }


@pytest.mark.parametrize("strategy", ["BestEffortFIFO", "StrictFIFO"])
@pytest.mark.parametrize(
    ("pending", "head"),
    [
        # same priority, same creation second: the smaller UID is the head, not the smaller name
        ([{"name": "w1", "uid": "9"}, {"name": "w2", "uid": "1"}], "w2"),
        ([{"name": "w2", "uid": "9"}, {"name": "w1", "uid": "1"}], "w1"),
        # no UID known: the name stands in for it
        ([{"name": "w2"}, {"name": "w1"}], "w1"),
        # an older creation time before any UID
        ([{"name": "w1", "uid": "1", "created_at": 6}, {"name": "w2", "uid": "9"}], "w2"),
        # a higher priority before anything else
        ([{"name": "w1", "uid": "1", "created_at": 1}, {"name": "w2", "uid": "9", "priority": 1}], "w2"),
    ],
)
def test_queue_head_follows_kueues_queue_order(strategy, pending, head):
    out = run_case(_one_queue(pending, strategy))
    assert out.output["admitted"] == [head]


def _stable(case: dict) -> dict:
    return {"id": "stable", "kind": "schedule_until_stable", "flavors": ["f"], "expected": {}, **case}


def test_preemptor_is_admitted_in_the_cycle_after_its_victims_are_evicted():
    """Cycle 1 preempts, cycle 2 admits the preemptor (its victim was requeued in between),
    cycle 3 finds the victim without candidates (inadmissible), cycle 4 changes nothing."""
    out = run_case(
        _stable(
            {
                "cluster_queues": [
                    {
                        "name": "a",
                        "preemption": {"withinClusterQueue": "LowerPriority"},
                        "quotas": [{"flavor": "f", "resource": "cpu", "nominal": 2}],
                    }
                ],
                "admitted": [
                    {
                        "name": "low",
                        "cq": "a",
                        "requests": {"cpu": 2},
                        "flavor": "f",
                        "created_at": 1,
                        "admitted_at": 2,
                    }
                ],
                "pending": [
                    {"name": "high", "cq": "a", "priority": 10, "requests": {"cpu": 2}, "created_at": 3}
                ],
            }
        )
    )
    o = out.output
    assert [(c["admitted"], [p["name"] for p in c["preempted"]]) for c in o["cycles"]] == [
        ([], ["low"]),
        (["high"], []),
        ([], []),
        ([], []),
    ]
    assert o["n_cycles"] == 4
    assert [(p["name"], p["queue"]) for p in o["pending"]] == [("low", "inadmissible")]


def _two_queues(evicted_finish: bool | None = None) -> dict:
    """A cohort of 4 CPUs, all in use: `a` runs a-run (2), `b` runs b-run (2). b-big (BestEffortFIFO
    head of `b`) needs 4 and cannot be admitted; a-high preempts a-run within `a`."""
    case = {
        "cohorts": ["c"],
        "cluster_queues": [
            {
                "name": "a",
                "cohort": "c",
                "preemption": {"withinClusterQueue": "LowerPriority"},
                "quotas": [{"flavor": "f", "resource": "cpu", "nominal": 2}],
            },
            {"name": "b", "cohort": "c", "quotas": [{"flavor": "f", "resource": "cpu", "nominal": 2}]},
        ],
        "admitted": [
            {
                "name": "a-run",
                "cq": "a",
                "requests": {"cpu": 2},
                "flavor": "f",
                "created_at": 1,
                "admitted_at": 2,
            },
            {
                "name": "b-run",
                "cq": "b",
                "requests": {"cpu": 2},
                "flavor": "f",
                "created_at": 1,
                "admitted_at": 2,
            },
        ],
        "pending": [
            {"name": "b-big", "cq": "b", "requests": {"cpu": 4}, "created_at": 1},
            {"name": "a-high", "cq": "a", "priority": 10, "requests": {"cpu": 2}, "created_at": 3},
        ],
    }
    if evicted_finish is not None:
        case["evicted_finish"] = evicted_finish
    return _stable(case)


@pytest.mark.parametrize("finish", [False, True])
def test_an_eviction_in_the_cohort_moves_inadmissible_workloads_back(finish):
    """Cycle 1: a-high preempts a-run; b-big cannot be admitted and goes to the inadmissible list.
    Between cycles a-run's eviction (or its finish for good) releases quota in the cohort tree,
    so b-big is tried again in cycle 2 (still no fit: 2 CPUs free, it needs 4) while a-high,
    sticky at the head of `a`, is admitted. A requeued a-run is tried in cycle 3 and finds no
    candidate; the last cycle changes nothing."""
    o = run_case(_two_queues(finish)).output
    cycles = [(c["admitted"], [p["name"] for p in c["preempted"]]) for c in o["cycles"]]
    assert cycles[:2] == [([], ["a-run"]), (["a-high"], [])]
    assert cycles[2:] == ([([], [])] if finish else [([], []), ([], [])])
    assert o["evicted_finished"] == (["a-run"] if finish else [])
    queues = {p["name"]: p["queue"] for p in o["pending"]}
    assert queues == (
        {"b-big": "inadmissible"} if finish else {"b-big": "inadmissible", "a-run": "inadmissible"}
    )


def test_an_admission_alone_does_not_move_inadmissible_workloads_back():
    """Without an eviction or a finish nothing requeues b-big: a-high is admitted on free quota in
    cycle 1, b-big (it needs 6 of the cohort's 4 CPUs) goes to the inadmissible list in cycle 1
    and stays there; cycle 2 changes nothing."""
    case = _two_queues()
    case["admitted"] = [w for w in case["admitted"] if w["name"] != "a-run"]
    case["pending"][0]["requests"] = {"cpu": 6}
    o = run_case(case).output
    assert [c["admitted"] for c in o["cycles"]] == [["a-high"], []]
    assert o["n_cycles"] == 2
    assert {p["name"]: p["queue"] for p in o["pending"]} == {"b-big": "inadmissible"}


def _sticky_state(admitted_e: bool = False):
    """cq-a (nominal 1) and cq-b (nominal 3) share 4 CPUs; b-run holds 2 of cq-b's. In cq-a, P
    (priority 5, 2 CPUs, it must borrow 1) is the sticky preemptor; Q (priority 10) asks for 5 CPUs
    and never fits. E (cq-b, 1 CPU) fits within cq-b's nominal quota."""
    admitted = [{"name": "b-run", "cq": "cq-b", "requests": {"cpu": 2}, "flavor": "f", "admitted_at": 1}]
    pending = [
        {"name": "P", "cq": "cq-a", "priority": 5, "requests": {"cpu": 2}, "created_at": 3},
        {"name": "Q", "cq": "cq-a", "priority": 10, "requests": {"cpu": 5}, "created_at": 2},
    ]
    if admitted_e:
        admitted.append({"name": "E", "cq": "cq-b", "requests": {"cpu": 1}, "flavor": "f", "admitted_at": 5})
    else:
        pending.append({"name": "E", "cq": "cq-b", "requests": {"cpu": 1}, "created_at": 1})
    return state_from_case(
        {
            "flavors": ["f"],
            "cohorts": ["c"],
            "cluster_queues": [
                {"name": "cq-a", "cohort": "c", "quotas": [{"flavor": "f", "resource": "cpu", "nominal": 1}]},
                {"name": "cq-b", "cohort": "c", "quotas": [{"flavor": "f", "resource": "cpu", "nominal": 3}]},
            ],
            "admitted": admitted,
            "pending": pending,
        }
    )


def test_a_skipped_sticky_preemptor_stays_at_the_head():
    """cluster_queue.go: `stickyWorkload` is set on RequeueReasonPendingPreemption and cleared only
    in `delete` (the workload leaves the queue); `baseCompareFunc` puts it before any priority.
    P, sticky, is nominated before the higher-priority Q; E (not borrowing, so first in the cycle)
    takes the room, P is skipped and requeued at once, and stays sticky: the next cycle tries P
    again, not Q."""
    eng = Engine(_sticky_state(), sticky={"cq-a": "P"})
    eng.cycle()
    assert eng.heads["cq-a"].name == "P"
    assert [a.name for a in eng.admitted] == ["E"]
    assert "P" not in eng.parked
    assert eng.sticky == {"cq-a": "P"}

    nxt = Engine(_sticky_state(admitted_e=True), sticky=eng.sticky)
    nxt.cycle()
    assert nxt.heads["cq-a"].name == "P"


def test_a_sticky_workload_in_the_inadmissible_list_keeps_its_place_for_later():
    """While the sticky workload sits in the inadmissible list the heap's own head (Q) is tried;
    the workload stays sticky, and once moved back to the heap it is the head again."""
    parked = Engine(_sticky_state(admitted_e=True), parked={"P"}, sticky={"cq-a": "P"})
    parked.cycle()
    assert parked.heads["cq-a"].name == "Q"
    assert parked.sticky == {"cq-a": "P"}

    back = Engine(_sticky_state(admitted_e=True), parked=set(parked.parked) - {"P"}, sticky=parked.sticky)
    back.cycle()
    assert back.heads["cq-a"].name == "P"


def test_an_admitted_sticky_workload_is_no_longer_sticky():
    state = _sticky_state(admitted_e=True)
    # with b-run gone there is room for P (2 of the 4 CPUs: E holds 1)
    state = replace(state, admitted=tuple(w for w in state.admitted if w.name != "b-run"))
    eng = Engine(state, sticky={"cq-a": "P"})
    eng.cycle()
    assert [a.name for a in eng.admitted] == ["P"]
    assert eng.sticky == {}


def test_the_run_stops_on_a_cycle_that_leaves_the_queues_as_they_were_when_it_started():
    """`schedule_until_stable` stops after a cycle that admits nothing, preempts nothing and leaves
    the queues as they were when the cycle started, i.e. after the controllers' moves between
    cycles (finished evictions, requeued victims, inadmissible workloads moved back), not as the
    cycle before ended. Here cycle 2 preempts two workloads of cq-b (they finish for good); their
    release moves cq-b-new-3 back to the active heap; cycle 3 admits and preempts nothing but sends
    cq-b-new-3 to the inadmissible list again, so the run goes on, and cycle 4 admits cq-d-new-4
    (its flavor scan, restarted after its preemptions, reaches the freed flavor again)."""
    case = load_cases(Path(__file__).with_name("stable_stop_case.yaml"))[0]
    o = run_case(case).output
    cycles = [(c["admitted"], sorted(p["name"] for p in c["preempted"])) for c in o["cycles"]]
    assert cycles[1] == ([], ["cq-b-run-6", "cq-b-run-9"])
    assert cycles[2] == ([], [])
    assert cycles[3] == (["cq-d-new-4"], [])
    assert o["n_cycles"] == len(cycles) == 7
    assert cycles[-1] == ([], [])
    assert {p["name"]: p["queue"] for p in o["pending"]}["cq-b-new-3"] == "inadmissible"
