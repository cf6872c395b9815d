"""The queue aggregates, explain and the report's waits on SQLite and on PostgreSQL (`make test`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gpu_platform.observe.metrics.collector import QueueCollector
from gpu_platform.observe.queueview import (
    LaneSnapshot,
    explain,
    load_demand,
    read_gate_snapshot,
    write_gate_snapshot,
)
from gpu_platform.observe.report.data import queue_waits
from gpu_platform.requests.ledger import Ledger
from gpu_platform.requests.model import validate_request
from tests.gate.helpers import raw_request

T0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)


def test_same_figures_on_every_backend(ledger_url, policy):
    led = Ledger(ledger_url)
    sub = lambda lane, i, **kw: led.submit(  # noqa: E731
        validate_request(raw_request(lane, output_artifact_ids=[f"{lane}-{i}"], **kw), policy), at=T0
    )
    running = [sub("candidate_train", i, gpu_count=8) for i in range(2)]
    waiting = [sub("candidate_train", i + 2, gpu_count=8) for i in range(3)]
    victim = sub("research_best_effort", 0, gpu_type="h100-ondemand", gpu_count=4)
    incident = sub("incident_response", 0, gpu_count=4)
    at = T0 + timedelta(minutes=10)
    led.record_many([(r, "admitted", "QuotaReserved", "h100-ondemand", None, {"attempt": 1}) for r in running], at=at)
    led.record_many([(r, "waiting", "Inadmissible: full", None, None, {"position": i + 1, "of": 3}) for i, r in enumerate(waiting)], at=at)
    led.record(victim, "admitted", "QuotaReserved", flavor="h100-ondemand", at=at)
    later = T0 + timedelta(minutes=20)
    led.record_many(
        [
            (incident, "waiting", "PendingPreemption: reclaiming", None, None, {"position": 1, "of": 1, "reason_code": "PendingPreemption"}),
            (victim, "preempted", "Preempted (InCohortReclamation)", None, None, {"by": incident, "kueue_reason": "InCohortReclamation"}),
            (victim, "requeued", "requeued", None, None, None),
        ],
        at=later,
    )
    blocked = sub("release_eval", 0)
    led.record(blocked, "waiting", "WaitingForUpstream: needs m1 from r1 (admitted)", details={"position": 0, "of": 0}, at=later)
    # informational events after the state: what Kueue said, an audited approval
    led.record(running[0], "cluster", "Admitted", details={"condition": "Admitted", "attempt": 1}, at=later)
    led.record(waiting[0], "approved", "cost exception",
               details={"kind": "cost", "role": "finops", "approver": "dana", "reason": "quarter end"}, at=later)
    now = T0 + timedelta(minutes=30)
    d = load_demand(led, policy, now, wait_window=timedelta(hours=1))
    ct = d.lanes["candidate_train"]
    assert (ct.pending, ct.admitted) == (3, 2)
    assert ct.gpus_in_use == {"h100-ondemand": 16} and ct.gpus_pending == {"h100-ondemand": 24}
    assert ct.oldest_submitted == T0
    assert ct.gpus_waiting_for_upstream == {}
    gpus = led.get(blocked).gpu_count
    assert d.lanes["release_eval"].gpus_waiting_for_upstream == {"h100-ondemand": gpus}
    assert d.lanes["release_eval"].gpus_pending == {"h100-ondemand": gpus}
    assert d.lanes["research_best_effort"].preemptions_total == 1
    assert d.lanes["research_best_effort"].pending == 1
    assert sorted(d.waits_s["candidate_train"]) == [600.0, 600.0]
    assert sorted(g for _, g, _ in d.admitted_ends) == [8, 8]  # the requeued victim no longer holds GPUs
    assert all(end == at + timedelta(hours=20) for _, _, end in d.admitted_ends)

    write_gate_snapshot(led.engine, [LaneSnapshot("candidate_train", pending=3, admitted=2, running=1)], now)
    assert read_gate_snapshot(led.engine)["candidate_train"].running == 1
    fams = {f.name: f for f in QueueCollector(led, policy, clock=lambda: now).collect()}
    assert next(s.value for s in fams["gpu_platform_requests_running"].samples if s.labels["lane"] == "candidate_train") == 1

    ex = explain(led, policy, incident)
    assert ex.steps[-1].victims == (victim,)
    assert explain(led, policy, victim).steps[-2].preempted_by == incident
    waits = {w.lane: w for w in queue_waits(led, T0)}
    assert waits["candidate_train"].admissions == 2 and waits["candidate_train"].max_s == 600
