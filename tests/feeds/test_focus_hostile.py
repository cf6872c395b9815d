"""FOCUS values checked at the boundary (issue 24): currencies against ISO 4217, amounts against
the warehouse's DECIMAL casts, and files read batch by batch with the same result as one batch."""

from __future__ import annotations

import re
import shutil
from datetime import date
from decimal import Decimal

import duckdb
import polars as pl
import pytest

from gpu_platform.finops.feeds.focus import (
    ISO_4217_CODES,
    WAREHOUSE_DECIMALS,
    iter_focus,
    load_focus,
)
from gpu_platform.finops.feeds.ingest import load_focus_day
from gpu_platform.finops.feeds.load import load_batch
from gpu_platform.finops.sqlmodels import Project, default_project_path
from tests.feeds.test_focus import _csv, _row
from tests.sqlmodels.finops_scenario import DAY, load_scenario

XSS = '"><IMG SRC=X ONERROR=alert(1)>'
SAMPLE = "focus-1.0-sample.csv"


def _invariant(batch) -> None:
    assert batch.rows_in == batch.accepted + batch.quarantined
    numbers = batch.rows["source_row"].to_list() + batch.quarantine["source_row"].to_list()
    assert sorted(numbers) == list(range(1, batch.rows_in + 1))


# -- class 2: BillingCurrency is an ISO 4217 code ---------------------------------------------


def test_a_hostile_currency_is_quarantined_naming_row_and_value_and_the_others_load():
    rows = [_row(), _row(BillingCurrency=XSS), _row(), _row(BillingCurrency="USD/../x"),
            _row(BillingCurrency="usd"), _row(BillingCurrency="ZZZ"), _row(BillingCurrency="EUR\nX")]
    batch = load_focus(_csv(rows), source="hostile.csv")
    _invariant(batch)
    assert batch.rows["source_row"].to_list() == [1, 3]
    assert set(batch.rows["BillingCurrency"].to_list()) == {"USD"}
    reasons = dict(zip(batch.quarantine["source_row"].to_list(), batch.quarantine["reason"].to_list(), strict=True))
    assert reasons[2] == (
        "row 2: column BillingCurrency: '\"><IMG SRC=X ONERROR=alert(1)>' is not an ISO 4217 currency code"
    )
    assert reasons[4] == "row 4: column BillingCurrency: 'USD/../x' is not an ISO 4217 currency code"
    assert "'usd' is not an ISO 4217" in reasons[5] and "'ZZZ' is not an ISO 4217" in reasons[6]
    assert reasons[7] == "row 7: column BillingCurrency: 'EUR\\nX' is not an ISO 4217 currency code"  # one line
    assert all("\n" not in r for r in reasons.values())


def test_the_code_list_is_iso_4217_and_a_load_currency_must_be_one():
    assert {"USD", "EUR", "JPY", "CHF", "XAU"} <= ISO_4217_CODES and len(ISO_4217_CODES) >= 150
    assert all(re.fullmatch("[A-Z]{3}", c) for c in ISO_4217_CODES)
    assert not {"usd", "ZZZ", "HRK", ""} & ISO_4217_CODES  # HRK: withdrawn 2023
    with pytest.raises(ValueError, match="ISO 4217"):
        load_focus(_csv([_row()]), currency="US$")
    with pytest.raises(ValueError, match="ISO 4217"):
        load_focus(_csv([_row()]), conversions={("EU R", "USD"): Decimal("1.1")})


def test_hostile_currency_through_the_ingest(tmp_path):
    feeds = tmp_path / "feeds"
    (feeds / "focus").mkdir(parents=True)
    (feeds / "focus" / "bill.csv").write_bytes(_csv([_row(), _row(BillingCurrency=XSS), _row(ChargeDescription="second")]))
    con = duckdb.connect()
    report = load_focus_day(con, feeds, date(2024, 9, 18))
    assert (report.rows_in, report.accepted, report.quarantined) == (3, 2, 1)
    (reason,) = con.execute("select reason from raw_focus_quarantine").fetchone()
    assert reason.startswith("row 2: column BillingCurrency: '\"><IMG")
    assert con.execute("select distinct BillingCurrency from raw_focus_billing").fetchall() == [("USD",)]


# -- class 3: amounts fit the warehouse's casts -----------------------------------------------


def test_warehouse_decimals_are_the_staging_casts():
    """WAREHOUSE_DECIMALS lists every FOCUS column stg_focus_billing casts to a DECIMAL, with its type."""
    sql = (default_project_path() / "staging" / "stg_focus_billing.sql").read_text()
    casts = {
        (m.group(1), (int(m.group(2)), int(m.group(3))))
        for m in re.finditer(r"cast\((\w+) as decimal\((\d+), (\d+)\)\)", sql, re.I)
        if m.group(1)[0].isupper()  # FOCUS names are PascalCase; the model's own are snake_case
    }
    assert casts == set(WAREHOUSE_DECIMALS.items())


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("1e20", False),
        ("-1e20", False),
        ("1000000000000", False),
        ("999999999999.9999995", False),  # rounds to 10^12 at 6 places
        ("999999999999.99999", False),  # fits as a decimal, but the prorating's double is 10^12
        ("999999999999.9999", True),
        ("-999999999999.9999", True),
        ("0.0000008", True),
    ],
)
def test_an_amount_the_staging_cast_cannot_hold_is_quarantined_naming_the_field(value, ok):
    batch = load_focus(_csv([_row(), _row(BilledCost=value)]), source="big.csv")
    _invariant(batch)
    if ok:
        assert batch.accepted == 2
        return
    (reason,) = batch.quarantine["reason"].to_list()
    assert reason == (
        f"row 2: column BilledCost: {value} is out of range: the warehouse keeps DECIMAL(18, 6), |value| below 10^12"
    )


