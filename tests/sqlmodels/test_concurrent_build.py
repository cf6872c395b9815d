"""`Project.build` runs independent models at the same time (one cursor each): the same tables,
results and build log as one model at a time, and the same guarantees when a model fails."""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path

import duckdb
import pytest

from gpu_platform.finops.sqlmodels import Project, default_project_path
from tests.sqlmodels.finops_scenario import D0, billing_rows, insert_billing, insert_samples, load_scenario


def _write(root: Path, layer: str, name: str, sql: str, yml: str = "") -> None:
    (root / layer).mkdir(parents=True, exist_ok=True)
    (root / layer / f"{name}.sql").write_text(sql)
    (root / layer / f"{name}.yml").write_text(yml or f"name: {name}\ndescription: d\ngrain: g\n")


def _tables(con: duckdb.DuckDBPyConnection) -> dict[str, list[str]]:
    """Every table's rows (sorted), doubles to 9 places: a parallel float sum may differ in the last bit."""
    out = {}
    for (table,) in con.execute("select table_name from duckdb_tables() where schema_name = 'main' "
                                "order by table_name").fetchall():
        cols = con.execute("select column_name, data_type from duckdb_columns() where table_name = $t "
                           "order by column_index", {"t": table}).fetchall()
        skip = {"built_at", "last_success_at"} if table == "model_builds" else set()
        select = ", ".join(f'round("{c}", 9)' if t == "DOUBLE" else f'"{c}"' for c, t in cols if c not in skip)
        out[table] = [str(c) for c in cols] + sorted(map(repr, con.execute(f"select {select} from {table}").fetchall()))
    return out


def _two_days(con: duckdb.DuckDBPyConnection) -> None:
    load_scenario(con)
    insert_billing(con, billing_rows(), source="billing-27.csv")
    con.execute("update raw_focus_billing set ChargePeriodStart = ChargePeriodStart - interval 1 day, "
                "ChargePeriodEnd = ChargePeriodEnd - interval 1 day where source = 'billing-27.csv'")
    insert_samples(con, day=D0 - timedelta(days=1), pods=[])
    # the loader's helper tables are temporary: a connection holding them builds one model at a time
    for (table,) in con.execute("select table_name from duckdb_tables() where temporary").fetchall():
        con.execute(f"drop table temp.{table}")


def test_concurrent_build_equals_one_model_at_a_time(tmp_path):
    p = Project.load(default_project_path())
    threads: dict[int, set[str]] = {1: set(), 4: set()}
    build_model = p.build_model

    def recording(con, name, *args, **kwargs):
        threads[workers].add(threading.current_thread().name)
        return build_model(con, name, *args, **kwargs)

    p.build_model = recording
    got = {}
    for workers in (1, 4):
        con = duckdb.connect(str(tmp_path / f"w{workers}.duckdb"), config={"threads": 4})
        _two_days(con)
        seen: list[tuple[str, int, int]] = []
        results = p.build(con, days=("2026-11-27", "2026-11-28"), workers=workers,
                          progress=lambda n, i, t, seen=seen: seen.append((n, i, t)))
        # a rebuild over the stored tables (delete + insert per partition) as well
        again = p.build(con, day="2026-11-28", workers=workers)
        got[workers] = (_tables(con), [(r.name, r.rows) for r in results], seen, [(r.name, r.rows) for r in again])
        con.close()
    serial, concurrent = got[1], got[4]
    assert concurrent[0].keys() == serial[0].keys() and len(serial[0]) > 40
    for table in serial[0]:
        assert concurrent[0][table] == serial[0][table], table
    # results (and a rebuild's) in the serial order, whatever order the models finished in
    assert concurrent[1] == serial[1] and concurrent[3] == serial[3]
    names = [n for n in p.order if not p.models[n].is_ephemeral]
    assert [n for n, _, _ in serial[2]] == names and [i for _, i, _ in serial[2]] == list(range(len(names)))
    # concurrently: each model started once, numbered in start order, after every model it depends on
    started = [n for n, _, _ in concurrent[2]]
    assert sorted(started) == sorted(names) and [i for _, i, _ in concurrent[2]] == list(range(len(names)))
    assert {t for _, _, t in concurrent[2]} == {len(names)}
    for i, n in enumerate(started):
        assert p._walk(n, lambda x: p.graph[x]) & set(names) <= set(started[:i]), n
    assert sum(r for _, r in serial[1]) > 200
    assert threads[1] == {threading.main_thread().name}
    assert len(threads[4]) > 1 and all(t.startswith("sqlmodels-build") for t in threads[4])


