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
    (
        "admission",
        [PY, "bench/bench_admission.py"],
        "issue 9: one full cycle, 10k pending + 2k admitted, 8 lanes x 3 flavors, cohort tree: median < 0.1 s; "
        "admit_until_stable draining 5,000 pending into an empty pool < 1 s; near-linear growth to 100k",
    ),
    (
        "gang_admission",
        [PY, "bench/bench_gang_admission.py", *(["--sizes", "2000", "--repeat", "3"] if QUICK else [])],
        "issue 20: the node-aware admission cycle at 10k pending and 1,000 nodes (a tenth gangs of 2 x 8) "
        "within 2x of the quota-only cycle on the same state",
    ),
    (
        "admission_fair_sharing",
        [PY, "bench/bench_admission_fair_sharing.py", *(["--repeat", "3"] if QUICK else [])],
        "Admission Fair Sharing on every lane (8 teams): the one cycle at 10k pending and the 5,000 drain, "
        "beside the same states without it (no target; what the LocalQueue ordering costs)",
    ),
    ("sensor_tick", [PY, "bench/bench_gate.py", "--runs", "5"], "sensor tick with 5,000 pending and 500 active runs: median < 2 s"),
    ("metrics_scrape", [PY, "bench/bench_metrics.py"], "a /metrics scrape with 10,000 pending (+500 admitted): median < 50 ms"),
    ("dcgm_parse", [PY, "bench/bench_dcgm_parse.py"], ">= 1M samples/s and >= 20x prometheus_client's parser"),
    (
        "simulate",
        [PY, "bench/bench_simulate.py", *(["--sizes", "12500,25000", "--baselines-at", "0", "--nodes-at", "12500", "--kueue-cohorts", "5"] if QUICK else [])],
        "policy simulation of 100,000 trace jobs (ElasticFlow slice tiled, 768 GPUs) under 30 s; near-linear growth 12.5k -> 100k",
    ),
    (
        "demo_pricing",
        [PY, "bench/bench_demo_pricing.py", *(["--runs", "1"] if QUICK else ["--runs", "3"])],
        "issue 22: 30 days of the demo priced within 5 minutes of `make demo` (one in-process run: "
        "fixed cost + 30 x the marginal cost of a day); where a one-day pricing run spends its time",
    ),
    (
        "focus_memory",
        [PY, "bench/bench_focus_memory.py", *(["--mb", "200"] if QUICK else [])],
        "issue 24 (class 9): a 1 GB FOCUS file ingested in a fresh process: peak RSS bounded by the batch "
        "(4 MiB) plus a constant and DuckDB's memory_limit (512MB here), not by the file (was 8.3x the file)",
    ),
    (
        "chargeback",
        [PY, "bench/bench_chargeback.py", *(["--scale", "0.1"] if QUICK else [])],
        "30 days x 512 GPUs x 15 s samples (~88M): full rebuild <= 3x one DuckDB GROUP BY pod; all data tests "
        "no longer than the build; peak memory <= 1.5 GiB with tests",
    ),
    (
        "chargeback_scale",
        [PY, "bench/bench_chargeback.py", "--days", "1" if QUICK else "2", "--gpus", "512", "--runs", "3", "--no-tests"],
        "the same rebuild at 512 GPUs (first half of the 512 -> 4,096 growth ratio)",
    ),
    (
        "chargeback_scale_4096",
        [PY, "bench/bench_chargeback.py", "--days", "1" if QUICK else "2", "--gpus", "4096", "--runs", "3", "--no-tests"],
        "the same rebuild at 4,096 GPUs: grows no worse than linearly (rebuild ratio <= 8x for 8x the GPUs)",
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
    decoder, text, pos = json.JSONDecoder(), proc.stdout, 0
    while (start := text.find("{", pos)) != -1:
        try:
            obj, pos = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            pos = start + 1
            continue
        results.append(obj)
    err = "" if proc.returncode == 0 else (proc.stderr.strip().splitlines() or ["(no stderr)"])[-1]
    print(f"{name}: {len(results)} result(s) in {elapsed:.1f}s" + (f" FAILED: {err}" if err else ""), file=sys.stderr)
    return results, elapsed, err


def _find(results: list[dict], **match) -> dict:
    return next((r for r in results if all(r.get(k) == v for k, v in match.items())), {})


def summary(by_name: dict[str, list[dict]]) -> list[str]:
    """One row per target: measured figure, target, met or not."""
    rows = []
    adm = by_name.get("admission", [])
    a10, a100 = _find(adm, pending=10000), _find(adm, pending=100000)
    if a10:
        rows.append(("admission cycle, 10k pending + 2k admitted", f"{a10['median_s']:.3f} s", "< 0.1 s", a10["median_s"] < 0.1))
    drain = _find(adm, drain=5000)
    if drain:
        rows.append(
            ("admit_until_stable draining 5,000 pending", f"{drain['median_s']:.3f} s", "< 1 s", drain["median_s"] < 1.0)
        )
    if a10 and a100:
        growth = a100["median_s"] / a10["median_s"]
        rows.append(("admission growth 10k -> 100k pending", f"{growth:.1f}x", "near-linear (~10x)", growth < 20))
    gang = _find(by_name.get("gang_admission", []), pending=10000)
    if gang:
        rows.append(
            (
                f"node-aware cycle, 10k pending, {gang['nodes']} nodes",
                f"{gang['node_aware_median_s']:.3f} s ({gang['ratio']}x quota-only {gang['quota_only_median_s']:.3f} s)",
                "<= 2x quota-only",
                gang["ratio"] is not None and gang["ratio"] <= 2,
            )
        )
    tick = _find(by_name.get("sensor_tick", []), benchmark="sensor_tick")
    if tick:
        rows.append(("sensor tick, 5k pending + 500 active", f"{tick['median_s']:.3f} s", "< 2 s", tick["median_s"] < 2))
    scrape = _find(by_name.get("metrics_scrape", []), benchmark="metrics_scrape")
    if scrape:
        rows.append(("/metrics scrape, 10k pending", f"{scrape['median_ms']:.1f} ms (HTTP {scrape['http_median_ms']:.1f} ms)", "< 50 ms", scrape["median_ms"] < 50))
    dcgm = next(iter(by_name.get("dcgm_parse", [])), {})
    if dcgm:
        rows.append(("DCGM text parsing", f"{dcgm['ours_samples_per_s']:,} samples/s", ">= 1,000,000/s", dcgm["ours_samples_per_s"] >= 1e6))
        rows.append(("DCGM parsing vs prometheus_client", f"{dcgm['ratio']}x", ">= 20x", dcgm["ratio"] >= 20))
    sims = by_name.get("simulate", [])
    s_small, s_big = _find(sims, scenario="policy", jobs=12500), _find(sims, scenario="policy", jobs=100000)
    if s_big:
        rows.append(("simulate 100k trace jobs, policy (CPU)", f"{s_big['cpu_s']:.1f} s CPU ({s_big['wall_s']:.1f} s wall)", "< 30 s", s_big["cpu_s"] < 30))
    if s_small and s_big:
        growth = s_big["cpu_s"] / s_small["cpu_s"]
        rows.append(("simulate growth 12.5k -> 100k jobs (CPU)", f"{growth:.1f}x", "near-linear (~8x)", growth < 10))
    for name in ("fifo", "fifo-backfill", "fifo-flavors", "strict"):
        b = _find(sims, scenario=name, jobs=100000)
        if b:
            rows.append((f"simulate 100k trace jobs, {name} baseline (CPU)", f"{b['cpu_s']:.1f} s CPU ({b['wall_s']:.1f} s wall)", "< 30 s", b["cpu_s"] < 30))
    nb = _find(sims, benchmark="simulate_trace_nodes")
    if nb:
        quota = _find(sims, scenario="policy", jobs=nb["jobs"])
        vs = f", {nb['cpu_s'] / quota['cpu_s']:.1f}x quota-only" if quota and quota.get("cpu_s") else ""
        rows.append((f"simulate {nb['jobs']:,} trace jobs, policy on the policy's nodes (CPU)",
                     f"{nb['cpu_s']:.1f} s CPU ({nb['wall_s']:.1f} s wall{vs})", "reported", True))
    kb = _find(sims, benchmark="simulate_kueue", jobs=15000)
    if kb:
        rows.append(("simulate Kueue baseline scenario (15k workloads)", f"{kb['cpu_s']:.1f} s CPU ({kb['wall_s']:.1f} s wall)", "reported", True))
    dp = _find(by_name.get("demo_pricing", []), benchmark="demo_pricing")
    if dp:
        month = dp["fixed_s_per_run"] + 30 * dp["marginal_s_per_day"]
        rows.append(("demo pricing: 30 days in one run (fixed + 30 x marginal day)",
                     f"{month:.0f} s ({dp['fixed_s_per_run']:.1f} s + 30 x {dp['marginal_s_per_day']:.2f} s)",
                     "< 300 s", month < 300))
        rows.append(("demo pricing: a one-day run (today's pricing)",
                     f"{dp['short_run_s']:.1f} s, of which {dp['fixed_s_per_run']:.1f} s fixed over {dp['steps_in_run']} steps",
                     "reported", True))
    fm = _find(by_name.get("focus_memory", []), benchmark="focus_memory")
    if fm:
        # bounded: peak RSS below the file size once the file is large (a constant, not a multiple of it)
        rows.append(("FOCUS ingest peak RSS vs file size",
                     f"{fm['peak_rss_mib']:.0f} MiB for {fm['file_mib']:.0f} MiB ({fm['peak_over_file']:.2f}x; "
                     f"{fm['growth_mib']:.0f} MiB over the {fm['baseline_rss_mib']:.0f} MiB baseline, {fm['seconds']:.0f} s)",
                     "< 1 GiB, not growing with the file", fm["peak_rss_mib"] < 1024))
    cb = _find(by_name.get("chargeback", []), benchmark="chargeback_rebuild")
    if cb:
        rows.append(("chargeback rebuild / GROUP BY pod floor", f"{cb['ratio']}x ({cb['rebuild_s']} s / {cb['floor_s']} s)", "<= 3x", cb["ratio"] <= 3))
        wt = cb.get("rebuild", {}).get("with_tests")
        if wt:
            rows.append(("chargeback data tests / build", f"{wt['tests_seconds']:.2f} s / {wt['seconds']:.2f} s ({wt['tests']} tests)",
                         "tests <= build", wt["tests_seconds"] <= wt["seconds"]))
        rows.append(("chargeback peak memory with tests", f"{cb['peak_rss_mib']:.0f} MiB", "<= 1536 MiB", cb["peak_rss_mib"] <= 1536))
        if cb.get("ingest"):
            ing = cb["ingest"]
            rows.append(("chargeback ingestion: hourly rollup of the 30 days (once, at load)",
                         f"{ing['rollup_s']:.1f} s, {ing['peak_rss_mib']:.0f} MiB", "reported", True))
    small = _find(by_name.get("chargeback_scale", []), benchmark="chargeback_rebuild")
    big = _find(by_name.get("chargeback_scale_4096", []), benchmark="chargeback_rebuild")
    if small and big:
        growth = big["rebuild_s"] / small["rebuild_s"]
        rows.append(("chargeback rebuild 512 -> 4,096 GPUs", f"{growth:.2f}x ({small['rebuild_s']} s -> {big['rebuild_s']} s)",
                     "<= 8x (linear)", growth <= 8))
    out = ["| measure | measured | target | met |", "|---|---|---|---|"]
    out += [f"| {m} | {v} | {t} | {'yes' if ok else '**no**'} |" for m, v, t, ok in rows]
    return out


NOTES = """## Notes

- DCGM parsing: `prometheus_client`'s parser is the well-kept library for this format, but it
  parses about 25k samples/s here, 40-60x short of what a 512-GPU fleet at 15 s needs when
  history is re-read; the platform's parser (`gpu_platform/finops/feeds/dcgm.py`) splits lines with
  polars string kernels and falls back to a careful per-line path for odd lines (escaped
  quotes, commas in values), so correctness never depends on the fast path.
- Chargeback: the rebuild reads the hourly rollup the loader writes at ingestion
  (`raw_dcgm_hourly`, ~12k rows a day for 512 GPUs), never the 15 s samples (unless two sources
  overlap on a node-day); the floor still reads every sample. The rollup's own cost is reported
  apart (`ingest`: once per loaded file in production). See docs/finops.md ("Performance") for
  what each step costs. Peak memory is per measuring process (its own VmHWM, so a child never
  reports the memory of the process that generated the data). The 2 cores are shared with other
  jobs: single runs move by 2-3x, so every figure is a median, and the floor is measured in the
  same invocation, alternating with the rebuild, so the ratio is fair.
- Simulator: the engine is rebuilt for every admission call (its `Snapshot` of running work
  and one preemption search per nominated head); docs/simulator.md ("Performance") has the
  profile and what the event loop does to call it rarely and with little. The simulator is
  single-threaded, so its target is judged on the process's CPU time: on these 2 shared cores
  the wall time of the same run has ranged from 1x to 2.6x its CPU time with the other load.
  The 100k-job policy run missed its 30 s target after the packaged policy began lending idle
  GPUs to the training lanes (no borrowing limits, candidate training on spot): the pool runs
  twice as busy (69% against 32% of the tiled trace), so every admission call carries twice the
  running work, and the running research jobs an assurance lane may now reclaim (the simulator
  used to fold them away as never-victims, wrongly) are shown one by one. Folding a queue within
  its nominal quota (never a reclaim victim in Kueue) took a third of it back; the rest is what
  the incremental snapshot of the policy-fit issue (part 6) is for. The FIFO baselines no longer
  use the engine (0.5-0.7 s per 100k jobs).
- Chargeback rebuild: the whole-bill models (EffectiveCost, commitments, tax and credits,
  bypass showback, CPU nodes by pod requests: issue 23) added models to every day's build; the
  ratio to the GROUP BY floor went from 2.85x to about 4.7x, over its 3x target, not yet worked on.
- Demo pricing: a pricing run is one in-process Dagster run of 51 steps (every ingest and cost
  asset, one step each for the whole range). Most of a one-day run is the fixed cost of those
  steps, not the day's data: Dagster's SQLite event log commits each of the run's ~3,500
  events (step events, one per data test as an asset check) on its own connection, and each
  step opens the warehouse and builds its model. Found and removed while measuring: a process
  per step (the multiprocess executor: the warehouse pool of one slot serialized the steps
  anyway), the policy parsed twice per step (0.2 s each), DCGM loads of one statement per file
  (24 per day) and the ledger snapshot inserted row by row (5.3 s a month; one Arrow batch now).
  What is left per day is mostly the DCGM ingest (~1.4 s for 64 GPUs at 15 s).
- Figures move with machine load (2 shared cores); each script reports medians of several runs.
"""


def main() -> int:
    sections = []
    by_name: dict[str, list[dict]] = {}
    failed = 0
    for name, cmd, target in BENCHES:
        if not (ROOT / cmd[1]).exists():
            sections.append(f"## {name}\n\nTarget: {target}\n\nNot present in this checkout.\n")
            continue
        results, elapsed, err = run(name, cmd)
        by_name[name] = results
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
        "baseline the issue names. CI does not run benchmarks.\n\n## Summary\n\n"
        + "\n".join(summary(by_name))
        + "\n\n"
        + NOTES
        + "\n"
        + "\n".join(sections)
    )
    (ROOT / "docs").mkdir(exist_ok=True)
    (ROOT / "docs" / "BENCHMARKS.md").write_text(doc)
    print("wrote docs/BENCHMARKS.md", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
