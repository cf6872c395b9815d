"""`make demo` to a priced UI: seconds from the seed's start until the Dagster UI answers with its
code location loaded, on a fresh demo home each run (the install excluded: `make demo` skips it
once `.venv` is there).

Run: .venv/bin/python bench/bench_demo_start.py [--runs 3] [--days 30] [--price-days N]
Prints JSON: one object per run and a summary (medians). Each run does what `make demo` does,
in a temporary DAGSTER_HOME / GPU_PLATFORM_HOME: `gpu-platform demo seed --days D --price-days P`
(history, ledger, feeds, then pricing the newest P days in one Dagster run), then
`gpu-platform demo run` on a free loopback port until it logs that the UI is ready, then Ctrl-C
(SIGINT) and the wait for the whole tree to stop. CPU seconds are the children's (RUSAGE_CHILDREN)
and cover the seed; the UI start's CPU is spread over dagster dev's processes and not reported.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLI = str(Path(sys.executable).parent / "gpu-platform")
READY = re.compile(r"demo: the UI is ready on \S+ \((\d+) s after start\)")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def one(days: int, price_days: int, timeout: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-demo-") as tmp:
        env = {**os.environ, "DAGSTER_HOME": f"{tmp}/dagster_home", "GPU_PLATFORM_HOME": tmp,
               "GPU_PLATFORM_LOCAL_GPUS": "64", "PYTHONWARNINGS": "ignore"}
        t0, c0 = time.perf_counter(), _cpu()
        seed = subprocess.run([CLI, "demo", "seed", "--days", str(days), "--price-days", str(price_days)],
                              cwd=ROOT, env=env, capture_output=True, text=True, check=False)
        seed_s, seed_cpu = time.perf_counter() - t0, _cpu() - c0
        if seed.returncode != 0:
            raise SystemExit(f"demo seed failed: {seed.stderr[-2000:]}")
        port = _port()
        proc = subprocess.Popen([CLI, "demo", "run", "--host", "127.0.0.1", "--port", str(port), "--no-incident"],
                                cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        ready: list[float] = []
        lines: list[str] = []

        def read() -> None:
            assert proc.stderr is not None
            for line in proc.stderr:
                lines.append(line)
                if READY.search(line) and not ready:
                    ready.append(time.perf_counter() - t0)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        deadline = time.perf_counter() + timeout
        while not ready and proc.poll() is None and time.perf_counter() < deadline:
            time.sleep(0.2)
        stop0 = time.perf_counter()
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
        stop_s = time.perf_counter() - stop0
        if not ready:
            raise SystemExit("the demo UI never said it was ready: " + "".join(lines[-20:]))
        return {"benchmark": "demo_start_run", "days": days, "price_days": price_days, "seed_s": round(seed_s, 1),
                "seed_cpu_s": round(seed_cpu, 1), "ui_ready_s": round(ready[0], 1),
                "ui_after_seed_s": round(ready[0] - seed_s, 1), "stop_s": round(stop_s, 1)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--price-days", type=int, default=None, help="default: as `make demo` (DEMO_PRICE_DAYS)")
    ap.add_argument("--timeout", type=float, default=900.0)
    args = ap.parse_args()
    price_days = args.days if args.price_days is None else args.price_days
    runs = []
    for _ in range(args.runs):
        r = one(args.days, price_days, args.timeout)
        print(json.dumps(r), flush=True)
        runs.append(r)
    med = {k: statistics.median(r[k] for r in runs) for k in ("seed_s", "seed_cpu_s", "ui_ready_s", "ui_after_seed_s")}
    print(json.dumps({"benchmark": "demo_start", "days": args.days, "price_days": price_days, "runs": len(runs),
                      **{f"median_{k}": round(v, 1) for k, v in med.items()}, "target_s": 180,
                      "ui_ready_all_s": [r["ui_ready_s"] for r in runs]}))


if __name__ == "__main__":
    main()
