"""What the UI shows of a day is what `cost report --day` says (issue 43 part 7).

The whole-bill day (tests/finops/test_whole_bill.py: 2026-11-28, three admitted requests, a team's
bypass pods, tax, a credit, an unused commitment; 2026-11-27 holds only a correction): the
`chargeback` partition's metadata leads with the per-team table, and a unit-cost asset shows the
figures of the day it names (`as_of_day`), equal to `cost report --day` of that day, never a later
day's pricing.
"""

from __future__ import annotations

from datetime import date
from decimal import Decimal as D

import duckdb

from gpu_platform.finops.sqlmodels.report import chargeback_by_team, model_metrics, unit_cost_day
from tests.finops.test_whole_bill import DAY, PREV, built  # noqa: F401  (a fixture)


def test_the_chargeback_partition_leads_with_the_per_team_table(built):  # noqa: F811
    with duckdb.connect(str(built["wh"]), read_only=True) as con:
        meta = model_metrics(con, "chargeback", (DAY, DAY))
        teams = chargeback_by_team(con, DAY)
    assert next(iter(meta)) == "by_team_md"
    table = meta["by_team_md"].splitlines()
    assert table[0] == ("| team | currency | allocated | bypass | by_use | idle | shared | tax | credit | other "
                        "| total |")
    # the report's rows, from the same query
    report = {r["team"]: r for r in built["reports"][DAY]["chargeback_by_team"]}
    assert {r["team"] for r in teams} == set(report)
    (perception,) = [line for line in table if line.startswith("| perception |")]
    cells = [c.strip() for c in perception.strip("|").split("|")]
    assert cells[3] == "1191.90"  # bypass, its own column
    assert D(cells[-1]) == D(report["perception"]["total_cost"]).quantize(D("0.01"))
    # the columns add up to the total (to the cent of display)
    assert abs(sum(D(c) for c in cells[2:-1]) - D(cells[-1])) <= D("0.05")
    for r in teams:
        parts = (r["allocated_cost"] + r["cpu_cost"] + r["storage_cost"] + r["idle_cost"] + r["shared_cost"]
                 + r["tax_cost"] + r["credit_cost"] + r["unused_commitment_cost"] + r["unreconciled_cost"])
        assert parts == r["total_cost"], r["team"]
    assert any(line.startswith("| (unreconciled) |") for line in table)


def test_unit_costs_are_the_days_figures_in_the_report_and_the_asset(built):  # noqa: F811
    reports = built["reports"]
    # nothing was complete by the end of the 27th; the 28th has every unit
    assert reports[PREV]["unit_costs"] == []
    by_unit = {u["unit"]: u for u in reports[DAY]["unit_costs"]}
    assert {"training_run", "accepted_label", "replay_hour"} <= set(by_unit)
    assert all(u["as_of_day"] == DAY for u in by_unit.values())
    with duckdb.connect(str(built["wh"]), read_only=True) as con:
        assert unit_cost_day(con, today=date(2026, 11, 29)) == date(2026, 11, 28)
        assert unit_cost_day(con, today=date(2026, 11, 28)) == date(2026, 11, 28)  # nothing before: the newest
        (cost,) = con.execute("select sum(cost_per_training_run) from unit_cost_training_run").fetchone()
        for unit in ("training_run", "accepted_label", "replay_hour"):
            meta = model_metrics(con, f"unit_cost_{unit}", None)
            u = by_unit[unit]
            assert meta["as_of_day"] == DAY
            assert D(str(meta["cost_USD"])).quantize(D("0.01")) == D(u["cost"]).quantize(D("0.01")), unit
            assert meta["units_USD"] == float(u["units"] or 0), unit
            if u["cost_per_unit"] is not None:
                assert round(meta[f"cost_per_{unit}_USD"], 6) == float(u["cost_per_unit"]), unit
            assert not any(k.startswith("lifetime_") for k in meta), unit
    assert D(by_unit["training_run"]["cost"]) == cost.quantize(D("0.000001"))


def test_platform_cost_per_tenant_shows_the_same_per_team_split(built):  # noqa: F811
    with duckdb.connect(str(built["wh"]), read_only=True) as con:
        tenant = model_metrics(con, "platform_cost_per_tenant", (DAY, DAY))
        charge = model_metrics(con, "chargeback", (DAY, DAY))
    assert tenant["by_team_md"] == charge["by_team_md"]
    assert "| idle | shared | tax | credit |" in tenant["by_team_md"]
