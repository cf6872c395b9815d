"""A run's outcome in bounded memory: finished jobs are folded into per-lane aggregates as they
finish, so a simulation keeps only its queued and running jobs (`simulate(keep_runs=False)`).

Per lane: counts (jobs, admitted, finished, failed, never admitted, rejected at submission,
preemptions), GPU-seconds held and lost, and every admitted job's wait in a compact array
(8 bytes a job: the report's p50/p95/max stay exact, no sketch), the reasons of never-admitted
jobs (each reason counted once, at most `REASONS` distinct ones) and the first `LISTED` jobs no
flavor can ever hold (with the count of all of them). GPU-seconds are summed in chunks with
`math.fsum` (exact within each chunk), so the figures do not depend on the order jobs finish in.
`Usage` keeps the GPUs held per lane over time for the report's plot in at most `Usage.BUCKETS`
time buckets per lane.

May import `simulate/des_types.py`, `trace.py`.
"""

from __future__ import annotations

import heapq
import math
from array import array
from typing import Any

import numpy as np

from gpu_platform.simulate.des_types import JobRun

LISTED = 50
"""Jobs listed by name in `never_fits` (the rest are counted)."""
REASONS = 1000
"""Distinct never-admitted reasons counted one by one; further reasons count as one."""
OTHER_REASONS = "(other reasons)"
_NEVER_FITS = ("more than it can ever hold", "more than the whole pool", "ever hold", "the largest it may use holds")
_CHUNK = 65536


class _Sum:
    """A float sum kept as chunk sums of `math.fsum`: as accurate as fsum per chunk, whatever
    the order values come in (within rounding of the chunk sums)."""

    __slots__ = ("buf", "parts")

    def __init__(self) -> None:
        self.buf = array("d")
        self.parts: list[float] = []

    def add(self, v: float) -> None:
        buf = self.buf
        buf.append(v)
        if len(buf) >= _CHUNK:
            self.parts.append(math.fsum(buf))
            del buf[:]
            if len(self.parts) >= 1024:
                self.parts = [math.fsum(self.parts)]

    def value(self) -> float:
        return math.fsum([*self.parts, math.fsum(self.buf)])


class _Lane:
    __slots__ = ("jobs", "states", "waits", "used", "lost", "preemptions", "reasons", "never", "rejected")

    def __init__(self) -> None:
        self.jobs = 0
        self.states: dict[str, int] = {}
        self.waits = array("d")
        self.used = _Sum()
        self.lost = _Sum()
        self.preemptions = 0
        self.never = 0
        self.rejected = 0
        # reason -> [count, arrival index of its first job] (ties in the top 3 go to the earlier)
        self.reasons: dict[str, list[int]] = {}


def _pct(a: np.ndarray) -> dict[str, float | None]:
    if not len(a):
        return {"p50": None, "p95": None, "max": None, "mean": None}
    return {
        "p50": round(float(np.percentile(a, 50)), 3),
        "p95": round(float(np.percentile(a, 95)), 3),
        "max": round(float(a.max()), 3),
        "mean": round(math.fsum(a) / len(a), 3),
    }


def _share(part: float, whole: float) -> float | None:
    return round(part / whole, 4) if whole > 0 else None


