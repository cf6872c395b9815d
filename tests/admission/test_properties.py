"""Invariants of the admission engine over random states (hypothesis)."""

from __future__ import annotations

import random
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu_platform.admission import (
    ClusterQueueSpec,
    ClusterState,
    FlavorSpec,
    ResourceQuota,
    Workload,
    admit_until_stable,
    apply_result,
    schedule_cycle,
)
from gpu_platform.admission.quota import Snapshot
from gpu_platform.admission.synthetic import synthetic_state
from gpu_platform.policy import load_policy

GPU = "nvidia.com/gpu"
POLICIES_WITHIN = ("Never", "LowerPriority", "LowerOrNewerEqualPriority")
POLICIES_RECLAIM = ("Never", "LowerPriority", "Any")


@st.composite
def states(draw) -> ClusterState:
    seed = draw(st.integers(0, 2**32 - 1))
    rng = random.Random(seed)
    flavors = [f"f{i}" for i in range(rng.randint(1, 3))]
    cohort = "pool" if rng.random() < 0.8 else None
    cqs = []
    for i in range(rng.randint(1, 4)):
        quotas = []
        for f in flavors:
            if rng.random() < 0.8:
                nominal = float(rng.randint(0, 8))
                bl = None if cohort is None or rng.random() < 0.5 else float(rng.randint(0, 8))
                ll = None if cohort is None or rng.random() < 0.6 else float(rng.randint(0, int(nominal)))
                quotas.append(ResourceQuota(f, GPU, nominal, bl, ll))
        if not quotas:
            quotas.append(ResourceQuota(flavors[0], GPU, 4.0))
        bwc = rng.choice(("Never", "LowerPriority"))
        reclaim = rng.choice(POLICIES_RECLAIM)
        cqs.append(
            ClusterQueueSpec(
                name=f"q{i}",
                quotas=tuple(quotas),
                cohort=cohort,
                queueing_strategy=rng.choice(("StrictFIFO", "BestEffortFIFO")),
                within_cluster_queue=rng.choice(POLICIES_WITHIN),
                reclaim_within_cohort=reclaim,
                borrow_within_cohort=bwc if reclaim != "Never" else "Never",
                max_priority_threshold=rng.choice((None, 1, 3)),
                yields_to=rng.choice((None, None, ("q0",))),
                protected=rng.random() < 0.15,
            )
        )
    # Capacity = sum of nominal quotas per flavor, as in the policy view.
    caps = {f: sum(q.nominal for c in cqs for q in c.quotas if q.flavor == f) for f in flavors}
    flv = tuple(FlavorSpec(f, capacity={GPU: caps[f]}) for f in flavors)
    base = ClusterState(
        tuple(cqs), flv, cohorts=(cohort,) if cohort else (), fair_sharing=draw(st.booleans())
    )
    snap = Snapshot(base)
    admitted = []
    for i in range(rng.randint(0, 14)):
        c = rng.choice(cqs)
        f = rng.choice(c.flavors)
        amount = float(rng.choice((1, 1, 2, 4)))
        if amount > snap.available(snap.cqs[c.name], (f, GPU)):
            continue
        w = Workload(
            f"a{i}",
            c.name,
            {GPU: amount},
            priority=rng.randint(0, 5),
            created_at=float(rng.randint(0, 50)),
            admitted_at=float(rng.randint(0, 50)),
            flavor=f,
            evidence=rng.random() < 0.3,
            checkpointed=rng.random() < 0.5,
        )
        snap.add_workload(w)
        admitted.append(w)
    pending = [
        Workload(
            f"p{i}",
            rng.choice(cqs).name,
            {GPU: float(rng.choice((1, 2, 4, 8)))},
            priority=rng.randint(0, 5),
            created_at=float(rng.randint(0, 50)),
            safety_approval=rng.random() < 0.2,
        )
        for i in range(rng.randint(0, 10))
    ]
    return replace(base, admitted=tuple(admitted), pending=tuple(pending))


def _usage_ok(state: ClusterState) -> None:
    snap = Snapshot(state)
    for fr, used in snap.total_usage.items():
        assert used <= snap.capacity[fr] + 1e-9, f"{fr}: {used} > capacity {snap.capacity[fr]}"
    for cq in snap.cqs.values():
        for fr, q in cq.quotas.items():
            u = cq.usage.get(fr, 0.0)
            if cq.parent is None:
                assert u <= q.nominal + 1e-9
            elif q.borrowing_limit is not None:
                assert u <= q.nominal + q.borrowing_limit + 1e-9, f"{cq.name} {fr} borrows past its limit"
    for c in snap.cohorts.values():
        for fr, used in c.usage.items():
            if c.parent is None:
                assert used <= c.subtree.get(fr, 0.0) + 1e-9, f"root cohort {c.name} {fr}: used more than it holds"
            elif c.quota(fr).borrowing_limit is not None:
                limit = c.subtree.get(fr, 0.0) + c.quota(fr).borrowing_limit
                assert used <= limit + 1e-9, f"cohort {c.name} {fr}: borrows past its limit"


