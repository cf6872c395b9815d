"""Demo pricing benchmark: seconds per day priced, and where a day's pricing spends its time.

Run: .venv/bin/python bench/bench_demo_pricing.py [--days 8] [--long 7] [--runs 3]
Prints JSON. Seeds a demo of `--days` days (`gpu-platform demo seed --price-days 0`: the real
history, ledger and feeds, nothing priced) in a temporary home, then prices it the way the demo
seed does (`python -m assets.demo_seed price`: one in-process Dagster run, every ingest and cost
asset, one step per asset for the whole range), alternating a 1-day range and a `--long`-day
range `--runs` times. Reported: the median run time of each, the marginal seconds per extra day
((long - short) / (long - 1)), the fixed cost of a run, and the steps of the median long run
that took the most time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _env(tmp: Path) -> dict[str, str]:
    return {**os.environ, "DAGSTER_HOME": str(tmp / "dagster_home"), "GPU_PLATFORM_HOME": str(tmp / "home"),
            "GPU_PLATFORM_LOCAL_GPUS": "64", "PYTHONWARNINGS": "ignore"}


def _steps(env: dict[str, str]) -> tuple[float, list[tuple[str, float]]]:
    """(run seconds, [(step, seconds)]) of the newest run in the instance, in a fresh process."""
    code = (
        "import json, dagster as dg\n"
        "with dg.DagsterInstance.get() as i:\n"
        "    r = i.get_run_records(limit=1)[0].dagster_run\n"
        "    s = i.get_run_stats(r.run_id)\n"
        "    steps = [(x.step_key, (x.end_time or 0) - (x.start_time or 0)) for x in i.get_run_step_stats(r.run_id)]\n"
        "    print(json.dumps({'run_s': s.end_time - s.start_time, 'steps': steps}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    return doc["run_s"], [tuple(x) for x in doc["steps"]]


def price(env: dict[str, str], first: date, last: date) -> dict:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "assets.demo_seed", "price", "--from", first.isoformat(), "--to",
                    last.isoformat()], env=env, cwd=ROOT, check=True, capture_output=True)
    wall = time.perf_counter() - t0
    run_s, steps = _steps(env)
    return {"wall_s": wall, "run_s": run_s, "steps": steps}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--days", type=int, default=8)
    ap.add_argument("--long", type=int, default=7)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    from gpu_platform.demo.costs import demo_days

    span = demo_days(args.days)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        env = _env(tmp)
        subprocess.run([sys.executable, "-m", "gpu_platform.cli", "demo", "seed", "--days", str(args.days),
                        "--price-days", "0"], env=env, cwd=ROOT, check=True, capture_output=True)
        price(env, span[-1], span[-1])  # warm-up: creates the warehouse tables
        short, long_ = [], []
        for _ in range(args.runs):
            short.append(price(env, span[-1], span[-1]))
            long_.append(price(env, span[-args.long], span[-1]))
    med = lambda xs, k: statistics.median(x[k] for x in xs)  # noqa: E731
    s_run, l_run = med(short, "run_s"), med(long_, "run_s")
    per_day = (l_run - s_run) / (args.long - 1)
    typical = sorted(long_, key=lambda x: x["run_s"])[len(long_) // 2]
    top = sorted(typical["steps"], key=lambda x: -x[1])[:6]
    print(json.dumps({
        "benchmark": "demo_pricing",
        "long_days": args.long,
        "short_run_s": round(s_run, 2),
        "long_run_s": round(l_run, 2),
        "short_wall_s": round(med(short, "wall_s"), 2),
        "long_wall_s": round(med(long_, "wall_s"), 2),
        "marginal_s_per_day": round(per_day, 2),
        "fixed_s_per_run": round(s_run - per_day, 2),
        "s_per_day_in_long_run": round(l_run / args.long, 2),
        "steps_in_run": len(typical["steps"]),
        "top_steps_long_run": [[k, round(v, 2)] for k, v in top],
        "runs_short": [round(x["run_s"], 2) for x in short],
        "runs_long": [round(x["run_s"], 2) for x in long_],
    }))


if __name__ == "__main__":
    main()
