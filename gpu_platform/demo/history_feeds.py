"""The demo history's feeds, as the real sources write them: `feeds/nodes/<day>/nodes.json` (the
fleet as `kubectl get nodes -o json` prints it), `feeds/pods/<day>/pods.json` (every step pod of
the day as `kubectl get pods -A -o json` prints it), `feeds/dcgm/<day>/<node>.parquet` (15 s
dcgm-exporter samples of every GPU, labelled with the pod holding it; framebuffer use every 60 s)
and `feeds/focus/demo-billing-<first>-<last>.csv` (FOCUS 1.2 rows per node and hour, volumes, the
control plane, support and one credit); `write_feeds` writes them all.

May import `cluster/jobs.py`, `policy/`, `demo/costs.py`, `demo/fleet.py`, `demo/job_mix.py`,
`demo/history_types.py`.
"""

from __future__ import annotations

import csv
import hashlib
import json
import uuid
from collections.abc import Callable, Iterable
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from gpu_platform.cluster.jobs import (
    LABEL_GPU_PRODUCT,
    LABEL_LANE,
    LABEL_NODE_POOL,
    LABEL_REQUEST_ID,
    LABEL_TEAM,
    label_value,
)
from gpu_platform.demo.costs import (
    ENGINE,
    FOCUS_HEADER,
    STEP_S,
    UTIL,
    BilledNode,
    _iso,
    focus_bill,
    gpu_uuid,
)
from gpu_platform.demo.fleet import FleetNode
from gpu_platform.demo.history_types import HistJob, History, Segment
from gpu_platform.demo.job_mix import _at, _epoch
from gpu_platform.policy import Policy

BUSY = {"incident_response": 0.75, "release_eval": 0.6, "map_semantic_batch": 0.66, "candidate_train": 0.82,
        "platform_maintenance": 0.3, "labeler_batch": 0.5, "baseline_rebuild": 0.62, "research_best_effort": 0.4}
"""Mean GR_ENGINE_ACTIVE of a lane's running jobs."""


MEMORY_GIB = {"incident_response": 52.0, "release_eval": 46.0, "map_semantic_batch": 18.0, "candidate_train": 64.0,
              "platform_maintenance": 3.0, "labeler_batch": 14.0, "baseline_rebuild": 50.0, "research_best_effort": 38.0}
"""Typical framebuffer use (DCGM_FI_DEV_FB_USED) of a lane's running jobs, capped at 90% of the GPU."""


LIGHT_SHARE = 4
"""One labeler job in LIGHT_SHARE is a small one: ~7 GiB and ~10% engine use on whole GPUs, which
the right-sizing signal says would fit a 1g.10gb MIG slice."""


MEMORY_EVERY = 4
"""FB_USED is written every MEMORY_EVERY samples (60 s): memory peaks, not a busy integral."""


FB_USED = "DCGM_FI_DEV_FB_USED"


def _light(rid: str, lane: str | None) -> bool:
    return lane == "labeler_batch" and int(hashlib.sha256(rid.encode()).hexdigest()[:6], 16) % LIGHT_SHARE == 0


def _pod(rid: str, attempt: int, k: int) -> str:
    h = hashlib.sha256(f"{rid}#{attempt}".encode()).hexdigest()
    return f"dagster-step-{h[:10]}-{h[10:15]}" + (f"-w{k}" if k else "")


def _pods_of_day(history: History, day: date) -> list[tuple[HistJob, Segment, int, str, tuple[int, ...]]]:
    d0, d1 = _epoch(day), _epoch(day) + 86400
    out = []
    for job in history.jobs:
        for seg in job.segments:
            if seg.start < d1 and seg.end > d0:
                for k, (node, gpus) in enumerate(seg.placement):
                    out.append((job, seg, k, node, gpus))
    return out


