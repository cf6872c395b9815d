"""Ingestion of saved feed files into the warehouse, one day at a time (no Dagster).

Saved feed files live under a `feeds/` directory:

- `dcgm/<YYYY-MM-DD>/`: `*.prom` / `*.txt` (Prometheus text), `*.json` (Prometheus
  `query_range` answer), `*.parquet` (history in the `raw_dcgm_samples` schema); the caller
  may also pass `dcgm_endpoints` URLs to scrape (today only). A sample belongs to the day of
  its timestamp, not of its directory (lines without one: see :func:`read_dcgm_file`): loading a day reads its directory and the two beside it
  and keeps the samples stamped on that day (a file of 23:55-00:05 feeds both days). Samples
  stamped more than a day away from their directory, and lines without a readable sample, are
  quarantined under the directory's day.
- `focus/`: `*.csv` / `*.parquet` FOCUS exports; each day takes the rows whose
  `ChargePeriodStart` falls on it. A row identical to an earlier one (same file or an earlier
  file in path order) is quarantined as a duplicate, so a re-delivered export is not billed twice.

Each file is one loader source (its path under `feeds/`), so re-loading a day replaces that
day's rows of each file (`load_batch` is idempotent per source and day), and a file removed
from the directory has its rows of that day deleted. A file that cannot be read as a whole
(not UTF-8, broken header, not Parquet or JSON, over `FEED_FILE_MAX_BYTES`) never aborts the
day: it is recorded in `raw_feed_file_quarantine` (path, size, reason), its earlier rows of the
day are deleted, and the other files load. Per day, files in = files loaded + files
quarantined, and for each loaded file rows in = accepted + quarantined.
The assets in `assets/ingest.py` call :func:`load_dcgm_day` / :func:`load_focus_day` and
report :meth:`IngestReport.metadata`.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path

import duckdb
import polars as pl

from gpu_platform.finops.feeds import dcgm, focus
from gpu_platform.finops.feeds.load import (
    STAGING,
    append_batch,
    create_staging,
    drop_staging,
    load_batch,
    load_batches,
    note_loaded,
    record_file_quarantine,
    stream_batches,
)
from gpu_platform.finops.feeds.schemas import (
    DCGM_QUARANTINE_SCHEMA,
    RAW_FOCUS_BILLING,
    RAW_FOCUS_QUARANTINE,
    FeedBatch,
)
from gpu_platform.safeload import (
    FEED_FILE_MAX_BYTES,
    FEED_JSON_LIMITS,
    INVENTORY_JSON_LIMITS,
    InputError,
    PathRefused,
    check_confined,
    check_utf8_file,
    decode_utf8,
    load_json_text,
    open_regular,
    read_bytes,
)
from gpu_platform.safeload.text import md as md_text

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
    files_in: int = 0
    files_loaded: int = 0
    quarantined_files: list[tuple[str, str]] = field(default_factory=list)
    """(source, reason) of every file quarantined as a whole."""
    currency_flags: list[str] = field(default_factory=list)
    """FOCUS charge periods billed only in a currency the rest of their file does not use."""
    repriced: list[tuple[str, date, int]] = field(default_factory=list)
    """(source, day, rows): FOCUS rows of an earlier day that a file changed (a correction, a
    re-delivered month), loaded under their own day, which is then stale until rebuilt."""

    def add(self, batch: FeedBatch, accepted: int, quarantined: int) -> None:
        self.rows_in += batch.rows_in
        self.accepted += accepted
        self.quarantined += quarantined
        self.sources += 1
        self.reasons.update(_POSITION.sub("", r) for r in batch.quarantine["reason"].to_list())

    def check(self) -> None:
        """Raise :class:`IngestCountMismatch` unless rows_in == accepted + quarantined and
        files_in == files_loaded + files quarantined."""
        if self.rows_in != self.accepted + self.quarantined:
            raise IngestCountMismatch(
                f"rows_in={self.rows_in} != accepted={self.accepted} + quarantined={self.quarantined}"
            )
        if self.files_in != self.files_loaded + len(self.quarantined_files):
            raise IngestCountMismatch(
                f"files_in={self.files_in} != files_loaded={self.files_loaded} + "
                f"files_quarantined={len(self.quarantined_files)}"
            )

    def metadata(self) -> dict[str, int | str]:
        """Checked counts (ints) and markdown (strs): `rows_in`, `accepted`, `quarantined`,
        `sources`, `files_in`, `files_quarantined`, `quarantine_reasons` (the ten most common),
        `quarantined_files` when a file was quarantined whole, and `scrape_errors` when a
        scrape failed. Raises :class:`IngestCountMismatch` when the counts do not add up."""
        self.check()
        table = "| reason | rows |\n|---|---|\n" + "".join(
            f"| {md_text(reason)} | {n} |\n" for reason, n in self.reasons.most_common(10)
        )
        md: dict[str, int | str] = {
            "rows_in": self.rows_in,
            "accepted": self.accepted,
            "quarantined": self.quarantined,
            "sources": self.sources,
            "quarantine_reasons": table if self.reasons else "no quarantined rows",
            "files_in": self.files_in,
            "files_quarantined": len(self.quarantined_files),
            "currency_flagged_periods": len(self.currency_flags),
        }
        if self.currency_flags:
            md["currency_flags"] = "\n".join(f"- {md_text(flag)}" for flag in self.currency_flags)
        if self.quarantined_files:
            md["quarantined_files"] = "| file | reason |\n|---|---|\n" + "".join(
                f"| {md_text(src)} | {md_text(reason)} |\n" for src, reason in self.quarantined_files
            )
        if self.errors:
            md["scrape_errors"] = "\n".join(f"- {md_text(e)}" for e in self.errors)
        if self.repriced:
            md["repriced_days"] = "| file | day | rows |\n|---|---|---|\n" + "".join(
                f"| {md_text(src)} | {d.isoformat()} | {n} |\n" for src, d, n in self.repriced)
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
        out.files_in += r.files_in
        out.files_loaded += r.files_loaded
        out.quarantined_files += r.quarantined_files
        out.currency_flags += r.currency_flags
    return out


def _files(directory: Path, suffixes: tuple[str, ...]) -> list[Path]:
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.rglob("*") if p.is_file() and p.suffix.lower() in suffixes)


def read_dcgm_file(path: Path, source: str, directory_day: date | None = None) -> FeedBatch:
    """Parse one saved DCGM file. Text lines without their own timestamp are stamped with the
    file's modification time, or with 00:00 UTC of `directory_day` when that time is on another
    day (a file copied in later: its directory is the better witness of when it was scraped)."""
    suffix = path.suffix.lower()
    if suffix == ".json":
        text = decode_utf8(path.read_bytes(), source)
        return dcgm.parse_query_range(load_json_text(text, source, FEED_JSON_LIMITS), source=source)
    if suffix == ".parquet":
        return dcgm.read_history_parquet(path, source=source)
    scraped_at = datetime.fromtimestamp(path.stat().st_mtime, UTC)
    if directory_day is not None and scraped_at.date() != directory_day:
        scraped_at = datetime.combine(directory_day, time(0), UTC)
    return dcgm.parse_file(path, source=source, scraped_at=scraped_at)


def read_feed_file(
    path: Path, read: Callable[[], FeedBatch], root: Path | None = None
) -> tuple[FeedBatch | None, int | None, str | None]:
    """(batch, size, None) or (None, size, reason): why the file cannot be read as a whole.

    root: the feed folder the file was listed from (None: a file named on the command line, which
    must still be a regular file: a FIFO or device is refused without blocking); the file must be
    a regular file whose real path is under it (`safeload.check_confined`: a link to `/proc/self/environ` or out of the
    folder, a FIFO, is quarantined with the reason and never parsed).
    Any failure of a parser on one file (Arrow, Polars, JSON, a schema error) quarantines that
    file; only memory exhaustion and interrupts propagate."""
    try:
        if root is not None:
            check_confined(path, root, field="file", root_name="the feed folder")
        else:  # a file named on the command line: any path its user may read, but a regular file
            open_regular(path, field="file").close()
    except PathRefused as exc:
        return None, None, f"refused: {exc.why}"
    except OSError as exc:
        return None, None, f"cannot read: {exc.strerror or exc}"
    try:
        size = path.stat().st_size
    except OSError as exc:
        return None, None, f"cannot read: {exc.strerror or exc}"
    if size > FEED_FILE_MAX_BYTES:
        return None, size, f"larger than the limit of {FEED_FILE_MAX_BYTES:,} bytes"
    try:
        return read(), size, None
    except MemoryError:
        raise
    except UnicodeDecodeError as exc:
        bad = exc.object[exc.start : exc.start + 1].hex() if isinstance(exc.object, bytes) else "?"
        return None, size, f"not UTF-8: byte 0x{bad} at byte offset {exc.start} ({exc.reason})"
    except InputError as exc:
        return None, size, "; ".join(exc.errors)[:500]
    except Exception as exc:  # one unreadable file never aborts the day
        text = (str(exc).strip().splitlines() or [""])[0][:400]
        return None, size, f"{type(exc).__name__}: {text}" if text else type(exc).__name__


_FAR = "timestamp on {} is more than a day away from its directory's day {}"


def dcgm_day_batch(batch: FeedBatch, day: date, directory_day: date, quarantine_far: bool = True) -> FeedBatch:
    """The samples of `batch` (a file of `directory_day`'s directory) stamped on `day`.

    The file's quarantined lines, and samples stamped more than a day from `directory_day`
    (which no day's load would read), belong to `directory_day`. quarantine_far=False: a file
    that every day's load may read (one given on the command line) keeps its far samples for
    their own day instead."""
    stamped = batch.rows["ts"].dt.date()
    rows = batch.rows.filter(stamped == day)
    if day != directory_day:
        return FeedBatch(rows=rows, quarantine=batch.quarantine.clear(), rows_in=rows.height)
    near = (stamped >= directory_day - timedelta(days=1)) & (stamped <= directory_day + timedelta(days=1))
    far = batch.rows.filter(~near) if quarantine_far else batch.rows.clear()
    quarantine = batch.quarantine
    if far.height:
        extra = pl.DataFrame(
            {
                "source": far["source"],
                "source_line": far["source_line"],
                "raw": [json.dumps(r, default=str, sort_keys=True) for r in far.drop("source").to_dicts()],
                "reason": [
                    f"line {n}: " + _FAR.format(ts.date().isoformat(), directory_day.isoformat())
                    for n, ts in zip(far["source_line"].to_list(), far["ts"].to_list(), strict=True)
                ],
            },
            schema=DCGM_QUARANTINE_SCHEMA,
        )
        quarantine = pl.concat([quarantine, extra]).sort("source_line")
    return FeedBatch(rows=rows, quarantine=quarantine, rows_in=rows.height + quarantine.height)


def dcgm_file_day_batch(batch: FeedBatch, day: date) -> tuple[FeedBatch, dict[date, int]]:
    """A DCGM file or scrape given by itself (`feeds ingest --day D --dcgm FILE`), for `day`:
    (the part to load under `day`, rows of the input that belong to each other day).

    A sample belongs to the UTC day of its timestamp, so loading the same file for several days
    puts each sample on its own day once (`dcgm_day_batch`). The input's unreadable lines belong
    to its first day (its earliest sample's, else `day`) and are quarantined by that day's load
    only. The part's rows_in plus the other days' rows is the input's rows_in."""
    stamped = batch.rows["ts"].dt.date()
    first = stamped.min() if batch.rows.height else None
    anchor = first if isinstance(first, date) else day
    part = dcgm_day_batch(batch, day, anchor, quarantine_far=False)
    counts = batch.rows.select(stamped.alias("d")).filter(pl.col("d") != day).group_by("d").len()
    others: Counter[date] = Counter(dict(counts.iter_rows()))
    if anchor != day and batch.quarantine.height:
        others[anchor] += batch.quarantine.height
    return part, dict(sorted(others.items()))


def load_dcgm_day(con: duckdb.DuckDBPyConnection, feeds: Path, day: date, endpoints: list[str]) -> IngestReport:
    """Load the DCGM samples stamped on `day` from `feeds/dcgm/<day-1 .. day+1>/`, then scrape
    `endpoints` (pass [] except today). Files of `day`'s directory that cannot be read are
    quarantined whole; unreadable files of the neighbouring directories belong to their own day."""
    report = IngestReport()
    loaded_parts: list[tuple[FeedBatch, bool]] = []  # each part's quarantine and rows_in only
    bad_files: list[tuple[str, int | None, str]] = []

    def parts() -> Iterator[tuple[str, FeedBatch]]:
        # one file at a time: its samples are staged before the next file is read
        for directory_day in (day - timedelta(days=1), day, day + timedelta(days=1)):
            own = directory_day == day
            for path in _files(feeds / "dcgm" / directory_day.isoformat(), DCGM_SUFFIXES):
                source = path.relative_to(feeds).as_posix()
                report.files_in += own
                batch, size, reason = read_feed_file(
                    path, lambda p=path, s=source, d=directory_day: read_dcgm_file(p, s, d), root=feeds
                )
                if batch is None:
                    if own:
                        bad_files.append((source, size, reason or "unreadable"))
                        report.quarantined_files.append((source, reason or "unreadable"))
                    continue
                part = dcgm_day_batch(batch, day, directory_day)
                loaded_parts.append((FeedBatch(rows=part.rows.clear(), quarantine=part.quarantine, rows_in=part.rows_in), own))
                report.files_loaded += own
                yield source, part

    # A neighbour's file is loaded even when it has nothing for this day: that replaces whatever an
    # earlier version of it left here. It counts as a source only with rows. Every other file
    # source of the day (a file removed since) is forgotten in the same transaction.
    loaded = stream_batches(con, "dcgm", parts(), day=day, replace_prefix="dcgm/")
    for (part, own), stats in zip(loaded_parts, loaded, strict=True):
        if own or part.rows_in:
            report.add(part, stats.accepted, stats.quarantined)
    record_file_quarantine(con, "dcgm", day, bad_files)
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


_FOCUS_KEY_COLUMNS = tuple(c for c in focus.FOCUS_TABLE_SCHEMA if c not in ("source", "source_row"))
"""Every billing column: two rows equal on all of them are one charge delivered twice."""


def _quarantine_duplicates(
    con: duckdb.DuckDBPyConnection, day: date | list[date], sources: list[str]
) -> Counter[str]:
    """Move the staged rows of `sources` that equal an earlier row (same file, or a file earlier
    in `sources`) on every billing column from the billing staging table to the quarantine one,
    as `row N: duplicate of [<file>] row M`, day by day (`day`: one day or a list of days, each
    compared only with itself). Returns the moved rows per source.

    In DuckDB, not in Python: a 64-bit hash over the key columns picks the candidate rows, and
    only those are compared exactly (partitioned on every column), so memory does not grow with
    the rows already seen."""
    if not sources:
        return Counter()
    billing, quarantine = STAGING[RAW_FOCUS_BILLING], STAGING[RAW_FOCUS_QUARANTINE]
    cols = ", ".join(f'b."{c}"' for c in _FOCUS_KEY_COLUMNS)
    raw = "json_object(" + ", ".join(f"'{c}', b.\"{c}\"" for c in _FOCUS_KEY_COLUMNS) + ")"
    days = day if isinstance(day, list) else [day]
    params = {"days": days, "sources": sources}
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE _focus_duplicates AS
        WITH candidates AS (
            SELECT b.day, hash({cols}) AS h FROM {billing} AS b
            WHERE list_contains($days, b.day) AND list_contains($sources, b.source)
            GROUP BY b.day, h HAVING count(*) > 1
        ),
        ranked AS (
            SELECT b.day, b.source, b.source_row,
                   row_number() OVER w AS n,
                   first_value(b.source) OVER w AS first_source,
                   first_value(b.source_row) OVER w AS first_row
            FROM {billing} AS b
            SEMI JOIN candidates AS c ON c.day = b.day AND c.h = hash({cols})
            WHERE list_contains($days, b.day) AND list_contains($sources, b.source)
            WINDOW w AS (PARTITION BY b.day, {cols} ORDER BY list_position($sources, b.source), b.source_row)
        )
        SELECT day, source, source_row, first_source, first_row FROM ranked WHERE n > 1
        """,
        params,
    )
    try:
        counts = Counter(dict(con.execute(
            "SELECT source, count(*) FROM _focus_duplicates GROUP BY source").fetchall()))
        if counts:
            con.execute(
                f"""
                INSERT INTO {quarantine} (source, source_row, raw, reason, day, "ChargePeriodStart",
                                          "BillingCurrency", "BilledCost", "EffectiveCost")
                SELECT d.source, d.source_row, CAST({raw} AS VARCHAR),
                       'row ' || d.source_row || ': duplicate of '
                       || CASE WHEN d.first_source = d.source THEN '' ELSE d.first_source || ' ' END
                       || 'row ' || d.first_row || ' (every billing column equal)',
                       d.day, b."ChargePeriodStart", b."BillingCurrency", b."BilledCost", b."EffectiveCost"
                FROM _focus_duplicates AS d
                JOIN {billing} AS b ON b.day = d.day AND b.source = d.source AND b.source_row = d.source_row
                """
            )
            con.execute(
                f"DELETE FROM {billing} AS b USING _focus_duplicates AS d "
                "WHERE b.day = d.day AND b.source = d.source AND b.source_row = d.source_row"
            )
    finally:
        con.execute("DROP TABLE IF EXISTS _focus_duplicates")
    return counts


def _currency_periods(rows: pl.DataFrame) -> pl.DataFrame:
    """Per charge period of accepted rows: the currencies they were billed in and how many."""
    if rows.height == 0 or "original_currency" not in rows.columns:
        return pl.DataFrame(schema=_PERIOD_SCHEMA)
    return rows.group_by("ChargePeriodStart", "ChargePeriodEnd").agg(
        pl.col("original_currency").unique().alias("currencies"), pl.len().cast(pl.Int64).alias("rows")
    )


_PERIOD_SCHEMA = {
    "ChargePeriodStart": focus.UTC_TS,
    "ChargePeriodEnd": focus.UTC_TS,
    "currencies": pl.List(pl.String),
    "rows": pl.Int64,
}


def _merge_currency_periods(a: pl.DataFrame, b: pl.DataFrame) -> pl.DataFrame:
    return pl.concat([a, b]).group_by("ChargePeriodStart", "ChargePeriodEnd").agg(
        pl.col("currencies").list.explode(keep_nulls=False, empty_as_null=False).unique(), pl.col("rows").sum()
    )


def _lone_periods(per_period: pl.DataFrame, source: str) -> list[tuple[date, str]]:
    if per_period.height == 0:
        return []
    usage = per_period.explode("currencies").group_by("currencies").agg(
        pl.col("ChargePeriodStart").n_unique().alias("periods")
    )
    if usage.height < 2:
        return []
    dominant = usage.sort(["periods", "currencies"], descending=[True, False])["currencies"][0]
    flags = []
    for start, end, currencies, n in per_period.sort("ChargePeriodStart").iter_rows():
        if start is None or len(currencies) != 1 or currencies[0] == dominant:
            continue
        until = f"-{end:%Y-%m-%d %H:%M}" if end is not None else ""
        message = (
            f"{source}: charge period {start:%Y-%m-%d %H:%M}{until} is billed only in {currencies[0]} "
            f"({n} row(s)); the file's other periods use {dominant}"
        )
        flags.append((start.date(), message))
    return flags


def lone_currency_periods(rows: pl.DataFrame, source: str) -> list[tuple[date, str]]:
    """Charge periods whose every accepted row is in a currency other than the one most of the
    file's periods use: with one currency per charge period, such a row is its own period's
    currency and passes unconverted, though it is most likely mis-billed. Flagged (asset
    metadata `currency_flags`), not quarantined: the row may be right.
    Returns (day of the period's start, message)."""
    return _lone_periods(_currency_periods(rows), source)


def focus_day_batch(batch: FeedBatch, day: date, anchor_day: date) -> FeedBatch:
    """The rows of `batch` charged on `day`; its quarantined rows (no trustworthy charge period)
    belong to one day per file, `anchor_day`."""
    rows = batch.rows.filter(pl.col("ChargePeriodStart").dt.date() == day)
    quarantine = batch.quarantine if day == anchor_day else batch.quarantine.clear()
    return FeedBatch(rows=rows, quarantine=quarantine, rows_in=rows.height + quarantine.height)


@dataclass
class FocusFileLoad:
    """One FOCUS file streamed into one day: its rows charged on the day (`accepted`), its
    quarantined rows when the day is the file's anchor, and what the whole file showed."""

    accepted: int = 0
    quarantined: int = 0
    reasons: Counter[str] = field(default_factory=Counter)
    batches: int = 0
    first_day: date | None = None
    """The earliest day the file charges (its accepted rows' ChargePeriodStart)."""
    earlier_days: Counter[date] = field(default_factory=Counter)
    """Rows staged for days before the load's day (``earlier_days=True``), per day."""
    currency_periods: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=_PERIOD_SCHEMA))
    other_days: Counter[date] = field(default_factory=Counter)
    """Rows of the file that belong to other days (charged on them, or quarantined rows of a
    file anchored on another day): not loaded under this one."""

    @property
    def rows_in(self) -> int:
        """The file's rows loaded under the day (accepted + quarantined)."""
        return self.accepted + self.quarantined

    @property
    def file_rows_in(self) -> int:
        """Every row of the file: the day's plus the other days'."""
        return self.rows_in + sum(self.other_days.values())


def stream_focus_file(
    con: duckdb.DuckDBPyConnection, path: Path, source: str, day: date, batch_bytes: int = focus.FOCUS_BATCH_BYTES,
    earlier_days: bool = False,
) -> FocusFileLoad:
    """Append the rows of one FOCUS file charged on `day` to the FOCUS staging tables
    (`load.create_staging`) under (`source`, `day`), batch by batch (:func:`focus.iter_focus`),
    each batch committed on its own (DuckDB writes committed appends out; a transaction's own
    appends stay in memory). A quarantined row belongs to the day of its own ChargePeriodStart when
    that cell is readable; one without a readable period to the file's anchor (the earliest day it
    charges; the day loaded for when no row was accepted), so each is counted on one day.
    With `earlier_days`, the file's rows charged before `day` are staged too, each under its own
    day (counted in `earlier_days`, not in `accepted`): :func:`load_focus_day` re-prices those days
    when the file changed them (a correction delivered with a later export).
    Raises what the reader raises; the caller then deletes the partial rows."""
    if path.suffix.lower() == ".csv":
        problem = check_utf8_file(path)
        if problem:
            raise InputError([problem], source)
    out = FocusFileLoad()
    charged = pl.col("ChargePeriodStart").dt.date()
    for batch in focus.iter_focus(path, source=source, batch_bytes=batch_bytes):
        out.batches += 1
        first = batch.rows["ChargePeriodStart"].min()
        if isinstance(first, datetime) and (out.first_day is None or first.date() < out.first_day):
            out.first_day = first.date()
        out.currency_periods = _merge_currency_periods(out.currency_periods, _currency_periods(batch.rows))
        rows = batch.rows.filter(charged == day)
        out.other_days.update(dict(
            batch.rows.filter(charged != day).group_by(charged.alias("d")).len().iter_rows()))
        # a quarantined row whose ChargePeriodStart is readable belongs to that day; the others
        # (no readable period) to the file's anchor, settled once the whole file is read
        dated = batch.quarantine.filter(charged.is_not_null())
        out.other_days.update(dict(dated.filter(charged != day).group_by(charged.alias("d")).len().iter_rows()))
        quarantine = batch.quarantine.filter(charged.is_null() | (charged == day))
        part = FeedBatch(rows=rows, quarantine=quarantine, rows_in=rows.height + quarantine.height)
        stats = append_batch(con, "focus", part, source=source, day=day, staging=True)
        if earlier_days:
            earlier = batch.rows.filter(pl.col("ChargePeriodStart").dt.date() < day)
            for (other,), rows_of_day in earlier.group_by(pl.col("ChargePeriodStart").dt.date()):
                empty = batch.quarantine.clear()
                append_batch(con, "focus", FeedBatch(rows=rows_of_day, quarantine=empty, rows_in=rows_of_day.height),
                             source=source, day=other, staging=True)
                out.earlier_days[other] += rows_of_day.height
        out.accepted += stats.accepted
    # rows without a readable charge period: under the earliest day the file charges, or, when
    # no row was accepted, under the day the file is loaded for (never its modification day:
    # a file whose every row is bad shows on the day someone asked for)
    anchor = out.first_day or day
    undated = "ChargePeriodStart IS NULL"
    if anchor != day:
        (moved,) = con.execute(
            f"SELECT count(*) FROM {STAGING[RAW_FOCUS_QUARANTINE]} WHERE source = ? AND {undated}", [source]
        ).fetchone()
        if moved:
            con.execute(f"DELETE FROM {STAGING[RAW_FOCUS_QUARANTINE]} WHERE source = ? AND {undated}", [source])
            out.other_days[anchor] += moved
    for reason, n in con.execute(
        f"SELECT reason, count(*) FROM {STAGING[RAW_FOCUS_QUARANTINE]} WHERE source = ? AND day = ? GROUP BY reason",
        [source, day],
    ).fetchall():
        out.quarantined += n
        out.reasons[_POSITION.sub("", reason)] += n
    out.other_days = Counter(dict(sorted(out.other_days.items())))
    return out


def load_focus_file(
    con: duckdb.DuckDBPyConnection, path: Path, source: str, day: date, batch_bytes: int = focus.FOCUS_BATCH_BYTES
) -> FocusFileLoad:
    """One FOCUS file named by itself (`feeds ingest --day D --focus FILE`): its rows charged on
    `day`, streamed batch by batch as the saved folder's files are (:func:`stream_focus_file`;
    memory follows the batch, not the file), duplicates quarantined in DuckDB, then one
    transaction replaces the day's rows of `source`. The file's rows of other days are counted
    in `other_days`, not loaded (they load with their own `--day`). A file that fails part-way
    leaves the warehouse as it was."""
    billing, quarantine = create_staging(con, "focus")
    try:
        loaded = stream_focus_file(con, path, source, day, batch_bytes)
        moved = _quarantine_duplicates(con, day, [source]).get(source, 0)
        loaded.accepted -= moved
        loaded.quarantined += moved
        if moved:
            loaded.reasons["duplicate of an earlier row (every billing column equal)"] += moved
        con.execute("BEGIN TRANSACTION")
        try:
            for table, staged in ((RAW_FOCUS_BILLING, billing), (RAW_FOCUS_QUARANTINE, quarantine)):
                con.execute(f"DELETE FROM {table} WHERE day = ? AND source = ?", [day, source])
                con.execute(f"INSERT INTO {table} SELECT * FROM {staged}")
            note_loaded(con, "focus", day)
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
    finally:
        drop_staging(con, "focus")
    return loaded


def _changed_earlier_days(con: duckdb.DuckDBPyConnection, day: date, sources: list[str]) -> list[tuple[str, date, int]]:
    """(source, day, rows) of the staged rows of days before `day` whose (source, day) differs from
    what `raw_focus_billing` holds (row count or the sum of a hash of every billing column), after
    moving their repeated rows to quarantine as that day's own load would."""
    billing = STAGING[RAW_FOCUS_BILLING]
    earlier = [d for (d,) in con.execute(f"SELECT DISTINCT day FROM {billing} WHERE day < ? ORDER BY day",
                                         [day]).fetchall()]
    if not earlier:
        return []
    _quarantine_duplicates(con, earlier, sources)
    cols = ", ".join(f'"{c}"' for c in _FOCUS_KEY_COLUMNS)
    return [(src, d, int(n)) for src, d, n in con.execute(
        f"""
        WITH staged AS (
            SELECT source, day, count(*) AS n, sum(hash({cols})) AS h FROM {billing}
            WHERE day < $day GROUP BY source, day
        ),
        loaded AS (
            SELECT source, day, count(*) AS n, sum(hash({cols})) AS h FROM {RAW_FOCUS_BILLING}
            WHERE list_contains($days, day) AND list_contains($sources, source) GROUP BY source, day
        )
        SELECT s.source, s.day, s.n FROM staged AS s
        LEFT JOIN loaded AS l ON l.source = s.source AND l.day = s.day
        WHERE l.n IS DISTINCT FROM s.n OR l.h IS DISTINCT FROM s.h
        ORDER BY s.day, s.source
        """,
        {"day": day, "days": earlier, "sources": sources},
    ).fetchall()]


def load_focus_day(
    con: duckdb.DuckDBPyConnection, feeds: Path, day: date, batch_bytes: int = focus.FOCUS_BATCH_BYTES
) -> IngestReport:
    """Load the rows of every FOCUS file under `feeds/focus/` whose ChargePeriodStart is on `day`.

    Each file is streamed in batches of `batch_bytes` into staging tables
    (:func:`stream_focus_file`; memory follows the batch, not the file), rows equal to an
    earlier one (path order, then row) are quarantined as duplicates there
    (:func:`_quarantine_duplicates`, in DuckDB), then one transaction replaces the day's rows
    of every file under `focus/` with the staged ones. A quarantined row is loaded under the day
    of its own ChargePeriodStart when that is readable, else under the earliest day its file
    charges (the day loaded for when the file has no accepted row). A file that cannot be read (broken
    header, not UTF-8, not Parquet, a batch that fails) loses what it had appended and is
    quarantined whole for the day.

    Earlier days are never silently left behind: a file's rows charged before `day` (a
    `Correction` of the previous day in today's export, a month-to-date file re-delivered with
    changed days) are compared per (file, day) with what is loaded (row count and a hash of every
    billing column); a (file, day) that differs is replaced by the file's rows in the same
    transaction, recorded as loaded now (so `cost report` calls that day stale until it is
    rebuilt) and listed in `repriced` (asset metadata `repriced_days`). Those rows are not in
    this day's counts."""
    report = IngestReport()
    sources: list[str] = []
    bad_files: list[tuple[str, int | None, str]] = []
    billing, quarantine = create_staging(con, "focus")
    try:
        for path in _files(feeds / "focus", FOCUS_SUFFIXES):
            source = path.relative_to(feeds).as_posix()
            report.files_in += 1
            loaded, size, reason = read_feed_file(
                path, lambda p=path, s=source: stream_focus_file(con, p, s, day, batch_bytes, earlier_days=True),  # type: ignore[arg-type, return-value]
                root=feeds,
            )
            if loaded is None:
                for table in (billing, quarantine):
                    con.execute(f"DELETE FROM {table} WHERE source = ?", [source])
                bad_files.append((source, size, reason or "unreadable"))
                report.quarantined_files.append((source, reason or "unreadable"))
                continue
            assert isinstance(loaded, FocusFileLoad)
            report.rows_in += loaded.rows_in
            report.accepted += loaded.accepted
            report.quarantined += loaded.quarantined
            report.reasons.update(loaded.reasons)
            report.sources += 1
            report.currency_flags += [msg for on, msg in _lone_periods(loaded.currency_periods, source) if on == day]
            report.files_loaded += 1
            sources.append(source)
        moved = _quarantine_duplicates(con, day, sources)
        if moved:
            n = sum(moved.values())
            report.accepted -= n
            report.quarantined += n
            report.reasons.update(dict(con.execute(
                f"SELECT regexp_replace(reason, '^row [0-9]+: ', ''), count(*) FROM {quarantine} "
                "WHERE reason LIKE '%: duplicate of %' GROUP BY 1").fetchall()))
        changed = _changed_earlier_days(con, day, sources)
        # the day's FOCUS rows are replaced in one transaction: readers see the old day or the new one
        con.execute("BEGIN TRANSACTION")
        try:
            for table, staged in ((RAW_FOCUS_BILLING, billing), (RAW_FOCUS_QUARANTINE, quarantine)):
                con.execute(f"DELETE FROM {table} WHERE day = ? AND starts_with(source, 'focus/')", [day])
                con.execute(f"INSERT INTO {table} SELECT * FROM {staged} WHERE day = ?", [day])
            for source, other, rows in changed:
                con.execute(f"DELETE FROM {RAW_FOCUS_BILLING} WHERE day = ? AND source = ?", [other, source])
                con.execute(f"DELETE FROM {RAW_FOCUS_QUARANTINE} WHERE day = ? AND source = ? "
                            "AND reason LIKE '%: duplicate of %'", [other, source])
                for table, staged in ((RAW_FOCUS_BILLING, billing), (RAW_FOCUS_QUARANTINE, quarantine)):
                    con.execute(f"INSERT INTO {table} SELECT * FROM {staged} WHERE day = ? AND source = ?",
                                [other, source])
                note_loaded(con, "focus", other)
                report.repriced.append((source, other, rows))
            note_loaded(con, "focus", day)
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
    finally:
        drop_staging(con, "focus")
    record_file_quarantine(con, "focus", day, bad_files)
    return report


INVENTORY_SUFFIXES = (".json",)
INVENTORY_KINDS = {"nodes": "Node", "pods": "Pod", "volumes": "PersistentVolume"}
"""Inventory feeds (`feeds/<kind>/<day>/*.json`) and the Kubernetes kind each lists:
`kubectl get nodes -o json`, `kubectl get pods -A -o json`, `kubectl get pv -o json`."""


def _inventory_parser(kind: str):
    from gpu_platform.finops.feeds import k8s_inventory

    return {"nodes": k8s_inventory.parse_nodes, "pods": k8s_inventory.parse_pods,
            "volumes": k8s_inventory.parse_volumes}[kind]


def read_inventory_file(kind: str, path: Path, source: str, snapshot_at: datetime | None = None) -> FeedBatch:
    """One `kubectl get nodes -o json` / `kubectl get pods -A -o json` / `kubectl get pv -o json`
    file (`kind`: nodes | pods | volumes),
    read by the same bounded reader as a saved DCGM answer: a regular file only (a FIFO or device
    is refused without blocking), at most `INVENTORY_JSON_LIMITS` bytes, strict UTF-8, JSON nested
    at most 64 levels with no duplicate keys. A file that fails any of these, or is not a v1
    NodeList/PodList, raises InputError naming the problem (its line where there is one); a bad
    item inside a good file is quarantined as a row by the parser.

    The snapshot time is the file's modification time unless given."""
    from gpu_platform.finops.feeds import k8s_inventory

    text = decode_utf8(read_bytes(path, INVENTORY_JSON_LIMITS.max_bytes), source)
    doc = load_json_text(text, source, INVENTORY_JSON_LIMITS)
    at = snapshot_at or datetime.fromtimestamp(path.stat().st_mtime, UTC)
    parse = _inventory_parser(kind)
    try:
        return parse(doc, source=source, snapshot_at=at)
    except k8s_inventory.InventoryError as exc:
        message = str(exc).removeprefix(f"{source}: ")
        raise InputError([message], source) from None


def load_inventory_day(con: duckdb.DuckDBPyConnection, feeds: Path, day: date, kind: str) -> IngestReport:
    """Load every `feeds/<kind>/<day>/*.json` snapshot (`kind`: nodes | pods | volumes) under `day`, in one
    transaction. A file that cannot be read as a whole (a link out of the folder, truncated or
    not JSON, nested too deep, over the size limit, not a NodeList/PodList) is quarantined as a
    file with its reason (`raw_feed_file_quarantine`) and the day's other files load, as for
    DCGM and FOCUS; bad items of a good file are quarantined as rows."""
    if kind not in INVENTORY_KINDS:
        raise ValueError(f"unknown inventory kind {kind!r}")
    report = IngestReport()
    parts: list[tuple[str, FeedBatch]] = []
    bad_files: list[tuple[str, int | None, str]] = []
    for path in _files(feeds / kind / day.isoformat(), INVENTORY_SUFFIXES):
        source = path.relative_to(feeds).as_posix()
        report.files_in += 1
        batch, size, reason = read_feed_file(
            path, lambda p=path, s=source: read_inventory_file(kind, p, s), root=feeds
        )
        if batch is None:
            bad_files.append((source, size, reason or "unreadable"))
            report.quarantined_files.append((source, reason or "unreadable"))
            continue
        parts.append((source, batch))
        report.files_loaded += 1
    # the day's rows under `<kind>/` become exactly these files' (a file removed or quarantined
    # since loses its earlier rows), in the same transaction
    loaded = load_batches(con, kind, parts, day=day, replace_prefix=f"{kind}/")  # type: ignore[arg-type]
    for (_, batch), stats in zip(parts, loaded, strict=True):
        report.add(batch, stats.accepted, stats.quarantined)
    record_file_quarantine(con, kind, day, bad_files)  # type: ignore[arg-type]
    return report


def load_inventory_from_cluster(con: duckdb.DuckDBPyConnection, day: date, kind: str, api=None) -> tuple[str, IngestReport]:
    """Read nodes, pods or PersistentVolumes through the Kubernetes API (`kubernetes` client) and load them under `day`
    as one source `cluster:<kind>` (a re-run of the day replaces that day's snapshot)."""
    from gpu_platform.finops.feeds import k8s_inventory

    doc = k8s_inventory.read_cluster(INVENTORY_KINDS[kind], api=api)
    source = f"cluster:{kind}"
    batch = _inventory_parser(kind)(doc, source=source)
    stats = load_batch(con, kind, batch, source=source, day=day)  # type: ignore[arg-type]
    report = IngestReport()
    report.add(batch, stats.accepted, stats.quarantined)
    return source, report


def load_local_node(con: duckdb.DuckDBPyConnection, day: date, hostname: str, inventory) -> IngestReport:
    """This machine (the local executor's GPUs, `gpu_platform.devices.gpus.local_inventory()`) as one
    `raw_nodes` row under `day`, source `local:nodes`, so local runs are priced the day they run."""
    from gpu_platform.finops.feeds import k8s_inventory

    doc = k8s_inventory.local_node_list(hostname.lower(), list(inventory.devices), inventory.detail)
    batch = k8s_inventory.parse_nodes(doc, source="local:nodes")
    stats = load_batch(con, "nodes", batch, source="local:nodes", day=day)
    report = IngestReport()
    report.add(batch, stats.accepted, stats.quarantined)
    return report
