"""A feed folder's files are read only when they are regular files inside the folder (issue 24,
class 1): a link to `/proc/self/environ` or to a file elsewhere is quarantined with the reason
and never parsed, so the environment never lands in a quarantine table."""

from __future__ import annotations

import os
import shutil
from datetime import date
from pathlib import Path

import duckdb

from gpu_platform.finops.feeds import focus
from gpu_platform.finops.feeds.ingest import load_dcgm_day, load_focus_day, load_inventory_day

SAMPLE = "focus-1.0-sample.csv"


def _file_quarantine(con, feed: str, day: date) -> dict[str, str]:
    rows = con.execute(
        "select source, reason from raw_feed_file_quarantine where feed = ? and day = ? order by source", [feed, day]
    ).fetchall()
    return dict(rows)


def test_focus_files_linked_from_outside_the_feed_folder_are_quarantined_not_read(tmp_path: Path, fixtures: Path):
    feeds = tmp_path / "feeds"
    (feeds / "focus").mkdir(parents=True)
    shutil.copy(fixtures / SAMPLE, feeds / "focus" / "a-sample.csv")
    outside = tmp_path / "other-tenant" / "export.csv"
    outside.parent.mkdir()
    shutil.copy(fixtures / SAMPLE, outside)
    (feeds / "focus" / "b-linked.csv").symlink_to(outside)
    (feeds / "focus" / "c-env.csv").symlink_to("/proc/self/environ")
    os.mkfifo(feeds / "focus" / "d-fifo.csv")  # never opened (a FIFO is not a file to list)
    day = focus.load_focus(fixtures / SAMPLE).rows["ChargePeriodStart"].min().date()
    con = duckdb.connect()
    report = load_focus_day(con, feeds, day)
    bad = _file_quarantine(con, "focus", day)
    assert set(bad) == {"focus/b-linked.csv", "focus/c-env.csv"}
    for reason in bad.values():
        assert reason.startswith("refused: leads outside the feed folder") and "symbolic link" in reason
    assert report.files_loaded == 1
    sources = {r[0] for r in con.execute("select distinct source from raw_focus_billing").fetchall()}
    assert sources == {"focus/a-sample.csv"}


def test_dcgm_files_linked_to_proc_environ_never_reach_the_quarantine_table(tmp_path: Path, fixtures: Path):
    day = date(2024, 9, 18)
    d = tmp_path / "feeds" / "dcgm" / day.isoformat()
    d.mkdir(parents=True)
    shutil.copy(fixtures / "dcgm-metrics-baremetal.txt", d / "a.txt")
    (d / "env.txt").symlink_to("/proc/self/environ")
    con = duckdb.connect()
    load_dcgm_day(con, tmp_path / "feeds", day, [])
    bad = _file_quarantine(con, "dcgm", day)
    assert set(bad) == {f"dcgm/{day}/env.txt"} and "refused: leads outside the feed folder" in bad[f"dcgm/{day}/env.txt"]
    leaked = con.execute(
        "select count(*) from raw_dcgm_quarantine where raw like '%PATH=%' or source like '%env.txt'"
    ).fetchone()[0]
    assert leaked == 0


def test_an_inventory_snapshot_linked_from_elsewhere_is_not_loaded(tmp_path: Path):
    day = date(2024, 9, 18)
    d = tmp_path / "feeds" / "nodes" / day.isoformat()
    d.mkdir(parents=True)
    outside = tmp_path / "nodes.json"
    outside.write_text('{"items": []}')
    (d / "n.json").symlink_to(outside)
    con = duckdb.connect()
    report = load_inventory_day(con, tmp_path / "feeds", day, "nodes")
    assert report.files_loaded == 0
    ((source, reason),) = report.quarantined_files  # quarantined as a file, never read
    assert source == f"nodes/{day.isoformat()}/n.json" and "leads outside the feed folder" in reason
