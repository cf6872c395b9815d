"""A small dbt-like runner: `.sql` models with `{{ ref() }}`, `{{ source() }}`, `{{ var() }}`, run in DuckDB.

Layout of a project directory::

    project.yml          vars (defaults), sources (name -> upstream asset), seeds
    seeds/*.csv          small tables loaded as-is (`{{ ref('price_book') }}`)
    macros/*.sql         Jinja macros (`{% macro name(args) %}...{% endmacro %}`), callable in every model
    staging/*.sql|.yml   one model per pair; likewise intermediate/ and marts/

Rendering never formats values into SQL: `{{ var('day_from') }}` becomes the bound parameter
`$day_from`. `ref`/`source` names are checked against `^[a-z_][a-z0-9_]*$` and become bare
table names (an ephemeral model's ref becomes its parenthesised SQL). Macros print only SQL the
runner made or a model author's literal (`| literal`, `| ident`): see `sqlmodels.templates`.

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

This module holds :class:`Project`: loading a project (templates, yml, graph), selecting, binding,
building (one model, or many at a time) and running the data tests. The rest lives beside it, one
job a module: `model` (the dataclasses and errors), `templates` (Jinja rendering and macros),
`datatests` (a model's yml and its tests' SQL), `warehouse` (build log, build settings). Their
public names are re-exported here, so `from gpu_platform.finops.sqlmodels.runner import X` keeps
working. May import those modules, duckdb, yaml and the standard library.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from datetime import date
from graphlib import CycleError, TopologicalSorter
from pathlib import Path
from typing import Any

import duckdb
import yaml

from gpu_platform.finops.sqlmodels.datatests import TEST_KINDS, row_predicate, yml_meta
from gpu_platform.finops.sqlmodels.model import (
    LAYERS,
    NAME,
    DataTest,
    Days,
    Model,
    ModelResult,
    Progress,
    ProjectError,
    TestResult,
    day_span,
    each_day,
)
from gpu_platform.finops.sqlmodels.templates import MACROS_DIR, Macros, render, validate_sql
from gpu_platform.finops.sqlmodels.templates import params as sql_params
from gpu_platform.finops.sqlmodels.warehouse import (
    BUILD_CHECKPOINT_THRESHOLD,
    BUILD_LOG,
    BUILD_LOG_DDL,
    _count,
    _deferred_checkpoints,
    _log_success,
    _main_tables,
    _threads_per_model,
    _workers,
    record_build,
)

__all__ = [
    "BUILD_CHECKPOINT_THRESHOLD", "BUILD_LOG", "BUILD_LOG_DDL", "LAYERS", "MACROS_DIR", "NAME", "TEST_KINDS",
    "DataTest", "Days", "Macros", "Model", "ModelResult", "Progress", "Project", "ProjectError", "TestResult",
    "record_build", "render",
]


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
                seed_path=csv, **{k: v for k, v in yml_meta(csv.with_suffix(".yml"), csv.stem).items()
                                   if k != "depends_on"},
            )
        macros = Macros.load(root)
        templates: dict[str, str] = {}
        for layer in LAYERS:
            for sql_path in sorted((root / layer).glob("*.sql")):
                name = sql_path.stem
                if name in models:
                    raise ProjectError(f"{sql_path}: model {name!r} already defined in {models[name].path}")
                if not NAME.match(name):
                    raise ProjectError(f"{sql_path}: model name must match {NAME.pattern}")
                templates[name] = sql_path.read_text()
                sql, refs, srcs, _ = render(templates[name], str(sql_path), macros=macros)
                validate_sql(sql, str(sql_path))
                for s in srcs:
                    if sources and s not in sources:
                        raise ProjectError(f"{sql_path}: unknown source('{s}'); declare it in {cfg_path}")
                yml = sql_path.with_suffix(".yml")
                if not yml.exists():
                    raise ProjectError(f"{sql_path}: missing {yml.name} (description, grain, columns, tests)")
                meta = yml_meta(yml, name)
                # depends_on: models this one follows without reading them (the graph edge and, for an
                # ephemeral model, its data tests run with this one), as dbt's `-- depends_on: ref()`
                depends_on = meta.pop("depends_on")
                models[name] = Model(
                    name=name, layer=layer, path=sql_path, sql=sql.strip().rstrip(";"),
                    refs=tuple(dict.fromkeys(refs + depends_on)), sources=tuple(srcs), params=tuple(sql_params(sql)),
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
            sql, *_ = render(templates[name], str(m.path), macros=macros, resolve_ref=
                             lambda r: f"(\n{models[r].sql}\n)" if models[r].is_ephemeral else r)
            models[name] = replace(m, sql=sql.strip().rstrip(";"), params=tuple(sql_params(sql)))
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
        span = day_span(day, days)
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
        span = day_span(day, days)
        out = []
        for name in self.select(select):
            m = self.models[name]
            # an ephemeral partitioned model is evaluated per day: its tests then never hold more
            # than one day of samples (its unique test hashes every sample of the span otherwise)
            spans = each_day(span) if m.is_ephemeral and m.partition_by and span else [span]
            row_tests = [t for t in m.tests if row_predicate(t) is not None]
            failures: dict[str, int] = {t.name: 0 for t in m.tests}
            for part in spans:
                if row_tests:
                    # every row-level test (not_null, accepted_values, expression_is_true) of the
                    # model in one scan: one count(*) filter (where <failing>) per test
                    combined = replace(row_tests[0], name="_row_tests", sql="select " + ", ".join(
                        f"count(*) filter (where {row_predicate(t)})" for t in row_tests) + f" from {m.name}")
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
        names = set(sql_params(sql))
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

