"""The request state table (`gp_request_state`) on SQLite and on PostgreSQL (`make test`).

What the tick, the queue views and `/metrics` read from it must equal what the event log says,
after every kind of transition, whatever batches wrote them; and an event that fails to be
written changes no state, since both share one transaction.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import sqlalchemy as sa

import gpu_platform.requests.ledger as ledger_mod
from gpu_platform.requests.ledger import Ledger, LedgerError, events_table, requests_table, state_table
from gpu_platform.requests.model import validate_request
from tests.gate.helpers import raw_request

T0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
LANES = ("research_best_effort", "candidate_train", "release_eval", "incident_response")


def _busy_ledger(url: str, policy) -> tuple[Ledger, list[str]]:
    """24 requests through submit, wait, admit, preempt, requeue, re-admit, finish, fail, reject,
    cluster observations and approvals, in batches that mix requests and events."""
    led = Ledger(url)
    reqs = [
        validate_request(raw_request(LANES[i % len(LANES)], output_artifact_ids=[f"out-{i}"], gpu_count=1 + i % 4), policy)
        for i in range(24)
    ]
    ids = led.submit_many(reqs[:12])
    ids += led.submit_batch(reqs[12:], at=T0 + timedelta(minutes=1))
    at = lambda m: T0 + timedelta(minutes=m)  # noqa: E731
    led.record_many([(r, "waiting", "Inadmissible: full", None, None, {"position": i + 1, "of": 24}) for i, r in enumerate(ids)], at=at(2))
    led.record_many([(r, "admitted", "QuotaReserved on h100-ondemand", "h100-ondemand", None, {"attempt": 1}) for r in ids[:10]], at=at(3))
    # one batch: a preemption and its requeue, a cluster observation, an approval, a re-admission
    led.record_many(
        [
            (ids[0], "preempted", "Preempted (InCohortReclamation)", None, None, {"by": ids[10], "kueue_reason": "InCohortReclamation"}),
            (ids[0], "requeued", "requeued in its original queue order", None, None, {"preempted_by": ids[10]}),
            (ids[1], "cluster", "QuotaReserved", "h100-ondemand", None, {"condition": "QuotaReserved", "attempt": 1}),
            (ids[2], "approved", "safety sign-off", None, None, {"kind": "safety", "role": "safety", "approver": "a@x"}),
            (ids[10], "admitted", "QuotaReserved on a100-spot", "a100-spot", None, {"attempt": 1}),
            (ids[1], "cluster", "Admitted", "h100-ondemand", None, {"condition": "Admitted", "attempt": 1}),
        ],
        at=at(4),
    )
    led.record_many(
        [
            (ids[0], "admitted", "QuotaReserved on a100-spot", "a100-spot", None, {"attempt": 2}),
            (ids[3], "finished", "run r-3 succeeded", "h100-ondemand", "r-3", None),
            (ids[4], "failed", "run r-4 ended: failure", "h100-ondemand", "r-4", None),
            (ids[11], "rejected", "Inadmissible: too large", None, None, None),
            (ids[12], "approved", "cost exception", None, None, {"kind": "cost", "role": "finance", "approver": "b@x"}),
            (ids[12], "approved", "safety sign-off", None, None, {"kind": "safety", "role": "safety", "approver": "c@x"}),
            (ids[5], "preempted", "Preempted (InClusterQueue)", None, None, {"by": ids[13]}),
        ],
        at=at(5),
    )
    # an event recorded with a time earlier than the ones before it: order is by id, not by time
    led.record(ids[5], "requeued", "requeued", details={"preempted_by": ids[13]}, at=at(1))
    led.record(ids[6], "cluster", "Evicted", details={"condition": "Evicted", "attempt": 1}, at=at(6))
    return led, ids


def _table(led: Ledger) -> list[dict]:
    with led.engine.connect() as conn:
        return [dict(r) for r in conn.execute(sa.select(state_table).order_by(state_table.c.seq)).mappings()]


def test_states_from_the_table_equal_the_event_log_after_every_transition(ledger_url, policy):
    led, ids = _busy_ledger(ledger_url, policy)
    assert led.states() == led.states_from_log()
    live = ("submitted", "waiting", "requeued", "admitted")
    assert led.states(live) == led.states_from_log(live)
    assert led.states(lane="candidate_train") == led.states_from_log(lane="candidate_train")
    for rid in (ids[0], ids[1], ids[5], ids[12]):
        assert led.states(request_id=rid) == led.states_from_log(request_id=rid)
    by_id = {s.request_id: s for s in led.states()}
    assert (by_id[ids[0]].state, by_id[ids[0]].attempts, by_id[ids[0]].preemptions) == ("admitted", 2, 1)
    assert by_id[ids[1]].cluster["condition"] == "Admitted"
    assert [a["kind"] for a in by_id[ids[12]].approvals] == ["cost", "safety"]
    assert by_id[ids[5]].state == "requeued"
    assert by_id[ids[11]].state == "rejected"


def test_the_table_equals_a_rebuild_from_the_events(ledger_url, policy):
    led, _ = _busy_ledger(ledger_url, policy)
    before = _table(led)
    with led.engine.begin() as conn:
        conn.execute(state_table.delete())
    assert led.states() == []
    assert led.backfill_state() == 24
    assert _table(led) == before
    assert led.backfill_state() == 0


def test_a_ledger_from_before_the_table_is_filled_when_opened(ledger_url, policy):
    led, _ = _busy_ledger(ledger_url, policy)
    expected = led.states_from_log()
    state_table.drop(led.engine)
    led.engine.dispose()
    reopened = Ledger(ledger_url)
    assert reopened.states() == expected
    assert reopened.states() == reopened.states_from_log()


def test_budget_reserved_from_the_table_equals_the_events(ledger_url, policy):
    led, _ = _busy_ledger(ledger_url, policy)
    e, r = events_table, requests_table
    for since in (T0, T0 + timedelta(minutes=3, seconds=30), T0 + timedelta(minutes=5), T0 + timedelta(hours=1)):
        admitted = sa.select(e.c.request_id).where(e.c.event == "admitted", e.c.at >= since).distinct().subquery()
        q = sa.select(r.c.lane, sa.func.sum(r.c.max_cost)).join(admitted, admitted.c.request_id == r.c.request_id).group_by(r.c.lane)
        with led.engine.connect() as conn:
            from_log = {lane: Decimal(str(total)) for lane, total in conn.execute(q)}
        assert led.reserved_by_lane(since) == from_log


def test_a_failed_event_insert_changes_no_state(ledger_url, policy):
    led, ids = _busy_ledger(ledger_url, policy)
    before, events = _table(led), led.count()
    with pytest.raises(LedgerError, match="unknown request id"):
        led.record_many([(ids[7], "admitted", "QuotaReserved", "h100-ondemand", None, None),
                         ("req-never-submitted", "admitted", "QuotaReserved", "h100-ondemand", None, None)])
    assert _table(led) == before
    assert led.count() == events


def test_a_failed_state_update_records_no_event(ledger_url, policy, monkeypatch):
    led, ids = _busy_ledger(ledger_url, policy)
    before, events = _table(led), led.count()

    def broken(_events):
        raise RuntimeError("state update failed")

    monkeypatch.setattr(ledger_mod, "_fold", broken)
    with pytest.raises(RuntimeError, match="state update failed"):
        led.record(ids[7], "admitted", "QuotaReserved", flavor="h100-ondemand")
    monkeypatch.undo()
    assert led.count() == events
    assert _table(led) == before
    assert led.states() == led.states_from_log()


def test_an_older_event_committed_after_a_newer_one_does_not_replace_the_state(ledger_url, policy):
    """Two writers whose transactions commit out of id order (PostgreSQL's sequences allow it):
    the state stays the event with the larger id; counts still add up."""
    led, ids = _busy_ledger(ledger_url, policy)
    rid = ids[8]
    row = {r["request_id"]: r for r in _table(led)}[rid]
    stale = ledger_mod._fold([{"request_id": rid, "event": "admitted", "id": row["state_event_id"] - 1, "at": T0,
                               "reason": "stale", "flavor": "x", "run_id": None, "details": None}])
    with led.engine.begin() as conn:
        conn.execute(ledger_mod._STATE_UPDATE, list(stale.values()))
    after = {r["request_id"]: r for r in _table(led)}[rid]
    assert (after["state"], after["reason"], after["state_event_id"]) == (row["state"], row["reason"], row["state_event_id"])
    assert after["attempts"] == row["attempts"] + 1


def test_a_parsed_request_is_never_served_for_another_ledgers_payload(tmp_path, policy):
    a, b = Ledger(f"sqlite:///{tmp_path / 'a.db'}"), Ledger(f"sqlite:///{tmp_path / 'b.db'}")
    a.submit(validate_request(raw_request("research_best_effort", request_id="req-same", gpu_count=1), policy))
    b.submit(validate_request(raw_request("research_best_effort", request_id="req-same", gpu_count=2), policy))
    assert a.states()[0].request.gpu_count == 1
    assert b.states()[0].request.gpu_count == 2
    assert a.states()[0].request is a.states()[0].request


def _demand_from_log(led: Ledger, policy, now: datetime, window: timedelta) -> dict:
    """The queue's figures computed in Python from the event log alone."""
    from gpu_platform.observe.queueview.demand import demand_flavor

    out: dict = {}
    events = led.events()
    for s in led.states_from_log():
        lane = out.setdefault(s.request.lane, {"pending": 0, "admitted": 0, "gpus_pending": {}, "gpus_in_use": {},
                                               "preemptions": 0, "rejections": 0, "waits": []})
        gpus = s.request.gpu_count or 0
        if s.state in ("submitted", "waiting", "requeued"):
            lane["pending"] += 1
            f = demand_flavor(policy, s.request.lane, s.request.gpu_type) or "unknown"
            lane["gpus_pending"][f] = lane["gpus_pending"].get(f, 0) + gpus
        elif s.state == "admitted":
            lane["admitted"] += 1
            lane["gpus_in_use"][s.flavor or "unknown"] = lane["gpus_in_use"].get(s.flavor or "unknown", 0) + gpus
        mine = [e for e in events if e.request_id == s.request_id]
        lane["preemptions"] += sum(e.event == "preempted" for e in mine)
        lane["rejections"] += sum(e.event == "rejected" for e in mine)
        first = next((e for e in mine if e.event == "admitted"), None)
        if first is not None and first.at >= now - window:
            lane["waits"].append(max(0.0, (first.at - s.submitted_at).total_seconds()))
    return out


def _figures(d) -> dict:
    return {
        name: {"pending": ld.pending, "admitted": ld.admitted, "gpus_pending": ld.gpus_pending,
               "gpus_in_use": ld.gpus_in_use, "preemptions": ld.preemptions_total,
               "rejections": ld.rejections_total, "waits": sorted(d.waits_s.get(name, []))}
        for name, ld in d.lanes.items()
        if ld.pending or ld.admitted or ld.preemptions_total or ld.rejections_total or d.waits_s.get(name)
    }


def test_demand_from_the_table_equals_the_event_log(ledger_url, policy):
    from gpu_platform.observe.queueview.demand import load_demand

    led, _ = _busy_ledger(ledger_url, policy)
    for now, window in ((T0 + timedelta(minutes=10), timedelta(hours=1)), (T0 + timedelta(minutes=7), timedelta(minutes=3, seconds=30))):
        expected = {k: dict(v, waits=sorted(v["waits"])) for k, v in _demand_from_log(led, policy, now, window).items()}
        assert _figures(load_demand(led, policy, now, wait_window=window)) == expected


def test_the_demand_cache_reads_the_ledger_again_only_when_it_changed(tmp_path, policy):
    from gpu_platform.observe.queueview.demand import DemandCache, load_demand

    led, ids = _busy_ledger(f"sqlite:///{tmp_path / 'ledger.db'}", policy)
    cache, window = DemandCache(), timedelta(minutes=5)
    now = T0 + timedelta(minutes=6)
    first = cache.load(led, policy, now, wait_window=window)
    assert cache.reads == 1
    later = now + timedelta(minutes=3)  # the admissions at minute 3 leave the window, minute 4 and 5 stay
    again = cache.load(led, policy, later, wait_window=window)
    assert cache.reads == 1
    assert _figures(again) == _figures(load_demand(led, policy, later, wait_window=window))
    assert _figures(again) != _figures(first)
    led.record(ids[20], "admitted", "QuotaReserved on h100-ondemand", flavor="h100-ondemand", at=later)
    changed = cache.load(led, policy, later, wait_window=window)
    assert (cache.reads, cache.updates) == (1, 1)  # the change applied, nothing read in full
    assert _figures(changed) == _figures(load_demand(led, policy, later, wait_window=window))
    # a window reaching back before what was read is read again
    cache.load(led, policy, later, wait_window=timedelta(hours=2))
    assert cache.reads == 2


def test_an_unchanged_row_gives_the_same_state_and_a_changed_one_a_new_state(ledger_url, policy):
    led, ids = _busy_ledger(ledger_url, policy)
    first = {s.request_id: s for s in led.states()}
    again = {s.request_id: s for s in led.states()}
    assert all(again[rid] is first[rid] for rid in ids if not first[rid].approvals)
    led.record(ids[7], "admitted", "QuotaReserved on h100-ondemand", flavor="h100-ondemand")
    led.record(ids[8], "cluster", "Admitted", details={"condition": "Admitted", "attempt": 1})
    after = {s.request_id: s for s in led.states()}
    assert after[ids[7]] is not first[ids[7]] and after[ids[7]].state == "admitted"
    assert after[ids[8]].cluster["condition"] == "Admitted"
    assert after[ids[9]] is first[ids[9]]
    assert led.states() == led.states_from_log()
