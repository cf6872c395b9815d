"""Ingestion of saved feed files into the warehouse, one day at a time (no Dagster).

Saved feed files live under a `feeds/` directory:

- `dcgm/<YYYY-MM-DD>/`: `*.prom` / `*.txt` (Prometheus text), `*.json` (Prometheus
  `query_range` answer), `*.parquet` (history in the `raw_dcgm_samples` schema), all loaded
  under that day; the caller may also pass `dcgm_endpoints` URLs to scrape (today only).
- `focus/`: `*.csv` / `*.parquet` FOCUS exports; each day takes the rows whose
  `ChargePeriodStart` falls on it.

Each file is one loader source (its path under `feeds/`), so re-loading a day replaces that
day's rows of each file (`load_batch` is idempotent per source and day), and a file removed
from the directory has its rows of that day deleted. The assets in `assets/ingest.py` call
:func:`load_dcgm_day` / :func:`load_focus_day` and report :meth:`IngestReport.metadata`.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path

import duckdb
import polars as pl

from gpu_platform.feeds import dcgm, focus
from gpu_platform.feeds.load import ensure_tables, load_batch
from gpu_platform.feeds.schemas import FeedBatch

DCGM_SUFFIXES = (".prom", ".txt", ".json", ".parquet")
FOCUS_SUFFIXES = (".csv", ".parquet")
_POSITION = re.compile(r"^(line|row) \d+: ")


class IngestCountMismatch(ValueError):
    """rows_in != accepted + quarantined: some input rows were neither loaded nor quarantined."""


@dataclass
class IngestReport:
    """Counts of one asset's loads; `reasons`: quarantine reasons without their line/row number."""

    rows_in: int = 0
    accepted: int = 0
    quarantined: int = 0
    sources: int = 0
    reasons: Counter[str] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)

    def add(self, batch: FeedBatch, accepted: int, quarantined: int) -> None:
        self.rows_in += batch.rows_in
        self.accepted += accepted
        self.quarantined += quarantined
        self.sources += 1
        self.reasons.update(_POSITION.sub("", r) for r in batch.quarantine["reason"].to_list())

    def check(self) -> None:
        """Raise :class:`IngestCountMismatch` unless rows_in == accepted + quarantined."""
        if self.rows_in != self.accepted + self.quarantined:
            raise IngestCountMismatch(
                f"rows_in={self.rows_in} != accepted={self.accepted} + quarantined={self.quarantined}"
            )

    def metadata(self) -> dict[str, int | str]:
        """Checked counts (ints) and markdown (strs): `rows_in`, `accepted`, `quarantined`,
        `sources`, `quarantine_reasons` (the ten most common), and `scrape_errors` when a
        scrape failed. Raises :class:`IngestCountMismatch` when the counts do not add up."""
        self.check()
        table = "| reason | rows |\n|---|---|\n" + "".join(
            f"| {reason.replace('|', '/')} | {n} |\n" for reason, n in self.reasons.most_common(10)
        )
        md: dict[str, int | str] = {
            "rows_in": self.rows_in,
            "accepted": self.accepted,
            "quarantined": self.quarantined,
            "sources": self.sources,
            "quarantine_reasons": table if self.reasons else "no quarantined rows",
        }
        if self.errors:
            md["scrape_errors"] = "\n".join(f"- {e}" for e in self.errors)
        return md


def merge_reports(reports: Iterable[IngestReport]) -> IngestReport:
    """One report summing `reports` (e.g. the days of a backfill range)."""
    out = IngestReport()
    for r in reports:
        out.rows_in += r.rows_in
        out.accepted += r.accepted
        out.quarantined += r.quarantined
        out.sources += r.sources
        out.reasons.update(r.reasons)
        out.errors += r.errors
    return out


def _files(directory: Path, suffixes: tuple[str, ...]) -> list[Path]:
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.rglob("*") if p.is_file() and p.suffix.lower() in suffixes)


def _forget_removed(con: duckdb.DuckDBPyConnection, tables: Iterable[str], prefix: str, day: date,
                    kept: list[str]) -> None:
    """Delete the day's rows of files under `prefix` that are no longer there."""
    ensure_tables(con)  # a missing table would make DuckDB look for a Python variable of its name
    for table in tables:
        con.execute(
            f"delete from {table} where day = ? and starts_with(source, ?) and not list_contains(?, source)",
            [day, prefix, kept],
        )


def read_dcgm_file(path: Path, source: str) -> FeedBatch:
    suffix = path.suffix.lower()
    if suffix == ".json":
        return dcgm.parse_query_range(path.read_bytes(), source=source)
    if suffix == ".parquet":
        return dcgm.read_history_parquet(path, source=source)
    return dcgm.parse_file(path, source=source)


def load_dcgm_day(con: duckdb.DuckDBPyConnection, feeds: Path, day: date, endpoints: list[str]) -> IngestReport:
    """Load every DCGM file of `feeds/dcgm/<day>/`, then scrape `endpoints` (pass [] except today)."""
    report = IngestReport()
    sources = []
    for path in _files(feeds / "dcgm" / day.isoformat(), DCGM_SUFFIXES):
        source = path.relative_to(feeds).as_posix()
        batch = read_dcgm_file(path, source)
        stats = load_batch(con, "dcgm", batch, source=source, day=day)
        report.add(batch, stats.accepted, stats.quarantined)
        sources.append(source)
    _forget_removed(con, ("raw_dcgm_samples", "raw_dcgm_quarantine"), "dcgm/", day, sources)
    for url in endpoints:
        # one source per scrape, so the day's scrapes add up instead of replacing each other
        source = f"scrape:{url}@{datetime.now(UTC):%Y%m%dT%H%M%S%fZ}"
        try:
            batch = dcgm.scrape(url, source=source)
        except dcgm.ScrapeError as exc:
            report.errors.append(str(exc))
            continue
        stats = load_batch(con, "dcgm", batch, source=source, day=day)
        report.add(batch, stats.accepted, stats.quarantined)
    return report


