"""A month of generated GPU-pool history for the demo, pushed through the real admission engine.

`generate(policy, days)` draws a job mix for the eight lanes (Poisson arrivals per lane and hour
of day, log-normal durations, GPU counts per lane, failures, OOM retries, a research sweep that
floods the research lane, an oversized release replay that waits a long time), replays it with
the policy simulator (`gpu_platform.simulate`: the same engine, cycles, preemption with
checkpoint loss and requeue), places every run on a GPU of a node of the fleet, and returns the
whole story. `write(history, ledger, feeds)` then records it:

- the ledger: every request (`hist-<day>-<lane>-<n>`) with its submitted / admitted / preempted /
  requeued / finished / failed events at the times the engine decided, and its workload result
  (accepted / rejected labels, replay hours) in `workload_runs`; ids and artifact ids carry a
  `-h<day>` suffix, so history never feeds the live demo requests;
- `feeds/nodes/<day>/nodes.json`: the fleet as `kubectl get nodes -o json` prints it (providerID
  `aws:///<zone>/i-...`, instance type, GPU product and node-pool labels, `nvidia.com/gpu`);
- `feeds/pods/<day>/pods.json`: every step pod that ran that day as `kubectl get pods -A -o json`
  prints it (node, GPU requests, request id / team / lane labels, start and finish);
- `feeds/dcgm/<day>/<node>.parquet`: 15 s dcgm-exporter samples of every GPU, labelled with the
  pod holding it (none when idle): `DCGM_FI_PROF_GR_ENGINE_ACTIVE` on H100 and A100 nodes,
  `DCGM_FI_DEV_GPU_UTIL` on the L4 nodes (no profiling module there);
- `feeds/focus/demo-billing-<first>-<last>.csv`: FOCUS 1.2 rows per node and hour with the cloud's
  instance id as `ResourceId` (and the node name as `ResourceName`), volumes, the control plane,
  support and one credit.

The fleet is the policy's exclusive flavors cut into 8-GPU nodes (h100-ondemand 32 GPUs = 4 x
p5.48xlarge, l4-inference 16 = 2 x g6.48xlarge, a100-spot 16 = 2 x p4d.24xlarge); fractional
flavors get no history. Everything is drawn from one seeded generator: the same days give the
same history.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
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
    EXAMPLES,
    FOCUS_HEADER,
    STEP_S,
    UTIL,
    BilledNode,
    _iso,
    _suffixed,
    focus_bill,
    gpu_uuid,
)
from gpu_platform.lineage.graph import _JSON_COLUMNS as RUN_JSON_COLUMNS
from gpu_platform.lineage.graph import SUCCEEDED, LineageStore, WorkloadRun, workload_runs
from gpu_platform.policy import Policy
from gpu_platform.requests.ledger import Ledger, events_table, requests_table
from gpu_platform.requests.model import JobRequest, validate_request_file
from gpu_platform.simulate.des import _Sim
from gpu_platform.simulate.scenarios import policy_scenario
from gpu_platform.simulate.trace import TraceJob

# the fleet ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FleetType:
    flavor: str
    instance_type: str
    model_name: str
    """DCGM's modelName label."""
    profiling: bool
    hourly: tuple[str, str, str]
    """(ListCost, BilledCost = EffectiveCost, PricingCategory) per hour, USD."""
    zone: str

    @property
    def memory_gib(self) -> float:
        """Framebuffer of one GPU (from the model name: 80, 40 or the L4's 24 GB)."""
        return 80.0 if "80GB" in self.model_name else 40.0 if "40GB" in self.model_name else 24.0


FLEET_TYPES = {
    "h100-ondemand": FleetType("h100-ondemand", "p5.48xlarge", "NVIDIA H100 80GB HBM3", True,
                               ("98.32", "63.908", "Committed"), "us-west-2a"),
    "l4-inference": FleetType("l4-inference", "g6.48xlarge", "NVIDIA L4", False,
                              ("13.3504", "13.3504", "Standard"), "us-west-2b"),
    "a100-spot": FleetType("a100-spot", "p4d.24xlarge", "NVIDIA A100-SXM4-40GB", True,
                           ("32.7726", "9.8318", "Dynamic"), "us-west-2c"),
}
GPUS_PER_NODE = 8


