"""The FIFO baselines without the engine: one queue over the whole pool's GPUs.

- `fifo`: strict head-of-line FIFO. Jobs are queued in (submit_ts, job_id) order; at every
  instant the head starts while its GPUs are free; nobody overtakes a waiting head.
- `fifo-backfill`: EASY backfilling (Lifka, "The ANL/IBM SP scheduling system", 1995; Mu'alem
  and Feitelson, IEEE TPDS 2001): the head gets a reservation at the earliest instant enough
  running jobs will have ended (its shadow time); a job behind it starts now when its GPUs are
  free now and it either ends by the shadow time or uses only GPUs the head will not need then
  (the extra GPUs). Run times are the trace's durations (a perfect estimate: the baseline is
  the best FIFO can do, not what users' guesses would give).

Both treat the pool as one set of GPUs (`gpu_type` is ignored: a whole-pool baseline) and never
preempt. A job with more GPUs than the pool is never admitted (reported as such). With `tick`,
arrivals and completions take effect at the next multiple of the tick, as in the engine loop.
Every baseline is the same event loop (`_replay`) over a heap of end times, parameterized by the
pool: one count of GPUs (`_Pool`), the pool's nodes (`_NodePool`) or the policy's flavors and
their nodes (`_FlavorPool`); each pool says where a job can never run, where it fits now, how it
backfills and what it strands. O(n log n) for `fifo`; `fifo-backfill` also scans the waiting jobs
that fit the free GPUs at each instant where the head is blocked.

With a node model (`scenarios.with_nodes`: the scenario's `base.nodes`), the pool is those nodes,
all flavors' together (GPUs of a flavor without nodes form one node of their own): a job of g GPUs
is `pods_for(g, n)` pods of g / pods GPUs, n the smallest node size of the pool, and it starts
when the nodes' free GPUs hold that many pods (a node as many as it holds, as kube-scheduler
places them), placed best fit as the engine's `NodeBook` does (fullest nodes that hold a pod).
EASY backfill then reserves the head's start at its shadow time: the first end time at which, releasing the running jobs in end order on a copy of
the node state, the head's pods fit; a later job starts now only if it fits now and ends by the
shadow time. The "extra GPUs" rule does not carry over: which nodes a job takes decides whether
the head still fits, so a count of spare GPUs says nothing. GPU-hours stranded by fragmentation:
all free GPUs, while the head asks for no more than are free and yet fits no nodes.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable, Iterable, Iterator

from gpu_platform.admission.model import NodeSpec, Workload
from gpu_platform.admission.nodes import NodeBook, placement_of
from gpu_platform.policy import GPU
from gpu_platform.simulate.des import JobRun, SimResult
from gpu_platform.simulate.outcome import Outcome, Usage
from gpu_platform.simulate.scenario import pods_for, split_node_size
from gpu_platform.simulate.trace import TraceJob

BACKFILL_DEPTH = 500
"""Waiting jobs behind the head looked at for backfilling per instant (Slurm's `bf_max_job_test`
default), so an instant costs at most that many checks however long the queue."""


def _at(t: float, tick: float) -> float:
    return t if tick <= 0 else math.ceil(t / tick - 1e-12) * tick


class _Pool:
    """The whole pool's GPUs as one count (quota-only `fifo`). Every pool gives `_replay` the same
    operations: `never` (why a job can never start, or None), `fit` (where the job starts now, or
    None), `begin`, `finish_until`, `backfill` and `stranded`."""

    measures_stranding = False
    """Whether `_replay` reports stranded GPU-hours (a node model); False: None in the result."""

    def __init__(self, capacity: float):
        self.capacity = capacity
        self.free = capacity
        self.ending: list[tuple[float, int, JobRun]] = []  # (end, seq, run)
        self.usage: list[tuple[float, str, float]] = []
        self.seq = 0
        self.on_done: Callable[[JobRun], None] = _nothing  # `_replay`: a job's outcome is final

    def forget(self, r: JobRun) -> None:
        """Drop what the pool keeps of a job that will not run (refused at arrival)."""

    def never(self, r: JobRun) -> str | None:
        if r.job.gpus > self.capacity + 1e-9:
            return f"asks for {r.job.gpus:g} GPUs, more than the whole pool ({self.capacity:g})"
        return None

    def fit(self, r: JobRun) -> str | None:
        return _NODES if r.job.gpus <= self.free + 1e-9 else None

    def stranded(self, queue: deque[JobRun]) -> float:
        return 0.0

    def begin(self, r: JobRun, now: float, where: str = "pool") -> None:
        self.free -= r.job.gpus
        r.state, r.start, r.first_admit, r.last_admit, r.flavor = "running", now, now, now, "pool"
        self.seq += 1
        heapq.heappush(self.ending, (now + r.job.duration_s, self.seq, r))
        self.usage.append((now, r.job.lane, r.job.gpus))

    def finish_until(self, now: float) -> float | None:
        """End every job due by `now`; the latest end, or None."""
        last = None
        while self.ending and self.ending[0][0] <= now:
            end, _s, r = heapq.heappop(self.ending)
            self.free += r.job.gpus
            r.state, r.end, r.used_gpu_s = "done", end, r.job.gpus * r.job.duration_s
            self.usage.append((end, r.job.lane, -r.job.gpus))
            self.on_done(r)
            last = end
        return last

    def backfill(self, queue: deque[JobRun], now: float) -> None:
        """EASY: the blocked head's shadow time and extra GPUs from the running jobs' end times;
        then each of the next `BACKFILL_DEPTH` waiting jobs, in queue order, that fits the free
        GPUs now and ends by the shadow time or fits the extra GPUs starts."""
        if self.free <= 1e-9:
            return
        head = queue[0]
        shadow, extra, avail = math.inf, 0.0, self.free
        for end, _s, r in sorted(self.ending, key=lambda e: e[0]):
            avail += r.job.gpus
            if avail + 1e-9 >= head.job.gpus:
                shadow, extra = end, avail - head.job.gpus
                break
        started: list[int] = []
        for k in range(1, min(len(queue), BACKFILL_DEPTH + 1)):
            if self.free <= 1e-9:
                break
            r = queue[k]
            g = r.job.gpus
            if g > self.free + 1e-9:
                continue
            if now + r.job.duration_s <= shadow + 1e-9:
                self.begin(r, now)
                started.append(k)
            elif g <= extra + 1e-9:
                self.begin(r, now)
                extra -= g
                started.append(k)
        for k in reversed(started):
            del queue[k]


def _nothing(_r: JobRun) -> None:
    return None


def _fifo_order(jobs: list[TraceJob] | Iterable[TraceJob]) -> Iterator[TraceJob]:
    """The jobs in (submit_ts, job_id) order: a list is sorted; any other iterable must come in
    submission order (`trace.SortedTrace`) and only each instant's jobs are sorted by id."""
    if isinstance(jobs, list):
        yield from sorted(jobs, key=lambda j: (j.submit_ts, j.job_id))
        return
    group: list[TraceJob] = []
    for j in jobs:
        if group and j.submit_ts != group[0].submit_ts:
            if j.submit_ts < group[0].submit_ts:
                raise ValueError(
                    f"jobs: {j.job_id!r} (submit_ts {j.submit_ts:g}) comes after a job submitted at "
                    f"{group[0].submit_ts:g}: a stream of jobs must be in submission order"
                )
            group.sort(key=lambda j: j.job_id)
            yield from group
            group = []
        group.append(j)
    group.sort(key=lambda j: j.job_id)
    yield from group


