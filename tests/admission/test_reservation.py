"""Head reservations (`admission/reservation.py`): a lane with a wait target keeps its blocked
head's GPUs from lower-priority work that would delay it, as EASY backfilling does; the gate plans
them from its admitted requests, the simulator from its running jobs."""

from __future__ import annotations

from dataclasses import replace

from gpu_platform.admission import admit_until_stable, schedule_cycle
from gpu_platform.admission.model import ClusterQueueSpec, ClusterState, FlavorSpec, ResourceQuota, Workload
from gpu_platform.admission.reservation import (
    Reservation,
    Running,
    plan_reservations,
    reservation_refusal,
    reservations_for,
    shadow,
)
from gpu_platform.policy import load_policy
from gpu_platform.simulate import TraceJob, simulate
from gpu_platform.simulate.scenario import Scenario

GPU = "nvidia.com/gpu"


def test_shadow_is_the_first_end_that_frees_enough():
    # 16 GPUs wanted, 4 free; running work ends at 100 (4), 200 (8), 300 (8)
    assert shadow(0.0, 16, 4, [(100.0, 4), (200.0, 8), (300.0, 8)]) == (200.0, 0.0)
    assert shadow(0.0, 14, 4, [(100.0, 4), (200.0, 8)]) == (200.0, 2.0)
    assert shadow(50.0, 4, 4, []) == (50.0, 0.0)  # fits now
    assert shadow(0.0, 16, 4, [(100.0, 4)]) is None  # never, with this work
    assert shadow(0.0, 16, 4, [(None, 8), (100.0, 8)]) is None  # an unknown end comes first


def test_a_head_reserves_the_flavor_where_it_starts_first_or_the_free_gpus_that_hold_it_now():
    # a: full until 500; b: 2 of 10 free, 2 more at 50, 6 more at 100
    running = [Running("a", 8, 500.0), Running("b", 6, 100.0), Running("b", 2, 50.0)]
    caps = {"a": 8.0, "b": 10.0}
    head = Workload("big", "cand", {GPU: 8}, priority=600)
    (r,) = plan_reservations(0.0, [head], running, caps, lambda wl: ("a", "b"))
    assert (r.holder, r.cq, r.priority, r.flavor, r.until, r.extra) == ("big", "cand", 600, "b", 100.0, 2.0)
    (r,) = plan_reservations(0.0, [head], running, caps, lambda wl: ("a",))
    assert (r.flavor, r.until, r.extra) == ("a", 500.0, 0.0)
    # b has 2 free now: the head that they hold keeps them from now (Kueue may not admit it there
    # this cycle: work within its nominal quota goes first), nothing spare beyond them
    small = Workload("small", "cand", {GPU: 2}, priority=600)
    (r,) = plan_reservations(0.0, [small], running, caps, lambda wl: ("a", "b"))
    assert (r.flavor, r.until, r.extra, r.gpus) == ("b", 0.0, 0.0, 2)
    one = Workload("one", "cand", {GPU: 1}, priority=600)
    (r,) = plan_reservations(0.0, [one], running, caps, lambda wl: ("b",))
    assert (r.until, r.extra) == (0.0, 1.0)
    # unknown ends: no reservation
    assert plan_reservations(0.0, [head], [Running("a", 8, None)], {"a": 8.0}, lambda wl: ("a",)) == ()


def _state(reservations, now=0.0):
    return ClusterState(
        cluster_queues=(), flavors=(FlavorSpec("b", capacity={GPU: 8}),), now=now, reservations=tuple(reservations)
    )


