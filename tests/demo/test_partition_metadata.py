"""Each daily partition shows its own day, however many days one run prices.

`demo seed --days 3 --price-days 3` prices three days of demo history in ONE Dagster run (the
cost assets' single-run backfill policy). The UI shows a partition's latest materialization's
metadata; before per-partition metadata every partition of that run showed the three days' total.
Each day's figures must equal `gpu-platform cost report --day D --format json` for that day.
"""

from __future__ import annotations

import json
from decimal import Decimal

import dagster as dg
from click.testing import CliRunner

from gpu_platform.cli.app import main
from gpu_platform.demo.costs import demo_days
from tests.demo.test_demo_seed import demo_env  # noqa: F401 (fixture)


def _metadata(instance: dg.DagsterInstance, asset: str, day: str) -> dict:
    (record,) = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[day]), limit=1
    ).records
    return {k: v.value for k, v in record.asset_materialization.metadata.items()}


def _cents(x) -> Decimal:
    return Decimal(str(x)).quantize(Decimal("0.01"))


def test_each_partition_of_a_three_day_run_carries_its_own_days_figures(demo_env):  # noqa: F811
    out = CliRunner().invoke(main, ["demo", "seed", "--days", "3", "--price-days", "3"])
    assert out.exit_code == 0, out.output
    days = [d.isoformat() for d in demo_days(3)]
    totals = {}
    with dg.DagsterInstance.get() as instance:
        runs = instance.get_runs(filters=dg.RunsFilter(tags={"gpu-platform/demo": "seed_costs"}))
        assert len(runs) == 1  # the three days were priced by one run
        for day in days:
            report = json.loads(CliRunner().invoke(main, ["cost", "report", "--day", day, "--format", "json"]).output)
            (usd,) = [t for t in report["totals"] if t["currency"] == "USD"]
            charge = _metadata(instance, "chargeback", day)
            assert _cents(charge["total_cost_USD"]) == _cents(usd["chargeback_total"]), day
            assert charge["rows"] >= len(report["chargeback_by_team"]) > 0, day  # plus (idle) / (unallocated)
            recon = _metadata(instance, "reconciliation", day)
            assert _cents(recon["billed_cost_USD"]) == _cents(usd["billed"]), day
            assert charge["days_in_run"] == 3
            totals[day] = _cents(charge["total_cost_USD"])
            # the raw feeds too: a day's billing rows, not the run's
            focus = _metadata(instance, "raw_focus_billing", day)
            assert focus["days_in_run"] == 3
        # the unit costs: what the asset shows is what `cost report --day` shows for the day it is
        # as of (the newest day priced before today: the last seeded day), per currency
        latest = {}
        for asset in ("unit_cost_training_run", "unit_cost_accepted_label", "unit_cost_replay_hour"):
            (record,) = instance.fetch_materializations(dg.AssetKey(asset), limit=1).records
            latest[asset] = {k: v.value for k, v in record.asset_materialization.metadata.items()}
    units = {u["unit"]: u for u in report["unit_costs"] if u["currency"] == "USD"}
    for unit, asset in (("training_run", "unit_cost_training_run"), ("accepted_label", "unit_cost_accepted_label"),
                        ("replay_hour", "unit_cost_replay_hour")):
        meta = latest[asset]
        assert meta["as_of_day"] == days[-1] == report["day"], unit
        assert _cents(meta["cost_USD"]) == _cents(units[unit]["cost"]), unit
        assert meta["units_USD"] == float(units[unit]["units"]), unit
        assert _cents(meta[f"cost_per_{unit}_USD"]) == _cents(units[unit]["cost_per_unit"]), unit
    assert len(set(totals.values())) > 1, totals  # the days differ, so a shared total would show
