from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path

import duckdb
import polars as pl
import pytest

from gpu_platform.finops.feeds.dcgm import parse_file, parse_text
from gpu_platform.finops.feeds.focus import load_focus
from gpu_platform.finops.feeds.load import LoadStats, load_batch, table_ddl
from gpu_platform.finops.feeds.schemas import FeedBatch

DAY = date(2024, 9, 18)


def _dcgm(fixtures: Path, scraped_at: datetime) -> FeedBatch:
    return parse_file(fixtures / "dcgm-metrics-k8s-unassigned.txt", source="node-1", scraped_at=scraped_at)


def _count(db: Path, sql: str, params: list | None = None) -> tuple:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql, params or []).fetchone()


def test_load_dcgm_creates_tables_and_counts(tmp_path: Path, fixtures: Path, scraped_at: datetime) -> None:
    db = tmp_path / "wh.duckdb"
    stats = load_batch(db, "dcgm", _dcgm(fixtures, scraped_at), source="node-1", day=DAY)
    assert stats == LoadStats(rows_in=3, accepted=2, quarantined=1)
    assert _count(db, "select count(*), min(ts), min(day) from raw_dcgm_samples") == (
        2,
        datetime(2024, 9, 18, 12),
        DAY,
    )
    assert _count(db, "select source_line, reason from raw_dcgm_quarantine") == (
        7,
        "line 7: value 9223372036854775794 is a DCGM blank sentinel (>= 9.2e18, no data)",
    )
    with duckdb.connect(str(db), read_only=True) as con:
        types = dict(
            con.execute(
                "select column_name, data_type from information_schema.columns where table_name = 'raw_dcgm_samples'"
            ).fetchall()
        )
    assert types["ts"] == "TIMESTAMP" and types["gpu"] == "INTEGER" and types["value"] == "DOUBLE"
    assert types["source_line"] == "INTEGER" and types["pod"] == "VARCHAR"


def test_reload_is_idempotent_and_other_partitions_survive(
    tmp_path: Path, fixtures: Path, scraped_at: datetime
) -> None:
    db = tmp_path / "wh.duckdb"
    batch = _dcgm(fixtures, scraped_at)
    load_batch(db, "dcgm", batch, source="node-1", day=DAY)
    other = parse_file(fixtures / "dcgm-metrics-baremetal.txt", source="node-2", scraped_at=scraped_at)
    load_batch(db, "dcgm", other, source="node-2", day=DAY)
    next_day = parse_file(
        fixtures / "dcgm-metrics-k8s-unassigned.txt",
        source="node-1",
        scraped_at=datetime(2024, 9, 19, tzinfo=UTC),
    )
    load_batch(db, "dcgm", next_day, source="node-1", day=date(2024, 9, 19))
    before = _count(db, "select count(*), sum(value) from raw_dcgm_samples")
    for _ in range(3):
        load_batch(db, "dcgm", batch, source="node-1", day=DAY)
    assert _count(db, "select count(*), sum(value) from raw_dcgm_samples") == before == (6, 3 * (139 + 405.0))
    assert _count(db, "select count(*) from raw_dcgm_quarantine") == (3,)
    fewer = parse_text('DCGM_FI_DEV_SM_CLOCK{gpu="0"} 1\n', source="node-1", scraped_at=scraped_at)
    load_batch(db, "dcgm", fewer, source="node-1", day=DAY)
    assert _count(db, "select count(*) from raw_dcgm_samples where source = 'node-1' and day = ?", [DAY]) == (
        1,
    )
    assert _count(
        db, "select count(*) from raw_dcgm_quarantine where source = 'node-1' and day = ?", [DAY]
    ) == (0,)
    assert _count(db, "select count(*) from raw_dcgm_samples") == (5,)


def test_failed_load_rolls_back(tmp_path: Path, fixtures: Path, scraped_at: datetime) -> None:
    db = tmp_path / "wh.duckdb"
    load_batch(db, "dcgm", _dcgm(fixtures, scraped_at), source="node-1", day=DAY)
    good = _dcgm(fixtures, scraped_at)
    broken = FeedBatch(
        rows=good.rows.with_columns(metric=pl.lit(None, dtype=pl.String)),
        quarantine=good.quarantine,
        rows_in=good.rows_in,
    )
    with pytest.raises(duckdb.ConstraintException):
        load_batch(db, "dcgm", broken, source="node-1", day=DAY)
    assert _count(db, "select count(*) from raw_dcgm_samples") == (2,)
    assert _count(db, "select count(*) from raw_dcgm_quarantine") == (1,)


