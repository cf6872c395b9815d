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

One module per job: this one simulates, places and records (`generate`, `write_ledger`,
`summary`) and re-exports the rest; `fleet.py` the nodes; `job_mix.py` the job mix and release
chains (and the history's clock); `history_types.py` what a history is made of;
`history_feeds.py` the node, pod, DCGM and FOCUS feeds.
May import `admission/`, `cluster/`, `lineage/`, `policy/`, `requests/`, `simulate/` and the
`demo/` modules named here and `demo/costs.py`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import replace
from datetime import date
from typing import Any

import numpy as np

from gpu_platform.demo.fleet import (  # noqa: F401 (kept import paths)
    FLEET_TYPES,
    INSTANCE_TYPES,
    FleetNode,
    FleetType,
    fleet,
    instance_type,
)
from gpu_platform.demo.history_feeds import (  # noqa: F401 (kept import paths)
    BUSY,
    FB_USED,
    LIGHT_SHARE,
    MEMORY_EVERY,
    MEMORY_GIB,
    dcgm_frame,
    focus_rows,
    nodes_doc,
    pods_doc,
    write_feeds,
)
from gpu_platform.demo.history_types import HistJob, History, Segment
from gpu_platform.demo.job_mix import (  # noqa: F401 (kept import paths)
    CHAIN,
    CHAIN_EVERY,
    CHAIN_HOURS,
    MIX,
    OFFICE,
    SWEEP_JOBS,
    Draw,
    LaneMix,
    _at,
    _epoch,
    add_chains,
    chain_days,
    draw_jobs,
)
from gpu_platform.lineage.graph import _JSON_COLUMNS as RUN_JSON_COLUMNS
from gpu_platform.lineage.graph import (
    RELEASE_KINDS,
    SUCCEEDED,
    LineageStore,
    Parent,
    WorkloadRun,
    lineage_edges,
    workload_runs,
)
from gpu_platform.policy import Policy
from gpu_platform.requests.ledger import Ledger, events_table, requests_table
from gpu_platform.requests.model import JobRequest
from gpu_platform.simulate.des import JobRun, _Sim
from gpu_platform.simulate.scenarios import policy_node_gpus, policy_scenario, with_nodes

IMAGE_PULL_S = (2.0, 380.0)


COLD_PULL_SHARE = 5
"""Image pull seconds of a run whose node has (first) or lacks (second) the image cached; one run
in COLD_PULL_SHARE pulls cold."""


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
    draw = draw_jobs(policy, days, seed, mix=MIX)  # read here: a caller may swap this module's MIX
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


OOM_REASON = "OOMKilled: CUDA out of memory (exit 137); retried"


PREEMPT_REASON = "preempted by a higher-priority lane reclaiming its quota"


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
