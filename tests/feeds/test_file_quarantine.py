"""One bad file never aborts a day: it is quarantined whole (path, reason) and the rest loads.

Also: a re-delivered FOCUS export is not billed twice (duplicate rows quarantined), and DCGM
samples land on the day of their timestamp, whatever directory they came in.
"""

from __future__ import annotations

import csv
import io
import shutil
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import duckdb

from gpu_platform.finops.feeds import focus
from gpu_platform.finops.feeds.ingest import load_dcgm_day, load_focus_day

SAMPLE = "focus-1.0-sample.csv"


def _file_quarantine(con, feed: str, day: date) -> dict[str, str]:
    rows = con.execute(
        "select source, reason from raw_feed_file_quarantine where feed = ? and day = ? order by source", [feed, day]
    ).fetchall()
    return dict(rows)


def _focus_feeds(tmp_path: Path, fixtures: Path) -> tuple[Path, date]:
    feeds = tmp_path / "feeds"
    (feeds / "focus").mkdir(parents=True)
    shutil.copy(fixtures / SAMPLE, feeds / "focus" / "a-sample.csv")
    shutil.copy(fixtures / "focus-1.2-columns.csv", feeds / "focus" / "b-broken-header.csv")
    (feeds / "focus" / "c-latin1.csv").write_bytes(
        (fixtures / SAMPLE).read_bytes()[:2000].replace(b"Amazon", "Amazôn".encode("latin-1"))
    )
    (feeds / "focus" / "d-not-parquet.parquet").write_bytes(b"PAR1 this is not parquet")
    (feeds / "focus" / "e-empty.csv").write_bytes(b"")
    shutil.copy(fixtures / SAMPLE, feeds / "focus" / "f-redelivered.csv")
    day = focus.load_focus(fixtures / SAMPLE).rows["ChargePeriodStart"].min().date()
    return feeds, day


def test_bad_focus_files_are_quarantined_whole_and_the_others_load(tmp_path, fixtures):
    feeds, day = _focus_feeds(tmp_path, fixtures)
    con = duckdb.connect()
    report = load_focus_day(con, feeds, day)
    bad = _file_quarantine(con, "focus", day)
    assert set(bad) == {"focus/b-broken-header.csv", "focus/c-latin1.csv", "focus/d-not-parquet.parquet",
                        "focus/e-empty.csv"}
    assert "missing required column(s): BilledCost" in bad["focus/b-broken-header.csv"]
    assert "not UTF-8" in bad["focus/c-latin1.csv"] and "byte offset" in bad["focus/c-latin1.csv"]
    assert "no header row" in bad["focus/e-empty.csv"]
    assert report.files_in == 6 and report.files_loaded == 2 and len(report.quarantined_files) == 4
    md = report.metadata()
    assert md["files_quarantined"] == 4 and "focus/b-broken-header.csv" in md["quarantined_files"]
    # the file sorted after the broken ones was read: its rows are all duplicates of a-sample's
    per_source = dict(con.execute(
        "select source, count(*) from raw_focus_billing where day = ? group by source", [day]).fetchall())
    assert set(per_source) == {"focus/a-sample.csv"}
    dupes = con.execute(
        "select count(*), min(reason) from raw_focus_quarantine where day = ? and source = 'focus/f-redelivered.csv'"
        " and reason like '%duplicate of%'",
        [day]).fetchone()
    assert dupes[0] == per_source["focus/a-sample.csv"]
    assert "duplicate of focus/a-sample.csv row" in dupes[1]
    assert report.rows_in == report.accepted + report.quarantined


def test_a_fixed_file_leaves_the_file_quarantine_and_a_broken_one_loses_its_old_rows(tmp_path, fixtures):
    feeds, day = _focus_feeds(tmp_path, fixtures)
    con = duckdb.connect()
    load_focus_day(con, feeds, day)
    shutil.copy(fixtures / SAMPLE, feeds / "focus" / "b-broken-header.csv")  # fixed
    (feeds / "focus" / "a-sample.csv").write_bytes(b"\xff\xfe broken now")  # broken after a good load
    load_focus_day(con, feeds, day)
    bad = _file_quarantine(con, "focus", day)
    assert "focus/b-broken-header.csv" not in bad and "focus/a-sample.csv" in bad
    sources = {r[0] for r in con.execute("select distinct source from raw_focus_billing where day = ?", [day]).fetchall()}
    assert sources == {"focus/b-broken-header.csv"}


