"""Per-lane figures of a simulation, as JSON-ready dicts.

- wait: seconds from submission to first admission, over the jobs ever admitted; p50 and p95
  interpolate linearly between order statistics (numpy's default, Excel's PERCENTILE.INC).
- gpu_utilization: GPU-seconds the lane's jobs held (including work later lost) divided by the
  pool's GPUs times the horizon (first submission to last completion); lanes add up to the pool.
- useful_gpu_utilization / lost_gpu_utilization: the same split into work kept (GPU-seconds held
  less those lost to preemption) and work lost; the two add up to gpu_utilization.
- gpu_hours_lost_to_preemption: GPUs x the run time since the last checkpoint at each eviction
  (the whole run for `requeue`, the run for `fail`).
- never_admitted: jobs with no admission by the end: rejected at submission (larger than their
  queue can ever hold, unknown lane) or still pending when nothing more could run.
- gpu_hours_stranded_by_fragmentation (total only; None without a node model): GPU-hours that
  were free on a node-modelled flavor while the waiting head of some queue could use that flavor,
  asked for no more GPUs than were free there in total, and yet fit no nodes (docs/simulator.md).
- never_fits (total only): the jobs rejected at submission because no flavor they may use can
  ever hold them (every Kueue workload holds one flavor per resource), with the GPUs each asks
  for and the engine's reason (which names the most its queue can hold): at most 50 listed.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

import numpy as np

from gpu_platform.simulate.des import JobRun, SimResult


def _pct(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p95": None, "max": None, "mean": None}
    a = np.asarray(values, dtype=float)
    return {
        "p50": round(float(np.percentile(a, 50)), 3),
        "p95": round(float(np.percentile(a, 95)), 3),
        "max": round(float(a.max()), 3),
        "mean": round(float(a.mean()), 3),
    }


def _share(part: float, whole: float) -> float | None:
    return round(part / whole, 4) if whole > 0 else None


_NEVER_FITS = ("more than it can ever hold", "more than the whole pool", "ever hold", "the largest it may use holds")


def never_fits(runs: list[JobRun], listed: int = 50) -> dict[str, Any]:
    """Jobs rejected at submission because no flavor they may use can ever hold them."""
    big = [r for r in runs if r.state == "rejected" and any(m in r.reason for m in _NEVER_FITS)]
    return {
        "jobs": len(big),
        "gpus_needed_max": max((r.job.gpus for r in big), default=None),
        "listed": [
            {"job_id": r.job.job_id, "lane": r.job.lane, "gpus": r.job.gpus, "reason": r.reason[:200]}
            for r in big[:listed]
        ],
    }


def _figures(runs: list[JobRun], capacity: float, horizon: float) -> dict[str, Any]:
    waits = [r.first_admit - r.job.submit_ts for r in runs if r.first_admit is not None]
    used = sum(r.used_gpu_s for r in runs)
    lost = sum(r.lost_gpu_s for r in runs)
    states = Counter(r.state for r in runs)
    never = [r for r in runs if r.first_admit is None]
    reasons = Counter(r.reason.split(";")[0][:160] for r in never)
    return {
        "jobs": len(runs),
        "admitted": len(waits),
        "finished": states.get("done", 0),
        "failed": states.get("failed", 0),
        "never_admitted": len(never),
        "rejected_at_submission": sum(1 for r in never if r.state == "rejected"),
        "wait_s": _pct(waits),
        "gpu_hours": round(used / 3600, 3),
        "gpu_utilization": _share(used, capacity * horizon),
        "useful_gpu_utilization": _share(used - lost, capacity * horizon),
        "lost_gpu_utilization": _share(lost, capacity * horizon),
        "preemptions": sum(r.preemptions for r in runs),
        "gpu_hours_lost_to_preemption": round(lost / 3600, 3),
        "never_admitted_reasons": dict(reasons.most_common(3)),
    }


def lane_report(res: SimResult) -> dict[str, Any]:
    """The scenario's figures per lane (the jobs' lanes, whatever queue they ran in) and in total."""
    capacity = res.scenario.capacity
    horizon = max(0.0, res.end - res.start)
    by_lane: dict[str, list[JobRun]] = defaultdict(list)
    for r in res.runs:
        by_lane[r.job.lane].append(r)
    total = _figures(res.runs, capacity, horizon)
    stranded = getattr(res, "stranded_gpu_s", None)
    total["gpu_hours_stranded_by_fragmentation"] = None if stranded is None else round(stranded / 3600, 3)
    total["never_fits"] = never_fits(res.runs)
    node_gpus = res.scenario.node_gpus
    return {
        "scenario": res.scenario.name,
        "description": res.scenario.description,
        "capacity_gpus": capacity,
        "node_model": None
        if node_gpus is None
        else {"node_gpus": dict(node_gpus), "nodes": len(res.scenario.base.nodes)},
        "horizon_s": round(horizon, 3),
        "engine_calls": res.engine_calls,
        "cycles": res.cycles,
        "lanes": {lane: _figures(runs, capacity, horizon) for lane, runs in sorted(by_lane.items())},
        "total": total,
    }


def usage_per_queue(res: SimResult) -> dict[str, float]:
    """GPU-seconds held per cluster queue over the run."""
    held: dict[str, float] = defaultdict(float)
    for r in res.runs:
        if r.wl is not None:
            held[r.wl.cq] += r.used_gpu_s
    return dict(held)