def test_amounts_beyond_the_raw_table_and_after_conversion_are_quarantined():
    batch = load_focus(_csv([_row(ListCost="1e30"), _row(EffectiveCost="5e11", BillingCurrency="EUR",
                                                         ChargePeriodStart="2024-09-18T05:00:00Z",
                                                         ChargePeriodEnd="2024-09-18T06:00:00Z")]),
                       currency="USD", conversions={("EUR", "USD"): "3"})
    _invariant(batch)
    reasons = batch.quarantine["reason"].to_list()
    assert reasons[0].startswith("row 1: column ListCost: '1e30' is out of range: the warehouse keeps DECIMAL(38, 15)")
    assert reasons[1].startswith("row 2: column EffectiveCost: 1500000000000.") and "(converted)" in reasons[1]


def test_a_huge_billed_cost_no_longer_stops_the_day(tmp_path):
    """One FOCUS row with BilledCost 1e20 is quarantined at load; the day's cost models build."""
    con = duckdb.connect(str(tmp_path / "wh.duckdb"))
    load_scenario(con)
    huge = _row(BilledCost="1e20", ChargePeriodStart=f"{DAY}T03:00:00Z", ChargePeriodEnd=f"{DAY}T04:00:00Z")
    batch = load_focus(_csv([huge]), source="focus/huge.csv")
    assert batch.accepted == 0 and "column BilledCost: 1e20 is out of range" in batch.quarantine["reason"][0]
    load_batch(con, "focus", batch, source="focus/huge.csv", day=date.fromisoformat(DAY))
    project = Project.load(default_project_path())
    assert project.build(con, day=DAY)
    billed = con.execute("select sum(billed_cost) from stg_focus_billing where day = ?", [DAY]).fetchone()[0]
    assert billed == Decimal("837.600000")  # the scenario's bill, the huge row not in it


# -- class 9: batch by batch, the same rows ---------------------------------------------------


def _same(a, b) -> None:
    assert a.rows_in == b.rows_in
    assert a.rows.equals(b.rows)
    assert a.quarantine.equals(b.quarantine)


def test_small_batches_give_the_rows_of_one_batch(fixtures):
    whole = load_focus(fixtures / SAMPLE, source="s")
    batches = list(iter_focus(fixtures / SAMPLE, source="s", batch_bytes=16 << 10))
    assert len(batches) > 20 and max(b.rows_in for b in batches) < 100
    for b in batches:
        assert b.rows_in == b.accepted + b.quarantined
    _same(load_focus(fixtures / SAMPLE, source="s", batch_bytes=16 << 10), whole)
    assert (whole.accepted, whole.quarantined) == (993, 7)


def test_small_batches_with_a_malformed_row_quoted_newlines_and_parquet(tmp_path, fixtures):
    data = (fixtures / SAMPLE).read_bytes()
    broken = data + b"too,few\n" + data.split(b"\n", 1)[1][:3000].rsplit(b"\n", 1)[0] + b"\n"
    _same(load_focus(broken, source="s", batch_bytes=8 << 10), load_focus(broken, source="s"))
    rows = [_row(ChargeDescription="two\nlines\n\"quoted\""), _row(BilledCost="bad"), _row()] * 50
    _same(load_focus(_csv(rows), batch_bytes=2048), load_focus(_csv(rows)))
    path = tmp_path / "sample.parquet"
    pl.read_csv(fixtures / SAMPLE, infer_schema=False).write_parquet(path, row_group_size=100)
    _same(load_focus(path, source="s", batch_rows=64), load_focus(path, source="s"))


def test_one_currency_per_period_holds_across_batches():
    """A period's dominant currency is counted over the whole file, not one batch."""
    period = {"ChargePeriodStart": "2024-09-18T07:00:00Z", "ChargePeriodEnd": "2024-09-18T08:00:00Z"}
    rows = [_row(BillingCurrency="EUR", ChargeDescription="eur", **period)] + [
        _row(ChargeDescription=f"d-{i}", **period) for i in range(60)
    ]
    small = load_focus(_csv(rows), batch_bytes=2048)
    _same(small, load_focus(_csv(rows)))
    assert small.quarantine["source_row"].to_list() == [1]
    assert "differs from the currency of its charge period USD" in small.quarantine["reason"][0]


def test_the_ingest_in_small_batches_loads_what_one_batch_does(tmp_path, fixtures):
    feeds = tmp_path / "feeds"
    (feeds / "focus").mkdir(parents=True)
    shutil.copy(fixtures / SAMPLE, feeds / "focus" / "a.csv")
    shutil.copy(fixtures / SAMPLE, feeds / "focus" / "b-redelivered.csv")
    day = load_focus(fixtures / SAMPLE).rows["ChargePeriodStart"].min().date()
    tables = {}
    for batch_bytes in (4 << 20, 16 << 10):
        con = duckdb.connect()
        report = load_focus_day(con, feeds, day, batch_bytes=batch_bytes)
        assert report.rows_in == report.accepted + report.quarantined
        tables[batch_bytes] = [
            con.execute(f"select * exclude (day) from {t} order by source, source_row").fetchall()
            for t in ("raw_focus_billing", "raw_focus_quarantine")
        ]
        dupes = con.execute(
            "select count(*) from raw_focus_quarantine where source = 'focus/b-redelivered.csv' "
            "and reason like '%duplicate of focus/a.csv row%'").fetchone()[0]
        assert dupes == con.execute("select count(*) from raw_focus_billing where source = 'focus/a.csv'").fetchone()[0]
        assert not {r[0] for r in con.execute("select table_name from information_schema.tables").fetchall()
                    if r[0].startswith("_staging")}
    assert tables[4 << 20] == tables[16 << 10]
