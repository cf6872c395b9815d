"""Write parsed feed batches into the DuckDB warehouse, one (source, day) at a time.

A load deletes the rows of its (source, day) from the raw table and from its quarantine
table, then inserts the batch, in one transaction: re-running a day gives the same rows.
Table names come from a fixed allowlist; every user value travels as a query parameter.

Every table has a ``day DATE`` column: the partition day the rows were loaded under (UTC).
It is what makes a quarantined line, which may have no readable timestamp, belong to one
partition.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Literal

import duckdb
import polars as pl

from gpu_platform.finops.feeds.focus import FOCUS_TABLE_SCHEMA
from gpu_platform.finops.feeds.k8s_inventory import (
    NODE_SCHEMA,
    POD_SCHEMA,
    QUARANTINE_SCHEMA,
    RAW_NODES,
    RAW_NODES_QUARANTINE,
    RAW_PODS,
    RAW_PODS_QUARANTINE,
    RAW_VOLUMES,
    RAW_VOLUMES_QUARANTINE,
    VOLUME_SCHEMA,
)
from gpu_platform.finops.feeds.schemas import (
    DCGM_HOURLY_SCHEMA,
    DCGM_QUARANTINE_SCHEMA,
    DCGM_SAMPLE_SCHEMA,
    FILE_QUARANTINE_SCHEMA,
    FOCUS_QUARANTINE_SCHEMA,
    RAW_DCGM_HOURLY,
    RAW_DCGM_QUARANTINE,
    RAW_DCGM_SAMPLES,
    RAW_FEED_FILE_QUARANTINE,
    RAW_FOCUS_BILLING,
    RAW_FOCUS_QUARANTINE,
    RAW_SERVICE_REQUESTS,
    RAW_SERVICE_REQUESTS_QUARANTINE,
    SERVICE_REQUEST_SCHEMA,
    FeedBatch,
)

Feed = Literal["dcgm", "focus", "nodes", "pods", "volumes", "requests"]


@dataclass(frozen=True)
class LoadStats:
    """Counts of one load: ``rows_in == accepted + quarantined``."""

    rows_in: int
    accepted: int
    quarantined: int


def _duckdb_type(dtype: pl.DataType) -> str:
    if isinstance(dtype, pl.Datetime):
        return "TIMESTAMP"
    if isinstance(dtype, pl.Decimal):
        return f"DECIMAL({dtype.precision}, {dtype.scale})"
    mapping = {
        pl.String: "VARCHAR",
        pl.Float64: "DOUBLE",
        pl.Int32: "INTEGER",
        pl.Int64: "BIGINT",
        pl.Date: "DATE",
    }
    for pl_type, sql in mapping.items():
        if isinstance(dtype, pl_type):
            return sql
    raise TypeError(f"no DuckDB type for {dtype}")


_TABLES: dict[str, dict[str, pl.DataType]] = {
    RAW_DCGM_SAMPLES: DCGM_SAMPLE_SCHEMA,
    RAW_DCGM_QUARANTINE: DCGM_QUARANTINE_SCHEMA,
    RAW_DCGM_HOURLY: DCGM_HOURLY_SCHEMA,
    RAW_FOCUS_BILLING: FOCUS_TABLE_SCHEMA,
    RAW_FOCUS_QUARANTINE: FOCUS_QUARANTINE_SCHEMA,
    RAW_FEED_FILE_QUARANTINE: FILE_QUARANTINE_SCHEMA,
    RAW_NODES: NODE_SCHEMA,
    RAW_NODES_QUARANTINE: QUARANTINE_SCHEMA,
    RAW_PODS: POD_SCHEMA,
    RAW_PODS_QUARANTINE: QUARANTINE_SCHEMA,
    RAW_VOLUMES: VOLUME_SCHEMA,
    RAW_VOLUMES_QUARANTINE: QUARANTINE_SCHEMA,
    RAW_SERVICE_REQUESTS: SERVICE_REQUEST_SCHEMA,
    RAW_SERVICE_REQUESTS_QUARANTINE: DCGM_QUARANTINE_SCHEMA,
}
_FEEDS: dict[str, tuple[str, str]] = {
    "dcgm": (RAW_DCGM_SAMPLES, RAW_DCGM_QUARANTINE),
    "focus": (RAW_FOCUS_BILLING, RAW_FOCUS_QUARANTINE),
    "nodes": (RAW_NODES, RAW_NODES_QUARANTINE),
    "pods": (RAW_PODS, RAW_PODS_QUARANTINE),
    "volumes": (RAW_VOLUMES, RAW_VOLUMES_QUARANTINE),
    "requests": (RAW_SERVICE_REQUESTS, RAW_SERVICE_REQUESTS_QUARANTINE),
}
_NOT_NULL = {
    RAW_DCGM_SAMPLES: {"ts", "metric", "value", "source", "source_line"},
    RAW_DCGM_QUARANTINE: {"source", "reason"},
    RAW_DCGM_HOURLY: {"hour", "metric", "samples", "distinct_ts", "busy_micro", "source"},
    RAW_FOCUS_BILLING: {"source", "source_row", "focus_version"},
    RAW_FOCUS_QUARANTINE: {"source", "reason"},
    RAW_FEED_FILE_QUARANTINE: {"feed", "source", "reason"},
    RAW_NODES: {"node", "snapshot_at", "source", "source_row"},
    RAW_NODES_QUARANTINE: {"source", "reason"},
    RAW_PODS: {"namespace", "pod", "snapshot_at", "source", "source_row"},
    RAW_PODS_QUARANTINE: {"source", "reason"},
    RAW_VOLUMES: {"volume", "snapshot_at", "source", "source_row"},
    RAW_VOLUMES_QUARANTINE: {"source", "reason"},
    RAW_SERVICE_REQUESTS: {"ts", "service", "requests", "source", "source_line"},
    RAW_SERVICE_REQUESTS_QUARANTINE: {"source", "reason"},
}


# The rollup of busy samples (see DCGM_HOURLY_SCHEMA). `{rows}` is one of two fixed relation names
# (the staged batch or raw_dcgm_samples), `{day}` the `day` column or the `$day` parameter, `{where}`
# empty or a fixed clause on `$first`/`$last`, `{distinct}` one of the two fixed expressions below:
# never a user value; values come in as named parameters.
_ROLLUP_SELECT = """
    SELECT
        date_trunc('hour', ts) AS hour,
        metric,
        hostname,
        gpu,
        gpu_instance_id,
        min(gpu_instance_profile) AS gpu_instance_profile,
        namespace,
        pod,
        min(model_name) AS model_name,
        count(*) AS samples,
        {distinct} AS distinct_ts,
        -- the staging busy rule per sample: GPU_UTIL / 100, clamped to 1, rounded to 1e-6 (half away
        -- from zero, as decimal(9, 6)); whole micro-units summed as doubles are exact below 2^53
        CAST(sum(round(least(CASE WHEN metric = 'DCGM_FI_DEV_GPU_UTIL' THEN value / 100.0 ELSE value END, 1.0)
                 * 1000000.0)) AS BIGINT) AS busy_micro,
        source,
        {day} AS day
    FROM {rows}
    WHERE metric IN ('DCGM_FI_PROF_GR_ENGINE_ACTIVE', 'DCGM_FI_DEV_GPU_UTIL')
      -- values near 2^63 are DCGM blank sentinels, not data
      AND value IS NOT NULL AND NOT isnan(value) AND value >= 0 AND value < 1e15
      {where}
    GROUP BY ALL
