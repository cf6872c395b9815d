"""Benchmark: one full admission cycle (reasons, positions, estimated starts included), and the
gate's loop draining a queue into an empty pool.

Cycle: synthetic state from the default policy (8 lanes, 3 flavors, the cohort tree, quotas
scaled so 2,000 admitted workloads fill ~97% of the pool), N pending for N in 1k / 10k / 100k.
Prints one JSON line per N: {"pending": N, "admitted": 2000, "median_s": ..., "runs": 5}.
Drain: `admit_until_stable` over D pending (no budgets, a pool scaled to hold them) with nothing
running: {"drain": D, "median_s": ..., "admitted_this_call": ..., "cycles": ...}.
Targets: one cycle at 10k pending + 2k admitted <= 0.05 s on an idle machine (issue 27; issue 9
asked < 0.1 s); draining 5,000 under 1 s; growth near linear to 100k. Wall and CPU medians both.

    .venv/bin/python bench/bench_admission.py [--sizes 1000,10000,100000] [--drain 5000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import replace

from gpu_platform.admission import admit_until_stable, schedule_cycle
from gpu_platform.admission.synthetic import synthetic_state


def bench(n_pending: int, n_admitted: int = 2000, repeat: int = 5, fill: float = 0.97) -> dict:
    state = synthetic_state(n_pending, n_admitted, seed=1, fill=fill)
    times, cpus = [], []
    result = None
    for _ in range(repeat):
        # a new policy state each run, as each gate tick builds one: the engine's cached cohort
        # tree (kept per policy state) is rebuilt every time, so the figure is a tick's, not a
        # warm loop's
        cold = replace(state, cluster_queues=tuple(state.cluster_queues))
        t0, c0 = time.perf_counter(), time.process_time()
        result = schedule_cycle(cold)
        times.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    assert (
        result is not None and len(result.pending) + len(result.admitted) + len(result.rejected) == n_pending
    )
    return {
        "pending": n_pending,
        "admitted": len(state.admitted),
        "median_s": round(statistics.median(times), 4),
        "cpu_median_s": round(statistics.median(cpus), 4),
        "min_s": round(min(times), 4),
        "runs": repeat,
        "fill": fill,
        "admitted_this_cycle": len(result.admitted),
        "preempted": len(result.preempted),
    }


def bench_drain(n_pending: int, repeat: int = 5) -> dict:
    base = synthetic_state(n_pending, 0, seed=1, scale=max(1, n_pending // 25))
    state = replace(
        base,
        pending=tuple(replace(w, max_cost=None) for w in base.pending),
        cluster_queues=tuple(replace(c, budget_remaining=None, budget_total=None) for c in base.cluster_queues),
    )
    times, cpus = [], []
    result = None
    for _ in range(repeat):
        cold = replace(state, cluster_queues=tuple(state.cluster_queues))
        t0, c0 = time.perf_counter(), time.process_time()
        result = admit_until_stable(cold)
        times.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    assert result is not None
    return {
        "drain": n_pending,
        "median_s": round(statistics.median(times), 4),
        "cpu_median_s": round(statistics.median(cpus), 4),
        "min_s": round(min(times), 4),
        "runs": repeat,
        "admitted_this_call": len(result.admitted),
        "cycles": result.cycles,
        "still_pending": len(result.pending),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--admitted", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--fill", type=float, default=0.97, help="share of the pool the admitted workloads fill")
    ap.add_argument("--drain", default="5000", help="pending counts for the gate-loop drain (comma separated; '' = skip)")
    args = ap.parse_args()
    for n in (int(x) for x in args.sizes.split(",")):
        print(json.dumps(bench(n, args.admitted, args.repeat, args.fill)), flush=True)
    for d in (int(x) for x in args.drain.split(",") if x):
        print(json.dumps(bench_drain(d, args.repeat)), flush=True)


if __name__ == "__main__":
    main()