def nodes_doc(history: History, day: date) -> dict[str, Any]:
    items = []
    for n in history.nodes:
        labels = {"kubernetes.io/hostname": n.name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                  "node.kubernetes.io/instance-type": n.kind.instance_type,
                  "topology.kubernetes.io/zone": n.kind.zone, LABEL_GPU_PRODUCT: _product(n),
                  LABEL_NODE_POOL: n.node_pool, "eks.amazonaws.com/nodegroup": n.flavor,
                  "nvidia.com/gpu.present": "true", "nvidia.com/gpu.count": str(n.gpus)}
        taints = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
        if n.flavor == "a100-spot":
            taints.append({"key": "cloud.google.com/gke-spot", "value": "true", "effect": "NoSchedule"})
        capacity = {"cpu": str(n.kind.vcpus), "memory": f"{n.kind.memory_mib}Mi", "pods": "110",
                    "nvidia.com/gpu": str(n.gpus)}
        items.append({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": n.name, "uid": str(uuid.uuid5(uuid.NAMESPACE_DNS, n.name)), "labels": labels,
                         "creationTimestamp": _iso(datetime(history.days[0].year, history.days[0].month,
                                                            history.days[0].day, tzinfo=UTC) - timedelta(days=3))},
            "spec": {"providerID": n.provider_id, "taints": taints},
            "status": {"capacity": capacity, "allocatable": capacity,
                       "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]},
        })
    return {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items}


def _product(n: FleetNode) -> str:
    return n.kind.model_name.replace("NVIDIA ", "NVIDIA-").replace(" ", "-")


def pods_doc(history: History, day: date, policy: Policy) -> dict[str, Any]:
    items = []
    for job, seg, k, node, gpus in _pods_of_day(history, day):
        req = job.request
        ns = policy.team(req.team or "").namespace
        name = _pod(job.request_id, seg.attempt, k)
        done = seg.outcome != "running"
        phase = "Running" if not done else ("Succeeded" if seg.outcome == "finished" else "Failed")
        state: dict[str, Any] = {"running": {"startedAt": _iso(_at(seg.start))}}
        if done:
            code = {"finished": 0, "oom": 137, "preempted": 143}.get(seg.outcome, 1)
            reason = {"finished": "Completed", "oom": "OOMKilled"}.get(seg.outcome, "Error")
            state = {"terminated": {"exitCode": code, "reason": reason, "startedAt": _iso(_at(seg.start)),
                                    "finishedAt": _iso(_at(seg.end))}}
        items.append({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, name)),
                         "labels": {LABEL_REQUEST_ID: label_value(job.request_id), LABEL_TEAM: label_value(req.team or ""),
                                    LABEL_LANE: label_value(req.lane or ""), "dagster/run-id":
                                        str(uuid.uuid5(uuid.NAMESPACE_OID, f"{job.request_id}#{seg.attempt}"))},
                         "annotations": {"gpu-platform.io/request-id": job.request_id}},
            "spec": {"nodeName": node, "containers": [{"name": "main", "image": f"{req.image}@{req.container_digest}",
                                                       "resources": {"limits": {"nvidia.com/gpu": str(len(gpus))}}}]},
            "status": {"phase": phase, "startTime": _iso(_at(seg.start)),
                       "containerStatuses": [{"name": "main", "state": state}]},
        })
    return {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items}