def test_wrong_source_and_unknown_feed_are_refused(
    tmp_path: Path, fixtures: Path, scraped_at: datetime
) -> None:
    db = tmp_path / "wh.duckdb"
    with pytest.raises(ValueError, match="node-1"):
        load_batch(db, "dcgm", _dcgm(fixtures, scraped_at), source="node-9", day=DAY)
    with pytest.raises(ValueError, match="unknown feed"):
        load_batch(
            db,
            "raw_dcgm_samples; drop table x",
            _dcgm(fixtures, scraped_at),  # type: ignore[arg-type]
            source="node-1",
            day=DAY,
        )
    lost = _dcgm(fixtures, scraped_at)
    with pytest.raises(ValueError, match="rows_in=4 but accepted=2 [+] quarantined=1"):
        load_batch(db, "dcgm", FeedBatch(lost.rows, lost.quarantine, rows_in=4), source="node-1", day=DAY)
    assert not db.exists()


def test_source_values_travel_as_parameters(tmp_path: Path, scraped_at: datetime) -> None:
    db = tmp_path / "wh.duckdb"
    source = "x'; drop table raw_dcgm_samples; --"
    batch = parse_text('m{gpu="0"} 1\n', source=source, scraped_at=scraped_at)
    load_batch(db, "dcgm", batch, source=source, day=DAY)
    load_batch(db, "dcgm", batch, source=source, day=DAY)
    assert _count(db, "select count(*), min(source) from raw_dcgm_samples") == (1, source)


def test_load_focus_with_decimals(tmp_path: Path, fixtures: Path) -> None:
    db = tmp_path / "wh.duckdb"
    batch = load_focus(fixtures / "focus-1.0-sample.csv", source="focus-2024-09")
    stats = load_batch(db, "focus", batch, source="focus-2024-09", day=DAY)
    assert stats == LoadStats(1000, 993, 7)
    load_batch(db, "focus", batch, source="focus-2024-09", day=DAY)
    total, kind = _count(db, 'select sum("BilledCost"), typeof(sum("BilledCost")) from raw_focus_billing')
    assert isinstance(total, Decimal) and kind.startswith("DECIMAL(38")
    assert total == batch.rows["BilledCost"].sum()
    assert _count(db, "select count(*) from raw_focus_quarantine") == (7,)
    assert _count(db, "select count(*) from raw_focus_billing where \"ChargeCategory\" = 'Credit'") == (1,)


def test_ddl_is_from_the_allowlist() -> None:
    assert table_ddl("raw_dcgm_quarantine") == (
        'CREATE TABLE IF NOT EXISTS raw_dcgm_quarantine ("source" VARCHAR NOT NULL, "source_line" INTEGER, '
        '"raw" VARCHAR, "reason" VARCHAR NOT NULL, "day" DATE NOT NULL)'
    )
    with pytest.raises(KeyError):
        table_ddl("users")


def test_tables_created_elsewhere_with_the_agreed_columns_get_ours_added(
    tmp_path: Path, fixtures: Path, scraped_at: datetime
) -> None:
    db = tmp_path / "wh.duckdb"
    with duckdb.connect(str(db)) as con:
        con.execute(
            "create table raw_dcgm_samples (ts timestamp, metric varchar, value double, hostname varchar, "
            "gpu integer, uuid varchar, model_name varchar, pci_bus_id varchar, device varchar, "
            "gpu_instance_profile varchar, gpu_instance_id varchar, namespace varchar, pod varchar, "
            "container varchar, source varchar, source_line integer)"
        )
        con.execute(
            "create table raw_focus_billing (BilledCost decimal(18, 6), BillingCurrency varchar, "
            "ChargePeriodStart timestamp, source varchar, source_row integer, focus_version varchar)"
        )
    assert load_batch(db, "dcgm", _dcgm(fixtures, scraped_at), source="node-1", day=DAY).accepted == 2
    focus = load_focus(fixtures / "focus-1.0-sample.csv", source="f")
    assert load_batch(db, "focus", focus, source="f", day=DAY).accepted == 993
    assert _count(db, "select count(*), count(day), count(extra_labels) from raw_dcgm_samples") == (2, 2, 0)
    assert _count(db, 'select count(*), count("ServiceName") from raw_focus_billing') == (993, 993)


