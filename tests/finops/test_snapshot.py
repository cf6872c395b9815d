"""The ledger snapshot the cost models read, from a real SQLite ledger and lineage store."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import duckdb

from gpu_platform.finops.snapshot import ledger_snapshot, pod_name
from gpu_platform.finops.sqlmodels.raw import POD_COLUMNS, REQUEST_COLUMNS, load_ledger_snapshot
from gpu_platform.lineage.graph import SUCCEEDED, LineageStore, WorkloadRun
from gpu_platform.requests.ledger import Ledger
from gpu_platform.requests.model import validate_request_file

T0 = datetime(2026, 11, 28, 1, 0, tzinfo=UTC)


def at(hours: float) -> datetime:
    return T0 + timedelta(hours=hours)


def _request(policy, name: str, rid: str):
    from tests.conftest import EXAMPLES

    return validate_request_file(EXAMPLES / name, policy).model_copy(update={"request_id": rid})


def test_snapshot_has_one_pod_per_admitted_attempt(sqlite_url, policy):
    ledger = Ledger(sqlite_url)
    lineage = LineageStore(ledger.engine)
    train = _request(policy, "candidate_train.yaml", "R-train")
    label = _request(policy, "labeler_batch.yaml", "R-label")
    queued = _request(policy, "research_best_effort.yaml", "R-queued")
    ledger.submit(train, at=at(0))
    ledger.submit(label, at=at(0.1))
    ledger.submit(queued, at=at(0.2))
    # training: admitted, preempted, requeued, admitted again on a recorded node, still running
    ledger.record("R-train", "admitted", flavor="h100-ondemand", details={"attempt": 1}, at=at(1))
    ledger.record("R-train", "preempted", "Preempted (InClusterQueue)", at=at(2))
    ledger.record("R-train", "requeued", at=at(2))
    ledger.record("R-train", "admitted", flavor="h100-ondemand", at=at(3),
                  details={"attempt": 2, "hostname": "gpu-h100-a", "gpu_uuids": ["GPU-1", "GPU-2"]})
    # label batch: failed, then finished on the retry
    ledger.record("R-label", "admitted", flavor="l4-inference", at=at(1))
    ledger.record("R-label", "failed", "run x ended: failure", at=at(1.5))
    ledger.record("R-label", "admitted", flavor="l4-inference", at=at(2))
    ledger.record("R-label", "finished", "run y succeeded", at=at(4))
    ledger.record("R-queued", "waiting", "InsufficientQuota", at=at(1))
    lineage.record_run(WorkloadRun.for_request(label, "label_batch", "failed", exit_status=1))
    lineage.record_run(WorkloadRun.for_request(label, "label_batch", SUCCEEDED, exit_status=0,
                                               results={"accepted": 900, "rejected": 100}))

    requests, pods = ledger_snapshot(ledger, policy, lineage)

    assert [r["request_id"] for r in requests] == ["R-train", "R-label", "R-queued"]
    assert all(set(r) == set(REQUEST_COLUMNS) for r in requests)
    assert all(set(p) == set(POD_COLUMNS) for p in pods)
    by_id = {r["request_id"]: r for r in requests}
    assert (by_id["R-train"]["state"], by_id["R-train"]["attempts"]) == ("admitted", 2)
    assert by_id["R-train"]["workload"] == "training_run"  # the lane's default_workload
    assert by_id["R-train"]["submitted_at"] == at(0).replace(tzinfo=None)
    assert (by_id["R-label"]["accepted_labels"], by_id["R-label"]["rejected_labels"]) == (900, 100)
    assert by_id["R-label"]["replay_hours"] is None
    assert by_id["R-train"]["accepted_labels"] is None
    assert by_id["R-queued"]["attempts"] == 0

    naive = {k: v.replace(tzinfo=None) for k, v in {"a1": at(1), "a1.5": at(1.5), "a2": at(2), "a3": at(3),
                                                      "a4": at(4)}.items()}
    rows = [(p["namespace"], p["pod"], p["attempt"], p["flavor_name"], p["hostname"], p["gpu_uuids"],
             p["started_at"], p["ended_at"], p["exit_status"]) for p in pods]
    assert rows == [
        ("team-perception", "R-train-a1", 1, "h100-ondemand", None, None, naive["a1"], naive["a2"], "Preempted"),
        ("team-perception", "R-train-a2", 2, "h100-ondemand", "gpu-h100-a", ["GPU-1", "GPU-2"], naive["a3"], None,
         None),
        ("team-labeling", "R-label-a1", 1, "l4-inference", None, None, naive["a1"], naive["a1.5"], "Failed"),
        ("team-labeling", "R-label-a2", 2, "l4-inference", None, None, naive["a2"], naive["a4"], "Succeeded"),
    ]
    assert pod_name("R-train", 2) == "R-train-a2"

    # the rows load as they are into the warehouse tables
    con = duckdb.connect()
    assert load_ledger_snapshot(con, requests, pods) == (3, 4)
    assert con.execute("select count(*) from raw_pod_requests where ended_at is null").fetchone()[0] == 1


def test_snapshot_without_lineage_store_has_no_results(sqlite_url, policy):
    ledger = Ledger(sqlite_url)
    ledger.submit(_request(policy, "labeler_batch.yaml", "R1"), at=at(0))
    requests, pods = ledger_snapshot(ledger, policy)
    assert requests[0]["accepted_labels"] is None and pods == []


def test_replay_hours_come_from_recorded_results(sqlite_url, policy):
    ledger = Ledger(sqlite_url)
    lineage = LineageStore(ledger.engine)
    replay = _request(policy, "release_eval.yaml", "R-replay")
    ledger.submit(replay, at=at(0))
    lineage.record_run(WorkloadRun.for_request(replay, "replay", SUCCEEDED, results={"replay_hours": 12}))
    (row,), _ = ledger_snapshot(ledger, policy, lineage)
    assert row["replay_hours"] == 12.0 and row["workload"] == "replay"
