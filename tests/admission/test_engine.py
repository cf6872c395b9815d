"""The engine on the default policy: lanes as cluster queues, requests as workloads, lane rules,
reasons, positions, estimated starts, budgets, spot, protected lanes, fair sharing, speed."""

from __future__ import annotations

import time
from dataclasses import replace
from decimal import Decimal

import pytest

from gpu_platform.admission import (
    AdmittedRequest,
    PendingRequest,
    Workload,
    admit_until_stable,
    apply_result,
    from_policy,
    preemption_targets,
    schedule_cycle,
)
from gpu_platform.admission.synthetic import synthetic_state
from gpu_platform.policy import GPU, Policy, load_policy, parse_policy
from gpu_platform.policy.loading import default_policy_path
from gpu_platform.requests.model import JobRequest


@pytest.fixture(scope="module")
def pol() -> Policy:
    return load_policy()


def req(rid: str, lane: str, gpus: int, gpu_type: str = "any", **kw) -> JobRequest:
    return JobRequest(request_id=rid, lane=lane, gpu_count=gpus, gpu_type=gpu_type, **kw)


def running(
    rid: str, lane: str, gpus: int, flavor: str, at: float = 0.0, checkpointed: bool = False, **kw
) -> AdmittedRequest:
    return AdmittedRequest(req(rid, lane, gpus, **kw), flavor, admitted_at=at, checkpointed=checkpointed)


def test_from_policy_maps_lanes_flavors_and_budgets(pol: Policy) -> None:
    state = from_policy(pol, budget_spent={"release_eval": Decimal("1000")})
    assert len(state.cluster_queues) == 9 and len(state.flavors) == 5
    assert [(c.name, c.parent) for c in state.cohorts] == [
        ("gpu-pool", None),
        ("assurance", "gpu-pool"),
        ("batch", "gpu-pool"),
    ]
    cqs = {c.name: c for c in state.cluster_queues}
    re = cqs["release_eval"]
    assert re.cohort == "assurance" and re.queueing_strategy == "BestEffortFIFO"
    assert re.yields_to == ("incident_response",) and re.reclaim_within_cohort == "Any"
    assert re.budget_total == 60000 and re.budget_remaining == 59000
    assert cqs["platform_maintenance"].protected
    assert cqs["candidate_train"].borrow_within_cohort == "LowerPriority"
    assert cqs["candidate_train"].max_priority_threshold == 299  # research and rebuilds, aged or not
    q = next(q for q in cqs["candidate_train"].quotas if q.flavor == "h100-ondemand")
    assert (q.nominal, q.borrowing_limit, q.lending_limit) == (8, None, None)  # borrows whatever is idle, lends while idle
    caps = {f.name: {r: v for r, v in f.capacity.items() if r.startswith("nvidia.com/")} for f in state.flavors}
    assert caps == {
        "h100-ondemand": {GPU: 32},
        "l4-inference": {GPU: 24},  # 16 for batch, 8 for online serving
        "a100-spot": {GPU: 16},
        # Fractional flavors offer what the device plugin exposes: 2 GPUs cut into slices, or replicas.
        "h100-mig": {"nvidia.com/mig-2g.20gb": 4, "nvidia.com/mig-1g.10gb": 6},
        "l4-shared": {"nvidia.com/gpu.shared": 8},
    }
    assert {f.name for f in state.flavors if f.spot} == {"a100-spot"}


