"""Benchmark: what Admission Fair Sharing costs the engine. The same synthetic states as
`bench_admission.py` (one cycle at 10k pending + 2k admitted; the gate's loop draining 5,000
pending into an empty pool), every pending workload drawn into one of 8 teams, timed with every
lane under Admission Fair Sharing (random decayed usage per team, Kueue's default entry
penalty for 5m sampling and a 168h half-life) and without it. CPU time (`time.process_time()`)
beside wall time, since the machine may be shared.

    .venv/bin/python bench/bench_admission_fair_sharing.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from dataclasses import replace

from gpu_platform.admission import admit_until_stable, schedule_cycle
from gpu_platform.admission.model import AdmissionFairSharing, ClusterState
from gpu_platform.admission.synthetic import synthetic_state

TEAMS = tuple(f"team-{i}" for i in range(8))


def with_teams(state: ClusterState, afs: bool) -> ClusterState:
    rng = random.Random(7)
    pending = tuple(replace(w, team=rng.choice(TEAMS)) for w in state.pending)
    cqs = state.cluster_queues
    if afs:
        spec = AdmissionFairSharing(
            consumed={t: {"nvidia.com/gpu": rng.uniform(0, 50)} for t in TEAMS},
            entry_penalty_rate=1 - 0.5 ** (300 / (168 * 3600)),
        )
        cqs = tuple(replace(c, admission_fair_sharing=spec) for c in cqs)
    return replace(state, pending=pending, cluster_queues=cqs)


def run(name: str, state: ClusterState, fn, afs: bool, repeat: int) -> dict:
    fn(state)
    cpu, wall = [], []
    result = None
    for _ in range(repeat):
        c0, t0 = time.process_time(), time.perf_counter()
        result = fn(state)
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - t0)
    assert result is not None
    return {
        "bench": name,
        "admission_fair_sharing": afs,
        "cpu_median_s": round(statistics.median(cpu), 4),
        "wall_median_s": round(statistics.median(wall), 4),
        "runs": repeat,
        "admitted": len(result.admitted),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    cycle = synthetic_state(10_000, 2000, seed=1, fill=0.97)
    drain = synthetic_state(5000, 0, seed=1, scale=200)
    drain = replace(
        drain,
        pending=tuple(replace(w, max_cost=None) for w in drain.pending),
        cluster_queues=tuple(replace(c, budget_remaining=None, budget_total=None) for c in drain.cluster_queues),
    )
    for afs in (False, True):
        print(json.dumps(run("cycle_10k", with_teams(cycle, afs), schedule_cycle, afs, args.repeat)), flush=True)
        print(json.dumps(run("drain_5k", with_teams(drain, afs), admit_until_stable, afs, args.repeat)), flush=True)


if __name__ == "__main__":
    main()