def test_lower_priority_work_that_would_delay_the_head_is_held_and_told_why():
    res = Reservation("big", "candidate_train", 600, "b", 8, until=3600.0, extra=2.0)
    st = _state([res])
    long = Workload("long", "research", {GPU: 4}, priority=100, expected_duration_s=7200)
    why = reservation_refusal(st, long, "b", 4)
    assert why is not None and "reserved for big (candidate_train" in why and "1.0 h" in why
    # ends by the head's expected start: may backfill
    short = replace(long, name="short", expected_duration_s=1800)
    assert reservation_refusal(st, short, "b", 4) is None
    # fits the GPUs spare at the head's start
    assert reservation_refusal(st, long, "b", 2) is None
    # another flavor, the head itself, the head's priority or higher: never held
    assert reservation_refusal(st, long, "a", 4) is None
    assert reservation_refusal(st, replace(long, name="big"), "b", 4) is None
    assert reservation_refusal(st, replace(long, priority=600), "b", 4) is None
    assert reservation_refusal(st, replace(long, priority=800), "b", 4) is None
    # unknown duration: held
    assert "unknown" in reservation_refusal(st, replace(long, expected_duration_s=None), "b", 4)


def _queues():
    q = (ResourceQuota("b", GPU, 8.0),)
    return (
        ClusterQueueSpec("cand", q, cohort="pool", reserve_head=True),
        ClusterQueueSpec("low", (ResourceQuota("b", GPU, 0.0),), cohort="pool"),
    )


def test_the_cycle_keeps_a_reserved_flavor_from_a_lower_lane_and_admits_what_backfills():
    # 8 GPUs, nominal 4 + 4; the head (8) must borrow, so Kueue keeps nothing for it: the lower
    # lane's job within its own nominal quota would take the 2 free GPUs
    cqs = (
        ClusterQueueSpec("cand", (ResourceQuota("b", GPU, 4.0),), cohort="pool", reserve_head=True),
        ClusterQueueSpec("low", (ResourceQuota("b", GPU, 4.0),), cohort="pool"),
    )
    admitted = (Workload("run", "cand", {GPU: 6}, priority=600, flavor="b", admitted_at=0.0, expected_duration_s=3600),)
    pending = (
        Workload("big", "cand", {GPU: 8}, priority=600, created_at=10.0, expected_duration_s=3600),
        Workload("late", "low", {GPU: 2}, priority=100, created_at=20.0, expected_duration_s=7200),
        Workload("quick", "low", {GPU: 2}, priority=100, created_at=30.0, expected_duration_s=600),
    )
    st = ClusterState(cqs, (FlavorSpec("b", capacity={GPU: 8}),), admitted, pending, cohorts=("pool",), now=100.0)
    plan = reservations_for(st)
    assert [(r.holder, r.flavor, r.until) for r in plan] == [("big", "b", 3600.0)]
    # `late` would run past the head's start: the reservation holds it, and since the gate does
    # not hand a held workload to Kueue it takes no head turn; `quick` ends long before the
    # head's start and backfills in the same cycle
    res = schedule_cycle(replace(st, reservations=plan))
    assert [a.name for a in res.admitted] == ["quick"]
    late = next(p for p in res.pending if p.name == "late")
    assert "reserved for big" in late.message and "h past it" in late.message
    res = admit_until_stable(replace(st, reservations=plan))
    assert [a.name for a in res.admitted] == ["quick"]
    # without the reservation the lower lane takes the 2 GPUs the head is waiting for
    assert {a.name for a in admit_until_stable(st).admitted} == {"late"}


def test_lanes_reserve_when_their_targets_say_so():
    import yaml

    from gpu_platform.admission import from_policy
    from gpu_platform.policy import default_policy_path, parse_policy

    st = from_policy(load_policy(), [], [])
    # on in the packaged policy for the evidence lanes with a wait target
    assert {c.name for c in st.cluster_queues if c.reserve_head} == {"candidate_train", "release_eval", "incident_response"}
    raw = yaml.safe_load(default_policy_path().read_text())
    raw["lanes"]["candidate_train"]["targets"]["reserve_head"] = False
    raw["lanes"]["research_best_effort"]["targets"]["reserve_head"] = True
    del raw["lanes"]["research_best_effort"]["targets"]["wait_p95"]  # no wait_p95: no effect
    flags = {c.name: c.reserve_head for c in from_policy(parse_policy(raw), [], []).cluster_queues}
    assert not flags["candidate_train"] and not flags["research_best_effort"] and flags["release_eval"]
    raw["lanes"]["research_best_effort"]["targets"]["wait_p95"] = "72h"
    assert next(c for c in from_policy(parse_policy(raw), [], []).cluster_queues if c.name == "research_best_effort").reserve_head


