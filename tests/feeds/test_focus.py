from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import polars as pl
import pytest

from gpu_platform.finops.feeds.focus import (
    FOCUS_COLUMNS,
    FOCUS_TABLE_SCHEMA,
    detect_version,
    load_focus,
    mandatory_columns,
)
from gpu_platform.finops.feeds.schemas import FOCUS_QUARANTINE_SCHEMA, FeedBatch, FeedSchemaError

ORACLE_NULL_CONTRACTED = [926, 927, 942, 945, 948, 949, 951]


def _assert_invariant(batch: FeedBatch, rows_in: int | None = None) -> None:
    assert batch.rows_in == batch.accepted + batch.quarantined
    if rows_in is not None:
        assert batch.rows_in == rows_in
    numbers = batch.rows["source_row"].to_list() + batch.quarantine["source_row"].to_list()
    assert sorted(numbers) == list(range(1, batch.rows_in + 1))
    assert dict(batch.rows.schema) == FOCUS_TABLE_SCHEMA
    assert dict(batch.quarantine.schema) == FOCUS_QUARANTINE_SCHEMA


def test_mandatory_columns_match_the_spec_table(fixtures: Path) -> None:
    text = (fixtures / "focus-1.2-columns.csv").read_bytes().decode().replace("\r", "")
    spec = list(csv.DictReader(io.StringIO(text)))
    assert len(FOCUS_COLUMNS) == len(spec) == 57
    assert mandatory_columns("1.2") == sorted(r["ColumnId"] for r in spec if r["FeatureLevel"] == "Mandatory")
    assert {(c.name, c.allows_nulls, c.data_type) for c in FOCUS_COLUMNS} == {
        (r["ColumnId"], r["AllowsNulls"] == "True", r["DataType"]) for r in spec
    }
    assert mandatory_columns("1.0") == [
        "BilledCost",
        "BillingAccountId",
        "BillingAccountName",
        "BillingCurrency",
        "BillingPeriodEnd",
        "BillingPeriodStart",
        "ChargeCategory",
        "ChargeClass",
        "ChargeDescription",
        "ChargePeriodEnd",
        "ChargePeriodStart",
        "ContractedCost",
        "EffectiveCost",
        "InvoiceIssuerName",
        "ListCost",
        "PricingQuantity",
        "PricingUnit",
        "ProviderName",
        "PublisherName",
        "ServiceCategory",
        "ServiceName",
    ]


def test_official_1_0_sample(fixtures: Path) -> None:
    batch = load_focus(fixtures / "focus-1.0-sample.csv", source="sample")
    _assert_invariant(batch, rows_in=1000)
    assert (batch.accepted, batch.quarantined) == (993, 7)
    assert batch.quarantine["source_row"].to_list() == ORACLE_NULL_CONTRACTED
    assert set(batch.quarantine["reason"].str.replace(r"^row \d+: ", "").to_list()) == {
        "column ContractedCost: NULL in a non-nullable column"
    }
    assert batch.quarantine["raw"][0].startswith("fjrQ:US-SANJOSE-1-AD-1,0.01200000000,20209880,")
    rows = batch.rows
    assert rows["focus_version"].unique().to_list() == ["1.0"]
    assert rows.schema["BilledCost"] == pl.Decimal(38, 15)
    first = rows.row(0, named=True)
    assert first["AvailabilityZone"] is None and first["ChargeClass"] is None
    assert first["BilledCost"] == Decimal("0.0000008")
    assert first["ChargePeriodStart"] == datetime(2024, 9, 18, 22, tzinfo=UTC)
    assert json.loads(first["extra_columns"]) == {"Id": "11472"}
    assert first["original_currency"] == "USD" and first["conversion_rate"] == Decimal(1)
    tagged = rows.filter(pl.col("Tags").is_not_null())["Tags"][0]
    assert json.loads(tagged) == {
        "application": "BrightLensMatrix",
        "environment": "dev",
        "business_unit": "ViennaAI",
    }


def test_sample_gpu_line_and_exact_decimal_sums(fixtures: Path) -> None:
    rows = load_focus(fixtures / "focus-1.0-sample.csv").rows
    gpu = rows.filter(pl.col("ChargeDescription").str.contains("g5.4xlarge"))
    assert gpu.height >= 1
    assert set(gpu["ListUnitPrice"].to_list()) == {Decimal("1.624")}
    total = rows["BilledCost"].sum()
    assert isinstance(total, Decimal)
    assert total == sum(rows["BilledCost"].to_list(), Decimal(0))


