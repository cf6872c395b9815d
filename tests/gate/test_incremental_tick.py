"""The sensor tick keeps what did not change between ticks (state rows by version, workloads,
parsed requests, inputs and targets per request object); with the ledger, the runs and the
queue changing between ticks, what it decides must equal a tick computed from scratch: a new
Ledger, every per-process cache emptied, the states derived from the event log alone."""

from __future__ import annotations

from dataclasses import fields, replace
from datetime import UTC, datetime, timedelta

import dagster as dg

from gpu_platform.admission.model import PendingInfo
from gpu_platform.gate import tick as tick_module
from gpu_platform.gate.blockers import latest_checkpoint, name_blockers, preemptions_of
from gpu_platform.gate.checkpoints import checkpoint_dir, has_checkpoint
from gpu_platform.gate.tick import TAG_REQUEST_ID, budget_period_start, plan_tick
from gpu_platform.observe.queueview import lane_snapshots, queue_digest
from gpu_platform.observe.queueview import snapshot as snapshot_module
from gpu_platform.requests.ledger import ACTIVE_STATES, PENDING_STATES, Ledger
from tests.gate.helpers import add_run, submit, tick

LIVE = (*PENDING_STATES, *ACTIVE_STATES)
_CACHES = (tick_module._WORKLOADS, tick_module._AGED, tick_module._INPUTS, snapshot_module._STATICS, snapshot_module._ENTRIES)


def _decide(policy, led, states, now, home):
    """What the sensor decides on `states` (its plan and the gpu_queue snapshot), recording nothing."""
    plan = plan_tick(
        policy,
        states,
        now,
        checkpointed=lambda rid: has_checkpoint(checkpoint_dir(home, rid)),
        spent=led.reserved_by_lane(budget_period_start(policy.budget_period, now)),
        preempted=preemptions_of(led, states),
        checkpoint_of=lambda rid: latest_checkpoint(checkpoint_dir(home, rid)),
    )
    snaps = lane_snapshots(
        policy,
        states,
        now,
        admitted_now={x.request_id: x.flavor for x in plan.launches},
        requeued_now=[p.victim for p in plan.preemptions],
        rejected_now=[r.name for r in plan.rejections],
        waits=plan.waits,
        running_ids=set(),
    )
    return plan, snaps


def _from_scratch(policy, url, now, home):
    saved = [dict(c) for c in _CACHES]
    for c in _CACHES:
        c.clear()
    try:
        fresh = Ledger(url)
        states = fresh.states_from_log(LIVE)
        return states, _decide(policy, fresh, states, now, home)
    finally:
        for c, kept in zip(_CACHES, saved, strict=True):
            c.clear()
            c.update(kept)


def _check_same_as_from_scratch(policy, env) -> int:
    """The warm tick's decisions (the sensor's own Ledger, caches as the ticks left them) equal
    the ones from scratch; returns how many requests are live."""
    instance, _ledger, resources, home = env
    led = resources["ledger"].ledger()
    now = datetime.now(UTC)
    warm_states = led.states(LIVE)
    warm_plan, warm_snaps = _decide(policy, led, warm_states, now, home)
    cold_states, (cold_plan, cold_snaps) = _from_scratch(policy, led.url, now, home)
    assert warm_states == cold_states
    assert warm_plan.launches == cold_plan.launches
    assert warm_plan.waits == cold_plan.waits
    assert warm_plan.preemptions == cold_plan.preemptions
    assert warm_plan.rejections == cold_plan.rejections
    assert warm_snaps == cold_snaps
    assert queue_digest(warm_snaps) == queue_digest(cold_snaps) == _encoded_digest(cold_snaps)
    return len(warm_states)


def _encoded_digest(snaps) -> str:
    """queue_digest as it reads, without its last-document cache."""
    saved = list(snapshot_module._LAST_DIGEST)
    snapshot_module._LAST_DIGEST.clear()
    try:
        return queue_digest(snaps)
    finally:
        snapshot_module._LAST_DIGEST[:] = saved


def _launch(instance, ledger, result, runs, status=dg.DagsterRunStatus.STARTED):
    for r in getattr(result, "run_requests", None) or []:
        rid = r.tags[TAG_REQUEST_ID]
        runs[rid] = add_run(instance, rid, int(r.tags["gpu-platform/attempt"]), status, lane=ledger.get(rid).lane)


