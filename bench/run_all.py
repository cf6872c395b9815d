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
        "issues 9 and 27: one full cycle, 10k pending + 2k admitted, 8 lanes x 3 flavors, cohort tree: median <= 0.05 s; "
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
    (
        "sensor_tick",
        [PY, "bench/bench_gate.py", "--runs", "5"],
        "issue 27: the sensor tick at 5,000 pending / 500 active runs <= 0.25 s and at 50,000 / 2,000 <= 1 s, "
        "growing at most linearly (median of the ticks after the first, CPU time beside wall time)",
    ),
    (
        "metrics_scrape",
        [PY, "bench/bench_metrics.py"],
        "issue 27: a /metrics scrape at 10,000 pending (+500 admitted) <= 5 ms and at 100,000 <= 20 ms "
        "(median; CPU time beside wall time; also with the ledger changed before every scrape)",
    ),
    (
        "dcgm_parse",
        [PY, "bench/bench_dcgm_parse.py"],
        "issue 27: >= 100x prometheus_client's parser on both the clean generated input and the real reference "
        "feed replicated (a third of its lines DCGM blank sentinels), in one run; issue 43: also on the clean "
        "input's fleet as Prometheus' /federate writes it (a timestamp on every sample, a label block per GPU "
        "with instance and job, values as Go's shortest float text)",
    ),
    (
        "simulate",
        [PY, "bench/bench_simulate.py", *(["--sizes", "12500,25000", "--baselines-at", "0", "--preempting-at", "12500", "--nodes-at", "12500", "--kueue-cohorts", "5"] if QUICK else [])],
        "policy simulation of 100,000 trace jobs (ElasticFlow slice tiled, 768 GPUs), the light mix and the "
        "preempting one (fleet lane map: incident and release reclaim borrowed GPUs), each <= 30 s of CPU; "
        "near-linear growth 12.5k -> 100k; issue 20: the same light mix on the policy's node shapes (reported)",
    ),
    (
        "simulate_traces",
        [PY, "bench/bench_simulate.py", "--only-shared"],
        "issue 45: the simulator's CPU per 1,000 jobs on both shared traces (ElasticFlow cluster04 at 640 GPUs, "
        "cluster02 at 160, whole, fleet lane map, the packaged policy), beside the tiled cluster04 slice above; "
        "reading the CSV timed apart (reported)",
    ),
    (
        "simulate_memory",
        [PY, "bench/bench_simulate_memory.py", *(["--rows", "200000", "--repeat", "1", "--big", "0", "--policy-rows", ""] if QUICK else [])],
        "issue 45: the simulator in bounded memory: peak RSS of a fresh process simulating the shared cluster04 trace "
        "tiled to 1M rows (fifo-backfill, median of 3), the policy at 100k rows and 10M rows once; the old code "
        "kept every job (855 MB at 1M rows, 6 GB past 450 s at 10M)",
    ),
    (
        "demo_pricing",
        [PY, "bench/bench_demo_pricing.py", *(["--runs", "1"] if QUICK else ["--runs", "3"])],
        "issue 22: 30 days of the demo priced within 5 minutes of `make demo` (one in-process run: "
        "fixed cost + 30 x the marginal cost of a day); where a one-day pricing run spends its time",
    ),
    (
        "demo_start",
        [PY, "bench/bench_demo_start.py", *(["--runs", "1"] if QUICK else ["--runs", "3"])],
        "issue 40: `make demo` to a priced UI in <= 3 minutes on an idle 2-core machine after the install "
        "(fresh demo home: seed 30 days, price them all, `demo run` until the UI answers with its code location loaded)",
    ),
    (
        "cli",
        [PY, "bench/bench_cli.py", *(["--days", "7", "--runs", "3", "--sub-runs", "1", "--queue-runs", "3"] if QUICK else [])],
        "issue 40: a fresh process answers `gpu-platform --help` and every `gpu-platform COMMAND --help` in <= 0.3 s, "
        "and `gpu-platform queue` on the demo's ledger (its live requests + 30 days of history) in <= 1 s "
        "(medians, CPU time beside wall time)",
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
        "30 days x 512 GPUs x 15 s samples (~88M): full rebuild <= 2x one DuckDB GROUP BY pod (issue 23; was 3x); all data tests "
        "no longer than the build; peak memory <= 1.5 GiB with tests; issue 27: the hourly rollup at load, per "
        "day file, <= 5x reading the samples once (same process, alternating)",
    ),
    (
        "chargeback_scale",
        [PY, "bench/bench_chargeback.py", "--days", "1" if QUICK else "2", "--gpus", "512", "--runs", "3", "--no-tests"],
        "the same rebuild at 512 GPUs (first half of the 512 -> 4,096 growth ratio)",
    ),
    (
        "chargeback_scale_4096",
        [PY, "bench/bench_chargeback.py", "--days", "1" if QUICK else "2", "--gpus", "4096", "--runs", "5", "--no-tests",
         "--growth-from", "512"],
        "the same rebuild at 4,096 GPUs: grows no worse than linearly (rebuild ratio <= 8x for 8x the GPUs); "
        "issue 27: the rollup at load peaks <= 1.5 GiB RSS; its growth 512 -> 4,096 GPUs (median CPU s of paired runs) near-linear",
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
        rows.append((
            "admission cycle, 10k pending + 2k admitted",
            f"{a10['median_s']:.3f} s ({a10.get('cpu_median_s', 0):.3f} s CPU)",
            "<= 0.05 s",
            a10["median_s"] <= 0.05,
        ))
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
    ticks = by_name.get("sensor_tick", [])
    for pending, active, limit in ((5000, 500, 0.25), (50000, 2000, 1.0)):
        tick = _find(ticks, benchmark="sensor_tick", pending=pending, active=active)
        if tick:
            rows.append((
                f"sensor tick, {pending // 1000}k pending + {active:,} active",
                f"{tick['median_s']:.3f} s ({tick['median_cpu_s']:.3f} s CPU; first tick {tick['first_tick_s']:.3f} s)",
                f"<= {limit:g} s", tick["median_s"] <= limit,
            ))
    growth = _find(ticks, benchmark="sensor_tick_growth")
    if growth:
        rows.append((
            "sensor tick growth 5k -> 50k pending (CPU)", f"{growth['cpu_ratio']}x for {growth['size_ratio']}x the requests",
            "at most linear", growth["cpu_ratio"] <= growth["size_ratio"],
        ))
    scrapes = by_name.get("metrics_scrape", [])
    for pending, limit in ((10000, 5.0), (100000, 20.0)):
        scrape = _find(scrapes, benchmark="metrics_scrape", pending=pending)
        if scrape:
            rows.append((
                f"/metrics scrape, {pending // 1000}k pending",
                f"{scrape['median_ms']:.1f} ms ({scrape['cpu_median_ms']:.1f} ms CPU; HTTP {scrape['http_median_ms']:.1f} ms)",
                f"<= {limit:g} ms", scrape["median_ms"] <= limit,
            ))
            rows.append((
                f"/metrics scrape, {pending // 1000}k pending, ledger changed before each",
                f"{scrape['changed_median_ms']:.1f} ms ({scrape['changed_cpu_median_ms']:.1f} ms CPU)",
                f"<= {limit:g} ms", scrape["changed_median_ms"] <= limit,
            ))
            if "burst_median_ms" in scrape:
                rows.append((
                    f"/metrics scrape, {pending // 1000}k pending, a busy tick's 1,000 changes before each",
                    f"{scrape['burst_median_ms']:.1f} ms ({scrape['burst_cpu_median_ms']:.1f} ms CPU); first scrape "
                    f"(full read) {scrape['first_ms']:.0f} ms ({scrape['first_cpu_ms']:.0f} ms CPU)",
                    "reported", True,
                ))
    for dcgm in by_name.get("dcgm_parse", []):
        label = {
            "clean": "clean generated input",
            "reference": "real reference feed replicated",
            "federate": "the fleet as Prometheus /federate writes it (timestamps, per-GPU label blocks)",
        }.get(dcgm.get("input"), "input")
        rows.append((f"DCGM parsing vs prometheus_client, {label}",
                     f"{dcgm['ratio']}x ({dcgm['ours_samples_per_s']:,} samples/s; CPU {dcgm.get('ratio_cpu', '?')}x, "
                     f"{dcgm.get('ours_samples_per_cpu_s', 0):,}/CPU-s)",
                     ">= 100x", dcgm["ratio"] >= 100))
    sims = by_name.get("simulate", [])
    s_small = _find(sims, scenario="policy", mix="light", jobs=12500)
    s_big = _find(sims, scenario="policy", mix="light", jobs=100000)
    if s_big:
        rows.append(("simulate 100k trace jobs, policy, light mix (CPU)", f"{s_big['cpu_s']:.1f} s CPU ({s_big['wall_s']:.1f} s wall)", "< 30 s", s_big["cpu_s"] < 30))
    s_pre = _find(sims, scenario="policy", mix="preempting", jobs=100000)
    if s_pre:
        rows.append((
            "simulate 100k trace jobs, policy, preempting mix (CPU)",
            f"{s_pre['cpu_s']:.1f} s CPU ({s_pre['wall_s']:.1f} s wall; {s_pre['preemptions']:,} preemptions)",
            "<= 30 s",
            s_pre["cpu_s"] <= 30,
        ))
    if s_small and s_big:
        growth = s_big["cpu_s"] / s_small["cpu_s"]
        rows.append(("simulate growth 12.5k -> 100k jobs (CPU)", f"{growth:.1f}x", "near-linear (~8x)", growth < 10))
    for name in ("fifo", "fifo-backfill", "fifo-flavors", "strict"):
        b = _find(sims, scenario=name, jobs=100000)
        if b:
            rows.append((f"simulate 100k trace jobs, {name} baseline (CPU)", f"{b['cpu_s']:.1f} s CPU ({b['wall_s']:.1f} s wall)", "< 30 s", b["cpu_s"] < 30))
    nb = _find(sims, benchmark="simulate_trace_nodes")
    if nb:
        quota = _find(sims, benchmark="simulate_trace", scenario="policy", mix="light", jobs=nb["jobs"])
        vs = f", {nb['cpu_s'] / quota['cpu_s']:.1f}x quota-only" if quota and quota.get("cpu_s") else ""
        rows.append((f"simulate {nb['jobs']:,} trace jobs, policy on the policy's nodes (CPU)",
                     f"{nb['cpu_s']:.1f} s CPU ({nb['wall_s']:.1f} s wall{vs})", "reported", True))
    for st in by_name.get("simulate_traces", []):
        if st.get("benchmark") == "simulate_shared_trace":
            rows.append((f"simulate {st['trace']} ({st['jobs']:,} jobs, {st['capacity_gpus']:g} GPUs, policy) per 1,000 jobs (CPU)",
                         f"{st['cpu_s_per_1000_jobs']:.2f} s CPU ({st['cpu_s']:.1f} s for the trace; reading "
                         f"{st['read_cpu_s_per_1000_jobs']:.3f} s per 1,000; {st['preemptions']:,} preemptions)",
                         "reported", True))
    for sm in by_name.get("simulate_memory", []):
        if sm.get("benchmark") == "simulate_memory":
            rows.append((f"simulate {sm['jobs']:,} trace rows, {sm['scenario']}: peak RSS (bounded memory)",
                         f"{sm['peak_rss_mb']:.0f} MB ({'median of ' + str(sm['runs']) + '; ' if sm['runs'] > 1 else ''}"
                         f"{sm['wall_s']:.0f} s wall, reading {sm['read_s']:.0f} s; at most {sm['peak_live']:,} jobs held)",
                         "< 1 GB", sm["peak_rss_mb"] < 1024))
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
    ds = _find(by_name.get("demo_start", []), benchmark="demo_start")
    if ds:
        rows.append(("`make demo` to a priced UI (30 days seeded and priced, after the install)",
                     f"{ds['median_ui_ready_s']:.0f} s (seed {ds['median_seed_s']:.0f} s wall, "
                     f"{ds['median_seed_cpu_s']:.0f} s CPU; UI {ds['median_ui_after_seed_s']:.0f} s after the seed; "
                     f"runs {ds['ui_ready_all_s']})", "<= 180 s", ds["median_ui_ready_s"] <= 180))
    cli = by_name.get("cli", [])
    imp, root = _find(cli, benchmark="cli_import"), _find(cli, benchmark="cli_help")
    if imp:
        rows.append(("CLI: `import gpu_platform.cli.app` in a fresh process",
                     f"{imp['median_s']:.3f} s ({imp['cpu_median_s']:.3f} s CPU); heavy libraries imported: "
                     f"{', '.join(imp['heavy_modules']) or 'none'}", "reported", True))
    if root:
        rows.append(("CLI: `gpu-platform --help`, fresh process", f"{root['median_s']:.3f} s ({root['cpu_median_s']:.3f} s CPU)",
                     "<= 0.3 s", root["median_s"] <= 0.3))
    for name, what in (("cli_command_help", "every `COMMAND --help`"), ("cli_subcommand_help", "every `GROUP SUB --help`")):
        h = _find(cli, benchmark=name)
        if h:
            rows.append((f"CLI: {what}, fresh process (slowest; median over commands)",
                         f"{h['max_s']:.3f} s ({h['slowest']}); median {h['median_s']:.3f} s", "<= 0.3 s each",
                         h["max_s"] <= 0.3))
    q = _find(cli, benchmark="cli_queue")
    if q:
        rows.append((f"CLI: `gpu-platform queue` on the demo ledger ({q['days']} days, {q['requests']} requests), fresh process",
                     f"{q['median_s']:.3f} s ({q['cpu_median_s']:.3f} s CPU; --format json {q['json_median_s']:.3f} s)",
                     "<= 1 s", q["median_s"] <= 1.0))
    fm = _find(by_name.get("focus_memory", []), benchmark="focus_memory")
    if fm:
        # bounded: peak RSS below the file size once the file is large (a constant, not a multiple of it)
        rows.append(("FOCUS ingest peak RSS vs file size",
                     f"{fm['peak_rss_mib']:.0f} MiB for {fm['file_mib']:.0f} MiB ({fm['peak_over_file']:.2f}x; "
                     f"{fm['growth_mib']:.0f} MiB over the {fm['baseline_rss_mib']:.0f} MiB baseline, {fm['seconds']:.0f} s)",
                     "< 1 GiB, not growing with the file", fm["peak_rss_mib"] < 1024))
    cb = _find(by_name.get("chargeback", []), benchmark="chargeback_rebuild")
    if cb:
        # issue 23 (part 7): <= 2x in wall seconds, what the user waits for (medians of the same
        # alternating runs); the CPU ratio is shown beside it, never judged in its place
        cpu = cb["rebuild_cpu_s"] / cb["floor_cpu_s"] if cb.get("floor_cpu_s") else None
        shown = f"{cb['ratio']}x wall ({cb['rebuild_s']} s / {cb['floor_s']} s)"
        if cb.get("rebuild_close_s") is not None:
            # the rebuild is the build and the close that checkpoints it into the file; both shown
            shown = (f"{cb['ratio']}x wall ({cb['rebuild_s']} s = build {cb['rebuild_build_s']} s + close "
                     f"{cb['rebuild_close_s']} s, / {cb['floor_s']} s)")
        if cpu is not None:
            shown += f"; CPU {cpu:.2f}x ({cb['rebuild_cpu_s']} s / {cb['floor_cpu_s']} s)"
        rows.append(("chargeback rebuild / GROUP BY pod floor (wall)", shown, "<= 2x wall", cb["ratio"] <= 2))
        wt = cb.get("rebuild", {}).get("with_tests")
        if wt:
            rows.append(("chargeback data tests / build", f"{wt['tests_seconds']:.2f} s / {wt['seconds']:.2f} s ({wt['tests']} tests)",
                         "tests <= build", wt["tests_seconds"] <= wt["seconds"]))
        rows.append(("chargeback peak memory with tests", f"{cb['peak_rss_mib']:.0f} MiB", "<= 1536 MiB", cb["peak_rss_mib"] <= 1536))
        if cb.get("ingest"):
            ing = cb["ingest"]
            ratio = ing.get("cpu_ratio_to_scan")
            rows.append(("chargeback ingestion: hourly rollup of the 30 days at load / reading the samples once",
                         f"{ratio}x CPU ({ing.get('rollup_cpu_s')} s / {ing.get('scan_floor_cpu_s')} s; wall "
                         f"{ing.get('ratio_to_scan')}x, {ing['rollup_s']:.1f} s), {ing['peak_rss_mib']:.0f} MiB",
                         "<= 5x", ratio is not None and ratio <= 5))
    small = _find(by_name.get("chargeback_scale", []), benchmark="chargeback_rebuild")
    big = _find(by_name.get("chargeback_scale_4096", []), benchmark="chargeback_rebuild")
    if small and big:
        growth = big["rebuild_s"] / small["rebuild_s"]
        rows.append(("chargeback rebuild 512 -> 4,096 GPUs", f"{growth:.2f}x ({small['rebuild_s']} s -> {big['rebuild_s']} s)",
                     "<= 8x (linear)", growth <= 8))
    if big and big.get("ingest"):
        rows.append(("chargeback ingestion peak RSS at 4,096 GPUs", f"{big['ingest']['peak_rss_mib']:.0f} MiB",
                     "<= 1536 MiB", big["ingest"]["peak_rss_mib"] <= 1536))
    growth = (big or {}).get("ingest_growth")
    if growth:
        rows.append(("chargeback ingestion 512 -> 4,096 GPUs (median of paired runs, CPU; seeding untimed)",
                     f"{growth['cpu_ratio_median']}x (scan floor {growth['scan_cpu_ratio_median']}x; wall "
                     f"{growth['wall_ratio_median']}x)", "near-linear (~8x)", growth["cpu_ratio_median"] < 10))
    out = ["| measure | measured | target | met |", "|---|---|---|---|"]
    out += [f"| {m} | {v} | {t} | {'yes' if ok else '**no**'} |" for m, v, t, ok in rows]
    return out


NOTES = """## Notes

- DCGM parsing (issue 27): two inputs, both in one run of `bench/bench_dcgm_parse.py`. The clean
  one (512 GPUs x 20 metrics x 100 scrapes, generated, pod labels, nothing quarantined) is a
  fleet's history re-read; the reference one is dcgm-exporter's own README output (the project's
  fixtures) replicated to as many sample lines: two HELP/TYPE comment lines per sample line and
  one sample line in three a DCGM blank sentinel, which is what a real exporter prints for fields
  a GPU does not support, so the quarantine path is measured at scale, not only the happy path.
  `ratio` divides our accepted samples per second by prometheus_client's samples per second
  (the well-kept parser of the format; it returns sentinels as samples, so `ratio_lines` also
  counts our quarantined lines). The parser (`gpu_platform/finops/feeds/dcgm.py`): the input is
  cut into pieces of at most 8 MiB, each scanned and parsed in one go while its bytes are in the
  cache (lines renumbered after), on a thread per core. The per-byte scan is compiled
  (`gpu_platform/finops/feeds/_dcgm_scan.c`, a C extension `setup.py` builds at install; optional,
  see README): the profile of the numpy parser had no step over a sixth of the time, each numpy
  step a separate pass over per-line arrays (2.7M lines on the reference input, two thirds
  HELP/TYPE comments), so those passes became one loop that tokenizes a line while it is in the
  cache. It finds each line, skips comments, applies the fast-path rule (the first of `{`, `|`, `}`
  is a `{`, found eight bytes at a time; the last is a `}` followed by one space and the value),
  numbers metric names and label blocks with two hash tables (seeded; a key equal to the previous
  line's is not hashed again), reads a value when it is a plain decimal that binary64 arithmetic
  reads exactly (at most 19 digits, integer <= 2^53, power of ten <= 22: one correctly rounded
  operation, so the value polars' cast gives, bit for bit; NaN, Inf, long mantissas and the like
  are still cast by polars) and timestamps of 1-18 digits, recognises DCGM's int64 sentinels by
  their bytes (19 digits from `92233720`) and says why a value is not a sample. Its arrays come
  back without a copy; the extension also writes the Arrow string views of the quarantined lines
  and their numbered reason texts. The rest is unchanged: each distinct label block is parsed
  once in Python, rows carry ids until the accepted rows' label columns are gathered once, the
  quarantine is built column-wise. Without a compiler the numpy scan (one numpy pass for
  newlines and braces, string views and polars casts) runs with the same result, about 3x
  slower; `SCAN_PATH` in dcgm.py and `scan` in this benchmark's JSON say which ran. Odd lines go
  through a character tokenizer, so correctness never depends on the fast path; every test of
  tests/feeds/test_dcgm.py runs on both scans (property tests against prometheus_client and the
  tokenizer, the reference feed replicated checked line by line) and tests/feeds/test_dcgm_scan.py
  compares the two scans on generated text (odd lines, escapes, CRLF, no trailing newline, huge
  lines, sentinels, NaN/Inf, timestamps, values bit for bit). Compiled against numpy scan (issue
  27, part 3), same process, alternating, medians of 7 on the full inputs, 2-core VM at load
  average ~0.8: reference 0.59 -> 0.20 CPU-s, clean 0.82 -> 0.28; this benchmark in one run at
  that load: reference 69.2x -> 180.6x wall (CPU 41.6x -> 124.1x; 205.9x wall at load 0.5),
  clean 142.7x -> 347.8x (CPU 90.2x -> 243.3x). Profile now (reference input, one thread, CPU):
  the compiled scan ~40% (about 80-95 ms for 190 MB), the quarantine of the 341k sentinel lines
  ~25% (views, reason texts and their frame), the per-row checks and the accepted rows' arrays
  ~15%, the UTF-8 check of the input ~7%, the output frame the rest; on the clean input the
  output frame (label columns gathered for 1M rows) is now the largest step after the scan.
  Pieces are parsed on a thread per core; on a loaded machine that buys nothing (CPU time counts
  every thread).
- DCGM parsing of Prometheus `/federate` text (issue 43 part 4): the third input is the clean
  one's fleet as a federating Prometheus writes it (`federate()` in the bench: `# TYPE ... untyped`,
  labels sorted with `instance` and `job`, a millisecond timestamp on every sample, values as Go's
  `FormatFloat(v, 'g', -1, 64)`, so up to 17 significant digits and `e+06` past a million). It was
  ~1.3M samples/CPU-s where clean text gave ~2M: profiled, the compiled scan read a value only
  when its integer was <= 2^53, so every 16-17 digit value was left to polars' cast, which failed
  on "value timestamp" and sent the row through the timestamp split (polars string ops per
  piece); and every input paid a numpy pass over all its bytes for the line bound (a bool array
  of the input's size, its newlines listed) before the scan. Now the scan reads up to 19 digits
  with a power of ten of at most 22 correctly rounded (128-bit integer product or quotient, one
  rounding, ties to even: the value polars' cast gives, bit for bit; tests/feeds/
  test_dcgm_federate.py checks halfway cases and random 16-19 digit texts against `float`), sets
  lines over the bound apart as it meets them (the numpy scan keeps its pass), and numbers a label
  block by comparing it with the block that followed the previous line's block last time (the
  series repeat in one order), hashing only on a miss. Same process, old against new, medians of
  5, 512 GPUs x 20 metrics x 50 scrapes, load average ~10 on the 2-core VM: /federate 0.48 ->
  0.18 CPU-s (1.07M -> 2.81M samples/CPU-s; 84x -> 221x prometheus_client's CPU rate on the same
  text), clean 0.25 -> 0.12 CPU-s. The `--only dcgm_parse` run above was at that load too (wall
  ratios and samples/s are low for it; the CPU ratios hold: /federate 201.6x, clean 179.3x,
  reference 100.5x).
- Chargeback: the rebuild reads the hourly rollup the loader writes at ingestion
  (`raw_dcgm_hourly`, ~12k rows a day for 512 GPUs), never the 15 s samples (unless two sources
  overlap on a node-day); the floor still reads every sample. The rollup's own cost is reported
  apart (`ingest`: once per loaded file in production). See docs/finops.md ("Performance") for
  what each step costs. Peak memory is per measuring process (its own VmHWM, so a child never
  reports the memory of the process that generated the data). The 2 cores are shared with other
  jobs: single runs move by 2-3x, so every figure is a median, and the floor is measured in the
  same invocation, alternating with the rebuild, so the ratio is fair.
- Chargeback ingestion (issue 27): the hourly rollup the loader writes (`raw_dcgm_hourly`) is timed
  one day file at a time, alternating file by file with its floor in the same process (the scan:
  `max()` of every column the rollup reads, through the same view), each run a fresh process; peak
  RSS is that process's. In production `load_dcgm_day` streams a day file by file
  (`stream_batches`): each file is parsed, checked and staged before the next is read, and one
  transaction replaces the day and rolls up the staged samples, so a day's memory is one file's
  batch plus DuckDB's buffers. The growth figure pairs each 4,096-GPU run with a 512-GPU run in the
  same invocation (`--growth-from 512`), so load drift falls on both; data generation, view setup
  and seeding are never timed. Five pairs since issue 27's last stop (three gave 7.6x, 9.0x and 9.9x
  in three `make bench` runs). Why the rollup grows faster than the scan (measured on the bench's
  day files, median of 3, load average 1-2): a plain DuckDB `GROUP BY` of the same keys with only
  `count(*)` grows 8.4-8.8x from 512 to 4,096 GPUs (12,288 -> 98,304 groups a day file,
  timestamp-ordered samples touch every group of the hour in turn), `GROUP BY hour, hostname, gpu`
  alone 9.0x: the hash table outgrows the caches; the 450-byte seconds bitmap per group adds ~1x on
  top. Rolling up slices of 1M samples (the same groups per slice at either size) and merging the
  slices' bitmaps with `bit_or` cut the 4,096-GPU rollup from a table ~17% but not its growth
  (9.8x), so it was not kept. Also fixed: the bitmap's second came from `epoch_ms`, which rounds, so
  a sample in an hour's last half millisecond (microsecond history written straight to
  `raw_dcgm_samples`) indexed second 3,600 and failed the whole load; it now floors whole
  microseconds. Measured again on an idle host (2026-12-04, load average under 1 before each
  command; one thread, so parallel overhead is out of the figure; `bench/bench_chargeback.py --child
  ingest --days 2 --gpus G --threads 1`, two runs each, wall equal to CPU): 0.54 s -> 4.72-4.93 s
  CPU for 2 days, 8.7-9.1x for 8x the samples (+9-14% a sample at 4,096 GPUs); with the bench's two
  threads the CPU figure adds DuckDB's parallel overhead, larger at 4,096 GPUs (5.2-5.9 s CPU, wall
  2.8-3.1 s: 7.2x). Rolling up each hour of a day on its own (a table's row groups pruned by `ts`,
  ~5,000 groups a query at 4,096 GPUs) was no faster (`bench/probe_dcgm_rollup.py hourly --gpus
  4096`: from a DuckDB table holding the day, 24 queries 4.47-4.57 s CPU against one 4.33-4.57 s,
  wall the same), so the excess is not a cache cliff that a smaller hash table would avoid. The
  timed rollup no longer deletes the last file's rows (a bench artifact: the loader's rollup of a
  new day deletes nothing); they are copied out untimed. Issue 27 asks for this figure to be robust
  (a median of paired runs, seeding excluded), not for a bound; it is judged "near-linear" as the
  table's other growth figures are (under 1.25x the size ratio: < 10x for 8x), and reads 8.8-9.1x
  (this run 8.81x), not strictly linear. The production load (`stream_batches`, `load_dcgm_day`)
  rolls up its staged DuckDB table, not Parquet; `bench/probe_dcgm_rollup.py load --gpus 512 --files
  N --threads 2` loads one bench day that way into a DuckDB file (two runs each, load average
  0.5-1.1): the rollup's cost follows the order of its input. Split into 8 files of interleaved
  nodes it took 0.49-0.51 s CPU (0.26-0.27 s wall), against 0.29 s CPU for the same rollup over the
  Parquet file (`--child ingest --days 2 --gpus 512 --threads 2`: 0.57-0.60 s for the 2 days); split
  into 64 per-node files, as a per-node collector writes them, 0.33-0.34 s CPU (0.18-0.19 s wall:
  consecutive samples share a group). Rolling up from the just-written `raw_dcgm_samples` rows
  instead was tried (faster on interleaved files, slower on per-node ones) and not kept. The load
  itself (checks, staging, the insert) is 86-90% of a day's load: 4.6-4.8 s CPU (2.7-2.8 s wall) at
  512 GPUs in 8 files, 8.8-8.9 s (7.4-7.5 s) in 64 files, and 47.6 s CPU (25.1 s wall) at 4,096 GPUs
  in 16 files (one run).
- Simulator: every admission call runs the real engine (`admit_until_stable`) over the running work
  (folded per queue, flavor and priority where nothing shown may preempt it) and the shown waiting
  work; docs/simulator.md ("Performance") has the profile. What made a call cheap (issue 21, part 6;
  results bit-identical before and after, checked on both mixes): the cohort tree with its quotas,
  subtree quotas, local quotas and lendable amounts is built once per policy state and copied per
  call (was 44% of a call); admitted usage is added per queue in bulk (what a node passes to its
  parent, max(0, usage - local quota), telescopes, so the sum is exact); the trace's objects are
  frozen out of the cyclic GC and each call's snapshot is freed by reference counting (full
  collections had walked all 100k jobs every ~100 calls); folded running groups are reused while
  unchanged; victim walks stop at the preemptor's priority under `LowerPriority`. A second round
  (results bit-identical; per-job outcomes compared on 12.5k jobs of both mixes and pinned in
  tests/simulate/test_outcome_pinned.py) cut the per-call fixed costs: simulator calls build no
  estimated starts (`admit_until_stable(estimates=False)`; `pending_infos` had been 8% of the run),
  released snapshots' nodes are emptied and reused, static quota answers (potential, spot rule,
  cohort heights) memoized per policy skeleton, the quota arithmetic and `evolve` written without
  helper and min/max calls. Before/after, min of 3 interleaved runs of 25k jobs under shared load:
  light 10.73 -> 8.34 s CPU (-22%), preempting 9.77 -> 7.72 s (-21%); 3k jobs, callgrind
  instructions less start-up: light 5.57 G -> 4.21 G, preempting 5.92 G -> 4.53 G. The light mix is
  the ElasticFlow map (training lanes only), the preempting mix the fleet map (incident and release
  shares reclaiming borrowed GPUs): that is the realistic input for the target, since reclaim is
  what the shipped policy does. The simulator is single-threaded, so its target is judged on the
  process's CPU time; on these 2 shared cores its wall time has ranged from 1x to 10x its CPU time
  with other load. The FIFO baselines do not use the engine (0.5-0.7 s per 100k jobs). Host to host,
  this figure moves more than the others: the 2026-12-04 run's host was faster on most rows (the 50k
  tick 1.77 -> 0.67 s, the admission cycle 0.048 -> 0.040 s) and slower on the simulator (light mix
  29.5 -> 33.8 s, strict baseline 20.1 -> 24.5 s). The code did not slow down: on that host the
  commit of the 29.5 s run (a86879b, in a worktree, run with `PYTHONPATH=<worktree> .venv/bin/python
  bench/bench_simulate.py --sizes 25000 --baselines-at 0 --preempting-at 0 --nodes-at 0
  --kueue-cohorts ''`) and the run's commit, alternated three times (load average 1.2-1.7, this
  command's own), took 8.30-8.41 s and 8.31-8.82 s CPU, wall the same, for 25k jobs of the light
  mix. Its profile (`.venv/bin/python -m cProfile -s tottime bench/bench_simulate.py` with the same
  arguments) has no step over 8% of the run (`_add_admitted`, the bulk usage sum of each call's
  snapshot, is the largest); a further cut needs the snapshot kept between calls.
- Simulator, rerun on 2026-12-06 20:15 UTC (a gang's pods may share a node; the GPU-hours the
  serving lane's lending rule keeps idle are counted after every instant). The rows moved both
  ways by up to a third on this host with code that did not change: the strict baseline 25.9 ->
  35.1 s and fifo-flavors 28.0 -> 25.9 s; within this one run the shared cluster02 trace took
  1.03 s per 1,000 jobs in `simulate` and 1.61 s in `simulate_traces` a minute later. So the
  change was measured A/B, alternating the commits in worktrees (each run imports its tree's
  package first, asserted), one process at a time on the idle host (load average 0.93-1.00, the
  run itself): the policy on cluster04 at 640 GPUs, fleet mix, quota-only, 3 runs each: median
  12.39 s CPU (12.40 s wall) before the idle count (eec553b) and 12.70 s CPU (12.71 s wall) with
  it (2d26113); on the policy's nodes: 23.04 s CPU (23.05 s wall) before the node
  change (cbc6304) and 22.62 s CPU (22.63 s wall) after. A first series (5 and 4 runs, CPU only)
  gave 13.82 -> 12.68 s and 27.9 -> 25.9 s.
  Profiled, the idle count is 0.41 s of a 35.4 s cProfile run (1.2%). The node-aware admission
  cycle bench now has 1,200 nodes, not 1,000: its state is the packaged policy x100, and the
  serving lane's 8 L4s (200 nodes of 4 at that scale) joined the policy after the 1,000 was
  written; 1.46x the quota-only cycle (target 2x).
- Simulator, rerun on 2026-12-06 23:13 UTC (`--only simulate_traces`: the serving lane lends to
  candidate runs with a 30-minute bound on the wait for their checkpoint, every lane has a wait
  target and ages toward it; load average 0.68-0.72 before each run): two runs a minute apart gave
  cluster04 0.89 and 1.04 s CPU per 1,000 jobs (885 preemptions, 20,127 engine calls; the table
  has the second), cluster02 1.16 and 1.08 s (406 preemptions), against 1.10 s and 1.61 s at 20:15
  UTC. On this host's noise (above: a third with unchanged code) that says no more than "not
  slower"; the 100k `simulate` rows were not rerun.
- Admission cycle: each run gets a new policy state (as each gate tick builds one), so the
  cached cohort tree is rebuilt every time. Of a 10k-pending cycle about half is the reasons,
  positions and estimated starts of the 10k waiting workloads (`pending_infos`): built without
  the frozen-dataclass cost (a frozen `PendingInfo` cost 40 ms of 10k), with one pass over the
  running work per cohort tree for the start estimates (was one per flavor set); the rest is
  the queue sort, the GC's young collection of what the cycle built, and the cycle itself.
- Chargeback rebuild (issue 23, part 7): the whole-bill models had taken the ratio to the GROUP BY
  floor from 2.85x to about 4.7x. Profiled per model (CPU seconds of a 30-day rebuild from a fresh
  seed, `bench_chargeback.py`'s seed, median of 3): before, 3.31 s; the runner's own bookkeeping
  took 2.7 s of 6.3 s wall in a cProfile of a 3-day rebuild (each model's `model_builds` row in a second transaction with its
  own commit, the model's SQL planned a second time to look for new columns, an
  `information_schema` lookup per model, a limit-0 `create` plus an `insert` for each new table)
  and `int_gpu_busy` 0.49 s (two group-bys over the 368,640 rollup rows). After: 1.92 s (a model
  and its log row commit once; a table's columns compared with its yml before planning again; the
  schema read once per build; a new table made from its query; `int_gpu_busy` groups hours into
  days once per source and checks for multi-source node-days on that result, ~85k rows: 0.35 s).
  The bench: 1.64x the floor in CPU seconds (1.55 s / 0.946 s), 2.01x in wall seconds under a load
  average of ~16 on the 2 cores; a one-day rebuild costs the same CPU as before parts 1-6 (1.00x, 1.106 s against 1.11 s,
  medians of 5 alternating runs of both trees).
  Then the wall target: the idle machine had the month's rebuild at 2.75x the floor in wall seconds
  (1.218 s / 0.442 s) though 1.67x in CPU: the floor keeps both DuckDB threads busy, the rebuild ran
  its 53 models one at a time. Profile (serial 30-day rebuild, every statement timed, CPU ms of
  1,272): the models' statements 898, commits 233 (mostly the one automatic checkpoint, at
  `int_gpu_busy`'s commit), `model_builds` rows 81, a `count(*)` per model 32, `describe` 25;
  Python under 10; `int_gpu_busy` 314, the critical path through it to `budget_burn` ~0.64 s. Now
  independent models run at the same time, one cursor and transaction each, up to DuckDB's
  `threads` (a model starts once every selected model it depends on has committed; a failing
  model rolls back alone and stops the rest from starting), and a new table's row count is its
  `create ... as` answer. The per-model costs scheduled on two workers take 0.59-0.61 of the
  serial time; CPU about the same (medians of 5 alternating runs of both trees under load 3.5-5:
  1.53 -> 1.77 s and 1.98 -> 2.04 s; DuckDB skips its automatic checkpoint while another write
  transaction is open, so the timed build checkpoints a larger WAL). All 66 tables equal the
  serial build's. This row is judged on the wall ratio only, the CPU ratio shown beside it (it
  had been met when either was <= 2). And a cursor's progress
  bar setting (on where no terminal is, off on the connection) no longer sends the build back to one
  model at a time. docs/finops.md ("Performance", "Models at the same time").
- Chargeback rebuild (issue 23, part 8): profiled (each model's start and end logged, every
  statement timed), the month's build checkpointed the whole warehouse in the middle, at the
  commit that took the WAL past DuckDB's 16 MiB `checkpoint_threshold` (`int_gpu_busy`'s, on the
  critical path: 0.21 CPU s of the serial build's 2.29, 0.09-0.38 s wall, the other worker's commits
  waiting); the two concurrent models each asked for both DuckDB threads on the 2 cores (most
  read tables under one row group, which one thread scans anyway); and each of the bench's three
  builds spent ~23 ms in probes before its first model. Now `Project.build` raises the threshold
  to 1 GiB while it runs (every commit still writes and syncs the WAL; the warehouse is
  checkpointed once, at the close, which the bench times and counts in the rebuild: `rebuild_s` is
  build + close, the seed's writes checkpointed untimed before the clock starts),
  divides `threads` among the models running at the same time (1 each here), and counts
  temporary objects in `information_schema` (both settings restored after the last build on the
  database; SQL models unchanged, results the same, 347 data tests pass, reconciliation exact).
  Measured under other jobs' load (2.1-2.3), the bench's rebuild child, the two trees
  alternating, medians of 7: CPU 2.389 -> 1.998 s (-16%), wall 2.349 -> 1.983 s; the close 0.143
  -> 0.346 s, so build and close together 2.411 -> 2.329 s (-3%). A one-day rebuild: CPU 1.177 ->
  1.149 s. The whole bench (`--runs 5 --no-tests`, invocations alternating, load 2.1-2.7): wall
  ratio 1.71x and 1.38x after, 2.00x and 1.83x before (the load flatters wall ratios: the floor's
  two threads slow more). The idle machine's ratio is `make bench`'s. docs/finops.md
  ("Performance", "The build's checkpoint and threads").
- Demo pricing: a pricing run is one in-process Dagster run of 51 steps (every ingest and cost
  asset, one step each for the whole range). Most of a one-day run is the fixed cost of those
  steps, not the day's data: Dagster's SQLite event log commits each of the run's ~3,500
  events (step events, one per data test as an asset check) on its own connection, and each
  step opens the warehouse and builds its model. Found and removed while measuring: a process
  per step (the multiprocess executor: the warehouse pool of one slot serialized the steps
  anyway), the policy parsed twice per step (0.2 s each), DCGM loads of one statement per file
  (24 per day) and the ledger snapshot inserted row by row (5.3 s a month; one Arrow batch now).
  What is left per day is mostly the DCGM ingest (~1.4 s for 64 GPUs at 15 s).
- Sensor tick (`bench/bench_gate.py`): the admission sensor evaluated in process against a real
  SQLite ledger and a real Dagster instance (SQLite run storage), the packaged policy, requests
  of six lanes taken from `examples/requests/` (one GPU each, each its own output), the active
  ones admitted on h100-ondemand with a STARTED run tagged as the gate tags it. 5,000 pending /
  500 active is a busy pool's queue today, 50,000 / 2,000 the fleet size the issue plans for.
  The first tick in a fresh process is reported apart (it parses every payload once and writes
  a `waiting` row per pending request); the median is of the ticks after it, the steady queue
  a 15 s sensor sees. Profile (cProfile, 5k / 500, one steady tick, before -> after): before,
  `Ledger.states` was 60% of the tick (`JobRequest.from_json` re-validating all 5,500 payloads
  ~1.1 s, the event-log GROUP BY 0.2 s), `build_state` + `from_policy` 20% (`matching_flavors`
  per request), the Dagster run records of all 5,500 request ids 5%, the policy YAML parsed
  again 4%, `lane_snapshots` 6%. After: states read from `gp_request_state`, a RequestState
  reused while its row is unchanged (payloads read only for changed rows), Workloads reused
  while their state and the policy object are the same, the policy re-parsed only when its
  file changes, flavors per request shape once per policy, run records only for requests
  admitted at least once, holders' text once per flavor list. What is left, in order: the
  `gpu_queue` snapshot (`lane_snapshots`, a WaitingRow per pending request, and the digest
  of every waiting row) ~30%, the admission engine (`admit_until_stable`, its
  `pending_infos`) ~15%, reading the state rows ~15%, Dagster's run-record deserialization
  (~0.3 ms a run) ~7%, `record_plan` / `name_blockers` / `waiting_for_upstream` ~10% (the
  50k / 2,000 profile; 5k the same order). Measured on this machine under other jobs' load (load average 9-19 on 2
  cores: wall 2-4x CPU), CPU time of the median steady tick, same script, base commit f1169cb
  and this one run one after the other: 5k / 500: 0.95-1.00 s -> 0.27-0.37 s (target 0.25 s;
  the base's CPU here equals its idle wall figure, 0.96 s); 50k / 2,000: 3.3-3.7 s (target 1 s:
  not met). Growth 5k -> 50k: ~11x CPU for 9.5x the requests (slightly worse than linear).
  Then (issue 27, the tick made incremental): each tick gets the cursor the one before returned,
  as the sensor daemon passes it (before, every tick ran with no cursor and so built the whole
  `gpu_queue` materialization, which the real sensor does only when the queue changed or every
  5 minutes; `ticks_materialized` shows which ticks did). Profile before (cProfile, ticks 3-5;
  5k / 500 and 50k / 2,000 the same order): full garbage collections triggered by the tick's
  short-lived objects, walking every cached request (0.16 s every other tick at 5k, charged to
  whatever ran: `_target`, `dict.items` in Dagster's TableRecord checks), `lane_snapshots` ~30%
  (a frozen-dataclass WaitingRow per pending request, 2.3 us each), the engine ~17%, reading the
  state rows ~17% (every column of every live row compared to the cached one), the run records
  ~8%, `waiting_for_upstream` / `awaiting_approval` / `name_blockers` (a `dataclasses.replace`
  per wait) / `record_plan` ~12%. Changed: the cyclic GC paused for the tick (`gc_paused`, as
  the engine already did for its cycles); `Ledger.states` reads each row's version (seq,
  last_event_id) from a covering index and whole rows only for changed ones, keeping the parsed
  request of a changed row; WaitingRow a named tuple; the blocker text joined into a PendingInfo
  built field by field; the approval, upstream and preemptor holds skip what cannot hold
  (no approval lane, no produced input, nothing stopping); the very same state objects as last
  tick reuse last tick's split into pending workloads / admitted requests and its holds; a
  pending request's workload is kept while its request object, submission time, approvals and
  the policy are the same (a new waiting row no longer rebuilds it); `reconcile` skips
  requests with no run and none due; `record_plan` formats a wait only when it writes it. `tests/gate/test_incremental_tick.py` checks the ticks against ticks from
  scratch with requests, a preemption, a rejection and runs ending between them. Profile after
  (50k / 2,000, share of the tick): the engine ~27% (`pending_infos`, `_head`, its init),
  `lane_snapshots` ~20%, the Dagster run records of the 2,000 admitted requests ~15%
  (deserializing each run, ~0.13 ms), `name_blockers` ~6%, `build_state` ~6% (mostly each
  admitted request's checkpoint directory looked at), reading the state versions ~7%, the digest
  ~4%, `record_plan` ~4%. Same script, base commit ca61e5a (its bench: no cursor) then this
  one, one after the other (load average 2-5 on 2 cores), CPU of the median tick after the
  first: 5k / 500 0.483 s (ticks 0.37-0.64) -> 0.120 s (0.115-0.124; target 0.25 s: met);
  50k / 2,000 3.03 s (2.78-3.16) -> 1.73 s (1.41-2.02; target 1 s: not met). The code alone
  (this commit's bench with the cursor dropped, every tick materialized as the base's were):
  0.170 s (0.14-0.18) and 1.50 s (1.24-1.70). Over several later runs (load average 4-7) the
  steady 50k ticks took 1.25-2.1 s and the second tick (it reads every row the first rewrote,
  as after the queue moved) 3.3-4.0 s; 5k 0.115-0.163 s. Growth 5k -> 50k: 6.3x -> 11-14x CPU
  for 9.5x the requests (not linear: the small queue's fixed costs went, the passes over every
  live request are left, and their cost per request is higher at 50k). What is left: the engine, the snapshot and the
  digest are recomputed every tick (they depend on the clock), the run records are read whole
  (an incremental read by `updated_after` needs a margin against late commits and a count
  against deleted runs), a tick after the queue moved rebuilds every changed RequestState
  (~30 us a row: datetime parsing, the details JSON, a frozen dataclass).
  Then (issue 27, second round: reuse what did not change). Profile before (timers around
  each step, 50k / 2,000, CPU of ticks 3-6 at load average 1.5-3, 1.69 s a tick): the engine
  0.43 s (`pending_infos` 0.18, its cycles 0.15, its init 0.09), `lane_snapshots` 0.30 s, the
  Dagster run records 0.27 s (every run deserialized every tick), reading the state versions
  0.16 s, `build_state` 0.10 s (0.085 s of it each admitted request's checkpoint directory
  looked at through pathlib), the digest 0.11 s, `name_blockers` 0.09 s, `record_plan` 0.07 s.
  Changed: the sensor keeps the runs it read between ticks and reads them through ids and
  statuses, which cost no deserialization (the ids of the live requests' runs: new ones read
  in full, gone ones dropped; per status last read, which kept runs still have it: those that
  changed, and those in a start phase, whose timestamps give `starting_for`, read in full),
  with every run read in full again at least every 10 minutes (`RUNS_FULL_READ_S`; the gate's
  request, attempt and flavor tags are set at launch and never changed, a hand edit is seen
  then); this needs no `updated_after` margin (a steady bench's runs were all updated within
  any safe margin of the tick) and no private storage tables; the digest is kept for an
  unchanged document (a list comparison instead of encoding 50k rows); a waiting row's
  request part (name, owner, team, target, GPUs) kept per request object, eta datetimes once
  per distinct estimated start; the admitted requests' checkpoint check without Paths (one
  stat for a request with no checkpoint directory, 85 -> 9 ms for 2,000); the engine builds
  one BudgetExhausted status per max_cost value within a head search (a queue over its lane's
  budget formatted one reason per workload, 50k a tick; the engine alone on the captured 50k
  state 0.48 -> 0.36 s, its result unchanged, the 1221 Kueue cases pass).
  `tests/gate/test_incremental_tick.py` checks the incremental run read against one from
  scratch with runs failing, canceled, deleted, deleted and re-added, added, starting,
  requests leaving and rejoining the live set, and a hand-edited tag seen at the next full
  read; the digest against one encoded afresh. Profile after (same timers, load average 1.8):
  1.21 s a tick: the engine 0.35 s (`pending_infos` 0.19, init 0.09, cycles 0.07),
  `lane_snapshots` 0.29 s, state versions 0.14 s, `record_plan` 0.10 s, `name_blockers`
  0.09 s, `build_state` 0.05 s, the digest 0.05 s, the runs 0.04 s. Same script, base commit
  e5ccaf1 and this one alternated (base, new, base, new; load average 2.1-3.9 on 2 cores, wall
  within 5% of CPU), CPU of the median tick after the first: 5k / 500 0.287, 0.228 s -> 0.178,
  0.169 s; 50k / 2,000 2.118, 2.095 s -> 1.748, 1.618 s (the steady ticks 3-5: 1.58-2.31 s ->
  1.21-2.02 s; target 1 s: not met). Growth 5k -> 50k: 7.4x, 9.2x -> 9.8x, 9.6x CPU for 9.45x
  the requests (about linear; the 5k base's spread makes the base ratio move most). What is
  left: passes over every live request that depend on the clock or on objects made again each
  tick: the engine's waits (a PendingInfo per waiting workload, its estimated start from the
  clock), the `gpu_queue` rows (their waits, from the same), the state versions read, the
  waits compared with the recorded rows (`record_plan`), the blockers named per wait; reusing
  them needs the engine's result split into what the clock moves and what it does not.
  Then (issue 27, third round: the sort and the per-row reads kept). Profile before (timers
  around each step, 50k / 2,000, CPU of ticks 3-5, base commit 2ad0fb7): 1.14 s a tick: the engine 0.30 s, `lane_snapshots` 0.26 s, state versions 0.17 s,
  `name_blockers` 0.09 s, `record_plan` 0.05 s, `build_state` 0.05 s, the digest 0.04 s, the
  runs 0.03 s.
  Changed: the engine keeps each queue's sorted order for the same (frozen, kept) Workload
  objects in the same order (an identity check of the list instead of sorting 50k keys; a
  stable sort of the same sequence gives the same order; Admission Fair Sharing queues, whose
  key moves with usage, are sorted every time); `lane_snapshots` keeps what it reads of each
  RequestState (request, id, lane, the row's static part, the submission time in whole
  microseconds) per state object, which `Ledger.states` hands out again while its row is
  unchanged, and computes each wait from whole microseconds exactly as
  `timedelta.total_seconds` does (the rows are equal to the ones built before, bit for bit).
  The 1221 Kueue cases pass; `tests/gate/test_incremental_tick.py` also checks a new state
  object for the same request (another lane, request or submission time) read afresh, and
  `tests/admission/test_engine.py` a replaced workload sorted afresh. Profile after (same
  timers): 1.00 s a tick (run just before the base's, load average
  3-4): the engine 0.23 s, `lane_snapshots` 0.23 s, state versions 0.13 s (unchanged code:
  the load), `record_plan` 0.09 s, `name_blockers` 0.09 s, the digest 0.05 s, `build_state`
  0.04 s, the runs 0.03 s. The full bench, base 2ad0fb7 and this one alternated (base, new, base,
  new; load average 2.9-4.7 on 2 cores from other jobs, wall up to 1.3x CPU), CPU of the
  median tick after the first: 5k / 500 0.155, 0.181 s -> 0.166, 0.174 s; 50k / 2,000 1.735,
  1.648 s -> 1.752, 1.744 s (the steady ticks 3-5: 1.25-1.98 s -> 1.20-1.90 s; the median
  includes the second tick, ~4 s, which rereads every row the first rewrote); growth 5k -> 50k
  11.2x, 9.1x -> 10.6x, 10.0x. At this load the spread between ticks (0.6 s) is larger than
  what was saved, so the bench shows no difference beyond its noise; the per-step timers
  above are the figure for the change. Target 1 s: not met on this loaded machine. What is
  left: the engine's waits (`pending_infos`, a PendingInfo and a message per waiting
  workload, the estimated start from the clock), the `gpu_queue` rows (each one's wait moves
  with the clock), the state versions read (52k rows through SQLAlchemy; an incremental read
  by event id needs commit-order care on PostgreSQL, whose sequence values can commit out of
  order), `record_plan` and `name_blockers` (a comparison per wait).
- /metrics scrape (`bench/bench_metrics.py`): 10,000 and 100,000 pending (+500 admitted), each
  with a `submitted` and a `waiting` event (admitted: `admitted`), as after a gate tick, on a
  real SQLite ledger; the packaged policy's 8 lanes, ~118 samples. Timed: the ledger unchanged
  since the last scrape (Prometheus every 15 s against a gate that changed nothing), changed by
  one event before every scrape (a tick that moved one request), changed by 1,000 requests'
  events before every scrape (a busy tick; reported, no target), and the first scrape of a new
  registry (a restarted endpoint reads the queue in full; reported). History: each scrape once
  regrouped every ledger event by request (79 ms CPU at 10k, ~75% in SQLite); then the grouped
  queries over `gp_request_state`, run again on every change (idle machine: 7.6 ms at 10k,
  47.9 ms at 100k, over the 20 ms target). Now `DemandCache` keeps the figures and each
  request's part of them (pending, admitted, counted, budget, first admission; a heap of
  pending submission times per lane for the oldest wait) and, per scrape, asks the event log
  for the events after the newest id it has seen (ids missing below it, PostgreSQL's
  out-of-order commits, asked for again for two minutes), reads only the touched requests'
  state rows by key and replaces their parts: O(changes). Measured on this machine under other
  jobs' load (load average 4-9 on 2 cores), CPU medians, base commit ca61e5a and this one run
  one after the other, same script: changed-ledger scrape 10k 7.4-18.8 ms -> 1.9-3.5 ms, 100k
  29.5-37.2 ms -> 2.4-3.3 ms (the base's spread is the load; the new figure is the same at
  both sizes); unchanged 1.4-3.8 ms before and after. Profile of the changed scrape now (10k,
  cProfile, 40 scrapes): prometheus-client's exposition (`sample_line`) ~30%, applying the
  change (`_read_changes`: the event range and one state row) ~13%, building the figures from
  the sums (`_figures`) ~12%, the gate's per-lane table (`read_gate_snapshot`; absent in this
  bench, so each scrape takes the missing-table path) ~18%, `plan_pools` ~9%. A busy tick's
  1,000 changes: 11-18 ms CPU at 10k and 12-20 ms at 100k (~10 us a change: reading the state
  rows by key ~60%, applying ~25%). The first scrape reads the queue in full: ~90-115 ms CPU at
  10k, ~0.6-0.8 s at 100k (the pending requests' rows, one by one into Python; the base's
  grouped queries took ~30 ms there); the cache also reads in full when the policy or the
  budget period changes, a burst exceeds 2,000 events or a quarter of the requests kept, and
  every 10 minutes as a backstop. What it keeps: ~34 MiB at 100k pending (tracemalloc; ~55 MiB
  peak while reading in full).
- Figures move with machine load (2 shared cores); each script reports medians of several runs.
"""


def _previous_sections(path: Path) -> dict[str, tuple[str, list[dict]]]:
    """The sections of an existing BENCHMARKS.md by benchmark name: (text, results)."""
    if not path.exists():
        return {}
    out: dict[str, tuple[str, list[dict]]] = {}
    text = path.read_text()
    names = {name for name, _, _ in BENCHES}
    for part in text.split("\n## ")[1:]:
        name = part.split("\n", 1)[0].strip()
        if name not in names:
            continue
        body = "## " + part.rstrip() + "\n"
        results = []
        for line in part.splitlines():
            if line.startswith("    {"):
                try:
                    results.append(json.loads(line.strip()))
                except json.JSONDecodeError:
                    pass
        out[name] = (body, results)
    return out


def main(argv: list[str] | None = None) -> int:
    """`make bench` runs every benchmark. `--only a,b` reruns the named ones and keeps every other
    section (and its figures in the summary) from the existing docs/BENCHMARKS.md, saying which
    sections are new and which are kept: for measuring one issue's targets without the hour-long
    chargeback runs."""
    import argparse

    ap = argparse.ArgumentParser(prog="bench/run_all.py")
    ap.add_argument("--only", default=None, help="comma-separated benchmark names to rerun")
    args = ap.parse_args(argv)
    only = {n.strip() for n in args.only.split(",")} if args.only else None
    known = {name for name, _, _ in BENCHES}
    if only and not only <= known:
        print(f"--only: unknown benchmark(s) {sorted(only - known)}; known: {sorted(known)}", file=sys.stderr)
        return 2
    out_path = ROOT / "docs" / "BENCHMARKS.md"
    previous = _previous_sections(out_path) if only else {}
    previous_when = previous_machine = ""
    if only and out_path.exists():
        head = out_path.read_text().split("\n", 4)
        previous_when = next((x for x in head if x.startswith("Written by")), "")
        previous_machine = next((x for x in out_path.read_text().splitlines() if x.startswith("Machine: ")), "")
    sections = []
    by_name: dict[str, list[dict]] = {}
    failed = 0
    kept = []
    for name, cmd, target in BENCHES:
        if only is not None and name not in only:
            if name in previous:
                sections.append(previous[name][0])
                by_name[name] = previous[name][1]
                kept.append(name)
            else:
                sections.append(f"## {name}\n\nTarget: {target}\n\nNot run (`--only`) and not in the previous file.\n")
            continue
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
    when = f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC"
    if only is not None:
        # the history so far (a full run, then each rerun), without its last "Kept from" note
        before = previous_when.split(" Kept from the previous run:", 1)[0].rstrip(".") or "Written by `make bench`"
        written = (f"{before}; rerun on {when} with `bench/run_all.py --only {','.join(sorted(only))}` "
                   f"for: {', '.join(sorted(only))}. Kept from the previous run: {', '.join(kept) or 'none'} "
                   f"(measured on its machine: {previous_machine.removeprefix('Machine: ').rstrip('.') or 'unknown'}).\n\n")
    else:
        written = f"Written by `make bench` on {when}.\n\n"
    doc = (
        "# Benchmarks\n\n"
        + written
        + f"Machine: {machine()}.\n\n"
        "Every figure is a median of several runs inside the named script; ratios are against the "
        "baseline the issue names. CI does not run benchmarks.\n\n## Summary\n\n"
        + "\n".join(summary(by_name))
        + "\n\n"
        + NOTES
        + "\n"
        + "\n".join(sections)
    )
    (ROOT / "docs").mkdir(exist_ok=True)
    out_path.write_text(doc)
    print("wrote docs/BENCHMARKS.md", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
