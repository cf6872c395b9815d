"""Ingest assets + cost assets materialized for one day on a temporary GPU_PLATFORM_HOME.

Inputs: a generated day (the demo generator: finished requests in a real SQLite ledger, 15 s
DCGM history as Parquet, a Prometheus text scrape with blanks and a malformed line, FOCUS 1.2
billing) plus the project's copies of public samples (dcgm-exporter text, the FOCUS 1.0 sample;
tests/fixtures/feeds/ATTRIBUTION.md).
"""

from __future__ import annotations

import http.server
import os
import shutil
import threading
from datetime import UTC, date, datetime
from pathlib import Path

import dagster as dg
import duckdb
import pytest

from assets.finops import finops_assets, finops_jobs
from assets.ingest import (
    INGEST_GROUP,
    ingest_assets,
    raw_dcgm_samples,
    raw_focus_billing,
)
from gpu_platform.demo import costs as demo_costs
from gpu_platform.finops.feeds import focus
from gpu_platform.finops.feeds.ingest import focus_day_batch, load_dcgm_day
from gpu_platform.lineage.graph import LineageStore
from gpu_platform.observe.scorecards import SIGNALS
from gpu_platform.requests.ledger import Ledger
from resources.build import build_resources

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "feeds"
DAY = date(2026, 11, 28)
NOON = datetime(2026, 11, 28, 12, tzinfo=UTC).timestamp()


def md(result: dg.ExecuteInProcessResult, asset: str) -> dict:
    (mat,) = [m for m in result.asset_materializations_for_node(asset)]
    return {k: v.value for k, v in mat.metadata.items()}


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("home")
    feeds = home / "feeds"
    ledger = Ledger(f"sqlite:///{home / 'ledger.db'}")
    from gpu_platform.policy import load_policy

    placements = demo_costs.seed_history(ledger, LineageStore(ledger.engine), load_policy(), DAY, 1)
    demo_costs.write_dcgm(feeds, DAY, placements, seed=1)
    demo_costs.write_focus(feeds, [DAY])
    day_dir = feeds / "dcgm" / DAY.isoformat()
    for name in ("dcgm-variant-released.txt", "dcgm-malformed.txt"):
        shutil.copy(FIXTURES / name, day_dir / name)
        os.utime(day_dir / name, (NOON, NOON))  # their lines carry no timestamp: ts = file time
    shutil.copy(FIXTURES / "focus-1.0-sample.csv", feeds / "focus" / "focus-1.0-sample.csv")
    return home


@pytest.fixture(scope="module")
def resources(home: Path) -> dict:
    return build_resources("test", env={"GPU_PLATFORM_HOME": str(home)})


@pytest.fixture(scope="module")
def materialized(resources):
    result = dg.materialize([*ingest_assets, *finops_assets], partition_key=DAY.isoformat(), resources=resources)
    return result, resources["warehouse"].path


def test_ingest_then_price_one_day(materialized):
    result, path = materialized
    assert result.success
    dcgm, billing, snapshot = (md(result, a) for a in ("raw_dcgm_samples", "raw_focus_billing", "raw_ledger_snapshot"))
    assert dcgm["rows_in"] == dcgm["accepted"] + dcgm["quarantined"]
    assert dcgm["sources"] == 4 + 1 + 2  # 4 node histories, the scrape, 2 fixture files
    # 2 blank sentinels + 1 truncated line in the demo scrape, and the malformed fixture's lines
    assert dcgm["quarantined"] >= 3
    assert "DCGM blank sentinel" in dcgm["quarantine_reasons"]
    # 4 nodes x 24 node-hours + 4 volumes + EKS + support + the credit; the 1.0 sample has no row that day
    assert billing["accepted"] == 4 * 24 + 4 + 2 + 1
    assert billing["rows_in"] == billing["accepted"] + billing["quarantined"]
    assert snapshot["requests"] == len(demo_costs.day_slots(1))
    assert snapshot["pods"] == len(demo_costs.day_slots(1)) + 1  # one failed first attempt
    assert snapshot["pods_without_hostname"] == 0
    with duckdb.connect(path, read_only=True) as con:
        assert con.execute("select count(*) from raw_dcgm_samples where day = ?", [DAY]).fetchone()[0] == dcgm["accepted"]
        assert con.execute("select count(*) from raw_dcgm_quarantine where day = ?", [DAY]).fetchone()[0] == dcgm[
            "quarantined"]
        teams = con.execute("select count(distinct team) from chargeback where day = ? and total_cost > 0",
                            [DAY]).fetchone()[0]
        assert teams >= 5
        (diff,) = con.execute("select max(abs(difference)) from reconciliation where day = ?", [DAY]).fetchone()
        assert diff == 0
        assert con.execute("select count(*) from unit_cost_accepted_label").fetchone()[0] == 2
        busy = con.execute("select sum(used_gpu_hours) / sum(allocated_gpu_hours) from fct_gpu_cost_by_request "
                           "where day = ?", [DAY]).fetchone()[0]
        assert 0.3 < busy < 0.9
    signals = {s.name for s in SIGNALS}  # capacity signals fire on this realistic day (WARN); data tests pass
    failed = [e.check_name for e in result.get_asset_check_evaluations() if not e.passed and e.check_name not in signals]
    assert failed == []


