"""`make bench`: run every benchmark in its own process and write docs/BENCHMARKS.md.

Each benchmark script prints one JSON object per line; this runner records the machine, the
exact command, and the figures against the target named in its issue. Set BENCH_QUICK=1 for a
smaller chargeback scale (the full one generates ~88M samples and takes minutes).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
QUICK = os.environ.get("BENCH_QUICK") == "1"

BENCHES = [
    ("admission", [PY, "bench/bench_admission.py"], "one full cycle, 10k pending + 2k admitted, 8 lanes x 3 flavors: median < 0.25 s; near-linear growth"),
    ("sensor_tick", [PY, "bench/bench_gate.py", "--runs", "5"], "sensor tick with 5,000 pending and 500 active runs: median < 2 s"),
    ("dcgm_parse", [PY, "bench/bench_dcgm_parse.py"], ">= 1M samples/s and >= 20x prometheus_client's parser"),
    (
        "chargeback",
        [PY, "bench/bench_chargeback.py", *(["--scale", "0.1"] if QUICK else [])],
        "30 days x 512 GPUs x 15 s samples (~88M): full rebuild within 5x one DuckDB GROUP BY pod; peak memory < 4 GiB",
    ),
]


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kb = int(next(x for x in Path("/proc/meminfo").read_text().splitlines() if x.startswith("MemTotal")).split()[1])
        mem = f", {kb / 1024 / 1024:.0f} GiB RAM"
    except (OSError, StopIteration, ValueError):
        pass
    return f"{cpu}, {os.cpu_count()} cores{mem}, {platform.system()} {platform.release()}, Python {platform.python_version()}"


def run(name: str, cmd: list[str]) -> tuple[list[dict], float, str]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - t0
    results = []
    for line in proc.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                results.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    err = "" if proc.returncode == 0 else (proc.stderr.strip().splitlines() or ["(no stderr)"])[-1]
    print(f"{name}: {len(results)} result(s) in {elapsed:.1f}s" + (f" FAILED: {err}" if err else ""), file=sys.stderr)
    return results, elapsed, err


def main() -> int:
    sections = []
    failed = 0
    for name, cmd, target in BENCHES:
        if not (ROOT / cmd[1]).exists():
            sections.append(f"## {name}\n\nTarget: {target}\n\nNot present in this checkout.\n")
            continue
        results, elapsed, err = run(name, cmd)
        failed += bool(err)
        shown = " ".join(c if c != PY else ".venv/bin/python" for c in cmd)
        body = "\n".join(f"    {json.dumps(r)}" for r in results) or "    (no output)"
        sections.append(
            f"## {name}\n\nTarget: {target}\n\nCommand: `{shown}` ({elapsed:.1f} s wall)\n\n"
            + (f"**Failed**: {err}\n\n" if err else "")
            + f"Results (one JSON object per measurement):\n\n{body}\n"
        )
    doc = (
        "# Benchmarks\n\n"
        f"Written by `make bench` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC.\n\n"
        f"Machine: {machine()}.\n\n"
        "Every figure is a median of several runs inside the named script; ratios are against the "
        "baseline the issue names. CI does not run benchmarks.\n\n" + "\n".join(sections)
    )
    (ROOT / "docs").mkdir(exist_ok=True)
    (ROOT / "docs" / "BENCHMARKS.md").write_text(doc)
    print("wrote docs/BENCHMARKS.md", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
