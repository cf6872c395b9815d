"""The FOCUS column catalogue: every column of FOCUS 1.2 with its feature level, nullability, data
type and the version that introduced it; the columns of a version and its Mandatory ones; the
version a header is (`detect_version`); the ISO 4217 codes; the warehouse's DECIMAL casts; and the
columns of ``raw_focus_billing`` (`FOCUS_TABLE_SCHEMA`).

May import `finops/feeds/schemas.py` only (and polars, iso4217).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import iso4217
import polars as pl

from gpu_platform.finops.feeds.schemas import UTC_TS

FocusVersion = Literal["1.0", "1.2"]
MONEY = pl.Decimal(38, 15)

ISO_4217_CODES: frozenset[str] = frozenset(c.code for c in iso4217.Currency)
"""The active ISO 4217 alphabetic codes (list one of the ISO 4217 maintenance agency, as shipped
by the ``iso4217`` package: 178 codes in its 2026-01-01 edition, funds and X codes included)."""

WAREHOUSE_DECIMALS: dict[str, tuple[int, int]] = {
    "BilledCost": (18, 6),
    "EffectiveCost": (18, 6),
}
"""(precision, scale) of every FOCUS column a model casts to a DECIMAL: the casts in
``dbt_like_sql/staging/stg_focus_billing.sql`` (a test reads them there, so the two cannot drift)."""


@dataclass(frozen=True)
class FocusColumn:
    """One FOCUS column: feature level, nullability, data type, version introduced."""

    name: str
    feature_level: str
    allows_nulls: bool
    data_type: str
    introduced: str


FOCUS_COLUMNS: tuple[FocusColumn, ...] = tuple(
    FocusColumn(*row)
    for row in (
        ("AvailabilityZone", "Recommended", True, "String", "0.5"),
        ("BilledCost", "Mandatory", False, "Decimal", "0.5"),
        ("BillingAccountId", "Mandatory", False, "String", "0.5"),
        ("BillingAccountName", "Mandatory", True, "String", "0.5"),
        ("BillingAccountType", "Conditional", False, "String", "1.2"),
        ("BillingCurrency", "Mandatory", False, "String", "0.5"),
        ("BillingPeriodEnd", "Mandatory", False, "Date/Time", "0.5"),
        ("BillingPeriodStart", "Mandatory", False, "Date/Time", "0.5"),
        ("CapacityReservationId", "Conditional", True, "String", "1.1"),
        ("CapacityReservationStatus", "Conditional", True, "String", "1.1"),
        ("ChargeCategory", "Mandatory", False, "String", "0.5"),
        ("ChargeClass", "Mandatory", True, "String", "1.0"),
        ("ChargeDescription", "Mandatory", True, "String", "1.0-preview"),
        ("ChargeFrequency", "Recommended", False, "String", "1.0-preview"),
        ("ChargePeriodEnd", "Mandatory", False, "Date/Time", "0.5"),
        ("ChargePeriodStart", "Mandatory", False, "Date/Time", "0.5"),
        ("CommitmentDiscountCategory", "Conditional", True, "String", "1.0-preview"),
        ("CommitmentDiscountId", "Conditional", True, "String", "1.0-preview"),
        ("CommitmentDiscountName", "Conditional", True, "String", "1.0-preview"),
        ("CommitmentDiscountQuantity", "Conditional", True, "Decimal", "1.1"),
        ("CommitmentDiscountStatus", "Conditional", True, "String", "1.0"),
        ("CommitmentDiscountType", "Conditional", True, "String", "1.0-preview"),
        ("CommitmentDiscountUnit", "Conditional", True, "String", "1.1"),
        ("ConsumedQuantity", "Conditional", True, "Decimal", "1.0"),
        ("ConsumedUnit", "Conditional", True, "String", "1.0"),
        ("ContractedCost", "Mandatory", False, "Decimal", "1.0"),
        ("ContractedUnitPrice", "Conditional", True, "Decimal", "1.0"),
        ("EffectiveCost", "Mandatory", False, "Decimal", "0.5"),
        ("InvoiceId", "Recommended", True, "String", "1.2"),
        ("InvoiceIssuerName", "Mandatory", False, "String", "0.5"),
        ("ListCost", "Mandatory", False, "Decimal", "1.0-preview"),
        ("ListUnitPrice", "Conditional", True, "Decimal", "1.0-preview"),
        ("PricingCategory", "Conditional", True, "String", "1.0-preview"),
        ("PricingCurrency", "Conditional", True, "String", "1.2"),
        ("PricingCurrencyContractedUnitPrice", "Conditional", True, "Decimal", "1.2"),
        ("PricingCurrencyEffectiveCost", "Conditional", True, "Decimal", "1.2"),
        ("PricingCurrencyListUnitPrice", "Conditional", True, "Decimal", "1.2"),
        ("PricingQuantity", "Mandatory", True, "Decimal", "1.0-preview"),
        ("PricingUnit", "Mandatory", True, "String", "1.0-preview"),
        ("ProviderName", "Mandatory", False, "String", "0.5"),
        ("PublisherName", "Mandatory", False, "String", "0.5"),
        ("RegionId", "Conditional", True, "String", "1.0"),
        ("RegionName", "Conditional", True, "String", "1.0"),
        ("ResourceId", "Conditional", True, "String", "0.5"),
        ("ResourceName", "Conditional", True, "String", "0.5"),
        ("ResourceType", "Conditional", True, "String", "1.0-preview"),
        ("ServiceCategory", "Mandatory", False, "String", "0.5"),
        ("ServiceName", "Mandatory", False, "String", "0.5"),
        ("ServiceSubcategory", "Recommended", False, "String", "1.1"),
        ("SkuId", "Conditional", True, "String", "1.0-preview"),
        ("SkuMeter", "Conditional", True, "String", "1.1"),
        ("SkuPriceDetails", "Conditional", True, "JSON", "1.1"),
        ("SkuPriceId", "Conditional", True, "String", "1.0-preview"),
        ("SubAccountId", "Conditional", True, "String", "0.5"),
        ("SubAccountName", "Conditional", True, "String", "0.5"),
        ("SubAccountType", "Conditional", True, "String", "1.2"),
        ("Tags", "Conditional", True, "JSON", "1.0-preview"),
    )
)

_BY_NAME: dict[str, FocusColumn] = {c.name: c for c in FOCUS_COLUMNS}
_UP_TO_1_0 = ("0.5", "1.0-preview", "1.0")
MONEY_COLUMNS: tuple[str, ...] = (
    "BilledCost",
    "EffectiveCost",
    "ListCost",
    "ContractedCost",
    "ListUnitPrice",
    "ContractedUnitPrice",
)


def columns_for(version: FocusVersion) -> tuple[FocusColumn, ...]:
    """The FOCUS columns defined in ``version`` (1.0: those introduced up to 1.0)."""
    if version == "1.2":
        return FOCUS_COLUMNS
    if version == "1.0":
        return tuple(c for c in FOCUS_COLUMNS if c.introduced in _UP_TO_1_0)
    raise ValueError(f"unsupported FOCUS version {version!r}; expected '1.0' or '1.2'")


def mandatory_columns(version: FocusVersion) -> list[str]:
    """Names of the Mandatory columns of ``version``, sorted."""
    return sorted(c.name for c in columns_for(version) if c.feature_level == "Mandatory")


def _pl_type(column: FocusColumn) -> pl.DataType:
    if column.data_type == "Decimal":
        return MONEY
    if column.data_type == "Date/Time":
        return UTC_TS
    return pl.String()


FOCUS_TABLE_SCHEMA: dict[str, pl.DataType] = {
    **{c.name: _pl_type(c) for c in FOCUS_COLUMNS},
    "extra_columns": pl.String(),
    "source": pl.String(),
    "source_row": pl.Int32(),
    "focus_version": pl.String(),
    "original_currency": pl.String(),
    "conversion_rate": MONEY,
}
"""Columns of ``raw_focus_billing``: every FOCUS 1.2 column (NULL when the file lacks it), then ours."""


def detect_version(header: list[str]) -> FocusVersion:
    """``"1.2"`` when any column introduced after 1.0 is present, else ``"1.0"``."""
    later = {c.name for c in FOCUS_COLUMNS if c.introduced not in _UP_TO_1_0}
    return "1.2" if later & set(header) else "1.0"
