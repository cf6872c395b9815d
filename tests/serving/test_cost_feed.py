"""The request-count feed: Prometheus query_range answers per service -> raw_service_requests.

Every point is a row or a quarantined row named by its position and reason; a failed query is
refused whole and the day loader quarantines its file."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, date, datetime
from pathlib import Path

import duckdb
import pytest

from gpu_platform.finops.feeds.dcgm import PrometheusQueryError
from gpu_platform.finops.feeds.requests_prom import (
    RECORDED_METRIC,
    load_service_requests_day,
    parse_service_requests,
    read_service_requests_file,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "serving"
DAY = date(2026, 11, 28)
T0 = int(datetime(2026, 11, 28, tzinfo=UTC).timestamp())


def test_a_day_of_points_is_read_whole():
    batch = read_service_requests_file(FIXTURES / "requests-2026-11-28.json", "requests/x.json")
    assert (batch.rows_in, batch.accepted, batch.quarantined) == (289, 289, 0)
    rows = batch.rows
    assert set(rows["service"]) == {"perception-serving"}
    assert rows["ts"][0] == datetime(2026, 11, 28, tzinfo=UTC)
    assert rows["requests"].sum() == 777 + 576_000
    assert rows["metric"].null_count() == 289 and rows["extra_labels"].null_count() == 289
    assert rows["source_line"].to_list() == list(range(1, 290))


def test_bad_points_are_quarantined_by_position_and_reason():
    batch = read_service_requests_file(FIXTURES / "requests-mixed-2026-11-28.json", "requests/m.json")
    assert batch.rows_in == batch.accepted + batch.quarantined == 11
    good = batch.rows.sort("source_line")
    assert good["source_line"].to_list() == [1, 2]
    assert good["service"].to_list() == ["map-tiles", "map-tiles"]
    assert good["requests"].to_list() == [10.0, 12.5]
    assert good["metric"].to_list() == [RECORDED_METRIC] * 2
    assert json.loads(good["extra_labels"][0]) == {"namespace": "team-mapping"}
    reasons = dict(zip(batch.quarantine["source_line"], batch.quarantine["reason"], strict=True))
    assert reasons[3].startswith("row 3: 60 s after the previous point of 'map-tiles'")
    assert reasons[4].startswith("row 4: value NaN is a blank")
    assert reasons[5] == "row 5: negative count -3 (an increase of a counter is never negative)"
    assert reasons[6].startswith("row 6: value +Inf is not a finite count")
    assert reasons[7].startswith("row 7: no 'service' label")
    assert "is not a service name" in reasons[8]
    assert "'http_requests_total' is not a request count per service" in reasons[9]
    assert reasons[10].startswith("row 10: invalid timestamp 'soon'")
    assert reasons[11].startswith("row 11: malformed point")
    raw = json.loads(batch.quarantine.filter(batch.quarantine["source_line"] == 5)["raw"][0])
    assert raw == {"metric": {"pod": "perception-serving-7d9f-abcde", "service": "perception-serving"},
                   "value": [T0 + 7200, "-3"]}


def test_a_point_closer_than_the_step_would_count_twice_and_is_quarantined():
    doc = {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"service": "svc"}, "values": [[T0, "5"], [T0 + 60, "5"], [T0 + 300, "7"], [T0 + 300, "7"]]}]}}
    batch = parse_service_requests(doc, "q")
    assert batch.rows["requests"].to_list() == [5.0, 7.0]
    assert batch.quarantine["source_line"].to_list() == [2, 4]
    assert all("count the same requests twice" in r for r in batch.quarantine["reason"])
    # a finer step is read when the caller says so (its windows must then be that long too)
    assert parse_service_requests(doc, "q", step_s=60).accepted == 3


def test_a_vector_answer_is_one_point_per_series():
    doc = {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"service": "a"}, "value": [T0, "1"]}, {"metric": {"service": "b"}, "value": [T0, "2"]}]}}
    batch = parse_service_requests(json.dumps(doc), "q")
    assert batch.rows["service"].to_list() == ["a", "b"] and batch.quarantined == 0


@pytest.mark.parametrize("doc, match", [
    ({"status": "error", "errorType": "bad_data", "error": "parse error"}, "errorType='bad_data'"),
    ({"status": "success", "data": {"resultType": "scalar", "result": [T0, "1"]}}, "resultType 'scalar'"),
    ([1, 2], "expected a JSON object"),
])
def test_an_answer_that_is_not_a_successful_matrix_is_refused_whole(doc, match):
    with pytest.raises(PrometheusQueryError, match=match):
        parse_service_requests(doc, "q")


def test_the_day_loader_loads_files_and_quarantines_an_unreadable_one(tmp_path):
    feeds = tmp_path / "feeds"
    folder = feeds / "requests" / DAY.isoformat()
    folder.mkdir(parents=True)
    shutil.copy(FIXTURES / "requests-2026-11-28.json", folder / "a.json")
    shutil.copy(FIXTURES / "requests-mixed-2026-11-28.json", folder / "b.json")
    (folder / "c.json").write_text(json.dumps({"status": "error", "errorType": "timeout", "error": "query timed out"}))
    con = duckdb.connect(str(tmp_path / "w.duckdb"))
    report = load_service_requests_day(con, feeds, DAY)
    meta = report.metadata()  # raises when rows in != accepted + quarantined
    assert (meta["files_in"], meta["files_quarantined"]) == (3, 1)
    assert (meta["rows_in"], meta["accepted"], meta["quarantined"]) == (300, 291, 9)
    assert con.execute("select count(*), sum(requests) from raw_service_requests").fetchone() == (291, 777 + 576_000 + 22.5)
    (reason,) = con.execute("select reason from raw_feed_file_quarantine where feed = 'requests'").fetchone()
    assert "errorType='timeout'" in reason
    # idempotent: a second load of the day gives the same rows; a removed file loses its rows
    load_service_requests_day(con, feeds, DAY)
    assert con.execute("select count(*) from raw_service_requests").fetchone() == (291,)
    (folder / "b.json").unlink()
    load_service_requests_day(con, feeds, DAY)
    assert con.execute("select count(*), count(*) filter (where service = 'map-tiles') "
                       "from raw_service_requests").fetchone() == (289, 0)
    assert con.execute("select count(*) from raw_service_requests_quarantine").fetchone() == (0,)


def test_feeds_ingest_loads_a_requests_answer_and_names_a_bad_file(tmp_path):
    from click.testing import CliRunner

    from gpu_platform.cli import main

    wh = str(tmp_path / "w.duckdb")
    bad = tmp_path / "failed.json"
    bad.write_text(json.dumps({"status": "error", "errorType": "timeout", "error": "query timed out"}))
    args = ["feeds", "ingest", "--day", DAY.isoformat(), "--warehouse", wh, "--format", "json",
            "--requests", str(FIXTURES / "requests-mixed-2026-11-28.json")]
    res = CliRunner().invoke(main, args, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    (line,) = json.loads(res.output)["feeds"]
    assert (line["feed"], line["rows_in"], line["accepted"], line["quarantined"]) == ("requests", 11, 2, 9)
    res = CliRunner().invoke(main, [*args[:-2], "--requests", str(bad)], catch_exceptions=False)
    assert res.exit_code == 2 and "--requests" in res.stderr and "errorType='timeout'" in res.stderr


def test_a_second_series_of_a_service_in_one_answer_is_quarantined_not_counted_twice():
    """Two series of one service: the replicas of an HA Prometheus (an external label apart) or a
    query not summed by service. One count per service: the second series' points are quarantined."""
    doc = {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"service": "svc", "prometheus_replica": "a"}, "values": [[T0, "5"], [T0 + 300, "7"]]},
        {"metric": {"service": "svc", "prometheus_replica": "b"}, "values": [[T0, "5"], [T0 + 300, "7"]]},
        {"metric": {"service": "other"}, "values": [[T0, "1"]]}]}}
    batch = parse_service_requests(doc, "q")
    assert batch.rows["service"].to_list() == ["svc", "svc", "other"] and batch.rows["requests"].sum() == 13
    assert batch.quarantine["source_line"].to_list() == [3, 4]
    for n, reason in zip((3, 4), batch.quarantine["reason"], strict=True):
        assert reason.startswith(f"row {n}: a second series of 'svc' in this answer") and "twice" in reason