def _victims_ok(state: ClusterState, res) -> None:
    cqs = {c.name: c for c in state.cluster_queues}
    admitted = {w.name: w for w in state.admitted}
    pending = {w.name: w for w in state.pending}
    for p in res.preempted:
        v, pre = admitted[p.victim], pending[p.preemptor]
        vcq, pcq = cqs[v.cq], cqs[pre.cq]
        assert not vcq.protected
        if v.evidence and not v.checkpointed:
            # only a serving lane's bounded wait for the checkpoint of a run it lent to lapses
            assert pcq.serving and pcq.lend_to_evidence and pcq.evidence_reclaim_after is not None
            assert state.now - v.admitted_at >= pcq.evidence_reclaim_after - 1e-9
        if vcq.yields_to is not None:
            assert pcq.name in vcq.yields_to or pre.safety_approval
        if v.priority >= pre.priority:
            if v.cq == pre.cq:
                assert pcq.within_cluster_queue == "LowerOrNewerEqualPriority"
                assert v.priority == pre.priority and pre.created_at < v.created_at
            else:
                assert pcq.reclaim_within_cohort == "Any"
        assert p.reason in (
            "InClusterQueue",
            "InCohortReclamation",
            "InCohortReclaimWhileBorrowing",
            "InCohortFairSharing",
        )
        assert (p.reason == "InClusterQueue") == (v.cq == pre.cq)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(states())
def test_capacity_limits_and_victim_rules_hold(state: ClusterState) -> None:
    _usage_ok(state)
    res = schedule_cycle(state)
    _victims_ok(state, res)
    nxt = apply_result(state, res)
    _usage_ok(nxt)
    # The preemptors can be admitted once the victims are gone: still within every limit.
    res2 = admit_until_stable(nxt)
    _victims_ok(nxt, res2)
    _usage_ok(apply_result(nxt, res2))


@settings(max_examples=100, deadline=None)
@given(states(), st.randoms(use_true_random=False))
def test_same_input_same_output(state: ClusterState, rnd: random.Random) -> None:
    a = schedule_cycle(state)
    assert schedule_cycle(state) == a
    pend, adm = list(state.pending), list(state.admitted)
    rnd.shuffle(pend)
    rnd.shuffle(adm)
    b = schedule_cycle(replace(state, pending=tuple(pend), admitted=tuple(adm)))
    key = lambda r: (  # noqa: E731
        sorted(r.admitted, key=lambda x: x.name),
        sorted(r.preempted, key=lambda x: (x.victim, x.preemptor)),
        sorted(r.pending, key=lambda x: x.name),
    )
    assert key(a) == key(b)


@settings(max_examples=100, deadline=None)
@given(states())
def test_every_pending_workload_is_accounted_for(state: ClusterState) -> None:
    res = admit_until_stable(state)
    names = [a.name for a in res.admitted] + [p.name for p in res.pending] + [r.name for r in res.rejected]
    assert sorted(names) == sorted(w.name for w in state.pending)
    by_cq: dict[str, list[int]] = {}
    for p in res.pending:
        assert p.message and p.reason_code and p.condition == "QuotaReserved"
        by_cq.setdefault(p.cq, []).append(p.position)
        assert 1 <= p.position <= p.of
    for positions in by_cq.values():
        assert sorted(positions) == list(range(1, len(positions) + 1))


_POLICY = load_policy()


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.integers(0, 300), st.integers(0, 80))
def test_default_policy_states_keep_the_invariants(seed: int, n_admitted: int, n_pending: int) -> None:
    state = synthetic_state(n_pending, n_admitted, seed=seed, policy=_POLICY, scale=2.0)
    _usage_ok(state)
    res = admit_until_stable(state)
    _victims_ok(state, res)
    nxt = apply_result(state, res)
    _usage_ok(nxt)
    res2 = admit_until_stable(nxt)
    _victims_ok(nxt, res2)
    _usage_ok(apply_result(nxt, res2))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(states(), st.integers(1, 6), st.integers(1, 4), st.data())
def test_no_team_goes_over_its_limit_and_only_its_limit_holds_it(state, max_gpus, max_running, data):
    """With team limits on every queue: after the gate's loop no team holds more than its cap in a
    queue (counting what it held before), and every TeamLimit wait is really at its team's cap."""
    from gpu_platform.admission import TeamLimit, TeamLimits
    from gpu_platform.admission.engine import gpu_units

    teams = ("t0", "t1", "t2")
    own = data.draw(st.sampled_from(teams))
    limits = TeamLimits(TeamLimit(float(max_gpus), None, max_running), {own: TeamLimit(float(max_gpus + 2))})
    pick = random.Random(data.draw(st.integers(0, 2**16)))
    state = replace(
        state,
        cluster_queues=tuple(replace(c, team_limits=limits) for c in state.cluster_queues),
        admitted=tuple(replace(w, team=pick.choice(teams)) for w in state.admitted),
        pending=tuple(replace(w, team=pick.choice(teams)) for w in state.pending),
    )
    res = admit_until_stable(state)
    held: dict[tuple[str, str], list[float]] = {}
    before: dict[tuple[str, str], list[float]] = {}
    by_name = {w.name: w for w in state.pending}
    for w in state.admitted:
        for d in (held, before):
            u = d.setdefault((w.cq, w.team), [0.0, 0])
            u[0] += gpu_units(w)
            u[1] += 1
    for a in res.admitted:
        w = by_name[a.name]
        u = held.setdefault((w.cq, w.team), [0.0, 0])
        u[0] += gpu_units(w)
        u[1] += 1
    for (cq, team), (gpus, running) in held.items():
        cap = limits.for_team(team)
        old = before.get((cq, team), [0.0, 0])
        if gpus > old[0]:  # something was admitted for the team: it stayed within its caps
            assert gpus <= cap.max_gpus + 1e-9 and running <= cap.max_running, (cq, team, gpus, running)
    for p in res.pending:
        if p.reason_code == "TeamLimit":
            w = by_name[p.name]
            cap = limits.for_team(w.team)
            u = held.get((w.cq, w.team), [0.0, 0])
            assert u[0] + gpu_units(w) > cap.max_gpus + 1e-9 or u[1] + 1 > cap.max_running
    for r in res.rejected:
        if r.reason_code == "TeamLimit":
            w = by_name[r.name]
            assert gpu_units(w) > limits.for_team(w.team).max_gpus
