"""`cost export` beside on-prem nodes priced from the price book (tests/finops/test_on_prem.py:
the GCP day plus three on-prem GPU nodes, one warehouse): teams are charged the on-prem GPU time,
which no invoice carries, so the `price_book` line takes it back out and the rows still add up to
the cloud invoice to the cent."""

from __future__ import annotations

import csv
from decimal import Decimal as D

from click.testing import CliRunner

from gpu_platform.cli import main
from tests.finops.test_on_prem import DAY, GCP_INVOICE, built  # noqa: F401  (a fixture)


def test_price_book_money_is_charged_to_teams_and_reconciled_out_of_the_invoice(built, tmp_path):  # noqa: F811
    out = tmp_path / "onprem.csv"
    res = CliRunner().invoke(main, ["cost", "export", "--day", DAY, "--out", str(out)],
                             env={"GPU_PLATFORM_HOME": str(built["wh"].parent), "GPU_PLATFORM_WAREHOUSE": ""})
    assert res.exit_code == 0, res.output
    rows = list(csv.DictReader(out.open()))
    assert sum(D(r["BilledCost"]) for r in rows) == GCP_INVOICE
    assert sum(D(r["EffectiveCost"]) for r in rows) == GCP_INVOICE
    (t,) = built["report"]["totals"]
    (pb,) = [r for r in rows if r["x_AllocationLine"] == "price_book"]
    assert D(pb["EffectiveCost"]) == D(pb["BilledCost"]) == -D(t["price_book"]) != 0
    charged = sum(D(r["EffectiveCost"]) for r in rows if r["ChargeCategory"] == "Usage")
    assert charged == D(t["chargeback_total"])
    plan = [r for r in rows if r["x_RequestId"] == "req-plan-1"]  # on the on-prem DGX all morning
    assert plan and D(plan[0]["x_AllocatedCost"]) > 0 and '"request": "req-plan-1"' in plan[0]["Tags"]