def test_in_the_simulator_a_large_head_is_not_starved_by_a_stream_of_small_lower_jobs():
    # 8 GPUs: `cand` (reserves) holds 4 until t=100; 1-GPU research jobs of 200 s arrive every
    # 50 s from t=5, and an 8-GPU candidate job at 10. The one research job started at 5 ends at
    # 205: with the reservation the big job starts then (no later research job may start on its
    # GPUs, each would end after 205); without it they keep taking the freed GPUs and it waits
    # until the stream ends.
    cqs = _queues()
    base = ClusterState(cqs, (FlavorSpec("b", capacity={GPU: 8}),), cohorts=("pool",))
    jobs = [TraceJob("first", 0, 100, 4, "cand"), TraceJob("big", 10, 100, 8, "cand")]
    jobs += [TraceJob(f"r{i}", 5 + 50 * i, 200, 1, "low") for i in range(40)]
    prio = {"cand": 600, "low": 100}

    def wl(job):
        return Workload(job.job_id, job.lane, {GPU: job.gpus}, priority=prio[job.lane], created_at=job.submit_ts,
                        expected_duration_s=job.duration_s)

    def big_start(reserve: bool) -> float:
        state = base if reserve else replace(base, cluster_queues=tuple(replace(c, reserve_head=False) for c in cqs))
        res = simulate(Scenario("t", "t", state, wl), jobs)
        return next(r for r in res.runs if r.job.job_id == "big").first_admit

    assert big_start(True) == 205.0
    assert big_start(False) > 1000.0


def test_the_simulators_shortcuts_give_the_full_queue_outcome_under_reservations():
    # with reservations on (opt-in), showing identical workloads one at a time and folding held
    # running work gives the same admissions as showing the engine every workload
    from pathlib import Path

    import yaml

    from gpu_platform.cli.simulate import LANE_MAPS
    from gpu_platform.policy import default_policy_path, parse_policy
    from gpu_platform.simulate import SCENARIOS, load_lane_map, load_trace

    raw = yaml.safe_load(default_policy_path().read_text())
    for lane in ("candidate_train", "release_eval", "incident_response"):
        raw["lanes"][lane]["targets"]["reserve_head"] = True
    pol = parse_policy(raw)
    fix = Path(__file__).parents[1] / "fixtures" / "simulate" / "elasticflow-cluster04-head2000.csv"
    jobs = load_trace(fix, lane_map=load_lane_map(LANE_MAPS / "elasticflow-fleet.yaml")).jobs[:400]
    fast = simulate(SCENARIOS["policy"](pol, 96), jobs)
    full = simulate(SCENARIOS["policy"](pol, 96), jobs, window=10**9, per_shape=10**9, merge_held=False)

    def key(res):
        return {r.job.job_id: (r.first_admit, r.last_admit, r.end, r.preemptions) for r in res.runs}

    assert key(fast) == key(full)
    assert any("is reserved for" in r.wait_reason for r in fast.runs)  # reservations held someone


def _two_flavors(low_jobs):
    """Flavor b (8 GPUs, 6 held by `run` until 3600 s, reserved for the 8-GPU head `big`) and flavor
    c (4 GPUs, all held by `full`, no known end). The lower lane may use both."""
    cqs = (
        ClusterQueueSpec("cand", (ResourceQuota("b", GPU, 8.0),), cohort="pool", reserve_head=True),
        ClusterQueueSpec("low", (ResourceQuota("b", GPU, 0.0), ResourceQuota("c", GPU, 4.0)), cohort="pool"),
    )
    admitted = (
        Workload("run", "cand", {GPU: 6}, priority=600, flavor="b", admitted_at=0.0, expected_duration_s=3600),
        Workload("full", "low", {GPU: 4}, priority=100, flavor="c", admitted_at=0.0),
    )
    pending = (Workload("big", "cand", {GPU: 8}, priority=600, created_at=10.0, expected_duration_s=3600), *low_jobs)
    flavors = (FlavorSpec("b", capacity={GPU: 8}), FlavorSpec("c", capacity={GPU: 4}))
    st = ClusterState(cqs, flavors, admitted, pending, cohorts=("pool",), now=100.0)
    return replace(st, reservations=reservations_for(st))


