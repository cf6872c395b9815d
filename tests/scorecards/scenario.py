"""A hand-computed day for the scorecards and capacity signals (2026-11-28, UTC).

Nodes and prices come from tests/sqlmodels/finops_scenario.py: gpu-a 8 x H100 billed 4.05 USD/GPU-h
(training pool, flavor h100-ondemand, DCGM engine-active), gpu-b 8 x A100 priced from the price book
at 1.844 USD/GPU-h (spot pool, flavor a100-spot, GPU_UTIL only). Capacity 192 GPU-h each.

req lane                  team        site  pods (node GPUs window exit; busy)                 wait(s)
T1  candidate_train       perception  sf    a1 gpu-a 0-3 00:10-02:10 failed (exit 137: OOM) 0.5   600
                                            a2 gpu-a 0-3 02:10-08:10 ok (retry)             0.5
T2  research_best_effort  planning    sf    a1 gpu-b 0,1 01:00-05:00 preempted by T3 60%       0
                                            (checkpoint 04:15 -> 2 x 0.75 = 1.5 GPU-h lost)
                                            a2 gpu-b 2,3 06:00-10:00 ok                  60%    3600 (requeued 05:00)
T3  release_eval          safety      muc   gpu-b 0,1 05:00-07:00 ok                     90%    3600 (while T2 ran)
T4  incident_response     safety      muc   gpu-a 5,6 12:04-13:04 ok                     0.8     240
T5  labeler_batch         labeling    sf    gpu-b 4   08:00-12:00 failed (exit 1)        50%    7200
T6  candidate_train       perception  sf    gpu-a 4   09:00-11:00 ok; peaks 6000 MiB      0.1      0
T7  map_semantic_batch    mapping     muc   none: waits from 20:00, open at 22:00 (last event)  7200 open
T8  labeler_batch         labeling    sf    gpu-b 5   14:00-14:30 ok (no owner)          100%   3600
--  unattributed pod (no request id) on gpu-a, 1 GPU 20:00-20:30 = 0.5 GPU-h = 2.025 USD

Approvals: T3 safety (alice), T5 cost (bob). Workload runs: T1 failed 137; T1 ok image A (pull 300 +
setup 60 of 21600 s); T2 ok image B (3600 + 600 of 14400 s); T3 ok image C (no timings); T5 failed
exit 1 "dataset shard missing" image C.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import duckdb

from gpu_platform.finops.sqlmodels import ensure_raw_tables, load_ledger_snapshot
from gpu_platform.finops.sqlmodels.raw import load_scorecard_snapshot, load_unmatched_snapshot
from tests.sqlmodels.finops_scenario import A100, H100, billing_rows, insert_billing, insert_samples

DAY = "2026-11-28"
D0 = datetime(2026, 11, 28)
IMAGE_A = "sha256:" + "a" * 64
IMAGE_B = "sha256:" + "b" * 64
IMAGE_C = "sha256:" + "c" * 64


def t(hh: int, mm: int = 0) -> datetime:
    return D0 + timedelta(hours=hh, minutes=mm)


def _req(rid, lane, team, site, workload, gpus, artifacts=()):
    return dict(request_id=rid, team=team, cost_center="CC-" + team, lane=lane, site=site, workload=workload,
                gpu_type="any", gpu_count=gpus, state="finished", attempts=1,
                output_artifact_ids=list(artifacts))


REQUESTS = [
    _req("T1", "candidate_train", "perception", "sf", "training_run", 4, ["model:t1"]),
    _req("T2", "research_best_effort", "planning", "sf", "training_run", 2),
    _req("T3", "release_eval", "safety", "muc", "replay", 2, ["replay:t3"]),
    _req("T4", "incident_response", "safety", "muc", "replay", 2, ["replay:t4"]),
    _req("T5", "labeler_batch", "labeling", "sf", "label_batch", 1),
    _req("T6", "candidate_train", "perception", "sf", "training_run", 1),
    _req("T7", "map_semantic_batch", "mapping", "muc", "map_segmentation", 1),
    _req("T8", "labeler_batch", "labeling", "sf", "label_batch", 1),
]

# (namespace, pod, request, attempt, flavor, node, gpus, start h, end h, exit, engine-active, util %)
PODS = [
    ("team-perception", "t1-a1", "T1", 1, "h100-ondemand", "gpu-a", [0, 1, 2, 3], 1 / 6, 2 + 1 / 6, "Failed", 0.5, 50),
    ("team-perception", "t1-a2", "T1", 2, "h100-ondemand", "gpu-a", [0, 1, 2, 3], 2 + 1 / 6, 8 + 1 / 6, "Succeeded",
     0.5, 50),
    ("team-planning", "t2-a1", "T2", 1, "a100-spot", "gpu-b", [0, 1], 1, 5, "Preempted", None, 60),
    ("team-safety", "t3-a1", "T3", 1, "a100-spot", "gpu-b", [0, 1], 5, 7, "Succeeded", None, 90),
    ("team-planning", "t2-a2", "T2", 2, "a100-spot", "gpu-b", [2, 3], 6, 10, "Succeeded", None, 60),
    ("team-labeling", "t5-a1", "T5", 1, "a100-spot", "gpu-b", [4], 8, 12, "Failed", None, 50),
    ("team-perception", "t6-a1", "T6", 1, "h100-ondemand", "gpu-a", [4], 9, 11, "Succeeded", 0.1, 10),
    ("team-safety", "t4-a1", "T4", 1, "h100-ondemand", "gpu-a", [5, 6], 12 + 4 / 60, 13 + 4 / 60, "Succeeded", 0.8, 80),
    ("team-labeling", "t8-a1", "T8", 1, "a100-spot", "gpu-b", [5], 14, 14.5, "Succeeded", None, 100),
]


def _h(hours: float) -> datetime:
    return D0 + timedelta(seconds=round(hours * 3600))


def pod_dicts() -> list[dict]:
    return [
        dict(namespace=ns, pod=pod, request_id=req, attempt=att, flavor_name=flv, hostname=node,
             gpu_uuids=[f"GPU-{node}-{g}" for g in gpus], started_at=_h(s), ended_at=_h(e), exit_status=ex)
        for ns, pod, req, att, flv, node, gpus, s, e, ex, _, _ in PODS
    ]


def _ev(rid, event, at, flavor=None, **details):
    return dict(request_id=rid, event=event, event_at=at, reason=details.pop("reason", ""), flavor=flavor,
                run_id=None, details=json.dumps(details, sort_keys=True) if details else None)


EVENTS = [
    _ev("T1", "submitted", t(0)), _ev("T1", "admitted", t(0, 10), "h100-ondemand"),
    _ev("T2", "submitted", t(1)), _ev("T2", "admitted", t(1), "a100-spot"),
    _ev("T1", "failed", t(2, 10), reason="run r1 ended: failure"), _ev("T1", "admitted", t(2, 10), "h100-ondemand"),
    _ev("T3", "submitted", t(4)), _ev("T3", "waiting", t(4), reason_code="Inadmissible", position=1),
    _ev("T3", "approved", t(4, 30), kind="safety", role="safety_owner", approver="alice", reason="release replay"),
    _ev("T2", "preempted", t(5), by="T3", kueue_reason="InCohortReclamation", checkpoint_at="2026-11-28T04:15:00"),
    _ev("T2", "requeued", t(5)), _ev("T3", "admitted", t(5), "a100-spot"),
    _ev("T2", "admitted", t(6), "a100-spot"), _ev("T5", "submitted", t(6)),
    _ev("T3", "finished", t(7)), _ev("T5", "admitted", t(8), "a100-spot"),
    _ev("T5", "approved", t(8), kind="cost", role="finops", approver="bob", reason="over budget"),
    _ev("T1", "finished", t(8, 10)), _ev("T6", "submitted", t(9)), _ev("T6", "admitted", t(9), "h100-ondemand"),
    _ev("T2", "finished", t(10)), _ev("T6", "finished", t(11)), _ev("T4", "submitted", t(12)),
    _ev("T5", "failed", t(12), reason="run r5 ended: failure"), _ev("T4", "admitted", t(12, 4), "h100-ondemand"),
    _ev("T8", "submitted", t(13)), _ev("T4", "finished", t(13, 4)), _ev("T8", "admitted", t(14), "a100-spot"),
    _ev("T8", "finished", t(14, 30)), _ev("T7", "submitted", t(20)),
    _ev("T7", "waiting", t(20), reason_code="Inadmissible", position=1),
    _ev("T7", "waiting", t(22), reason_code="Inadmissible", position=2),
]


def events() -> list[dict]:
    return [{**e, "seq": i} for i, e in enumerate(EVENTS, start=1)]


def _meta(rid, image, datasets=(), owner="owner@example.com", policy="requeue", resource="nvidia.com/gpu"):
    return dict(request_id=rid, owner=owner, image="registry.local/w", container_digest=image,
                dataset_ids=list(datasets), gpu_resource=resource, preemption_policy=policy,
                checkpoint_interval_s=1800.0, expected_duration_s=3600.0)


METADATA = [
    _meta("T1", IMAGE_A, ["ds-frames"]), _meta("T2", IMAGE_B, ["ds-frames", "ds-sim"], policy="checkpoint_requeue"),
    _meta("T3", IMAGE_C), _meta("T4", IMAGE_C), _meta("T5", IMAGE_C, ["ds-labels"]), _meta("T6", IMAGE_A),
    _meta("T7", IMAGE_C, resource="nvidia.com/mig-1g.10gb"), _meta("T8", IMAGE_B, ["ds-labels"], owner=None),
]


def _run(seq, rid, status, at, image, exit_status=None, **results):
    return dict(request_id=rid, seq=seq, kind="training_run", status=status, exit_status=exit_status, attempts=1,
                container_digest=image, dataset_ids=[], results=json.dumps(results) if results else None,
                recorded_at=at)


RUNS = [
    _run(1, "T1", "failed", t(2, 10), IMAGE_A, 137),
    _run(2, "T1", "succeeded", t(8, 10), IMAGE_A, 0, image_pull_s=300, setup_s=60, runtime_s=21600),
    _run(3, "T2", "succeeded", t(10), IMAGE_B, 0, image_pull_s=3600, setup_s=600, runtime_s=14400),
    _run(4, "T3", "succeeded", t(7), IMAGE_C, 0),
    _run(5, "T5", "failed", t(12), IMAGE_C, 1, error="dataset shard missing"),
]


def insert_memory(con: duckdb.DuckDBPyConnection) -> None:
    """DCGM_FI_DEV_FB_USED (MiB) for T1's and T6's GPUs, and an XID 43 on T5's GPU."""
    rows = []
    for ns, pod, node, gpu, mib, hour in (("team-perception", "t1-a2", "gpu-a", 0, 70000, 3),
                                          ("team-perception", "t6-a1", "gpu-a", 4, 6000, 9)):
        for k, at in enumerate((t(hour, 30), t(hour + 1))):
            rows.append((at, "DCGM_FI_DEV_FB_USED", mib - 500 * k, node, gpu, H100, ns, pod))
    rows.append((t(10), "DCGM_FI_DEV_XID_ERRORS", 43, "gpu-b", 4, A100, "team-labeling", "t5-a1"))
    con.executemany(
        "insert into raw_dcgm_samples (ts, metric, value, hostname, gpu, model_name, namespace, pod, source, "
        "source_line) values (?, ?, ?, ?, ?, ?, ?, ?, 'memory.prom', 1)", rows)


