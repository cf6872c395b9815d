"""gpu_platform.finops.feeds.ingest without Dagster: a day's directory of saved DCGM files into DuckDB."""

from __future__ import annotations

import shutil
from datetime import date
from pathlib import Path

import duckdb
import pytest

from gpu_platform.finops.feeds.ingest import IngestCountMismatch, IngestReport, load_dcgm_day

DAY = date(2024, 9, 18)
FILES = ("dcgm-malformed.txt", "dcgm-variant-released.txt", "dcgm-metrics-k8s-unassigned.txt")


def _feeds(tmp_path: Path, fixtures: Path) -> Path:
    feeds = tmp_path / "feeds"
    day_dir = feeds / "dcgm" / DAY.isoformat()
    day_dir.mkdir(parents=True)
    for name in FILES:
        shutil.copy(fixtures / name, day_dir / name)
    return feeds


def _by_source(con: duckdb.DuckDBPyConnection, table: str) -> dict[str, int]:
    return dict(con.execute(f"select source, count(*) from {table} where day = ? group by source", [DAY]).fetchall())


def test_rows_in_is_accepted_plus_quarantined_over_a_directory(tmp_path: Path, fixtures: Path) -> None:
    con = duckdb.connect()
    report = load_dcgm_day(con, _feeds(tmp_path, fixtures), DAY, [])
    assert report.sources == len(FILES) and report.errors == []
    assert report.quarantined > 0  # the malformed fixture and the blank sentinel
    assert report.rows_in == report.accepted + report.quarantined
    assert sum(_by_source(con, "raw_dcgm_samples").values()) == report.accepted
    assert sum(_by_source(con, "raw_dcgm_quarantine").values()) == report.quarantined
    assert sum(report.reasons.values()) == report.quarantined
    assert not any(r.startswith(("line ", "row ")) for r in report.reasons)  # positions stripped
    md = report.metadata()
    assert (md["rows_in"], md["accepted"], md["quarantined"], md["sources"]) == (
        report.rows_in, report.accepted, report.quarantined, len(FILES))
    assert md["quarantine_reasons"].startswith("| reason | rows |") and "scrape_errors" not in md


def test_reload_is_idempotent_and_a_removed_file_is_forgotten_for_that_day(tmp_path: Path, fixtures: Path) -> None:
    feeds = _feeds(tmp_path, fixtures)
    con = duckdb.connect()
    load_dcgm_day(con, feeds, DAY, [])
    samples, quarantine = _by_source(con, "raw_dcgm_samples"), _by_source(con, "raw_dcgm_quarantine")
    load_dcgm_day(con, feeds, DAY, [])
    assert (_by_source(con, "raw_dcgm_samples"), _by_source(con, "raw_dcgm_quarantine")) == (samples, quarantine)

    removed = f"dcgm/{DAY}/dcgm-malformed.txt"
    assert removed in samples and removed in quarantine
    (feeds / removed).unlink()
    report = load_dcgm_day(con, feeds, DAY, [])
    assert report.sources == len(FILES) - 1
    assert _by_source(con, "raw_dcgm_samples") == {s: n for s, n in samples.items() if s != removed}
    assert _by_source(con, "raw_dcgm_quarantine") == {s: n for s, n in quarantine.items() if s != removed}


def test_metadata_refuses_counts_that_do_not_add_up() -> None:
    with pytest.raises(IngestCountMismatch, match="rows_in=3 != accepted=1 \\+ quarantined=1"):
        IngestReport(rows_in=3, accepted=1, quarantined=1).metadata()
