"""FinOps assets materialized with Dagster on a temporary DuckDB file holding the scenario."""

from __future__ import annotations

from datetime import UTC, datetime

import dagster as dg
import duckdb
import pytest

from assets.finops import (
    WAREHOUSE_POOL,
    finops_assets,
    finops_checks,
    finops_daily_partitions,
    finops_jobs,
    finops_schedules,
)
from gpu_platform.observe.scorecards import SIGNALS
from resources.warehouse import Warehouse
from tests.sqlmodels.finops_scenario import DAY, load_scenario


def by_key() -> dict[str, dg.AssetsDefinition]:
    return {a.key.to_user_string(): a for a in finops_assets}


def test_asset_graph_follows_refs_and_raw_sources():
    assets = by_key()
    assert "chargeback" in assets and "price_book" in assets
    deps = {k.to_user_string() for k in assets["stg_requests"].asset_deps[dg.AssetKey(["stg_requests"])]}
    assert deps == {"raw_ledger_snapshot"}
    deps = {k.to_user_string() for k in assets["int_node_hour_prices"].asset_deps[dg.AssetKey(["int_node_hour_prices"])]}
    assert deps == {"int_gpu_nodes", "int_billing_nodes", "price_book"}
    assert "stg_dcgm_samples" not in assets  # ephemeral: its rules are applied by the rollup and int_gpu_busy
    busy = assets["int_gpu_busy"]
    assert {k.to_user_string() for k in busy.asset_deps[dg.AssetKey(["int_gpu_busy"])]} == {"raw_dcgm_samples"}
    # the per-sample checks, set-based on the rollup's counts
    assert {"expression_is_true_samples_unique_per_gpu_pod_metric_ts", "accepted_values_metric"} <= {
        c.name for c in busy.check_specs}
    assert busy.partitions_def == finops_daily_partitions
    assert busy.backfill_policy == dg.BackfillPolicy.single_run()
    assert assets["unit_cost_training_run"].partitions_def is None
    for a in finops_assets:
        spec = next(iter(a.specs))
        assert spec.group_name == "finops" and spec.kinds == {"duckdb"}
        assert a.op.pool == WAREHOUSE_POOL
    assert len(finops_checks) == sum(len(list(a.check_specs)) for a in finops_assets) > 50


def test_definitions_job_and_schedule_for_yesterday():
    defs = dg.Definitions(assets=finops_assets, jobs=finops_jobs, schedules=finops_schedules,
                          resources={"warehouse": Warehouse(path=":memory:")})
    job = defs.resolve_job_def("finops_daily")
    assert job.partitions_def == finops_daily_partitions
    (schedule,) = finops_schedules
    assert schedule.cron_schedule == "0 2 * * *"
    ctx = dg.build_schedule_context(scheduled_execution_time=datetime(2026, 11, 29, 2, 0, tzinfo=UTC),
                                    repository_def=defs.get_repository_def())
    (request,) = schedule.evaluate_tick(ctx).run_requests
    assert request.partition_key == DAY


@pytest.fixture(scope="module")
def materialized(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("wh") / "warehouse.duckdb")
    con = duckdb.connect(path)
    load_scenario(con)
    con.close()
    result = dg.materialize(finops_assets, partition_key=DAY, resources={"warehouse": Warehouse(path=path)})
    return result, path


def test_materialize_day_builds_every_model_and_passes_every_check(materialized):
    result, path = materialized
    assert result.success
    evals = result.get_asset_check_evaluations()
    assert len(evals) == len(finops_checks)
    # data tests all pass; capacity signals (tests/scorecards) may fire on this day, and one does
    signals = {s.name for s in SIGNALS}
    assert [e.check_name for e in evals if not e.passed and e.check_name not in signals] == []
    assert {e.check_name for e in evals if not e.passed} == {"pool_utilization_low"}
    with duckdb.connect(path, read_only=True) as con:
        total = con.execute("select sum(total_cost) from chargeback").fetchall()[0][0]
    assert str(total) == "1191.648000"


