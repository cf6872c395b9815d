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
- gpu_hours_idle_by_lending_rule (total only; None without a serving lane): GPU-hours of a
  serving lane's idle quota that were free while the waiting head of some queue could use the
  flavor and asked for no more GPUs than were free there, yet more than were free less what the
  lending rule withholds from it (work the serving lane could not take back: uncheckpointed
  evidence, protected lanes; docs/serving.md). What protecting the serving lane cost the batch
  lanes, in GPU-hours.
- never_fits (total only): the jobs rejected at submission because no flavor they may use can
  ever hold them (every Kueue workload holds one flavor per resource), with the GPUs each asks
  for and the engine's reason (which names the most its queue can hold): at most 50 listed, the
  first to arrive; `left_out` counts the rest.

The figures come from the run's `outcome.Outcome` (per-lane aggregates folded as jobs finish, so
a run need not keep its jobs: `simulate(keep_runs=False)`); a result with only its runs is folded
here. GPU-seconds and the mean wait are summed with `math.fsum`, so they do not depend on the
order jobs finish in; never-admitted reasons are counted per reason, ties in the top 3 going to
the reason whose first job arrived first.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from gpu_platform.simulate.des import JobRun, SimResult
from gpu_platform.simulate.outcome import LISTED, Outcome, outcome_of  # noqa: F401
from gpu_platform.simulate.outcome import _pct as _pct_of


def _pct(values: list[float]) -> dict[str, float | None]:
    return _pct_of(np.asarray(values, dtype=float))


def never_fits(runs: list[JobRun], listed: int = LISTED) -> dict[str, Any]:
    """Jobs rejected at submission because no flavor they may use can ever hold them."""
    doc = outcome_of(runs).never_fits_doc()
    if listed < len(doc["listed"]):
        doc["left_out"] += len(doc["listed"]) - listed
        doc["listed"] = doc["listed"][:listed]
    return doc


def lane_report(res: SimResult) -> dict[str, Any]:
    """The scenario's figures per lane (the jobs' lanes, whatever queue they ran in) and in total."""
    capacity = res.scenario.capacity
    horizon = max(0.0, res.end - res.start)
    outcome = res.outcome if res.outcome is not None else outcome_of(res.runs)
    total = outcome.figures(None, capacity, horizon)
    stranded = getattr(res, "stranded_gpu_s", None)
    total["gpu_hours_stranded_by_fragmentation"] = None if stranded is None else round(stranded / 3600, 3)
    withheld = getattr(res, "withheld_gpu_s", None)
    total["gpu_hours_idle_by_lending_rule"] = None if withheld is None else round(withheld / 3600, 3)
    total["never_fits"] = outcome.never_fits_doc()
    node_gpus = res.scenario.node_gpus
    return {
        "scenario": res.scenario.name,
        "description": res.scenario.description,
        "capacity_gpus": capacity,
        "node_model": None
        if node_gpus is None
        else {"node_gpus": dict(node_gpus), "nodes": len(res.scenario.base.nodes), "gang_split": res.scenario.gang_split},
        "horizon_s": round(horizon, 3),
        "engine_calls": res.engine_calls,
        "cycles": res.cycles,
        "lanes": {lane: outcome.figures([lane], capacity, horizon) for lane in sorted(outcome.lanes)},
        "total": total,
    }


def usage_per_queue(res: SimResult) -> dict[str, float]:
    """GPU-seconds held per cluster queue over the run."""
    held: dict[str, float] = defaultdict(float)
    for r in res.runs:
        if r.wl is not None:
            held[r.wl.cq] += r.used_gpu_s
    return dict(held)
