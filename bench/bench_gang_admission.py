"""Benchmark: the node-aware admission cycle against the quota-only cycle on the same state.

State: the default policy scaled x100 (1,200 nodes from its node shapes: H100 and A100 nodes of 8,
L4 nodes of 4), ~2,000 admitted workloads placed on them by best fit, N pending (default 10,000) of
which a tenth are gangs of 2 nodes x 8 GPUs on the flavors with 8-GPU nodes. Both cycles run on
identical workloads; the quota-only one has the nodes removed (Kueue's view). Prints one JSON line
per N: {"pending": N, "nodes": 1200, "node_aware_median_s", "quota_only_median_s", "ratio", ...}.
Target (issue 20): node-aware within 2x of quota-only at 10k pending and 1,000 nodes.

    .venv/bin/python bench/bench_gang_admission.py [--sizes 10000] [--repeat 5] [--scale 100]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from dataclasses import replace

from gpu_platform.admission import schedule_cycle
from gpu_platform.admission.synthetic import synthetic_state
from gpu_platform.policy import GPU


def _state(n_pending: int, n_admitted: int, scale: float, gang_share: float):
    state = synthetic_state(n_pending, n_admitted, seed=1, scale=scale, node_model=True)
    eight = {n.flavor for n in state.nodes if n.gpus == 8}
    rng = random.Random(7)
    pending = []
    for w in state.pending:
        flavors = tuple(f for f in (w.allowed_flavors or ()) if f in eight)
        if flavors and GPU in w.requests and rng.random() < gang_share:
            w = replace(w, requests={GPU: 16.0}, pods=2, allowed_flavors=flavors)
        pending.append(w)
    return replace(state, pending=tuple(pending))


def _time(state, repeat: int) -> tuple[list[float], object]:
    times, res = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        res = schedule_cycle(state)
        times.append(time.perf_counter() - t0)
    return times, res


def bench(n_pending: int, n_admitted: int, scale: float, repeat: int, gang_share: float) -> dict:
    aware = _state(n_pending, n_admitted, scale, gang_share)
    quota = replace(aware, nodes=())
    t_aware, r_aware = _time(aware, repeat)
    t_quota, r_quota = _time(quota, repeat)
    med_a, med_q = statistics.median(t_aware), statistics.median(t_quota)
    return {
        "pending": n_pending,
        "nodes": len(aware.nodes),
        "admitted": len(aware.admitted),
        "gangs_pending": sum(1 for w in aware.pending if w.pods > 1),
        "node_aware_median_s": round(med_a, 4),
        "quota_only_median_s": round(med_q, 4),
        "ratio": round(med_a / med_q, 2) if med_q else None,
        "runs": repeat,
        "node_aware_admitted": len(r_aware.admitted),
        "quota_only_admitted": len(r_quota.admitted),
        "node_aware_preempted": len(r_aware.preempted),
        "quota_only_preempted": len(r_quota.preempted),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000")
    ap.add_argument("--admitted", type=int, default=2000)
    ap.add_argument("--scale", type=float, default=100, help="policy scale: x100 gives 1,000 nodes")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--gang-share", type=float, default=0.1)
    args = ap.parse_args()
    for n in (int(x) for x in args.sizes.split(",")):
        print(json.dumps(bench(n, args.admitted, args.scale, args.repeat, args.gang_share)), flush=True)


if __name__ == "__main__":
    main()