def focus_day_batch(batch: FeedBatch, day: date, anchor_day: date) -> FeedBatch:
    """The rows of `batch` charged on `day`; its quarantined rows (no trustworthy charge period)
    belong to one day per file, `anchor_day`."""
    rows = batch.rows.filter(pl.col("ChargePeriodStart").dt.date() == day)
    quarantine = batch.quarantine if day == anchor_day else batch.quarantine.clear()
    return FeedBatch(rows=rows, quarantine=quarantine, rows_in=rows.height + quarantine.height)


def load_focus_day(con: duckdb.DuckDBPyConnection, feeds: Path, day: date) -> IngestReport:
    """Load the rows of every FOCUS file under `feeds/focus/` whose ChargePeriodStart is on `day`.

    A file's quarantined rows are loaded under the earliest day it charges (the day of its file
    modification time when no row was accepted), so they are counted once."""
    report = IngestReport()
    sources = []
    for path in _files(feeds / "focus", FOCUS_SUFFIXES):
        source = path.relative_to(feeds).as_posix()
        batch = focus.load_focus(path, source=source)
        starts = batch.rows["ChargePeriodStart"].drop_nulls()
        anchor = starts.min().date() if len(starts) else datetime.fromtimestamp(path.stat().st_mtime, UTC).date()
        part = focus_day_batch(batch, day, anchor)
        stats = load_batch(con, "focus", part, source=source, day=day)
        report.add(part, stats.accepted, stats.quarantined)
        sources.append(source)
    _forget_removed(con, ("raw_focus_billing", "raw_focus_quarantine"), "focus/", day, sources)
    return report


INVENTORY_SUFFIXES = (".json",)


def read_inventory_file(kind: str, path: Path, source: str, snapshot_at: datetime | None = None) -> FeedBatch:
    """One `kubectl get nodes -o json` / `kubectl get pods -A -o json` file (`kind`: nodes | pods).

    The snapshot time is the file's modification time unless given."""
    from gpu_platform.feeds import k8s_inventory

    at = snapshot_at or datetime.fromtimestamp(path.stat().st_mtime, UTC)
    parse = k8s_inventory.parse_nodes if kind == "nodes" else k8s_inventory.parse_pods
    return parse(path.read_bytes(), source=source, snapshot_at=at)


def load_inventory_day(con: duckdb.DuckDBPyConnection, feeds: Path, day: date, kind: str) -> IngestReport:
    """Load every `feeds/<kind>/<day>/*.json` snapshot (`kind`: nodes | pods) under `day`."""
    if kind not in ("nodes", "pods"):
        raise ValueError(f"unknown inventory kind {kind!r}")
    report = IngestReport()
    sources = []
    for path in _files(feeds / kind / day.isoformat(), INVENTORY_SUFFIXES):
        source = path.relative_to(feeds).as_posix()
        batch = read_inventory_file(kind, path, source)
        stats = load_batch(con, kind, batch, source=source, day=day)  # type: ignore[arg-type]
        report.add(batch, stats.accepted, stats.quarantined)
        sources.append(source)
    tables = ("raw_nodes", "raw_nodes_quarantine") if kind == "nodes" else ("raw_pods", "raw_pods_quarantine")
    _forget_removed(con, tables, f"{kind}/", day, sources)
    return report


def load_inventory_from_cluster(con: duckdb.DuckDBPyConnection, day: date, kind: str, api=None) -> tuple[str, IngestReport]:
    """Read nodes or pods through the Kubernetes API (`kubernetes` client) and load them under `day`
    as one source `cluster:<kind>` (a re-run of the day replaces that day's snapshot)."""
    from gpu_platform.feeds import k8s_inventory

    doc = k8s_inventory.read_cluster("Node" if kind == "nodes" else "Pod", api=api)
    source = f"cluster:{kind}"
    parse = k8s_inventory.parse_nodes if kind == "nodes" else k8s_inventory.parse_pods
    batch = parse(doc, source=source)
    stats = load_batch(con, kind, batch, source=source, day=day)  # type: ignore[arg-type]
    report = IngestReport()
    report.add(batch, stats.accepted, stats.quarantined)
    return source, report


def load_local_node(con: duckdb.DuckDBPyConnection, day: date, hostname: str, inventory) -> IngestReport:
    """This machine (the local executor's GPUs, `gpu_platform.gpus.local_inventory()`) as one
    `raw_nodes` row under `day`, source `local:nodes`, so local runs are priced the day they run."""
    from gpu_platform.feeds import k8s_inventory

    doc = k8s_inventory.local_node_list(hostname.lower(), list(inventory.devices), inventory.detail)
    batch = k8s_inventory.parse_nodes(doc, source="local:nodes")
    stats = load_batch(con, "nodes", batch, source="local:nodes", day=day)
    report = IngestReport()
    report.add(batch, stats.accepted, stats.quarantined)
    return report
