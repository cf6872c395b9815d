"""`gpu-platform feeds ingest --day D --dcgm FILE`: a sample counts only on its own (UTC) day.

One file spanning two days, ingested for day 1, day 2 and day 1 again: each day gets its own
samples once, the report counts the other day's rows, and the warehouse's busy GPU-hours equal
the file's (before: the whole file was loaded under every --day, 12 GPU-hours became 24).
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import duckdb
from click.testing import CliRunner

from gpu_platform.cli import main

D1, D2 = date(2026, 3, 9), date(2026, 3, 10)
START = datetime(2026, 3, 9, 12, tzinfo=UTC)
SAMPLES = 4 * 60 * 24  # every 15 s for 24 hours: 12:00 on day 1 to 12:00 on day 2
UTIL = 50  # percent: 24 h at half busy = 12 busy GPU-hours


def _file(path: Path) -> Path:
    lines = ["# TYPE DCGM_FI_DEV_GPU_UTIL gauge"]
    for k in range(SAMPLES):
        ms = int((START + timedelta(seconds=15 * k)).timestamp() * 1000)
        lines.append(
            f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-0a1b",Hostname="gpu-node-1",modelName="NVIDIA H100 80GB HBM3",'
            f'namespace="team-a",pod="train-0"}} {UTIL} {ms}'
        )
    lines.append("DCGM_FI_DEV_GPU_UTIL{gpu=\"0\"} not-a-number 1")  # one unreadable line
    path.write_text("\n".join(lines) + "\n")
    return path


def _ingest(env: dict, day: date, dcgm: Path) -> dict:
    res = CliRunner().invoke(main, ["feeds", "ingest", "--day", day.isoformat(), "--dcgm", str(dcgm),
                                    "--format", "json"], env=env)
    assert res.exit_code == 0, res.output
    (line,) = json.loads(res.stdout)["feeds"]
    return line


def _busy_gpu_hours(env: dict, wh: Path) -> dict[date, float]:
    res = CliRunner().invoke(main, ["cost", "build", "--day", D1.isoformat(), "--until", D2.isoformat(),
                                    "--select", "+int_gpu_busy", "--no-tests"], env=env)
    assert res.exit_code == 0, res.output
    with duckdb.connect(str(wh), read_only=True) as con:
        return {d: float(v) for d, v in con.execute(
            "select day, sum(busy_samples) * 15 / 3600 from int_gpu_busy group by day order by day").fetchall()}


def test_one_file_of_two_days_ingested_three_times_counts_its_busy_time_once(tmp_path):
    wh = tmp_path / "warehouse.duckdb"
    env = {"GPU_PLATFORM_HOME": str(tmp_path), "GPU_PLATFORM_WAREHOUSE": str(wh)}
    dcgm = _file(tmp_path / "two-days.prom")
    for day in (D1, D2, D1):
        _ingest(env, day, dcgm)
    file_busy_gpu_hours = SAMPLES * 15 / 3600 * UTIL / 100
    by_day = _busy_gpu_hours(env, wh)
    assert sum(by_day.values()) == file_busy_gpu_hours == 12.0  # the old code: 24.0
    assert by_day == {D1: 6.0, D2: 6.0}
    with duckdb.connect(str(wh), read_only=True) as con:
        assert con.execute("select count(*), count(distinct ts) from raw_dcgm_samples").fetchone() == (SAMPLES, SAMPLES)
        assert con.execute("select count(*) from raw_dcgm_samples where cast(ts as date) <> day").fetchone() == (0,)
        assert con.execute("select count(*) from raw_dcgm_quarantine").fetchone() == (1,)


def test_each_load_counts_the_rows_of_the_other_day(tmp_path):
    env = {"GPU_PLATFORM_HOME": str(tmp_path), "GPU_PLATFORM_WAREHOUSE": str(tmp_path / "wh.duckdb")}
    dcgm = _file(tmp_path / "two-days.prom")
    day1_samples = 4 * 60 * 12  # 12:00-24:00
    first = _ingest(env, D1, dcgm)
    assert first == {**first, "rows_in": SAMPLES + 1, "accepted": day1_samples, "quarantined": 1,
                     "other_days": SAMPLES - day1_samples, "other_days_by_day": {D2.isoformat(): SAMPLES - day1_samples}}
    second = _ingest(env, D2, dcgm)
    # the unreadable line belongs to the file's first day: quarantined once, counted under day 1 here
    assert second == {**second, "rows_in": SAMPLES + 1, "accepted": SAMPLES - day1_samples, "quarantined": 0,
                      "other_days": day1_samples + 1, "other_days_by_day": {D1.isoformat(): day1_samples + 1}}
    assert _ingest(env, D1, dcgm) == first  # the same file again for the same day: the same load


def test_the_table_names_the_other_days_to_load(tmp_path):
    env = {"GPU_PLATFORM_HOME": str(tmp_path), "GPU_PLATFORM_WAREHOUSE": str(tmp_path / "wh.duckdb")}
    dcgm = _file(tmp_path / "two-days.prom")
    res = CliRunner().invoke(main, ["feeds", "ingest", "--day", D2.isoformat(), "--dcgm", str(dcgm)], env=env)
    assert res.exit_code == 0, res.output
    assert (f"{dcgm}: 2881 row(s) of other days not loaded for {D2.isoformat()}: {D1.isoformat()} (2881); "
            "load them with their own --day") in res.stderr