def test_ticks_with_changes_between_them_decide_as_from_scratch(env, policy):
    instance, ledger, resources, home = env
    research = [
        submit(ledger, policy, "research_best_effort", gpu_type="h100-ondemand", gpu_count=8,
               experiment_id=f"exp-{i}", output_artifact_ids=[f"r{i}"])
        for i in range(2)
    ]
    small = [
        submit(ledger, policy, lane, output_artifact_ids=[f"{lane}-{i}"])
        for i in range(4)
        for lane in ("baseline_rebuild", "candidate_train", "labeler_batch", "release_eval")
    ]
    # a consumer of a producer still pending: waits for its upstream
    consumer = submit(ledger, policy, "release_eval", dataset_ids=["labeler_batch-3"], output_artifact_ids=["rel-up"])
    runs: dict[str, str] = {}
    assert _check_same_as_from_scratch(policy, env) == len(research) + len(small) + 1
    first = tick(instance, resources)
    _launch(instance, ledger, first, runs)
    for rid in research:
        if rid in runs:
            ckpt = checkpoint_dir(home, rid)
            ckpt.mkdir(parents=True)
            (ckpt / "ckpt-00000007.npz").write_bytes(b"x")
    _check_same_as_from_scratch(policy, env)
    tick(instance, resources)  # steady: nothing changed since the last tick
    _check_same_as_from_scratch(policy, env)

    # new requests, an incident that preempts, a pending request refused (canceled)
    submit(ledger, policy, "incident_response", gpu_count=8)
    late = [submit(ledger, policy, "map_semantic_batch", output_artifact_ids=[f"late-{i}"]) for i in range(3)]
    pending = [rid for rid in small if ledger.state(rid).state in PENDING_STATES]
    ledger.record(pending[-1], "rejected", "Canceled: withdrawn by its owner")
    _check_same_as_from_scratch(policy, env)
    result = tick(instance, resources)
    _launch(instance, ledger, result, runs)
    _check_same_as_from_scratch(policy, env)

    # runs finish, fail, are canceled; the preempted victims' runs stop
    admitted = [s.request_id for s in ledger.states(ACTIVE_STATES) if s.request_id in runs]
    requeued = [s.request_id for s in ledger.states(["requeued"]) if s.request_id in runs]
    for rid in requeued:
        instance.report_run_canceled(instance.get_run_by_id(runs[rid]))
    ended = {}
    for rid, status in zip(admitted, ("success", "failure", "canceled"), strict=False):
        run = instance.get_run_by_id(runs[rid])
        if status == "success":
            instance.delete_run(run.run_id)
            runs[rid] = add_run(instance, rid, ledger.state(rid).attempts, dg.DagsterRunStatus.SUCCESS,
                                lane=ledger.get(rid).lane)
        elif status == "failure":
            instance.report_run_failed(run)
        else:
            instance.report_run_canceled(run)
        ended[rid] = status
    for _ in range(3):
        _check_same_as_from_scratch(policy, env)
        result = tick(instance, resources)
        _launch(instance, ledger, result, runs)
    _check_same_as_from_scratch(policy, env)

    # the ticks did change the queue: something finished, failed, was preempted and came back
    assert {ledger.state(rid).state for rid in ended} >= {"finished", "failed"}
    assert ledger.state(pending[-1]).state == "rejected"
    assert any(ledger.state(rid).preemptions for rid in research) or requeued
    assert ledger.state(consumer).state in (*PENDING_STATES, *ACTIVE_STATES)
    assert all(ledger.state(rid).state != "submitted" for rid in late)