"""
# Distinct timestamps without a hash set per group: the seconds of the hour that hold a sample, as
# a 3,600-bit bitmap per group (450 bytes, however many samples). When every sample has a second of
# its own, the count of set bits equals the samples and every timestamp is distinct; a group with
# two samples in one second (a repeat, or sampling faster than 1 Hz) is recounted exactly. The
# second is taken from whole microseconds by floor division: `epoch_ms` rounds, so a sample in
# the last half millisecond of an hour would index second 3,600 and fail the whole load. An
# infinite timestamp has no second (NULL, not set; a group of only those counts 0), so its group
# is recounted exactly.
_SECONDS_SET = (
    "coalesce(bit_count(bitstring_agg("
    "CAST((epoch_us(ts) - epoch_us(date_trunc('hour', ts))) // 1000000 AS INTEGER), 0, 3599)), 0)"
)
# On the integer: ~2.5x cheaper than on the timestamp. `epoch_us` of +-infinity is NULL, which
# count(DISTINCT) would skip, so those two get integers of their own no finite timestamp has.
_EXACT_DISTINCT = (
    "count(DISTINCT coalesce(epoch_us(ts), CASE WHEN ts > TIMESTAMP '2000-01-01' "
    "THEN 9223372036854775807 ELSE -9223372036854775807 END))"
)
_ROLLUP_KEYS = ("hour", "metric", "hostname", "gpu", "gpu_instance_id", "namespace", "pod", "source", "day")
_ROLLUP_COLUMNS = ", ".join(f'"{c}"' for c in [*DCGM_HOURLY_SCHEMA, "day"])
_ROLLUP_STAGE = "_dcgm_rollup"
_ROLLUP_EXACT = "_dcgm_rollup_exact"


def _insert_rollup(con: duckdb.DuckDBPyConnection, rows: str, day: str, where: str, params: dict) -> None:
    """Append the rollup of ``rows`` (filtered by ``where``) to ``raw_dcgm_hourly``, in the
    caller's transaction. One pass over the samples; groups holding two samples in one second
    of their hour (none, on a 15 s feed) take a second pass restricted to them."""
    key_hash = "hash(" + ", ".join(_ROLLUP_KEYS) + ")"
    sample_hash = "hash(date_trunc('hour', ts), " + ", ".join(_ROLLUP_KEYS[1:-1]) + f", {day})"
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE {_ROLLUP_STAGE} AS "
        + _ROLLUP_SELECT.format(rows=rows, day=day, where=where, distinct=_SECONDS_SET),
        params,
    )
    crowded = f"SELECT {key_hash} FROM {_ROLLUP_STAGE} WHERE distinct_ts < samples"
    if con.execute(f"SELECT count(*) FROM ({crowded})").fetchall()[0][0]:
        exact_where = f"{where} AND {sample_hash} IN ({crowded})"
        con.execute(
            f"CREATE OR REPLACE TEMP TABLE {_ROLLUP_EXACT} AS "
            + _ROLLUP_SELECT.format(rows=rows, day=day, where=exact_where, distinct=_EXACT_DISTINCT),
            params,
        )
        same = " AND ".join(f"r.{k} IS NOT DISTINCT FROM e.{k}" for k in _ROLLUP_KEYS)
        con.execute(
            f"UPDATE {_ROLLUP_STAGE} AS r SET distinct_ts = e.distinct_ts FROM {_ROLLUP_EXACT} AS e "
            f"WHERE r.distinct_ts < r.samples AND {same}"
        )
        con.execute(f"DROP TABLE {_ROLLUP_EXACT}")
    con.execute(f"INSERT INTO {RAW_DCGM_HOURLY} ({_ROLLUP_COLUMNS}) SELECT {_ROLLUP_COLUMNS} FROM {_ROLLUP_STAGE}")
    con.execute(f"DROP TABLE {_ROLLUP_STAGE}")


def rollup_dcgm_samples(
    database: str | Path | duckdb.DuckDBPyConnection, days: tuple[date, date] | None = None
) -> int:
    """Rebuild ``raw_dcgm_hourly`` from ``raw_dcgm_samples`` (every load day, or the load days in
    ``days``, inclusive); returns the rollup rows written.

    ``load_batch`` keeps the rollup in step for every batch it loads; this is for samples written
    to ``raw_dcgm_samples`` another way (a seeded table, a view over Parquet history, a warehouse
    from before the rollup existed). Rows whose load ``day`` is NULL are rolled up with
    ``days=None`` only."""
    with _connection(database) as con:
        con.execute(table_ddl(RAW_DCGM_HOURLY))
        where = "" if days is None else "AND day BETWEEN $first AND $last"
        params = {} if days is None else {"first": days[0], "last": days[1]}
        con.execute("BEGIN TRANSACTION")
        try:
            if days is None:
                con.execute(f"DELETE FROM {RAW_DCGM_HOURLY}")
            else:
                con.execute(f"DELETE FROM {RAW_DCGM_HOURLY} WHERE day BETWEEN $first AND $last", params)
            _insert_rollup(con, RAW_DCGM_SAMPLES, "day", where, params)
            n = con.execute(f"SELECT count(*) FROM {RAW_DCGM_HOURLY}").fetchall()[0][0]
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
    return int(n)


def table_ddl(table: str) -> str:
    """``CREATE TABLE IF NOT EXISTS`` for one allowlisted raw table (its columns plus ``day``)."""
    schema = _TABLES[table]
    cols = [
        f'"{name}" {_duckdb_type(dtype)}{" NOT NULL" if name in _NOT_NULL[table] else ""}'
        for name, dtype in schema.items()
    ]
    cols.append('"day" DATE NOT NULL')
    return f"CREATE TABLE IF NOT EXISTS {table} ({', '.join(cols)})"


def ensure_tables(con: duckdb.DuckDBPyConnection, backfill: bool = True) -> None:
    """Create the raw tables (samples, billing, their row quarantines, the file quarantine) when missing; add columns a table created elsewhere lacks.

    A table made first by another writer with the agreed columns only (``extra_labels``,
    ``day`` or FOCUS columns missing) gets the missing ones as nullable columns; existing
    columns keep their types (a DECIMAL(18, 6) there rounds our DECIMAL(38, 15) on insert).
    A warehouse with samples but no ``raw_dcgm_hourly`` yet (made before the rollup) gets it
    rolled up from them once (``backfill``).
    """
    columns: dict[str, set[str]] = {}
    for table, column in con.execute(
        "SELECT table_name, column_name FROM information_schema.columns "
        "WHERE table_schema = 'main' AND list_contains(?, table_name)", [list(_TABLES)]
    ).fetchall():
        columns.setdefault(table, set()).add(column)
    for table, schema in _TABLES.items():
        if table not in columns:
            con.execute(table_ddl(table))
            continue
        present = columns[table]
        wanted = {**{name: _duckdb_type(dtype) for name, dtype in schema.items()}, "day": "DATE"}
        for name, sql_type in wanted.items():
            if name not in present:
                con.execute(f'ALTER TABLE {table} ADD COLUMN "{name}" {sql_type}')
    if backfill and RAW_DCGM_HOURLY not in columns:
        rollup_dcgm_samples(con)


RAW_FEED_LOADS = "raw_feed_loads"
FEED_LOADS_DDL = (
    f"CREATE TABLE IF NOT EXISTS {RAW_FEED_LOADS} (feed VARCHAR NOT NULL, day DATE NOT NULL, loaded_at TIMESTAMP NOT NULL)"
)
"""When each feed's rows of a day last changed: (feed, day, loaded_at UTC), one row per feed and
day. `cost report` compares it with the day's last successful build to say the day is stale."""


