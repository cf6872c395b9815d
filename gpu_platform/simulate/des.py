"""The discrete-event loop: arrivals and completions drive admission cycles of the real engine.

Events are job arrivals (at `submit_ts`) and completions. Admission runs as the gate does:
`admit_until_stable` over the running and pending workloads; its preemption victims are evicted
at once (losing the work since their last checkpoint) and requeued at their original
submission time, and the engine runs again so the preemptor starts. Time never passes inside
a cycle.

The engine is only asked when its answer can change, and only about what can change:
- a completion or eviction while work is pending frees capacity: every queue is shown;
- an arrival (no capacity freed) is shown with the queues it joined, when it sorts ahead of its
  queue's blocked head; the workloads the engine last found inadmissible stay parked, since
  admissions only shrink free capacity (Kueue also retries inadmissible workloads only when
  capacity is freed). Queues with no arrival are left out of that call;
- all events at one instant are applied before the engine runs (with `tick`, all events up to
  the next tick boundary, as a gate that runs every `tick` seconds).
A waiting workload of a BestEffortFIFO queue that would take its own queue over nominal quota
plus borrowing limit on every flavor it may use, with nothing in its own queue it may preempt,
is not shown: Kueue's borrowing limit is a hard ceiling that no preemption elsewhere lifts, so
the engine would find it inadmissible; it is shown again once its own queue's usage drops.
(Like Kueue's inadmissible list, this lets the next workload of that queue be looked at in the
first cycle rather than the second; at one instant, that can change which of two queues gets
freed GPUs first. `skip_bound=False` shows them.)
Running workloads that no shown workload may preempt (by its queue's within-queue, reclaim
and borrow-within-cohort policies and priorities) are passed folded into one workload per
(queue, flavor, priority), marked never-a-victim: the quota the engine sees is the same, and
its per-call cost grows with what may actually be preempted rather than with all that runs.
Identical waiting workloads (same queue, requests, flavors, priority) are shown one at a time:
the engine finds the one behind inadmissible whenever the one ahead is (its own dominance
rule). When a shown workload with identical ones behind it is admitted or preempts, that answer
is discarded and the engine is asked again, unchanged state, with more of them shown, so the
outcome is the one a full queue gives. Each queue shows at most `window` distinct workloads,
doubled while the engine gets past all of them.

A job that cannot be admitted even into an empty pool (more GPUs than its queue can ever hold)
is rejected at submission, as request validation rejects it on the platform, and is reported
as never admitted.

With a node model (the scenario's `base.nodes`, `scenarios.with_nodes`) the engine also places
pods on nodes; the placement it returns (`Admission.placement`) is kept on the running workload
until the run ends, so later calls see those nodes held, and a folded group holds the sum of its
members' placements. After each instant's admissions the loop adds up the GPUs stranded by
fragmentation (`_Sim._stranded`) and, with a serving lane, the GPUs its lending rule keeps idle
from waiting heads (`_Sim._withheld_idle`), and integrates them until the next instant
(`stranded_gpu_s`, `withheld_gpu_s`).
One module per job, each importing only those below it: this one runs the loop (`_Sim.run`,
`simulate`) and re-exports the rest; `des_engine.py` what each engine call is shown and the call
until the instant settles, and stranded GPUs; `des_queues.py` the queues, runs and their
accounting; `des_types.py` `JobRun` and `SimResult`.
May import `admission/`, `policy/`, `simulate/scenario.py`, `trace.py` and the `des_*` modules.
"""

from __future__ import annotations

import gc
import heapq
import math
from collections.abc import Callable, Iterable

from gpu_platform.simulate.des_engine import _CS_ADMITTED, _CS_NOW, _CS_PENDING, _Cycles  # noqa: F401
from gpu_platform.simulate.des_queues import _Queues  # noqa: F401 (kept import paths)
from gpu_platform.simulate.des_types import JobRun, SimResult, _queue_key, gpus_of  # noqa: F401
from gpu_platform.simulate.scenario import Scenario
from gpu_platform.simulate.trace import TraceJob

_INF = math.inf
PROGRESS_JOBS = 100_000
"""Arrivals between two calls of `simulate`'s `progress`."""