def _replay(scenario, jobs: list[TraceJob] | Iterable[TraceJob], pool, *, backfill: bool, tick: float,
            keep_runs: bool = True, progress: Callable[[int, int], None] | None = None) -> SimResult:
    """The one FIFO event loop of every baseline, over any pool (`_Pool`, `_NodePool`,
    `_FlavorPool`): jobs queue in (submit_ts, job_id) order; at each arrival or end instant the
    ended jobs free their GPUs, arrivals that no placement can ever hold are refused with the
    pool's reason, the queue's heads start while the pool places them, and with `backfill` the
    pool backfills behind a blocked head. Stranded GPU-seconds are the pool's `stranded` rate
    integrated between instants (reported where the pool models nodes). Jobs are read as the
    loop goes and folded into the result's `outcome` once final; keep_runs=False keeps none of
    them (`des.simulate`), so memory holds the queued and running jobs only. progress: called
    with (jobs arrived, jobs) every `des.PROGRESS_JOBS` arrivals."""
    from gpu_platform.simulate import des

    every = des.PROGRESS_JOBS
    total = len(jobs) if hasattr(jobs, "__len__") else 0  # type: ignore[arg-type]
    src = _fifo_order(jobs)
    nxt = next(src, None)
    runs: list[JobRun] = []
    outcome = Outcome()
    live = peak = arrived = 0
    if not keep_runs:
        pool.usage = Usage()

    def finish(r: JobRun) -> None:
        nonlocal live
        outcome.fold(r, r.idx)
        live -= 1

    pool.on_done = finish
    queue: deque[JobRun] = deque()
    start = nxt.submit_ts if nxt is not None else 0.0
    last = start
    stranded_s, rate, since = 0.0, 0.0, start
    while nxt is not None or pool.ending:
        t_arr = nxt.submit_ts if nxt is not None else math.inf
        t_end = pool.ending[0][0] if pool.ending else math.inf
        now = _at(min(t_arr, t_end), tick)
        stranded_s += rate * (now - since)
        ended = pool.finish_until(now)
        if ended is not None:
            last = max(last, ended)
        while nxt is not None and nxt.submit_ts <= now:
            r = JobRun(nxt, None, idx=arrived)
            arrived += 1
            live += 1
            peak = max(peak, live)
            if keep_runs:
                runs.append(r)
            if progress is not None and arrived % every == 0:
                progress(arrived, total)
            nxt = next(src, None)
            why = pool.never(r)
            if why is not None:
                r.state, r.reason = "rejected", why
                pool.forget(r)
                finish(r)
                continue
            r.state = "pending"
            queue.append(r)
        while queue:
            where = pool.fit(queue[0])
            if where is None:
                break
            pool.begin(queue.popleft(), now, where)
        if backfill and queue:
            pool.backfill(queue, now)
        rate, since = pool.stranded(queue), now
    for r in sorted(queue, key=lambda r: r.idx):
        r.reason = "still pending when the trace ended"
        finish(r)
    stranded = stranded_s if pool.measures_stranding else None
    usage = pool.usage if isinstance(pool.usage, list) else pool.usage.events()
    # kept runs are all held to the end (as `des.simulate` counts them)
    return SimResult(scenario, runs, start, last, 0, 0, usage, 0.0, tick, stranded, outcome, len(runs) if keep_runs else peak)


