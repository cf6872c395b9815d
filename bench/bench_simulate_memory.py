"""Benchmark: the simulator's peak memory on long traces (issue 45, item 7).

Trace: the shared ElasticFlow cluster04 trace (15,802 jobs, `elasticflow` lane map) tiled back to
back to N rows in its own CSV format (each copy shifted by the trace's span plus an hour, ids
suffixed `~k`), on its documented pool (640 GPUs). Each run is a fresh process doing what
`gpu-platform simulate` does for one scenario: read the file once (`SortedTrace`: sorted runs
spilled to disk), simulate with `keep_runs=False` (finished jobs folded into the report's
aggregates) and build the lane report. Peak RSS is the child's (`ru_maxrss`; `/usr/bin/time -v`
reports the same), wall time includes reading the file.

Prints one JSON line per size and scenario: {"benchmark": "simulate_memory", "scenario", "jobs",
"runs", "peak_rss_mb" (median), "peak_rss_mb_per_1m_jobs", "wall_s" (median), "peak_live"}.

    .venv/bin/python bench/bench_simulate_memory.py [--rows 1000000] [--repeat 3]
        [--scenarios fifo-backfill] [--big 10000000] [--policy-rows 100000,300000]
    .venv/bin/python bench/bench_simulate_memory.py --make-trace 10000000 big.csv   # the trace only
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "reference" / "traces" / "elasticflow-cluster04.csv"
CAPACITY = 640.0


def make_trace(n: int, out: Path, source: Path = SHARED) -> Path:
    """Tile `source` (ElasticFlow columns) to n rows at `out`."""
    with source.open(newline="") as fh:
        rows = list(csv.reader(fh))
    header, body = rows[0], rows[1:]
    t = [float(r[1]) for r in body]
    t0, span = min(t), max(t) - min(t) + 3600
    with out.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        k = written = 0
        while written < n:
            shift = k * span - t0
            for r in body:
                if written == n:
                    break
                w.writerow((f"{r[0]}~{k}", f"{float(r[1]) + shift:g}", r[2], r[3]))
                written += 1
            k += 1
    return out


def run_one(path: str, scenario: str, capacity: float) -> dict:
    """One scenario over the trace as the CLI runs it (in this process)."""
    from gpu_platform.cli.simulate import LANE_MAPS
    from gpu_platform.policy import load_policy
    from gpu_platform.simulate import SCENARIOS, lane_report, load_lane_map, simulate
    from gpu_platform.simulate.trace import SortedTrace

    pol = load_policy()
    w0, c0 = time.perf_counter(), time.process_time()
    with SortedTrace(path, lane_map=load_lane_map(LANE_MAPS / "elasticflow.yaml"), lanes=frozenset(pol.lanes)) as trace:
        read_s = time.perf_counter() - w0
        res = simulate(SCENARIOS[scenario](pol, capacity), trace, keep_runs=False)
        rep = lane_report(res)
    return {
        "jobs": len(trace),
        "read_s": round(read_s, 2),
        "wall_s": round(time.perf_counter() - w0, 2),
        "cpu_s": round(time.process_time() - c0, 2),
        "peak_live": res.peak_live,
        "engine_calls": res.engine_calls,
        "wait_p95_h": None if rep["total"]["wait_s"]["p95"] is None else round(rep["total"]["wait_s"]["p95"] / 3600, 2),
        "gpu_utilization": rep["total"]["gpu_utilization"],
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def child(path: Path, scenario: str, capacity: float) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, __file__, "--run", str(path), "--scenario", scenario, "--capacity", str(capacity)],
        check=True, capture_output=True, text=True, env=env, cwd=ROOT,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(path: Path, scenario: str, repeat: int, capacity: float) -> dict:
    runs = [child(path, scenario, capacity) for _ in range(repeat)]
    rss = statistics.median(r["peak_rss_mb"] for r in runs)
    n = runs[0]["jobs"]
    return {
        "benchmark": "simulate_memory",
        "scenario": scenario,
        "jobs": n,
        "capacity_gpus": capacity,
        "runs": repeat,
        "peak_rss_mb": rss,
        "peak_rss_mb_all": [r["peak_rss_mb"] for r in runs],
        "peak_rss_mb_per_1m_jobs": round(rss * 1e6 / n, 1),
        "wall_s": statistics.median(r["wall_s"] for r in runs),
        "read_s": statistics.median(r["read_s"] for r in runs),
        "cpu_s": statistics.median(r["cpu_s"] for r in runs),
        "peak_live": max(r["peak_live"] for r in runs),
        "wait_p95_h": runs[0]["wait_p95_h"],
        "gpu_utilization": runs[0]["gpu_utilization"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--scenarios", default="fifo-backfill", help="scenarios run at --rows (and --big)")
    ap.add_argument("--big", type=int, default=10_000_000, help="also run the scenarios once at this many rows (0: no)")
    ap.add_argument("--policy-rows", default="100000", help="the policy once at these sizes (comma-separated; '' none)")
    ap.add_argument("--capacity", type=float, default=CAPACITY)
    ap.add_argument("--make-trace", nargs=2, metavar=("ROWS", "PATH"))
    ap.add_argument("--run", metavar="PATH", help=argparse.SUPPRESS)
    ap.add_argument("--scenario", default="policy", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.make_trace:
        make_trace(int(args.make_trace[0]), Path(args.make_trace[1]))
        return
    if args.run:
        print(json.dumps(run_one(args.run, args.scenario, args.capacity)))
        return
    with tempfile.TemporaryDirectory(prefix="bench-simulate-memory-") as tmp:
        sizes = [(args.rows, args.repeat, args.scenarios.split(","))]
        sizes += [(int(n), 1, ["policy"]) for n in args.policy_rows.split(",") if n]
        if args.big:
            sizes.append((args.big, 1, args.scenarios.split(",")))
        for n, repeat, names in sizes:
            path = make_trace(n, Path(tmp) / f"trace-{n}.csv")
            for name in names:
                print(json.dumps(measure(path, name, repeat, args.capacity)), flush=True)
            path.unlink()


if __name__ == "__main__":
    main()