def test_request_becomes_workload_with_lane_rules(pol: Policy) -> None:
    state = from_policy(
        pol,
        admitted=[running("c1", "candidate_train", 4, "h100-ondemand", at=5, checkpointed=True)],
        pending=[
            PendingRequest(
                req("r1", "release_eval", 2, "NVIDIA-L4", max_cost=Decimal("10"), safety_approval="SO-1"),
                created_at=7,
                approvals=frozenset({"cost"}),
            ),
            PendingRequest(
                req("r2", "research_best_effort", 1, expected_duration="2h", team="perception"),
                created_at=8,
                approvals=frozenset({"safety"}),
            ),
        ],
    )
    c1 = state.admitted[0]
    assert (c1.cq, c1.priority, c1.evidence, c1.checkpointed, c1.flavor, c1.admitted_at) == (
        "candidate_train",
        600,
        True,
        True,
        "h100-ondemand",
        5,
    )
    r1, r2 = state.pending
    assert r1.allowed_flavors == ("l4-inference",) and r1.max_cost == 10.0
    # The request's own safety_approval string grants nothing; approvals come from the ledger.
    assert not r1.safety_approval and r1.cost_approval
    assert r2.safety_approval and not r2.cost_approval and r2.team == "perception"
    assert r1.created_at == 7 and r1.requests == {GPU: 2.0}
    assert r2.allowed_flavors == ("h100-ondemand", "a100-spot", "l4-inference") and r2.expected_duration_s == 7200
    res = schedule_cycle(state)
    assert {a.name: a.flavor for a in res.admitted} == {"r1": "l4-inference", "r2": "h100-ondemand"}


def _full_h100_by_research(pol: Policy, extra=()):
    # research borrows the whole h100 pool beyond its own 2 (limit 16): 18 GPUs, plus others' nominal.
    adm = [running(f"sweep-{i}", "research_best_effort", 2, "h100-ondemand", at=i) for i in range(9)]
    adm += [
        running(f"cand-{i}", "candidate_train", 4, "h100-ondemand", at=i, checkpointed=i == 0)
        for i in range(3)
    ]
    adm += [running("burn", "platform_maintenance", 2, "h100-ondemand", at=1)]
    return list(adm) + list(extra)


def test_release_eval_reclaims_from_research_on_the_default_policy(pol: Policy) -> None:
    # quota only (Kueue's view); with the policy's nodes: test_release_eval_reclaims_whole_node_space
    state = from_policy(
        pol,
        admitted=_full_h100_by_research(pol),
        pending=[req("replay", "release_eval", 4, "h100-ondemand")],
        node_model=False,
    )
    res = schedule_cycle(state)
    assert res.admitted == []
    victims = {p.victim for p in res.preempted}
    assert victims and all(v.startswith("sweep-") for v in victims)
    assert sum(2 for _ in victims) == 4
    assert {p.reason for p in res.preempted} == {"InCohortReclamation"}
    assert "burn" not in victims
    (info,) = [p for p in res.pending if p.name == "replay"]
    assert info.reason_code == "PendingPreemption" and info.estimated_start == state.now
    # The most recently admitted research jobs go first.
    assert victims == {"sweep-8", "sweep-7"}
    nxt = apply_result(state, res)
    res2 = schedule_cycle(nxt)
    assert [a.name for a in res2.admitted] == ["replay"]


def test_protected_and_uncheckpointed_evidence_are_never_victims(pol: Policy) -> None:
    adm = [running("burn", "platform_maintenance", 2, "h100-ondemand")]
    adm += [running(f"cand-{i}", "candidate_train", 10, "h100-ondemand", at=i) for i in range(3)]
    state = from_policy(pol, admitted=adm, pending=[req("inc", "incident_response", 4)])
    res = schedule_cycle(state)
    assert res.preempted == []
    (info,) = res.pending
    assert info.reason_code == "Inadmissible"
    assert "evidence job not checkpointed: 3" in info.message
    assert info.message.startswith(
        "Inadmissible: incident_response needs 4 nvidia.com/gpu on h100-ondemand; lane uses 0/4"
    )
    assert info.message.endswith("position 1 of 1")
    # Once checkpointed, the incident may take one.
    adm2 = [replace(a, checkpointed=True) if a.request.request_id == "cand-2" else a for a in adm]
    res2 = schedule_cycle(from_policy(pol, admitted=adm2, pending=[req("inc", "incident_response", 4)]))
    # The incident fits within its own nominal quota, so it has the hierarchical advantage over the
    # borrower: Kueue names that InCohortReclamation whatever borrowWithinCohort says.
    assert [(p.victim, p.reason) for p in res2.preempted] == [("cand-2", "InCohortReclamation")]


