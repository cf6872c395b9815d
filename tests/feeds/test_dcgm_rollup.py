"""The hourly rollup written at load (`raw_dcgm_hourly`) equals the plain GROUP BY it replaced.

The rollup counts distinct timestamps per group from a bitmap of the seconds of the hour, and
recounts exactly only the groups with two samples in one second. These tests compare the table
it writes, row for row, with the reference query (`count(DISTINCT ts)` per group), on the feed
fixtures loaded through `load_batch` and on samples shaped to hit every branch: a repeated
timestamp, sampling faster than once a second, NULL label columns, an hour boundary, sentinels,
several sources and load days.
"""

from __future__ import annotations

import random
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from gpu_platform.finops.feeds.dcgm import parse_text
from gpu_platform.finops.feeds.load import ensure_tables, load_batch, rollup_dcgm_samples

DAY = date(2024, 9, 18)

# The rollup as it was first written: one GROUP BY with an exact distinct count; the oracle.
REFERENCE = """
    select date_trunc('hour', ts) as hour, metric, hostname, gpu, gpu_instance_id,
           min(gpu_instance_profile) as gpu_instance_profile, namespace, pod, min(model_name) as model_name,
           count(*) as samples, count(distinct ts) as distinct_ts,
           cast(sum(round(least(case when metric = 'DCGM_FI_DEV_GPU_UTIL' then value / 100.0 else value end, 1.0)
                * 1000000.0)) as bigint) as busy_micro,
           source, day
    from raw_dcgm_samples
    where metric in ('DCGM_FI_PROF_GR_ENGINE_ACTIVE', 'DCGM_FI_DEV_GPU_UTIL')
      and value is not null and not isnan(value) and value >= 0 and value < 1e15
    group by all
"""
COLUMNS = ("hour, metric, hostname, gpu, gpu_instance_id, gpu_instance_profile, namespace, pod, model_name, "
           "samples, distinct_ts, busy_micro, source, day")


def _sorted(con: duckdb.DuckDBPyConnection, sql: str) -> list[tuple]:
    return sorted(con.execute(f"select {COLUMNS} from ({sql})").fetchall(), key=repr)


def _assert_matches_reference(con: duckdb.DuckDBPyConnection) -> list[tuple]:
    written = _sorted(con, "select * from raw_dcgm_hourly")
    assert written == _sorted(con, REFERENCE)
    return written


def _line(metric: str, pod: str | None, value: str, ts_ms: int, gpu: int = 0, mig: str | None = None) -> str:
    labels = f'gpu="{gpu}",UUID="GPU-{gpu}",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1"'
    if mig is not None:
        labels += f',GPU_I_PROFILE="1g.10gb",GPU_I_ID="{mig}"'
    if pod is not None:
        labels += f',container="main",namespace="ns",pod="{pod}"'
    return f"{metric}{{{labels}}} {value} {ts_ms}\n"


def _t(seconds: float) -> int:
    return int(datetime(2024, 9, 18, tzinfo=UTC).timestamp() * 1000 + seconds * 1000)


def test_fixture_feeds_load_the_same_rollup_as_the_reference_query(
    tmp_path: Path, fixtures: Path, scraped_at: datetime
) -> None:
    db = tmp_path / "wh.duckdb"
    for name in ("dcgm-metrics-baremetal.txt", "dcgm-metrics-k8s-unassigned.txt", "dcgm-variant-mig.txt",
                 "dcgm-variant-old-namespace.txt", "dcgm-variant-released.txt", "dcgm-malformed.txt"):
        batch = parse_text((fixtures / name).read_bytes(), source=name, scraped_at=scraped_at)
        load_batch(db, "dcgm", batch, source=name, day=DAY)
    with duckdb.connect(str(db)) as con:
        assert len(_assert_matches_reference(con)) > 0


