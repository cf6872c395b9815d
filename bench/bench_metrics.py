"""Scrape benchmark: `/metrics` with 10,000 pending and 500 admitted requests (median of several scrapes).

Run: .venv/bin/python bench/bench_metrics.py [--pending 10000] [--admitted 500] [--runs 7]
Each pending request has a `submitted` and a `waiting` event, each admitted one a `submitted`
and an `admitted` event (as after a gate tick). A scrape is timed twice: the collector plus
prometheus-client's text exposition in process, and a full HTTP GET on loopback. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import yaml
from prometheus_client import generate_latest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpu_platform.observe.metrics import registry_for, serve  # noqa: E402
from gpu_platform.policy import load_policy  # noqa: E402
from gpu_platform.requests.ledger import Ledger  # noqa: E402
from gpu_platform.requests.model import validate_request  # noqa: E402

LANES = ["research_best_effort", "baseline_rebuild", "candidate_train", "release_eval", "map_semantic_batch", "labeler_batch"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pending", type=int, default=10000)
    ap.add_argument("--admitted", type=int, default=500)
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    policy = load_policy()
    base = {lane: yaml.safe_load((ROOT / "examples" / "requests" / f"{lane}.yaml").read_text()) for lane in LANES}
    with tempfile.TemporaryDirectory() as tmp:
        ledger = Ledger(f"sqlite:///{tmp}/ledger.db")
        reqs = []
        for i in range(args.pending + args.admitted):
            lane = LANES[i % len(LANES)]
            raw = dict(base[lane], gpu_count=1, output_artifact_ids=[f"out-{i}"], request_id=f"req-bench-{i:06d}")
            if lane in ("research_best_effort", "baseline_rebuild", "candidate_train"):
                raw["gpu_type"] = "any"
            reqs.append(validate_request(raw, policy))
        ids = ledger.submit_many(reqs)
        admitted, pending = ids[: args.admitted], ids[args.admitted :]
        ledger.record_many([(rid, "admitted", "bench", "h100-ondemand", None, {"attempt": 1}) for rid in admitted])
        ledger.record_many(
            [(rid, "waiting", "Inadmissible: bench", None, None, {"position": i + 1, "of": len(pending)}) for i, rid in enumerate(pending)]
        )
        registry = registry_for(ledger, policy)
        generate_latest(registry)  # warm the connection pool
        in_process = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            body = generate_latest(registry)
            in_process.append(time.perf_counter() - t0)
        server, thread = serve(registry, 0, addr="127.0.0.1")
        http = []
        try:
            for _ in range(args.runs):
                t0 = time.perf_counter()
                with urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics", timeout=10) as resp:
                    resp.read()
                http.append(time.perf_counter() - t0)
        finally:
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)
    print(
        json.dumps(
            {
                "benchmark": "metrics_scrape",
                "pending": args.pending,
                "admitted": args.admitted,
                "samples": body.decode().count("\n") - body.decode().count("#"),
                "median_ms": round(1000 * statistics.median(in_process), 2),
                "http_median_ms": round(1000 * statistics.median(http), 2),
                "max_ms": round(1000 * max(in_process), 2),
                "runs": args.runs,
            }
        )
    )


if __name__ == "__main__":
    main()
