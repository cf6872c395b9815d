"""Benchmark: the policy simulator over long job traces, and Kueue's scheduler-performance scenario.

Trace: the ElasticFlow cluster04 slice shipped in tests/fixtures (2,000 real jobs, lanes from
the shipped `elasticflow` lane map) tiled back to back until N jobs (each copy shifted by the
slice's span, ids suffixed), on a pool of --capacity GPUs; so a longer history at the same load,
where cost should grow linearly with jobs. The node-aware run is the policy scenario on the
policy's node shapes (`--node-model policy`: jobs over one node are gangs, placements persist,
stranded GPU-hours integrated), reported as its own line (`simulate_trace_nodes`). Kueue: the baseline generator of
examples/simulate (15,000 workloads) and the same with more cohorts (N workloads). The shared
traces (../shared/reference/traces: ElasticFlow cluster04 and cluster02, whole, fleet lane map) are
run as they are, each at its documented pool, and reported as simulator CPU per 1,000 jobs
(`simulate_shared_trace`; reading the CSV is timed apart).

Prints one JSON line per measurement: {"benchmark", "scenario", "jobs", "wall_s", "cpu_s",
"engine_calls", ...}. Target: 100,000 jobs under 30 s; near-linear growth.

    .venv/bin/python bench/bench_simulate.py [--sizes 12500,25000,50000,100000] [--capacity 768] [--nodes-at 100000]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import yaml

from gpu_platform.cli.simulate import LANE_MAPS
from gpu_platform.policy import load_policy
from gpu_platform.simulate import SCENARIOS, lane_report, load_lane_map, load_trace, simulate
from gpu_platform.simulate.kueue_scenario import load_generator
from gpu_platform.simulate.scenarios import policy_node_gpus, with_nodes

ROOT = Path(__file__).resolve().parents[1]
SLICE = ROOT / "tests" / "fixtures" / "simulate" / "elasticflow-cluster04-head2000.csv"
KUEUE = ROOT / "examples" / "simulate" / "kueue-baseline-generator.yaml"


MIXES = {"light": "elasticflow", "preempting": "elasticflow-fleet"}
"""Lane maps of the tiled slice: `light` (the ElasticFlow map: training lanes only, a few
preemptions per 10k jobs) and `preempting` (the fleet map: incident and release shares that
reclaim borrowed GPUs, ~5 preemptions per 1,000 jobs)."""


def tiled(n: int, lane_map: str = "elasticflow"):
    base = load_trace(SLICE, lane_map=load_lane_map(LANE_MAPS / f"{lane_map}.yaml")).jobs
    t0 = min(j.submit_ts for j in base)
    span = max(j.submit_ts for j in base) - t0 + 3600
    out = []
    k = 0
    while len(out) < n:
        for j in base:
            if len(out) == n:
                break
            out.append(replace(j, job_id=f"{j.job_id}~{k}", submit_ts=j.submit_ts - t0 + k * span))
        k += 1
    return out


def run_trace(name: str, n: int, capacity: float, mix: str = "light", nodes: bool = False) -> dict:
    pol = load_policy()
    jobs = tiled(n, MIXES[mix])
    scn = SCENARIOS[name](pol, capacity)
    if nodes:
        scn = with_nodes(scn, policy_node_gpus(pol))
    w0, c0 = time.perf_counter(), time.process_time()
    res = simulate(scn, jobs)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    tot = lane_report(res)["total"]
    extra = {}
    if nodes:
        extra = {"nodes": len(scn.base.nodes), "gpu_hours_stranded": tot["gpu_hours_stranded_by_fragmentation"]}
    return {
        "benchmark": "simulate_trace_nodes" if nodes else "simulate_trace",
        "scenario": f"{name}, node model policy" if nodes else name,
        "mix": mix,
        "jobs": n,
        "capacity_gpus": capacity,
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "us_per_job": round(1e6 * cpu / n, 1),
        "engine_calls": res.engine_calls,
        "cycles": res.cycles,
        "preemptions": tot["preemptions"],
        "wait_p95_h": None if tot["wait_s"]["p95"] is None else round(tot["wait_s"]["p95"] / 3600, 2),
        "gpu_utilization": tot["gpu_utilization"],
        **extra,
    }


SHARED_TRACES = ROOT.parent / "shared" / "reference" / "traces"
SHARED = {"cluster04": 640.0, "cluster02": 160.0}
"""The shared ElasticFlow traces and the pool each is run at (docs/simulator.md, capacity rule: about
1.3x the trace's mean busy GPUs; cluster02 at 160, where its bursts leave room)."""


def run_shared(name: str, capacity: float, lane_map: str = "elasticflow-fleet", traces: Path = SHARED_TRACES) -> dict:
    """The policy on a whole shared trace (fleet mix): CPU per 1,000 jobs, read and simulate apart."""
    pol = load_policy()
    c0 = time.process_time()
    jobs = load_trace(traces / f"elasticflow-{name}.csv", lane_map=load_lane_map(LANE_MAPS / f"{lane_map}.yaml")).jobs
    read_cpu = time.process_time() - c0
    scn = SCENARIOS["policy"](pol, capacity)
    w0, c0 = time.perf_counter(), time.process_time()
    res = simulate(scn, jobs)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    tot = lane_report(res)["total"]
    n = len(jobs)
    return {
        "benchmark": "simulate_shared_trace",
        "scenario": "policy",
        "trace": f"elasticflow-{name}",
        "mix": lane_map,
        "jobs": n,
        "capacity_gpus": capacity,
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "cpu_s_per_1000_jobs": round(1000 * cpu / n, 3),
        "read_cpu_s_per_1000_jobs": round(1000 * read_cpu / n, 3),
        "engine_calls": res.engine_calls,
        "preemptions": tot["preemptions"],
        "gpu_utilization": tot["gpu_utilization"],
    }


def run_kueue(cohorts: int) -> dict:
    raw = yaml.safe_load(KUEUE.read_text())
    raw["cohorts"][0]["count"] = cohorts
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as fh:
        yaml.safe_dump(raw, fh)
    ks = load_generator(fh.name)
    Path(fh.name).unlink()
    w0, c0 = time.perf_counter(), time.process_time()
    res = simulate(ks.scenario, ks.jobs, checkpoint_interval_s=0)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    return {
        "benchmark": "simulate_kueue",
        "scenario": f"kueue baseline x {cohorts} cohorts",
        "jobs": len(ks.jobs),
        "cluster_queues": len(ks.scenario.base.cluster_queues),
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "us_per_job": round(1e6 * cpu / len(ks.jobs), 1),
        "engine_calls": res.engine_calls,
        "cycles": res.cycles,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="12500,25000,50000,100000")
    ap.add_argument("--capacity", type=float, default=768)
    ap.add_argument("--baselines-at", type=int, default=100000, help="also run the baselines (fifo, fifo-backfill, fifo-flavors, strict) at this size (0: no)")
    ap.add_argument("--preempting-at", type=int, default=100000, help="also run the policy on the preempting mix at this size (0: no)")
    ap.add_argument("--nodes-at", type=int, default=100000, help="also run the policy on the policy's node shapes at this size (0: no)")
    ap.add_argument("--kueue-cohorts", default="5,10", help="Kueue baseline with these cohort counts (5 = the original)")
    ap.add_argument("--shared-traces", default=",".join(SHARED),
                    help="also run the policy on these whole shared traces (fleet mix; '' : none)")
    ap.add_argument("--only-shared", action="store_true", help="run only the shared traces")
    args = ap.parse_args()
    for name in (x for x in args.shared_traces.split(",") if x):
        if (SHARED_TRACES / f"elasticflow-{name}.csv").exists():
            print(json.dumps(run_shared(name, SHARED[name])), flush=True)
    if args.only_shared:
        return
    for n in (int(x) for x in args.sizes.split(",") if x):
        print(json.dumps(run_trace("policy", n, args.capacity)), flush=True)
    if args.preempting_at:
        print(json.dumps(run_trace("policy", args.preempting_at, args.capacity, "preempting")), flush=True)
    if args.nodes_at:
        print(json.dumps(run_trace("policy", args.nodes_at, args.capacity, nodes=True)), flush=True)
    if args.baselines_at:
        for name in ("fifo", "fifo-backfill", "fifo-flavors", "strict"):
            print(json.dumps(run_trace(name, args.baselines_at, args.capacity)), flush=True)
    for c in (int(x) for x in args.kueue_cohorts.split(",") if x):
        print(json.dumps(run_kueue(c)), flush=True)


if __name__ == "__main__":
    main()