def test_release_eval_reclaims_whole_node_space(pol: Policy) -> None:
    """With the policy's node shapes (4 nodes of 8 H100s), best fit packs the sweeps 4 to a node
    (sweep-8 shares a node with candidate jobs): the two newest sweeps free 4 GPUs on two different
    nodes, which no 4-GPU pod can use, so the victims are the next pair that shares a node."""
    state = from_policy(
        pol, admitted=_full_h100_by_research(pol), pending=[req("replay", "release_eval", 4, "h100-ondemand")]
    )
    assert state.nodes and {n.gpus for n in state.nodes if n.flavor == "h100-ondemand"} == {8}
    res = schedule_cycle(state)
    assert {p.victim for p in res.preempted} == {"sweep-7", "sweep-6"}
    nxt = apply_result(state, res)
    assert [a.name for a in schedule_cycle(nxt).admitted] == ["replay"]


def test_preemption_targets_api(pol: Policy) -> None:
    state = from_policy(pol, admitted=_full_h100_by_research(pol), node_model=False)
    pre = Workload("x", "release_eval", {GPU: 6}, priority=800)
    targets = preemption_targets(state, pre, "h100-ondemand")
    assert [t.victim for t in targets] == ["sweep-8", "sweep-7", "sweep-6"]
    assert all(t.preemptor == "x" and t.reason == "InCohortReclamation" for t in targets)
    # with nodes, the victims must free 6 GPUs on one node: three sweeps of one node
    targets = preemption_targets(from_policy(pol, admitted=_full_h100_by_research(pol)), pre, "h100-ondemand")
    assert [t.victim for t in targets] == ["sweep-5", "sweep-7", "sweep-6"]


def test_budget_exhausted_waits_and_never_fitting_is_rejected(pol: Policy) -> None:
    pending = [
        PendingRequest(req("big", "release_eval", 1, max_cost=Decimal("500")), created_at=1),
        PendingRequest(req("ok", "release_eval", 1, max_cost=Decimal("50")), created_at=2),
        PendingRequest(req("huge", "release_eval", 1, max_cost=Decimal("70000")), created_at=3),
    ]
    res = schedule_cycle(from_policy(pol, pending=pending, budget_spent={"release_eval": 59900}))
    assert [a.name for a in res.admitted] == ["ok"]
    assert [(r.name, r.reason_code) for r in res.rejected] == [("huge", "BudgetExceeded")]
    (big,) = res.pending
    assert big.reason_code == "BudgetExhausted" and big.estimated_start is None
    assert "remaining budget 100" in big.message
    # Admissions in one gate tick draw the budget down.
    many = [
        PendingRequest(req(f"j{i}", "release_eval", 1, max_cost=Decimal("40")), created_at=i)
        for i in range(4)
    ]
    res = admit_until_stable(from_policy(pol, pending=many, budget_spent={"release_eval": 59900}))
    assert [a.name for a in res.admitted] == ["j0", "j1"]
    assert {p.reason_code for p in res.pending} == {"BudgetExhausted"}



def test_budget_exhausted_reasons_name_each_workloads_own_max_cost(pol: Policy) -> None:
    """A long queue over its budget is set aside in one pass: every reason still names its own
    max_cost and the budget left when it was set aside (drawn down by this tick's admissions)."""
    costs = ["40", "150", "150", "300", "150", "40", "300"]
    pending = [
        PendingRequest(req(f"k{i}", "release_eval", 1, max_cost=Decimal(c)), created_at=i) for i, c in enumerate(costs)
    ]
    res = admit_until_stable(from_policy(pol, pending=pending, budget_spent={"release_eval": 59900}))
    assert [a.name for a in res.admitted] == ["k0", "k5"]  # 40 + 40 of the 100 left
    by_name = {p.name: p for p in res.pending}
    for i, c in enumerate(costs):
        if f"k{i}" in by_name:
            info = by_name[f"k{i}"]
            assert info.reason_code == "BudgetExhausted"
            assert f"max_cost {c} exceeds lane release_eval's remaining budget " in info.message
    remaining = {p.message.split("remaining budget ")[1].split(";")[0] for p in res.pending}
    assert remaining <= {"100", "60", "20"} and remaining


