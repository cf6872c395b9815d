"""Benchmark: the node-matching models on a month whose fleet changes.

Data: 30 days x 256 GPU nodes (8 GPUs) billed per instance-hour as AWS's FOCUS export does (184,320
rows), one `kubectl get nodes` snapshot a day per node, and every tenth node replaced under the
same name on the 16th at 09:00 (a new instance id and creationTimestamp). Seeded straight into the
raw tables (untimed). Timed: `+int_node_hour_prices` (stg_focus_billing, stg_nodes, int_gpu_nodes,
int_billing_nodes, int_node_hour_prices and the busy-time chain, empty here) for the whole month as
one backfill, one model at a time, in a fresh warehouse per run; median of --runs. With --rev, the
same on a commit's dbt_like_sql/ (git archive), to compare before and after a change on one
machine. Printed: total seconds, each model's, and the priced node-hours (a replaced node's two
instances both priced: 256 x 30 x 24 = 184,320).

    .venv/bin/python bench/bench_node_matching.py --rev e050b86 --rev HEAD
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import subprocess
import tarfile
import tempfile
import time
from datetime import date, datetime
from pathlib import Path

import duckdb

from gpu_platform.finops.sqlmodels import Project, default_project_path, ensure_raw_tables
from gpu_platform.observe.scorecards import model_vars
from gpu_platform.policy import load_policy

ROOT = Path(__file__).resolve().parents[1]
D0 = datetime(2026, 11, 1)
MODELS = ("stg_focus_billing", "stg_nodes", "int_gpu_nodes", "int_billing_nodes", "int_node_hour_prices")


def seed(con: duckdb.DuckDBPyConnection, nodes: int, days: int) -> None:
    replaced = "n % 10 = 0 and d >= 15"
    con.execute(f"""
        insert into raw_nodes (snapshot_at, node, provider_id, provider, provider_key, gpu_capacity, source,
                               source_row, day, created_at)
        select $d0::timestamp + to_days(d) + interval 12 hour, 'node-' || n,
               'aws:///us-west-2a/i-' || n || case when {replaced} then 'b' else 'a' end, 'aws',
               'aws:i-' || n || case when {replaced} then 'b' else 'a' end, 8, 'nodes-' || d, n,
               cast($d0 as date) + cast(d as integer),
               case when {replaced} then $d0::timestamp + to_days(15) + interval 9 hour
                    else $d0::timestamp - interval 30 day end
        from range($n) as a(n), range($days) as b(d)""", {"d0": D0, "n": nodes, "days": days})
    con.execute("""
        insert into raw_focus_billing (ChargePeriodStart, ChargePeriodEnd, BilledCost, EffectiveCost, BillingCurrency,
            ChargeCategory, ResourceId, ConsumedQuantity, ConsumedUnit, ServiceCategory, source, source_row, day,
            focus_version)
        select $d0::timestamp + to_hours(h), $d0::timestamp + to_hours(h + 1), 98.32, 98.32, 'USD', 'Usage',
               'i-' || n || case when n % 10 = 0 and h >= 15 * 24 + 9 then 'b' else 'a' end, 1, 'Hours', 'Compute',
               'focus', n * 1000 + h, cast($d0 as date) + cast(h // 24 as integer), '1.2'
        from range($n) as a(n), range($days * 24) as b(h)""", {"d0": D0, "n": nodes, "days": days})


def project_at(rev: str | None, into: Path) -> Path:
    if rev is None:
        return default_project_path()
    data = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "dbt_like_sql"], capture_output=True,
                          check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    return into / "dbt_like_sql"


def run(rev: str | None, nodes: int, days: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        project = Project.load(project_at(rev, Path(tmp)))
        con = duckdb.connect(str(Path(tmp) / "w.duckdb"))
        ensure_raw_tables(con)
        seed(con, nodes, days)
        con.execute("checkpoint")
        t0 = time.perf_counter()
        results = project.build(con, days=(date(2026, 11, 1), date(2026, 11, days)), select=["+int_node_hour_prices"],
                                variables=model_vars(load_policy(None)), workers=1)
        total = time.perf_counter() - t0
        (hours,) = con.execute("select sum(node_hours) from int_node_hour_prices").fetchone()
        con.close()
    return {"total_s": total, "models": {r.name: r.seconds for r in results if r.name in MODELS},
            "node_hours": float(hours or 0)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rev", action="append", help="a commit's dbt_like_sql/ (repeat; default: the working tree)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--nodes", type=int, default=256)
    ap.add_argument("--days", type=int, default=30)
    args = ap.parse_args(argv)
    out = {}
    for rev in args.rev or [None]:
        runs = [run(rev, args.nodes, args.days) for _ in range(args.runs)]
        out[rev or "working tree"] = {
            "total_s": round(statistics.median(r["total_s"] for r in runs), 3),
            "models_s": {m: round(statistics.median(r["models"].get(m, 0.0) for r in runs), 3) for m in MODELS},
            "node_hours": runs[0]["node_hours"],
        }
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
