"""Serving traffic in the simulator: a service's replicas follow a demand curve beside the batch
trace, and batch lanes borrow the serving GPUs its replicas leave idle (docs/serving.md,
Simulating traffic).

The service is a serving cluster queue (a lane with `serving: true`, or one added here) holding
`max_replicas x gpus_per_replica` GPUs of its flavor as nominal quota, in the cohort tree of the
batch lanes, with `reclaim_within_cohort: Any` and protected (batch never preempts a replica).
With lending its `lending_limit` is None (all idle quota may be lent); without, 0.

Every `cadence_s` seconds the autoscaler reads the demand and asks for
`wanted_replicas(qps, target, min, max)` replicas (KEDA's pollingInterval: 15 s as `k8s render`
writes it, `options_for`; 30 s is KEDA's own default); scaling down waits until the wanted count
stayed lower for `scale_down_window_s` (the HPA's `behavior.scaleDown.stabilizationWindowSeconds`,
300 s: the most wanted over the window is kept), scaling up is immediate. A new replica is a pending workload of the serving queue: the
engine admits it on free quota or reclaims it from a batch borrower (`InCohortReclamation`); a
replica scaled down leaves at once (newest first, a pending one before a running one).

A replica is ready (serves traffic) after, from its admission: the victims' termination when it
reclaimed GPUs (`reclaim_grace_s`: a borrower gets its terminationGracePeriodSeconds to save a
checkpoint and exit before its GPUs are free; 30 s, Kubernetes' default, which the platform's
Jobs keep), a new node's start when its GPUs were on no running
node (`node_startup_s`), and its own start (`replica_startup_s`: image pull and model load).
Nodes of the serving flavor: `min_nodes` always run; beyond that, a node runs while the flavor's
GPUs in use (any lane) needed it within the last `node_scale_down_s` (the cluster autoscaler's
scale-down-unneeded-time, 10 min), so GPUs a borrower held are on running nodes. Replicas take
free GPUs on running nodes first, then free GPUs needing a node, then reclaimed ones. Batch work
is not delayed by node starts (as in the rest of the simulator: quota only).

Figures (`serving_figures`), over the window [start, end) (unless given: the batch trace's first
submission to the latest submission + duration, when its work would end had nothing waited):
- need(t) = wanted_replicas(qps(t)) without the autoscaler's cadence and window: what the traffic
  needs at t (clamped to [min, max]: above max no platform could help);
- slo_below_need_share: share of the window with ready replicas < need(t);
- scale-up delay: from a replica's request (the autoscaler's tick) to ready, p50/p95/max, over the
  replicas that became ready (a replica scaled down before ready is counted apart);
- reclaim: replicas that reclaimed GPUs from batch borrowers, borrowers preempted, and the wait the
  reclaim added (the grace);
- batch: GPU-hours batch lanes held in the window, on the pool and on the serving flavor (borrowed),
  utilization = batch GPU-hours / (pool GPUs x window), and the batch wait p95.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from gpu_platform.admission import ClusterQueueSpec, ResourceQuota
from gpu_platform.admission.model import ANY, NEVER, CohortSpec
from gpu_platform.policy import GPU
from gpu_platform.serving.demand import DiurnalDemand, TraceDemand, wanted_replicas
from gpu_platform.simulate.des import JobRun, SimResult, simulate
from gpu_platform.simulate.scenario import Scenario
from gpu_platform.simulate.trace import TraceJob

Demand = DiurnalDemand | TraceDemand
_FOREVER = 1e15


@dataclass(frozen=True, slots=True)
class ServiceLoad:
    """One service in the simulator. lane: its serving cluster queue (added to the scenario when
    absent); flavor: where its replicas run; priority: its workloads' priority (None: the queue's
    existing workloads' lane priority is unknown here, so 10,000: above every batch lane)."""

    name: str
    lane: str
    flavor: str
    gpus_per_replica: float
    min_replicas: int
    max_replicas: int
    target_qps_per_replica: float
    demand: Demand
    priority: int = 10_000

    def __post_init__(self) -> None:
        errors = []
        if self.gpus_per_replica <= 0:
            errors.append(f"gpus_per_replica: must be > 0, got {self.gpus_per_replica:g}")
        if self.min_replicas < 1:
            errors.append(f"min_replicas: must be >= 1, got {self.min_replicas}")
        if self.max_replicas < self.min_replicas:
            errors.append(f"max_replicas: {self.max_replicas} is below min_replicas {self.min_replicas}")
        if self.target_qps_per_replica <= 0:
            errors.append(f"target_qps_per_replica: must be > 0, got {self.target_qps_per_replica:g}")
        if errors:
            raise ValueError(f"service {self.name}: " + "; ".join(errors))

    @property
    def quota_gpus(self) -> float:
        return self.max_replicas * self.gpus_per_replica

    def need(self, qps: float) -> int:
        return wanted_replicas(qps, self.target_qps_per_replica, self.min_replicas, self.max_replicas)