def test_spot_only_for_lanes_with_quota_on_it(pol: Policy) -> None:
    # release_eval has no a100-spot quota: an A100 request cannot match any of its flavors.
    state = from_policy(
        pol,
        pending=[
            req("a", "release_eval", 2, "NVIDIA-A100-SXM4-40GB"),
            req("b", "labeler_batch", 2, "a100-spot"),
        ],
    )
    res = schedule_cycle(state)
    assert {a.name: a.flavor for a in res.admitted} == {"b": "a100-spot"}
    (a,) = res.pending
    assert a.reason_code == "Inadmissible" and "no usable flavor" in a.message


def test_admit_until_stable_fills_lanes_and_reports_positions(pol: Policy) -> None:
    pending = [
        PendingRequest(
            req(f"s{i}", "research_best_effort", 2, "a100-spot", expected_duration="1h"), created_at=i
        )
        for i in range(12)
    ]
    res = admit_until_stable(from_policy(pol, pending=pending))
    # research may use 8 nominal + 8 borrowed a100-spot GPUs = the whole 16-GPU pool.
    assert [a.name for a in res.admitted] == [f"s{i}" for i in range(8)]
    assert res.cycles >= 8
    assert [(p.name, p.position, p.of) for p in res.pending] == [(f"s{i}", i - 7, 4) for i in range(8, 12)]
    # BestEffortFIFO: a head that cannot fit is set aside, and the ones that look exactly like it
    # go with it (Kueue's scheduling-equivalence bulk move), without being retried.
    assert all(p.reason_code == "Inadmissible" for p in res.pending)
    assert all(p.queue == "inadmissible" for p in res.pending)
    assert "equivalent to s8, which cannot be admitted" in res.pending[1].message
    assert res.cycles <= 10


def test_estimated_start_uses_running_durations(pol: Policy) -> None:
    adm = [
        AdmittedRequest(
            req(f"r{i}", "research_best_effort", 4, expected_duration=f"{i + 1}h"), "a100-spot", admitted_at=0
        )
        for i in range(4)
    ]
    pending = [
        PendingRequest(req(f"p{i}", "research_best_effort", 4, "a100-spot"), created_at=i) for i in range(3)
    ]
    res = schedule_cycle(from_policy(pol, admitted=adm, pending=pending, now=600))
    assert [p.estimated_start for p in res.pending] == [3600, 7200, 10800]


def test_fair_sharing_follows_the_policy(pol: Policy) -> None:
    raw = __import__("yaml").safe_load(default_policy_path().read_text())
    raw["fair_sharing"] = {"enabled": True}
    fair = parse_policy(raw)
    # the 24 L4s full: labeler and map batch borrow, also the serving lane's 8 idle L4s it lends
    adm = [running(f"lab-{i}", "labeler_batch", 4, "l4-inference", at=i) for i in range(3)]
    adm += [running(f"map-{i}", "map_semantic_batch", 4, "l4-inference", at=10 + i) for i in range(3)]
    state = from_policy(fair, admitted=adm, pending=[req("ev", "release_eval", 4, "l4-inference")])
    assert state.fair_sharing
    res = schedule_cycle(state)
    # labeler and map borrow beyond their nominal quota (equal shares); release_eval stays within its
    # nominal quota, so it reclaims unconditionally (Kueue's FairSharingPreemptWithinNominal).
    assert len(res.preempted) == 1 and res.preempted[0].reason == "InCohortReclamation"


def test_heads_only_and_no_rescans_10k_pending_is_fast() -> None:
    state = synthetic_state(10_000, 2_000, seed=3)
    schedule_cycle(state)
    t0 = time.perf_counter()
    res = schedule_cycle(state)
    elapsed = time.perf_counter() - t0
    assert len(res.pending) + len(res.admitted) + len(res.rejected) == 10_000
    assert elapsed < 1.0, elapsed