def note_loaded(con: duckdb.DuckDBPyConnection, feed: str, day: date) -> None:
    """Record that `feed`'s rows of `day` changed now (inside the caller's transaction, if any)."""
    con.execute(FEED_LOADS_DDL)
    con.execute(f"DELETE FROM {RAW_FEED_LOADS} WHERE feed = ? AND day = ?", [feed, day])
    con.execute(
        f"INSERT INTO {RAW_FEED_LOADS} (feed, day, loaded_at) VALUES (?, ?, ?)",
        [feed, day, datetime.now(UTC).replace(tzinfo=None)],
    )


def record_file_quarantine(
    con: duckdb.DuckDBPyConnection, feed: Feed, day: date, files: list[tuple[str, int | None, str]]
) -> None:
    """Replace the (``feed``, ``day``) file quarantine with ``files``: (source, size_bytes, reason)."""
    ensure_tables(con)
    con.execute("BEGIN TRANSACTION")
    try:
        con.execute(f"DELETE FROM {RAW_FEED_FILE_QUARANTINE} WHERE feed = ? AND day = ?", [feed, day])
        if files:
            con.executemany(
                f"INSERT INTO {RAW_FEED_FILE_QUARANTINE} (feed, source, size_bytes, reason, day) VALUES (?, ?, ?, ?, ?)",
                [[feed, src, size, reason, day] for src, size, reason in files],
            )
            note_loaded(con, feed, day)
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise


@contextlib.contextmanager
def _connection(database: str | Path | duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    if isinstance(database, duckdb.DuckDBPyConnection):
        yield database
        return
    con = duckdb.connect(str(database))
    try:
        yield con
    finally:
        con.close()


def _for_duckdb(df: pl.DataFrame, schema: dict[str, pl.DataType]) -> pl.DataFrame:
    """Cast to the table schema; UTC timestamps become naive UTC (DuckDB ``TIMESTAMP``)."""
    missing = [c for c in schema if c not in df.columns]
    if missing:
        raise ValueError(f"batch lacks column(s) {missing}")
    out = df.select([pl.col(c).cast(t) for c, t in schema.items()])
    return out.with_columns(
        [pl.col(c).dt.replace_time_zone(None) for c, t in schema.items() if isinstance(t, pl.Datetime)]
    )


def _checked(feed: Feed, batch: FeedBatch, source: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The batch's rows and quarantine cast for DuckDB, after the checks ``load_batch`` promises."""
    raw_table, q_table = _FEEDS[feed]
    for frame in (batch.rows, batch.quarantine):
        others = set(frame["source"].unique().to_list()) - {source} if frame.height else set()
        if others:
            raise ValueError(f"batch has rows of source(s) {sorted(others)}, not only {source!r}")
    if batch.rows_in != batch.accepted + batch.quarantined:
        raise ValueError(
            f"batch of {source!r} is inconsistent: rows_in={batch.rows_in} but "
            f"accepted={batch.accepted} + quarantined={batch.quarantined}"
        )
    return _for_duckdb(batch.rows, _TABLES[raw_table]), _for_duckdb(batch.quarantine, _TABLES[q_table])


def _stack(frames: list[pl.DataFrame], table: str) -> pl.DataFrame:
    schema = _TABLES[table]
    return pl.concat(frames) if frames else _for_duckdb(pl.DataFrame(schema=schema), schema)


def load_batch(
    database: str | Path | duckdb.DuckDBPyConnection,
    feed: Feed,
    batch: FeedBatch,
    *,
    source: str,
    day: date,
) -> LoadStats:
    """Replace the (``source``, ``day``) partition of ``feed``'s raw and quarantine tables.

    ``database``: a DuckDB file path (opened and closed here) or an open connection. Every row
    of ``batch`` must carry ``source``; a batch with rows of another source, or whose counts
    do not add up, raises ``ValueError`` before anything is written. Tables are created when
    missing (see :func:`ensure_tables`).
    """
    return load_batches(database, feed, [(source, batch)], day=day)[0]


def load_batches(
    database: str | Path | duckdb.DuckDBPyConnection,
    feed: Feed,
    parts: Sequence[tuple[str, FeedBatch]],
    *,
    day: date,
    replace_prefix: str | None = None,
) -> list[LoadStats]:
    """``load_batch`` for several (source, batch) parts of one day, in one transaction.

    Every part's (source, day) partition is replaced. With ``replace_prefix``, the day's rows of
    every other source under that prefix are deleted too (files removed since the last load), so
    the day's rows under the prefix are exactly ``parts`` afterwards. One delete and one insert
    per table instead of one per part: a DCGM day of 24 files loads in one statement each.
    Nothing is written when any part fails its checks.
    """
    if feed not in _FEEDS:
        raise ValueError(f"unknown feed {feed!r}; expected one of {sorted(_FEEDS)}")
    raw_table, q_table = _FEEDS[feed]
    checked = [_checked(feed, batch, source) for source, batch in parts]
    sources = [source for source, _ in parts]
    if len(set(sources)) != len(sources):
        raise ValueError(f"sources appear more than once in one load: {sorted(sources)}")
    rows = _stack([r for r, _ in checked], raw_table)
    quarantine = _stack([q for _, q in checked], q_table)
    # which rows go: the parts' sources, and (replace_prefix) every other source under the prefix
    where = "day = ? AND (list_contains(?, source)" + (" OR starts_with(source, ?))" if replace_prefix else ")")
    params: list = [day, sources] + ([replace_prefix] if replace_prefix else [])
    with _connection(database) as con:
        ensure_tables(con)
        staged = {"_incoming_rows": (raw_table, rows), "_incoming_quarantine": (q_table, quarantine)}
        for view, (_, frame) in staged.items():
            con.register(view, frame.to_arrow())
        try:
            con.execute("BEGIN TRANSACTION")
            try:
                for view, (table, frame) in staged.items():
                    con.execute(f"DELETE FROM {table} WHERE {where}", params)
                    if frame.height:
                        cols = ", ".join(f'"{c}"' for c in frame.columns)
                        con.execute(
                            f"INSERT INTO {table} ({cols}, day) SELECT {cols}, ?::DATE FROM {view}", [day]
                        )
                if feed == "dcgm":
                    # the hourly rollup of the same partitions, in the same transaction
                    con.execute(f"DELETE FROM {RAW_DCGM_HOURLY} WHERE {where}", params)
                    if rows.height:
                        _insert_rollup(con, "_incoming_rows", "CAST($day AS DATE)", "", {"day": day})
                note_loaded(con, feed, day)
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
        finally:
            for view in staged:
                con.unregister(view)
    return [LoadStats(rows_in=b.rows_in, accepted=r.height, quarantined=q.height)
            for (_, b), (r, q) in zip(parts, checked, strict=True)]


STAGING = {
    RAW_FOCUS_BILLING: "_staging_focus_billing",
    RAW_FOCUS_QUARANTINE: "_staging_focus_quarantine",
    RAW_DCGM_SAMPLES: "_staging_dcgm_samples",
    RAW_DCGM_QUARANTINE: "_staging_dcgm_quarantine",
}
"""Private tables a streamed load fills batch by batch before one transaction moves them into
the raw tables (DuckDB keeps a transaction's own appends in memory, beyond its memory_limit;
committed appends to a table are written out and evicted)."""


def create_staging(con: duckdb.DuckDBPyConnection, feed: Feed) -> tuple[str, str]:
    """(Re)create the empty staging tables of ``feed`` (``focus`` and ``dcgm`` have them), shaped
    like its raw tables; returns their names."""
    names = tuple(STAGING[t] for t in _FEEDS[feed])
    ensure_tables(con)
    for table, staging in zip(_FEEDS[feed], names, strict=True):
        con.execute(f"CREATE OR REPLACE TEMP TABLE {staging} AS SELECT * FROM {table} LIMIT 0")
    return names  # type: ignore[return-value]


def drop_staging(con: duckdb.DuckDBPyConnection, feed: Feed) -> None:
    for table in _FEEDS[feed]:
        con.execute(f"DROP TABLE IF EXISTS {STAGING[table]}")


def append_batch(
    con: duckdb.DuckDBPyConnection, feed: Feed, batch: FeedBatch, *, source: str, day: date, staging: bool = False
) -> LoadStats:
    """Insert ``batch`` under (``source``, ``day``) without deleting anything and without a
    transaction of its own, into the raw tables or (``staging``) the feed's staging tables
    (:func:`create_staging`): for a caller streaming a file batch by batch. The checks are
    :func:`load_batch`'s; the tables must exist."""
    if feed not in _FEEDS:
        raise ValueError(f"unknown feed {feed!r}; expected one of {sorted(_FEEDS)}")
    raw_table, q_table = _FEEDS[feed]
    rows, quarantine = _checked(feed, batch, source)
    if staging:
        raw_table, q_table = STAGING[raw_table], STAGING[q_table]
    for view, table, frame in (("_append_rows", raw_table, rows), ("_append_quarantine", q_table, quarantine)):
        if not frame.height:
            continue
        con.register(view, frame.to_arrow())
        try:
            cols = ", ".join(f'"{c}"' for c in frame.columns)
            con.execute(f"INSERT INTO {table} ({cols}, day) SELECT {cols}, ?::DATE FROM {view}", [day])
        finally:
            con.unregister(view)
    return LoadStats(rows_in=batch.rows_in, accepted=rows.height, quarantined=quarantine.height)


def stream_batches(
    database: str | Path | duckdb.DuckDBPyConnection,
    feed: Feed,
    parts: Iterable[tuple[str, FeedBatch]],
    *,
    day: date,
    replace_prefix: str | None = None,
) -> list[LoadStats]:
    """:func:`load_batches` for parts produced one at a time (``dcgm`` and ``focus``): each part
    is checked and appended to the feed's staging tables as it comes, so only one part's rows
    are in memory; then one transaction replaces the day's partitions from the staging tables
    and, for ``dcgm``, writes the hourly rollup of the staged samples (one pass over them, per
    source, as :func:`load_batches` does). Nothing reaches the raw tables when a part fails its
    checks."""
    raw_table, q_table = _FEEDS[feed]
    with _connection(database) as con:
        staged = create_staging(con, feed)
        try:
            stats: list[LoadStats] = []
            sources: list[str] = []
            for source, batch in parts:
                if source in sources:
                    raise ValueError(f"sources appear more than once in one load: [{source!r}]")
                stats.append(append_batch(con, feed, batch, source=source, day=day, staging=True))
                sources.append(source)
            where = "day = ? AND (list_contains(?, source)" + (" OR starts_with(source, ?))" if replace_prefix else ")")
            params: list = [day, sources] + ([replace_prefix] if replace_prefix else [])
            con.execute("BEGIN TRANSACTION")
            try:
                for table, staging in zip((raw_table, q_table), staged, strict=True):
                    con.execute(f"DELETE FROM {table} WHERE {where}", params)
                    con.execute(f"INSERT INTO {table} SELECT * FROM {staging}")
                if feed == "dcgm":
                    con.execute(f"DELETE FROM {RAW_DCGM_HOURLY} WHERE {where}", params)
                    _insert_rollup(con, staged[0], "day", "", {})
                note_loaded(con, feed, day)
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
        finally:
            drop_staging(con, feed)
    return stats