def test_a_reason_with_blockers_named_keeps_every_other_field_of_the_wait(policy):
    """name_blockers builds the longer wait field by field; a field added to PendingInfo must not be lost."""
    assert [f.name for f in fields(PendingInfo)] == [
        "name", "cq", "reason_code", "condition", "message", "position", "of", "estimated_start", "flavor", "queue",
    ]
    from gpu_platform.requests.ledger import RequestState
    from gpu_platform.requests.model import validate_request
    from tests.gate.helpers import raw_request

    now = datetime(2026, 12, 1, 12, tzinfo=UTC)
    holder = validate_request(raw_request("baseline_rebuild", gpu_type="h100-ondemand"), policy)
    waiter = validate_request(raw_request("candidate_train", gpu_type="h100-ondemand"), policy)
    states = [
        RequestState(1, "req-holder", holder, "admitted", "QuotaReserved", "h100-ondemand", None, now, now, 1, {}),
        RequestState(2, "req-waiter", waiter, "waiting", "", None, None, now, now, 0, {}),
    ]
    w = PendingInfo("req-waiter", "candidate_train", "Inadmissible", "QuotaReserved", "Inadmissible: no room",
                    3, 7, now.timestamp() + 60, "h100-ondemand", "inadmissible")
    (out,) = name_blockers(policy, states, [w], now=now + timedelta(minutes=1))
    assert out.message.startswith("Inadmissible: no room; the GPUs it can use (")
    assert "req-holder" in out.message or (holder.name or "") in out.message
    assert out == replace(w, message=out.message)


def _runs_both_ways(instance, states):
    """The sensor's incremental read of the runs (its cache as the ticks left it, then updated)
    and a read from scratch (cache emptied), the clock-dependent starting_for set aside."""
    from assets import gate

    warm = gate._runs(instance, states)
    cache = gate._RUN_CACHE
    saved = (cache.instance_key, dict(cache.runs), cache.full_at)
    cache.instance_key = None
    try:
        cold = gate._runs(instance, states)
    finally:
        cache.instance_key, cache.runs, cache.full_at = saved
    for w, c in zip(warm, cold, strict=True):
        assert (w.starting_for is None) == (c.starting_for is None)
        if w.starting_for is not None:
            assert abs(w.starting_for - c.starting_for) < 5.0
    assert [replace(r, starting_for=None) for r in warm] == [replace(r, starting_for=None) for r in cold]
    return warm


def test_runs_read_incrementally_equal_runs_read_from_scratch(env, policy, monkeypatch):
    """Between ticks runs finish, fail, are canceled, deleted, replaced, added, start; requests
    leave and join the live set: the cached read sees each change as a full read does."""
    from assets import gate

    instance, ledger, _resources, _home = env
    rids = [submit(ledger, policy, "baseline_rebuild", output_artifact_ids=[f"b-{i}"]) for i in range(8)]
    ledger.record_many([(rid, "admitted", "test", "h100-ondemand", None, {"attempt": 1}) for rid in rids])
    runs = {rid: add_run(instance, rid, 1, lane="baseline_rebuild") for rid in rids[:6]}
    starting = add_run(instance, rids[6], 1, dg.DagsterRunStatus.STARTING, lane="baseline_rebuild")

    def live():
        return ledger.states(LIVE)

    first = _runs_both_ways(instance, live())
    assert {r.request_id for r in first} == set(rids[:7])
    assert next(r for r in first if r.run_id == starting).starting_for is not None

    # nothing changed: the same runs again, read from the cache
    again = _runs_both_ways(instance, live())
    assert [replace(r, starting_for=None) for r in again] == [replace(r, starting_for=None) for r in first]
    instance.report_run_failed(instance.get_run_by_id(runs[rids[0]]))
    instance.report_run_canceled(instance.get_run_by_id(runs[rids[1]]))
    instance.delete_run(runs[rids[2]])
    second = _runs_both_ways(instance, live())
    by_id = {r.run_id: r for r in second}
    assert by_id[runs[rids[0]]].status == "failure"
    assert by_id[runs[rids[1]]].status == "canceled"
    assert runs[rids[2]] not in by_id

    # a run deleted and another added between two ticks; a run of a request with none yet; the
    # starting run started
    instance.delete_run(runs[rids[3]])
    runs[rids[3]] = add_run(instance, rids[3], 2, dg.DagsterRunStatus.SUCCESS, lane="baseline_rebuild")
    runs[rids[7]] = add_run(instance, rids[7], 1, dg.DagsterRunStatus.NOT_STARTED, lane="baseline_rebuild")
    instance.report_run_canceled(instance.get_run_by_id(starting))
    third = _runs_both_ways(instance, live())
    by_id = {r.run_id: r for r in third}
    assert by_id[runs[rids[3]]].status == "success" and by_id[runs[rids[3]]].attempt == 2
    assert by_id[runs[rids[7]]].phase == "NOT_STARTED" and by_id[runs[rids[7]]].starting_for is not None
    assert by_id[starting].status == "canceled" and by_id[starting].starting_for is None

    # a request that leaves the live set takes its runs with it; one that comes back brings them
    ledger.record(rids[4], "finished", "test")
    assert rids[4] not in {r.request_id for r in _runs_both_ways(instance, live())}
    back = [*live(), replace(ledger.state(rids[4]), state="admitted")]
    assert rids[4] in {r.request_id for r in _runs_both_ways(instance, back)}
    assert _runs_both_ways(instance, []) == []
    assert _runs_both_ways(instance, live())

    # a gate tag changed by hand keeps its status: seen at the next full read
    instance.add_run_tags(runs[rids[5]], {"gpu-platform/flavor": "a100-ondemand"})
    assert {r.run_id: r for r in gate._runs(instance, live())}[runs[rids[5]]].flavor == ""
    monkeypatch.setattr(gate.time, "monotonic", lambda: gate._RUN_CACHE.full_at + gate.RUNS_FULL_READ_S + 1)
    assert {r.run_id: r for r in gate._runs(instance, live())}[runs[rids[5]]].flavor == "a100-ondemand"


