"""Raw ingestion assets: DCGM samples, FOCUS billing and the ledger snapshot into the warehouse.

Thin by design: the feed parsers and the loader (`gpu_platform.feeds`) and the ledger export
(`gpu_platform.finops_snapshot`) do the work; these assets pick the inputs of a day, call them,
and report counts. Saved feed files live under `$GPU_PLATFORM_HOME/feeds/`:

- `dcgm/<YYYY-MM-DD>/`: `*.prom` / `*.txt` (Prometheus text), `*.json` (Prometheus
  `query_range` answer), `*.parquet` (history in the `raw_dcgm_samples` schema), all loaded
  under that day's partition; today's partition also scrapes every `dcgm_endpoints` URL.
- `focus/`: `*.csv` / `*.parquet` FOCUS exports; each day's partition takes the rows whose
  `ChargePeriodStart` falls on it.

Each file is one loader source (its path under `feeds/`), so re-running a day replaces that
day's rows of each file (`load_batch` is idempotent per source and day), and a file removed
from the directory has its rows of that day deleted.
"""

import re
import warnings
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path

import dagster as dg
import duckdb
import polars as pl

from assets.finops import INGEST_GROUP, WAREHOUSE_POOL, finops_daily_partitions
from gpu_platform.feeds import dcgm, focus
from gpu_platform.feeds.load import ensure_tables, load_batch
from gpu_platform.feeds.schemas import FeedBatch
from gpu_platform.finops_snapshot import ledger_snapshot
from gpu_platform.lineage import LineageStore
from gpu_platform.sqlmodels.raw import load_ledger_snapshot
from resources.ledger import LedgerResource
from resources.policy import PolicyResource
from resources.settings import PlatformSettings
from resources.warehouse import Warehouse

DCGM_SUFFIXES = (".prom", ".txt", ".json", ".parquet")
FOCUS_SUFFIXES = (".csv", ".parquet")
_POSITION = re.compile(r"^(line|row) \d+: ")


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

    def metadata(self) -> dict[str, dg.MetadataValue]:
        if self.rows_in != self.accepted + self.quarantined:
            raise dg.Failure(
                description=f"rows_in={self.rows_in} != accepted={self.accepted} + quarantined={self.quarantined}"
            )
        table = "| reason | rows |\n|---|---|\n" + "".join(
            f"| {reason.replace('|', '/')} | {n} |\n" for reason, n in self.reasons.most_common(10)
        )
        md = {
            "rows_in": dg.MetadataValue.int(self.rows_in),
            "accepted": dg.MetadataValue.int(self.accepted),
            "quarantined": dg.MetadataValue.int(self.quarantined),
            "sources": dg.MetadataValue.int(self.sources),
            "quarantine_reasons": dg.MetadataValue.md(table if self.reasons else "no quarantined rows"),
        }
        if self.errors:
            md["scrape_errors"] = dg.MetadataValue.md("\n".join(f"- {e}" for e in self.errors))
        return md


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


def _days(context: dg.AssetExecutionContext) -> list[date]:
    keys = finops_daily_partitions.get_partition_keys_in_range(context.partition_key_range)
    return [date.fromisoformat(k) for k in keys]


def _merge(reports: list[IngestReport]) -> IngestReport:
    out = IngestReport()
    for r in reports:
        out.rows_in += r.rows_in
        out.accepted += r.accepted
        out.quarantined += r.quarantined
        out.sources += r.sources
        out.reasons.update(r.reasons)
        out.errors += r.errors
    return out


_COMMON = dict(group_name=INGEST_GROUP, kinds={"duckdb"}, pool=WAREHOUSE_POOL)


def _daily_asset(fn):
    """Daily-partitioned like the cost models, with their single-run backfills (a range of days
    is one step)."""
    with warnings.catch_warnings():
        # BackfillPolicy is beta in this Dagster; single-run backfills are what DuckDB wants
        warnings.simplefilter("ignore", dg.BetaWarning)
        return dg.asset(
            partitions_def=finops_daily_partitions, backfill_policy=dg.BackfillPolicy.single_run(), **_COMMON
        )(fn)


@_daily_asset
def raw_dcgm_samples(
    context: dg.AssetExecutionContext, warehouse: Warehouse, settings: PlatformSettings
) -> dg.MaterializeResult:
    """DCGM samples of the day: saved files under feeds/dcgm/<day>/, plus live scrapes of
    `settings.dcgm_endpoints` when the day is today (UTC). Unparseable lines, blanks and
    sentinels go to raw_dcgm_quarantine with a reason."""
    today = datetime.now(UTC).date()
    feeds = Path(settings.home) / "feeds"
    con = warehouse.connect()
    try:
        reports = [
            load_dcgm_day(con, feeds, day, settings.dcgm_endpoint_list() if day == today else [])
            for day in _days(context)
        ]
    finally:
        con.close()
    report = _merge(reports)
    for error in report.errors:
        context.log.warning(error)
    return dg.MaterializeResult(metadata=report.metadata())


@_daily_asset
def raw_focus_billing(
    context: dg.AssetExecutionContext, warehouse: Warehouse, settings: PlatformSettings
) -> dg.MaterializeResult:
    """FOCUS billing rows charged on the day (ChargePeriodStart, UTC) from every export under
    feeds/focus/; malformed rows go to raw_focus_quarantine with a reason."""
    con = warehouse.connect()
    try:
        reports = [load_focus_day(con, Path(settings.home) / "feeds", day) for day in _days(context)]
    finally:
        con.close()
    return dg.MaterializeResult(metadata=_merge(reports).metadata())


@dg.asset(**_COMMON)
def raw_ledger_snapshot(
    warehouse: Warehouse, ledger: LedgerResource, policy: PolicyResource
) -> dg.MaterializeResult:
    """The request ledger now (every request, one pod per admitted attempt) with recorded
    workload results, replacing raw_requests and raw_pod_requests. Unpartitioned: a snapshot
    holds every day's pods, and each daily build reads the pods overlapping its day."""
    led = ledger.ledger()
    requests, pods = ledger_snapshot(led, policy.load(), LineageStore(led.engine))
    con = warehouse.connect()
    try:
        n_requests, n_pods = load_ledger_snapshot(con, requests, pods)
    finally:
        con.close()
    return dg.MaterializeResult(
        metadata={
            "requests": dg.MetadataValue.int(n_requests),
            "pods": dg.MetadataValue.int(n_pods),
            "pods_without_hostname": dg.MetadataValue.int(sum(p["hostname"] is None for p in pods)),
            "running_pods": dg.MetadataValue.int(sum(p["ended_at"] is None for p in pods)),
        }
    )


ingest_assets = [raw_dcgm_samples, raw_focus_billing, raw_ledger_snapshot]
INGEST_ASSET_NAMES = tuple(a.key.to_user_string() for a in ingest_assets)
