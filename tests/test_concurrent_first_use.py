"""Concurrency without tracebacks: a new ledger opened by many processes at once, and a second
writer on the warehouse.

- 8 processes each make the first submit to a brand-new SQLite ledger file (and a new
  PostgreSQL database, under `make test`) at the same moment (a barrier): all succeed, 8
  requests (before: "table gp_requests already exists" for some); the same for the lineage
  tables beside the ledger.
- `gpu-platform feeds ingest` and `cost build` while another process holds the warehouse's
  write lock: exit 2 with one line naming the file after GPU_PLATFORM_WAREHOUSE_WAIT_S, no
  traceback; released within the wait, the command waits for it and succeeds.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest
import yaml

from tests.conftest import EXAMPLES, ROOT

N = 8
ROUNDS = 3  # brand-new files; on the old code most rounds failed at least one process


def _first_submit(url: str, i: int, barrier, results) -> None:
    from gpu_platform.policy import load_policy
    from gpu_platform.requests.ledger import Ledger
    from gpu_platform.requests.model import validate_request

    raw = yaml.safe_load((EXAMPLES / "research_best_effort.yaml").read_text())
    raw["experiment_id"] = f"exp-first-{i}"
    request = validate_request(raw, load_policy())
    barrier.wait(30)
    try:
        results.put(("ok", Ledger(url).submit(request)))
    except Exception as exc:  # reported to the test, which names it
        results.put(("error", f"{type(exc).__name__}: {str(exc).splitlines()[0]}"))


def _first_lineage(url: str, i: int, barrier, results) -> None:
    import sqlalchemy as sa

    from gpu_platform.lineage.graph import LineageStore

    engine = sa.create_engine(url, connect_args={"timeout": 30})
    barrier.wait(30)
    try:
        LineageStore(engine)
        results.put(("ok", i))
    except Exception as exc:
        results.put(("error", f"{type(exc).__name__}: {str(exc).splitlines()[0]}"))


def _run_at_once(target, url: str) -> list[tuple[str, object]]:
    ctx = mp.get_context("fork")
    barrier, results = ctx.Barrier(N), ctx.Queue()
    procs = [ctx.Process(target=target, args=(url, i, barrier, results)) for i in range(N)]
    for p in procs:
        p.start()
    out = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(30)
    return out


@pytest.mark.parametrize("round_", range(ROUNDS))
def test_eight_processes_make_the_first_submit_to_a_new_sqlite_ledger_at_once(tmp_path, round_):
    from gpu_platform.requests.ledger import Ledger

    url = f"sqlite:///{tmp_path / f'new-{round_}.db'}"
    out = _run_at_once(_first_submit, url)
    assert [e for e in out if e[0] != "ok"] == []
    assert Ledger(url).count() == (N, N)
    assert len({rid for _, rid in out}) == N


def test_eight_processes_make_the_first_submit_to_a_new_postgres_ledger_at_once(pg_url):
    from gpu_platform.requests.ledger import Ledger

    out = _run_at_once(_first_submit, pg_url)
    assert [e for e in out if e[0] != "ok"] == []
    ledger = Ledger(pg_url)
    assert ledger.count() == (N, N)
    ledger.engine.dispose()


def test_eight_processes_open_the_lineage_tables_of_a_new_ledger_at_once(tmp_path):
    import sqlalchemy as sa

    url = f"sqlite:///{tmp_path / 'lineage.db'}"
    out = _run_at_once(_first_lineage, url)
    assert [e for e in out if e[0] != "ok"] == []
    assert {"lineage_edges", "workload_runs"} <= set(sa.inspect(sa.create_engine(url)).get_table_names())


def test_only_the_already_exists_race_is_retried(monkeypatch):
    import sqlalchemy as sa

    from gpu_platform.requests.ledger import create_tables

    meta = sa.MetaData()
    engine = sa.create_engine("sqlite://")
    errors = [sa.exc.OperationalError("CREATE TABLE t", {}, Exception("table t already exists"))]
    calls = []

    def create_all(bind, checkfirst):
        calls.append(checkfirst)
        if errors:
            raise errors.pop()

    monkeypatch.setattr(meta, "create_all", create_all)
    create_tables(meta, engine)
    assert calls == [True, True]  # the race: checked again, then done
    calls.clear()
    errors.append(sa.exc.OperationalError("CREATE TABLE t", {}, Exception("disk I/O error")))
    with pytest.raises(sa.exc.OperationalError, match="disk I/O error"):
        create_tables(meta, engine)
    assert calls == [True]  # anything else propagates at once


# -- the warehouse: a second writer waits (bounded), then exits 2 with one line ---------------------

_DCGM = (
    '# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n'
    'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1",Hostname="n1",modelName="NVIDIA H100 80GB HBM3"} 40 1773057600000\n'
)  # 2026-03-09 12:00 UTC


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpu_platform.cli", *args], capture_output=True, text=True, cwd=ROOT,
        env={**os.environ, **env}, timeout=120,
    )


def _holder(path: Path, hold_s: float, ready, release) -> None:
    con = duckdb.connect(str(path))  # a write connection: DuckDB's file lock, held by this process
    ready.set()
    release.wait(hold_s)  # until the test releases it, at most hold_s
    con.close()


@pytest.fixture
def warehouse(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    wh = tmp_path / "warehouse.duckdb"
    duckdb.connect(str(wh)).close()
    dcgm = tmp_path / "n1.prom"
    dcgm.write_text(_DCGM)
    env = {"GPU_PLATFORM_HOME": str(tmp_path), "GPU_PLATFORM_WAREHOUSE": str(wh)}
    return wh, dcgm, env


def _hold(path: Path, hold_s: float):
    ctx = mp.get_context("spawn")
    ready, release = ctx.Event(), ctx.Event()
    proc = ctx.Process(target=_holder, args=(path, hold_s, ready, release))
    proc.start()
    assert ready.wait(60)
    return proc, release


@pytest.mark.parametrize(
    "args",
    [
        ["feeds", "ingest", "--day", "2026-03-09", "--dcgm", "{dcgm}"],
        ["cost", "build", "--day", "2026-03-09", "--select", "stg_nodes", "--no-tests"],
    ],
    ids=["feeds-ingest", "cost-build"],
)
def test_a_second_writer_exits_2_with_one_line_naming_the_warehouse(warehouse, args):
    wh, dcgm, env = warehouse
    holder, release = _hold(wh, 300)  # held until the command has given up
    try:
        started = time.monotonic()
        res = _cli([a.format(dcgm=dcgm) for a in args], {**env, "GPU_PLATFORM_WAREHOUSE_WAIT_S": "1"})
        waited = time.monotonic() - started
    finally:
        release.set()
        holder.join(30)
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr + res.stdout
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert str(wh) in lines[0] and "being written by another process" in lines[0] and "after 1 s" in lines[0]
    assert f"PID {holder.pid}" in lines[0]
    assert waited >= 1


@pytest.mark.parametrize("cmd", ["feeds-ingest", "cost-build"])
def test_a_second_writer_released_within_the_wait_succeeds(warehouse, cmd):
    wh, dcgm, env = warehouse
    args = {
        "feeds-ingest": ["feeds", "ingest", "--day", "2026-03-09", "--dcgm", str(dcgm), "--format", "json"],
        "cost-build": ["cost", "build", "--day", "2026-03-09", "--select", "stg_nodes", "--no-tests"],
    }[cmd]
    hold_s = 8.0  # longer than the command's start-up: it finds the file held and waits
    holder, _release = _hold(wh, hold_s)
    started = time.monotonic()
    try:
        res = _cli(args, {**env, "GPU_PLATFORM_WAREHOUSE_WAIT_S": "60"})
    finally:
        holder.join(30)
    assert res.returncode == 0, res.stderr
    assert time.monotonic() - started >= hold_s - 0.5  # it waited for the holder
    if cmd == "feeds-ingest":
        with duckdb.connect(str(wh), read_only=True) as con:
            assert con.execute("select count(*) from raw_dcgm_samples").fetchone() == (1,)
