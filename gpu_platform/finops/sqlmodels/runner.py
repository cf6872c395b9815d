"""A small dbt-like runner: `.sql` models with `{{ ref() }}`, `{{ source() }}`, `{{ var() }}`, run in DuckDB.

Layout of a project directory::

    project.yml          vars (defaults), sources (name -> upstream asset), seeds
    seeds/*.csv          small tables loaded as-is (`{{ ref('price_book') }}`)
    staging/*.sql|.yml   one model per pair; likewise intermediate/ and marts/

Rendering never formats values into SQL: `{{ var('day_from') }}` becomes the bound parameter
`$day_from`. `ref`/`source` names are checked against `^[a-z_][a-z0-9_]*$` and become bare
table names (an ephemeral model's ref becomes its parenthesised SQL).

A model's yml may list `depends_on: [model]`: a graph edge without reading the model (dbt's
`-- depends_on: {{ ref() }}`); an ephemeral model listed there has its data tests run with this one.

Materialization: a model with `partition_by: day` reads `$day_from` / `$day_to` and is rebuilt
for one day or a range of days (`delete from t where day between $day_from and $day_to;
insert into t ...` in one transaction, table created on first run); a model without it is
`create or replace table`; `materialized: ephemeral` is never stored, only inlined.

Every build of a model is recorded in `model_builds` (:data:`BUILD_LOG_DDL`): one row per model
and day built (day NULL for an unpartitioned model), with the last attempt's status, time and
error and the time of the last successful build, so a report can say which day is stale
(`gpu_platform.finops.sqlmodels.report.staleness`).
"""

from __future__ import annotations

import queue
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, timedelta
from graphlib import CycleError, TopologicalSorter
from pathlib import Path
from typing import Any

import duckdb
import sqlglot
import sqlglot.errors
import yaml

LAYERS = ("staging", "intermediate", "marts")
_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")
_JINJA = re.compile(r"\{\{\s*(ref|source|var)\s*\(\s*'([^']*)'\s*\)\s*\}\}")
_ANY_JINJA = re.compile(r"\{\{.*?\}\}|\{%.*?%\}", re.S)
_PARAM = re.compile(r"\$([a-z_][a-z0-9_]*)")
_TEST_KINDS = ("not_null", "unique", "relationships", "accepted_values", "expression_is_true")


class ProjectError(ValueError):
    """A project that cannot load or run: bad template, unknown ref, cycle, bad yml, bad SQL."""


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
    days: list[date | None] = [d for d, _ in _each_day(span)] if span is not None else [None]
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


@dataclass(frozen=True)
class DataTest:
    """One data test. `sql` selects the failing rows (before any day filter)."""

    model: str
    name: str
    kind: str
    sql: str
    target: str | None = None
    """relationships: the parent model."""
    blocking: bool = False
    """`blocking: true` in the yml: in Dagster a blocking ERROR check (downstream assets do not run)."""
    warn: bool = False
    """`severity: warn` in the yml: a flag, not a failure: a WARN check in Dagster (never blocking),
    a WARN line from `cost build` without exit 1 (docs/finops.md, "What blocks a day")."""
    details: str | None = None
    """`details:` in the yml: a query run when the test fails (binds $day_from / $day_to), whose
    rows explain the failure (e.g. the largest exceptions)."""


@dataclass(frozen=True)
class Model:
    """One model (or seed). `sql` is rendered: refs/sources are table names, vars are `$name`."""

    name: str
    layer: str
    path: Path
    sql: str
    refs: tuple[str, ...]
    sources: tuple[str, ...]
    params: tuple[str, ...]
    description: str = ""
    grain: str = ""
    partition_by: str | None = None
    materialized: str = "table"
    """table (partitioned: delete+insert per day range; else create or replace) or ephemeral
    (never stored: inlined as a subquery into the models that ref it)."""
    columns: dict[str, str] = field(default_factory=dict)
    tests: tuple[DataTest, ...] = ()
    seed_path: Path | None = None

    @property
    def test_refs(self) -> tuple[str, ...]:
        """Models this model's relationships tests read: built first, like refs."""
        return tuple(dict.fromkeys(t.target for t in self.tests if t.target))

    @property
    def is_seed(self) -> bool:
        return self.seed_path is not None

    @property
    def is_ephemeral(self) -> bool:
        return self.materialized == "ephemeral"