def test_queue_digest_kept_for_the_same_document_only():
    """queue_digest keeps its last document's digest: the same document gives it again, any change
    of what a person reads (a reason, a position, a count) a new one, equal to one encoded afresh."""
    from gpu_platform.observe.queueview.snapshot import LaneSnapshot, WaitingRow

    def snaps(reason="Inadmissible: no room", position=1, pending=1, waited=5.0):
        row = WaitingRow(position, "req-1", "one", "ana", "team-a", "exp", 1, waited, reason, None)
        return [LaneSnapshot("research_best_effort", pending=pending, gpus_pending={"h100-ondemand": 1}, waiting=[row])]

    base = queue_digest(snaps())
    assert queue_digest(snaps(waited=50.0)) == base  # the clock is not part of it
    seen = {base}
    for changed in (snaps(reason="Inadmissible: other"), snaps(position=2), snaps(pending=2), snaps()):
        digest = queue_digest(changed)
        assert digest == _encoded_digest(changed)
        seen.add(digest)
    assert len(seen) == 4


def test_waiting_rows_follow_a_new_state_object_of_the_same_request(policy):
    """lane_snapshots keeps what it reads of each state object; a new object for the same request
    (another lane, submission time or request) is read afresh, and the wait is exactly
    `(now - submitted_at).total_seconds()`, odd microseconds included."""
    from gpu_platform.requests.ledger import RequestState
    from gpu_platform.requests.model import validate_request
    from tests.gate.helpers import raw_request

    now = datetime(2026, 12, 1, 12, 0, 0, 999_999, tzinfo=UTC)
    req = validate_request(raw_request("candidate_train", gpu_type="h100-ondemand"), policy)
    other = validate_request(raw_request("labeler_batch", gpu_count=2), policy)
    first = RequestState(1, "req-w", req, "waiting", "old reason", None, None,
                         now - timedelta(seconds=7, microseconds=3), now, 0, {"position": 4})

    def rows(state):
        snaps = {s.lane: s for s in lane_snapshots(policy, [state], now)}
        return {lane: s.waiting for lane, s in snaps.items() if s.waiting}

    assert rows(first) == {"candidate_train": [
        (4, "req-w", req.name or "req-w", req.owner or "", req.team or "", req.target, req.gpu_count, 7.000003,
         "old reason", None, "unknown: the gate has not placed it yet")
    ]}
    earlier = replace(first, submitted_at=datetime(2026, 11, 30, 1, 2, 3, 456_789, tzinfo=UTC), reason="new reason")
    (row,) = rows(earlier)["candidate_train"]
    assert row.waited_s == (now - earlier.submitted_at).total_seconds() and row.reason == "new reason"
    moved = replace(first, request=other)
    (row,) = rows(moved)["labeler_batch"]
    assert row.gpus == 2 and row.target == other.target
    assert rows(first)["candidate_train"][0].waited_s == 7.000003  # the first object still reads as before