@pytest.fixture
def failing(tmp_path):
    """ok -> (slow, bad -> child): `bad` fails for days from 2026-11-28 on."""
    part = "partition_by: day\n"
    _write(tmp_path, "staging", "ok", "select cast({{ var('day_from') }} as date) as day, 1 as n",
           "name: ok\ndescription: d\ngrain: g\n" + part)
    _write(tmp_path, "intermediate", "bad",
           "select day, cast(case when day >= date '2026-11-28' then 'not a number' else '2' end as integer) as n "
           "from {{ ref('ok') }} where day between {{ var('day_from') }} and {{ var('day_to') }}",
           "name: bad\ndescription: d\ngrain: g\n" + part)
    _write(tmp_path, "intermediate", "slow",
           "select day, count(*) as n from {{ ref('ok') }}, range(3000000) "
           "where day between {{ var('day_from') }} and {{ var('day_to') }} group by day",
           "name: slow\ndescription: d\ngrain: g\n" + part)
    _write(tmp_path, "marts", "child", "select * from {{ ref('bad') }} "
           "where day between {{ var('day_from') }} and {{ var('day_to') }}",
           "name: child\ndescription: d\ngrain: g\n" + part)
    return Project.load(tmp_path)


def test_a_failing_model_stops_its_dependents_and_keeps_its_stored_days(failing, tmp_path):
    con = duckdb.connect(str(tmp_path / "w.duckdb"), config={"threads": 2})
    failing.build(con, day="2026-11-27", workers=2)
    with pytest.raises(duckdb.ConversionException, match="not a number"):
        failing.build(con, day="2026-11-28", workers=2)
    # bad's failed day wrote nothing, its earlier day stays; child never ran for the failed day
    assert con.execute("select cast(day as varchar), n from bad").fetchall() == [("2026-11-27", 2)]
    assert con.execute("select cast(day as varchar) from child").fetchall() == [("2026-11-27",)]
    log = dict(((m, str(d)), (s, e is not None)) for m, d, s, e in
               con.execute("select model, day, status, error from model_builds").fetchall())
    assert log[("bad", "2026-11-28")] == ("failed", True)
    assert log[("ok", "2026-11-28")] == ("success", False)
    assert ("child", "2026-11-28") not in log
    # slow ran beside bad: it finished and committed on its own (its day complete), or never started
    slow = log.get(("slow", "2026-11-28"))
    assert slow in (None, ("success", False))
    assert con.execute("select count(*) from slow where day = date '2026-11-28'").fetchall()[0][0] == (
        1 if slow else 0)


def test_a_connection_with_temporary_objects_builds_on_itself(tmp_path):
    """A cursor would not see `con`'s temporary tables or session settings: such a build runs
    one model at a time on `con`, as before."""
    _write(tmp_path, "staging", "a", "select * from {{ source('raw_x') }}")
    _write(tmp_path, "staging", "b", "select x + 1 as y from {{ source('raw_x') }}")
    p = Project.load(tmp_path)
    con = duckdb.connect(config={"threads": 2})
    con.execute("create temp table raw_x as select 41 as x")
    p.build(con, workers=2)
    assert con.execute("select y from b").fetchall() == [(42,)]
    con2 = duckdb.connect(config={"threads": 2})
    con2.execute("create table raw_x as select current_setting('TimeZone') as x")
    _write(tmp_path, "staging", "b", "select current_setting('TimeZone') as y from {{ source('raw_x') }}")
    con2.execute("set TimeZone = 'Asia/Tokyo'")
    Project.load(tmp_path).build(con2, workers=2)
    assert con2.execute("select y from b").fetchall() == [("Asia/Tokyo",)]
    con2.execute("begin transaction")
    with pytest.raises(duckdb.TransactionException):
        Project.load(tmp_path).build(con2, workers=2)