def test_repeats_and_sub_second_samples_are_counted_exactly(tmp_path: Path, scraped_at: datetime) -> None:
    """Each crowded case next to a clean group in the same load: a timestamp repeated (two
    samples, one distinct), two samples 300 ms apart (two distinct in one second), a repeat at
    the end of the hour; the clean 15 s group keeps samples == distinct_ts."""
    engine = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
    util = "DCGM_FI_DEV_GPU_UTIL"
    lines = [_line(engine, "clean", "0.5", _t(s)) for s in range(0, 7200, 15)]
    lines += [_line(engine, "repeat", "0.25", _t(30)), _line(engine, "repeat", "0.25", _t(30))]
    lines += [_line(util, "fast", "50", _t(60)), _line(util, "fast", "70", _t(60.3)), _line(util, "fast", "90", _t(61))]
    lines += [_line(engine, None, "1.5", _t(3599.999)), _line(engine, None, "1.5", _t(3599.999))]
    lines += [_line(engine, "mig", "0.75", _t(5), gpu=1, mig="3"), _line(engine, "mig", "9223372036854775794", _t(6), gpu=1, mig="3")]
    db = tmp_path / "wh.duckdb"
    load_batch(db, "dcgm", parse_text("".join(lines), source="a.prom", scraped_at=scraped_at), source="a.prom", day=DAY)
    with duckdb.connect(str(db)) as con:
        rows = _assert_matches_reference(con)
    by_pod = {(r[7], r[0].hour): (r[9], r[10]) for r in rows}
    assert by_pod[("clean", 0)] == (240, 240)
    assert by_pod[("repeat", 0)] == (2, 1)
    assert by_pod[("fast", 0)] == (3, 3)
    assert by_pod[(None, 0)] == (2, 1)
    assert by_pod[("mig", 0)] == (1, 1)  # the blank sentinel is not a sample of the rollup


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_samples_rolled_up_from_the_table_match_the_reference(tmp_path: Path, seed: int) -> None:
    """Samples written straight into raw_dcgm_samples over two load days and two sources, with
    random timestamps (whole seconds, milliseconds, repeats), NULL label columns and both busy
    metrics, rolled up by `rollup_dcgm_samples` (all days, then one day)."""
    rng = random.Random(seed)
    start = datetime(2024, 9, 18, 22)
    rows = []
    for i in range(3000):
        ts = start + timedelta(seconds=rng.choice([rng.randrange(0, 4 * 3600), rng.randrange(0, 40) * 0.25]))
        if i % 17 == 0 and rows:
            ts = rows[-1][0]
        rows.append((
            ts,
            rng.choice(["DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED"]),
            rng.choice([rng.random(), rng.random() * 100, float("nan"), 9223372036854775794.0, -1.0]),
            rng.choice(["node-1", "node-2", None]),
            rng.choice([0, 1, None]),
            rng.choice(["A100", "H100", None]),
            rng.choice([None, "1g.10gb"]),
            rng.choice([None, "7"]),
            rng.choice([None, "ns"]),
            rng.choice([None, "p-1", "p-2"]),
            rng.choice(["history.parquet", "scrape"]),
            i + 1,
            rng.choice([DAY, DAY + timedelta(days=1)]),
        ))
    with duckdb.connect(str(tmp_path / "wh.duckdb")) as con:
        ensure_tables(con)
        names = ["ts", "metric", "value", "hostname", "gpu", "model_name", "gpu_instance_profile",
                 "gpu_instance_id", "namespace", "pod", "source", "source_line", "day"]
        samples = pa.Table.from_pylist([dict(zip(names, r, strict=True)) for r in rows])  # noqa: F841 (read by DuckDB)
        con.execute(f"insert into raw_dcgm_samples ({', '.join(names)}) select * from samples")
        rollup_dcgm_samples(con)
        written = _assert_matches_reference(con)
        assert any(r[9] > r[10] for r in written), "the sample set should hold repeated timestamps"
        rollup_dcgm_samples(con, days=(DAY, DAY))
        _assert_matches_reference(con)


def test_microsecond_hour_ends_and_infinite_timestamps_roll_up_like_the_reference(tmp_path: Path) -> None:
    """Samples written with microsecond timestamps (history from Parquet, not a scrape): one in
    the last half millisecond of an hour (a rounded millisecond would index second 3,600 and fail
    the load) and the hour's last microsecond, next to samples at +-infinity, each alone and
    repeated; every group equals the reference query's."""
    hour_end = datetime(2024, 9, 18, 10, 59, 59)
    stamps = [hour_end + timedelta(microseconds=999_500), hour_end + timedelta(microseconds=999_999),
              hour_end + timedelta(microseconds=999_999), datetime(2024, 9, 18, 10, 0, 0)]
    infinite = ["infinity", "-infinity", "infinity"]
    with duckdb.connect(str(tmp_path / "wh.duckdb")) as con:
        ensure_tables(con)
        for i, ts in enumerate(stamps):
            con.execute(
                "insert into raw_dcgm_samples (ts, metric, value, hostname, gpu, pod, source, source_line, day) "
                "values (?, 'DCGM_FI_PROF_GR_ENGINE_ACTIVE', 0.5, 'node-1', 0, 'p', 'history.parquet', ?, ?)",
                [ts, i + 1, DAY],
            )
        for i, ts in enumerate(infinite):
            con.execute(
                "insert into raw_dcgm_samples (ts, metric, value, hostname, gpu, pod, source, source_line, day) "
                "values (CAST(? AS TIMESTAMP), 'DCGM_FI_PROF_GR_ENGINE_ACTIVE', 0.5, 'node-1', 0, 'p', 'history.parquet', ?, ?)",
                [ts, 100 + i, DAY],
            )
        rollup_dcgm_samples(con)
        written = _assert_matches_reference(con)
    by_hour = {r[0]: (r[9], r[10]) for r in written}  # DuckDB gives +-infinity as datetime.max / .min
    assert by_hour[datetime(2024, 9, 18, 10)] == (4, 3)
    assert by_hour[datetime.max] == (2, 1)
    assert by_hour[datetime.min] == (1, 1)