def test_look_alikes_of_a_head_a_reservation_refused_are_set_aside_by_duration():
    # `late` is refused b by the reservation (it would run past 3600 s) and finds c full: it is not
    # held on every flavor, so it takes its head turn and fails. Its look-alike `later` runs even
    # longer and is set aside with it (Kueue's equivalence); `quick` looks the same but ends before
    # the head's start, so it is not set aside and backfills on b.
    low = (
        Workload("late", "low", {GPU: 2}, priority=100, created_at=20.0, expected_duration_s=7200),
        Workload("later", "low", {GPU: 2}, priority=100, created_at=25.0, expected_duration_s=9000),
        Workload("quick", "low", {GPU: 2}, priority=100, created_at=30.0, expected_duration_s=600),
    )
    st = _two_flavors(low)
    assert [(r.holder, r.flavor) for r in st.reservations] == [("big", "b")]
    res = admit_until_stable(st)
    assert [a.name for a in res.admitted] == ["quick"] and res.admitted[0].flavor == "b"
    later = next(p for p in res.pending if p.name == "later")
    assert "equivalent to late" in later.message
    # a head no reservation refused (it ends by the head's start) that failed on capacity alone: a
    # look-alike's duration does not matter, every one needs 6 GPUs, more than b's 2 free or c holds
    big_low = (
        replace(low[0], requests={GPU: 6}, expected_duration_s=600),
        replace(low[1], requests={GPU: 6}),
        replace(low[2], requests={GPU: 6}, expected_duration_s=300),
    )
    res = admit_until_stable(_two_flavors(big_low))
    assert res.admitted == []
    msgs = {p.name: p.message for p in res.pending}
    assert "reserved" not in msgs["late"] and "free" in msgs["late"]
    assert "equivalent to late" in msgs["quick"] and "equivalent to late" in msgs["later"]


def test_a_head_that_fits_now_keeps_those_gpus_from_a_lower_lane_within_its_nominal_quota():
    # Two flavors, h (full) and l (8 free). The head (8) must borrow on l; the lower lane's job
    # (4) fits within its own nominal quota there, and Kueue's cycle takes work that needs no
    # borrowing first, whatever its priority (entryOrdering): without a reservation `late` takes
    # 4 of the 8 GPUs and the head waits on; with it, `late` is held and the head is admitted.
    cqs = (
        ClusterQueueSpec(
            "cand", (ResourceQuota("h", GPU, 0.0), ResourceQuota("l", GPU, 0.0)), cohort="pool", reserve_head=True
        ),
        ClusterQueueSpec("low", (ResourceQuota("h", GPU, 8.0), ResourceQuota("l", GPU, 8.0)), cohort="pool"),
    )
    flavors = (FlavorSpec("h", capacity={GPU: 8}), FlavorSpec("l", capacity={GPU: 8}))
    admitted = (Workload("mine", "low", {GPU: 8}, priority=100, flavor="h", admitted_at=0.0, expected_duration_s=9000),)
    pending = (
        Workload("big", "cand", {GPU: 8}, priority=600, created_at=10.0, expected_duration_s=3600),
        Workload("late", "low", {GPU: 4}, priority=100, created_at=20.0, expected_duration_s=7200),
    )
    st = ClusterState(cqs, flavors, admitted, pending, cohorts=("pool",), now=100.0)
    plan = reservations_for(st)
    assert [(r.holder, r.flavor, r.until, r.extra) for r in plan] == [("big", "l", 100.0, 0.0)]
    res = admit_until_stable(replace(st, reservations=plan))
    assert [(a.name, a.flavor) for a in res.admitted] == [("big", "l")]
    late = next(p for p in res.pending if p.name == "late")
    assert "reserved for big" in late.message
    assert [a.name for a in admit_until_stable(st).admitted] == ["late"]