def test_rerun_is_idempotent_and_forgets_removed_files(materialized, home, resources):
    _, path = materialized
    with duckdb.connect(path, read_only=True) as con:
        before = con.execute("select count(*) from raw_dcgm_samples where day = ?", [DAY]).fetchone()[0]
    again = dg.materialize([raw_dcgm_samples, raw_focus_billing], partition_key=DAY.isoformat(), resources=resources)
    assert again.success
    with duckdb.connect(path, read_only=True) as con:
        assert con.execute("select count(*) from raw_dcgm_samples where day = ?", [DAY]).fetchone()[0] == before
    moved = home / "dcgm-variant-released.txt"
    (home / "feeds" / "dcgm" / DAY.isoformat() / "dcgm-variant-released.txt").rename(moved)
    try:
        dg.materialize([raw_dcgm_samples], partition_key=DAY.isoformat(), resources=resources)
        with duckdb.connect(path, read_only=True) as con:
            sources = {r[0] for r in con.execute("select distinct source from raw_dcgm_samples").fetchall()}
        assert f"dcgm/{DAY}/dcgm-variant-released.txt" not in sources
        assert f"dcgm/{DAY}/gpu-h100-a.parquet" in sources
    finally:
        moved.rename(home / "feeds" / "dcgm" / DAY.isoformat() / "dcgm-variant-released.txt")


def test_focus_rows_are_taken_by_charge_day_and_quarantine_counted_once():
    batch = focus.load_focus(FIXTURES / "focus-1.0-sample.csv", source="focus/focus-1.0-sample.csv")
    days = sorted({ts.date() for ts in batch.rows["ChargePeriodStart"].to_list()})
    parts = [focus_day_batch(batch, d, days[0]) for d in days]
    assert sum(p.accepted for p in parts) == batch.accepted
    assert sum(p.quarantined for p in parts) == batch.quarantined
    assert all(p.rows_in == p.accepted + p.quarantined for p in parts)


def test_scrape_of_a_live_endpoint(tmp_path):
    body = (FIXTURES / "dcgm-variant-released.txt").read_bytes()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
    try:
        con = duckdb.connect()
        report = load_dcgm_day(con, tmp_path, DAY, [url, "http://127.0.0.1:9/metrics"])
    finally:
        server.shutdown()
    assert report.accepted > 0 and report.sources == 1
    assert len(report.errors) == 1 and "127.0.0.1:9" in report.errors[0]
    (source,) = con.execute("select distinct source from raw_dcgm_samples").fetchone()
    assert source.startswith(f"scrape:{url}@")


def test_daily_job_ingests_then_prices():
    (job,) = finops_jobs
    defs = dg.Definitions(assets=[*ingest_assets, *finops_assets], jobs=[job],
                          resources=build_resources("test", env={}))
    keys = {k.to_user_string() for k in defs.resolve_job_def("finops_daily").asset_layer.selected_asset_keys}
    assert {"raw_dcgm_samples", "raw_focus_billing", "raw_ledger_snapshot", "chargeback"} <= keys
    for a in ingest_assets:
        spec = next(iter(a.specs))
        assert spec.group_name == INGEST_GROUP and spec.kinds == {"duckdb"} and a.op.pool == "duckdb_warehouse"
