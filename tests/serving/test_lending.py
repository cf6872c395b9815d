"""Lending idle serving GPUs in the admission engine (docs/serving.md, Lending idle serving GPUs).

Pool: one flavor `l4` of 12 GPUs; the serving queue holds 8 (lends its idle part, reclaims with
Any, protected), labeling 4 of its own, research and maintenance (protected) nothing: they only
borrow. One replica (1 GPU) runs.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpu_platform.admission import (
    ClusterQueueSpec,
    ClusterState,
    FlavorSpec,
    ResourceQuota,
    Workload,
    admit_until_stable,
    apply_result,
    from_policy,
)
from gpu_platform.admission.model import ANY, IN_COHORT_RECLAMATION, LOWER_PRIORITY
from gpu_platform.policy import GPU, load_policy

F = "l4"


def _state(lending_limit: float | None = None) -> ClusterState:
    serving = ClusterQueueSpec(
        "online_serving", (ResourceQuota(F, GPU, 8.0, 0.0, lending_limit),), cohort="pool",
        reclaim_within_cohort=ANY, protected=True, serving=True,
    )
    research = ClusterQueueSpec("research", (ResourceQuota(F, GPU, 0.0),), cohort="pool", within_cluster_queue=LOWER_PRIORITY)
    labeler = ClusterQueueSpec("labeler", (ResourceQuota(F, GPU, 4.0),), cohort="pool")
    maint = ClusterQueueSpec("maint", (ResourceQuota(F, GPU, 0.0, 8.0),), cohort="pool", protected=True)
    evidence = ClusterQueueSpec("release", (ResourceQuota(F, GPU, 0.0, 8.0),), cohort="pool")
    yields = ClusterQueueSpec("replay", (ResourceQuota(F, GPU, 0.0, 8.0),), cohort="pool", yields_to=("incident",))
    return ClusterState(
        cluster_queues=(serving, research, labeler, maint, evidence, yields),
        flavors=(FlavorSpec(F, capacity={GPU: 12.0}),),
        cohorts=("pool",),
        admitted=(_replica(0, 0.0, admitted=True),),
    )


def _replica(i: int, t: float, admitted: bool = False) -> Workload:
    w = Workload(f"replica-{i}", "online_serving", {GPU: 1.0}, priority=900, created_at=t)
    return replace(w, flavor=F, admitted_at=t) if admitted else w


def test_batch_borrows_idle_serving_gpus_and_is_reclaimed_on_scale_up():
    s = replace(_state(), pending=(Workload("b1", "research", {GPU: 6.0}, priority=100, created_at=1),), now=1)
    res = admit_until_stable(s)
    assert [(a.name, a.borrowing) for a in res.admitted] == [("b1", True)]
    # the service scales from 1 to 8 replicas: 5 fit the free GPUs (12 - 1 - 6), the 6th reclaims
    s = apply_result(s, res)
    s = replace(s, pending=tuple(_replica(i, 10) for i in range(1, 8)), now=10)
    res = admit_until_stable(s)
    assert sorted(a.name for a in res.admitted) == [f"replica-{i}" for i in range(1, 6)]
    assert [(p.victim, p.preemptor_cq, p.reason) for p in res.preempted] == [("b1", "online_serving", IN_COHORT_RECLAMATION)]
    # once the borrower is evicted, the rest of the replicas are admitted within the serving quota
    s = apply_result(s, res)
    res = admit_until_stable(replace(s, now=40))
    assert sorted(a.name for a in res.admitted) == ["replica-6", "replica-7"]
    assert not res.preempted and all(not a.borrowing for a in res.admitted)


def test_without_lending_batch_cannot_borrow_serving_gpus():
    s = replace(_state(lending_limit=0.0), pending=(Workload("b1", "research", {GPU: 6.0}, priority=100, created_at=1),), now=1)
    res = admit_until_stable(s)
    assert not res.admitted  # only labeling's 4 idle GPUs are lendable
    s = replace(s, pending=(Workload("b2", "research", {GPU: 4.0}, priority=100, created_at=1),))
    assert [a.name for a in admit_until_stable(s).admitted] == ["b2"]


@pytest.mark.parametrize(
    ("cq", "evidence", "why"),
    [
        ("maint", False, "maint is protected"),
        ("release", True, "evidence job not checkpointed"),
        ("replay", False, "replay yields only to incident"),
    ],
)
def test_work_serving_could_not_take_back_borrows_only_beyond_its_idle_quota(cq, evidence, why):
    # free: 11 GPUs, of which 7 are the serving lane's idle quota: 4 may be borrowed
    wl = Workload("x", cq, {GPU: 5.0}, priority=500, created_at=1, evidence=evidence)
    res = admit_until_stable(replace(_state(), pending=(wl,), now=1))
    assert not res.admitted
    msg = res.pending[0].message
    assert "online_serving" in msg and why in msg and "only 4" in msg
    ok = replace(wl, requests={GPU: 4.0})
    assert [a.name for a in admit_until_stable(replace(_state(), pending=(ok,), now=1)).admitted] == ["x"]


def test_checkpointed_or_reclaimable_work_is_not_held_back():
    wl = Workload("x", "research", {GPU: 11.0}, priority=100, created_at=1)
    assert [a.name for a in admit_until_stable(replace(_state(), pending=(wl,), now=1)).admitted] == ["x"]


def test_protected_work_within_its_own_nominal_is_never_held_back():
    st = _state()
    maint = ClusterQueueSpec("maint", (ResourceQuota(F, GPU, 4.0, 0.0),), cohort="pool", protected=True)
    labeler = ClusterQueueSpec("labeler", (ResourceQuota(F, GPU, 0.0),), cohort="pool")
    st = replace(st, cluster_queues=tuple(maint if c.name == "maint" else labeler if c.name == "labeler" else c for c in st.cluster_queues))
    wl = Workload("x", "maint", {GPU: 4.0}, priority=500, created_at=1)
    assert [a.name for a in admit_until_stable(replace(st, pending=(wl,), now=1)).admitted] == ["x"]


def test_policy_serving_lane_is_a_serving_queue():
    pol = load_policy()
    serving = [lane.name for lane in pol.lanes.values() if lane.serving]
    assert serving
    state = from_policy(pol)
    specs = {c.name: c for c in state.cluster_queues}
    assert all(specs[name].serving for name in serving)
    assert not any(c.serving for c in state.cluster_queues if c.name not in serving)


def test_packaged_policy_with_lending_batch_borrows_and_is_reclaimed():
    """The packaged policy's serving lane, lending (`with_lending`): research borrows the idle L4s
    of online_serving (and of the other inference lanes); the service at 2 replicas scales to 6:
    two fit what is still free, two reclaim from research (InCohortReclamation)."""
    from gpu_platform.admission.serving_lending import scale_up_workloads
    from gpu_platform.serving.lending import with_lending

    pol = with_lending(load_policy())
    state = from_policy(pol)
    service = Workload(
        "perception-serving", "online_serving", {GPU: 2.0}, priority=pol.lane("online_serving").priority,
        flavor="l4-inference", admitted_at=0.0, pods=2, placement={"l4-inference/node-0": 2.0},
    )
    sweeps = tuple(
        Workload(f"sweep-{i}", "research_best_effort", {GPU: 4.0}, priority=100, created_at=1, allowed_flavors=("l4-inference",))
        for i in range(5)
    )
    s = replace(state, admitted=(service,), pending=sweeps, now=1)
    res = admit_until_stable(s)
    # 20 of the 22 idle L4s (4-GPU nodes; the service's 2 replicas on node-0), online_serving's 6 idle among them
    assert sorted(a.name for a in res.admitted) == [w.name for w in sweeps]
    assert all(a.flavor == "l4-inference" and a.borrowing for a in res.admitted)
    s = apply_result(s, res)
    more = scale_up_workloads(service, wanted=6, admitted=2, now=10, held=2)
    assert [w.name for w in more] == [f"perception-serving/replica-{i}" for i in range(3, 7)]
    assert all(w.requests == {GPU: 1.0} and w.flavor == "l4-inference" for w in more)
    res = admit_until_stable(replace(s, pending=tuple(more), now=10))
    assert len(res.admitted) == 2
    assert len(res.preempted) == 1
    victim = res.preempted[0]
    assert victim.victim.startswith("sweep-") and victim.reason == IN_COHORT_RECLAMATION
    assert victim.preemptor_cq == "online_serving"


def test_packaged_policy_lending_view():
    from gpu_platform.admission.serving_lending import lending_view
    from gpu_platform.serving.lending import idle_lendable, with_lending

    shipped = lending_view(load_policy())
    assert [(r["lane"], r["lendable"]) for r in shipped] == [("online_serving", 8.0)]  # no lending_limit: lends
    row = lending_view(with_lending(load_policy()))[0]
    assert row["lendable"] == 8.0 and row["reclaim_within_cohort"] == "Any"
    assert "research_best_effort" in row["reclaimed"] and "labeler_batch" in row["reclaimed"]
    assert row["held_off"]["platform_maintenance"] == "protected"
    # the packaged serving lane lends to evidence runs too (lend_to_evidence, a 30m bound on the
    # wait for their checkpoint); release evaluation is kept off by its own rule (yields_to)
    assert "candidate_train" in row["reclaimed"] and row["evidence_reclaim_after"].total_seconds() == 1800
    assert row["held_off"]["release_eval"] == "yields only to incident_response"
    assert idle_lendable(with_lending(load_policy()), "online_serving", "l4-inference", used=3) == 5
    assert idle_lendable(load_policy(), "online_serving", "l4-inference", used=3) == 5  # the shipped policy lends
    assert idle_lendable(with_lending(load_policy()), "online_serving", "l4-inference", used=9) == 0


def test_a_serving_lane_that_lends_to_evidence_lets_an_uncheckpointed_run_borrow_and_reclaims_it_once_checkpointed():
    # `lend_to_evidence`: the serving lane waits for an evidence run's checkpoint instead of keeping
    # it off its idle GPUs; the other lane rules (protected, yields_to) still hold
    st = _state()
    st = replace(st, cluster_queues=tuple(replace(c, lend_to_evidence=True) if c.serving else c for c in st.cluster_queues))
    run = Workload("x", "release", {GPU: 5.0}, priority=500, created_at=1, evidence=True)
    res = admit_until_stable(replace(st, pending=(run,), now=1))
    assert [(a.name, a.borrowing) for a in res.admitted] == [("x", True)]
    maint = Workload("m", "maint", {GPU: 5.0}, priority=500, created_at=1)
    assert "maint is protected" in admit_until_stable(replace(st, pending=(maint,), now=1)).pending[0].message
    # the service scales up while the run holds 5 of its GPUs: not before the run's checkpoint
    held = apply_result(replace(st, pending=(run,), now=1), res)
    wanted = tuple(_replica(i, 10) for i in range(1, 8))
    res = admit_until_stable(replace(held, pending=wanted, now=10))
    assert len(res.admitted) == 6 and not res.preempted  # 12 - 1 - 5 free
    ckpt = replace(held, admitted=tuple(replace(a, checkpointed=True) if a.name == "x" else a for a in held.admitted))
    res = admit_until_stable(replace(ckpt, pending=wanted, now=20))
    assert [(p.victim, p.reason) for p in res.preempted] == [("x", IN_COHORT_RECLAMATION)]


def test_evidence_reclaim_after_bounds_the_wait_for_a_borrowers_checkpoint_for_the_serving_lane_only():
    # `evidence_reclaim_after`: a run that has held the serving lane's GPUs that long without a
    # checkpoint is reclaimed all the same; before that, and for any other preemptor, it refuses
    st = _state()
    bounded = replace(st, cluster_queues=tuple(
        replace(c, lend_to_evidence=True, evidence_reclaim_after=1800.0) if c.serving else c for c in st.cluster_queues
    ))
    run = Workload("x", "release", {GPU: 5.0}, priority=500, created_at=1, evidence=True)
    held = apply_result(replace(bounded, pending=(run,), now=1), admit_until_stable(replace(bounded, pending=(run,), now=1)))
    assert [(a.name, a.admitted_at, a.checkpointed) for a in held.admitted if a.name == "x"] == [("x", 1, False)]
    wanted = tuple(_replica(i, 10) for i in range(1, 8))
    early = admit_until_stable(replace(held, pending=wanted, now=1800))  # 1799 s after its start
    assert len(early.admitted) == 6 and not early.preempted
    assert "evidence job not checkpointed (taken back after 30 min without one)" in early.pending[0].message
    late = admit_until_stable(replace(held, pending=wanted, now=1801))
    assert [(p.victim, p.reason, p.preemptor_cq) for p in late.preempted] == [("x", IN_COHORT_RECLAMATION, "online_serving")]
    # another lane's preemptor gets no such bound: the evidence rule still holds for it
    # (labeling reclaims with Any here; 5 replicas and the run leave it 2 of its own 4)
    full = replace(held, admitted=held.admitted + tuple(replace(_replica(i, 5), flavor=F, admitted_at=5) for i in range(1, 5)))
    full = replace(full, cluster_queues=tuple(
        replace(c, reclaim_within_cohort=ANY) if c.name == "labeler" else c for c in full.cluster_queues
    ))
    labeler = Workload("l", "labeler", {GPU: 4.0}, priority=100, created_at=20)
    res = admit_until_stable(replace(full, pending=(labeler,), now=10_000))
    assert not res.preempted and not res.admitted
    assert "evidence job not checkpointed" in res.pending[0].message
    ckpt = replace(full, admitted=tuple(replace(a, checkpointed=True) if a.name == "x" else a for a in full.admitted))
    assert [p.victim for p in admit_until_stable(replace(ckpt, pending=(labeler,), now=10_000)).preempted] == ["x"]
    # without the bound the serving lane waits for the checkpoint however long it takes
    unbounded = replace(held, cluster_queues=tuple(
        replace(c, evidence_reclaim_after=None) if c.serving else c for c in held.cluster_queues
    ))
    assert not admit_until_stable(replace(unbounded, pending=wanted, now=48 * 3600)).preempted


def test_evidence_reclaim_after_is_read_from_the_policy_and_needs_lend_to_evidence():
    import yaml

    from gpu_platform.admission import from_policy as view
    from gpu_platform.policy import parse_policy
    from gpu_platform.policy.loading import default_policy_path

    raw = yaml.safe_load(default_policy_path().read_text())
    shipped = load_policy().lanes["online_serving"]
    assert shipped.lend_to_evidence and shipped.evidence_reclaim_after.total_seconds() == 1800
    spec = next(c for c in view(load_policy()).cluster_queues if c.serving)
    assert spec.lend_to_evidence and spec.evidence_reclaim_after == 1800.0
    raw["lanes"]["online_serving"]["lend_to_evidence"] = False
    with pytest.raises(Exception, match="lanes.online_serving.evidence_reclaim_after: bounds the wait .* needs lend_to_evidence: true"):
        parse_policy(raw)
    raw["lanes"]["online_serving"]["lend_to_evidence"] = True
    raw["lanes"]["candidate_train"]["evidence_reclaim_after"] = "10m"
    with pytest.raises(Exception, match="lanes.candidate_train.evidence_reclaim_after: only a serving lane"):
        parse_policy(raw)
    del raw["lanes"]["candidate_train"]["evidence_reclaim_after"]
    raw["lanes"]["online_serving"]["evidence_reclaim_after"] = "0s"
    with pytest.raises(Exception, match="evidence_reclaim_after.*must be longer than 0"):
        parse_policy(raw)


def test_lend_to_evidence_moves_evidence_lanes_from_held_off_to_reclaimed_and_is_for_serving_lanes_only():
    import yaml

    from gpu_platform.admission.serving_lending import lending_view
    from gpu_platform.policy import parse_policy
    from gpu_platform.policy.loading import default_policy_path

    raw = yaml.safe_load(default_policy_path().read_text())
    raw["lanes"]["online_serving"]["lend_to_evidence"] = False
    del raw["lanes"]["online_serving"]["evidence_reclaim_after"]
    (row,) = lending_view(parse_policy(raw))
    assert "checkpointed" in row["held_off"]["candidate_train"] and row["evidence_reclaim_after"] is None
    raw["lanes"]["online_serving"]["lend_to_evidence"] = True
    (row,) = lending_view(parse_policy(raw))
    assert "candidate_train" in row["reclaimed"]  # an evidence lane: reclaimed once checkpointed
    # release evaluation is still kept off by its other rule: it yields only to incident response
    assert row["held_off"] == {"platform_maintenance": "protected", "release_eval": "yields only to incident_response"}
    raw["lanes"]["candidate_train"]["lend_to_evidence"] = True
    with pytest.raises(Exception, match="lanes.candidate_train.lend_to_evidence: only a serving lane"):
        parse_policy(raw)


def test_a_run_still_stopping_is_no_victim_again_however_long_ago_it_was_admitted():
    # the gate shows a preempted run whose pods still stop as an uncheckpointed evidence run; a
    # serving lane's bound on the wait for a checkpoint must not make it a victim a second time
    from gpu_platform.admission.preemption import exclusion
    from gpu_platform.admission.serving_lending import _Queue
    from gpu_platform.gate.tick import _stopping

    serving = _Queue("online_serving", ClusterQueueSpec(
        "online_serving", (ResourceQuota(F, GPU, 8.0, 0.0),), cohort="pool", reclaim_within_cohort=ANY,
        protected=True, serving=True, lend_to_evidence=True, evidence_reclaim_after=1800.0,
    ))
    research = _Queue("research", ClusterQueueSpec("research", (ResourceQuota(F, GPU, 0.0),), cohort="pool"))
    run = Workload("r", "research", {GPU: 4.0}, admitted_at=0.0, flavor=F, expected_duration_s=7200.0)
    replica = _replica(9, 3600.0)
    assert exclusion(run, research, replica, serving, now=3600.0) is None  # running: a victim
    stopping = _stopping(run, 3600.0)
    assert (stopping.admitted_at, stopping.admitted_at + stopping.expected_duration_s) == (3600.0, 7200.0)  # same end
    assert exclusion(stopping, research, replica, serving, now=3600.0).startswith("evidence job not checkpointed")
    lapsed = replace(run, evidence=True)  # an evidence run held an hour without a checkpoint
    assert exclusion(lapsed, research, replica, serving, now=3600.0) is None
    assert _stopping(replace(run, expected_duration_s=None), 3600.0).expected_duration_s is None
