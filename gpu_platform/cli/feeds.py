"""`gpu-platform feeds ingest`: load one day's feeds into the warehouse and count every row.

    gpu-platform feeds ingest --day D [--dcgm PATH_OR_URL...] [--focus PATH...]
        [--nodes PATH | --from-cluster] [--pods PATH | --from-cluster] [--volumes PATH | --from-cluster]
        [--warehouse FILE]
        [--format table|json]

Each file (or URL, or cluster read) is one loader source and one line of output: rows in,
accepted, quarantined, other days. A DCGM sample is loaded only under the UTC day of its
timestamp and a FOCUS row only under the day its charge period starts: the rows of a file given
here that belong to other days are not loaded for DAY but counted per day (`other_days`), to be
loaded with their own `--day`; loading the same file again, for the same or another day, replaces
what it loaded for that day and never adds a second copy. With no input option at all, the saved
feed files of the day under `$GPU_PLATFORM_HOME/feeds/` are loaded (what the Dagster ingest
assets do). `--from-cluster` reads the nodes, pods and PersistentVolumes not given as files
through the Kubernetes API (in-cluster config, else KUBECONFIG).

The warehouse is opened through `gpu_platform.finops.warehouse.connect`: while another process
writes it, the command waits up to GPU_PLATFORM_WAREHOUSE_WAIT_S seconds (default 15), then
stops with one line naming the file and exit 2. Exit 2 also when an input cannot be read at all
(every such problem listed), 1 when rows in != accepted + quarantined + other days.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import click

from gpu_platform.cli.common import WarehouseBusyExit
from gpu_platform.paths import default_warehouse, platform_home


def _day(_ctx: click.Context, _param: click.Parameter, value: str) -> date:
    try:
        return date.fromisoformat(value)
    except ValueError as e:
        raise click.BadParameter(f"{value!r} is not YYYY-MM-DD") from e


@click.group()
def feeds() -> None:
    """Feed ingestion: DCGM, FOCUS billing, node and pod inventory, requests per service."""


@feeds.command("ingest")
@click.option("--day", required=True, callback=_day, help="UTC day the rows are loaded under, YYYY-MM-DD.")
@click.option(
    "--dcgm",
    "dcgm_inputs",
    multiple=True,
    help="dcgm-exporter text/.prom, query_range .json, history .parquet, or an http(s) /metrics URL.",
)
@click.option(
    "--focus",
    "focus_inputs",
    multiple=True,
    type=click.Path(dir_okay=False),
    help="FOCUS 1.0/1.2 export (.csv or .parquet); the rows charged on DAY are loaded.",
)
@click.option(
    "--nodes", "nodes_input", type=click.Path(dir_okay=False), help="`kubectl get nodes -o json` output."
)
@click.option(
    "--pods", "pods_input", type=click.Path(dir_okay=False), help="`kubectl get pods -A -o json` output."
)
@click.option(
    "--volumes", "volumes_input", type=click.Path(dir_okay=False),
    help="`kubectl get pv -o json` output (PersistentVolumes: which cloud volume backs each claim).",
)
@click.option(
    "--requests", "requests_inputs", multiple=True, type=click.Path(dir_okay=False),
    help="Prometheus query_range .json of requests per service (sum by (service) (increase(...[5m])), step 5m).",
)
@click.option(
    "--from-cluster", is_flag=True,
    help="Read nodes, pods and PersistentVolumes (those not given as files) through the API.",
)
@click.option(
    "--warehouse",
    type=click.Path(dir_okay=False),
    default=None,
    help="DuckDB file (default: $GPU_PLATFORM_WAREHOUSE, else $GPU_PLATFORM_HOME/warehouse.duckdb).",
)
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def ingest(
    day: date,
    dcgm_inputs: tuple[str, ...],
    focus_inputs: tuple[str, ...],
    nodes_input: str | None,
    pods_input: str | None,
    volumes_input: str | None,
    requests_inputs: tuple[str, ...],
    from_cluster: bool,
    warehouse: str | None,
    fmt: str,
) -> None:
    """Load DAY's feeds into the warehouse; print rows in / accepted / quarantined per feed and file."""
    from gpu_platform.finops.feeds import dcgm as dcgm_feed
    from gpu_platform.finops.feeds import ingest as ing
    from gpu_platform.finops.feeds.load import load_batch
    from gpu_platform.finops.feeds.requests_prom import load_service_requests_day, read_service_requests_file
    from gpu_platform.finops.feeds.schemas import FeedSchemaError
    from gpu_platform.finops.warehouse import WarehouseBusy
    from gpu_platform.finops.warehouse import connect as warehouse_connect

    path = Path(warehouse) if warehouse else default_warehouse()
    path.parent.mkdir(parents=True, exist_ok=True)
    explicit = bool(dcgm_inputs or focus_inputs or nodes_input or pods_input or volumes_input or requests_inputs
                    or from_cluster)
    missing = [
        p
        for p in (*focus_inputs, *(x for x in dcgm_inputs if "://" not in x), nodes_input, pods_input,
                  volumes_input, *requests_inputs)
        if p and not Path(p).exists()  # a FIFO or device is refused by name when read
    ]
    if missing:
        _fail([f"{p}: no such file" for p in missing])
    lines: list[dict[str, Any]] = []
    problems: list[str] = []

    def add(
        feed: str, source: str, rows_in: int, accepted: int, quarantined: int, others: dict[date, int] | None = None
    ) -> None:
        lines.append(
            {
                "feed": feed,
                "source": source,
                "rows_in": rows_in,
                "accepted": accepted,
                "quarantined": quarantined,
                "other_days": sum((others or {}).values()),
                "other_days_by_day": {d.isoformat(): n for d, n in (others or {}).items()},
            }
        )

    try:
        con = warehouse_connect(path, read_only=False)
    except WarehouseBusy as e:
        raise WarehouseBusyExit(str(e)) from None
    try:
        if not explicit:
            feeds_dir = platform_home() / "feeds"
            for feed, report in (
                ("dcgm", ing.load_dcgm_day(con, feeds_dir, day, [])),
                ("focus", ing.load_focus_day(con, feeds_dir, day)),
                ("nodes", ing.load_inventory_day(con, feeds_dir, day, "nodes")),
                ("pods", ing.load_inventory_day(con, feeds_dir, day, "pods")),
                ("volumes", ing.load_inventory_day(con, feeds_dir, day, "volumes")),
                ("requests", load_service_requests_day(con, feeds_dir, day)),
            ):
                add(feed, str(feeds_dir / feed), report.rows_in, report.accepted, report.quarantined)
        for item in dcgm_inputs:
            if "://" in item:
                source = f"scrape:{item}@{datetime.now(UTC):%Y%m%dT%H%M%S%fZ}"
                try:
                    batch = dcgm_feed.scrape(item, source=source)
                except (dcgm_feed.ScrapeError, FeedSchemaError, ValueError, OSError) as e:
                    problems.append(f"--dcgm {item}: {e}")
                    continue
            else:
                source = str(Path(item).resolve())
                read, _, reason = ing.read_feed_file(
                    Path(item), lambda p=Path(item), s=source: ing.read_dcgm_file(p, s)
                )
                if read is None:
                    problems.append(f"--dcgm {item}: {reason}")
                    continue
                batch = read
            # only the samples stamped on DAY; the file's other days are counted, not loaded here
            part, others = ing.dcgm_file_day_batch(batch, day)
            stats = load_batch(con, "dcgm", part, source=source, day=day)
            add("dcgm", source, batch.rows_in, stats.accepted, stats.quarantined, others)
        for item in focus_inputs:
            # streamed batch by batch like the saved folder's files: memory follows the batch
            source = str(Path(item).resolve())
            loaded, _, reason = ing.read_feed_file(
                Path(item), lambda p=Path(item), s=source: ing.load_focus_file(con, p, s, day)
            )
            if loaded is None:
                problems.append(f"--focus {item}: {reason}")
                continue
            add("focus", source, loaded.file_rows_in, loaded.accepted, loaded.quarantined, dict(loaded.other_days))
        for kind, given in (("nodes", nodes_input), ("pods", pods_input), ("volumes", volumes_input)):
            if given:
                source = str(Path(given).resolve())
                batch, _, reason = ing.read_feed_file(
                    Path(given), lambda k=kind, p=Path(given), s=source: ing.read_inventory_file(k, p, s)
                )
                if batch is None:
                    problems.append(f"--{kind} {given}: {reason}")
                    continue
                stats = load_batch(con, kind, batch, source=source, day=day)  # type: ignore[arg-type]
                add(kind, source, batch.rows_in, stats.accepted, stats.quarantined)
            elif from_cluster:
                try:
                    source, report = ing.load_inventory_from_cluster(con, day, kind)
                except Exception as e:  # the kubernetes client's config and API errors
                    problems.append(f"--from-cluster ({kind}): {type(e).__name__}: {e}")
                    continue
                add(kind, source, report.rows_in, report.accepted, report.quarantined)
        for item in requests_inputs:
            # every point of the answer, under DAY; the models count each point on the day its window ends
            source = str(Path(item).resolve())
            batch, _, reason = ing.read_feed_file(
                Path(item), lambda p=Path(item), s=source: read_service_requests_file(p, s)
            )
            if batch is None:
                problems.append(f"--requests {item}: {reason}")
                continue
            stats = load_batch(con, "requests", batch, source=source, day=day)
            add("requests", source, batch.rows_in, stats.accepted, stats.quarantined)
    finally:
        con.close()
    if fmt == "json":
        click.echo(
            json.dumps(
                {"day": day.isoformat(), "warehouse": str(path), "feeds": lines, "errors": problems}, indent=2
            )
        )
    else:
        from rich.table import Table

        from gpu_platform.cli.common import make_console, print_table

        table = Table(title=f"feeds ingested for {day.isoformat()} into {path}")
        counts = ("rows_in", "accepted", "quarantined", "other_days")
        for col in ("feed", "source", *counts):
            table.add_column(col, justify="right" if col in counts else "left", overflow="fold")
        for row in lines:
            table.add_row(row["feed"], row["source"], *(str(row[c]) for c in counts))
        print_table(make_console(), table)
        for row in lines:
            if row["other_days"]:
                days = ", ".join(f"{d} ({n})" for d, n in row["other_days_by_day"].items())
                click.echo(
                    f"{row['source']}: {row['other_days']} row(s) of other days not loaded for {day.isoformat()}: "
                    f"{days}; load them with their own --day",
                    err=True,
                )
    if problems:
        _fail(problems)
    bad = [r for r in lines if r["rows_in"] != r["accepted"] + r["quarantined"] + r["other_days"]]
    if bad:
        click.echo(
            f"rows in != accepted + quarantined + other days for {', '.join(r['source'] for r in bad)}", err=True
        )
        sys.exit(1)


def _fail(problems: list[str]) -> None:
    click.echo(f"feeds ingest: {len(problems)} problem(s)", err=True)
    for p in problems:
        click.echo(f"  {p}", err=True)
    sys.exit(2)