@dataclass(frozen=True, slots=True)
class ServingOptions:
    """The autoscaler's and the cluster's timings (module docstring); seconds."""

    cadence_s: float = 30.0
    scale_down_window_s: float = 300.0
    replica_startup_s: float = 60.0
    reclaim_grace_s: float = 30.0
    node_gpus: float | None = 4.0
    node_startup_s: float = 360.0
    min_nodes: int = 0
    node_scale_down_s: float = 600.0


@dataclass(slots=True)
class Replica:
    """One replica the autoscaler asked for. ready/stopped=None: never (or not by the end)."""

    index: int
    requested: float
    run: JobRun
    admitted: float | None = None
    ready: float | None = None
    stopped: float | None = None
    reclaimed: bool = False
    new_node: bool = False


@dataclass(slots=True)
class ServingRun:
    """What happened to the service: its replicas, need and ready steps, and the window."""

    service: ServiceLoad
    options: ServingOptions
    lending: bool | None
    start: float
    end: float
    replicas: list[Replica] = field(default_factory=list)
    need_steps: list[tuple[float, int]] = field(default_factory=list)
    reclaimed_runs: int = 0  # batch runs evicted so that replicas could start (at their instants)
    batch_on_flavor_gpu_s: float = 0.0


def serving_scenario(scenario: Scenario, service: ServiceLoad, *, lending: bool | None) -> Scenario:
    """The scenario with the service's queue: its quota on the flavor is max replicas x GPUs per
    replica (lending_limit None with lending, 0 without; lending=None: the queue's own lending
    limit, at most that quota), borrowing nothing, reclaiming with `Any`,
    protected, a serving queue (work it could not take back is kept off its idle GPUs,
    `admission/serving_lending.py`). A queue of that name already there (the policy's serving lane) keeps its cohort and
    rules but gets this quota row instead of its own, and the flavor's capacity changes by the
    difference, so the rest of the pool is what the policy (resized) gives the other lanes;
    otherwise the queue joins the root of the cohort tree of the first queue with quota on the
    flavor, and the flavor's capacity grows by the service's GPUs."""
    base = scenario.base
    existing = next((c for c in base.cluster_queues if c.name == service.lane), None)
    if lending is None:  # the policy's own lending limit on the flavor (`policy tune` searches it)
        own = next((q for q in (existing.quotas if existing else ()) if q.flavor == service.flavor and q.resource == GPU), None)
        limit = None if own is None or own.lending_limit is None else min(own.lending_limit, service.quota_gpus)
    else:
        limit = None if lending else 0.0
    quota = ResourceQuota(service.flavor, GPU, service.quota_gpus, 0.0, limit)
    flavors = base.flavors
    if existing is not None:
        rows = tuple(q for q in existing.quotas if not (q.flavor == service.flavor and q.resource == GPU))
        spec = replace(existing, quotas=(quota, *rows), reclaim_within_cohort=ANY, protected=True, serving=True)
        cqs = tuple(spec if c.name == service.lane else c for c in base.cluster_queues)
        old = next((q.nominal for q in existing.quotas if q.flavor == service.flavor and q.resource == GPU), 0.0)
        grow = service.quota_gpus - old
    else:
        parent: dict[str, str | None] = {}
        for co in base.cohorts:
            if isinstance(co, CohortSpec):
                parent[co.name] = co.parent
            else:
                parent.setdefault(co, None)
        cohort = next(
            (c.cohort for c in base.cluster_queues if c.cohort and any(q.flavor == service.flavor for q in c.quotas)),
            None,
        )
        while cohort is not None and parent.get(cohort) is not None:
            cohort = parent[cohort]
        spec = ClusterQueueSpec(
            name=service.lane,
            quotas=(quota,),
            cohort=cohort,
            within_cluster_queue=NEVER,
            reclaim_within_cohort=ANY,
            protected=True,
            serving=True,
        )
        cqs = (*base.cluster_queues, spec)
        grow = service.quota_gpus
    if not any(f.name == service.flavor for f in flavors):
        raise ValueError(f"service {service.name}: flavor {service.flavor!r} is not in the scenario")
    if grow:
        flavors = tuple(
            replace(f, capacity={**(f.capacity or {}), GPU: max(0.0, (f.capacity or {}).get(GPU, 0.0) + grow)})
            if f.name == service.flavor and f.capacity is not None
            else f
            for f in flavors
        )
    return replace(
        scenario,
        name=f"{scenario.name}+{service.name}" + ("" if lending is not False else " (no lending)"),
        base=replace(base, cluster_queues=cqs, flavors=flavors),
    )


