"""Seed the demo (`make demo` runs `python -m assets.demo_seed`).

The domain half lives in `gpu_platform/demo.py` (instance config, live requests) and
`gpu_platform/demo_costs.py` (feed files and ledger history); this module adds the Dagster half:
it materializes the ingest and cost assets for each seeded day into the demo instance, so the
UI shows cost plots on first open. Idempotent: a marker file records a finished seed.
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import date
from pathlib import Path
from typing import Any

import dagster as dg
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from assets.finops import WAREHOUSE_POOL, finops_assets
from assets.ingest import ingest_assets
from gpu_platform.demo import seed_ledger, write_instance_yaml
from gpu_platform.demo_costs import MARKER, demo_days, seed_history, write_dcgm, write_focus
from gpu_platform.ledger import Ledger, default_ledger_url
from gpu_platform.lineage import LineageStore
from gpu_platform.policy import load_policy
from resources.build import build_resources


def materialize_days(days: list[date], progress: Any = None, task: Any = None) -> dict[str, bool]:
    """Ingest and price each day in the instance at DAGSTER_HOME; returns day -> success.

    The first and last runs also build the unpartitioned assets (ledger snapshot, lifetime unit
    costs); the days between build only the daily ones.
    """
    everything = [*ingest_assets, *finops_assets]
    daily = [a for a in everything if a.partitions_def is not None]
    resources = build_resources("local")
    out: dict[str, bool] = {}
    quiet = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
    with dg.DagsterInstance.get() as instance:
        for n, day in enumerate(days):
            selection = everything if n in (0, len(days) - 1) else daily
            result = dg.materialize(selection, partition_key=day.isoformat(), instance=instance,
                                    resources=resources, run_config=quiet,
                                    tags={"gpu-platform/demo": "seed_costs"})
            out[day.isoformat()] = result.success
            if progress is not None:
                progress.advance(task)
        # set after the seed runs: a pooled step polls for its slot, which only slows them down
        instance.event_log_storage.set_concurrency_slots(WAREHOUSE_POOL, 1)
    return out


def seed_costs(days: int = 7) -> dict[str, Any] | None:
    """Write the demo feeds and history for the last `days` days and price them (see module doc).

    Returns a summary, or None when already seeded (the marker file exists).
    """
    home = Path(os.environ.get("GPU_PLATFORM_HOME", "var")).resolve()
    feeds = home / "feeds"
    marker = feeds / MARKER
    console = Console(stderr=True)
    if marker.exists():
        console.print(f"demo: cost data already seeded ({marker})")
        return None
    t0 = time.monotonic()
    policy = load_policy(os.environ.get("GPU_PLATFORM_POLICY") or None)
    ledger = Ledger(default_ledger_url())
    lineage = LineageStore(ledger.engine)
    span = demo_days(days)
    written = 0
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), console=console) as progress:
        feed_task = progress.add_task("demo: feeds and history", total=len(span) + 1)
        for i, day in enumerate(span):
            placements = seed_history(ledger, lineage, policy, day, i)
            written += write_dcgm(feeds, day, placements, seed=i)
            progress.advance(feed_task)
        written += write_focus(feeds, span).stat().st_size
        progress.advance(feed_task)
        run_task = progress.add_task("demo: ingest and price", total=len(span))
        runs = materialize_days(span, progress, run_task)
    summary = {"days": [d.isoformat() for d in span], "bytes": written, "runs": runs,
               "seconds": round(time.monotonic() - t0, 1)}
    failed = [d for d, ok in runs.items() if not ok]
    if failed:
        raise RuntimeError(f"demo: cost materialization failed for {failed}; see the runs in the Dagster UI")
    marker.write_text(json.dumps(summary, indent=2) + "\n")
    console.print(f"demo: {len(span)} days of cost data ({written / 1e6:.1f} MB of feeds) priced in "
                  f"{summary['seconds']} s")
    return summary


def seed() -> None:
    home = os.environ.get("DAGSTER_HOME")
    if home:
        print(f"demo: wrote {write_instance_yaml(Path(home))}")
    seed_ledger()
    seed_costs()


def main(argv: list[str]) -> int:
    if argv[:1] != ["seed"]:
        print("usage: python -m assets.demo_seed seed", file=sys.stderr)
        return 2
    seed()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
