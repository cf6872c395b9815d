"""Sensor tick benchmark: the admission sensor at 5,000 pending / 500 active runs and at 50,000 /
2,000 (median of several ticks, wall and CPU time).

Run: .venv/bin/python bench/bench_gate.py [--sizes 5000:500,50000:2000] [--runs 5] [--profile N]
Prints one JSON object per size. The ledger is a real SQLite file, the runs live in a real
Dagster instance (SQLite run storage), both in a temporary directory. Requests are the packaged
examples of six lanes (one GPU each, distinct outputs), the active ones admitted on
h100-ondemand with a STARTED run tagged as the gate tags it.

The first tick of a fresh process parses every request payload once and writes a `waiting` row
for every pending request; later ticks write only changes (a steady queue: none), so both are
reported. Each tick gets the cursor the one before returned, as the sensor daemon passes it on:
`gpu_queue` is materialized when the queue changed (and every 5 minutes), which
`ticks_materialized` says per tick. CPU time (`time.process_time`) is the figure to judge on a shared machine; wall time
moves with the load. `--profile N`: print the top N functions (cumulative) of the ticks after
the first, per size, to stderr.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

import dagster as dg
import yaml
from dagster._core.storage.dagster_run import DagsterRun

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from assets.gate import admission_sensor  # noqa: E402
from assets.workloads import JOB_FOR_WORKLOAD  # noqa: E402
from gpu_platform.gate.tick import TAG_ATTEMPT, TAG_REQUEST_ID  # noqa: E402
from gpu_platform.policy import load_policy  # noqa: E402
from gpu_platform.requests.ledger import Ledger  # noqa: E402
from gpu_platform.requests.model import validate_request  # noqa: E402
from resources.ledger import LedgerResource  # noqa: E402
from resources.policy import PolicyResource  # noqa: E402
from resources.settings import PlatformSettings  # noqa: E402

LANES = ["research_best_effort", "baseline_rebuild", "candidate_train", "release_eval", "map_semantic_batch", "labeler_batch"]


def _requests(policy, n: int) -> list:
    base = {lane: yaml.safe_load((ROOT / "examples" / "requests" / f"{lane}.yaml").read_text()) for lane in LANES}
    first: dict[str, object] = {}
    out = []
    for i in range(n):
        lane = LANES[i % len(LANES)]
        raw = dict(base[lane], gpu_count=1, output_artifact_ids=[f"out-{i}"], request_id=f"req-bench-{i:06d}")
        if lane in ("research_best_effort", "baseline_rebuild", "candidate_train"):
            raw["gpu_type"] = "any"
        if lane not in first:
            first[lane] = validate_request(raw, policy)
            out.append(first[lane])
        else:
            # the same validated shape under its own id and output (validation is the submit's cost, not the tick's)
            out.append(first[lane].model_copy(update={"request_id": raw["request_id"], "output_artifact_ids": (f"out-{i}",)}))
    return out


def bench(pending: int, active: int, runs: int, profile: int) -> dict:
    policy = load_policy()
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/ledger.db"
        ledger = Ledger(url)
        ids = ledger.submit_many(_requests(policy, pending + active))
        admitted = ids[:active]
        ledger.record_many([(rid, "admitted", "bench", "h100-ondemand", None, {"attempt": 1}) for rid in admitted])
        Path(tmp, "dagster").mkdir()
        with dg.instance_for_test(temp_dir=f"{tmp}/dagster") as instance:
            job = JOB_FOR_WORKLOAD["training_run"]
            for rid in admitted:
                instance.add_run(
                    DagsterRun(job_name=job, status=dg.DagsterRunStatus.STARTED, tags={TAG_REQUEST_ID: rid, TAG_ATTEMPT: "1"})
                )
            resources = {
                "ledger": LedgerResource(url=url),
                "policy": PolicyResource(),
                "settings": PlatformSettings(home=f"{tmp}/home"),
            }
            wall, cpu, materialized = [], [], []
            prof = cProfile.Profile() if profile else None
            cursor = None
            for i in range(runs):
                # the cursor the last tick returned, as the sensor daemon hands it to the next
                ctx = dg.build_sensor_context(instance=instance, resources=resources, cursor=cursor)
                if prof is not None and i > 1:
                    prof.enable()
                t0, c0 = time.perf_counter(), time.process_time()
                result = admission_sensor(ctx)
                wall.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
                if prof is not None:
                    prof.disable()
                cursor = getattr(result, "cursor", None) or cursor
                materialized.append(bool(getattr(result, "asset_events", None)))
            if prof is not None:
                out = io.StringIO()
                pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(profile)
                pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(profile)
                print(f"--- profile, {pending} pending / {active} active, ticks 3..{runs} ---\n{out.getvalue()}", file=sys.stderr)
            _, events = ledger.count()
    later_wall, later_cpu = wall[1:] or wall, cpu[1:] or cpu
    return {
        "benchmark": "sensor_tick",
        "pending": pending,
        "active": active,
        "events": events,
        "first_tick_s": round(wall[0], 3),
        "first_tick_cpu_s": round(cpu[0], 3),
        "median_s": round(statistics.median(later_wall), 3),
        "median_cpu_s": round(statistics.median(later_cpu), 3),
        "ticks_s": [round(t, 3) for t in wall],
        "ticks_cpu_s": [round(t, 3) for t in cpu],
        "ticks_materialized": materialized,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="5000:500,50000:2000", help="pending:active pairs, comma-separated")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--profile", type=int, default=0, help="print the top N functions of the ticks after the first")
    args = ap.parse_args()
    results = []
    for size in args.sizes.split(","):
        pending, active = (int(x) for x in size.split(":"))
        results.append(bench(pending, active, args.runs, args.profile))
        print(json.dumps(results[-1]), flush=True)
    if len(results) >= 2:
        small, big = results[0], results[-1]
        print(
            json.dumps(
                {
                    "benchmark": "sensor_tick_growth",
                    "from": [small["pending"], small["active"]],
                    "to": [big["pending"], big["active"]],
                    "size_ratio": round((big["pending"] + big["active"]) / (small["pending"] + small["active"]), 2),
                    "cpu_ratio": round(big["median_cpu_s"] / small["median_cpu_s"], 2),
                }
            )
        )


if __name__ == "__main__":
    main()
