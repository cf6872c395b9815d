"""The demo history's job mix: per lane Poisson arrivals by hour of day, log-normal durations,
GPU counts, failures and OOM retries (`MIX`, `draw_jobs`), a research sweep that floods the
research lane, an oversized release replay and field incidents, and every 3-4 days a model and a
map release chain (`add_chains`) whose stages name their upstream requests' outputs. Drawn from
one seeded generator: the same days give the same mix. `_epoch` and `_at` are the history's clock
(seconds since the epoch, UTC).

May import `lineage/graph.py`, `policy/`, `requests/model.py`, `simulate/trace.py`, `demo/costs.py`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

import numpy as np

from gpu_platform.demo.costs import (
    EXAMPLES,
    _suffixed,
)
from gpu_platform.lineage.graph import (
    Parent,
    resolve_parents,
)
from gpu_platform.policy import Policy
from gpu_platform.requests.model import JobRequest, validate_request_file
from gpu_platform.simulate.trace import TraceJob


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


OFFICE = np.array([0.3] * 7 + [1.0] + [1.8] * 12 + [1.0] + [0.4] * 3)


OFFICE = OFFICE / OFFICE.mean()


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


def draw_jobs(policy: Policy, days: list[date], seed: int = 7, mix: Mapping[str, LaneMix] | None = None) -> Draw:
    """The job mix of `days` (see the module doc), then the release chains (`add_chains`).
    mix: the lanes' mix (None: `MIX`)."""
    lanes = MIX if mix is None else mix
    rng = np.random.default_rng(seed)
    base = {lane: validate_request_file(EXAMPLES / m.example, policy) for lane, m in lanes.items()}
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
        mix = lanes[lane]
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
        for lane, mix in lanes.items():
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
    chain_ids = add_chains(policy, days, rng, base, job, faults, lanes)
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
               job: Callable[..., JobRequest], faults: dict[str, str],
               mix: Mapping[str, LaneMix] | None = None) -> list[str]:
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
    mix = MIX if mix is None else mix
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
                  str(rng.choice(mix["labeler_batch"].gpu_types)), output_artifact_ids=(out,))
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
                  str(rng.choice(mix["release_eval"].gpu_types)), output_artifact_ids=(out,),
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