class _ServingEvents:
    """The autoscaler as an event source of the simulator's loop (`des.simulate(events=...)`)."""

    def __init__(self, run: ServingRun, capacity: float):
        self.out = run
        self.svc = run.service
        self.opt = run.options
        self.capacity = capacity
        self.next_tick = run.start
        self.recent: list[float] = []  # wanted counts of the ticks within the scale-down window
        self.recent_t: list[float] = []
        self.active: list[Replica] = []  # requested and not stopped, oldest first
        self.used_log: list[tuple[float, float]] = [(run.start, 0.0)]  # serving flavor GPUs in use
        self.serving_log: list[tuple[float, float]] = [(run.start, 0.0)]  # ... of them by the service
        self.free_before = 0.0
        self.used_before = 0.0
        self.n = 0
        self.done = False
        self.hooked = False
        self.evicted: list[JobRun] = []  # evicted at this instant

    # -- the hook's interface ----------------------------------------------------------------
    def next_time(self) -> float:
        return math.inf if self.done else self.next_tick

    def fire(self, sim: Any, now: float) -> bool:
        """Apply the autoscaler's ticks up to `now`; True when the engine must look at every queue."""
        if not self.hooked:  # see the runs the engine evicts at each instant (reclaimed borrowers)
            evict = sim._evict

            def counted(r: JobRun, t: float) -> bool:
                self.evicted.append(r)
                return evict(r, t)

            sim._evict = counted
            self.hooked = True
        self.used_before = self._used(sim)
        self.free_before = self.capacity - self.used_before
        changed = ticked = False
        while not self.done and self.next_tick <= now:
            t = self.next_tick
            if t >= self.out.end:
                changed |= self._scale(sim, 0, t)
                self.done = True
                break
            changed |= self._tick(sim, t)
            ticked = True
            self.next_tick = t + self.opt.cadence_s
        # a replica still waiting is looked at again at every tick, as the gate does: what holds
        # it may have lifted with no trace event (a borrower's checkpoint, or a serving lane's
        # bounded wait for one, `evidence_reclaim_after`)
        return changed or (ticked and any(p.run.state == "pending" for p in self.active))

    def observe(self, sim: Any, now: float) -> None:
        """After the instant's admissions: stamp newly admitted replicas with when they are ready."""
        fresh = [p for p in self.active if p.admitted is None and p.run.state == "running"]
        if fresh:
            fresh.sort(key=lambda p: p.index)
            up = self._up_gpus(now)
            free_up = max(0.0, min(self.free_before, up - self.used_before))
            free_down = max(0.0, self.free_before - free_up)
            g = self.svc.gpus_per_replica
            for p in fresh:
                p.admitted = now
                wait = 0.0
                if free_up + 1e-9 >= g:
                    free_up -= g
                elif free_up + free_down + 1e-9 >= g:
                    free_down -= g - free_up
                    free_up = 0.0
                    p.new_node = True
                    wait = self.opt.node_startup_s
                else:
                    free_up = free_down = 0.0
                    p.reclaimed = True
                    wait = self.opt.reclaim_grace_s
                p.ready = now + wait + self.opt.replica_startup_s
            if any(p.reclaimed for p in fresh):
                self.out.reclaimed_runs += sum(1 for r in self.evicted if r.job.lane != self.svc.lane and r.flavor == self.svc.flavor)
        self.evicted.clear()
        used = self._used(sim)
        mine = sim.cq_usage.get((self.svc.lane, self.svc.flavor, GPU), 0.0)
        if used != self.used_log[-1][1] or mine != self.serving_log[-1][1]:
            self.used_log.append((now, used))
            self.serving_log.append((now, mine))

    # -- the autoscaler ----------------------------------------------------------------------
    def _tick(self, sim: Any, t: float) -> bool:
        want = self.svc.need(self.svc.demand.qps(t))
        window = self.opt.scale_down_window_s
        self.recent.append(want)
        self.recent_t.append(t)
        while self.recent_t and self.recent_t[0] <= t - window:
            self.recent.pop(0)
            self.recent_t.pop(0)
        target = max(self.recent) if window > 0 else want
        return self._scale(sim, target, t)

    def _scale(self, sim: Any, target: int, t: float) -> bool:
        have = len(self.active)
        if target > have:
            for _ in range(target - have):
                self._add(sim, t)
            return True
        if target < have:
            # newest first, a pending one before a running one
            order = sorted(self.active, key=lambda p: (p.run.state == "running", -p.index))
            for p in order[: have - target]:
                self._remove(sim, p, t)
            return True
        return False

    def _add(self, sim: Any, t: float) -> None:
        svc = self.svc
        job = TraceJob(
            job_id=f"{svc.name}/replica-{self.n}",
            submit_ts=t,
            duration_s=_FOREVER,
            gpus=svc.gpus_per_replica,
            lane=svc.lane,
            gpu_type=svc.flavor,
            preemption_policy="requeue",
        )
        wl = _replica_workload(sim.scn, job, svc)
        run = JobRun(job, wl, idx=-1)  # not a trace job: not in the report's outcome (`des_queues.finish`)
        p = Replica(self.n, t, run)
        self.n += 1
        self.active.append(p)
        self.out.replicas.append(p)
        sim.arrive(run, t)  # `fire` returns True: the engine looks at every queue
        if run.state == "rejected":
            raise ValueError(f"service {svc.name}: a replica can never be admitted: {run.reason}")

    def _remove(self, sim: Any, p: Replica, t: float) -> None:
        r = p.run
        if r.state == "pending":
            sim._dequeue(r)
            r.state = "cancelled"
        elif r.state == "running":
            sim._stop(r, t)
            r.state, r.end = "done", t
            r.seq += 1  # its completion event is void
        p.stopped = t
        self.active.remove(p)

    # -- the serving flavor ------------------------------------------------------------------
    def _used(self, sim: Any) -> float:
        f = self.svc.flavor
        return sum(v for (_cq, fl, r), v in sim.cq_usage.items() if fl == f and r == GPU)

    def _up_gpus(self, now: float) -> float:
        """GPUs on running nodes of the serving flavor at `now` (before this instant's admissions)."""
        node = self.opt.node_gpus
        if not node:
            return self.capacity
        since = now - self.opt.node_scale_down_s
        peak = 0.0
        for t, used in reversed(self.used_log):
            peak = max(peak, used)
            if t <= since:
                break
        nodes = max(self.opt.min_nodes, math.ceil(peak / node - 1e-9))
        return min(self.capacity, nodes * node)


