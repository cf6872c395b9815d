"""A month of generated GPU-pool history for the demo, pushed through the real admission engine.

`generate(policy, days)` draws a job mix for the eight lanes (Poisson arrivals per lane and hour
of day, log-normal durations, GPU counts per lane, failures, OOM retries, a research sweep that
floods the research lane, an oversized release replay that waits a long time, and every 3-4 days
a model and a map release chain, `add_chains`), replays it with the policy simulator
(`gpu_platform.simulate`: the same engine, cycles, preemption with checkpoint loss and requeue; a
release-chain stage arrives once its upstream requests finished), places every run on a GPU of a
node of the fleet, and returns the whole story. `write_ledger` and `write_feeds` then record it:

- the ledger: every request (`hist-<day>-<lane>-<n>`, release chains `hist-<day>-model-chain-*`
  and `hist-<day>-map-chain-*`) with its submitted / admitted / preempted / requeued / finished /
  failed events at the times the engine decided, its workload result (accepted / rejected labels,
  replay hours and suites) in `workload_runs` (a release also as its evidence-pack stage), and the
  release chains' `lineage_edges` child -> parent as the live stages record them; ids and artifact
  ids carry a `-h<day>` suffix, so history never feeds the live demo requests;
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
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from gpu_platform.admission.policy_view import nodes_for
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
from gpu_platform.lineage.graph import (
    RELEASE_KINDS,
    SUCCEEDED,
    LineageStore,
    Parent,
    WorkloadRun,
    lineage_edges,
    resolve_parents,
    workload_runs,
)
from gpu_platform.policy import Policy
from gpu_platform.requests.ledger import Ledger, events_table, requests_table
from gpu_platform.requests.model import JobRequest, validate_request_file
from gpu_platform.simulate.des import JobRun, _Sim
from gpu_platform.simulate.scenarios import policy_node_gpus, policy_scenario, with_nodes
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
    gpus: int = 8
    """GPUs of one instance of this type."""
    vcpus: int = 192
    memory_mib: int = 2097152

    @property
    def memory_gib(self) -> float:
        """Framebuffer of one GPU (from the model name: 80, 40 or the L4's 24 GB)."""
        return 80.0 if "80GB" in self.model_name else 40.0 if "40GB" in self.model_name else 24.0


INSTANCE_TYPES: dict[str, tuple[FleetType, ...]] = {
    "h100-ondemand": (FleetType("h100-ondemand", "p5.48xlarge", "NVIDIA H100 80GB HBM3", True,
                                ("98.32", "63.908", "Committed"), "us-west-2a", 8, 192, 2097152),),
    "l4-inference": (FleetType("l4-inference", "g6.12xlarge", "NVIDIA L4", False,
                               ("4.6016", "4.6016", "Standard"), "us-west-2b", 4, 48, 196608),
                     FleetType("l4-inference", "g6.48xlarge", "NVIDIA L4", False,
                               ("13.3504", "13.3504", "Standard"), "us-west-2b", 8, 192, 786432)),
    "a100-spot": (FleetType("a100-spot", "p4d.24xlarge", "NVIDIA A100-SXM4-40GB", True,
                            ("32.7726", "9.8318", "Dynamic"), "us-west-2c", 8, 96, 1179648),),
}
"""The instance types behind each demo flavor, by GPUs per instance (on-demand list prices)."""
FLEET_TYPES = {flavor: types[-1] for flavor, types in INSTANCE_TYPES.items()}
"""The largest instance type of each flavor."""


def instance_type(flavor: str, gpus: int) -> FleetType:
    """The instance type of `flavor` with `gpus` GPUs; for a node size no type offers (a policy
    with other node shapes), the flavor's largest type with its hourly prices prorated by GPU."""
    types = INSTANCE_TYPES[flavor]
    for t in types:
        if t.gpus == gpus:
            return t
    big = types[-1]
    k = Decimal(gpus) / Decimal(big.gpus)
    hourly = (str(Decimal(big.hourly[0]) * k), str(Decimal(big.hourly[1]) * k), big.hourly[2])
    return replace(big, hourly=hourly, gpus=gpus)


@dataclass(frozen=True)
class FleetNode:
    name: str
    flavor: str
    instance_id: str
    kind: FleetType
    node_pool: str
    """The flavor's node pool (`training`, `inference`, `spot`): what the node's
    `gpu-platform.io/node-pool` label says, as on a real cluster (never the flavor's name)."""
    engine_name: str = ""
    """The admission engine's name for this node (`<flavor>/node-<i>`, `nodes_for`)."""

    @property
    def gpus(self) -> int:
        return self.kind.gpus

    @property
    def provider_id(self) -> str:
        return f"aws:///{self.kind.zone}/{self.instance_id}"


def fleet(policy: Policy) -> list[FleetNode]:
    """The nodes of the policy's node shapes (`nodes_for`: what the gate's node model places work
    on) for the flavors the demo has instance types for; fractional flavors have none."""
    nodes = []
    flavor_index = {f.name: i for i, f in enumerate(policy.flavors)}
    pool = {f.name: f.node_pool for f in policy.flavors}
    for spec in nodes_for(policy):
        if spec.flavor not in INSTANCE_TYPES:
            continue
        i = int(spec.name.rsplit("-", 1)[1])
        octet = 16 * (flavor_index[spec.flavor] + 1) + i
        name = f"ip-10-0-{octet}-{40 + i}.us-west-2.compute.internal"
        instance = "i-0" + hashlib.sha256(name.encode()).hexdigest()[:16]
        kind = instance_type(spec.flavor, int(spec.gpus))
        nodes.append(FleetNode(name, spec.flavor, instance, kind, pool[spec.flavor], spec.name))
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
    nodes: dict[str, int] = field(default_factory=dict)
    """The engine's placement: its node name (`<flavor>/node-<i>`) -> GPUs, one pod per node."""
    placement: list[tuple[str, tuple[int, ...]]] = field(default_factory=list)
    """(fleet node, GPU indices) per pod, from `nodes`."""


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
    parents: dict[str, list[Parent]] = field(default_factory=dict)
    """Release-chain requests -> the upstream requests whose outputs they read (by artifact id)."""


class _Recording(_Sim):
    """The simulator, also keeping each run's [start, end) and flavor. `after`: job id -> the job
    ids it needs finished first (a release-chain stage waits for its upstream requests): such a
    job arrives at its submission time or, when later, the instant its last upstream finishes."""

    def __init__(self, *args: Any, after: dict[str, list[str]] | None = None):
        super().__init__(*args)
        self.segments: dict[str, list[list[Any]]] = {}
        self.after = {k: v for k, v in (after or {}).items() if v}
        self.children: dict[str, list[str]] = {}
        for child, parents in self.after.items():
            for p in parents:
                self.children.setdefault(p, []).append(child)
        self.done: set[str] = set()
        self.held: dict[str, JobRun] = {}

    def _ready(self, job_id: str) -> bool:
        return all(p in self.done for p in self.after.get(job_id, ()))

    def arrive(self, r, now):  # type: ignore[no-untyped-def]
        if not self._ready(r.job.job_id):
            self.held[r.job.job_id] = r
            return False
        return super().arrive(r, now)

    def complete(self, r, now):  # type: ignore[no-untyped-def]
        super().complete(r, now)
        self.done.add(r.job.job_id)
        for child in self.children.get(r.job.job_id, ()):
            held = self.held.get(child)
            if held is not None and self._ready(child):
                del self.held[child]
                # submitted now: its queue position and wait count from here
                held.job = replace(held.job, submit_ts=now)
                if held.wl is not None:
                    held.wl = replace(held.wl, created_at=now)
                super().arrive(held, now)

    def _start(self, r, flavor, now, placement=None):  # type: ignore[no-untyped-def]
        super()._start(r, flavor, now, placement)
        nodes = {n: int(round(g)) for n, g in (placement or {}).items() if g > 0}
        self.segments.setdefault(r.job.job_id, []).append([now, None, flavor, "finished", nodes])

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


@dataclass
class Draw:
    """What `draw_jobs` drew: trace jobs, the request of each job id, planned faults ('fail' |
    'oom') and, for release-chain requests, their upstream requests (resolved by artifact id as
    the live platform resolves them: `gpu_platform.lineage.graph.resolve_parents`)."""

    jobs: list[TraceJob]
    requests: dict[str, JobRequest]
    faults: dict[str, str]
    parents: dict[str, list[Parent]]


def draw_jobs(policy: Policy, days: list[date], seed: int = 7) -> Draw:
    """The job mix of `days` (see the module doc), then the release chains (`add_chains`)."""
    rng = np.random.default_rng(seed)
    base = {lane: validate_request_file(EXAMPLES / m.example, policy) for lane, m in MIX.items()}
    jobs: list[TraceJob] = []
    requests: dict[str, JobRequest] = {}
    faults: dict[str, str] = {}

    def job(rid: str, req: JobRequest, at: float, hours: float, gpus: int, gpu_type: str) -> JobRequest:
        duration = max(600.0, hours * 3600)
        expected = math.ceil(duration / 600) * 600
        lane_max = policy.lane(req.lane or "").max_run_duration.total_seconds()
        expected = min(expected, lane_max)
        duration = min(duration, expected)
        timeout = min(lane_max, expected * 2)
        req = req.model_copy(update={
            "request_id": rid, "gpu_type": gpu_type, "gpu_count": gpus,
            "expected_duration": timedelta(seconds=expected), "timeout": timedelta(seconds=timeout)})
        requests[rid] = req
        jobs.append(TraceJob(rid, at, duration, float(gpus), req.lane or "", gpu_type=gpu_type,
                             preemption_policy=req.preemption_policy or "checkpoint_requeue"))
        return req

    def add(lane: str, day: date, n: int, at: float, hours: float, gpus: int, gpu_type: str, tag: str = "") -> None:
        mix = MIX[lane]
        rid = f"hist-{day:%Y%m%d}-{lane.replace('_', '-')}{tag}-{n:03d}"
        req = base[lane]
        job(rid, req.model_copy(update=_suffixed(req, f"-h{day:%Y%m%d}-{n:03d}{tag}")), at, hours, gpus, gpu_type)
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
    chain_ids = add_chains(policy, days, rng, base, job, faults)
    chain = {rid: requests[rid] for rid in chain_ids}
    parents = {rid: resolve_parents(req, chain)[0] for rid, req in chain.items()}
    return Draw(jobs, requests, faults, parents)


CHAIN = EXAMPLES / "release_chain"
CHAIN_EVERY = (3, 5)
"""Days between two release-chain days: 3 or 4 (drawn), the first on day 0 or 1; never the last day."""
CHAIN_HOURS = {"label": 1.5, "train": 10.0, "replay": 3.0, "pack": 0.5, "release": 0.25, "segment": 4.0,
               "map_replay": 0.75}
"""Median hours of each release-chain stage (log-normal, sigma 0.3; at least 10 minutes)."""


def chain_days(rng: np.random.Generator, days: list[date]) -> list[date]:
    """The days a release chain starts: every 3-4 days (drawn), never the last day (the chain
    needs the rest of its day and often the next to finish)."""
    out = []
    i = int(rng.integers(0, 2))
    while i < len(days) - 1:
        out.append(days[i])
        i += int(rng.integers(*CHAIN_EVERY))
    return out


def add_chains(policy: Policy, days: list[date], rng: np.random.Generator, base: dict[str, JobRequest],
               job: Callable[..., JobRequest], faults: dict[str, str]) -> list[str]:
    """On each chain day a model release chain and a map release chain, from the request shapes of
    `examples/requests/` and `examples/requests/release_chain/` with ids suffixed `-h<day>-chain`
    (shared along a chain, so each stage names its upstream's outputs, and never a live demo id):

    - model: 1-2 label batches -> a candidate training run on them (the first chain's first attempt
      OOM-killed and retried, later chains' at random) -> 1-2 replays of the candidate (release_eval
      lane) -> an ODD-cell evidence pack over the replays -> a `released_model` naming the model,
      the replays and the pack in its artifact_set (its own evidence-pack stage, then the release);
    - map: a map segmentation -> drives replayed on the new map -> a `released_map`.

    Replays, packs and releases carry the candidate's `candidate_id` and the chain's
    `release_packet_id` and `odd_cell`. A stage is submitted at its planned time or, if later,
    when its last upstream request finishes (`_Recording` holds it until then). Returns the ids."""
    shapes = {name: validate_request_file(CHAIN / f"{name}.yaml", policy)
              for name in ("evidence_pack", "released_model", "replay_map", "released_map")}
    ids: list[str] = []

    def hours(stage: str) -> float:
        return CHAIN_HOURS[stage] * float(rng.lognormal(0, 0.3))

    def stage(rid: str, req: JobRequest, sfx: str, at: float, h: float, gpus: int, gpu_type: str,
              **update: Any) -> JobRequest:
        ids.append(rid)
        return job(rid, req.model_copy(update={**_suffixed(req, sfx), **update}), at, h, gpus, gpu_type)

    for c, day in enumerate(chain_days(rng, days)):
        sfx = f"-h{day:%Y%m%d}-chain"
        t0 = _epoch(day) + 3600 * float(rng.uniform(0.5, 4.0))
        model = f"hist-{day:%Y%m%d}-model-chain"
        lbl = base["labeler_batch"]
        labels = []
        for i in range(int(rng.integers(1, 3))):
            out = f"{lbl.output_artifact_ids[0]}{sfx}-b{i}"
            stage(f"{model}-label-{i}", lbl, sfx, t0 + 300 * i, hours("label"), int(rng.choice((2, 4))),
                  str(rng.choice(MIX["labeler_batch"].gpu_types)), output_artifact_ids=(out,))
            labels.append(out)
        train = stage(f"{model}-train", base["candidate_train"], sfx, t0, hours("train"), 8, "h100-ondemand",
                      dataset_ids=tuple(labels))
        if c == 0 or rng.uniform() < 0.5:
            faults[train.request_id or ""] = "oom"
        candidate = {"candidate_id": train.candidate_id, "odd_cell": train.odd_cell}
        rep = base["release_eval"]
        replays = []
        for i in range(int(rng.integers(1, 3))):
            out = f"{rep.output_artifact_ids[0]}{sfx}-r{i}"
            stage(f"{model}-replay-{i}", rep, sfx, t0, hours("replay"), 4,
                  str(rng.choice(MIX["release_eval"].gpu_types)), output_artifact_ids=(out,),
                  dataset_ids=tuple(f"{d}{sfx}-p{i}" for d in rep.dataset_ids), **candidate)
            replays.append(out)
        pack = stage(f"{model}-evidence-pack", shapes["evidence_pack"], sfx, t0, hours("pack"), 1, "l4-inference",
                     artifact_set=tuple(replays), **candidate)
        rel = shapes["released_model"]
        stage(f"{model}-release", rel, sfx, t0, hours("release"), 1, "l4-inference",
              artifact_set=(*train.output_artifact_ids, *replays, *pack.output_artifact_ids), **candidate)

        t1 = _epoch(day) + 3600 * float(rng.uniform(0.5, 6.0))
        mapping = f"hist-{day:%Y%m%d}-map-chain"
        seg = stage(f"{mapping}-segment", base["map_semantic_batch"], sfx, t1, hours("segment"), 4, "l4-inference")
        drive = stage(f"{mapping}-replay", shapes["replay_map"], sfx, t1, hours("map_replay"), 1, "l4-inference")
        stage(f"{mapping}-release", shapes["released_map"], sfx, t1, hours("release"), 1, "l4-inference",
              artifact_set=(*seg.output_artifact_ids, *drive.output_artifact_ids))
    return ids


def _place(nodes: list[FleetNode], runs: list[tuple[str, Segment, int]]) -> None:
    """Give every segment the GPU indices of the nodes the engine placed it on (`Segment.nodes`).

    The engine never holds more GPUs of a node than it has, and every segment lies within the
    engine's run (failures, OOM kills and the end of the history only shorten or split it), so
    indices are always free; a segment the engine did not place is a bug, not a busy day."""
    by_engine = {n.engine_name: n for n in nodes}
    free: dict[str, list[int]] = {n.name: list(range(n.gpus)) for n in nodes}
    events: list[tuple[float, int, int]] = []
    for i, (_rid, seg, _gpus) in enumerate(runs):
        events.append((seg.start, 1, i))
        events.append((seg.end, 0, i))
    for _t, kind, i in sorted(events):
        rid, seg, gpus = runs[i]
        if kind == 0:
            for node, idx in seg.placement:
                free[node].extend(idx)
                free[node].sort()
            continue
        if sum(seg.nodes.values()) != gpus or any(n not in by_engine for n in seg.nodes):
            raise AssertionError(f"history: {rid} attempt {seg.attempt} was admitted without a placement "
                                 f"for its {gpus} GPUs on the fleet ({seg.nodes})")
        seg.placement = []
        for engine_name, k in sorted(seg.nodes.items()):
            node = by_engine[engine_name].name
            if len(free[node]) < k:
                raise AssertionError(f"history: {rid} attempt {seg.attempt}: {k} GPUs of {node} not free at "
                                     f"{_at(seg.start)} although the engine placed it there")
            take, free[node] = free[node][:k], free[node][k:]
            seg.placement.append((node, tuple(take)))


def generate(policy: Policy, days: list[date], seed: int = 7, progress: Callable[[str], None] | None = None) -> History:
    """Draw, simulate and place the history of `days` (see the module doc)."""
    draw = draw_jobs(policy, days, seed)
    requests, faults = draw.requests, draw.faults
    # the node model the gate uses on a cluster: every admitted job is placed on a node by the
    # engine, so a history that admits a job it cannot place is impossible by construction
    shapes = {f: g for f, g in policy_node_gpus(policy).items() if f in INSTANCE_TYPES}
    scenario = with_nodes(policy_scenario(policy), shapes)
    sim = _Recording(scenario, draw.jobs, 15.0, 1800.0, 16, 1, True, True,
                     after={rid: [p.request_id for p in ps] for rid, ps in draw.parents.items()})
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
        for start, end, flavor, outcome, held in sim.segments.get(r.job.job_id, []):
            if start >= end_of_history - 600:
                break
            if end is not None and end <= start:
                # admitted and preempted by a later engine call at the same instant: no pod ran
                continue
            if end is None or end > end_of_history - 60:
                # the history ends at midnight with nothing running: a run that would cross it
                # ends (finished) a minute before, so no history request is live in the demo
                segs.append(Segment(len(segs) + 1, start, end_of_history - 60, flavor, "finished", held))
                break
            segs.append(Segment(len(segs) + 1, start, end, flavor, outcome, held))
        if segs and segs[-1].outcome == "preempted":
            segs[-1].outcome = "finished"  # its resumption falls after the history: end it there
        if not segs:
            if r.job.job_id not in draw.parents:  # a chain stage held past the history was never submitted
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
                retry = Segment(2, oom_at + 30, first.end, first.flavor, first.outcome, dict(first.nodes))
                first.end, first.outcome = oom_at, "oom"
                segs = [first, retry] + [replace(s, attempt=s.attempt + 1) for s in segs[1:]]
        waited = segs[0].start - r.job.submit_ts
        out.append(HistJob(req, r.job.submit_ts, segs, waited))
    out, parents = _whole_chains(out, draw.parents)
    runs = [(job.request_id, s, job.request.gpu_count) for job in out for s in job.segments]
    _place(nodes, runs)
    if progress:
        progress(f"{len(out)} jobs admitted, {sum(len(j.segments) for j in out)} runs, "
                 f"{sum(s.outcome == 'preempted' for j in out for s in j.segments)} preemptions")
    return History(days, nodes, out, never, sim.calls, parents)


def _whole_chains(jobs: list[HistJob], parents: dict[str, list[Parent]]) -> tuple[list[HistJob], dict[str, list[Parent]]]:
    """Drop a chain stage whose upstream is not in the history, or did not finish before the stage
    started (its upstream ran past the end of the history); keep the parents of the rest."""
    by_id = {j.request_id: j for j in jobs}
    dropped: set[str] = set()
    changed = True
    while changed:
        changed = False
        for rid in parents:
            if rid in by_id and rid not in dropped:
                job = by_id[rid]
                for p in parents[rid]:
                    up = by_id.get(p.request_id)
                    if (up is None or p.request_id in dropped or up.segments[-1].outcome != "finished"
                            or up.segments[-1].end > job.segments[0].start):
                        dropped.add(rid)
                        changed = True
                        break
    kept = [j for j in jobs if j.request_id not in dropped]
    return kept, {rid: ps for rid, ps in parents.items() if rid in by_id and rid not in dropped}


# the ledger -----------------------------------------------------------------------------------

OOM_REASON = "OOMKilled: CUDA out of memory (exit 137); retried"
PREEMPT_REASON = "preempted by a higher-priority lane reclaiming its quota"


def _pod(rid: str, attempt: int, k: int) -> str:
    h = hashlib.sha256(f"{rid}#{attempt}".encode()).hexdigest()
    return f"dagster-step-{h[:10]}-{h[10:15]}" + (f"-w{k}" if k else "")


def write_ledger(history: History, ledger: Ledger, policy: Policy) -> int:
    """Record the history's requests, events, workload results and release-chain lineage in one
    transaction.

    Lineage as the live platform records it (`gpu_platform.workloads.stages`): a stage's edges go
    to the requests whose outputs it reads; a release request is two stages, its evidence pack
    (edges to its artifact_set's producers) and the release (edge to its own evidence pack)."""
    req_rows, ev_rows, run_rows, edge_rows = [], [], [], []

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
        kind = req.workload or policy.lane(req.lane or "").default_workload
        if rid in history.parents:
            started = _at(job.segments[0].start)
            stages = [("evidence_pack", history.parents[rid]), (kind, [Parent(rid, "evidence_pack", f"evidence-pack:{rid}")])] \
                if kind in RELEASE_KINDS else [(kind, history.parents[rid])]
            edge_rows += [{"child_request_id": rid, "child_kind": k, "parent_request_id": p.request_id,
                           "parent_kind": p.kind, "via_id": p.via_id, "recorded_at": started}
                          for k, ps in stages for p in dict.fromkeys(ps)]
        last = job.segments[-1]
        if last.outcome in ("finished", "failed"):
            gpu_h = sum((s.end - s.start) / 3600 * req.gpu_count for s in job.segments)
            status = SUCCEEDED if last.outcome == "finished" else "failed"
            run = WorkloadRun.for_request(req, kind, status, results=_results(req, job, rid), gpu_hours=round(gpu_h, 6),
                                          exit_status=0 if last.outcome == "finished" else 1,
                                          attempts=len(job.segments), recorded_at=_at(last.end))
            if kind in RELEASE_KINDS:
                # the release's run assembles its evidence pack first, then publishes (one pod)
                run_rows.append(_run_row(replace(run, kind="evidence_pack", gpu_hours=0.0,
                                                 results={"stages": len(history.parents.get(rid, []))})))
            run_rows.append(_run_row(run))
    LineageStore(ledger.engine)  # creates its tables
    with ledger.engine.begin() as conn:
        conn.execute(requests_table.insert(), req_rows)
        conn.execute(events_table.insert(), ev_rows)
        Ledger.backfill_state_in(conn)  # the history's state rows, derived from the events just written
        if run_rows:
            conn.execute(workload_runs.insert(), run_rows)
        if edge_rows:
            conn.execute(lineage_edges.insert(), edge_rows)
    return len(req_rows)


def _run_row(run: WorkloadRun) -> dict[str, Any]:
    row = run.to_dict()
    row["recorded_at"] = run.recorded_at
    for name in RUN_JSON_COLUMNS:
        row[name] = json.dumps(row[name], sort_keys=True, default=str)
    return row


def _results(req: JobRequest, job: HistJob, rid: str) -> dict[str, Any]:
    seed = int(hashlib.sha256(rid.encode()).hexdigest()[:6], 16)
    ran = sum(s.end - s.start for s in job.segments)
    # what the pod status says of each attempt, summed: image pull, setup before the program starts
    timings = {"image_pull_s": float(IMAGE_PULL_S[1] if seed % COLD_PULL_SHARE == 0 else IMAGE_PULL_S[0]),
               "setup_s": float(20 + seed % 70), "runtime_s": round(ran, 1)}
    if req.lane == "labeler_batch":
        frames = 12_000 + seed % 9_000
        return {"accepted": frames - frames // 12, "rejected": frames // 12, **timings}
    if req.workload == "replay":
        suites = {suite: {"status": "passed", "pass_rate": round(0.95 + (seed % 50) / 1000, 3)}
                  for suite in req.evaluator_ids}
        return {"replay_hours": round(ran / 3600 * 10, 2), "suites": suites, **timings}
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
    releases = {kind: sum(j.request.workload == kind and j.segments[-1].outcome == "finished" for j in history.jobs)
                for kind in RELEASE_KINDS}
    return {"days": [history.days[0].isoformat(), history.days[-1].isoformat()], "nodes": len(history.nodes),
            "jobs": len(history.jobs), "never_admitted": len(history.never_admitted), "lanes": lanes,
            "releases": releases, "release_chain_requests": len(history.parents)}


