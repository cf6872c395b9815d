"""Unit-cost headlines people trust (issue 43 part 5): `cost report`'s figure per unit divides the
cost of the rows that have units by their units. The ODD-cell case as reported: ten (packet, cell)
rows of one release, one of them approved (108.92 on its one approval) and nine paid for but not
approved yet (734.63 between them): the headline is 108.92 per approval, never 843.55. The same
rule holds for every mart with a units column (accepted labels, replay hours); a unit-less row's
cost is shown as cost_without_units. Units complete after the day are not in the day's figure.
"""

from __future__ import annotations

from datetime import date
from decimal import Decimal as D

import duckdb

from gpu_platform.finops.sqlmodels.report import unit_costs
from tests.sqlmodels.finops_scenario import DAY, load_scenario

NOV = date(2026, 11, 1)


def _odd_cells(con) -> None:
    con.execute("""create table unit_cost_odd_cell_approval (release_packet_id varchar, odd_cell varchar,
                   currency varchar, first_day date, last_day date, requests integer, approvals integer,
                   cost decimal(18, 6), cost_per_approval decimal(18, 6), reason varchar)""")
    rows = [("P1", "muc-urban-day", "USD", NOV, date(2026, 11, 20), 3, 1, D("108.92"), D("108.92"), None)]
    rest = [D("81.63")] * 8 + [D("734.63") - D("81.63") * 8]
    rows += [("P1", f"cell-{i}", "USD", NOV, date(2026, 11, 20), 2, 0, c, None, "no evidence pack for this cell yet")
             for i, c in enumerate(rest)]
    # a cell approved later in the month: not complete by the 20th
    rows.append(("P2", "sf-night", "USD", NOV, date(2026, 11, 25), 2, 2, D("300"), D("150"), None))
    con.executemany("insert into unit_cost_odd_cell_approval values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)


def test_the_odd_cell_headline_is_the_approved_cells_cost_over_their_approvals():
    with duckdb.connect() as con:
        _odd_cells(con)
        (u,) = unit_costs(con, date(2026, 11, 20))
        assert (u["unit"], u["units"], u["cost"], u["cost_per_unit"]) == ("odd_cell_approval", 1, D("108.92"),
                                                                         D("108.920000"))
        assert u["cost_without_units"] == D("734.63")
        (later,) = unit_costs(con, date(2026, 11, 30))
        assert (later["units"], later["cost"], later["cost_per_unit"]) == (3, D("408.92"), D("136.306667"))


def test_the_scenario_mart_keeps_its_days_and_its_cells_own_figure(tmp_path):
    from gpu_platform.finops.sqlmodels import Project, default_project_path

    with duckdb.connect(str(tmp_path / "w.duckdb")) as con:
        load_scenario(con)
        Project.load(default_project_path()).build(con, day=DAY, select=("+unit_cost_odd_cell_approval",))
        ((first, last, approvals, cost, per),) = con.execute("""
            select first_day, last_day, approvals, cost, cost_per_approval from unit_cost_odd_cell_approval""").fetchall()
        assert first == last == date.fromisoformat(DAY) and approvals == 1 and per == cost
        (u,) = [u for u in unit_costs(con, DAY) if u["unit"] == "odd_cell_approval"]
        assert u["cost_per_unit"] == per and u["cost_without_units"] == 0
        assert [u for u in unit_costs(con, "2026-11-27") if u["unit"] == "odd_cell_approval"] == []
