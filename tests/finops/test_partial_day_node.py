"""A node that lived part of a daily-billed day (issue 43 part 1): its hours come from the row's
ConsumedQuantity, not the charge period's length.

The whole-bill AWS day's spot p5.48xlarge (tests/fixtures/finops/whole-bill/, 39.33/h, 8 H100)
billed as one daily row, as a daily-granularity export writes it: ChargePeriod 2026-11-28T00:00Z to
2026-11-29T00:00Z, ConsumedQuantity 12 Hours, BilledCost 471.96 (a spot node reclaimed after 12 h).
Its GPU-hour costs 471.96 / (8 x 12) = 4.91625, the hourly bill's rate, not 471.96 / (8 x 24).
"""

from __future__ import annotations

import csv
import io
from decimal import Decimal as D
from pathlib import Path

import duckdb
from click.testing import CliRunner

from gpu_platform.cli import main

FIX = Path(__file__).parent.parent / "fixtures" / "finops" / "whole-bill"
SPOT = "ip-10-1-0-12.us-west-2.compute.internal"
DAY = "2026-11-28"


def daily_spot_bill(path: Path, hours: int = 12) -> None:
    with (FIX / "focus-aws-2026-11-28.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    (row, *_) = [r for r in rows if r["ResourceName"] == SPOT]
    cost = str(D("39.33") * hours)
    row.update(ChargePeriodStart="2026-11-28T00:00:00Z", ChargePeriodEnd="2026-11-29T00:00:00Z", BilledCost=cost,
               EffectiveCost=cost, ListCost=cost, ContractedCost=cost, ConsumedQuantity=str(hours),
               PricingQuantity=str(hours), ChargeFrequency="Usage-Based")
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=list(row), lineterminator="\n")
    w.writeheader()
    w.writerow(row)
    path.write_text(out.getvalue())


def test_a_daily_row_of_a_twelve_hour_node_prices_its_twelve_hours(tmp_path):
    env = {"GPU_PLATFORM_HOME": str(tmp_path), "GPU_PLATFORM_WAREHOUSE": ""}
    bill = tmp_path / "focus-daily.csv"
    daily_spot_bill(bill)
    runner = CliRunner()
    ingest = runner.invoke(main, ["feeds", "ingest", "--day", DAY, "--focus", str(bill),
                                  "--nodes", str(FIX / "kubectl-get-nodes.json")], env=env)
    assert ingest.exit_code == 0, ingest.output
    runner.invoke(main, ["cost", "build", "--day", DAY, "--no-tests"], env=env)
    with duckdb.connect(str(tmp_path / "warehouse.duckdb"), read_only=True) as con:
        ((hours, price, cost),) = con.execute(
            "select node_hours, price_per_gpu_hour, node_cost from int_node_hour_prices "
            "where day = $d and hostname = $h", {"d": DAY, "h": SPOT}).fetchall()
    assert hours == 12.0 and cost == D("471.96")
    assert D(str(price)).quantize(D("0.000001")) == D("4.916250")


def test_a_daily_row_of_a_node_that_ran_all_day_keeps_the_whole_day(tmp_path):
    env = {"GPU_PLATFORM_HOME": str(tmp_path), "GPU_PLATFORM_WAREHOUSE": ""}
    bill = tmp_path / "focus-daily.csv"
    daily_spot_bill(bill, hours=24)
    runner = CliRunner()
    runner.invoke(main, ["feeds", "ingest", "--day", DAY, "--focus", str(bill),
                         "--nodes", str(FIX / "kubectl-get-nodes.json")], env=env)
    runner.invoke(main, ["cost", "build", "--day", DAY, "--no-tests"], env=env)
    with duckdb.connect(str(tmp_path / "warehouse.duckdb"), read_only=True) as con:
        ((hours,),) = con.execute("select node_hours from int_node_hour_prices where day = $d and hostname = $h",
                                  {"d": DAY, "h": SPOT}).fetchall()
    assert hours == 24.0


def test_a_daily_row_without_hours_of_a_node_created_at_noon_prices_its_observed_twelve_hours(tmp_path):
    """No ConsumedQuantity in hours: the node's hours are its charge period from when the inventory
    says it joined (creationTimestamp 12:00), not the whole day."""
    import json

    env = {"GPU_PLATFORM_HOME": str(tmp_path), "GPU_PLATFORM_WAREHOUSE": ""}
    bill = tmp_path / "focus-daily.csv"
    daily_spot_bill(bill)
    text = bill.read_text().splitlines()
    header = text[0].split(",")
    row = next(csv.reader([text[1]]))
    row[header.index("ConsumedQuantity")] = ""
    row[header.index("ConsumedUnit")] = ""
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows([header, row])
    bill.write_text(out.getvalue())
    doc = json.loads((FIX / "kubectl-get-nodes.json").read_text())
    for item in doc["items"]:
        if item["metadata"]["name"] == SPOT:
            item["metadata"]["creationTimestamp"] = "2026-11-28T12:00:00Z"
    nodes = tmp_path / "nodes.json"
    nodes.write_text(json.dumps(doc))
    runner = CliRunner()
    ingest = runner.invoke(main, ["feeds", "ingest", "--day", DAY, "--focus", str(bill), "--nodes", str(nodes)], env=env)
    assert ingest.exit_code == 0, ingest.output
    runner.invoke(main, ["cost", "build", "--day", DAY, "--no-tests"], env=env)
    with duckdb.connect(str(tmp_path / "warehouse.duckdb"), read_only=True) as con:
        ((hours, cost),) = con.execute("select node_hours, node_cost from int_node_hour_prices where day = $d and hostname = $h",
                                       {"d": DAY, "h": SPOT}).fetchall()
    assert (hours, cost) == (12.0, D("471.96"))
