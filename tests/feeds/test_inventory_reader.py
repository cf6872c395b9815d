"""One reader for every feed (issue 24, class 4): node and pod inventories go through the bounded,
quarantining reader DCGM and FOCUS use. A bad snapshot is quarantined as a file with its reason
and the day's other snapshots load; a file named on the command line is refused with one line,
never a traceback. Also: files named on the command line (`--focus`, `--dcgm`, `--nodes`) must
be regular files, and `--focus` streams as the saved folder does (a field over Python csv's
128 KiB default next to a ragged row loads the good rows)."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
from datetime import UTC, date, datetime
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from gpu_platform.cli import main
from gpu_platform.finops.feeds.ingest import load_inventory_day

FINOPS = Path(__file__).resolve().parents[1] / "fixtures" / "finops"
FEEDS = Path(__file__).resolve().parents[1] / "fixtures" / "feeds"
ROOT = Path(__file__).resolve().parents[2]
DAY = date(2026, 11, 20)


def _deep(levels: int) -> str:
    return '{"apiVersion": "v1", "kind": "List", "items": [' + '{"a": ' * levels + "1" + "}" * levels + "]}"


def _file_quarantine(con, feed: str) -> dict[str, str]:
    return dict(con.execute(
        "select source, reason from raw_feed_file_quarantine where feed = ? and day = ? order by source", [feed, DAY]
    ).fetchall())


def _snapshots(feeds: Path, kind: str) -> Path:
    d = feeds / kind / DAY.isoformat()
    d.mkdir(parents=True)
    good = (FINOPS / f"kubectl-get-{kind}.json").read_bytes()
    (d / "a-good.json").write_bytes(good)
    (d / "b-truncated.json").write_bytes(good[: len(good) // 2])
    (d / "c-deep.json").write_text(_deep(5000))  # json.loads alone: RecursionError
    other = "pods" if kind == "nodes" else "nodes"
    (d / "d-wrong-kind.json").write_text(json.dumps({"apiVersion": "v1", "kind": f"{other.title()[:-1]}List",
                                                     "items": []}))
    (d / "e-latin1.json").write_bytes(good.replace(b'"metadata"', '"m\u00e9tadata"'.encode("latin-1"), 1))
    (d / "f-duplicate-keys.json").write_text('{"kind": "List", "apiVersion": "v1", "items": [], "items": [1]}')
    return d


@pytest.mark.parametrize("kind", ["nodes", "pods"])
def test_bad_inventory_files_are_quarantined_whole_and_the_day_loads(tmp_path, kind):
    feeds = tmp_path / "feeds"
    _snapshots(feeds, kind)
    con = duckdb.connect()
    report = load_inventory_day(con, feeds, DAY, kind)  # the old code raised on the first bad file
    bad = _file_quarantine(con, kind)
    prefix = f"{kind}/{DAY.isoformat()}/"
    assert set(bad) == {prefix + n for n in ("b-truncated.json", "c-deep.json", "d-wrong-kind.json",
                                              "e-latin1.json", "f-duplicate-keys.json")}
    assert "line" in bad[prefix + "b-truncated.json"] and "column" in bad[prefix + "b-truncated.json"]
    assert "nested deeper than 64 levels" in bad[prefix + "c-deep.json"]
    assert "kind: expected 'List' or" in bad[prefix + "d-wrong-kind.json"]
    assert "not UTF-8" in bad[prefix + "e-latin1.json"] and "byte offset" in bad[prefix + "e-latin1.json"]
    assert "duplicate key 'items'" in bad[prefix + "f-duplicate-keys.json"]
    assert report.files_in == 6 and report.files_loaded == 1 and len(report.quarantined_files) == 5
    assert report.rows_in == report.accepted + report.quarantined
    table = f"raw_{kind}"
    sources = con.execute(f"select distinct source from {table} where day = ?", [DAY]).fetchall()
    assert sources == [(prefix + "a-good.json",)]
    assert con.execute(f"select count(*) from {table}").fetchone()[0] == report.accepted > 0


def test_a_snapshot_broken_later_loses_its_rows_and_a_fixed_one_leaves_the_quarantine(tmp_path):
    feeds = tmp_path / "feeds"
    d = feeds / "nodes" / DAY.isoformat()
    d.mkdir(parents=True)
    good = (FINOPS / "kubectl-get-nodes.json").read_bytes()
    (d / "n.json").write_bytes(good)
    con = duckdb.connect()
    first = load_inventory_day(con, feeds, DAY, "nodes")
    assert first.accepted > 0 and not _file_quarantine(con, "nodes")
    (d / "n.json").write_bytes(good[:100])  # re-delivered truncated
    load_inventory_day(con, feeds, DAY, "nodes")
    assert con.execute("select count(*) from raw_nodes").fetchone()[0] == 0
    assert set(_file_quarantine(con, "nodes")) == {f"nodes/{DAY.isoformat()}/n.json"}
    (d / "n.json").write_bytes(good)
    again = load_inventory_day(con, feeds, DAY, "nodes")
    assert again.accepted == first.accepted and not _file_quarantine(con, "nodes")


def test_an_inventory_link_out_of_the_folder_is_quarantined_unread(tmp_path):
    feeds = tmp_path / "feeds"
    d = feeds / "pods" / DAY.isoformat()
    d.mkdir(parents=True)
    (d / "p.json").symlink_to(FINOPS / "kubectl-get-pods.json")
    con = duckdb.connect()
    report = load_inventory_day(con, feeds, DAY, "pods")
    assert report.files_loaded == 0
    assert "leads outside the feed folder" in _file_quarantine(con, "pods")[f"pods/{DAY.isoformat()}/p.json"]


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpu_platform.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, **env}, timeout=60)


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    return {"GPU_PLATFORM_HOME": str(tmp_path), "GPU_PLATFORM_WAREHOUSE": str(tmp_path / "wh.duckdb")}


def test_a_deep_nodes_file_on_the_command_line_is_one_problem_not_a_traceback(tmp_path, env):
    deep = tmp_path / "nodes.json"
    deep.write_text(_deep(5000))
    res = _cli(["feeds", "ingest", "--day", DAY.isoformat(), "--nodes", str(deep)], env)
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr + res.stdout
    assert f"--nodes {deep}: " in res.stderr and "nested deeper than 64 levels" in res.stderr


@pytest.mark.parametrize("option", ["--nodes", "--focus", "--dcgm"])
def test_a_fifo_named_on_the_command_line_is_refused_without_blocking(tmp_path, env, option):
    fifo = tmp_path / "feed.json"
    os.mkfifo(fifo)
    res = _cli(["feeds", "ingest", "--day", DAY.isoformat(), option, str(fifo)], env)  # old code: 'no such file'
    assert res.returncode == 2, res.stderr
    assert f"{option} {fifo}: refused" in res.stderr and "FIFO" in res.stderr


def test_focus_on_the_command_line_reads_a_long_field_beside_a_ragged_row(tmp_path):
    rows = list(csv.reader(io.StringIO((FEEDS / "focus-1.0-sample.csv").read_text())))
    starts = rows[0].index("ChargePeriodStart")

    def charged(r: list[str]) -> date:
        return datetime.fromisoformat(r[starts].replace("Z", "+00:00")).astimezone(UTC).date()

    day = min(charged(r) for r in rows[1:])  # the file's anchor: its quarantined rows load here
    long_row = next(i for i, r in enumerate(rows) if i > 5 and charged(r) == day)
    rows[long_row][rows[0].index("ChargeDescription")] = "x" * 200_000  # over csv's 131,072 default
    rows[5] = rows[5][:-2]  # one ragged row: the file is read by Python's csv module from there
    out = io.StringIO()
    csv.writer(out).writerows(rows)
    bill = tmp_path / "bill.csv"
    bill.write_text(out.getvalue())
    home = tmp_path / "home"
    env = {"GPU_PLATFORM_HOME": str(home), "GPU_PLATFORM_WAREHOUSE": str(home / "wh.duckdb")}
    res = CliRunner().invoke(main, ["feeds", "ingest", "--day", day.isoformat(), "--focus", str(bill),
                                    "--format", "json"], env=env)
    assert res.exit_code == 0, res.output  # old code: _csv.Error traceback
    (line,) = json.loads(res.stdout)["feeds"]
    assert line["rows_in"] == len(rows) - 1 == line["accepted"] + line["quarantined"] + line["other_days"]
    with duckdb.connect(str(home / "wh.duckdb"), read_only=True) as con:
        reasons = [r for (r,) in con.execute("select reason from raw_focus_quarantine").fetchall()]
        longest = con.execute("select max(length(ChargeDescription)) from raw_focus_billing").fetchone()[0]
    assert any(r.startswith("row 5: expected") for r in reasons)
    assert longest == 200_000
    assert line["accepted"] == con_count(home, day)


def con_count(home: Path, day: date) -> int:
    with duckdb.connect(str(home / "wh.duckdb"), read_only=True) as con:
        return con.execute("select count(*) from raw_focus_billing where day = ?", [day]).fetchone()[0]


def test_focus_on_the_command_line_twice_replaces_its_rows(tmp_path):
    home = tmp_path / "home"
    env = {"GPU_PLATFORM_HOME": str(home), "GPU_PLATFORM_WAREHOUSE": str(home / "wh.duckdb")}
    bill = tmp_path / "bill.csv"
    shutil.copy(FEEDS / "focus-1.0-sample.csv", bill)
    rows = list(csv.reader(io.StringIO(bill.read_text())))
    starts = rows[0].index("ChargePeriodStart")
    day = datetime.fromisoformat(rows[1][starts].replace("Z", "+00:00")).astimezone(UTC).date()
    lines = []
    for _ in range(2):
        res = CliRunner().invoke(main, ["feeds", "ingest", "--day", day.isoformat(), "--focus", str(bill),
                                        "--format", "json"], env=env)
        assert res.exit_code == 0, res.output
        lines.append(json.loads(res.stdout)["feeds"][0])
    assert lines[0] == lines[1]
    assert con_count(home, day) == lines[0]["accepted"] > 0


def test_the_saved_folder_keeps_the_good_rows_of_a_file_with_a_long_field_and_a_ragged_row(tmp_path):
    from gpu_platform.finops.feeds.ingest import load_focus_day

    rows = list(csv.reader(io.StringIO((FEEDS / "focus-1.0-sample.csv").read_text())))
    starts = rows[0].index("ChargePeriodStart")
    day = min(datetime.fromisoformat(r[starts].replace("Z", "+00:00")).astimezone(UTC).date() for r in rows[1:])
    rows[2][rows[0].index("Tags")] = json.dumps({"note": "y" * 150_000})
    rows[4] = rows[4][:-1]
    out = io.StringIO()
    csv.writer(out).writerows(rows)
    (tmp_path / "feeds" / "focus").mkdir(parents=True)
    (tmp_path / "feeds" / "focus" / "bill.csv").write_text(out.getvalue())
    con = duckdb.connect()
    report = load_focus_day(con, tmp_path / "feeds", day)  # old code: the whole file quarantined
    assert report.files_loaded == 1 and not report.quarantined_files
    assert report.accepted > 0 and any(r.startswith("expected") for r in report.reasons)