def dcgm_frame(history: History, node: FleetNode, day: date, policy: Policy, rng: np.random.Generator) -> pl.DataFrame:
    """Every 15 s sample of one node-day (the `raw_dcgm_samples` history schema)."""
    d0 = _epoch(day)
    steps = 86400 // STEP_S
    busy = np.zeros((steps, node.gpus))
    holder = np.full((steps, node.gpus), -1, dtype=np.int32)
    memory = np.zeros((steps, node.gpus))
    names: list[tuple[str, str]] = []
    for job, seg, k, n, gpus in _pods_of_day(history, day):
        if n != node.name:
            continue
        a = max(0, int(seg.start - d0) // STEP_S)
        b = min(steps, int(seg.end - d0) // STEP_S)
        if b <= a:
            continue
        names.append((policy.team(job.request.team or "").namespace, _pod(job.request_id, seg.attempt, k)))
        light = _light(job.request_id, job.request.lane)
        level = 0.1 if light else BUSY.get(job.request.lane or "", 0.5)
        mem = min(7.0 if light else MEMORY_GIB.get(job.request.lane or "", 20.0), 0.9 * node.kind.memory_gib)
        for g in gpus:
            busy[a:b, g] = np.clip(rng.normal(level, 0.03 if light else 0.12, b - a), 0.02, 1.0)
            memory[a:b, g] = np.clip(rng.normal(mem, 0.05 * mem, b - a), 0.5, 0.95 * node.kind.memory_gib) * 1024
            holder[a:b, g] = len(names) - 1
    idx = pl.Series(np.where(holder < 0, len(names), holder).ravel())
    namespace = pl.Series([x[0] for x in names] + [None], dtype=pl.String).gather(idx)
    pod = pl.Series([x[1] for x in names] + [None], dtype=pl.String).gather(idx)
    ts0 = datetime(day.year, day.month, day.day, tzinfo=UTC)
    ts = pl.datetime_range(ts0, ts0 + timedelta(seconds=STEP_S * (steps - 1)), f"{STEP_S}s", eager=True,
                           time_zone="UTC").cast(pl.Datetime("ms", "UTC"))
    gpu = pl.Series(np.tile(np.arange(node.gpus, dtype=np.int32), steps))
    metric = ENGINE if node.kind.profiling else UTIL
    value = busy.ravel() if node.kind.profiling else np.clip(np.round(busy.ravel() * 100 + 8 * (busy.ravel() > 0)), 0, 100)
    mem_steps = np.arange(0, steps, MEMORY_EVERY)
    mem_rows = (mem_steps[:, None] * node.gpus + np.arange(node.gpus)).ravel()
    n_mem = len(mem_rows)
    frame = pl.DataFrame({
        "ts": pl.concat([ts.gather(np.repeat(np.arange(steps), node.gpus)),
                         ts.gather(np.repeat(mem_steps, node.gpus))]),
        "metric": pl.Series([metric, FB_USED], dtype=pl.String).gather(
            np.concatenate([np.zeros(steps * node.gpus, dtype=np.int32), np.ones(n_mem, dtype=np.int32)])),
        "value": np.concatenate([np.round(value, 3), np.round(memory.ravel()[mem_rows])]),
        "hostname": pl.Series([node.name], dtype=pl.String).gather(np.zeros(steps * node.gpus + n_mem, dtype=np.int32)),
        "gpu": pl.concat([gpu, gpu.gather(mem_rows)]),
    }).with_columns(
        uuid=pl.col("gpu").replace_strict({g: gpu_uuid(node.name, g) for g in range(node.gpus)},
                                          return_dtype=pl.String),
        model_name=pl.lit(node.kind.model_name),
        pci_bus_id=pl.format("00000000:{}:00.0", (pl.col("gpu") + 0x18).cast(pl.String)),
        device=pl.format("nvidia{}", pl.col("gpu")),
        gpu_instance_profile=pl.lit(None, dtype=pl.String),
        gpu_instance_id=pl.lit(None, dtype=pl.String),
        namespace=pl.concat([namespace, namespace.gather(mem_rows)]),
        pod=pl.concat([pod, pod.gather(mem_rows)]),
    ).with_columns(container=pl.when(pl.col("pod").is_not_null()).then(pl.lit("main")))
    return frame


def focus_rows(history: History) -> list[dict[str, str]]:
    """FOCUS 1.2 rows: node-hours by instance id (an ARN for the L4 nodes, as some exports write
    it), volumes, control plane, support, one credit."""
    nodes = [
        BilledNode(f"arn:aws:ec2:us-west-2:444455556666:instance/{n.instance_id}" if n.flavor == "l4-inference"
                   else n.instance_id, n.name, n.kind.instance_type, n.kind.hourly, n.flavor, f"vol-0{n.instance_id[3:]}")
        for n in history.nodes
    ]
    return focus_bill(history.days, nodes)


def write_feeds(history: History, feeds: Path, policy: Policy, days: Iterable[date] | None = None,
                advance: Callable[[], None] | None = None) -> int:
    """Write the node, pod and DCGM feeds of each day and the FOCUS export; return bytes written."""
    written = 0
    for i, day in enumerate(days or history.days):
        for kind, doc in (("nodes", nodes_doc(history, day)), ("pods", pods_doc(history, day, policy))):
            path = feeds / kind / day.isoformat() / f"{kind}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(doc, indent=1))
            written += path.stat().st_size
        directory = feeds / "dcgm" / day.isoformat()
        directory.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng(1000 + i)
        for node in history.nodes:
            path = directory / f"{node.name.split('.')[0]}.parquet"
            dcgm_frame(history, node, day, policy, rng).write_parquet(path, compression="zstd", compression_level=3)
            written += path.stat().st_size
        if advance:
            advance()
    path = feeds / "focus" / f"demo-billing-{history.days[0]}-{history.days[-1]}.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FOCUS_HEADER, restval="")
        writer.writeheader()
        writer.writerows(focus_rows(history))
    return written + path.stat().st_size