class _Sim(_Cycles):
    """One simulation: the queues and runs (`des_queues.py`), the engine calls (`des_engine.py`)
    and the event loop."""

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
        super().__init__(scenario, jobs, tick, checkpoint_s, window, per_shape, skip_bound, merge_held, keep_runs)
        self.progress_every = PROGRESS_JOBS

    # -- the loop ----------------------------------------------------------------------------
    def run(self) -> tuple[float, float]:
        src = self.source
        nxt = next(src, None)
        n = self.n_jobs
        ai = 0
        heap = self.heap
        start = nxt.job.submit_ts if nxt is not None else 0.0
        last = start
        nodes = self.book is not None
        serving = bool(self.serving_cqs)
        stranded, withheld, since = 0.0, 0.0, start
        while True:
            while heap and heap[0][3].seq != heap[0][2]:
                heapq.heappop(heap)
            t_arr = nxt.job.submit_ts if nxt is not None else _INF
            t_end = heap[0][0] if heap else _INF
            aging = self.aging
            while aging and aging[0][2].state != "pending":
                heapq.heappop(aging)  # a job that runs again is put back by its requeue
            events = self.events
            t = min(t_arr, t_end, aging[0][0] if aging else _INF, events.next_time() if events is not None else _INF)
            if t == _INF:
                break
            t_run = t if self.tick <= 0 else math.ceil(t / self.tick - 1e-12) * self.tick
            if nodes:
                self.stranded_gpu_s += stranded * (t_run - since)
            if serving:
                self.withheld_gpu_s += withheld * (t_run - since)
            freed = False
            arrived = False
            while True:
                while heap and heap[0][3].seq != heap[0][2]:
                    heapq.heappop(heap)
                if not heap or heap[0][0] > t_run:
                    break
                end, _c, _s, r = heapq.heappop(heap)
                self.complete(r, end)
                last = max(last, end)
                freed = True
            while nxt is not None and nxt.job.submit_ts <= t_run:
                at = nxt.job.submit_ts
                arrived |= self.arrive(nxt, at)
                ai += 1
                if ai % self.progress_every == 0 and self.progress is not None:
                    self.progress(ai, n)
                nxt = next(src, None)
                if nxt is not None and nxt.job.submit_ts < at:
                    raise ValueError(
                        f"jobs: {nxt.job.job_id!r} (submit_ts {nxt.job.submit_ts:g}) comes after a job submitted at "
                        f"{at:g}: a stream of jobs must be in submission order"
                    )
            while aging and aging[0][0] <= t_run:
                _due, _i, r, level = heapq.heappop(aging)
                if r.state == "pending" and level > self.level.get(r.job.job_id, 0):
                    self._age(r, level)
                    # a raised priority changes what the queue may preempt: look at every queue
                    # again, as after a completion (what the engine answers must not depend on
                    # the shortcuts: tests/simulate/test_cli_and_scale.py)
                    freed = True
            if events is not None:
                freed |= events.fire(self, t_run)
            if self.pending and (freed or arrived):
                self.schedule(t_run, full=freed)
            if events is not None:
                events.observe(self, t_run)
            if nodes:
                stranded = self._stranded()
            if serving:
                withheld = self._withheld_idle()
            since = t_run
        return start, last


def simulate(
    scenario: Scenario,
    jobs: list[TraceJob],
    *,
    tick: float = 0.0,
    checkpoint_interval_s: float = 1800.0,
    window: int = 16,
    per_shape: int = 1,
    skip_bound: bool = True,
    merge_held: bool = True,
    events=None,
    progress: Callable[[int, int], None] | None = None,
    keep_runs: bool = True,
) -> SimResult:
    """Replay `jobs` under `scenario`. tick=0: the engine runs at every instant something
    changes; tick>0: at multiples of `tick` seconds (a gate on a sensor interval).
    checkpoint_interval_s: how often a `checkpoint_requeue` job saves its work (0: never).
    window / per_shape / skip_bound / merge_held: distinct / identical pending workloads shown
    per queue at first, whether workloads over their own queue's ceiling are held back, whether
    running workloads nobody shown may preempt are folded per (queue, flavor, priority) (the
    outcome does not depend on them, only the time it takes; see the module doc).
    events: more events beside the trace, asked at each instant (`simulate/serving.py`: a service's
    autoscaler): `next_time()`, `fire(sim, now)` before the engine runs (True: look at every
    queue), `observe(sim, now)` after it; None: the trace only.
    progress: called with (jobs arrived so far, jobs) every `PROGRESS_JOBS` arrivals, so a long run
    can say how far it is (the baselines with their own loop too).
    jobs: a list (sorted by submission here), or any iterable already in submission order
    (`trace.SortedTrace`: a trace file of any length), read as the loop goes.
    keep_runs: the result lists every job's `JobRun` (`SimResult.runs`); False: each job is folded
    into `SimResult.outcome` once its outcome is final and `runs` is empty, so memory holds the
    queued and running jobs only (`SimResult.peak_live`) and the usage events are bucketed
    (`outcome.Usage`). `report.lane_report` gives the same figures either way."""
    if scenario.fast is not None:  # a baseline with its own event loop (no engine)
        kw = {} if keep_runs else {"keep_runs": False}
        if progress is not None:
            kw["progress"] = progress
        return scenario.fast(scenario, jobs, tick, **kw)
    sim = _Sim(scenario, jobs, tick, checkpoint_interval_s, window, per_shape, skip_bound, merge_held, keep_runs)
    sim.events = events
    sim.progress = progress
    # The trace's jobs and workloads live for the whole run: frozen out of the cyclic GC, the
    # collections the engine's allocations trigger do not walk them again and again (that grew
    # with the trace's length). The engine frees its snapshots by reference counting (it breaks
    # their cycles), so young collections can be rare too.
    thresholds = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 50, 1_000)
    try:
        start, end = sim.run()
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()
    left = [r for group in sim.shapes.values() for runs in group.values() for _k, r in runs]
    left += sim.run_of.values()
    for r in sorted(left, key=lambda r: r.idx):
        if r.state == "pending":
            r.reason = r.reason or "still pending when the trace ended"
        sim.finish(r)
    if sim.live:
        raise RuntimeError(f"{sim.live} job(s) neither finished nor queued nor running at the end")
    return SimResult(
        scenario,
        sim.runs,
        start,
        end,
        sim.calls,
        sim.cycles,
        sim.usage if isinstance(sim.usage, list) else sim.usage.events(),
        checkpoint_interval_s,
        tick,
        sim.stranded_gpu_s if sim.book is not None else None,
        sim.outcome,
        sim.peak_live,
        sim.withheld_gpu_s if sim.serving_cqs else None,
    )