class Outcome:
    """Per-lane aggregates of finished jobs (`fold`), and the report's figures (`figures`)."""

    def __init__(self) -> None:
        self.lanes: dict[str, _Lane] = {}
        self.folded = 0
        self.never_fits = 0
        self.never_fits_gpus: float | None = None
        self._listed: list[tuple[int, dict[str, Any]]] = []  # max-heap on arrival index (negated)

    def fold(self, r: JobRun, idx: int) -> None:
        """Count one job whose outcome is final (done, failed, rejected, or still pending at the
        end); idx: its place in arrival order."""
        lane = self.lanes.get(r.job.lane)
        if lane is None:
            lane = self.lanes[r.job.lane] = _Lane()
        self.folded += 1
        lane.jobs += 1
        lane.states[r.state] = lane.states.get(r.state, 0) + 1
        lane.used.add(r.used_gpu_s)
        lane.lost.add(r.lost_gpu_s)
        lane.preemptions += r.preemptions
        if r.first_admit is not None:
            lane.waits.append(r.first_admit - r.job.submit_ts)
            return
        lane.never += 1
        if r.state == "rejected":
            lane.rejected += 1
        key = r.reason.split(";")[0][:160]
        hit = lane.reasons.get(key)
        if hit is None and len(lane.reasons) >= REASONS:
            key = OTHER_REASONS
            hit = lane.reasons.get(key)
        if hit is None:
            lane.reasons[key] = [1, idx]
        else:
            hit[0] += 1
            hit[1] = min(hit[1], idx)
        if r.state == "rejected" and any(m in r.reason for m in _NEVER_FITS):
            self.never_fits += 1
            g = r.job.gpus
            self.never_fits_gpus = g if self.never_fits_gpus is None else max(self.never_fits_gpus, g)
            item = (-idx, {"job_id": r.job.job_id, "lane": r.job.lane, "gpus": g, "reason": r.reason[:200]})
            if len(self._listed) < LISTED:
                heapq.heappush(self._listed, item)
            elif -idx > self._listed[0][0]:
                heapq.heapreplace(self._listed, item)

    def never_fits_doc(self) -> dict[str, Any]:
        listed = sorted(self._listed, key=lambda e: -e[0])
        return {
            "jobs": self.never_fits,
            "gpus_needed_max": self.never_fits_gpus,
            "listed": [d for _i, d in listed],
            "left_out": max(0, self.never_fits - len(listed)),
        }

    def figures(self, lanes: list[str] | None, capacity: float, horizon: float) -> dict[str, Any]:
        """The figures of these lanes together (None: all lanes)."""
        group = [self.lanes[n] for n in (sorted(self.lanes) if lanes is None else lanes) if n in self.lanes]
        waits = np.concatenate([np.frombuffer(g.waits, dtype=float) for g in group]) if group else np.empty(0)
        used = math.fsum(g.used.value() for g in group)
        lost = math.fsum(g.lost.value() for g in group)
        reasons: dict[str, list[int]] = {}
        for g in group:
            for k, (c, i) in g.reasons.items():
                hit = reasons.get(k)
                if hit is None:
                    reasons[k] = [c, i]
                else:
                    hit[0] += c
                    hit[1] = min(hit[1], i)
        top = sorted(reasons.items(), key=lambda e: (-e[1][0], e[1][1]))[:3]

        def count(state: str) -> int:
            return sum(g.states.get(state, 0) for g in group)

        whole = capacity * horizon
        return {
            "jobs": sum(g.jobs for g in group),
            "admitted": len(waits),
            "finished": count("done"),
            "failed": count("failed"),
            "never_admitted": sum(g.never for g in group),
            "rejected_at_submission": sum(g.rejected for g in group),
            "wait_s": _pct(waits),
            "gpu_hours": round(used / 3600, 3),
            "gpu_utilization": _share(used, whole),
            "useful_gpu_utilization": _share(used - lost, whole),
            "lost_gpu_utilization": _share(lost, whole),
            "preemptions": sum(g.preemptions for g in group),
            "gpu_hours_lost_to_preemption": round(lost / 3600, 3),
            "never_admitted_reasons": {k: c for k, (c, _i) in top},
        }


def outcome_of(runs: list[JobRun]) -> Outcome:
    """The outcome of a list of runs (in arrival order), e.g. a result kept with its runs."""
    out = Outcome()
    for i, r in enumerate(runs):
        out.fold(r, i)
    return out


class Usage:
    """GPUs held per lane over time, as (time, lane, change) events in at most `BUCKETS` time
    buckets per lane: each bucket's net change at its end, the bucket width doubling when more
    buckets are needed. The held level it gives at each bucket's end is exact; between them it is
    a step. For plots of long runs (`simulate(keep_runs=False)`)."""

    BUCKETS = 4096

    def __init__(self, width: float = 60.0) -> None:
        self.origin: float | None = None
        self.width = width
        self.delta: dict[tuple[int, str], float] = {}

    def append(self, event: tuple[float, str, float]) -> None:
        t, lane, d = event
        if self.origin is None:
            self.origin = t
        b = int((t - self.origin) // self.width) if t > self.origin else 0
        if b >= self.BUCKETS:
            f = 1
            while b // f >= self.BUCKETS:
                f *= 2
            self.width *= f
            b //= f
            merged: dict[tuple[int, str], float] = {}
            for (k, ln), v in self.delta.items():
                m = (k // f, ln)
                merged[m] = merged.get(m, 0.0) + v
            self.delta = merged
        key = (b, lane)
        self.delta[key] = self.delta.get(key, 0.0) + d

    def events(self) -> list[tuple[float, str, float]]:
        if self.origin is None:
            return []
        o, w = self.origin, self.width
        return sorted(((o + (b + 1) * w, lane, v) for (b, lane), v in self.delta.items()), key=lambda e: e[0])