@dataclass(frozen=True)
class ModelResult:
    """One model built: rows in the built partition(s) (whole table when unpartitioned)."""

    name: str
    rows: int
    seconds: float


@dataclass(frozen=True)
class TestResult:
    """One data test's outcome: `failures` failing rows of `sql` (0 = passed)."""

    __test__ = False  # not a pytest test class

    model: str
    test_name: str
    failures: int
    sql: str
    blocking: bool = False
    details: tuple[dict[str, Any], ...] = ()
    """Rows of the test's `details` query when it failed."""
    warn: bool = False
    """A `severity: warn` test: its failure flags the day, it does not fail the build."""

    @property
    def passed(self) -> bool:
        return self.failures == 0

    def describe(self) -> str:
        """One line per failure detail (empty when passed or without details)."""
        return "\n".join(", ".join(f"{k}={v}" for k, v in row.items() if v is not None) for row in self.details)


Progress = Callable[[str, int, int], None]
"""progress(model_name, index, total): called before each model is built."""


def render(
    template: str, where: str, resolve_ref: Callable[[str], str] | None = None
) -> tuple[str, list[str], list[str], list[str]]:
    """Render one model template. Returns (sql, refs, sources, vars), each list in order of use.

    A ref renders as the model's table name, or as `resolve_ref(name)` (an ephemeral model's
    parenthesised SQL) when given.
    """
    refs: list[str] = []
    sources: list[str] = []
    variables: list[str] = []

    def sub(m: re.Match[str]) -> str:
        fn, arg = m.group(1), m.group(2)
        if not _NAME.match(arg):
            raise ProjectError(f"{where}: {fn}('{arg}') is not a valid name (want {_NAME.pattern})")
        {"ref": refs, "source": sources, "var": variables}[fn].append(arg)
        if fn == "var":
            return f"${arg}"
        return resolve_ref(arg) if fn == "ref" and resolve_ref else arg

    sql = _JINJA.sub(sub, template)
    leftover = _ANY_JINJA.search(sql)
    if leftover:
        raise ProjectError(f"{where}: unsupported template expression {leftover.group(0)!r}")
    return sql, _dedupe(refs), _dedupe(sources), _dedupe(variables)


def _dedupe(xs: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(xs))


def _params(sql: str) -> list[str]:
    return _dedupe(_PARAM.findall(_strip_strings(sql)))


def _strip_strings(sql: str) -> str:
    # one left-to-right pass, so a quote inside a comment or a `--` inside a string is not misread
    return re.sub(r"'(?:[^']|'')*'|--[^\n]*|/\*.*?\*/", " ", sql, flags=re.S)


def _validate_sql(sql: str, where: str) -> None:
    try:
        parsed = sqlglot.parse(sql, read="duckdb")
    except sqlglot.errors.ParseError as e:
        raise ProjectError(f"{where}: SQL does not parse: {e}") from e
    stmts = [p for p in parsed if p is not None]
    if len(stmts) != 1 or not isinstance(stmts[0], sqlglot.exp.Query):
        raise ProjectError(f"{where}: a model must be exactly one select statement")