def test_resources_a_lane_has_no_quota_for_are_not_governed(pol: Policy) -> None:
    state = from_policy(pol)
    w = Workload("cpu-too", "release_eval", {GPU: 2, "cpu": 16, "memory": 64}, priority=800)
    res = schedule_cycle(replace(state, pending=(w,)))
    assert [(a.name, a.flavor) for a in res.admitted] == [("cpu-too", "h100-ondemand")]


def test_assurance_reserve_lends_while_idle_and_is_reclaimed(pol: Policy) -> None:
    """The assurance reserve lends while idle (issue 45: a reserve that never lent idled H100s
    while work waited): a research sweep takes every idle H100, and an incident takes its GPUs
    back by preempting research (`reclaim_within_cohort: Any`), nobody else."""
    sweep = [req(f"s{i}", "research_best_effort", 2, "h100-ondemand") for i in range(20)]
    res = admit_until_stable(from_policy(pol, pending=sweep))
    h100 = sum(2 for a in res.admitted)
    assert h100 == 32  # the whole flavor, the reserve included
    state = from_policy(
        pol,
        admitted=[running(a.name, "research_best_effort", 2, "h100-ondemand", at=i) for i, a in enumerate(res.admitted)],
        pending=[req("inc", "incident_response", 8)],
    )
    out = schedule_cycle(state)
    assert {p.victim_cq for p in out.preempted} == {"research_best_effort"}
    assert len(out.preempted) == 4 and {p.preemptor for p in out.preempted} == {"inc"}


def _afs_pol(weights: dict | None = None) -> Policy:
    import yaml

    raw = yaml.safe_load(default_policy_path().read_text())
    raw["lanes"]["research_best_effort"]["admission_fair_sharing"] = {"team_weights": weights or {}}
    return parse_policy(raw)


def _two_teams() -> list[PendingRequest]:
    return [
        PendingRequest(req("perception-1", "research_best_effort", 1, team="perception"), created_at=1),
        PendingRequest(req("planning-1", "research_best_effort", 1, team="planning"), created_at=2),
    ]


def test_admission_fair_sharing_from_the_policy_puts_the_team_using_less_first(pol: Policy) -> None:
    usage = {"research_best_effort": {"perception": {GPU: 10.0}, "planning": {GPU: 1.0}}}
    # Without it, the lane's one head is its oldest job, whatever its team has used.
    assert [a.name for a in schedule_cycle(from_policy(pol, pending=_two_teams(), team_usage=usage)).admitted] == [
        "perception-1"
    ]
    afs = _afs_pol()
    state = from_policy(afs, pending=_two_teams(), team_usage=usage)
    spec = next(c for c in state.cluster_queues if c.name == "research_best_effort").admission_fair_sharing
    assert spec is not None and spec.entry_penalty_rate == pytest.approx(1 - 0.5 ** (300 / (168 * 3600)))
    assert [a.name for a in schedule_cycle(state).admitted] == ["planning-1"]
    # A LocalQueue weight divides its team's usage: perception at weight 20 counts 0.5 < 1.
    heavy = from_policy(_afs_pol({"perception": 20}), pending=_two_teams(), team_usage=usage)
    assert [a.name for a in schedule_cycle(heavy).admitted] == ["perception-1"]
    # Team caps stay the gate's rule beside it: research's max_share still applies.
    assert next(c for c in state.cluster_queues if c.name == "research_best_effort").team_limits is not None