def test_credits_and_adjustments_are_kept(fixtures: Path) -> None:
    batch = load_focus(fixtures / "focus-1.0-sample.csv", allow_nulls_in={"ContractedCost"})
    _assert_invariant(batch, rows_in=1000)
    assert batch.quarantined == 0
    kinds = (
        batch.rows.filter(pl.col("ChargeCategory") != "Usage").select("ChargeCategory", "BilledCost").rows()
    )
    assert sorted(kinds) == [
        ("Adjustment", Decimal("0.08")),
        ("Adjustment", Decimal("0.192")),
        ("Credit", Decimal("-2.6137")),
    ]


def test_missing_mandatory_columns_are_all_named(fixtures: Path) -> None:
    df = pl.read_csv(fixtures / "focus-1.0-sample.csv", infer_schema=False).drop("BilledCost", "ServiceName")
    with pytest.raises(FeedSchemaError) as info:
        load_focus(df.write_csv().encode(), source="broken.csv")
    assert info.value.missing == ["BilledCost", "ServiceName"]
    assert "broken.csv" in str(info.value) and "BilledCost, ServiceName" in str(info.value)


BASE_ROW = {
    "BilledCost": "10.50",
    "BillingAccountId": "acct-1",
    "BillingAccountName": "Perception",
    "BillingCurrency": "USD",
    "BillingPeriodEnd": "2024-10-01T00:00:00Z",
    "BillingPeriodStart": "2024-09-01T00:00:00Z",
    "ChargeCategory": "Usage",
    "ChargeClass": "",
    "ChargeDescription": "p5.48xlarge on demand",
    "ChargePeriodEnd": "2024-09-18T01:00:00Z",
    "ChargePeriodStart": "2024-09-18T00:00:00Z",
    "ContractedCost": "10.50",
    "EffectiveCost": "10.50",
    "InvoiceIssuerName": "AWS",
    "ListCost": "12.00",
    "PricingQuantity": "1",
    "PricingUnit": "Hours",
    "ProviderName": "AWS",
    "PublisherName": "AWS",
    "ServiceCategory": "Compute",
    "ServiceName": "Amazon EC2",
    "ServiceSubcategory": "Virtual Machines",
    "ListUnitPrice": "12.00",
    "Tags": '{"team": "perception", "lane": "training"}',
    "x_GpuCount": "8",
}


def _csv(rows: list[dict[str, str]]) -> bytes:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(BASE_ROW))
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue().encode()


def _row(**changes: str) -> dict[str, str]:
    return {**BASE_ROW, **changes}


def test_focus_1_2_file_is_detected_and_typed() -> None:
    batch = load_focus(_csv([_row(), _row(ChargePeriodStart="2024-09-18T02:00:00+02:00")]), source="v12")
    _assert_invariant(batch, rows_in=2)
    assert batch.quarantined == 0
    row = batch.rows.row(0, named=True)
    assert row["focus_version"] == "1.2" and row["ServiceSubcategory"] == "Virtual Machines"
    assert row["CapacityReservationId"] is None
    assert json.loads(row["extra_columns"]) == {"x_GpuCount": "8"}
    assert batch.rows["ChargePeriodStart"][1] == datetime(2024, 9, 18, 0, tzinfo=UTC)
    assert detect_version(list(BASE_ROW)) == "1.2" and detect_version(["BilledCost"]) == "1.0"


def test_row_level_errors_name_row_and_column() -> None:
    rows = [
        _row(),
        _row(BilledCost="12,5"),
        _row(ChargePeriodStart="yesterday"),
        _row(BillingCurrency="NULL"),
        _row(Tags="not json"),
        _row(EffectiveCost="abc", ChargePeriodEnd="2024-13-01"),
        _row(ChargeCategory=""),
    ]
    data = _csv(rows) + b"only,three,fields\n"
    batch = load_focus(data, source="bad.csv")
    _assert_invariant(batch, rows_in=8)
    assert batch.rows["source_row"].to_list() == [1]
    assert batch.quarantine.select("source_row", "reason").rows() == [
        (2, "row 2: column BilledCost: invalid decimal '12,5'"),
        (3, "row 3: column ChargePeriodStart: invalid timestamp 'yesterday'"),
        (4, "row 4: column BillingCurrency: NULL in a non-nullable column"),
        (5, "row 5: column Tags: not a JSON object: 'not json'"),
        (
            6,
            "row 6: column ChargePeriodEnd: invalid timestamp '2024-13-01'; "
            "column EffectiveCost: invalid decimal 'abc'",
        ),
        (7, "row 7: column ChargeCategory: NULL in a non-nullable column"),
        (8, f"row 8: expected {len(BASE_ROW)} fields, found 3"),
    ]
    assert batch.quarantine["raw"][-1] == "only,three,fields"


def test_null_literal_is_null_in_nullable_columns() -> None:
    batch = load_focus(_csv([_row(ChargeClass="NULL", BillingAccountName="NULL", Tags="NULL")]))
    assert batch.quarantined == 0
    assert batch.rows.select("ChargeClass", "BillingAccountName", "Tags").row(0) == (None, None, None)


