"""`seed_costs` on a temporary GPU_PLATFORM_HOME and DAGSTER_HOME: feeds, history, priced days."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import duckdb
import pytest

from assets import demo_seed as demo_costs
from gpu_platform.ledger import Ledger


@pytest.fixture
def demo_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for var in ("GPU_PLATFORM_LEDGER_URL", "GPU_PLATFORM_WAREHOUSE", "GPU_PLATFORM_EVIDENCE_ROOT",
                "GPU_PLATFORM_DCGM_ENDPOINTS", "GPU_PLATFORM_POLICY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("GPU_PLATFORM_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    (tmp_path / "dagster_home").mkdir()
    return tmp_path


def test_seed_costs_prices_each_day_once(demo_env: Path):
    summary = demo_costs.seed_costs(days=2)
    assert summary is not None and summary["runs"] == dict.fromkeys(summary["days"], True)
    feeds = demo_env / "home" / "feeds"
    assert summary["bytes"] < 20e6
    assert sorted(p.name for p in (feeds / "dcgm").iterdir()) == summary["days"]

    with duckdb.connect(str(demo_env / "home" / "warehouse.duckdb"), read_only=True) as con:
        days = con.execute("select count(distinct day) from chargeback where total_cost > 0").fetchone()[0]
        assert days == 2
        assert con.execute("select max(abs(difference)) from reconciliation").fetchone()[0] == 0
        for mart in ("unit_cost_training_run", "unit_cost_accepted_label", "unit_cost_replay_hour",
                     "unit_cost_evidence_pack"):
            assert con.execute(f"select count(*) from {mart}").fetchone()[0] > 0, mart
        assert con.execute("select count(*) from raw_dcgm_quarantine").fetchone()[0] == 2 * 3

    with dg.DagsterInstance.get() as instance:
        for asset in ("raw_dcgm_samples", "chargeback", "reconciliation"):
            keys = instance.get_materialized_partitions(dg.AssetKey(asset))
            assert keys == set(summary["days"]), asset
        assert instance.get_latest_materialization_event(dg.AssetKey("unit_cost_training_run")) is not None
        assert instance.event_log_storage.get_concurrency_info("duckdb_warehouse").slot_count == 1

    # idempotent: the marker makes a second call a no-op, and the ledger keeps one copy
    n_requests = Ledger().count()[0]
    assert demo_costs.seed_costs(days=2) is None
    assert Ledger().count()[0] == n_requests


def test_demo_days_end_yesterday():
    from datetime import date

    assert demo_costs.demo_days(3, today=date(2026, 12, 1)) == [date(2026, 11, 28), date(2026, 11, 29),
                                                               date(2026, 11, 30)]
