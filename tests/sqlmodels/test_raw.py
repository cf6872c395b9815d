"""raw_requests / raw_pod_requests and the ledger snapshot loader."""

from __future__ import annotations

from datetime import datetime

import duckdb
import pytest

from gpu_platform.finops.sqlmodels import ensure_raw_tables, load_ledger_snapshot

REQ = dict(request_id="R1", team="perception", cost_center="CC-1010", lane="candidate_train", workload="training_run",
           gpu_count=4, output_artifact_ids=["a", "b"], accepted_labels=None)
POD = dict(namespace="team-perception", pod="r1-a1", request_id="R1", attempt=1, flavor_name="h100-ondemand",
           hostname="gpu-a", gpu_uuids=["GPU-0"], started_at=datetime(2026, 11, 28), exit_status="Failed")


def test_snapshot_replaces_previous_one():
    con = duckdb.connect()
    assert load_ledger_snapshot(con, [REQ], [POD]) == (1, 1)
    assert load_ledger_snapshot(con, [REQ, {**REQ, "request_id": "R2"}], []) == (2, 0)
    assert con.execute("select count(*) from raw_requests").fetchall()[0][0] == 2
    assert con.execute("select count(*) from raw_pod_requests").fetchall()[0][0] == 0
    assert con.execute("select output_artifact_ids from raw_requests where request_id = 'R1'").fetchall() == [(["a", "b"],)]


def test_bad_snapshot_changes_nothing():
    con = duckdb.connect()
    load_ledger_snapshot(con, [REQ], [POD])
    with pytest.raises(ValueError, match=r"requests\[0\]: unknown field"):
        load_ledger_snapshot(con, [{**REQ, "colour": "red"}], [])
    with pytest.raises(duckdb.Error):  # duplicate primary key: rolled back, the old snapshot stays
        load_ledger_snapshot(con, [REQ, REQ], [])
    assert con.execute("select count(*) from raw_requests").fetchall()[0][0] == 1
    assert con.execute("select count(*) from raw_pod_requests").fetchall()[0][0] == 1


def test_ensure_raw_tables_keeps_existing_tables():
    con = duckdb.connect()
    con.execute("create table raw_dcgm_samples (ts timestamp, metric varchar, value double, extra_labels varchar)")
    ensure_raw_tables(con)
    cols = [r[0] for r in con.execute("describe raw_dcgm_samples").fetchall()]
    assert cols == ["ts", "metric", "value", "extra_labels"]
    assert {"raw_requests", "raw_pod_requests", "raw_focus_billing"} <= {
        r[0] for r in con.execute("select table_name from information_schema.tables").fetchall()}


def test_snapshot_loads_in_one_arrow_batch_with_the_tables_types_and_falls_back_row_by_row():
    """The columnar insert stores what a row-by-row insert stores (types from the table); a value
    Arrow cannot take as its column's type (a numeric string for an integer) goes row by row and
    DuckDB casts it as before."""
    from gpu_platform.finops.sqlmodels.raw import load_scorecard_snapshot

    con = duckdb.connect()
    assert load_ledger_snapshot(con, [REQ], [POD], [("R1", "R0")]) == (1, 1)
    assert con.execute("select gpu_count, started_at, gpu_uuids from raw_requests join raw_pod_requests "
                       "using (request_id)").fetchall() == [(4, datetime(2026, 11, 28), ["GPU-0"])]
    event = dict(request_id="R1", seq=1, event="submitted", event_at=datetime(2026, 11, 28, 1), reason="validated")
    run = dict(request_id="R1", seq=1, kind="training_run", status="succeeded", exit_status="3", attempts=2,
               dataset_ids=["ds-1"], recorded_at=datetime(2026, 11, 28, 2))
    assert load_scorecard_snapshot(con, [event], [], [run]) == (1, 0, 1)
    assert con.execute("select exit_status, attempts, dataset_ids from raw_workload_runs").fetchall() == [(3, 2, ["ds-1"])]
    assert con.execute("select event_at from raw_request_events").fetchall() == [(datetime(2026, 11, 28, 1),)]