def _busy_text(values: list[tuple[int, float]], pod: str = "p-1") -> str:
    """dcgm-exporter text for one MIG instance: (seconds after 00:00 UTC of DAY, engine-active)."""
    t0 = int(datetime(2024, 9, 18, tzinfo=UTC).timestamp() * 1000)
    return "".join(
        f'DCGM_FI_PROF_GR_ENGINE_ACTIVE{{gpu="0",UUID="GPU-1",modelName="NVIDIA H100 80GB HBM3",GPU_I_PROFILE="1g.10gb",'
        f'GPU_I_ID="9",Hostname="node-1",container="main",namespace="ns",pod="{pod}"}} {v} {t0 + s * 1000}\n'
        for s, v in values)


def test_dcgm_load_writes_the_hourly_rollup_of_its_partition(tmp_path: Path, scraped_at: datetime) -> None:
    """The loader rolls the busy samples up per hour, GPU instance, pod, metric and source in the same
    transaction; a re-load replaces its (source, day); a repeated timestamp shows as samples > distinct_ts."""
    from gpu_platform.finops.feeds.load import ensure_tables, rollup_dcgm_samples

    db = tmp_path / "wh.duckdb"
    text = _busy_text([(0, 0.5), (15, 0.25), (3600, 1.0), (3615, 2.0), (3615, 2.0), (30, 9223372036854775794)])
    load_batch(db, "dcgm", parse_text(text, source="node-1", scraped_at=scraped_at), source="node-1", day=DAY)
    sql = ("select hour, gpu_instance_id, gpu_instance_profile, pod, samples, distinct_ts, busy_micro, day "
           "from raw_dcgm_hourly order by hour")
    with duckdb.connect(str(db)) as con:
        rows = con.execute(sql).fetchall()
    assert rows == [
        (datetime(2024, 9, 18, 0), "9", "1g.10gb", "p-1", 2, 2, 750_000, DAY),  # the blank sentinel is not busy time
        (datetime(2024, 9, 18, 1), "9", "1g.10gb", "p-1", 3, 2, 3_000_000, DAY),  # busy clamped to 1; 3615 twice
    ]
    load_batch(db, "dcgm", parse_text(_busy_text([(0, 0.1)]), source="node-1", scraped_at=scraped_at),
               source="node-1", day=DAY)
    with duckdb.connect(str(db)) as con:
        assert con.execute("select count(*), sum(busy_micro) from raw_dcgm_hourly").fetchone() == (1, 100_000)
        # samples written another way are rolled up on request, and a warehouse without a rollup gets one
        con.execute("insert into raw_dcgm_samples select * replace ('other' as source) from raw_dcgm_samples")
        assert rollup_dcgm_samples(con) == 2
        con.execute("drop table raw_dcgm_hourly")

    with duckdb.connect(str(db)) as con:
        ensure_tables(con)
        assert con.execute("select list(source order by source) from raw_dcgm_hourly").fetchone() == (["node-1", "other"],)


def test_load_batches_replaces_a_day_under_a_prefix_in_one_transaction(
    tmp_path: Path, fixtures: Path, scraped_at: datetime
) -> None:
    """Several files of one day in one load: each source replaced, a file source that is no
    longer listed under the prefix forgotten, a scrape (another prefix) and other days kept;
    a bad part writes nothing at all."""
    from gpu_platform.finops.feeds.load import load_batches

    db = tmp_path / "wh.duckdb"

    def batch(source: str, name: str = "dcgm-metrics-k8s-unassigned.txt") -> FeedBatch:
        return parse_file(fixtures / name, source=source, scraped_at=scraped_at)

    load_batch(db, "dcgm", batch("dcgm/a.txt"), source="dcgm/a.txt", day=DAY)
    load_batch(db, "dcgm", batch("dcgm/gone.txt"), source="dcgm/gone.txt", day=DAY)
    load_batch(db, "dcgm", batch("scrape:x"), source="scrape:x", day=DAY)
    load_batch(db, "dcgm", batch("dcgm/gone.txt"), source="dcgm/gone.txt", day=date(2024, 9, 19))
    parts = [("dcgm/a.txt", batch("dcgm/a.txt")), ("dcgm/b.txt", batch("dcgm/b.txt", "dcgm-metrics-baremetal.txt"))]
    stats = load_batches(db, "dcgm", parts, day=DAY, replace_prefix="dcgm/")
    assert [s.rows_in for s in stats] == [p.rows_in for _, p in parts]
    by_source = "select source, day, count(*) from {} group by all order by all"
    with duckdb.connect(str(db), read_only=True) as con:
        samples = con.execute(by_source.format("raw_dcgm_samples")).fetchall()
    assert [(s, d) for s, d, _ in samples] == [
        ("dcgm/a.txt", DAY), ("dcgm/b.txt", DAY), ("dcgm/gone.txt", date(2024, 9, 19)), ("scrape:x", DAY)]
    assert dict(((s, d), n) for s, d, n in samples)[("dcgm/a.txt", DAY)] == parts[0][1].accepted
    # a part with rows of another source: refused before anything is written
    bad = [("dcgm/a.txt", batch("dcgm/a.txt")), ("dcgm/c.txt", batch("dcgm/other.txt"))]
    with pytest.raises(ValueError, match="not only 'dcgm/c.txt'"):
        load_batches(db, "dcgm", bad, day=DAY, replace_prefix="dcgm/")
    with pytest.raises(ValueError, match="more than once"):
        load_batches(db, "dcgm", [parts[0], parts[0]], day=DAY)
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute(by_source.format("raw_dcgm_samples")).fetchall() == samples


