"""Read commands while another process writes the warehouse (the demo's pricing runs): they wait
for the writer, then stop with one line naming the file and the holder, never a traceback."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from gpu_platform.cli.app import main
from gpu_platform.finops.warehouse import WarehouseBusy, connect

HOLD = """
import sys, time, duckdb
con = duckdb.connect(sys.argv[1])
con.execute("create table if not exists t(a int)")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
con.close()
"""


def _writer(path: Path, seconds: float) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(path), str(seconds)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_a_reader_waits_for_the_writer_to_finish(tmp_path: Path) -> None:
    path = tmp_path / "warehouse.duckdb"
    proc = _writer(path, 1.0)
    try:
        start = time.monotonic()
        con = connect(path, wait_s=30, poll_s=0.1)
        assert con.execute("select count(*) from t").fetchone() == (0,)
        con.close()
        assert time.monotonic() - start >= 0.3  # it did wait for the lock
    finally:
        proc.wait(timeout=30)


def test_a_writer_that_outlasts_the_wait_is_named(tmp_path: Path) -> None:
    path = tmp_path / "warehouse.duckdb"
    proc = _writer(path, 30.0)
    try:
        with pytest.raises(WarehouseBusy, match=rf"PID {proc.pid}"):
            connect(path, wait_s=0.3, poll_s=0.1)
    finally:
        proc.kill()
        proc.wait(timeout=30)


@pytest.mark.parametrize("command", [["cost", "report"], ["scorecard"]])
def test_read_commands_say_so_in_one_line(tmp_path: Path, monkeypatch, command) -> None:
    path = tmp_path / "warehouse.duckdb"
    monkeypatch.setenv("GPU_PLATFORM_WAREHOUSE_WAIT_S", "0.3")
    proc = _writer(path, 30.0)
    try:
        result = CliRunner().invoke(main, [*command, "--day", "2026-11-30", "--warehouse", str(path)])
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert result.exit_code == 2, result.output  # as the writers: the warehouse is busy, not broken
    assert f"{path} is being written by another process (PID {proc.pid}" in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1


def test_other_duckdb_errors_are_not_taken_for_a_lock(tmp_path: Path) -> None:
    bad = tmp_path / "not-duckdb.duckdb"
    bad.write_text("this is not a database file\n")
    with pytest.raises(duckdb.Error) as info:
        connect(bad, wait_s=5)
    assert not isinstance(info.value, WarehouseBusy)


READ_HOLD = """
import sys, time, duckdb
con = duckdb.connect(sys.argv[1], read_only=True)
con.execute("select count(*) from raw_requests").fetchall()
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
con.close()
"""


def _reader(path: Path, seconds: float) -> subprocess.Popen:
    """A process reading the file as `cost report` or the metrics server's forecast does."""
    proc = subprocess.Popen([sys.executable, "-c", READ_HOLD, str(path), str(seconds)], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_a_pricing_step_waits_for_a_reader_in_another_process(tmp_path: Path) -> None:
    """A finops_daily step opening the warehouse while a CLI reader holds it (the demo's UI check
    runs `scorecard` and `cost report` during pricing runs) waits instead of failing the step on
    DuckDB's lock error."""
    from resources.warehouse import Warehouse

    path = tmp_path / "warehouse.duckdb"
    Warehouse(path=str(path)).connect().close()  # the file with its raw tables
    proc = _reader(path, 1.0)
    try:
        start = time.monotonic()
        con = Warehouse(path=str(path)).connect()
        assert con.execute("select count(*) from raw_requests").fetchone() == (0,)
        con.close()
        assert time.monotonic() - start >= 0.3
    finally:
        proc.wait(timeout=30)


def test_a_pricing_step_names_a_holder_that_outlasts_its_wait(tmp_path: Path) -> None:
    from resources.warehouse import Warehouse

    path = tmp_path / "warehouse.duckdb"
    Warehouse(path=str(path)).connect().close()
    proc = _reader(path, 30.0)
    try:
        with pytest.raises(WarehouseBusy, match=rf"{path} is being written by another process \(PID {proc.pid}"):
            Warehouse(path=str(path), lock_wait_s=0.3).connect()
    finally:
        proc.kill()
        proc.wait(timeout=30)