def test_bad_dcgm_files_are_named_and_the_day_loads(tmp_path, fixtures):
    day = date(2024, 9, 18)
    d = tmp_path / "feeds" / "dcgm" / day.isoformat()
    d.mkdir(parents=True)
    shutil.copy(fixtures / "dcgm-metrics-baremetal.txt", d / "a.txt")
    (d / "b.json").write_text('{"status": "success", "data": {"resultType": "matrix", "result": [')
    (d / "c.parquet").write_bytes(b"not parquet at all")
    (d / "d.json").write_text("[" * 100_000 + "]" * 100_000)
    (d / "e.prom").write_bytes(b"DCGM_FI_DEV_GPU_UTIL{gpu=\"0\"} 5\n\x00\x01\xff\xfe")
    shutil.copy(fixtures / "dcgm-variant-mig.txt", d / "f.txt")
    con = duckdb.connect()
    report = load_dcgm_day(con, tmp_path / "feeds", day, [])
    bad = _file_quarantine(con, "dcgm", day)
    assert set(bad) == {f"dcgm/{day}/b.json", f"dcgm/{day}/c.parquet", f"dcgm/{day}/d.json"}
    assert "nested deeper than 16 levels" in bad[f"dcgm/{day}/d.json"]
    assert report.files_in == 6 and report.files_loaded == 3
    # a text file with binary junk is read line by line: the junk line is quarantined, not the file
    assert con.execute("select count(*) from raw_dcgm_quarantine where source = ?", [f"dcgm/{day}/e.prom"]).fetchone()[0] >= 1
    loaded = {r[0] for r in con.execute("select distinct source from raw_dcgm_samples").fetchall()}
    assert {f"dcgm/{day}/a.txt", f"dcgm/{day}/f.txt"} <= loaded
    assert report.rows_in == report.accepted + report.quarantined


def _prom_line(ts: datetime, value: int) -> str:
    return (f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-0a1b",Hostname="gpu-node-1",modelName="NVIDIA H100 80GB HBM3"}}'
            f" {value} {int(ts.timestamp() * 1000)}\n")


def test_dcgm_samples_belong_to_the_day_of_their_timestamp(tmp_path):
    d1, d2 = date(2024, 9, 18), date(2024, 9, 19)
    feeds = tmp_path / "feeds"
    (feeds / "dcgm" / d1.isoformat()).mkdir(parents=True)
    midnight = datetime(2024, 9, 19, tzinfo=UTC)
    (feeds / "dcgm" / d1.isoformat() / "node-1.prom").write_text(
        "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
        + _prom_line(midnight - timedelta(minutes=1), 10)
        + _prom_line(midnight + timedelta(minutes=1), 20)
        + _prom_line(midnight + timedelta(days=5), 30)
    )
    con = duckdb.connect()
    first = load_dcgm_day(con, feeds, d1, [])
    second = load_dcgm_day(con, feeds, d2, [])
    rows = con.execute("select day, value from raw_dcgm_samples order by ts").fetchall()
    assert rows == [(d1, 10.0), (d2, 20.0)]
    (reason,) = con.execute("select reason from raw_dcgm_quarantine").fetchone()
    assert reason == "line 4: timestamp on 2024-09-24 is more than a day away from its directory's day 2024-09-18"
    assert first.rows_in + second.rows_in == 3
    assert (first.files_in, second.files_in) == (1, 0)
    # reloading either day again changes nothing
    load_dcgm_day(con, feeds, d2, [])
    load_dcgm_day(con, feeds, d1, [])
    assert con.execute("select day, value from raw_dcgm_samples order by ts").fetchall() == rows
    assert con.execute("select count(*) from raw_dcgm_quarantine").fetchone() == (1,)


def test_a_currency_alone_in_its_charge_period_is_flagged(tmp_path, fixtures):
    lines = (fixtures / SAMPLE).read_text().splitlines()
    header = lines[0].split(",")
    cur, start, end = (header.index(f'"{c}"') for c in ("BillingCurrency", "ChargePeriodStart", "ChargePeriodEnd"))
    rows = list(csv.reader(lines[1:6]))
    lone = list(rows[0])
    lone[cur], lone[start], lone[end] = "EUR", "2024-09-18 03:00:00", "2024-09-18 04:00:00"
    feeds = tmp_path / "feeds"
    (feeds / "focus").mkdir(parents=True)
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow([h.strip('"') for h in header])
    writer.writerows([*rows, lone])
    (feeds / "focus" / "mixed.csv").write_text(out.getvalue())
    report = load_focus_day(duckdb.connect(), feeds, date(2024, 9, 18))
    assert report.currency_flags == [
        "focus/mixed.csv: charge period 2024-09-18 03:00-2024-09-18 04:00 is billed only in EUR (1 row(s)); "
        "the file's other periods use USD"
    ]
    md = report.metadata()
    assert md["currency_flagged_periods"] == 1 and "billed only in EUR" in md["currency_flags"]


def test_a_neighbour_file_edited_to_have_nothing_for_a_day_leaves_nothing_there(tmp_path):
    d1, d2 = date(2024, 9, 18), date(2024, 9, 19)
    feeds = tmp_path / "feeds"
    (feeds / "dcgm" / d1.isoformat()).mkdir(parents=True)
    path = feeds / "dcgm" / d1.isoformat() / "node-1.prom"
    midnight = datetime(2024, 9, 19, tzinfo=UTC)
    path.write_text(_prom_line(midnight - timedelta(minutes=1), 10) + _prom_line(midnight + timedelta(minutes=1), 20))
    con = duckdb.connect()
    load_dcgm_day(con, feeds, d2, [])
    assert con.execute("select count(*) from raw_dcgm_samples where day = ?", [d2]).fetchone() == (1,)
    path.write_text(_prom_line(midnight - timedelta(minutes=1), 10))  # the 00:01 sample removed
    report = load_dcgm_day(con, feeds, d2, [])
    assert con.execute("select count(*) from raw_dcgm_samples where day = ?", [d2]).fetchone() == (0,)
    assert report.sources == 0
