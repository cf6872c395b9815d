"""The DuckDB side of a build: the build log (`model_builds`), how many models run at a time,
the database settings held while a build runs, and counting the rows a statement wrote.

May import: duckdb, the standard library and `sqlmodels.model`; never a model's SQL text.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, date, datetime
from typing import Any

import duckdb

from gpu_platform.finops.sqlmodels.model import each_day

BUILD_LOG = "model_builds"
BUILD_LOG_DDL = f"""
create table if not exists {BUILD_LOG} (
    day date,
    model varchar not null,
    status varchar not null,
    built_at timestamp not null,
    error varchar,
    last_success_at timestamp
)"""
"""One row per (model, day built): `day` NULL for an unpartitioned model (it serves every day);
`status` `success` or `failed` and `built_at` (UTC) of the last attempt, its `error` (first
2,000 characters) when it failed, `last_success_at` the last attempt that succeeded (NULL: none)."""


def record_build(
    con: duckdb.DuckDBPyConnection, model: str, span: tuple[date, date] | None, error: BaseException | None,
    at: datetime | None = None,
) -> None:
    """Record one build attempt of `model` for every day of `span` (None: unpartitioned) in
    `model_builds`, in its own transaction (call it outside the build's). A successful build
    records itself inside its own transaction instead (:func:`_log_success`)."""
    at = (at or datetime.now(UTC)).astimezone(UTC).replace(tzinfo=None)
    days: list[date | None] = [d for d, _ in each_day(span)] if span is not None else [None]
    status = "success" if error is None else "failed"
    text = None if error is None else (f"{type(error).__name__}: {error}".strip())[:2000]
    con.execute(BUILD_LOG_DDL)
    con.execute("begin transaction")
    try:
        where, params = _log_where(model, span)
        before = dict(con.execute(f"select day, last_success_at from {BUILD_LOG} where {where}", params).fetchall())
        con.execute(f"delete from {BUILD_LOG} where {where}", params)
        con.executemany(
            f"insert into {BUILD_LOG} (day, model, status, built_at, error, last_success_at) values (?, ?, ?, ?, ?, ?)",
            [[d, model, status, at, text, at if error is None else before.get(d)] for d in days],
        )
        con.execute("commit")
    except BaseException:
        con.execute("rollback")
        raise


def _count(con: duckdb.DuckDBPyConnection, cur: duckdb.DuckDBPyConnection, table: str) -> int:
    """The rows a `create table ... as` just wrote: DuckDB answers the statement with one `Count`
    row (as for an insert), so the table is not scanned again; counted when a version does not."""
    desc = cur.description
    if desc and len(desc) == 1 and desc[0][0].lower() == "count":
        (row,) = cur.fetchall()
        return int(row[0])
    return int(con.execute(f"select count(*) from {table}").fetchall()[0][0])


def _workers(con: duckdb.DuckDBPyConnection, workers: int | None, models: int) -> int:
    """How many models :meth:`Project.build` runs at a time on `con`: `workers` (default: DuckDB's
    `threads`), at most one per model; 1 when `con` holds what its cursors would not see (temporary
    tables or views, a session setting of its own, an open transaction)."""
    if workers is None:
        workers = int(con.execute("select current_setting('threads')").fetchall()[0][0])
    workers = max(1, min(workers, models))
    if workers == 1:
        return 1
    # temporary tables and views live in catalog temp (information_schema lists both, and is
    # cheaper to read than duckdb_tables() and duckdb_views(), which size every table)
    temporary = con.execute(
        "select count(*) from information_schema.tables where table_catalog = 'temp'").fetchall()[0][0]
    if temporary:
        return 1
    probe = con.cursor()
    try:
        # the progress bar is the client's display, not the build's: a cursor of a connection made
        # where no terminal is (pytest-xdist, a Dagster step) starts with it on while the connection
        # has it off, which is no reason to build one model at a time
        settings = (
            "select name, value from duckdb_settings() where name not in "
            "('enable_progress_bar', 'enable_progress_bar_print', 'progress_bar_time') order by name"
        )
        if con.execute(settings).fetchall() != probe.execute(settings).fetchall():
            return 1
    finally:
        probe.close()
    try:
        con.execute("begin transaction")
    except duckdb.TransactionException:
        return 1  # the caller's transaction: built on con, as before
    con.execute("rollback")
    return workers


BUILD_CHECKPOINT_THRESHOLD = "1GiB"
"""DuckDB's `checkpoint_threshold` while :meth:`Project.build` runs (DuckDB's default is 16 MiB):
the build's commits append to the WAL, and the warehouse is checkpointed once, when the build's
connection closes (or at the first commit after the build past the threshold set before), not in
the middle of the build, where a checkpoint holds the model whose commit crossed 16 MiB (a month's
`int_gpu_busy`) while its dependents wait. The WAL is written and synced at every commit as
before, so durability is the same; the bound keeps a very large backfill's WAL from growing
without limit."""

_settings_lock = threading.Lock()
_settings_held: dict[tuple[str, str], tuple[int, str, bool]] = {}
"""(database path, setting) -> (builds holding it in this process, the value before, whether changed)."""


@contextmanager
def _held_setting(
    con: duckdb.DuckDBPyConnection, name: str, wanted: Callable[[str], str | None],
) -> Iterator[None]:
    """Set the database-wide DuckDB setting `name` to `wanted(current value)` for the block (None:
    leave it) and restore the value it had after the last of this process's builds holding it on
    that database ends (the setting is the database's, shared by all its connections). An
    in-memory database is left as it is: it never checkpoints, and two of them have no path to
    tell them apart by, so a setting held on one could be restored on the other."""
    (path,) = con.execute(
        "select path from duckdb_databases() where database_name = current_database()").fetchall()[0]
    if not path:
        yield
        return
    key = (path, name)
    with _settings_lock:
        holders, before, changed = _settings_held.get(key, (0, "", False))
        if not holders:
            before = str(con.execute("select current_setting($n)", {"n": name}).fetchall()[0][0])
            value = wanted(before)
            changed = value is not None
            if changed:
                # the name is this module's constant, never a user's; the value is bound
                con.execute(f"set {name} = $v", {"v": value})
        _settings_held[key] = (holders + 1, before, changed)
    try:
        yield
    finally:
        with _settings_lock:
            holders, before, changed = _settings_held.pop(key)
            if holders > 1:
                _settings_held[key] = (holders - 1, before, changed)
            elif changed:
                con.execute(f"set {name} = $v", {"v": before})


def _deferred_checkpoints(con: duckdb.DuckDBPyConnection) -> AbstractContextManager[None]:
    """DuckDB's `checkpoint_threshold` raised to :data:`BUILD_CHECKPOINT_THRESHOLD` for the block
    (never lowered)."""
    return _held_setting(con, "checkpoint_threshold", lambda before: (
        BUILD_CHECKPOINT_THRESHOLD if _size_bytes(before) < _size_bytes(BUILD_CHECKPOINT_THRESHOLD) else None))


def _threads_per_model(con: duckdb.DuckDBPyConnection, workers: int) -> AbstractContextManager[None]:
    """DuckDB's `threads` divided among `workers` models built at the same time, for the block:
    each model's statements then run on threads // workers threads (at least 1) instead of every
    model asking for all of them. Most models read tables under one row group (122,880 rows),
    which a single thread scans anyway; with two models on two threads each the cores were
    oversubscribed (measured: less CPU and wall per rebuild, see docs/finops.md)."""
    def wanted(before: str) -> str | None:
        per_model = max(1, int(before) // workers)
        return str(per_model) if per_model < int(before) else None

    return _held_setting(con, "threads", wanted)


_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([kmgtp]?i?b|bytes)?\s*$", re.I)
_UNITS = {"": 1, "b": 1, "bytes": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "pb": 10**15,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "pib": 2**50}


def _size_bytes(text: str) -> float:
    """Bytes of a DuckDB memory size as `current_setting` shows it ('16.0 MiB', '1.8 GiB')."""
    m = _SIZE.match(text)
    if not m:
        raise ValueError(f"not a DuckDB size: {text!r}")
    return float(m.group(1)) * _UNITS[(m.group(2) or "").lower()]


def _main_tables(con: duckdb.DuckDBPyConnection) -> set[str]:
    return {r[0] for r in con.execute("select table_name from duckdb_tables() where schema_name = 'main'").fetchall()}


def _log_where(model: str, span: tuple[date, date] | None) -> tuple[str, dict[str, Any]]:
    where = "model = $model and " + ("day is null" if span is None else "day between $first and $last")
    params: dict[str, Any] = {"model": model}
    if span is not None:
        params |= {"first": span[0], "last": span[1]}
    return where, params


def _log_success(con: duckdb.DuckDBPyConnection, model: str, span: tuple[date, date] | None) -> None:
    """`model_builds` rows of a successful build, written in the build's own transaction (so a
    model and its log commit once): one statement for every day of the span."""
    at = datetime.now(UTC).replace(tzinfo=None)
    where, params = _log_where(model, span)
    con.execute(f"delete from {BUILD_LOG} where {where}", params)
    if span is None:
        con.execute(f"insert into {BUILD_LOG} values (null, $model, 'success', $at, null, $at)",
                    {"model": model, "at": at})
    else:
        con.execute(
            f"insert into {BUILD_LOG} select cast(d as date), $model, 'success', $at, null, $at "
            "from unnest(generate_series($first::timestamp, $last::timestamp, interval 1 day)) as t(d)",
            {**params, "at": at})

