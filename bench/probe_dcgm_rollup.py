"""Probes behind the chargeback-ingestion notes in docs/BENCHMARKS.md (not run by `make bench`).

Run (after `bench/bench_chargeback.py --days 2 --gpus G` has written the day files):
  .venv/bin/python bench/probe_dcgm_rollup.py hourly --gpus 4096 [--threads 1]
  .venv/bin/python bench/probe_dcgm_rollup.py load --gpus 512 --files 8|64 [--threads 2]

`hourly`: the loader's rollup SQL over one bench day held in a DuckDB table, as one query and
as 24 queries of one hour each (row groups pruned by `ts`), to tell whether a smaller hash table
would make it cheaper. `load`: one bench day loaded the production way (`stream_batches`, as
`load_dcgm_day` does) into a fresh DuckDB file, split into `--files` sources by node (`--files`
equal to the nodes: one file per node, as a per-node collector writes; fewer: each file
interleaves several nodes' samples in time order), timing the whole load and the rollup in it.
Each prints one JSON line per run with CPU and wall seconds.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import duckdb
import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_chargeback import MEMORY_LIMIT, START, day_file  # noqa: E402

from gpu_platform.finops.feeds import load  # noqa: E402
from gpu_platform.finops.feeds.schemas import FeedBatch  # noqa: E402


def _timed(fn) -> tuple[float, float]:
    w0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.process_time() - c0, time.perf_counter() - w0


def hourly(gpus: int, threads: int, runs: int) -> None:
    con = duckdb.connect(config={"threads": threads, "memory_limit": "12GB"})
    con.execute(
        "create temp table s as select ts, metric, value, hostname, gpu, gpu_instance_id, "
        "null::varchar as gpu_instance_profile, namespace, pod, model_name, source, null::date as day "
        "from read_parquet($f)", {"f": str(day_file(gpus, START))},
    )
    hour0 = con.execute("select date_trunc('day', min(ts)) from s").fetchall()[0][0]
    sql = load._ROLLUP_SELECT.format(rows="s", day="day", where="AND ts >= $a AND ts < $b", distinct=load._SECONDS_SET)
    for _ in range(runs):
        for step in (24, 1):
            def run(step=step):
                con.execute(f"create or replace temp table t as select * from ({sql}) limit 0", {"a": hour0, "b": hour0})
                for h in range(0, 24, step):
                    a = hour0 + timedelta(hours=h)
                    con.execute(f"insert into t {sql}", {"a": a, "b": a + timedelta(hours=step)})
            cpu, wall = _timed(run)
            print(json.dumps({"probe": "hourly", "gpus": gpus, "threads": threads, "queries": 24 // step,
                              "cpu_s": round(cpu, 3), "wall_s": round(wall, 3)}))


def load_day(gpus: int, files: int, threads: int, runs: int) -> None:
    df = pl.read_parquet(day_file(gpus, START)).with_columns(
        pl.col("source_line").cast(pl.Int64),
        *[pl.lit(None, pl.Utf8).alias(c) for c in ("pci_bus_id", "device", "gpu_instance_profile", "extra_labels")],
        ("dcgm/part-" + (pl.col("hostname").str.slice(5).cast(pl.Int64) % files).cast(pl.Utf8) + ".prom").alias("source"),
    )
    empty_q = pl.DataFrame(schema=load._TABLES[load.RAW_DCGM_QUARANTINE])
    parts = [(src, FeedBatch(rows=g, quarantine=empty_q, rows_in=g.height))
             for (src,), g in df.group_by(["source"], maintain_order=True)]
    rollup = load._insert_rollup
    spent = [0.0, 0.0]

    def timed_rollup(*a, **k):
        cpu, wall = _timed(lambda: rollup(*a, **k))
        spent[0] += cpu
        spent[1] += wall

    for _ in range(runs):
        spent[:] = [0.0, 0.0]
        load._insert_rollup = timed_rollup
        try:
            with tempfile.TemporaryDirectory() as tmp:
                con = duckdb.connect(f"{tmp}/w.duckdb", config={"threads": threads, "memory_limit": MEMORY_LIMIT})
                w0, c0 = time.perf_counter(), time.process_time()
                load.stream_batches(con, "dcgm", parts, day=START, replace_prefix="dcgm/")
                cpu, wall = time.process_time() - c0, time.perf_counter() - w0
                con.close()
        finally:
            load._insert_rollup = rollup
        print(json.dumps({"probe": "load", "gpus": gpus, "files": len(parts), "threads": threads,
                          "load_cpu_s": round(cpu, 2), "load_wall_s": round(wall, 2),
                          "rollup_cpu_s": round(spent[0], 3), "rollup_wall_s": round(spent[1], 3)}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("probe", choices=["hourly", "load"])
    ap.add_argument("--gpus", type=int, default=512)
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=2)
    args = ap.parse_args()
    if not day_file(args.gpus, START).exists():
        raise SystemExit(f"no bench day file for {args.gpus} GPUs: run bench/bench_chargeback.py --days 2 --gpus {args.gpus}")
    if args.probe == "hourly":
        hourly(args.gpus, args.threads, args.runs)
    else:
        load_day(args.gpus, args.files, args.threads, args.runs)


if __name__ == "__main__":
    main()
