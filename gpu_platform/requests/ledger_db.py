"""Opening the request ledger's database: its URL (`default_ledger_url`), an engine with the
settings each backend needs (`_make_engine`: SQLite's WAL, busy timeout and foreign keys;
PostgreSQL's pre-pinged pool; a failing statement never echoes its parameters),
the tables and indexes created once even when several processes race to create them
(`create_tables`, `_create_index`), and parsed request payloads kept per process
(`request_from_payload`).

May import `requests/model.py`, `requests/schema.py`.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from gpu_platform.requests.model import JobRequest
from gpu_platform.requests.schema import state_table

PARSED_CACHE_SIZE = 200_000
"""Parsed requests kept per process (`request_from_payload`), least recently used dropped first."""


_parsed: OrderedDict[str, tuple[int, JobRequest]] = OrderedDict()


_parsed_lock = threading.Lock()


def request_from_payload(request_id: str, payload: str) -> JobRequest:
    """The stored request `payload` of `request_id` as a JobRequest, validated once per process.

    A payload never changes once written (the ledger is append-only), and re-validating every
    live request on each gate tick cost ~70 us each (3.5 s a tick at 50k requests), so the
    parsed request is kept by id with the payload's hash: a ledger holding the same id with
    other content (another database in the same process) is parsed again, never served another's.
    Callers share the instance: a JobRequest is frozen (its `env` mapping must not be changed)."""
    key = hash(payload)
    with _parsed_lock:
        hit = _parsed.get(request_id)
        if hit is not None and hit[0] == key:
            _parsed.move_to_end(request_id)
            return hit[1]
    req = JobRequest.from_json(payload)
    with _parsed_lock:
        _parsed[request_id] = (key, req)
        _parsed.move_to_end(request_id)
        while len(_parsed) > PARSED_CACHE_SIZE:
            _parsed.popitem(last=False)
    return req


def _chunks(items: Sequence[Any], size: int = 500) -> Iterable[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def default_ledger_url(env: Mapping[str, str] | None = None) -> str:
    """`GPU_PLATFORM_LEDGER_URL`, else a SQLite file under `GPU_PLATFORM_HOME` (default `./var`)."""
    env = os.environ if env is None else env
    if env.get("GPU_PLATFORM_LEDGER_URL"):
        return env["GPU_PLATFORM_LEDGER_URL"]
    home = Path(env.get("GPU_PLATFORM_HOME", "var")).resolve()
    return f"sqlite:///{home / 'ledger.db'}"


def _make_engine(url: str) -> sa.Engine:
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = sa.create_engine(url, connect_args={"timeout": 30}, hide_parameters=True)

        @sa.event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn, _record):  # pragma: no cover - exercised by every sqlite test
            cur = dbapi_conn.cursor()
            cur.execute("pragma busy_timeout=30000")
            # switching a new file to WAL takes an exclusive lock, and SQLite answers "database is
            # locked" at once (no busy wait) while another process opens the same new file
            for attempt in range(50):
                try:
                    cur.execute("pragma journal_mode=wal")
                    break
                except sqlite3.OperationalError as exc:
                    if "locked" not in str(exc) or attempt == 49:
                        raise
                    time.sleep(0.05 + 0.01 * attempt)
            cur.execute("pragma foreign_keys=on")
            cur.close()

        return engine
    # hide_parameters: a failing statement's error never echoes request values (or anything else).
    return sa.create_engine(url, pool_pre_ping=True, hide_parameters=True)


_CREATE_RACE = ("already exists", "pg_type_typname_nsp_index", "pg_class_relname_nsp_index", "database is locked")
"""What a database says when another process created the table first: SQLite `table ... already
exists`, PostgreSQL `relation ... already exists` or, for two CREATEs in flight at once, a unique
violation on its catalog; SQLite also `database is locked` when it refuses a schema change at once
(no busy wait) while another connection changes the schema of the same new file."""


def create_tables(meta: sa.MetaData, engine: sa.Engine, attempts: int = 20) -> None:
    """`meta.create_all(engine, checkfirst=True)`, safe under a concurrent first use.

    Two processes opening a new database at once both see no table and both create it; the
    second's CREATE fails with "already exists". That error is caught and the check made again
    (the other process's tables are then there, and any still missing is created), up to
    `attempts` times; every other error propagates. Used for the ledger's tables and for those
    that live beside them (lineage, the gate's lane view)."""
    _retry_create_race(lambda: meta.create_all(engine, checkfirst=True), attempts)


def _retry_create_race(create: Callable[[], None], attempts: int) -> None:
    """`create()`, tried again (up to `attempts` times) while it fails on another process having
    created the same object first (`_CREATE_RACE`); every other error propagates at once."""
    for attempt in range(attempts):
        try:
            create()
            return
        except (sa.exc.OperationalError, sa.exc.ProgrammingError, sa.exc.IntegrityError) as exc:
            if attempt == attempts - 1 or not any(m in str(exc.orig) for m in _CREATE_RACE):
                raise
            time.sleep(min(0.5, 0.02 * (attempt + 1)))


_VERSIONS_INDEX = next(ix for ix in state_table.indexes if ix.name == "ix_gp_request_state_versions")


def _create_index(index: sa.Index, engine: sa.Engine, attempts: int = 20) -> None:
    """An index added after its table: `create_all` makes only missing tables, so a ledger whose
    state table predates the index gets it here (once; a concurrent first use that made it first
    is an "already exists", as for `create_tables`)."""
    _retry_create_race(lambda: index.create(engine, checkfirst=True), attempts)