def _cols(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def _test_sql(model: str, kind: str, column: str | None, args: Any, where: str) -> tuple[str, str]:
    """(test_name, failing-rows SQL) for one test on `model`."""
    if kind == "not_null":
        return f"not_null_{column}", f"select * from {model} where {column} is null"
    if kind == "unique":
        cols = _cols(args["columns"]) if isinstance(args, dict) and "columns" in args else [column]
        key = ", ".join(cols)
        if len(cols) == 1:
            return (
                f"unique_{'__'.join(cols)}",
                f"select {key}, count(*) as n from {model} group by {key} having count(*) > 1",
            )
        # two phases, exact: group on one 64-bit hash of the key (far cheaper than hashing and
        # comparing every key column), then recount exactly only the rows of hashes seen twice (a
        # collision is a candidate, never a silent pass; with no candidate the second scan's join
        # has an empty side and reads nothing)
        return (
            f"unique_{'__'.join(cols)}",
            f"select {key}, count(*) as n from {model} semi join ("
            f"select hash({key}) as _h from {model} group by _h having count(*) > 1) as _dup "
            f"on hash({key}) = _dup._h group by {key} having count(*) > 1",
        )
    if kind == "accepted_values":
        values = args["values"] if isinstance(args, dict) else args
        # The allowed values come from the project's own yml, never from a user: quote as literals.
        lits = ", ".join("'" + str(v).replace("'", "''") + "'" for v in values)
        return f"accepted_values_{column}", f"select * from {model} where {column} not in ({lits})"
    if kind == "relationships":
        to, target = args["to"], args["field"]
        m = re.fullmatch(r"\s*ref\('([a-z_][a-z0-9_]*)'\)\s*", to)
        if not m:
            raise ProjectError(f"{where}: relationships 'to' must be ref('model'), got {to!r}")
        other = m.group(1)
        return (
            f"relationships_{column}__{other}_{target}",
            f"select c.* from {model} c left join {other} p on c.{column} = p.{target} "
            f"where c.{column} is not null and p.{target} is null",
        )
    if kind == "expression_is_true":
        expr = args["expression"] if isinstance(args, dict) else args
        name = args.get("name") if isinstance(args, dict) else None
        slug = name or re.sub(r"[^a-z0-9]+", "_", f"{column or ''} {expr}".lower()).strip("_")[:60]
        target = f"{column} " if column else ""
        return f"expression_is_true_{slug}", f"select * from {model} where not coalesce(({target}{expr}), false)"
    raise ProjectError(f"{where}: unknown test {kind!r} (known: {', '.join(_TEST_KINDS)})")


def _parse_tests(model: str, spec: dict[str, Any], where: str) -> list[DataTest]:
    out: list[DataTest] = []

    def add(kind: str, column: str | None, args: Any) -> None:
        name, sql = _test_sql(model, kind, column, args, where)
        target = None
        if kind == "relationships":
            target = re.fullmatch(r"\s*ref\('([a-z_][a-z0-9_]*)'\)\s*", args["to"]).group(1)
        blocking = bool(args.get("blocking")) if isinstance(args, dict) else False
        severity = args.get("severity", "error") if isinstance(args, dict) else "error"
        if severity not in ("error", "warn"):
            raise ProjectError(f"{where}: test {name}: severity is 'error' or 'warn', not {severity!r}")
        if blocking and severity == "warn":
            raise ProjectError(f"{where}: test {name}: a 'warn' test cannot be blocking")
        details = args.get("details") if isinstance(args, dict) else None
        if details is not None:
            if _ANY_JINJA.search(details):
                raise ProjectError(f"{where}: test {name}: details is plain SQL (model names, $day_from/$day_to)")
            _validate_sql(details, f"{where}: test {name}: details")
        out.append(DataTest(model=model, name=name, kind=kind, sql=sql, target=target, blocking=blocking,
                            warn=severity == "warn", details=details.strip() if details else None))

    def items(tests: list[Any]) -> Iterable[tuple[str, Any]]:
        for t in tests or []:
            if isinstance(t, str):
                yield t, None
            elif isinstance(t, dict) and len(t) == 1:
                yield next(iter(t.items()))
            else:
                raise ProjectError(f"{where}: bad test entry {t!r}")

    for col in spec.get("columns") or []:
        for kind, args in items(col.get("tests") or col.get("data_tests") or []):
            add(kind, col["name"], args)
    for kind, args in items(spec.get("tests") or spec.get("data_tests") or []):
        add(kind, None, args)
    names = [t.name for t in out]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ProjectError(f"{where}: duplicate test names {sorted(dup)}; give expression tests a name")
    return out


@dataclass
class Project:
    """A loaded project: models by name and the dependency graph (model -> refs)."""

    path: Path
    models: dict[str, Model]
    graph: dict[str, tuple[str, ...]]
    order: list[str]
    vars: dict[str, Any]
    sources: dict[str, str]

    @classmethod
    def load(cls, path: str | Path) -> Project:
        root = Path(path)
        cfg_path = root / "project.yml"
        cfg = yaml.safe_load(cfg_path.read_text()) if cfg_path.exists() else {}
        cfg = cfg or {}
        sources: dict[str, str] = {
            name: (spec or {}).get("asset_key", name) for name, spec in (cfg.get("sources") or {}).items()
        }
        models: dict[str, Model] = {}
        for csv in sorted((root / "seeds").glob("*.csv")):
            models[csv.stem] = Model(
                name=csv.stem, layer="seeds", path=csv, sql="", refs=(), sources=(), params=(),
                seed_path=csv, **{k: v for k, v in _yml_meta(csv.with_suffix(".yml"), csv.stem).items()
                                   if k != "depends_on"},
            )
        templates: dict[str, str] = {}
        for layer in LAYERS:
            for sql_path in sorted((root / layer).glob("*.sql")):
                name = sql_path.stem
                if name in models:
                    raise ProjectError(f"{sql_path}: model {name!r} already defined in {models[name].path}")
                if not _NAME.match(name):
                    raise ProjectError(f"{sql_path}: model name must match {_NAME.pattern}")
                templates[name] = sql_path.read_text()
                sql, refs, srcs, _ = render(templates[name], str(sql_path))
                _validate_sql(sql, str(sql_path))
                for s in srcs:
                    if sources and s not in sources:
                        raise ProjectError(f"{sql_path}: unknown source('{s}'); declare it in {cfg_path}")
                yml = sql_path.with_suffix(".yml")
                if not yml.exists():
                    raise ProjectError(f"{sql_path}: missing {yml.name} (description, grain, columns, tests)")
                meta = _yml_meta(yml, name)
                # depends_on: models this one follows without reading them (the graph edge and, for an
                # ephemeral model, its data tests run with this one), as dbt's `-- depends_on: ref()`
                depends_on = meta.pop("depends_on")
                models[name] = Model(
                    name=name, layer=layer, path=sql_path, sql=sql.strip().rstrip(";"),
                    refs=tuple(dict.fromkeys(refs + depends_on)), sources=tuple(srcs), params=tuple(_params(sql)),
                    **meta,
                )
        for m in models.values():
            for r in m.refs:
                if r not in models:
                    raise ProjectError(f"{m.path}: ref('{r}') names no model in {root}")
            for other in m.test_refs:
                if other not in models:
                    raise ProjectError(f"{m.path}: relationships test refers to unknown model {other!r}")
        # a relationships test reads its parent, so the parent is built first (as dbt orders tests)
        graph = {name: tuple(dict.fromkeys(m.refs + tuple(r for r in m.test_refs if r != name)))
                 for name, m in models.items()}
        try:
            order = list(TopologicalSorter(graph).static_order())
        except CycleError as e:
            cycle = e.args[1]
            raise ProjectError(
                "cycle in ref() graph: " + " -> ".join(cycle) + " (" + ", ".join(str(models[n].path) for n in cycle[:-1]) + ")"
            ) from e
        # second pass, in dependency order: inline ephemeral models into the models that ref them
        for name in order:
            m = models[name]
            if not any(models[r].is_ephemeral for r in m.refs):
                continue
            sql, *_ = render(templates[name], str(m.path),
                             lambda r: f"(\n{models[r].sql}\n)" if models[r].is_ephemeral else r)
            models[name] = replace(m, sql=sql.strip().rstrip(";"), params=tuple(_params(sql)))
        return cls(path=root, models=models, graph=graph, order=order, vars=dict(cfg.get("vars") or {}), sources=sources)

    # -- selection -----------------------------------------------------------------------------

    def select(self, select: Iterable[str] | None) -> list[str]:
        """Models to build, in dependency order. `name` selects one; `+name` adds its ancestors,
        `name+` its descendants."""
        if not select:
            return list(self.order)
        children: dict[str, set[str]] = {n: set() for n in self.models}
        for n, refs in self.graph.items():
            for r in refs:
                children[r].add(n)
        chosen: set[str] = set()
        for token in select:
            for part in token.split(","):
                part = part.strip()
                if not part:
                    continue
                name = part.strip("+")
                if name not in self.models:
                    raise ProjectError(f"--select {part!r}: no model named {name!r}")
                chosen.add(name)
                if part.startswith("+"):
                    chosen |= self._walk(name, lambda n: self.graph[n])
                if part.endswith("+"):
                    chosen |= self._walk(name, lambda n: children[n])
        return [n for n in self.order if n in chosen]

    @staticmethod
    def _walk(start: str, nxt: Callable[[str], Iterable[str]]) -> set[str]:
        seen: set[str] = set()
        stack = [start]
        while stack:
            for m in nxt(stack.pop()):
                if m not in seen:
                    seen.add(m)
                    stack.append(m)
        return seen

    # -- running -------------------------------------------------------------------------------

    def bind(
        self, model: Model | str, days: Days | None, variables: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Parameters for one model's statement: exactly the `$names` it uses.

        days=(first, last) sets `day_from` / `day_to` (and `day` when first == last).
        """
        m = self.models[model] if isinstance(model, str) else model
        values = {**self.vars, **(variables or {})}
        if days is not None:
            values["day_from"], values["day_to"] = days
            if days[0] == days[1]:
                values["day"] = days[0]
        missing = [p for p in m.params if p not in values]
        if missing:
            hint = " (pass day=YYYY-MM-DD or days=(first, last))" if {"day", "day_from", "day_to"} & set(missing) else ""
            raise ProjectError(f"{m.path}: no value for var(s) {missing}{hint}")
        return {p: values[p] for p in m.params}

    def build_model(
        self, con: duckdb.DuckDBPyConnection, name: str, day: str | date | None = None,
        variables: dict[str, Any] | None = None, days: tuple[str | date, str | date] | None = None,
        *, known_tables: set[str] | None = None,
    ) -> ModelResult:
        """Build one model: a partitioned model for `day` (or every day of `days`, inclusive) in
        one transaction; an unpartitioned one in full. An ephemeral model is only checked to bind.
        known_tables: the tables of schema main as :meth:`build` read them (None: looked up here)."""
        m = self.models[name]
        span = _days(day, days)
        t0 = time.perf_counter()
        if m.is_ephemeral:
            self.bind(m, span, variables)
            return ModelResult(name=name, rows=0, seconds=0.0)
        if m.partition_by and span is None:
            raise ProjectError(f"{m.path}: partitioned by {m.partition_by}; build it with day=YYYY-MM-DD")
        logged = span if m.partition_by else None
        try:
            rows = self._build_stored(con, m, span, variables, logged, known_tables)
        except Exception as exc:
            record_build(con, name, logged, exc)
            raise
        return ModelResult(name=name, rows=int(rows), seconds=time.perf_counter() - t0)

    def _build_stored(
        self, con: duckdb.DuckDBPyConnection, m: Model, span: Days | None, variables: dict[str, Any] | None,
        logged: Days | None = None, known_tables: set[str] | None = None,
    ) -> int:
        """Build a seed or a stored model (see :meth:`build_model`) and record the success in
        `model_builds`, in one transaction; the rows it holds now."""
        tables = known_tables
        if tables is None:
            con.execute(BUILD_LOG_DDL)
            tables = _main_tables(con)
        con.execute("begin transaction")
        try:
            if m.is_seed:
                rows = _count(con, con.execute(
                    f"create or replace table {m.name} as select * from read_csv($path, header = true)",
                    {"path": str(m.seed_path)}), m.name)
                created = True
            elif m.partition_by:
                assert span is not None
                params = self.bind(m, span, variables)
                created = m.name not in tables
                if created:
                    # a new table holds nothing to replace: made from the query at once (planned once)
                    rows = _count(con, con.execute(f"create table {m.name} as select * from ({m.sql})", params),
                                  m.name)
                else:
                    created = self._add_new_columns(con, m, params)
                    con.execute(f"delete from {m.name} where {m.partition_by} between $day_from and $day_to",
                                {"day_from": span[0], "day_to": span[1]})
                    rows = con.execute(f"insert into {m.name} by name select * from ({m.sql})",
                                       params).fetchall()[0][0]
            else:
                params = self.bind(m, span, variables)
                rows = _count(con, con.execute(f"create or replace table {m.name} as {m.sql}", params), m.name)
                created = True
            if created:
                self._check_columns(con, m)
            _log_success(con, m.name, logged)
            con.execute("commit")
        except BaseException:
            con.execute("rollback")
            raise
        tables.add(m.name)
        return int(rows)

    @staticmethod
    def _add_new_columns(con: duckdb.DuckDBPyConnection, m: Model, params: dict[str, Any]) -> bool:
        """A stored partitioned table built before the model gained columns: add them (NULL on the
        days built before), so the older days stay and the new days fill them. True when any was added."""
        have = {r[0] for r in con.execute(f"describe {m.name}").fetchall()}
        if m.columns and set(m.columns) <= have:
            return False  # the yml's columns are the model's (checked when the table was made): nothing new
        wanted = con.execute(f"select * from ({m.sql}) limit 0", params).description
        added = [(d[0], str(d[1])) for d in wanted if d[0] not in have]
        for name, sql_type in added:
            # the name and type come from the project's own SQL, never from a user
            con.execute(f'alter table {m.name} add column "{name}" {sql_type}')
        return bool(added)

    def _check_columns(self, con: duckdb.DuckDBPyConnection, m: Model) -> None:
        if not m.columns:
            return
        actual = [r[0] for r in con.execute(f"describe {m.name}").fetchall()]
        undocumented = [c for c in actual if c not in m.columns]
        missing = [c for c in m.columns if c not in actual]
        if undocumented or missing:
            raise ProjectError(
                f"{m.path}: columns differ from {m.path.with_suffix('.yml').name}: "
                f"not in yml {undocumented}, not in table {missing}"
            )

    def build(
        self, con: duckdb.DuckDBPyConnection, day: str | date | None = None, select: Iterable[str] | None = None,
        progress: Progress | None = None, variables: dict[str, Any] | None = None,
        days: tuple[str | date, str | date] | None = None, *, workers: int | None = None,
    ) -> list[ModelResult]:
        """Build the selected models (all by default) in dependency order for `day`, or for every
        day of `days` = (first, last) at once (a backfill: one statement per model).

        With neither, only unpartitioned models and seeds can be built. Ephemeral models are
        inlined into their children and not built.

        Models whose selected ancestors are all built run at the same time, up to `workers`
        (default: DuckDB's `threads` setting), each on its own cursor of `con` and in its own
        transaction, as one at a time would (:meth:`build_model`): a model starts only once every
        selected model it depends on has committed. Of the ready ones, the one with the most
        selected descendants starts first. `progress(name, i, total)` is called as each starts
        (`i` counts the models started before it; with one worker, the serial order). The results
        come back in the serial order whatever the order of completion. After a failure no other
        model starts; the ones already running finish (each commits or rolls back on its own), and
        the failure first in the serial order is raised. A connection holding temporary objects,
        session settings of its own or an open transaction builds one model at a time on `con`
        itself (a cursor would not see them).
        """
        names = [n for n in self.select(select) if not self.models[n].is_ephemeral]
        con.execute(BUILD_LOG_DDL)
        tables = _main_tables(con)  # read once: each model's build adds its own
        workers = _workers(con, workers, len(names))
        with _deferred_checkpoints(con):
            if workers <= 1:
                results = []
                for i, name in enumerate(names):
                    if progress:
                        progress(name, i, len(names))
                    results.append(self.build_model(con, name, day, variables, days, known_tables=tables))
                return results
            with _threads_per_model(con, workers):
                return self._build_concurrently(con, names, workers, tables, day, progress, variables, days)

    def _build_concurrently(
        self, con: duckdb.DuckDBPyConnection, names: list[str], workers: int, tables: set[str],
        day: str | date | None, progress: Progress | None, variables: dict[str, Any] | None,
        days: tuple[str | date, str | date] | None,
    ) -> list[ModelResult]:
        """:meth:`build` with up to `workers` models at a time (see there)."""
        chosen = set(names)
        # every selected ancestor (not only the parents): the same models precede a model as in
        # a serial build, whatever lies between them unselected
        waits_for = {n: self._walk(n, lambda x: self.graph[x]) & chosen for n in names}
        children: dict[str, set[str]] = {n: set() for n in self.models}
        for n, refs in self.graph.items():
            for r in refs:
                children[r].add(n)
        # of the models ready to start, the one most others wait for first (then the serial order),
        # so that a long chain such as int_gpu_busy's starts as early as it can
        rank = {n: (-len(self._walk(n, lambda x: children[x]) & chosen), i) for i, n in enumerate(names)}
        waiting = list(names)
        cursors = [con.cursor() for _ in range(workers)]
        idle: queue.SimpleQueue[duckdb.DuckDBPyConnection] = queue.SimpleQueue()
        for cur in cursors:
            idle.put(cur)

        def one(name: str) -> ModelResult:
            cur = idle.get()
            try:
                return self.build_model(cur, name, day, variables, days, known_tables=tables)
            finally:
                idle.put(cur)

        results: dict[str, ModelResult] = {}
        failures: dict[str, BaseException] = {}
        running: dict[Future[ModelResult], str] = {}
        done: set[str] = set()
        started = 0
        try:
            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sqlmodels-build") as pool:
                try:
                    while True:
                        while not failures and len(running) < workers:
                            ready = [n for n in waiting if waits_for[n] <= done]
                            if not ready:
                                break
                            name = min(ready, key=rank.__getitem__)
                            waiting.remove(name)
                            if progress:
                                progress(name, started, len(names))
                            running[pool.submit(one, name)] = name
                            started += 1
                        if not running:
                            break
                        finished, _ = wait(running, return_when=FIRST_COMPLETED)
                        for fut in finished:
                            name = running.pop(fut)
                            exc = fut.exception()
                            if exc is None:
                                results[name] = fut.result()
                                done.add(name)
                            else:
                                failures[name] = exc
                except BaseException:
                    for cur in cursors:  # stop what is running (each rolls back), then leave
                        cur.interrupt()
                    raise
        finally:
            for cur in cursors:
                cur.close()
        if failures:
            raise failures[next(n for n in names if n in failures)]
        return [results[n] for n in names]

    def run_tests(
        self, con: duckdb.DuckDBPyConnection, day: str | date | None = None, select: Iterable[str] | None = None,
        days: tuple[str | date, str | date] | None = None, variables: dict[str, Any] | None = None,
    ) -> list[TestResult]:
        """Run the data tests of the selected models; partitioned models are tested on `day`
        (or `days`) only. An ephemeral model's tests run on its SQL for those days."""
        span = _days(day, days)
        out = []
        for name in self.select(select):
            m = self.models[name]
            # an ephemeral partitioned model is evaluated per day: its tests then never hold more
            # than one day of samples (its unique test hashes every sample of the span otherwise)
            spans = _each_day(span) if m.is_ephemeral and m.partition_by and span else [span]
            row_tests = [t for t in m.tests if _row_predicate(t) is not None]
            failures: dict[str, int] = {t.name: 0 for t in m.tests}
            for part in spans:
                if row_tests:
                    # every row-level test (not_null, accepted_values, expression_is_true) of the
                    # model in one scan: one count(*) filter (where <failing>) per test
                    combined = replace(row_tests[0], name="_row_tests", sql="select " + ", ".join(
                        f"count(*) filter (where {_row_predicate(t)})" for t in row_tests) + f" from {m.name}")
                    sql, params = self.test_query(combined, part, variables)
                    counts = con.execute(sql, params).fetchall()[0]
                    for t, n in zip(row_tests, counts, strict=True):
                        failures[t.name] += int(n)
                for t in m.tests:
                    if t in row_tests:
                        continue
                    sql, params = self.test_query(t, part, variables)
                    failures[t.name] += int(con.execute(f"select count(*) from ({sql})", params).fetchall()[0][0])
            for t in m.tests:
                sql, _ = self.test_query(t, span, variables)
                details: tuple[dict[str, Any], ...] = ()
                if failures[t.name] and t.details:
                    details = self._details(con, t.details, span)
                out.append(TestResult(model=name, test_name=t.name, failures=failures[t.name], sql=sql,
                                      blocking=t.blocking, details=details, warn=t.warn))
        return out

    @staticmethod
    def _details(con: duckdb.DuckDBPyConnection, sql: str, span: Days | None) -> tuple[dict[str, Any], ...]:
        names = set(_params(sql))
        if span is None:
            span = (date(1, 1, 1), date(9999, 12, 31))
        params = {k: v for k, v in (("day_from", span[0]), ("day_to", span[1])) if k in names}
        cur = con.execute(sql, params)
        cols = [d[0] for d in cur.description]
        return tuple(dict(zip(cols, row, strict=True)) for row in cur.fetchall())

    def test_query(
        self, t: DataTest, days: Days | None, variables: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """The failing-rows query of one test, scoped by shadowing the model's name with a CTE."""
        m = self.models[t.model]
        if m.is_ephemeral:
            if m.partition_by and days is None:
                raise ProjectError(f"{m.path}: ephemeral and partitioned; test it with day=YYYY-MM-DD")
            return f"with {m.name} as ({m.sql}) {t.sql}", self.bind(m, days, variables)
        if m.partition_by and days is not None:
            sql = (f"with {m.name} as (select * from main.{m.name} "
                   f"where {m.partition_by} between $day_from and $day_to) {t.sql}")
            return sql, {"day_from": days[0], "day_to": days[1]}
        return t.sql, {}


Days = tuple[date, date]


def _each_day(span: Days) -> list[Days]:
    first, last = span
    return [(first + timedelta(days=i),) * 2 for i in range((last - first).days + 1)]


def _row_predicate(t: DataTest) -> str | None:
    """The failing-row condition of a row-level test (`select * from m where <cond>`), else None."""
    prefix = f"select * from {t.model} where "
    if t.kind in ("not_null", "accepted_values", "expression_is_true") and t.sql.startswith(prefix):
        return t.sql[len(prefix):]
    return None


def _days(day: str | date | None, days: tuple[str | date, str | date] | None) -> Days | None:
    if day is not None and days is not None:
        raise ProjectError("pass day or days, not both")
    if day is not None:
        d = date.fromisoformat(str(day))
        return d, d
    if days is not None:
        first, last = (date.fromisoformat(str(x)) for x in days)
        if last < first:
            raise ProjectError(f"days: {last} is before {first}")
        return first, last
    return None


def _yml_meta(path: Path, name: str) -> dict[str, Any]:
    if not path.exists():
        return {}
    spec = yaml.safe_load(path.read_text()) or {}
    if spec.get("name", name) != name:
        raise ProjectError(f"{path}: name {spec.get('name')!r} does not match file name {name!r}")
    partition_by = spec.get("partition_by")
    if partition_by in ("none", None):
        partition_by = None
    columns = {c["name"]: (c.get("description") or "") for c in spec.get("columns") or []}
    depends_on = [str(d) for d in spec.get("depends_on") or []]
    bad = [d for d in depends_on if not _NAME.match(d)]
    if bad:
        raise ProjectError(f"{path}: depends_on names {bad} are not valid model names")
    materialized = spec.get("materialized", "table")
    if materialized not in ("table", "ephemeral"):
        raise ProjectError(f"{path}: materialized must be table or ephemeral, not {materialized!r}")
    return {
        "materialized": materialized,
        "description": (spec.get("description") or "").strip(),
        "grain": spec.get("grain") or "",
        "partition_by": partition_by,
        "columns": columns,
        "tests": tuple(_parse_tests(name, spec, str(path))),
        "depends_on": depends_on,
    }
