"""Scrape benchmark: `/metrics` at 10,000 and 100,000 pending (+500 admitted), median of several
scrapes, wall and CPU time.

Run: .venv/bin/python bench/bench_metrics.py [--sizes 10000,100000] [--admitted 500] [--runs 7] [--profile N]
Each pending request has a `submitted` and a `waiting` event, each admitted one a `submitted`
and an `admitted` event (as after a gate tick), on a real SQLite ledger. These scrapes are timed:
- `median_ms`: the collector plus prometheus-client's text exposition in process, the ledger
  unchanged since the last scrape (a scrape between two gate ticks that changed nothing);
- `changed_median_ms`: the same, with one new ledger event before each scrape (written outside
  the timing), so every scrape has a change to apply (a scrape after a tick that moved one
  request);
- `burst_median_ms`: the same, with a busy tick's worth of changes (1,000 requests' `waiting`
  events, in one transaction) before each scrape;
- `first_ms`: the first scrape of a new registry, once (a restarted server reads the queue in full);
- `http_median_ms`: a full HTTP GET on loopback, ledger unchanged.
Prints one JSON object per size. `--profile N`: the top N functions of the changed-ledger
scrapes, to stderr.
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

BURST = 1000
"""Events of one busy gate tick (`burst_*`: that many requests' `waiting` events before each scrape)."""
LANES = ["research_best_effort", "baseline_rebuild", "candidate_train", "release_eval", "map_semantic_batch", "labeler_batch"]


def _requests(policy, n: int) -> list:
    base = {lane: yaml.safe_load((ROOT / "examples" / "requests" / f"{lane}.yaml").read_text()) for lane in LANES}
    first: dict[str, object] = {}
    out = []
    for i in range(n):
        lane = LANES[i % len(LANES)]
        rid = f"req-bench-{i:06d}"
        if lane not in first:
            raw = dict(base[lane], gpu_count=1, output_artifact_ids=[f"out-{i}"], request_id=rid)
            if lane in ("research_best_effort", "baseline_rebuild", "candidate_train"):
                raw["gpu_type"] = "any"
            first[lane] = validate_request(raw, policy)
            out.append(first[lane])
        else:
            out.append(first[lane].model_copy(update={"request_id": rid, "output_artifact_ids": (f"out-{i}",)}))
    return out


def _timed(fn, runs: int, before=None) -> tuple[list[float], list[float], object]:
    wall, cpu, body = [], [], None
    for _ in range(runs):
        if before is not None:
            before()
        t0, c0 = time.perf_counter(), time.process_time()
        body = fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return wall, cpu, body


def bench(pending_n: int, admitted_n: int, runs: int, profile: int) -> dict:
    policy = load_policy()
    with tempfile.TemporaryDirectory() as tmp:
        ledger = Ledger(f"sqlite:///{tmp}/ledger.db")
        ids = ledger.submit_many(_requests(policy, pending_n + admitted_n))
        admitted, pending = ids[:admitted_n], ids[admitted_n:]
        ledger.record_many([(rid, "admitted", "bench", "h100-ondemand", None, {"attempt": 1}) for rid in admitted])
        ledger.record_many(
            [(rid, "waiting", "Inadmissible: bench", None, None, {"position": i + 1, "of": len(pending)}) for i, rid in enumerate(pending)]
        )
        registry = registry_for(ledger, policy)
        scrape = lambda: generate_latest(registry)  # noqa: E731
        f_wall, f_cpu, _ = _timed(scrape, 1)  # the first scrape reads the queue in full (a restarted server)
        wall, cpu, body = _timed(scrape, runs)
        moved = iter(range(runs * 2))

        def one_event() -> None:
            i = next(moved)
            ledger.record(pending[i], "waiting", "Inadmissible: bench moved", details={"position": i + 1, "of": len(pending)})

        prof = cProfile.Profile() if profile else None
        if prof is not None:
            prof.enable()
        c_wall, c_cpu, _ = _timed(scrape, runs, before=one_event)
        if prof is not None:
            prof.disable()
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(profile)
            pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(profile)
            print(f"--- profile, changed-ledger scrapes at {pending_n} pending ---\n{out.getvalue()}", file=sys.stderr)
        burst = iter(range(runs * 2, len(pending), BURST))

        def one_tick() -> None:
            i = next(burst)
            ledger.record_many(
                [(rid, "waiting", "Inadmissible: bench tick", None, None, {"position": i + k + 1, "of": len(pending)})
                 for k, rid in enumerate(pending[i : i + BURST])]
            )

        b_wall, b_cpu, _ = _timed(scrape, max(3, runs // 2), before=one_tick)
        server, thread = serve(registry, 0, addr="127.0.0.1")
        try:
            get = lambda: urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics", timeout=10).read()  # noqa: E731
            http, _, _ = _timed(get, runs)
        finally:
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)
        text = body.decode()
        ms = lambda xs: round(1000 * statistics.median(xs), 2)  # noqa: E731
        return {
            "benchmark": "metrics_scrape",
            "pending": pending_n,
            "admitted": admitted_n,
            "samples": sum(1 for line in text.splitlines() if line and not line.startswith("#")),
            "median_ms": ms(wall),
            "cpu_median_ms": ms(cpu),
            "changed_median_ms": ms(c_wall),
            "changed_cpu_median_ms": ms(c_cpu),
            "burst_median_ms": ms(b_wall),
            "burst_cpu_median_ms": ms(b_cpu),
            "first_ms": ms(f_wall),
            "first_cpu_ms": ms(f_cpu),
            "http_median_ms": ms(http),
            "max_ms": round(1000 * max(wall), 2),
            "runs": runs,
        }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10000,100000", help="pending counts, comma-separated")
    ap.add_argument("--admitted", type=int, default=500)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--profile", type=int, default=0)
    args = ap.parse_args()
    for size in args.sizes.split(","):
        print(json.dumps(bench(int(size), args.admitted, args.runs, args.profile)), flush=True)


if __name__ == "__main__":
    main()
