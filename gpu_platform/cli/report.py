"""`gpu-platform report --out DIR [--days N]`."""

from __future__ import annotations

import os
from pathlib import Path

import click

from gpu_platform.cli.common import ledger_option, policy_option, policy_or_exit


def _default_warehouse() -> Path:
    if os.environ.get("GPU_PLATFORM_WAREHOUSE"):
        return Path(os.environ["GPU_PLATFORM_WAREHOUSE"])
    return Path(os.environ.get("GPU_PLATFORM_HOME", "var")) / "warehouse.duckdb"


@click.command("report")
@click.option(
    "--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Directory to write into."
)
@click.option("--days", type=click.IntRange(1, 366), default=7, show_default=True, help="Days back from now.")
@click.option(
    "--warehouse",
    type=click.Path(dir_okay=False),
    default=None,
    help="DuckDB warehouse (default: $GPU_PLATFORM_WAREHOUSE or $GPU_PLATFORM_HOME/warehouse.duckdb).",
)
@policy_option
@ledger_option
def report(
    out_dir: str, days: int, warehouse: str | None, policy_path: str | None, ledger_url: str | None
) -> None:
    """Write index.html and PNG plots: queue wait by lane, utilization, cost by team, unit costs, signals."""
    from gpu_platform.observe.report.build import build_report
    from gpu_platform.requests.ledger import Ledger, default_ledger_url

    pol = policy_or_exit(policy_path)
    result = build_report(
        Ledger(ledger_url or default_ledger_url()),
        pol,
        out_dir,
        days=days,
        warehouse=Path(warehouse) if warehouse else _default_warehouse(),
    )
    click.echo(f"wrote {result.html} and {len(result.pngs)} PNG(s)")
    for section, note in result.notes.items():
        click.echo(f"  {section}: {note}", err=True)