def test_materialization_metadata_for_plots(materialized):
    result, _ = materialized
    mats = {m.asset_key.to_user_string(): m.metadata for m in result.get_asset_materialization_events()
            for m in [m.event_specific_data.materialization]}
    fct = mats["fct_gpu_cost_by_request"]
    assert fct["gpu_hours"].value == pytest.approx(115.0)  # 80 on gpu-a + 35 on gpu-b
    assert fct["allocated_cost_USD"].value == pytest.approx(388.54)
    assert 0 < fct["utilization"].value < 1
    assert "R3" in fct["top_requests_md"].value
    tenant = mats["platform_cost_per_tenant"]
    assert tenant["total_cost_USD"].value == pytest.approx(1191.648)
    assert "| safety |" in tenant["top_teams_md"].value
    assert mats["reconciliation"]["billed_cost_USD"].value == pytest.approx(837.60)


def test_forecast_assets_show_what_cost_report_says(materialized):
    """cost_forecast and budget_burn are daily assets downstream of chargeback; their partition's
    metadata (the UI's plots and tables) comes from the same queries as `cost report`."""
    from gpu_platform.finops.sqlmodels.report import cost_report

    result, path = materialized
    assets = by_key()
    for name in ("cost_forecast", "budget_burn"):
        assert assets[name].partitions_def == finops_daily_partitions
    deps = {k.to_user_string() for k in assets["cost_forecast"].asset_deps[dg.AssetKey(["cost_forecast"])]}
    assert deps == {"chargeback", "stg_requests", "stg_request_metadata"}
    mats = {m.asset_key.to_user_string(): m.metadata for m in result.get_asset_materialization_events()
            for m in [m.event_specific_data.materialization]}
    with duckdb.connect(path, read_only=True) as con:
        report = cost_report(con, DAY)
    forecast = sum(float(r["forecast_month_end_cost"]) for r in report["forecast"] if r["currency"] == "USD")
    assert forecast > 0
    assert mats["cost_forecast"]["forecast_month_end_cost_USD"].value == pytest.approx(forecast)
    assert "| safety |" in mats["cost_forecast"]["forecast_md"].value
    burn = mats["budget_burn"]
    assert burn["budgets_fired"].value == sum(1 for r in report["budget_burn"] if r["fired"])
    lane = next(r for r in report["budget_burn"] if r["subject"] == "candidate_train")
    assert burn["budget_left_lane_candidate_train_USD"].value == pytest.approx(
        float(lane["month_budget"] - lane["month_to_date_cost"]))


def test_warehouse_resource_api(materialized):
    _, path = materialized
    wh = Warehouse(path=path, idle_policy="none", shared_policy="none")
    build = wh.build_partition("chargeback", DAY)
    assert build.rows == 5 and all(t.passed for t in build.tests)  # four teams + '(unallocated)'
    assert all(t.passed for t in wh.run_tests("reconciliation", DAY))


def test_backfill_range_runs_as_one_step_per_asset(tmp_path):
    path = str(tmp_path / "warehouse.duckdb")
    with duckdb.connect(path) as con:
        load_scenario(con)
    result = dg.materialize(
        finops_assets,
        resources={"warehouse": Warehouse(path=path)},
        tags={"dagster/asset_partition_range_start": "2026-11-27", "dagster/asset_partition_range_end": DAY},
    )
    assert result.success
    signals = {s.name for s in SIGNALS}  # capacity signals may fire (WARN); the data tests all pass
    assert all(e.passed for e in result.get_asset_check_evaluations() if e.check_name not in signals)
    with duckdb.connect(path, read_only=True) as con:
        assert str(con.execute("select sum(total_cost) from chargeback").fetchall()[0][0]) == "1191.648000"


def test_the_chargeback_partition_leads_with_the_per_team_table_and_unit_costs_name_their_day(materialized):
    """What the UI shows first on a chargeback partition is the per-team table; a unit-cost asset
    shows the figures of the day it names, equal to `cost report --day` of that day."""
    from gpu_platform.finops.sqlmodels.report import cost_report

    result, path = materialized
    mats = {m.asset_key.to_user_string(): m.metadata for m in result.get_asset_materialization_events()
            for m in [m.event_specific_data.materialization]}
    assert next(iter(mats["chargeback"])) == "by_team_md"
    assert "| safety |" in mats["chargeback"]["by_team_md"].value
    with duckdb.connect(path, read_only=True) as con:
        report = cost_report(con, DAY)
    units = {u["unit"]: u for u in report["unit_costs"] if u["currency"] == "USD"}
    meta = mats["unit_cost_training_run"]
    assert meta["as_of_day"].value == DAY
    assert meta["cost_USD"].value == pytest.approx(float(units["training_run"]["cost"]))
