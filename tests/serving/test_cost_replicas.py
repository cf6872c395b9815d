"""A service's replicas in the ledger (`replicas` events) become replica pods the cost models price."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gpu_platform.finops.snapshot import ledger_snapshot
from gpu_platform.requests.ledger import Ledger
from gpu_platform.requests.model import validate_request_file

T0 = datetime(2026, 11, 28, tzinfo=UTC)


def at(hours: float) -> datetime:
    return T0 + timedelta(hours=hours)


def _service(policy, rid: str):
    from tests.conftest import EXAMPLES

    return validate_request_file(EXAMPLES / "online_serving.yaml", policy).model_copy(update={"request_id": rid})


def test_replicas_events_start_and_stop_replica_pods(sqlite_url, policy):
    ledger = Ledger(sqlite_url)
    ledger.submit(_service(policy, "S-1"), at=at(0))
    ledger.record("S-1", "admitted", flavor="l4-inference", details={"hostname": "gpu-l4-1"}, at=at(1))  # min 2
    ledger.record("S-1", "replicas", details={"replicas": 4, "source": "cluster"}, at=at(8))
    ledger.record("S-1", "replicas", details={"replicas": 3, "source": "cluster"}, at=at(20))
    ledger.record("S-1", "replicas", details={"replicas": "many"}, at=at(21))  # not a count: ignored
    ledger.record("S-1", "preempted", "Preempted (InCohortReclamation)", at=at(30))
    # a replicas event is an observation: the request's state stays what its state events say
    assert ledger.state("S-1").state == "preempted"
    ledger.record("S-1", "admitted", flavor="l4-inference", details={"replicas": 1}, at=at(31))
    assert ledger.state("S-1").state == "admitted" and ledger.state("S-1").attempts == 2
    # the state table folds a replicas event as the event log does: an observation, not a state
    fold = [(x.request_id, x.state, x.attempts, x.updated_at) for x in ledger.states()]
    assert fold == [(x.request_id, x.state, x.attempts, x.updated_at) for x in ledger.states_from_log()]
    requests, pods = ledger_snapshot(ledger, policy)
    assert [r["service_name"] for r in requests] == ["perception-serving"]
    got = [(p["pod"], p["started_at"], p["ended_at"], p["exit_status"]) for p in pods]
    naive = {h: at(h).replace(tzinfo=None) for h in (1, 8, 20, 30, 31)}
    assert got == [
        ("S-1-a1-r1", naive[1], naive[30], "Preempted"),
        ("S-1-a1-r2", naive[1], naive[30], "Preempted"),
        ("S-1-a1-r3", naive[8], naive[30], "Preempted"),
        ("S-1-a1-r4", naive[8], naive[20], "Succeeded"),  # scaled down: the newest replica stops first
        ("S-1-a2-r1", naive[31], None, None),
    ]
    assert {p["hostname"] for p in pods[:4]} == {"gpu-l4-1"}
    assert {(p["gpu_resource"], p["gpu_share"], p["flavor_name"]) for p in pods} == {
        ("nvidia.com/gpu", 1.0, "l4-inference")}


def test_a_batch_request_keeps_one_pod_per_attempt_and_no_service_name(sqlite_url, policy):
    from tests.conftest import EXAMPLES

    ledger = Ledger(sqlite_url)
    req = validate_request_file(EXAMPLES / "candidate_train.yaml", policy).model_copy(update={"request_id": "R-1"})
    ledger.submit(req, at=at(0))
    ledger.record("R-1", "admitted", flavor="h100-ondemand", at=at(1))
    requests, pods = ledger_snapshot(ledger, policy)
    assert requests[0]["service_name"] is None
    assert [p["pod"] for p in pods] == ["R-1-a1"]


def test_local_replicas_follow_the_request_counts_as_keda_would(sqlite_url, policy, tmp_path):
    """QPS = the newest saved point at or before now over 300 s; replicas = ceil(QPS / target) in [min, max]."""
    import shutil
    from pathlib import Path

    from gpu_platform.observe.serving.replicas import local_replicas, service_views, sync_replicas

    feeds = tmp_path / "feeds"
    (feeds / "requests" / "2026-11-28").mkdir(parents=True)
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "serving" / "requests-2026-11-28.json"
    shutil.copy(fixture, feeds / "requests" / "2026-11-28" / "prom.json")
    req = _service(policy, "S-1")
    # 1.5 QPS per replica: 1,000 requests / 300 s = 3.33 QPS -> 3 replicas; 3,000 -> 10 QPS -> 7, capped at max 6
    spec = req.service.model_copy(update={"slo": req.service.slo.model_copy(update={"target_qps_per_replica": 1.5})})
    ledger = Ledger(sqlite_url)
    ledger.submit(req.model_copy(update={"service": spec}), at=at(0))
    ledger.record("S-1", "admitted", flavor="l4-inference", at=at(0.5))
    assert [v.current_replicas for v in service_views(ledger)] == [2]  # min replicas at admission

    def tick(hours: float) -> list[int]:
        now = at(hours)
        changes = sync_replicas(ledger, local_replicas(ledger.states(), feeds, now), "local", at=now)
        return [n for _, n in changes]

    assert tick(6.05) == [3]
    assert tick(6.10) == []  # unchanged: nothing recorded
    assert tick(12.05) == [6]
    assert tick(21.0) == [3]
    views = service_views(ledger)
    assert (views[0].current_replicas, views[0].source) == (3, "local")
    assert [e.details["replicas"] for e in ledger.events("S-1") if e.event == "replicas"] == [3, 6, 3]
    # a day without any saved point: no observation, the count stays
    assert tick(24 * 3) == []


def test_cluster_replicas_read_the_service_deployments():
    from gpu_platform.observe.serving.replicas import cluster_replicas

    deployments = [
        {"metadata": {"name": "perception-serving", "labels": {"gpu-platform.io/service": "perception-serving",
                                                             "gpu-platform.io/request-id": "S-1"},
                      "annotations": {"gpu-platform.io/request-id": "S-1"}}, "status": {"replicas": 4}},
        {"metadata": {"name": "scaling-up", "labels": {"gpu-platform.io/service": "x"},
                      "annotations": {"gpu-platform.io/request-id": "S-2"}}, "status": {}},
        {"metadata": {"name": "not-a-service", "labels": {"app": "web"}}, "status": {"replicas": 9}},
    ]
    assert cluster_replicas(deployments) == {"S-1": 4, "S-2": 0}


def test_the_gate_gives_the_engine_each_services_current_replicas(sqlite_url, policy):
    from gpu_platform.gate.tick import build_state
    from gpu_platform.observe.serving.replicas import current_replicas

    ledger = Ledger(sqlite_url)
    ledger.submit(_service(policy, "S-1"), at=at(0))
    ledger.record("S-1", "admitted", flavor="l4-inference", at=at(1))
    states = ledger.states()
    assert current_replicas(ledger, states) == {"S-1": 2}  # min replicas at admission
    ledger.record("S-1", "replicas", details={"replicas": 5, "source": "cluster"}, at=at(2))
    states = ledger.states()
    held = current_replicas(ledger, states)
    assert held == {"S-1": 5}
    workload = next(w for w in build_state(policy, states, at(3), replicas=held).admitted if w.name == "S-1")
    assert workload.replicas == 5
    # without the ledger's view the engine would count the service at its min
    assert next(w for w in build_state(policy, states, at(3)).admitted if w.name == "S-1").replicas == 2