@dataclass(frozen=True)
class FleetNode:
    name: str
    flavor: str
    instance_id: str
    kind: FleetType
    node_pool: str
    """The flavor's node pool (`training`, `inference`, `spot`): what the node's
    `gpu-platform.io/node-pool` label says, as on a real cluster (never the flavor's name)."""

    @property
    def provider_id(self) -> str:
        return f"aws:///{self.kind.zone}/{self.instance_id}"


def fleet(policy: Policy) -> list[FleetNode]:
    """The nodes behind the policy's exclusive flavors (see the module doc)."""
    nodes = []
    for n_flavor, flavor in enumerate(policy.flavors):
        kind = FLEET_TYPES.get(flavor.name)
        if kind is None:
            continue
        gpus = int(flavor.capacity.get("nvidia.com/gpu", 0))
        for i in range(gpus // GPUS_PER_NODE):
            octet = 16 * (n_flavor + 1) + i
            name = f"ip-10-0-{octet}-{40 + i}.us-west-2.compute.internal"
            instance = "i-0" + hashlib.sha256(name.encode()).hexdigest()[:16]
            nodes.append(FleetNode(name, flavor.name, instance, kind, flavor.node_pool))
    return nodes


# the mix --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LaneMix:
    """How one lane's jobs arrive and behave. per_day: mean arrivals a day (Poisson, weighted by
    hour: `office` lanes arrive mostly 08-20 UTC); hours: median duration (log-normal, sigma
    0.5); gpus: GPU counts drawn uniformly; fail: share of runs that fail; oom: share whose
    first attempt is OOM-killed and retried."""

    example: str
    per_day: float
    hours: float
    gpus: tuple[int, ...]
    gpu_types: tuple[str, ...]
    fail: float = 0.0
    oom: float = 0.0
    office: bool = True


MIX: dict[str, LaneMix] = {
    "incident_response": LaneMix("incident_response.yaml", 0.4, 2.0, (4, 8), ("h100-ondemand",), office=False),
    "release_eval": LaneMix("release_eval.yaml", 3.0, 3.0, (4,), ("h100-ondemand", "l4-inference"), fail=0.03),
    "map_semantic_batch": LaneMix("map_semantic_batch.yaml", 2.0, 4.0, (4,), ("l4-inference",), fail=0.05),
    "candidate_train": LaneMix("candidate_train.yaml", 1.5, 10.0, (8,), ("h100-ondemand",), fail=0.05, oom=0.1),
    "platform_maintenance": LaneMix("platform_maintenance.yaml", 0.5, 0.5, (2,), ("h100-ondemand",)),
    "labeler_batch": LaneMix("labeler_batch.yaml", 6.0, 1.5, (2, 4), ("l4-inference", "a100-spot"), fail=0.04,
                             oom=0.15, office=False),
    "baseline_rebuild": LaneMix("baseline_rebuild.yaml", 1.0, 6.0, (4,), ("a100-spot", "h100-ondemand"),
                                office=False),
    "research_best_effort": LaneMix("research_best_effort.yaml", 10.0, 3.0, (1, 2, 4),
                                    ("a100-spot", "h100-ondemand", "h100-ondemand"),
                                    fail=0.08, oom=0.1),
}

SWEEP_JOBS = 48
"""The research sweep: this many 2-GPU trials submitted within 20 minutes, 5 days before the end."""
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
IMAGE_PULL_S = (2.0, 380.0)
COLD_PULL_SHARE = 5
"""Image pull seconds of a run whose node has (first) or lacks (second) the image cached; one run
in COLD_PULL_SHARE pulls cold."""


def _light(rid: str, lane: str | None) -> bool:
    return lane == "labeler_batch" and int(hashlib.sha256(rid.encode()).hexdigest()[:6], 16) % LIGHT_SHARE == 0
OFFICE = np.array([0.3] * 7 + [1.0] + [1.8] * 12 + [1.0] + [0.4] * 3)
OFFICE = OFFICE / OFFICE.mean()


# what happened --------------------------------------------------------------------------------


@dataclass
class Segment:
    """One admitted attempt: [start, end) on `flavor`, and how it ended."""

    attempt: int
    start: float
    end: float
    flavor: str
    outcome: str  # finished | failed | preempted | oom
    placement: list[tuple[str, tuple[int, ...]]] = field(default_factory=list)
    """(node, GPU indices) per pod."""


@dataclass
class HistJob:
    request: JobRequest
    submit: float
    segments: list[Segment]
    waited_s: float

    @property
    def request_id(self) -> str:
        return self.request.request_id or ""


@dataclass
class History:
    days: list[date]
    nodes: list[FleetNode]
    jobs: list[HistJob]
    never_admitted: list[HistJob]
    engine_calls: int


class _Recording(_Sim):
    """The simulator, also keeping each run's [start, end) and flavor."""

    def __init__(self, *args: Any):
        super().__init__(*args)
        self.segments: dict[str, list[list[Any]]] = {}

    def _start(self, r, flavor, now):  # type: ignore[no-untyped-def]
        super()._start(r, flavor, now)
        self.segments.setdefault(r.job.job_id, []).append([now, None, flavor, "finished"])

    def _evict(self, r, now):  # type: ignore[no-untyped-def]
        requeue = super()._evict(r, now)
        self.segments[r.job.job_id][-1][3] = "preempted"
        return requeue

    def _stop(self, r, now):  # type: ignore[no-untyped-def]
        self.segments[r.job.job_id][-1][1] = now
        return super()._stop(r, now)


def _epoch(d: date) -> float:
    return datetime(d.year, d.month, d.day, tzinfo=UTC).timestamp()


def _at(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


def _arrivals(rng: np.random.Generator, mix: LaneMix, day0: float) -> list[float]:
    out = []
    weights = OFFICE if mix.office else np.ones(24)
    for h in range(24):
        for _ in range(rng.poisson(mix.per_day / 24 * weights[h])):
            out.append(day0 + 3600 * h + float(rng.uniform(0, 3600)))
    return out


def draw_jobs(policy: Policy, days: list[date], seed: int = 7) -> tuple[list[TraceJob], dict[str, JobRequest], dict[str, str]]:
    """(trace jobs, request per job id, planned fault per job id: 'fail' | 'oom')."""
    rng = np.random.default_rng(seed)
    base = {lane: validate_request_file(EXAMPLES / m.example, policy) for lane, m in MIX.items()}
    jobs: list[TraceJob] = []
    requests: dict[str, JobRequest] = {}
    faults: dict[str, str] = {}

    def add(lane: str, day: date, n: int, at: float, hours: float, gpus: int, gpu_type: str, tag: str = "") -> None:
        mix = MIX[lane]
        rid = f"hist-{day:%Y%m%d}-{lane.replace('_', '-')}{tag}-{n:03d}"
        req = base[lane]
        duration = max(600.0, hours * 3600)
        expected = math.ceil(duration / 600) * 600
        lane_max = policy.lane(lane).max_run_duration.total_seconds()
        expected = min(expected, lane_max)
        duration = min(duration, expected)
        timeout = min(lane_max, expected * 2)
        req = req.model_copy(update={
            **_suffixed(req, f"-h{day:%Y%m%d}-{n:03d}{tag}"), "request_id": rid, "gpu_type": gpu_type,
            "gpu_count": gpus, "expected_duration": timedelta(seconds=expected), "timeout": timedelta(seconds=timeout)})
        requests[rid] = req
        jobs.append(TraceJob(rid, at, duration, float(gpus), lane, gpu_type=gpu_type,
                             preemption_policy=req.preemption_policy or "checkpoint_requeue"))
        u = rng.uniform()
        if u < mix.oom:
            faults[rid] = "oom"
        elif u < mix.oom + mix.fail:
            faults[rid] = "fail"

    for day in days:
        d0 = _epoch(day)
        for lane, mix in MIX.items():
            for n, at in enumerate(sorted(_arrivals(rng, mix, d0))):
                hours = float(mix.hours * rng.lognormal(0, 0.5))
                add(lane, day, n, at, hours, int(rng.choice(mix.gpus)), str(rng.choice(mix.gpu_types)))
    if len(days) >= 6:
        sweep_day = days[-5]
        t0 = _epoch(sweep_day) + 10 * 3600
        for n in range(SWEEP_JOBS):
            add("research_best_effort", sweep_day, n, t0 + n * 25.0, float(rng.uniform(3.0, 8.0)), 2,
                "h100-ondemand", tag="-sweep")
        # a release replay too large for the lane's share while the sweep runs: it waits
        add("release_eval", sweep_day, 0, t0 + 1800, 4.0, 16, "h100-ondemand", tag="-full-odd")
        # field incidents while research holds borrowed H100s: they reclaim them
        for n, hours_in in enumerate((1.0, 26.0, 50.0)):
            add("incident_response", sweep_day, n, t0 + hours_in * 3600, 2.5, 8, "h100-ondemand", tag="-sev1")
    return jobs, requests, faults


def _place(nodes: list[FleetNode], runs: list[tuple[str, Segment, int]]) -> None:
    """Give every segment GPUs on nodes of its flavor: best fit on one node, else spread."""
    free: dict[str, list[int]] = {n.name: list(range(GPUS_PER_NODE)) for n in nodes}
    by_flavor: dict[str, list[str]] = {}
    for n in nodes:
        by_flavor.setdefault(n.flavor, []).append(n.name)
    events: list[tuple[float, int, int]] = []
    for i, (_rid, seg, _gpus) in enumerate(runs):
        events.append((seg.start, 1, i))
        events.append((seg.end, 0, i))
    for _t, kind, i in sorted(events):
        _rid, seg, gpus = runs[i]
        if kind == 0:
            for node, idx in seg.placement:
                free[node].extend(idx)
                free[node].sort()
            continue
        names = by_flavor.get(seg.flavor, [])
        fits = [n for n in names if len(free[n]) >= gpus]
        if fits:
            node = min(fits, key=lambda n: (len(free[n]), n))
            take, free[node] = free[node][:gpus], free[node][gpus:]
            seg.placement = [(node, tuple(take))]
            continue
        left = gpus
        for node in sorted(names, key=lambda n: -len(free[n])):
            if left <= 0:
                break
            k = min(left, len(free[node]))
            if k:
                take, free[node] = free[node][:k], free[node][k:]
                seg.placement.append((node, tuple(take)))
                left -= k
        if left > 0:
            raise RuntimeError(f"history placement: {gpus} GPUs of {seg.flavor} not free at {_at(seg.start)}")


def generate(policy: Policy, days: list[date], seed: int = 7, progress: Callable[[str], None] | None = None) -> History:
    """Draw, simulate and place the history of `days` (see the module doc)."""
    jobs, requests, faults = draw_jobs(policy, days, seed)
    scenario = policy_scenario(policy)
    sim = _Recording(scenario, jobs, 15.0, 1800.0, 16, 1, True, True)
    sim.run()
    nodes = fleet(policy)
    end_of_history = _epoch(days[-1]) + 86400
    rng = np.random.default_rng(seed + 1)
    out: list[HistJob] = []
    never: list[HistJob] = []
    runs: list[tuple[str, Segment, int]] = []
    for r in sim.runs:
        req = requests[r.job.job_id]
        segs = []
        for start, end, flavor, outcome in sim.segments.get(r.job.job_id, []):
            if start >= end_of_history - 600:
                break
            if end is None or end > end_of_history - 60:
                # the history ends at midnight with nothing running: a run that would cross it
                # ends (finished) a minute before, so no history request is live in the demo
                segs.append(Segment(len(segs) + 1, start, end_of_history - 60, flavor, "finished"))
                break
            segs.append(Segment(len(segs) + 1, start, end, flavor, outcome))
        if segs and segs[-1].outcome == "preempted":
            segs[-1].outcome = "finished"  # its resumption falls after the history: end it there
        if not segs:
            never.append(HistJob(req, r.job.submit_ts, [], end_of_history - r.job.submit_ts))
            continue
        last = segs[-1]
        fault = faults.get(r.job.job_id)
        if fault == "fail" and last.outcome == "finished":
            last.end = last.start + (last.end - last.start) * float(rng.uniform(0.1, 0.8))
            last.outcome = "failed"
        elif fault == "oom" and segs[0].outcome in ("finished", "preempted"):
            first = segs[0]
            oom_at = first.start + min(first.end - first.start - 60, float(rng.uniform(300, 1500)))
            if oom_at > first.start + 60:
                retry = Segment(2, oom_at + 30, first.end, first.flavor, first.outcome)
                first.end, first.outcome = oom_at, "oom"
                segs = [first, retry] + [replace(s, attempt=s.attempt + 1) for s in segs[1:]]
        waited = segs[0].start - r.job.submit_ts
        job = HistJob(req, r.job.submit_ts, segs, waited)
        out.append(job)
        runs += [(job.request_id, s, int(r.job.gpus)) for s in segs]
    _place(nodes, runs)
    if progress:
        progress(f"{len(out)} jobs admitted, {sum(len(j.segments) for j in out)} runs, "
                 f"{sum(s.outcome == 'preempted' for j in out for s in j.segments)} preemptions")
    return History(days, nodes, out, never, sim.calls)


# the ledger -----------------------------------------------------------------------------------

OOM_REASON = "OOMKilled: CUDA out of memory (exit 137); retried"
PREEMPT_REASON = "preempted by a higher-priority lane reclaiming its quota"


def _pod(rid: str, attempt: int, k: int) -> str:
    h = hashlib.sha256(f"{rid}#{attempt}".encode()).hexdigest()
    return f"dagster-step-{h[:10]}-{h[10:15]}" + (f"-w{k}" if k else "")


def write_ledger(history: History, ledger: Ledger, policy: Policy) -> int:
    """Record the history's requests, events and workload results in one transaction each."""
    req_rows, ev_rows, run_rows = [], [], []

    def ev(rid: str, event: str, at: float, reason: str, flavor: str | None = None, details: Any = None) -> None:
        ev_rows.append({"request_id": rid, "event": event, "at": _at(at).replace(tzinfo=None), "reason": reason,
                        "flavor": flavor, "run_id": None,
                        "details": json.dumps(details, sort_keys=True) if details else None})

    # jobs the history ends before admitting are not recorded: none is pending when the demo starts
    for job in sorted(history.jobs, key=lambda j: j.submit):
        rid, req = job.request_id, job.request
        req_rows.append(ledger._row(req, rid, _at(job.submit).replace(tzinfo=None)))
        ev(rid, "submitted", job.submit, "validated")
        if job.waited_s > 60:
            ev(rid, "waiting", job.submit + 15, "waiting for quota in its lane", details={"position": 1})
        for seg in job.segments:
            ev(rid, "admitted", seg.start, f"QuotaReserved on {seg.flavor}", seg.flavor,
               {"run_key": f"{rid}#{seg.attempt}", "attempt": seg.attempt})
            if seg.outcome == "preempted":
                ev(rid, "preempted", seg.end, PREEMPT_REASON, seg.flavor)
                ev(rid, "requeued", seg.end, "requeued at its original submission time (resumes from checkpoint)")
            elif seg.outcome == "oom":
                ev(rid, "failed", seg.end, OOM_REASON, seg.flavor, {"exit_status": 137})
            elif seg.outcome in ("finished", "failed"):
                ev(rid, seg.outcome, seg.end, f"history run {seg.outcome}", seg.flavor)
        last = job.segments[-1]
        if last.outcome in ("finished", "failed"):
            kind = req.workload or policy.lane(req.lane or "").default_workload
            gpu_h = sum((s.end - s.start) / 3600 * req.gpu_count for s in job.segments)
            results = _results(req, job, rid)
            run = WorkloadRun.for_request(req, kind, SUCCEEDED if last.outcome == "finished" else "failed",
                                          results=results, gpu_hours=round(gpu_h, 6),
                                          exit_status=0 if last.outcome == "finished" else 1,
                                          attempts=len(job.segments), recorded_at=_at(last.end))
            row = run.to_dict()
            row["recorded_at"] = _at(last.end)
            for name in RUN_JSON_COLUMNS:
                row[name] = json.dumps(row[name], sort_keys=True, default=str)
            run_rows.append(row)
    LineageStore(ledger.engine)  # creates its tables
    with ledger.engine.begin() as conn:
        conn.execute(requests_table.insert(), req_rows)
        conn.execute(events_table.insert(), ev_rows)
        if run_rows:
            conn.execute(workload_runs.insert(), run_rows)
    return len(req_rows)


def _results(req: JobRequest, job: HistJob, rid: str) -> dict[str, Any]:
    seed = int(hashlib.sha256(rid.encode()).hexdigest()[:6], 16)
    ran = sum(s.end - s.start for s in job.segments)
    # what the pod status says of each attempt, summed: image pull, setup before the program starts
    timings = {"image_pull_s": float(IMAGE_PULL_S[1] if seed % COLD_PULL_SHARE == 0 else IMAGE_PULL_S[0]),
               "setup_s": float(20 + seed % 70), "runtime_s": round(ran, 1)}
    if req.lane == "labeler_batch":
        frames = 12_000 + seed % 9_000
        return {"accepted": frames - frames // 12, "rejected": frames // 12, **timings}
    if req.lane == "release_eval":
        return {"replay_hours": round(ran / 3600 * 10, 2), **timings}
    return timings


# feeds ----------------------------------------------------------------------------------------


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
                  "nvidia.com/gpu.present": "true", "nvidia.com/gpu.count": str(GPUS_PER_NODE)}
        taints = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
        if n.flavor == "a100-spot":
            taints.append({"key": "cloud.google.com/gke-spot", "value": "true", "effect": "NoSchedule"})
        capacity = {"cpu": "192", "memory": "2097152Mi", "pods": "110", "nvidia.com/gpu": str(GPUS_PER_NODE)}
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
    busy = np.zeros((steps, GPUS_PER_NODE))
    holder = np.full((steps, GPUS_PER_NODE), -1, dtype=np.int32)
    memory = np.zeros((steps, GPUS_PER_NODE))
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
    gpu = pl.Series(np.tile(np.arange(GPUS_PER_NODE, dtype=np.int32), steps))
    metric = ENGINE if node.kind.profiling else UTIL
    value = busy.ravel() if node.kind.profiling else np.clip(np.round(busy.ravel() * 100 + 8 * (busy.ravel() > 0)), 0, 100)
    mem_steps = np.arange(0, steps, MEMORY_EVERY)
    mem_rows = (mem_steps[:, None] * GPUS_PER_NODE + np.arange(GPUS_PER_NODE)).ravel()
    n_mem = len(mem_rows)
    frame = pl.DataFrame({
        "ts": pl.concat([ts.gather(np.repeat(np.arange(steps), GPUS_PER_NODE)),
                         ts.gather(np.repeat(mem_steps, GPUS_PER_NODE))]),
        "metric": pl.Series([metric, FB_USED], dtype=pl.String).gather(
            np.concatenate([np.zeros(steps * GPUS_PER_NODE, dtype=np.int32), np.ones(n_mem, dtype=np.int32)])),
        "value": np.concatenate([np.round(value, 3), np.round(memory.ravel()[mem_rows])]),
        "hostname": pl.Series([node.name], dtype=pl.String).gather(np.zeros(steps * GPUS_PER_NODE + n_mem, dtype=np.int32)),
        "gpu": pl.concat([gpu, gpu.gather(mem_rows)]),
    }).with_columns(
        uuid=pl.col("gpu").replace_strict({g: gpu_uuid(node.name, g) for g in range(GPUS_PER_NODE)},
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


def summary(history: History) -> dict[str, Any]:
    """Counts a reader (and the tests) check: per lane jobs, preemptions, failures, OOM retries, waits."""
    lanes: dict[str, dict[str, Any]] = {}
    for job in history.jobs:
        s = lanes.setdefault(job.request.lane or "", {"jobs": 0, "preempted": 0, "failed": 0, "oom_retries": 0,
                                                       "max_wait_h": 0.0, "gpu_hours": 0.0})
        s["jobs"] += 1
        s["preempted"] += sum(x.outcome == "preempted" for x in job.segments)
        s["failed"] += job.segments[-1].outcome == "failed"
        s["oom_retries"] += sum(x.outcome == "oom" for x in job.segments)
        s["max_wait_h"] = round(max(s["max_wait_h"], job.waited_s / 3600), 2)
        s["gpu_hours"] = round(s["gpu_hours"] + sum((x.end - x.start) / 3600 * job.request.gpu_count
                                                     for x in job.segments), 1)
    return {"days": [history.days[0].isoformat(), history.days[-1].isoformat()], "nodes": len(history.nodes),
            "jobs": len(history.jobs), "never_admitted": len(history.never_admitted), "lanes": lanes}