def run_fifo(scenario, jobs: list[TraceJob], capacity: float, *, backfill: bool, tick: float = 0.0,
             keep_runs: bool = True, progress: Callable[[int, int], None] | None = None) -> SimResult:
    """Replay `jobs` on one FIFO queue of `capacity` GPUs (see the module docstring); on the
    scenario's nodes where it has any (`run_fifo_nodes`)."""
    if scenario.base.nodes:
        return run_fifo_nodes(scenario, jobs, capacity, backfill=backfill, tick=tick, keep_runs=keep_runs, progress=progress)
    return _replay(scenario, jobs, _Pool(capacity), backfill=backfill, tick=tick, keep_runs=keep_runs, progress=progress)


_NODES = "pool"
_EPS = 1e-9


class _NodePool(_Pool):
    """The pool's GPUs on nodes (see the module docstring)."""

    measures_stranding = True

    def __init__(self, capacity: float, nodes: tuple[NodeSpec, ...], node: float | None):
        super().__init__(capacity)
        specs = [NodeSpec(n.name, _NODES, n.gpus) for n in nodes]
        rest = capacity - sum(n.gpus for n in nodes)
        if rest > _EPS:  # flavors without nodes: their GPUs as one node
            specs.append(NodeSpec("pool/without-nodes", _NODES, rest))
        self.book = NodeBook(specs)
        self.empty = NodeBook(specs)
        self.node = node
        self.wl: dict[str, Workload] = {}

    def workload(self, r: JobRun) -> Workload:
        wl = self.wl.get(r.job.job_id)
        if wl is None:
            pods = pods_for(r.job.gpus, self.node)
            wl = self.wl[r.job.job_id] = Workload(
                r.job.job_id, _NODES, {GPU: float(r.job.gpus)}, flavor=_NODES, pods=pods
            )
        return wl

    def forget(self, r: JobRun) -> None:
        self.wl.pop(r.job.job_id, None)

    def never(self, r: JobRun) -> str | None:
        wl = self.workload(r)
        if self.empty.fits(wl, _NODES):
            return None
        pods = wl.pods
        return f"asks for {pods} x {r.job.gpus / pods:g} GPUs, more than the pool's nodes can ever hold"

    def fits(self, r: JobRun) -> bool:
        return self.book.fits(self.workload(r), _NODES)

    def fit(self, r: JobRun) -> str | None:
        return _NODES if self.fits(r) else None

    def begin(self, r: JobRun, now: float, where: str = _NODES) -> None:
        super().begin(r, now)
        wl = self.workload(r)
        self.book.place(wl)
        r.placement = placement_of(self.book, wl.name)  # type: ignore[assignment]

    def finish_until(self, now: float) -> float | None:
        last = None
        while self.ending and self.ending[0][0] <= now:
            end, _s, r = heapq.heappop(self.ending)
            self.free += r.job.gpus
            self.book.release(self.wl.pop(r.job.job_id), remember=False)
            r.state, r.end, r.used_gpu_s = "done", end, r.job.gpus * r.job.duration_s
            self.usage.append((end, r.job.lane, -r.job.gpus))
            self.on_done(r)
            last = end
        return last

    def shadow(self, head: JobRun) -> float:
        """The first end time at which the head's pods fit, releasing running jobs in end order on
        a copy of the node state; inf: never (cannot happen for a job the empty pool holds)."""
        wl = self.workload(head)
        pods = wl.pods
        per = wl.requests[GPU] / pods
        book = self.book
        count = sum(1 for n in book.by_flavor[_NODES] if book.free[n] + _EPS >= per)
        free: dict[str, float] = {}
        for end, _s, r in sorted(self.ending, key=lambda e: e[0]):
            for n, v in book.placed.get(r.job.job_id, ()):
                old = free.get(n, book.free[n])
                free[n] = old + v
                if old + _EPS < per <= old + v + _EPS:
                    count += 1
            if count >= pods:
                return end
        return math.inf

    def backfill(self, queue: deque[JobRun], now: float) -> None:
        """EASY on nodes: each of the next `BACKFILL_DEPTH` waiting jobs that fits now and ends by
        the head's shadow time starts."""
        if self.free <= _EPS:
            return
        shadow = self.shadow(queue[0])
        started: list[int] = []
        for k in range(1, min(len(queue), BACKFILL_DEPTH + 1)):
            if self.free <= _EPS:
                break
            r = queue[k]
            if r.job.gpus > self.free + _EPS or now + r.job.duration_s > shadow + _EPS:
                continue
            if self.fits(r):
                self.begin(r, now)
                started.append(k)
        for k in reversed(started):
            del queue[k]

    def stranded(self, queue: deque[JobRun]) -> float:
        """The free GPUs when the head asks for no more than are free and yet fits no nodes."""
        if not queue or self.free <= _EPS:
            return 0.0
        head = queue[0]
        if head.job.gpus > self.free + _EPS or self.fits(head):
            return 0.0
        if not head.wait_reason:
            head.wait_reason = self.book.refusal(self.workload(head), _NODES) or ""
        return self.free


