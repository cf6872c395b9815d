"""The cost models on raw tables written by the real feed loaders (gpu_platform.finops.feeds).

Inputs are the project's fixture copies of public samples: dcgm-exporter's released-image
`/metrics` text (tests/fixtures/feeds/dcgm-variant-released.txt) and the FOCUS 1.0 sample
billing data (focus-1.0-sample.csv, September 2024; see tests/fixtures/feeds/ATTRIBUTION.md).
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path

import duckdb
import pytest

from gpu_platform.finops.sqlmodels import Project, default_project_path, load_ledger_snapshot

feeds_dcgm = pytest.importorskip("gpu_platform.finops.feeds.dcgm")
feeds_focus = pytest.importorskip("gpu_platform.finops.feeds.focus")
feeds_load = pytest.importorskip("gpu_platform.finops.feeds.load")

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "feeds"
DAY = date(2024, 9, 3)
R42 = dict(request_id="R42", team="perception", cost_center="CC-1010", lane="candidate_train", site="sf",
           workload="training_run", gpu_type="h100", gpu_count=1, state="running", attempts=1)
"""A running request whose pod ran 11:00-13:00 on the sample's host (the ledger's side)."""
R42_POD = dict(namespace="team-perception", pod="train-run-42-worker-0", request_id="R42", attempt=1,
               flavor_name="h100-ondemand", hostname="gpu-node-01", started_at=datetime(2024, 9, 3, 11),
               ended_at=datetime(2024, 9, 3, 13), exit_status="Succeeded")


def test_models_build_on_feed_loaded_tables():
    con = duckdb.connect()
    text = (FIXTURES / "dcgm-variant-released.txt").read_bytes()
    batch = feeds_dcgm.parse_text(text, source="scrape", scraped_at=datetime(2024, 9, 3, 12, tzinfo=UTC))
    feeds_load.load_batch(con, "dcgm", batch, source="scrape", day=DAY)
    focus = feeds_focus.load_focus(FIXTURES / "focus-1.0-sample.csv", source="focus-1.0-sample.csv")
    feeds_load.load_batch(con, "focus", focus, source="focus-1.0-sample.csv", day=DAY)
    load_ledger_snapshot(con, [R42], [R42_POD])
    project = Project.load(default_project_path())
    project.build(con, day=DAY)
    assert [(t.model, t.test_name) for t in project.run_tests(con, DAY) if t.failures] == []

    # gpu-node-01 has no billing row: priced from the price book (H100 on-demand 12.29 USD/GPU-h)
    source, price = con.execute(
        "select price_source, price_per_gpu_hour from int_node_hour_prices where hostname = 'gpu-node-01'"
    ).fetchall()[0]
    assert (source, price) == ("price_book", Decimal("12.290000"))
    alloc, used, cost = con.execute(
        "select allocated_gpu_hours, used_gpu_hours, allocated_cost from fct_gpu_cost_by_request"
    ).fetchall()[0]
    assert alloc == 2.0 and cost == Decimal("24.580000")
    # one scrape: engine-active 0.812345 for one 15 s interval (GPU_UTIL 87 is ignored)
    assert used == pytest.approx(0.812345 * 15 / 3600)
    # the FOCUS sample's rows of that day are all shared cost, tax or credits (no ResourceId is a GPU node),
    # at EffectiveCost, the allocation basis (the sample's AWS EffectiveCost differs from its BilledCost)
    # (effective_cost is the exact sum; the sample's sub-micro amounts the 1e-6 pieces round away are
    # rounding_effective_cost, counted in difference)
    diff, effective, homes, rounding = con.execute(
        "select difference, effective_cost, shared_cost + tax_cost + credit_cost + unused_commitment_cost, "
        "rounding_effective_cost from reconciliation").fetchall()[0]
    assert diff == rounding and effective == homes + rounding and abs(rounding) < Decimal("0.000001")