def test_the_gate_reserves_nothing_for_a_head_its_own_ceiling_blocks():
    # release-like lane: nominal 2 + borrowing_limit 2 on b, 4 in use: its head (2) cannot be
    # admitted until its own work ends, which no lower lane delays, so it holds nothing
    cqs = (
        ClusterQueueSpec("rel", (ResourceQuota("b", GPU, 2.0, borrowing_limit=2.0),), cohort="pool", reserve_head=True),
        ClusterQueueSpec("low", (ResourceQuota("b", GPU, 6.0),), cohort="pool"),
    )
    admitted = (Workload("r1", "rel", {GPU: 4}, priority=800, flavor="b", admitted_at=0.0, expected_duration_s=3600),)
    pending = (Workload("r2", "rel", {GPU: 2}, priority=800, created_at=10.0, expected_duration_s=600),)
    st = ClusterState(cqs, (FlavorSpec("b", capacity={GPU: 8}),), admitted, pending, cohorts=("pool",), now=100.0)
    assert reservations_for(st) == ()
    # below its ceiling it reserves the free GPUs that hold it
    below = replace(st, admitted=(replace(admitted[0], requests={GPU: 2}),))
    assert [(r.holder, r.until) for r in reservations_for(below)] == [("r2", 100.0)]


def test_a_serving_lanes_idle_quota_an_evidence_head_may_not_borrow_is_never_free_for_it():
    # l: 8 GPUs, 6 of them a serving lane's idle quota. An evidence run (not checkpointed) may not
    # borrow them (the serving lane could not take them back), so the 2 GPUs that are free for it
    # cannot hold a 4-GPU head now: it reserves from when the running job ends, not from now
    cqs = (
        ClusterQueueSpec("cand", (ResourceQuota("l", GPU, 0.0),), cohort="pool", reserve_head=True),
        ClusterQueueSpec("serve", (ResourceQuota("l", GPU, 6.0),), cohort="pool", serving=True),
        ClusterQueueSpec("low", (ResourceQuota("l", GPU, 2.0),), cohort="pool"),
    )
    flavors = (FlavorSpec("l", capacity={GPU: 10}),)
    admitted = (Workload("mine", "low", {GPU: 2}, priority=100, flavor="l", admitted_at=0.0, expected_duration_s=900),)
    head = Workload("run", "cand", {GPU: 4}, priority=600, created_at=10.0, expected_duration_s=3600, evidence=True)
    st = ClusterState(cqs, flavors, admitted, (head,), cohorts=("pool",), now=100.0)
    assert [(r.holder, r.until, r.extra) for r in reservations_for(st)] == [("run", 900.0, 0.0)]
    # a checkpointed run may be taken back: the serving lane lends it the idle GPUs, and 8 are free
    done = replace(head, checkpointed=True)
    assert [(r.holder, r.until, r.extra) for r in reservations_for(replace(st, pending=(done,)))] == [("run", 100.0, 4.0)]


def test_on_nodes_too_gpus_a_head_may_not_take_do_not_make_it_fit_now():
    # l: 16 GPUs on nodes, 8 in use until 500; its free nodes would hold the head's pods now, but
    # 6 of the 8 free GPUs are a serving lane's idle quota the head may not borrow: it starts at
    # 500, when enough GPUs it may take are free, not now
    running = [Running("l", 8, 500.0)]
    head = Workload("run", "cand", {GPU: 4}, priority=600, pods=1)

    def on_nodes(wl, flavor):
        return True, None

    (r,) = plan_reservations(0.0, [head], running, {"l": 16.0}, lambda wl: ("l",), on_nodes, lambda wl, f: 6.0)
    assert (r.flavor, r.until, r.extra) == ("l", 500.0, 0.0)
    (r,) = plan_reservations(0.0, [head], running, {"l": 16.0}, lambda wl: ("l",), on_nodes, lambda wl, f: 0.0)
    assert (r.until, r.extra) == (0.0, 0.0)
    # never enough it may take: no reservation on that flavor
    assert plan_reservations(0.0, [head], running, {"l": 16.0}, lambda wl: ("l",), on_nodes, lambda wl, f: 14.0) == ()
