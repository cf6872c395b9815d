"""Peak memory of loading one FOCUS file (issue 24, class 9: memory proportional to need).

Generates a FOCUS 1.0 CSV of `--mb` megabytes (default 1,024: 1 GB; every row charged on one
day, so the whole file is loaded into the warehouse, the worst case), then loads it in a fresh
process the way the ingest does (`load_focus_day` into a DuckDB file) and reports that
process's peak RSS (VmHWM from /proc/self/status) against the file size as one JSON line:

    {"benchmark": "focus_memory", "file_mb": ..., "peak_rss_mib": ..., "baseline_rss_mib": ...,
     "growth_mib": ..., "peak_over_file": ..., "batch_mib": ..., "rows": ..., "seconds": ...}

`baseline_rss_mib` is the process after its imports, before the load; `growth_mib` the peak
above it. Target: the growth stays under 2x the largest batch plus a constant (it does not grow
with the file), so the documented 2 GiB file limit loads on the 24 GiB machine.

    .venv/bin/python bench/bench_focus_memory.py [--mb 1024] [--batch-mib 16] [--mode ingest|parse|whole]

`--mode parse`: only read and validate the file batch by batch (`iter_focus`); `--mode whole`:
`load_focus`, the whole file in memory at once (what every load did before; use a small --mb).
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DAY = date(2026, 11, 28)

HEADER = [
    "BilledCost", "BillingAccountId", "BillingAccountName", "BillingCurrency", "BillingPeriodEnd",
    "BillingPeriodStart", "ChargeCategory", "ChargeClass", "ChargeDescription", "ChargeFrequency",
    "ChargePeriodEnd", "ChargePeriodStart", "ContractedCost", "EffectiveCost", "InvoiceIssuerName", "ListCost",
    "ListUnitPrice", "PricingQuantity", "PricingUnit", "ProviderName", "PublisherName", "RegionId",
    "ResourceId", "ResourceName", "ServiceCategory", "ServiceName", "SkuId", "Tags",
]


def _row(i: int) -> list[str]:
    hour = i % 24
    cost = f"{(i % 997) * 0.0137 + 0.5:.6f}"
    return [
        cost, "123456789012", "Perception", "USD", "2026-12-01T00:00:00Z", "2026-11-01T00:00:00Z", "Usage", "",
        f"p5.48xlarge on demand, instance {i}", "Usage-Based",
        f"2026-11-28T{hour:02d}:59:59Z" if hour == 23 else f"2026-11-28T{hour + 1:02d}:00:00Z",
        f"2026-11-28T{hour:02d}:00:00Z", cost, cost, "Amazon Web Services", cost, "98.32", "1", "Hours",
        "AWS", "AWS", "us-east-1", f"arn:aws:ec2:us-east-1:123456789012:instance/i-{i:017x}",
        f"gpu-node-{i}", "Compute", "Amazon Elastic Compute Cloud", "SKU-P5",
        '{"team": "perception", "lane": "candidate_train"}',
    ]


def generate(path: Path, mb: float) -> int:
    """Write a FOCUS CSV of about `mb` MB (10^6 bytes); returns its rows."""
    target = int(mb * 1_000_000)
    rows = 0
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(HEADER)
        while f.tell() < target:
            writer.writerows(_row(rows + k) for k in range(10_000))
            rows += 10_000
    return rows


def _vm(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def child(path: Path, mode: str, batch_mib: float, duckdb_memory: str = "") -> dict:
    import duckdb

    from gpu_platform.finops.feeds import focus
    from gpu_platform.finops.feeds.ingest import load_focus_day

    batch_bytes = int(batch_mib * (1 << 20))
    baseline = _vm("VmRSS")
    t0 = time.perf_counter()
    if mode == "ingest":
        with tempfile.TemporaryDirectory() as tmp:
            feeds = Path(tmp) / "feeds"
            (feeds / "focus").mkdir(parents=True)
            # the feed folder must hold the file itself (a symbolic link out of it is refused)
            try:
                (feeds / "focus" / path.name).hardlink_to(path)
            except OSError:
                shutil.copy(path, feeds / "focus" / path.name)
            config = {"memory_limit": duckdb_memory} if duckdb_memory else {}
            con = duckdb.connect(str(Path(tmp) / "warehouse.duckdb"), config=config)
            report = load_focus_day(con, feeds, DAY, batch_bytes=batch_bytes)
            con.close()
            rows, accepted = report.rows_in, report.accepted
    elif mode == "parse":
        rows = accepted = 0
        for batch in focus.iter_focus(path, source="bench.csv", batch_bytes=batch_bytes):
            rows += batch.rows_in
            accepted += batch.accepted
    else:
        batch = focus.load_focus(path, source="bench.csv", batch_bytes=batch_bytes)
        rows, accepted = batch.rows_in, batch.accepted
    seconds = time.perf_counter() - t0
    peak = _vm("VmHWM")
    size_mib = path.stat().st_size / (1 << 20)
    return {
        "benchmark": "focus_memory",
        "mode": mode,
        "file_mb": round(path.stat().st_size / 1e6, 1),
        "file_mib": round(size_mib, 1),
        "rows": rows,
        "accepted": accepted,
        "batch_mib": batch_mib,
        "duckdb_memory_limit": duckdb_memory or "default" if mode == "ingest" else None,
        "baseline_rss_mib": round(baseline, 1),
        "peak_rss_mib": round(peak, 1),
        "growth_mib": round(peak - baseline, 1),
        "peak_over_file": round(peak / size_mib, 3),
        "growth_over_batch": round((peak - baseline) / batch_mib, 2),
        "seconds": round(seconds, 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=1024.0, help="file size in MB (default 1024)")
    ap.add_argument("--batch-mib", type=float, default=4.0, help="CSV bytes per batch, MiB (default 4, the loader's FOCUS_BATCH_BYTES)")
    ap.add_argument("--mode", choices=["ingest", "parse", "whole"], default="ingest")
    ap.add_argument("--duckdb-memory", default="512MB",
                    help="DuckDB memory_limit of the warehouse connection (default 512MB; '' = DuckDB's 80%% of RAM)")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.mode, args.batch_mib, args.duckdb_memory)))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "focus-bench.csv"
        t0 = time.perf_counter()
        rows = generate(path, args.mb)
        print(f"generated {path.stat().st_size / 1e6:.0f} MB, {rows:,} rows in {time.perf_counter() - t0:.0f} s",
              file=sys.stderr)
        cmd = [sys.executable, __file__, "--child", str(path), "--mode", args.mode, "--batch-mib", str(args.batch_mib),
               "--duckdb-memory", args.duckdb_memory]
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            print(proc.stderr, file=sys.stderr)
            return proc.returncode
        print(proc.stdout.strip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
