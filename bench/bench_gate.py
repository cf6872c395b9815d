"""Sensor tick benchmark: 5,000 pending requests and 500 active runs (median of several ticks).

Run: .venv/bin/python bench/bench_gate.py [--pending 5000] [--active 500] [--runs 5]
Prints JSON. The first tick writes a `waiting` row for every pending request; later ticks write
only changes, so both are reported.
"""

from __future__ import annotations

import argparse
import json
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pending", type=int, default=5000)
    ap.add_argument("--active", type=int, default=500)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    policy = load_policy()
    base = {lane: yaml.safe_load((ROOT / "examples" / "requests" / f"{lane}.yaml").read_text()) for lane in LANES}
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/ledger.db"
        ledger = Ledger(url)
        reqs = []
        for i in range(args.pending + args.active):
            lane = LANES[i % len(LANES)]
            raw = dict(base[lane], gpu_count=1, output_artifact_ids=[f"out-{i}"], request_id=f"req-bench-{i:06d}")
            if lane in ("research_best_effort", "baseline_rebuild", "candidate_train"):
                raw["gpu_type"] = "any"
            reqs.append(validate_request(raw, policy))
        ids = ledger.submit_many(reqs)
        active = ids[: args.active]
        ledger.record_many([(rid, "admitted", "bench", "h100-ondemand", None, {"attempt": 1}) for rid in active])
        Path(tmp, "dagster").mkdir()
        with dg.instance_for_test(temp_dir=f"{tmp}/dagster") as instance:
            for rid in active:
                instance.add_run(
                    DagsterRun(job_name=JOB_FOR_WORKLOAD["training_run"], status=dg.DagsterRunStatus.STARTED, tags={TAG_REQUEST_ID: rid, TAG_ATTEMPT: "1"})
                )
            resources = {
                "ledger": LedgerResource(url=url),
                "policy": PolicyResource(),
                "settings": PlatformSettings(home=f"{tmp}/home"),
            }
            times = []
            for _ in range(args.runs):
                ctx = dg.build_sensor_context(instance=instance, resources=resources)
                t0 = time.perf_counter()
                admission_sensor(ctx)
                times.append(time.perf_counter() - t0)
    print(
        json.dumps(
            {
                "benchmark": "sensor_tick",
                "pending": args.pending,
                "active": args.active,
                "first_tick_s": round(times[0], 3),
                "median_s": round(statistics.median(times), 3),
                "ticks_s": [round(t, 3) for t in times],
            }
        )
    )


if __name__ == "__main__":
    main()