def insert_unattributed_pod(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(
        "insert into raw_pods (snapshot_at, namespace, pod, uid, node, phase, gpu_requests, mig_requests, "
        "started_at, ended_at, source, source_row, day) values ($s, 'team-platform', 'notebook-x', 'u1', 'gpu-a', "
        "'Succeeded', 1, 0, $a, $b, 'pods.json', 1, $d)",
        {"s": t(23), "a": t(20), "b": t(20, 30), "d": DAY})


def unmatched_jobs() -> list[dict]:
    """What the read-back recorded of Jobs the ledger cannot match: a hand-made Job seen twice
    that day (its story changed), a Job of a finished request, and one seen the day before."""
    base = {"namespace": "team-platform", "attempt": 1, "status": "True", "kueue_reason": "Admitted", "flavor": "h100-ondemand"}
    return [
        {**base, "observed_at": t(8), "job": "notebook-gpu", "request_id": "req-by-hand", "kind": "unknown_request",
         "why": "not submitted through the gate", "condition": "QuotaReserved"},
        {**base, "observed_at": t(9), "job": "notebook-gpu", "request_id": "req-by-hand", "kind": "unknown_request",
         "why": "not submitted through the gate", "condition": "Admitted"},
        {**base, "observed_at": t(12), "job": "t2-job", "request_id": "T2", "kind": "ended_request",
         "why": "the request is finished in the ledger", "condition": "Admitted"},
        {**base, "observed_at": t(0) - timedelta(hours=2), "job": "old-job", "request_id": "req-old",
         "kind": "unknown_request", "why": "not submitted through the gate", "condition": "Admitted"},
    ]


def load(con: duckdb.DuckDBPyConnection) -> None:
    ensure_raw_tables(con)
    load_ledger_snapshot(con, REQUESTS, pod_dicts())
    load_scorecard_snapshot(con, events(), METADATA, RUNS)
    load_unmatched_snapshot(con, unmatched_jobs())
    insert_billing(con, billing_rows())
    insert_samples(con, pods=PODS)
    insert_memory(con)
    insert_unattributed_pod(con)
