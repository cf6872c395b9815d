"""`gpu-platform scorecard --day D [--format table|json]`: a day's scorecards and the signals that fired."""

from __future__ import annotations

import json
from pathlib import Path

import click

from gpu_platform.cli.common import WarehouseBusyExit, make_console, print_table


def _cell(v: object) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


@click.command("scorecard")
@click.option("--day", required=True, help="UTC day, YYYY-MM-DD.")
@click.option("--warehouse", type=click.Path(dir_okay=False), default=None,
              help="DuckDB file (default: $GPU_PLATFORM_WAREHOUSE, else $GPU_PLATFORM_HOME/warehouse.duckdb).")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--all-signals", is_flag=True, help="List signals that did not fire too.")
def scorecard(day: str, warehouse: str | None, fmt: str, all_signals: bool) -> None:
    """Print DAY's scorecards (queue wait, utilization, failures, preemption, cache, coverage, bypass)
    and the capacity signals that fired, with their actions. Build them first: `cost build --day D`."""
    from datetime import date

    import duckdb
    from rich.table import Table

    from gpu_platform.finops.sqlmodels.report import to_jsonable
    from gpu_platform.finops.warehouse import WarehouseBusy
    from gpu_platform.finops.warehouse import connect as warehouse_connect
    from gpu_platform.observe.scorecards.read import day_scorecards
    from gpu_platform.paths import default_warehouse

    try:
        date.fromisoformat(day)
    except ValueError:
        raise click.BadParameter(f"{day!r} is not a date (YYYY-MM-DD)", param_hint="--day") from None
    path = Path(warehouse) if warehouse else default_warehouse()
    if not path.exists():
        raise click.ClickException(f"no warehouse at {path} (build one with `gpu-platform cost build --day {day}`)")
    try:
        con = warehouse_connect(path)
    except WarehouseBusy as e:
        raise WarehouseBusyExit(str(e)) from None  # one line, exit 2
    except duckdb.Error as e:
        raise click.ClickException(f"cannot open {path}: {e}") from e
    try:
        data = day_scorecards(con, day)
    finally:
        con.close()
    signals = data["capacity_signals"]
    if signals is not None and not all_signals:
        data["capacity_signals"] = [s for s in signals if s["fired"]]
    if fmt == "json":
        click.echo(json.dumps({"day": day, **to_jsonable(data)}, indent=2))
        return
    console = make_console()
    for table, rows in data.items():
        if rows is None:
            console.print(f"[yellow]{table}: not built in this warehouse[/yellow]")
            continue
        if not rows:
            console.print(f"{table}: no rows for {day}")
            continue
        cols = [c for c in rows[0] if table != "capacity_signals" or c != "action"]
        t = Table(title=f"{table} ({day})")
        for c in cols:
            t.add_column(c)
        for r in rows:
            t.add_row(*(_cell(r[c]) for c in cols))
        print_table(console, t)
        if table == "capacity_signals":
            for r in rows:
                if r["fired"]:
                    console.print(f"[bold]{r['severity']}[/bold] {r['signal']} {r['subject']}: {r['action']}")
