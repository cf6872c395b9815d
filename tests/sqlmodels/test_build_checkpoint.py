"""The database-wide DuckDB settings `Project.build` holds while it runs: the automatic checkpoint
deferred to the end (none in the middle of a build: the WAL keeps the build's commits; the
threshold restored after the last build on the database, never lowered; an in-memory database
left as it is) and, while models run at the same time, DuckDB's threads divided among them."""

from __future__ import annotations

import threading
from pathlib import Path

import duckdb
import pytest

from gpu_platform.finops.sqlmodels import Project
from gpu_platform.finops.sqlmodels.warehouse import BUILD_CHECKPOINT_THRESHOLD, _size_bytes


def _project(root: Path, models: int = 3, rows: int = 100_000) -> Project:
    (root / "marts").mkdir(parents=True)
    for i in range(models):
        # under a row group (122,880 rows), so the rows go to the WAL (~1.6 MB a commit), not the data file
        (root / "marts" / f"m{i}.sql").write_text(f"select range as id, random() as v from range({rows})")
        (root / "marts" / f"m{i}.yml").write_text(f"name: m{i}\ndescription: d\ngrain: g\n")
    return Project.load(root)


def _threshold(con: duckdb.DuckDBPyConnection) -> str:
    return con.execute("select current_setting('checkpoint_threshold')").fetchall()[0][0]


def _wal(db: Path) -> int:
    wal = db.with_name(db.name + ".wal")
    return wal.stat().st_size if wal.exists() else 0


@pytest.mark.parametrize("workers", [1, 2])
def test_no_checkpoint_during_build_then_restored(tmp_path, workers):
    db = tmp_path / "w.duckdb"
    con = duckdb.connect(str(db), config={"threads": 2})
    con.execute("set checkpoint_threshold = '1MiB'")
    before = _threshold(con)
    p = _project(tmp_path / "proj")
    seen: list[str] = []
    p.build(con, progress=lambda name, i, n: seen.append(_threshold(con)), workers=workers)
    # three commits of MBs each past a 1 MiB threshold, none checkpointed: all still in the WAL
    assert _wal(db) > 3 * (1 << 20)
    assert seen == [seen[0]] * 3
    assert _size_bytes(seen[0]) == _size_bytes(BUILD_CHECKPOINT_THRESHOLD)
    assert _threshold(con) == before
    # the next commit past the restored threshold checkpoints, as before the build
    con.execute("create table t as select 1 as x")
    assert _wal(db) == 0
    con.close()
    con = duckdb.connect(str(db))
    assert [con.execute(f"select count(*) from m{i}").fetchall()[0][0] for i in range(3)] == [100_000] * 3


def test_a_higher_threshold_is_kept(tmp_path):
    con = duckdb.connect(str(tmp_path / "w.duckdb"))
    con.execute("set checkpoint_threshold = '4GiB'")
    seen: list[str] = []
    _project(tmp_path / "proj", models=1, rows=10).build(con, progress=lambda *a: seen.append(_threshold(con)))
    assert seen == ["4.0 GiB"]
    assert _threshold(con) == "4.0 GiB"


def test_in_memory_database_untouched(tmp_path):
    con = duckdb.connect()
    before = _threshold(con)
    seen: list[str] = []
    _project(tmp_path, models=1, rows=10).build(con, progress=lambda *a: seen.append(_threshold(con)))
    assert seen == [before]


def test_overlapping_builds_restore_after_the_last(tmp_path):
    db = tmp_path / "w.duckdb"
    con = duckdb.connect(str(db), config={"threads": 2})
    before = _threshold(con)
    other = con.cursor()
    p = _project(tmp_path / "proj", models=1, rows=10)
    q = _project(tmp_path / "proj2", models=1, rows=10)
    inside, release = threading.Event(), threading.Event()
    during_second: list[str] = []

    def hold(*_):
        inside.set()
        assert release.wait(10)

    t = threading.Thread(target=lambda: p.build(con, progress=hold))
    t.start()
    assert inside.wait(10)
    # a second build on the same database ends while the first still runs: the setting stays raised
    q.build(other)
    during_second.append(_threshold(other))
    release.set()
    t.join(10)
    assert _size_bytes(during_second[0]) == _size_bytes(BUILD_CHECKPOINT_THRESHOLD)
    assert _threshold(con) == before


def test_failed_build_restores(tmp_path):
    con = duckdb.connect(str(tmp_path / "w.duckdb"))
    before = _threshold(con)
    root = tmp_path / "proj"
    (root / "marts").mkdir(parents=True)
    (root / "marts" / "bad.sql").write_text("select cast('x' as integer) as v")
    (root / "marts" / "bad.yml").write_text("name: bad\ndescription: d\ngrain: g\n")
    with pytest.raises(duckdb.ConversionException):
        Project.load(root).build(con)
    assert _threshold(con) == before


def test_threads_divided_among_concurrent_models(tmp_path):
    db = tmp_path / "w.duckdb"
    con = duckdb.connect(str(db), config={"threads": 4})
    p = _project(tmp_path / "proj", models=4, rows=10)
    seen: list[int] = []
    p.build(con, progress=lambda *a: seen.append(con.execute("select current_setting('threads')").fetchall()[0][0]),
            workers=2)
    assert seen == [2, 2, 2, 2]
    assert con.execute("select current_setting('threads')").fetchall()[0][0] == 4
    # one model at a time keeps every thread for it
    seen.clear()
    p.build(con, progress=lambda *a: seen.append(con.execute("select current_setting('threads')").fetchall()[0][0]),
            workers=1)
    assert seen == [4, 4, 4, 4]
    # the tables are the ones built
    assert [con.execute(f"select count(*) from m{i}").fetchall()[0][0] for i in range(4)] == [10] * 4