def _replica_workload(scn: Scenario, job: TraceJob, svc: ServiceLoad):
    wl = scn.workload(job)
    from gpu_platform.admission import Workload

    if wl is None or wl.cq != svc.lane:
        wl = Workload(name=job.job_id, cq=svc.lane, requests={GPU: job.gpus}, created_at=job.submit_ts)
    # a replica holds its own flavor, at the service's priority, never an evidence job
    return replace(wl, priority=svc.priority, allowed_flavors=(svc.flavor,), evidence=False)


def simulate_serving(
    scenario: Scenario,
    jobs: list[TraceJob],
    service: ServiceLoad,
    *,
    lending: bool | None = True,
    options: ServingOptions | None = None,
    start: float | None = None,
    end: float | None = None,
    **kw: Any,
) -> tuple[SimResult, ServingRun]:
    """Replay `jobs` with the service beside them (lending its idle GPUs or not; None: as its
    queue's lending limit says). start/end: the
    window the service runs and figures cover; None: the trace's first submission / the latest
    submission + duration (when its work would end, had nothing waited).
    Other keywords go to `des.simulate` (tick, checkpoint_interval_s, ...)."""
    opt = options or ServingOptions()
    if start is None:
        start = min((j.submit_ts for j in jobs), default=0.0)
    if end is None:
        end = max((j.submit_ts + j.duration_s for j in jobs), default=start)
    if end <= start:
        raise ValueError(f"the serving window is empty ({start:g} .. {end:g}): give end")
    scn = serving_scenario(scenario, service, lending=lending)
    capacity = next((f.capacity or {}).get(GPU, 0.0) for f in scn.base.flavors if f.name == service.flavor)
    run = ServingRun(service, opt, lending, start, end)
    steps = service.demand.steps(start, end)
    need: list[tuple[float, int]] = []
    for t, q in steps:
        n = service.need(q)
        if not need or need[-1][1] != n:
            need.append((t, n))
    run.need_steps = need
    events = _ServingEvents(run, capacity)
    result = simulate(scn, jobs, events=events, **kw)
    # GPU-seconds batch lanes held on the serving flavor in the window: its use less the service's
    borrowed = 0.0
    logs = list(zip(events.used_log, events.serving_log, strict=True)) + [((math.inf, 0.0), (math.inf, 0.0))]
    for ((t, used), (_t, mine)), ((t2, _u), _m) in zip(logs, logs[1:], strict=False):
        a, b = max(t, start), min(t2, end)
        if b > a:
            borrowed += (used - mine) * (b - a)
    run.batch_on_flavor_gpu_s = borrowed
    return result, run


