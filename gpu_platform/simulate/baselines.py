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
Each is a plain event loop over a heap of end times: O(n log n) for `fifo`; `fifo-backfill`
also scans the waiting jobs that fit the free GPUs at each instant where the head is blocked.
"""

from __future__ import annotations

import heapq
import math
from collections import deque

from gpu_platform.simulate.des import JobRun, SimResult
from gpu_platform.simulate.trace import TraceJob

BACKFILL_DEPTH = 500
"""Waiting jobs behind the head looked at for backfilling per instant (Slurm's `bf_max_job_test`
default), so an instant costs at most that many checks however long the queue."""


def _at(t: float, tick: float) -> float:
    return t if tick <= 0 else math.ceil(t / tick - 1e-12) * tick


class _Pool:
    def __init__(self, capacity: float):
        self.capacity = capacity
        self.free = capacity
        self.ending: list[tuple[float, int, JobRun]] = []  # (end, seq, run)
        self.usage: list[tuple[float, str, float]] = []
        self.seq = 0

    def begin(self, r: JobRun, now: float) -> None:
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
            last = end
        return last

    def backfill(self, queue: deque[JobRun], now: float) -> None:
        """EASY: the blocked head's shadow time and extra GPUs from the running jobs' end times;
        then each of the next `BACKFILL_DEPTH` waiting jobs, in queue order, that fits the free
        GPUs now and ends by the shadow time or fits the extra GPUs starts."""
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


def run_fifo(scenario, jobs: list[TraceJob], capacity: float, *, backfill: bool, tick: float = 0.0) -> SimResult:
    """Replay `jobs` on one FIFO queue of `capacity` GPUs (see the module docstring)."""
    runs = [JobRun(j, None) for j in sorted(jobs, key=lambda j: (j.submit_ts, j.job_id))]
    pool = _Pool(capacity)
    queue: deque[JobRun] = deque()
    i, n = 0, len(runs)
    start = runs[0].job.submit_ts if runs else 0.0
    last = start
    while i < n or pool.ending:
        t_arr = runs[i].job.submit_ts if i < n else math.inf
        t_end = pool.ending[0][0] if pool.ending else math.inf
        now = _at(min(t_arr, t_end), tick)
        ended = pool.finish_until(now)
        if ended is not None:
            last = max(last, ended)
        while i < n and runs[i].job.submit_ts <= now:
            r = runs[i]
            i += 1
            if r.job.gpus > capacity + 1e-9:
                r.state = "rejected"
                r.reason = f"asks for {r.job.gpus:g} GPUs, more than the whole pool ({capacity:g})"
                continue
            r.state = "pending"
            queue.append(r)
        while queue and queue[0].job.gpus <= pool.free + 1e-9:
            pool.begin(queue.popleft(), now)
        if backfill and queue and pool.free > 1e-9:
            pool.backfill(queue, now)
    for r in runs:
        if r.state == "pending":
            r.reason = "still pending when the trace ended"
    return SimResult(scenario, runs, start, last, 0, 0, pool.usage, 0.0, tick)
