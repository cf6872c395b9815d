"""The simulator's queues and runs: its state built from the scenario (queues by shape, running
workloads grouped per (queue, flavor, priority), quota usage, cohort roots, own-queue ceilings, the
node book), and what events do to jobs: arrival (rejected at once when it never fits an empty
pool), queue order, aging of priorities (Kueue's priority boost), start, completion, eviction
with the work lost since the last checkpoint, and the usage accounting of each.

May import `admission/`, `policy/`, `simulate/des_types.py`, `outcome.py`, `scenario.py`, `trace.py`.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import fields, replace

from gpu_platform.admission import ClusterState, Workload, admit_until_stable
from gpu_platform.admission.model import STRICT_FIFO, evolve
from gpu_platform.admission.nodes import NodeBook
from gpu_platform.admission.serving_lending import queue_roots
from gpu_platform.policy import GPU
from gpu_platform.simulate.des_types import JobRun, _queue_key
from gpu_platform.simulate.outcome import Outcome, Usage
from gpu_platform.simulate.scenario import Scenario
from gpu_platform.simulate.trace import TraceJob


class _Queues:
    """The queues, runs and accounting of one simulation (`des._Sim` adds the engine calls and
    the loop)."""

    def __init__(
        self,
        scenario: Scenario,
        jobs: list[TraceJob] | Iterable[TraceJob],
        tick: float,
        checkpoint_s: float,
        window: int,
        per_shape: int,
        skip_bound: bool,
        merge_held: bool,
        keep_runs: bool = True,
    ):
        self.scn = scenario
        self.shown_per_shape = per_shape
        self.tick = tick
        self.ckpt = checkpoint_s
        self.window = window
        # The jobs' runs in submission order (`source`). keep_runs: every job's `JobRun` is made
        # now and stays in `runs` (a list is sorted here, ties keep their order). Otherwise a run
        # is made as its job is read (an iterable other than a list, e.g. `trace.SortedTrace`,
        # must already be in order) and folded into `outcome` once its outcome is final, so
        # memory holds the queued and running jobs only (`live`, `peak_live`).
        self.keep_runs = keep_runs
        self.outcome = Outcome()
        self.arrived = 0
        self.n_jobs = len(jobs) if hasattr(jobs, "__len__") else 0  # type: ignore[arg-type]
        ordered = sorted(jobs, key=lambda j: j.submit_ts) if isinstance(jobs, list) else jobs
        if keep_runs:
            self.runs = [JobRun(j, scenario.workload(j), idx=i) for i, j in enumerate(ordered)]
            self.source: Iterator[JobRun] = iter(self.runs)
            self.live = self.peak_live = self.n_jobs = len(self.runs)
        else:
            self.runs = []
            self.source = (self.new_run(j) for j in ordered)
            self.live = self.peak_live = 0
        names = [c.name for c in scenario.base.cluster_queues]
        # per queue: shape -> pending JobRuns of that shape, in queue order
        self.shapes: dict[str, dict[tuple, list[tuple[tuple, JobRun]]]] = {n: {} for n in names}
        self.size: dict[str, int] = dict.fromkeys(names, 0)
        self.strict = {c.name for c in scenario.base.cluster_queues if c.queueing_strategy == STRICT_FIFO}
        self.block: dict[str, tuple | None] = dict.fromkeys(names)
        self.fresh: dict[str, list[JobRun]] = {n: [] for n in names}  # arrivals since the last call
        self.running: dict[str, Workload] = {}
        self.running_wl: dict[str, Workload] = {}  # as admitted (flavor, priority) for accounting
        # running workloads by (cq, flavor, priority): names, and summed requests
        # (a dict in admission order, not a set: the engine is shown them in an order that does not
        # depend on the string hash seed, so a run on nodes gives the same outcome every time)
        self.groups: dict[tuple[str, str, int], dict[str, None]] = {}
        self.group_sum: dict[tuple[str, str, int], dict[str, float]] = {}
        self.merge_held = merge_held and not scenario.base.fair_sharing
        self.run_of: dict[str, JobRun] = {}
        self.uncheckpointed: set[str] = set()  # running evidence workloads not yet checkpointed
        self.heap: list[tuple[float, int, int, JobRun]] = []
        self.counter = 0
        self.pending = 0
        self.calls = 0
        self.cycles = 0
        self.usage: list[tuple[float, str, float]] | Usage = [] if keep_runs else Usage()
        self.skip_bound = skip_bound
        self.specs = {c.name: c for c in scenario.base.cluster_queues}
        self.serving_cqs = tuple(c.name for c in scenario.base.cluster_queues if c.serving)
        # the flavors a serving lane holds GPU quota on (where its lending rule can withhold GPUs)
        self.serving_flavors = tuple(dict.fromkeys(
            q.flavor for c in scenario.base.cluster_queues if c.serving for q in c.quotas if q.resource == GPU
        ))
        # queues whose waiting head reserves GPUs (`des_engine._reservations`), flavor capacities
        self.reserve_cqs = tuple(c.name for c in scenario.base.cluster_queues if c.reserve_head)
        if self.reserve_cqs:
            # Under head reservations a job far back in its queue may backfill (it ends before the
            # reserved start) while those ahead of it are held: every waiting shape is shown, as
            # showing only the first `window` could leave it unseen. Measured: fewer engine calls
            # and less CPU on both shared traces than with the window (docs/simulator.md).
            self.window = 1 << 62
        self.flavor_gpus = {f.name: (f.capacity or {}).get(GPU, 0.0) for f in scenario.base.flavors}
        # per queue: the root of its cohort tree (its cohort's name where not in a tree)
        self.cohort_root = queue_roots(scenario.base.cluster_queues, scenario.base.cohorts)
        # own-queue ceiling per (cq, flavor, resource): nominal + borrowing limit (nominal alone
        # without a cohort); absent: no ceiling of its own
        self.ceiling: dict[tuple[str, str, str], float] = {}
        for c in scenario.base.cluster_queues:
            for q in c.quotas:
                top = c.own_ceiling(q)
                if top is not None:
                    self.ceiling[(c.name, q.flavor, q.resource)] = top
        self.cq_usage: dict[tuple[str, str, str], float] = {}
        self.nominal: dict[tuple[str, str], float] = {
            (c.name, q.flavor): q.nominal for c in scenario.base.cluster_queues for q in c.quotas if q.resource == GPU
        }
        self.cq_prios: dict[str, dict[int, int]] = {}
        self.fits_cache: dict[tuple, str | None] = {}
        # the scenario's state as constructor arguments (dataclasses.replace costs twice as much)
        self.base_kw = {f.name: getattr(scenario.base, f.name) for f in fields(scenario.base)}
        self.base_fields = tuple(
            (ClusterState.__dict__[name].__set__, v) for name, v in self.base_kw.items() if name not in ("admitted", "pending", "now")
        )
        # folded running workloads per (queue, flavor, priority), reused while the group is unchanged
        self.group_ver: dict[tuple[str, str, int], int] = {}
        self.folded: dict[tuple[str, str, int], tuple[int, Workload]] = {}
        # the node model: where running work sits, and the folded groups' summed placements
        self.book: NodeBook | None = NodeBook(scenario.base.nodes) if scenario.base.nodes else None
        self.group_place: dict[tuple[str, str, int], dict[str, float]] = {}
        self.node_flavors = tuple(self.book.by_flavor) if self.book is not None else ()
        self.usable: dict[tuple, tuple[str, ...]] = {}
        self.stranded_gpu_s = 0.0
        self.withheld_gpu_s = 0.0
        # aging (`Scenario.boosts`): (due, seq, run) of waiting work whose priority boost is due
        self.boosts = dict(scenario.boosts or {})
        self.aging: list[tuple[float, int, JobRun, int]] = []
        self.level: dict[str, int] = {}  # aging level a job's workload carries
        self.base_prio: dict[str, int] = {}
        self.seq_age = 0
        # more events beside the trace (`simulate(events=...)`: a service's autoscaler)
        self.events = None
        # `simulate(progress=...)`: called with (jobs arrived, jobs) every `progress_every` arrivals
        self.progress: Callable[[int, int], None] | None = None

    def _shape(self, wl: Workload) -> tuple:
        """What makes waiting workloads interchangeable to the engine: shown one at a time, set
        aside together. Under head reservations a job's expected duration decides whether it may
        start on a reserved flavor (`admission/reservation.py`), so it is part of the shape."""
        shape = (tuple(sorted(wl.requests.items())), wl.allowed_flavors, wl.flavor, wl.priority, wl.evidence, wl.safety_approval)
        return (*shape, wl.expected_duration_s) if self.reserve_cqs else shape

    # -- admissibility in an empty pool ---------------------------------------------------
    def _never_fits(self, wl: Workload) -> str | None:
        key = (wl.cq, self._shape(wl)[:6])  # whether it ever fits does not depend on its duration
        if key not in self.fits_cache:
            res = admit_until_stable(replace(self.scn.base, admitted=(), pending=(wl,), now=0.0))
            if res.admitted:
                self.fits_cache[key] = None
            elif res.rejected:
                self.fits_cache[key] = res.rejected[0].message
            else:
                self.fits_cache[key] = res.pending[0].message if res.pending else "not admissible"
        return self.fits_cache[key]

    # -- queue handling --------------------------------------------------------------------
    def _enqueue(self, r: JobRun, now: float) -> bool:
        """Put a job in its queue; True when the engine must look again."""
        wl = r.wl
        assert wl is not None
        r.state = "pending"
        r.queued_since = now
        r.key = _queue_key(wl)
        if not r.shape:
            r.shape = self._shape(wl)
        group = self.shapes[wl.cq].setdefault(r.shape, [])
        if not group or group[-1][0] < r.key:
            group.append((r.key, r))
        else:
            bisect.insort(group, (r.key, r), key=lambda e: e[0])
        self.size[wl.cq] += 1
        self.pending += 1
        b = self.block.get(wl.cq)
        if b is None or r.key < b:
            self.fresh[wl.cq].append(r)
            return True
        return False

    def _dequeue(self, r: JobRun) -> None:
        wl = r.wl
        assert wl is not None
        groups = self.shapes[wl.cq]
        sh = r.shape
        group = groups[sh]
        i = bisect.bisect_left(group, r.key, key=lambda e: e[0])
        assert group[i][1] is r
        del group[i]
        if not group:
            del groups[sh]
        self.size[wl.cq] -= 1
        self.pending -= 1

    def new_run(self, job: TraceJob) -> JobRun:
        """The run of a job read from the trace (counted live until `finish` folds it)."""
        r = JobRun(job, self.scn.workload(job), idx=self.arrived)
        self.arrived += 1
        self.live += 1
        if self.live > self.peak_live:
            self.peak_live = self.live
        return r

    def finish(self, r: JobRun) -> None:
        """A job's outcome is final (done, failed, rejected, or pending when the trace ended):
        fold it into the outcome; the loop keeps no reference to it after this. A run made beside
        the trace (a service's replica, idx -1: `serving.py`) is not the trace's: not folded."""
        if r.idx < 0:
            return
        self.outcome.fold(r, r.idx)
        self.live -= 1
        name = r.job.job_id
        self.level.pop(name, None)
        self.base_prio.pop(name, None)

    def arrive(self, r: JobRun, now: float) -> bool:
        if r.wl is None:
            r.state, r.reason = "rejected", f"lane {r.job.lane!r} has no queue in this scenario"
            self.finish(r)
            return False
        if r.wl.cq not in self.shapes:
            r.state, r.reason = "rejected", f"unknown cluster queue {r.wl.cq!r}"
            self.finish(r)
            return False
        why = self._never_fits(r.wl)
        if why is not None:
            r.state, r.reason = "rejected", why
            self.finish(r)
            return False
        if r.wl.cq in self.boosts:
            self.base_prio[r.job.job_id] = r.wl.priority
            self._age_next(r, 1)
        return self._enqueue(r, now)

    def _age_next(self, r: JobRun, level: int) -> None:
        """Schedule the job's next aging step (level `level`) unless its boost is at its cap."""
        assert r.wl is not None
        step, per, cap = self.boosts[r.wl.cq]
        if step > 0 and (level - 1) * per < cap:
            self.seq_age += 1
            heapq.heappush(self.aging, (r.job.submit_ts + level * step, self.seq_age, r, level))

    def _raise(self, r: JobRun, level: int) -> bool:
        """Give a job the priority of aging level `level` (base + min(level x boost, cap): Kueue's
        `kueue.x-k8s.io/priority-boost`, KEP-7990); True if it changed."""
        assert r.wl is not None
        name = r.job.job_id
        if level <= self.level.get(name, 0):
            return False
        _step, per, cap = self.boosts[r.wl.cq]
        self.level[name] = level
        prio = self.base_prio[name] + min(level * per, cap)
        if prio == r.wl.priority:
            return False
        r.wl = replace(r.wl, priority=prio)
        r.shape = self._shape(r.wl)
        return True

    def _age(self, r: JobRun, level: int) -> bool:
        """An aging step of a waiting job: it sorts ahead in its queue and may preempt what its
        queue's rules let a higher priority preempt. True when the engine must look again."""
        since = r.queued_since
        self._dequeue(r)
        self._raise(r, level)
        self._age_next(r, level + 1)
        return self._enqueue(r, since)

    def _stop(self, r: JobRun, now: float) -> float:
        """End the current run of r at now; returns its run time."""
        name = r.job.job_id
        del self.running[name]
        del self.run_of[name]
        self.uncheckpointed.discard(name)
        held = self.running_wl.pop(name)
        self._account(held, -1)
        if self.book is not None:
            self.book.release(held, remember=False)
        ran = now - r.start
        r.used_gpu_s += r.job.gpus * ran
        self.usage.append((now, r.job.lane, -r.job.gpus))
        return ran

    def complete(self, r: JobRun, now: float) -> None:
        self._stop(r, now)
        r.state, r.end = "done", now
        self.finish(r)

    def _start(self, r: JobRun, flavor: str, now: float, placement=None) -> None:
        self._dequeue(r)
        r.state, r.flavor, r.start = "running", flavor, now
        r.queued_s += now - r.queued_since
        if r.first_admit is None:
            r.first_admit = now
        r.last_admit = now
        wl = r.wl
        assert wl is not None
        # Resuming from a checkpoint counts as checkpointed (the lane rule for evidence jobs).
        # The nodes the engine chose stay the run's: later calls see them held.
        held = evolve(wl, flavor=flavor, admitted_at=now, checkpointed=r.saved_s > 0, placement=placement)
        r.placement = placement  # type: ignore[assignment]
        self.running[r.job.job_id] = held
        self.running_wl[r.job.job_id] = held
        self._account(held, 1)
        if self.book is not None and placement:
            self.book.place(held)
        self.run_of[r.job.job_id] = r
        if wl.evidence and r.saved_s <= 0:
            self.uncheckpointed.add(r.job.job_id)
        r.seq += 1
        self.counter += 1
        heapq.heappush(self.heap, (now + r.job.duration_s - r.saved_s, self.counter, r.seq, r))
        self.usage.append((now, r.job.lane, r.job.gpus))

    def _evict(self, r: JobRun, now: float) -> bool:
        """Stop a preempted run and account its lost work; True when it goes back to its queue
        (the caller requeues it: `schedule` does so after the instant settles)."""
        ran = self._stop(r, now)
        r.seq += 1  # invalidates its completion event
        r.preemptions += 1
        policy = r.job.preemption_policy
        if policy == "checkpoint_requeue" and self.ckpt > 0:
            kept = math.floor(ran / self.ckpt + 1e-9) * self.ckpt
        else:
            kept = 0.0
        if policy == "requeue":
            lost = ran + r.saved_s
            r.saved_s = 0.0
        else:
            lost = ran - kept
            r.saved_s += kept
        r.lost_gpu_s += r.job.gpus * lost
        if policy == "fail":
            r.state, r.end, r.reason = "failed", now, "preempted with preemption_policy fail"
            self.finish(r)
            return False
        r.state = "evicted"
        return True

    def _account(self, w: Workload, sign: int) -> None:
        g = (w.cq, w.flavor or "", w.priority)
        self.group_ver[g] = self.group_ver.get(g, 0) + 1
        names = self.groups.setdefault(g, {})
        sums = self.group_sum.setdefault(g, {})
        if sign > 0:
            names[w.name] = None
        else:
            names.pop(w.name, None)
        for r, v in w.requests.items():
            k = (w.cq, w.flavor or "", r)
            self.cq_usage[k] = self.cq_usage.get(k, 0.0) + sign * v
            sums[r] = sums.get(r, 0.0) + sign * v
        if w.placement:
            spots = self.group_place.setdefault(g, {})
            for n, v in w.placement.items():
                left = round(spots.get(n, 0.0) + sign * v, 9)
                if abs(left) > 1e-9:
                    spots[n] = left
                else:
                    spots.pop(n, None)
        if not names:
            del self.groups[g], self.group_sum[g]
            self.group_place.pop(g, None)
        prios = self.cq_prios.setdefault(w.cq, {})
        prios[w.priority] = prios.get(w.priority, 0) + sign
        if not prios[w.priority]:
            del prios[w.priority]