def test_foreign_currency_without_conversion_is_quarantined() -> None:
    data = _csv([_row(), _row(), _row(BillingCurrency="EUR", BilledCost="10")])
    batch = load_focus(data, source="mixed")
    _assert_invariant(batch, rows_in=3)
    assert batch.quarantine["reason"].to_list() == [
        "row 3: BillingCurrency EUR differs from the currency of its charge period USD "
        "and no conversion (EUR, USD) was given"
    ]


def test_foreign_currency_with_conversion_is_converted_exactly() -> None:
    data = _csv(
        [_row(), _row(BillingCurrency="EUR", BilledCost="10", ListCost="-3.3333", ListUnitPrice="0.1")]
    )
    batch = load_focus(data, conversions={("EUR", "USD"): Decimal("1.1")})
    _assert_invariant(batch, rows_in=2)
    assert batch.quarantined == 0
    converted = batch.rows.row(1, named=True)
    assert converted["BillingCurrency"] == "USD" and converted["original_currency"] == "EUR"
    assert converted["conversion_rate"] == Decimal("1.1")
    assert converted["BilledCost"] == Decimal("11.0")
    assert converted["ListCost"] == Decimal("-3.66663")
    assert converted["ListUnitPrice"] == Decimal("0.11")
    assert converted["PricingQuantity"] == Decimal(1)
    assert batch.rows["BilledCost"].sum() == Decimal("21.5")


def test_explicit_load_currency() -> None:
    data = _csv([_row(), _row(BillingCurrency="EUR")])
    batch = load_focus(data, currency="EUR")
    assert batch.rows["BillingCurrency"].to_list() == ["EUR"]
    assert batch.quarantine["reason"].to_list() == [
        "row 1: BillingCurrency USD differs from the load's currency EUR and no conversion (USD, EUR) was given"
    ]


def test_one_currency_per_charge_period_not_per_file() -> None:
    other_period = {"ChargePeriodStart": "2024-09-19T00:00:00Z", "ChargePeriodEnd": "2024-09-19T01:00:00Z"}
    batch = load_focus(_csv([_row(), _row(BillingCurrency="EUR", **other_period)]))
    assert batch.quarantined == 0
    assert batch.rows["BillingCurrency"].to_list() == ["USD", "EUR"]


def test_float_rates_are_refused() -> None:
    with pytest.raises(TypeError, match="float"):
        load_focus(_csv([_row()]), conversions={("EUR", "USD"): 1.1})  # type: ignore[dict-item]


def test_parquet_input_matches_csv(tmp_path: Path, fixtures: Path) -> None:
    path = tmp_path / "sample.parquet"
    pl.read_csv(fixtures / "focus-1.0-sample.csv", infer_schema=False).write_parquet(path)
    from_parquet = load_focus(path, source="s")
    from_csv = load_focus(fixtures / "focus-1.0-sample.csv", source="s")
    assert (from_parquet.accepted, from_parquet.quarantined) == (993, 7)
    assert from_parquet.rows.equals(from_csv.rows)


def test_typed_parquet_timestamps_and_decimals(tmp_path: Path) -> None:
    frame = pl.DataFrame([_row()]).with_columns(
        pl.col("BilledCost").cast(pl.Float64),
        pl.col("ChargePeriodStart").str.to_datetime(time_zone="UTC"),
    )
    path = tmp_path / "typed.parquet"
    frame.write_parquet(path)
    batch = load_focus(path)
    assert batch.quarantined == 0
    assert batch.rows["BilledCost"][0] == Decimal("10.5")
    assert batch.rows["ChargePeriodStart"][0] == datetime(2024, 9, 18, tzinfo=UTC)


def test_arrow_reader_and_row_exact_reader_agree(fixtures: Path) -> None:
    """A malformed row sends the file through the row-exact csv reader; valid rows must match."""
    data = (fixtures / "focus-1.0-sample.csv").read_bytes()
    fast = load_focus(data, source="s")
    exact = load_focus(data + b"too,few\n", source="s")
    assert exact.rows.equals(fast.rows)
    assert exact.quarantine.head(7).equals(fast.quarantine)
    assert exact.quarantine["reason"][-1] == "row 1001: expected 44 fields, found 2"


def test_quoted_newlines_keep_row_numbers() -> None:
    rows = [_row(ChargeDescription="two\nlines"), _row(BilledCost="bad"), _row()]
    for data in (_csv(rows), _csv(rows) + b"x\n"):
        batch = load_focus(data)
        assert batch.rows["ChargeDescription"][0] == "two\nlines"
        assert batch.quarantine["source_row"][0] == 2
        assert batch.rows["source_row"].to_list() == [1, 3]