# -- figures ---------------------------------------------------------------------------------
def _pct(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p95": None, "max": None}
    a = np.asarray(values, dtype=float)
    return {
        "p50": round(float(np.percentile(a, 50)), 3),
        "p95": round(float(np.percentile(a, 95)), 3),
        "max": round(float(a.max()), 3),
    }


def ready_steps(run: ServingRun) -> list[tuple[float, int]]:
    """Ready replicas over time as a step function [(t, count), ...] from the window's start."""
    delta: dict[float, int] = {}
    for p in run.replicas:
        if p.ready is None:
            continue
        stop = p.stopped if p.stopped is not None else math.inf
        if p.ready >= stop:
            continue
        delta[p.ready] = delta.get(p.ready, 0) + 1
        if stop < math.inf:
            delta[stop] = delta.get(stop, 0) - 1
    out = [(run.start, 0)]
    n = 0
    for t in sorted(delta):
        n += delta[t]
        if t <= run.start:
            out[0] = (run.start, n)
        else:
            out.append((t, n))
    return out


def below_need_seconds(need: list[tuple[float, int]], ready: list[tuple[float, int]], start: float, end: float) -> float:
    """Seconds of [start, end) with ready < need; both step functions [(t, value), ...] sorted by t."""
    times = sorted({start, end, *(t for t, _ in need if start < t < end), *(t for t, _ in ready if start < t < end)})

    total = 0.0
    ni = ri = 0
    nv = rv = 0
    for a, b in zip(times, times[1:], strict=False):
        while ni < len(need) and need[ni][0] <= a:
            nv = need[ni][1]
            ni += 1
        while ri < len(ready) and ready[ri][0] <= a:
            rv = ready[ri][1]
            ri += 1
        if rv < nv:
            total += b - a
    return total


def _clip_gpu_s(usage: list[tuple[float, str, float]], lanes: set[str], start: float, end: float) -> float:
    """GPU-seconds held in [start, end) by jobs of `lanes`, from the usage events."""
    held = 0.0
    last = start
    total = 0.0
    for t, lane, d in sorted(usage, key=lambda e: e[0]):
        if lane not in lanes:
            continue
        tc = min(max(t, start), end)
        total += held * (tc - last)
        last = tc
        held += d
    total += held * (end - last)
    return total


def serving_figures(result: SimResult, run: ServingRun) -> dict[str, Any]:
    """The service's SLO, scale-up delays and reclaims, and batch utilization (module docstring)."""
    start, end = run.start, run.end
    window = end - start
    ready = ready_steps(run)
    below = below_need_seconds(run.need_steps, ready, start, end)
    delays = [p.ready - p.requested for p in run.replicas if p.ready is not None and (p.stopped is None or p.ready < p.stopped)]
    reclaim = [p for p in run.replicas if p.reclaimed]
    reclaim_delays = [p.ready - p.requested for p in reclaim if p.ready is not None]
    scaled_before_ready = sum(1 for p in run.replicas if p.stopped is not None and (p.ready is None or p.ready >= p.stopped))
    svc = run.service
    capacity = result.scenario.capacity
    batch_lanes = {r.job.lane for r in result.runs} - {svc.lane}
    batch_gpu_s = _clip_gpu_s(result.usage_events, batch_lanes, start, end)
    borrowed = run.batch_on_flavor_gpu_s
    serving_gpu_s = _clip_gpu_s(result.usage_events, {svc.lane}, start, end)
    waits = [
        r.first_admit - r.job.submit_ts
        for r in result.runs
        if r.job.lane != svc.lane and r.first_admit is not None and start <= r.job.submit_ts <= end
    ]
    return {
        "lending": run.lending,
        "window_s": window,
        "service": svc.name,
        "replicas_requested": len(run.replicas),
        "slo_below_need_share": round(below / window, 4) if window > 0 else None,
        "below_need_hours": round(below / 3600, 3),
        "scale_up_delay_s": _pct(delays),
        "scaled_down_before_ready": scaled_before_ready,
        "reclaims": len(reclaim),
        "reclaim_scale_up_delay_s": _pct(reclaim_delays),
        "new_node_starts": sum(1 for p in run.replicas if p.new_node),
        "batch_runs_reclaimed": run.reclaimed_runs,
        "batch_gpu_hours": round(batch_gpu_s / 3600, 3),
        "batch_gpu_hours_on_serving_flavor": round(borrowed / 3600, 3),
        "batch_utilization": round(batch_gpu_s / (capacity * window), 4) if window > 0 else None,
        "serving_gpu_hours": round(serving_gpu_s / 3600, 3),
        "pool_utilization": round((batch_gpu_s + serving_gpu_s) / (capacity * window), 4) if window > 0 else None,
        "batch_wait_p95_h": (
            round(float(np.percentile(np.asarray(waits), 95)) / 3600, 3) if waits else None
        ),
        "capacity_gpus": capacity,
    }


def compare_lending(
    scenario: Scenario,
    jobs: list[TraceJob],
    service: ServiceLoad,
    *,
    options: ServingOptions | None = None,
    start: float | None = None,
    end: float | None = None,
    **kw: Any,
) -> dict[str, Any]:
    """The service beside the trace with and without lending: {"with_lending": figures,
    "without_lending": figures, "service": ..., "demand": ...}."""
    out: dict[str, Any] = {
        "service": {
            "name": service.name,
            "lane": service.lane,
            "flavor": service.flavor,
            "gpus_per_replica": service.gpus_per_replica,
            "replicas": {"min": service.min_replicas, "max": service.max_replicas},
            "target_qps_per_replica": service.target_qps_per_replica,
        },
        "demand": service.demand.describe(),
        "options": {k: getattr(options or ServingOptions(), k) for k in ServingOptions.__slots__},
    }
    for key, lending in (("with_lending", True), ("without_lending", False)):
        result, run = simulate_serving(scenario, jobs, service, lending=lending, options=options, start=start, end=end, **kw)
        out[key] = serving_figures(result, run)
    return out


@dataclass(frozen=True, slots=True)
class ServingTarget:
    """What `policy tune` weighs for a service: it runs beside each tuning input, lending as the
    candidate's serving lane says (its `lending_limit` is a knob), and its share of time below need
    must be at most `slo_below_need_share` (a constraint, normalized per share of the limit like
    the lanes' share targets); batch utilization stays the objective."""

    service: ServiceLoad
    options: ServingOptions
    slo_below_need_share: float

    def run(self, scenario: Scenario, jobs: list[TraceJob], **kw: Any) -> tuple[SimResult, dict[str, Any]]:
        result, run = simulate_serving(scenario, jobs, self.service, lending=None, options=self.options, **kw)
        return result, serving_figures(result, run)

    def violations(self, figures: dict[str, Any]) -> dict[str, float]:
        limit = self.slo_below_need_share
        share = figures["slo_below_need_share"] or 0.0
        return {f"{self.service.lane}.serving_below_need_share": (share - limit) / max(1e-3, limit)}


class ServingInputError(ValueError):
    """A service or demand given to the simulator that cannot be used; `errors` lists every problem."""

    def __init__(self, errors: list[str], source: str):
        self.errors = errors
        self.source = source
        super().__init__(f"{source}: " + "; ".join(errors))


def parse_demand(spec: str, start: float) -> Demand:
    """`--demand`: `diurnal:PEAK,TROUGH[,PERIOD_H[,PEAK_AT_H]]` (qps; hours, default 24 and 14: the
    peak at 14:00 of each day counted from `start`) or a request-rate CSV `timestamp,qps`, moved so
    its first row is at `start` (the batch trace's first submission)."""
    from gpu_platform.serving.demand import DemandError, load_demand_csv

    if spec.startswith("diurnal:"):
        parts = spec[len("diurnal:") :].split(",")
        try:
            nums = [float(x) for x in parts]
        except ValueError:
            raise ServingInputError([f"diurnal:{','.join(parts)}: expected numbers PEAK,TROUGH[,PERIOD_H[,PEAK_AT_H]]"], "--demand") from None
        if not 2 <= len(nums) <= 4:
            raise ServingInputError(["diurnal: expected PEAK,TROUGH[,PERIOD_H[,PEAK_AT_H]]"], "--demand")
        period = nums[2] * 3600 if len(nums) > 2 else 86_400.0
        peak_at = nums[3] * 3600 if len(nums) > 3 else 14 * 3600.0
        try:
            return DiurnalDemand(nums[0], nums[1], period, start + peak_at)
        except DemandError as e:
            raise ServingInputError(e.errors, "--demand") from None
    try:
        return load_demand_csv(spec, shift_to=start)
    except DemandError as e:
        raise ServingInputError(e.errors, e.source) from None


def service_from_request(path: str, policy: Any, demand: Demand) -> ServiceLoad:
    """A `ServiceLoad` from a service request file (`examples/requests/online_serving.yaml`): its
    serving `lane`, `gpu_type` (a flavor or product of the lane; None: the lane's first flavor),
    `gpu_count` per replica and `service:` block (`ServiceSpec`). Only what the simulator needs is
    checked, every problem listed: the rest of the request (metadata, max_cost, the lane's room at
    the policy's own size) is `submit`'s, since the simulator resizes the pool."""
    from pydantic import ValidationError

    from gpu_platform.requests.model import RequestError, load_request_file
    from gpu_platform.serving.model import ServiceSpec

    try:
        raw = load_request_file(path)
    except RequestError as e:
        raise ServingInputError(e.errors, path) from None
    if not isinstance(raw, dict):
        raise ServingInputError(["expected a mapping (a service request)"], path)
    errors: list[str] = []
    lane = policy.lanes.get(raw.get("lane")) if isinstance(raw.get("lane"), str) else None
    if lane is None:
        errors.append(f"lane: {raw.get('lane')!r} is not a lane of the policy")
    elif not getattr(lane, "serving", False):
        errors.append(f"lane: {lane.name} is not a serving lane (serving: true)")
    count = raw.get("gpu_count")
    if isinstance(count, bool) or not isinstance(count, int | float) or count <= 0:
        errors.append(f"gpu_count: must be a number > 0 (GPUs per replica), got {count!r}")
    spec = None
    try:
        spec = ServiceSpec.model_validate(raw.get("service"))
    except ValidationError as e:
        for err in e.errors():
            loc = ".".join(str(x) for x in err["loc"])
            errors.append(f"service{'.' + loc if loc else ''}: {err['msg']}")
    flavor = None
    if lane is not None:
        gpu_type = raw.get("gpu_type")
        names = [
            q.flavor_name
            for q in lane.quotas
            if q.resource == GPU
            and gpu_type in (None, "any", q.flavor_name, getattr(policy.flavor_by_name.get(q.flavor_name), "gpu_product", None))
        ]
        if not names:
            errors.append(f"gpu_type: {gpu_type!r} matches no nvidia.com/gpu quota of lane {lane.name}")
        else:
            flavor = names[0]
    if errors:
        raise ServingInputError(errors, path)
    assert lane is not None and spec is not None and flavor is not None
    name = spec.name or (raw.get("name") if isinstance(raw.get("name"), str) else None) or lane.name
    return service_from_spec(name, lane.name, flavor, float(count), spec, demand, lane.priority)


def options_for(policy: Any, flavor: str, **overrides: Any) -> ServingOptions:
    """The autoscaler's timings as `k8s render` writes them (KEDA's pollingInterval, the HPA's
    scale-down stabilization window: `serving/render.py`), node timings of the flavor's node pool
    from the policy (`autoscaling.node_pools`: node_gpus, startup_time, min_nodes); the rest
    ServingOptions' defaults; `overrides` win."""
    from gpu_platform.serving.render import KEDA_POLLING_INTERVAL_S, SCALE_DOWN_STABILIZATION_S

    kw: dict[str, Any] = {"cadence_s": float(KEDA_POLLING_INTERVAL_S), "scale_down_window_s": float(SCALE_DOWN_STABILIZATION_S)}
    f = policy.flavor_by_name.get(flavor)
    pools = policy.autoscaling.node_pools if policy.autoscaling is not None else {}
    pool = pools.get(f.node_pool) if f is not None else None
    if pool is not None:
        kw["node_gpus"] = float(f.node_gpus or pool.node_gpus)
        kw["node_startup_s"] = pool.startup_time.total_seconds()
        kw["min_nodes"] = int(pool.min_nodes)
    kw.update({k: v for k, v in overrides.items() if v is not None})
    return ServingOptions(**kw)


def _read_service(policy: Any, jobs: list[TraceJob], service_path: str, demand_spec: str) -> tuple[Any, list[str]]:
    """The service request with its demand (laid over the trace's clock), and every problem with
    either (the service is None when its file is wrong)."""
    start = min((j.submit_ts for j in jobs), default=0.0)
    problems: list[str] = []
    demand = service = None
    try:
        demand = parse_demand(demand_spec, start)
    except ServingInputError as e:
        problems += [f"{e.source}: {x}" for x in e.errors]
    try:
        service = service_from_request(service_path, policy, demand or DiurnalDemand(0.0, 0.0))
    except ServingInputError as e:
        problems += [f"{e.source}: {x}" for x in e.errors]
    return service, problems


def _grace_problems(reclaim_grace_s: float | None) -> list[str]:
    if reclaim_grace_s is not None and reclaim_grace_s < 0:
        return [f"--reclaim-grace: must be >= 0, got {reclaim_grace_s:g}"]
    return []


def serving_section(
    policy: Any,
    scenario: Scenario,
    jobs: list[TraceJob],
    service_path: str,
    demand_spec: str,
    *,
    reclaim_grace_s: float | None = None,
    **kw: Any,
) -> dict[str, Any]:
    """`simulate --service FILE --demand SPEC`: the service beside the trace under the policy's
    scenario, with and without lending (`compare_lending`); ServingInputError lists every problem."""
    if scenario.fast is not None:
        raise ServingInputError([f"scenario {scenario.name} replays without the engine"], "--service")
    service, problems = _read_service(policy, jobs, service_path, demand_spec)
    problems += _grace_problems(reclaim_grace_s)
    if problems:
        raise ServingInputError(problems, "simulate --service")
    assert service is not None
    opts = options_for(policy, service.flavor, reclaim_grace_s=reclaim_grace_s)
    return compare_lending(scenario, jobs, service, options=opts, **kw)


def serving_target(
    policy: Any, jobs: list[TraceJob], service_path: str, demand_spec: str, slo_below_need_share: float,
    *, reclaim_grace_s: float | None = None,
) -> ServingTarget:
    """`policy tune --service FILE --demand SPEC --serving-slo SHARE`; ServingInputError lists
    every problem."""
    service, problems = _read_service(policy, jobs, service_path, demand_spec)
    if not 0 <= slo_below_need_share < 1:
        problems.append(f"--serving-slo: a share in [0, 1), got {slo_below_need_share:g}")
    problems += _grace_problems(reclaim_grace_s)
    if problems:
        raise ServingInputError(problems, "policy tune --service")
    assert service is not None
    return ServingTarget(service, options_for(policy, service.flavor, reclaim_grace_s=reclaim_grace_s), slo_below_need_share)


def serving_rows(section: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(figure, with lending, without) rows of a `compare_lending` section, for a table."""

    def f(v: Any, scale: float = 1.0, unit: str = "") -> str:
        return "-" if v is None else f"{v * scale:.4g}{unit}"

    on, off = section["with_lending"], section["without_lending"]
    rows = [
        ("serving: share of time below need", f(on["slo_below_need_share"], 100, " %"), f(off["slo_below_need_share"], 100, " %")),
        ("serving: scale-up delay p50", f(on["scale_up_delay_s"]["p50"], 1, " s"), f(off["scale_up_delay_s"]["p50"], 1, " s")),
        ("serving: scale-up delay p95", f(on["scale_up_delay_s"]["p95"], 1, " s"), f(off["scale_up_delay_s"]["p95"], 1, " s")),
        ("serving: replicas that reclaimed GPUs", str(on["reclaims"]), str(off["reclaims"])),
        ("serving: delay of those, p95", f(on["reclaim_scale_up_delay_s"]["p95"], 1, " s"), f(off["reclaim_scale_up_delay_s"]["p95"], 1, " s")),
        ("serving: replicas that waited for a node", str(on["new_node_starts"]), str(off["new_node_starts"])),
        ("batch: runs reclaimed by the service", str(on["batch_runs_reclaimed"]), str(off["batch_runs_reclaimed"])),
        ("batch: utilization of the pool", f(on["batch_utilization"], 100, " %"), f(off["batch_utilization"], 100, " %")),
        ("batch: GPU-hours", f(on["batch_gpu_hours"]), f(off["batch_gpu_hours"])),
        ("batch: GPU-hours on the serving flavor", f(on["batch_gpu_hours_on_serving_flavor"]), f(off["batch_gpu_hours_on_serving_flavor"])),
        ("batch: wait p95", f(on["batch_wait_p95_h"], 1, " h"), f(off["batch_wait_p95_h"], 1, " h")),
        ("pool: utilization (batch + serving)", f(on["pool_utilization"], 100, " %"), f(off["pool_utilization"], 100, " %")),
    ]
    return rows


def service_from_spec(
    name: str, lane: str, flavor: str, gpus_per_replica: float, spec: Any, demand: Demand, priority: int = 10_000
) -> ServiceLoad:
    """A `ServiceLoad` from a request's `ServiceSpec` (`gpu_platform.serving.model`)."""
    return ServiceLoad(
        name=name,
        lane=lane,
        flavor=flavor,
        gpus_per_replica=gpus_per_replica,
        min_replicas=spec.replicas.min,
        max_replicas=spec.replicas.max,
        target_qps_per_replica=spec.slo.target_qps_per_replica,
        demand=demand,
        priority=priority,
    )


__all__ = [
    "Replica",
    "ServiceLoad",
    "ServingOptions",
    "ServingRun",
    "below_need_seconds",
    "compare_lending",
    "ready_steps",
    "serving_figures",
    "ServingInputError",
    "ServingTarget",
    "serving_target",
    "options_for",
    "parse_demand",
    "service_from_request",
    "serving_rows",
    "serving_scenario",
    "serving_section",
    "simulate_serving",
]