def run_fifo_nodes(scenario, jobs: list[TraceJob], capacity: float, *, backfill: bool, tick: float = 0.0,
                   keep_runs: bool = True, progress: Callable[[int, int], None] | None = None) -> SimResult:
    """`run_fifo` on the scenario's nodes (see the module docstring)."""
    sizes = scenario.node_gpus or {}
    pool = _NodePool(capacity, scenario.base.nodes, split_node_size(sizes.values(), scenario.gang_split))
    return _replay(scenario, jobs, pool, backfill=backfill, tick=tick, keep_runs=keep_runs, progress=progress)


class _FlavorPool:
    """The pool as the policy splits it: each flavor's GPUs on its nodes (one node of the whole
    flavor where it has none), a job on one flavor (see `run_fifo_flavors`)."""

    def __init__(self, scenario, allowed):
        base = scenario.base
        caps = {f.name: (f.capacity or {}).get(GPU, 0.0) for f in base.flavors}
        self.order = [f for f, c in caps.items() if c > _EPS]
        specs = list(base.nodes)
        placed = {n.flavor for n in base.nodes}
        specs += [NodeSpec(f"{f}/all", f, caps[f]) for f in self.order if f not in placed]
        self.book = NodeBook(specs)
        self.empty = NodeBook(specs)
        self.real_nodes = placed
        self.sizes = dict(scenario.node_gpus or {})
        self.gang_split = scenario.gang_split
        self.allowed = allowed
        self.ending: list[tuple[float, int, JobRun]] = []
        self.usage: list[tuple[float, str, float]] = []
        self.seq = 0
        self.wl: dict[str, Workload] = {}
        self.flavors_of: dict[str, tuple[str, ...]] = {}
        self.wls: dict[tuple[str, str], Workload] = {}
        self.measures_stranding = bool(placed)
        self.on_done: Callable[[JobRun], None] = _nothing

    def flavors(self, r: JobRun) -> tuple[str, ...]:
        fl = self.flavors_of.get(r.job.job_id)
        if fl is None:
            ok = set(self.allowed(r.job))
            fl = self.flavors_of[r.job.job_id] = tuple(f for f in self.order if f in ok)
        return fl

    def workload(self, r: JobRun, flavor: str) -> Workload:
        key = (r.job.job_id, flavor)
        wl = self.wls.get(key)
        if wl is None:
            pods = pods_for(r.job.gpus, split_node_size((self.sizes[f] for f in self.flavors(r) if f in self.sizes), self.gang_split))
            wl = self.wls[key] = Workload(r.job.job_id, _NODES, {GPU: float(r.job.gpus)}, flavor=flavor, pods=pods)
        return wl

    def forget(self, r: JobRun) -> None:
        for f in self.flavors_of.pop(r.job.job_id, ()):
            self.wls.pop((r.job.job_id, f), None)

    def never(self, r: JobRun) -> str | None:
        fl = self.flavors(r)
        if any(self.empty.fits(self.workload(r, f), f) for f in fl):
            return None
        if not fl:
            return "no flavor of the pool matches its gpu_type"
        largest = max(self.empty.free_total(f) for f in fl)
        return f"asks for {r.job.gpus:g} GPUs on one flavor; the largest it may use holds {largest:g}"

    def fit(self, r: JobRun) -> str | None:
        """The first flavor (policy order) whose nodes hold the job now; None: none."""
        for f in self.flavors(r):
            if self.book.fits(self.workload(r, f), f):
                return f
        return None

    def begin(self, r: JobRun, now: float, flavor: str) -> None:
        wl = self.wl[r.job.job_id] = self.workload(r, flavor)
        self.book.place(wl)
        r.state, r.start, r.first_admit, r.last_admit, r.flavor = "running", now, now, now, flavor
        if flavor in self.real_nodes:
            r.placement = placement_of(self.book, wl.name)  # type: ignore[assignment]
        self.seq += 1
        heapq.heappush(self.ending, (now + r.job.duration_s, self.seq, r))
        self.usage.append((now, r.job.lane, r.job.gpus))

    def finish_until(self, now: float) -> float | None:
        last = None
        while self.ending and self.ending[0][0] <= now:
            end, _s, r = heapq.heappop(self.ending)
            self.book.release(self.wl.pop(r.job.job_id), remember=False)
            self.forget(r)
            r.state, r.end, r.used_gpu_s = "done", end, r.job.gpus * r.job.duration_s
            self.usage.append((end, r.job.lane, -r.job.gpus))
            self.on_done(r)
            last = end
        return last

    def reservation(self, head: JobRun) -> tuple[float, str | None, float]:
        """(shadow time, flavor, extra GPUs): the earliest end time at which the head fits one of
        its flavors, releasing that flavor's running jobs in end order on a copy of its nodes; the
        extra GPUs that flavor has then beyond the head's (quota-only flavors; 0 on nodes)."""
        best: tuple[float, str | None, float] = (math.inf, None, 0.0)
        book = self.book
        ends = sorted(self.ending, key=lambda e: e[0])
        for f in self.flavors(head):
            wl = self.workload(head, f)
            pods = max(1, wl.pods)
            per = wl.requests[GPU] / pods
            nodes = book.by_flavor.get(f, [])
            count = sum(1 for n in nodes if book.free[n] + _EPS >= per)
            free: dict[str, float] = {}
            for end, _s, r in ends:
                if end >= best[0]:
                    break
                if r.flavor != f:
                    continue
                for n, v in book.placed.get(r.job.job_id, ()):
                    old = free.get(n, book.free[n])
                    free[n] = old + v
                    if old + _EPS < per <= old + v + _EPS:
                        count += 1
                if count >= pods:
                    extra = 0.0 if f in self.real_nodes else book.free_total(f) + sum(free.values()) - sum(
                        book.free[n] for n in free
                    ) - head.job.gpus
                    best = (end, f, max(0.0, extra))
                    break
        return best

    def backfill(self, queue: deque[JobRun], now: float) -> None:
        """EASY over flavors: a later job starts now on a flavor that holds it now when that
        cannot delay the head's reserved start: it runs on another flavor than the reserved one,
        or ends by the shadow time, or (a quota-only flavor) fits the extra GPUs."""
        free = {f: self.book.free_total(f) for f in self.order}
        if max(free.values(), default=0.0) <= _EPS:
            return
        shadow, reserved, extra = self.reservation(queue[0])
        started: list[int] = []
        for k in range(1, min(len(queue), BACKFILL_DEPTH + 1)):
            r = queue[k]
            g = r.job.gpus
            for f in self.flavors(r):
                if g > free[f] + _EPS or not self.book.fits(self.workload(r, f), f):
                    continue
                if f != reserved or now + r.job.duration_s <= shadow + _EPS:
                    self.begin(r, now, f)
                elif r.job.gpus <= extra + _EPS:
                    self.begin(r, now, f)
                    extra -= r.job.gpus
                else:
                    continue
                free[f] -= g
                started.append(k)
                break
            if max(free.values()) <= _EPS:
                break
        for k in reversed(started):
            del queue[k]

    def stranded(self, queue: deque[JobRun]) -> float:
        """On node-modelled flavors: their free GPUs while the head may use them, asks for no more
        than one of them has free, and fits none."""
        if not queue or not self.real_nodes:
            return 0.0
        head = queue[0]
        fl = [f for f in self.flavors(head) if f in self.real_nodes]
        if not fl or self.fit(head) is not None:
            return 0.0
        frees = [self.book.free_total(f) for f in fl]
        if head.job.gpus > max(frees) + _EPS:
            return 0.0
        return sum(frees)


def run_fifo_flavors(scenario, jobs: list[TraceJob], allowed, *, backfill: bool, tick: float = 0.0,
                     keep_runs: bool = True, progress: Callable[[int, int], None] | None = None) -> SimResult:
    """FIFO over the policy's flavors (and nodes, with a node model), without the engine.

    One queue in (submit_ts, job_id) order; a job runs on one flavor, the first in the policy's
    order among those `allowed(job)` names that holds it (on nodes: its pods on the flavor's nodes,
    best fit, as `run_fifo_nodes`). With `backfill`, EASY over flavors: the blocked head reserves
    the flavor where it can start first (its shadow time); a later job starts now on a flavor
    that holds it now if that flavor is not the reserved one, or it ends by the shadow time, or
    (quota-only) it fits the GPUs the head will not need there. A job no flavor it may use can
    ever hold is never admitted, with the capacity it would need. This is the like-for-like
    baseline of a policy split into flavors: the single-pool `fifo` runs a 64-GPU job on a pool
    whose largest flavor holds 48; no Kueue queue can.
    """
    return _replay(scenario, jobs, _FlavorPool(scenario, allowed), backfill=backfill, tick=tick, keep_runs=keep_runs,
                   progress=progress)