def test_evolve_is_dataclasses_replace_for_every_field():
    """The engine's and simulator's fast copy of a workload equals `dataclasses.replace` field
    by field, for every field changed alone, and refuses an unknown field as replace does."""
    import dataclasses

    from gpu_platform.admission.model import evolve

    wl = Workload("w", "cq", {"nvidia.com/gpu": 8.0}, priority=3, created_at=1.5, team="t", pods=2,
                  allowed_flavors=("h100",), expected_duration_s=60.0, uid="u-1")
    marker = object()
    for f in dataclasses.fields(Workload):
        got, want = evolve(wl, **{f.name: marker}), dataclasses.replace(wl, **{f.name: marker})
        assert got == want and getattr(got, f.name) is marker
        assert all(getattr(got, g.name) is getattr(wl, g.name) for g in dataclasses.fields(Workload) if g is not f)
    assert evolve(wl) == wl and evolve(wl) is not wl
    with pytest.raises(TypeError, match="flavour"):
        evolve(wl, flavour="h100")


def test_without_estimates_only_the_estimated_start_is_left_out():
    """admit_until_stable(estimates=False) (the simulator's calls) gives what the default gives,
    estimated starts aside, on a nearly full pool where heads preempt and wait."""
    state = synthetic_state(400, 300, seed=5)
    full = admit_until_stable(state)
    plain = admit_until_stable(state, estimates=False)
    assert full.admitted == plain.admitted and full.preempted == plain.preempted
    assert full.rejected == plain.rejected and full.cycles == plain.cycles
    assert any(p.estimated_start is not None for p in full.pending)
    assert all(p.estimated_start is None for p in plain.pending)
    assert [replace(p, estimated_start=None) for p in full.pending] == plain.pending


def test_released_snapshot_nodes_come_back_empty():
    """A released Snapshot's nodes serve the next Snapshot of the same policy state with nothing of
    the first left in them (usage, workloads, victim order), and a second release is harmless."""
    from gpu_platform.admission.quota import Snapshot, _skeleton

    busy = synthetic_state(0, 300, seed=2)
    idle = replace(busy, admitted=busy.admitted[:5])
    fresh = Snapshot(idle)
    want = {n: (dict(c.usage), dict(c.workloads), list(c.by_priority())) for n, c in fresh.cqs.items()}
    want_cohorts = {n: dict(c.usage) for n, c in fresh.cohorts.items()}
    first = Snapshot(busy)
    first.release()
    first.release()
    sk = _skeleton(busy)
    assert len(sk.spare) == len({id(s[0]) for s in sk.spare})  # never the same nodes twice
    again = Snapshot(idle)
    assert again.cqs is first.cqs  # the released nodes, reused
    assert {n: (dict(c.usage), dict(c.workloads), list(c.by_priority())) for n, c in again.cqs.items()} == want
    assert {n: dict(c.usage) for n, c in again.cohorts.items()} == want_cohorts
    assert any(c.usage for c in again.cqs.values())
    assert admit_until_stable(replace(idle, pending=busy.admitted[5:40])) == admit_until_stable(
        replace(idle, pending=busy.admitted[5:40])
    )


def test_queue_order_kept_only_for_the_same_workload_objects(pol: Policy) -> None:
    """The engine keeps each queue's last sorted order for the same workload objects in the same
    order; a replaced workload (another creation time) is sorted afresh, and the list handed out
    is the engine's own (changing it leaves the kept order alone)."""
    from gpu_platform.admission import engine

    pending = [
        PendingRequest(req(f"o{i}", "release_eval", 1, max_cost=Decimal("40")), created_at=10 - i) for i in range(5)
    ]
    state = from_policy(pol, pending=pending, budget_spent={"release_eval": 59990})  # all over budget: all wait

    def order(st):
        return [p.name for p in sorted(admit_until_stable(st).pending, key=lambda p: p.position)]

    assert order(state) == ["o4", "o3", "o2", "o1", "o0"]
    assert order(state) == ["o4", "o3", "o2", "o1", "o0"]
    moved = replace(state, pending=tuple(replace(w, created_at=-1.0) if w.name == "o1" else w for w in state.pending))
    assert order(moved) == ["o1", "o4", "o3", "o2", "o0"]
    ws = list(moved.pending)
    got = engine._in_queue_order("lane-x", ws)
    got.reverse()
    assert engine._in_queue_order("lane-x", list(ws)) == sorted(ws, key=engine.queue_key)