def test_stream_batches_writes_what_load_batches_writes_one_part_at_a_time(
    tmp_path: Path, fixtures: Path, scraped_at: datetime
) -> None:
    """The streamed load of a DCGM day (parts staged as they come) leaves the same samples,
    quarantine and hourly rollup as the one-statement load; a part is read only after the one
    before it is staged; a bad part, or a source seen twice, leaves the raw tables as they were."""
    from gpu_platform.finops.feeds.load import load_batches, stream_batches

    util = "".join(
        f'DCGM_FI_DEV_GPU_UTIL{{gpu="{g}",UUID="GPU-{g}",Hostname="n1",pod="p{g}"}} {10 * g + m} '
        f"{1726617600000 + m * 15000}\n"
        for m in range(300)
        for g in range(4)
    )

    def parts() -> list[tuple[str, FeedBatch]]:
        return [
            ("dcgm/a.txt", parse_file(fixtures / "dcgm-metrics-k8s-unassigned.txt", source="dcgm/a.txt", scraped_at=scraped_at)),
            ("dcgm/b.txt", parse_text(util, source="dcgm/b.txt", scraped_at=scraped_at)),
        ]

    tables = ("raw_dcgm_samples", "raw_dcgm_quarantine", "raw_dcgm_hourly")

    def contents(db: Path) -> list[list[tuple]]:
        with duckdb.connect(str(db), read_only=True) as con:
            return [con.execute(f"select * exclude (day) from {t} order by all").fetchall() for t in tables]

    one, streamed = tmp_path / "one.duckdb", tmp_path / "streamed.duckdb"
    load_batch(one, "dcgm", parts()[0][1], source="dcgm/a.txt", day=DAY)
    load_batch(streamed, "dcgm", parts()[0][1], source="dcgm/a.txt", day=DAY)
    load_batches(one, "dcgm", parts(), day=DAY, replace_prefix="dcgm/")
    with duckdb.connect(str(streamed)) as con:
        seen: list[int] = []

        def produce_on_con():
            for i, part in enumerate(parts()):
                if i:
                    seen.append(con.execute("select count(*) from _staging_dcgm_samples").fetchall()[0][0])
                yield part

        stats = stream_batches(con, "dcgm", produce_on_con(), day=DAY, replace_prefix="dcgm/")
    assert seen == [2]  # file a's two accepted samples were staged before file b was read
    assert [s.accepted for s in stats] == [2, 1200]
    assert contents(streamed) == contents(one)
    assert contents(one)[2]  # the rollup has rows (file b's GPU_UTIL samples)
    before = contents(streamed)
    bad = [parts()[0], ("dcgm/c.txt", parts()[1][1])]
    with pytest.raises(ValueError, match="not only 'dcgm/c.txt'"):
        stream_batches(streamed, "dcgm", iter(bad), day=DAY, replace_prefix="dcgm/")
    with pytest.raises(ValueError, match="more than once"):
        stream_batches(streamed, "dcgm", iter([parts()[0], parts()[0]]), day=DAY)
    assert contents(streamed) == before
