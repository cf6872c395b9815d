"""Currency of FOCUS rows: each charge period's dominant currency (over a batch or, batch by batch,
a whole file), conversion of foreign rows by the given rates (or their quarantine), and the bound
check of the amounts against the warehouse's DECIMAL casts (`WAREHOUSE_DECIMALS`).

May import `finops/feeds/focus_columns.py`, `schemas.py`.
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal

import polars as pl

from gpu_platform.finops.feeds.focus_columns import MONEY, MONEY_COLUMNS, WAREHOUSE_DECIMALS
from gpu_platform.finops.feeds.schemas import UTC_TS

_PERIOD = ["ChargePeriodStart", "ChargePeriodEnd"]


def _period_currencies(frame: pl.DataFrame) -> pl.DataFrame:
    """Per charge period and currency of the rows without problems: rows and first row."""
    return (
        frame.filter(pl.col("_reason").is_null())
        .group_by(*_PERIOD, "BillingCurrency")
        .agg(pl.len().alias("len"), pl.col("source_row").min().alias("first_row"))
    )


def _pick_dominant(counts: pl.DataFrame) -> pl.DataFrame:
    """The currency most rows of each period carry (ties: the one whose first row comes first)."""
    return (
        counts.sort(["len", "first_row"], descending=[True, False])
        .unique(subset=_PERIOD, keep="first", maintain_order=True)
        .select(*_PERIOD, _target=pl.col("BillingCurrency"))
    )


def _dominant_currencies(frames: Iterable[pl.DataFrame]) -> pl.DataFrame:
    """:func:`_pick_dominant` over a whole file given batch by batch (the counts are per period,
    not per row, so they stay small)."""
    counts: pl.DataFrame | None = None
    for frame in frames:
        part = _period_currencies(frame)
        counts = part if counts is None else pl.concat([counts, part]).group_by(*_PERIOD, "BillingCurrency").agg(
            pl.col("len").sum(), pl.col("first_row").min()
        )
    if counts is None:
        return pl.DataFrame(schema={"ChargePeriodStart": UTC_TS, "ChargePeriodEnd": UTC_TS, "_target": pl.String})
    return _pick_dominant(counts)


def _apply_currency(
    frame: pl.DataFrame, currency: str | None, rates: dict[tuple[str, str], Decimal],
    dominant: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """Add ``_target``, ``_rate`` and ``_original_currency``; convert or quarantine foreign rows.

    ``dominant``: each period's currency over the whole file (:func:`_dominant_currencies`);
    None: from this frame's rows (the whole file, or a batch of a file with one currency)."""
    ok = pl.col("_reason").is_null()
    if currency is not None:
        frame = frame.with_columns(_target=pl.lit(currency, dtype=pl.String))
        where = "the load's currency"
    else:
        if dominant is None:
            dominant = _pick_dominant(_period_currencies(frame))
        frame = frame.join(dominant, on=_PERIOD, how="left", maintain_order="left", nulls_equal=True)
        where = "the currency of its charge period"
    rate_table = pl.DataFrame(
        {
            "BillingCurrency": [k[0] for k in rates],
            "_target": [k[1] for k in rates],
            "_conv": pl.Series([str(v) for v in rates.values()], dtype=pl.String).cast(MONEY),
        },
        schema={"BillingCurrency": pl.String, "_target": pl.String, "_conv": MONEY},
    )
    frame = frame.join(rate_table, on=["BillingCurrency", "_target"], how="left", maintain_order="left")
    foreign = ok & (pl.col("BillingCurrency") != pl.col("_target"))
    money = [c for c in MONEY_COLUMNS if c in frame.columns]
    # a converted amount must still fit the raw table's DECIMAL(38, 15) (and the staging casts,
    # checked below): such a row is quarantined before it is multiplied
    room = float(Decimal(10) ** (38 - 15)) / 2
    fits = pl.all_horizontal(
        [(pl.col(c).cast(pl.Float64).abs() * pl.col("_conv").cast(pl.Float64) < room).fill_null(True) for c in money]
    ) if money else pl.lit(True)
    frame = frame.with_columns(
        _original_currency=pl.col("BillingCurrency"),
        _rate=pl.when(foreign).then(pl.col("_conv")).otherwise(pl.lit(Decimal(1)).cast(MONEY)),
        _reason=pl.when(foreign & pl.col("_conv").is_null())
        .then(
            pl.format(
                f"row {{}}: BillingCurrency {{}} differs from {where} {{}} and no conversion ({{}}, {{}}) was given",
                pl.col("source_row"),
                pl.col("BillingCurrency"),
                pl.col("_target"),
                pl.col("BillingCurrency"),
                pl.col("_target"),
            )
        )
        .when(foreign & ~fits)
        .then(pl.format("row {}: converted to {} an amount is out of range", pl.col("source_row"), pl.col("_target")))
        .otherwise(pl.col("_reason")),
    )
    frame = frame.with_columns(
        _converted=pl.col("_reason").is_null()
        & (pl.col("BillingCurrency") != pl.col("_target")).fill_null(False)
        & pl.col("_conv").is_not_null()
    )
    converted = pl.col("_converted")
    zero = pl.lit(Decimal(0)).cast(MONEY)
    frame = frame.with_columns(
        *[
            pl.when(converted)
            .then((pl.when(converted).then(pl.col(c)).otherwise(zero) * pl.col("_rate")).cast(MONEY))
            .otherwise(pl.col(c))
            .alias(c)
            for c in money
        ],
        BillingCurrency=pl.when(converted).then(pl.col("_target")).otherwise(pl.col("BillingCurrency")),
    )
    return _check_bounds(frame, converted)


def _check_bounds(frame: pl.DataFrame, converted: pl.Expr) -> pl.DataFrame:
    """Quarantine a row whose amount (converted, when it was) does not fit a staging cast of
    ``WAREHOUSE_DECIMALS``: the decimal rounded half away from zero to ``s`` places, and the
    double the prorating rounds, must both stay below ``10^(p - s)`` in magnitude, or the day's
    build would fail on it."""
    checks = []
    for name, (precision, scale) in WAREHOUSE_DECIMALS.items():
        if name not in frame.columns:
            continue
        top = Decimal(10) ** (precision - scale)
        edge = top - Decimal(5) * Decimal(10) ** -(scale + 1)
        value = pl.col(name)
        over = (value.abs() >= pl.lit(edge, dtype=MONEY)) | (value.cast(pl.Float64).abs() >= float(top))
        shown = pl.when(converted).then(pl.format("{} (converted)", value.cast(pl.String))).otherwise(
            pl.col(f"_raw_{name}").str.slice(0, 60)
        )
        checks.append(
            pl.when(over.fill_null(False)).then(
                pl.format(
                    f"column {name}: {{}} is out of range: the warehouse keeps DECIMAL({precision}, {scale}), "
                    f"|value| below 10^{precision - scale}",
                    shown,
                )
            )
        )
    if not checks:
        return frame
    problem = pl.concat_str(checks, separator="; ", ignore_nulls=True)
    return frame.with_columns(
        _reason=pl.when(pl.col("_reason").is_null() & problem.is_not_null() & (problem != ""))
        .then(pl.format("row {}: {}", pl.col("source_row"), problem))
        .otherwise(pl.col("_reason"))
    )
