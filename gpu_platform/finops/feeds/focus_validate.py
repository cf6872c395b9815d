"""Validation of FOCUS rows: the header check, the conversion rates given, the typed columns
(Decimal, UTC timestamps, JSON objects, ISO 4217 currency, non-nullable columns, the charge period)
with each row's problems as ``row N: column C: ...``, and `_validate`, which splits a chunk into
``raw_focus_billing`` rows and quarantine rows (currency resolved by `focus_currency.py`).

May import `finops/feeds/focus_columns.py`, `focus_currency.py`, `schemas.py`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import polars as pl

from gpu_platform.finops.feeds.focus_columns import (
    _BY_NAME,
    FOCUS_COLUMNS,
    FOCUS_TABLE_SCHEMA,
    ISO_4217_CODES,
    MONEY,
    WAREHOUSE_DECIMALS,
    FocusVersion,
    mandatory_columns,
)
from gpu_platform.finops.feeds.focus_currency import _apply_currency
from gpu_platform.finops.feeds.schemas import FOCUS_QUARANTINE_SCHEMA, UTC_TS, FeedSchemaError

_UTC_SUFFIXES = (" UTC", "UTC")
"""Zone names some exports write after the time instead of an offset: BigQuery's CSV export writes
TIMESTAMP values as ``2026-11-20 00:00:00 UTC`` (GCP's FOCUS export is a BigQuery table)."""


def _parse_ts(text: str) -> datetime | None:
    """An ISO 8601 date/time (``T`` or a space between date and time; ``Z``, ``+00:00``, ``+0530``
    or a trailing `` UTC``), as UTC; a value without a zone is UTC (FOCUS requires UTC)."""
    value = text.strip()
    for suffix in _UTC_SUFFIXES:
        if value.endswith(suffix) and len(value) > 10:
            value = value[: -len(suffix)].rstrip() + "+00:00"
            break
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        return parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)


def _is_json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def _rates(conversions: Mapping[tuple[str, str], Any]) -> dict[tuple[str, str], Decimal]:
    out = {}
    for (from_cur, to_cur), rate in conversions.items():
        if isinstance(rate, float):
            raise TypeError(f"conversion rate {from_cur}->{to_cur} is a float; pass Decimal or str")
        bad = [c for c in (from_cur, to_cur) if c not in ISO_4217_CODES]
        if bad:
            raise ValueError(f"conversion {from_cur!r}->{to_cur!r}: {bad[0]!r} is not an ISO 4217 code")
        value = Decimal(str(rate))
        if not value.is_finite() or value <= 0:
            raise ValueError(f"conversion rate {from_cur}->{to_cur} must be a positive number, got {rate!r}")
        out[(from_cur, to_cur)] = value
    return out


def _check_header(header: list[str], version: FocusVersion, source: str) -> None:
    missing = [c for c in mandatory_columns(version) if c not in header]
    if missing:
        raise FeedSchemaError(f"FOCUS {version} billing data {source}", missing)
    dupes = sorted({h for h in header if header.count(h) > 1})
    if dupes:
        raise ValueError(f"FOCUS billing data {source}: duplicate column(s): {', '.join(dupes)}")


def _shown(value: str) -> str:
    """A cell as a reason shows it: at most 60 characters, escaped to one printable line."""
    text = value if len(value) <= 60 else value[:60] + "..."
    return text.encode("unicode_escape").decode("ascii").replace("'", "\\'")


def _decimal_problem(column: str, text: str) -> str:
    try:
        value = Decimal(text.strip())
    except ArithmeticError:
        return f"column {column}: invalid decimal '{_shown(text)}'"
    if not value.is_finite():
        return f"column {column}: invalid decimal '{_shown(text)}'"
    return (f"column {column}: '{_shown(text)}' is out of range: the warehouse keeps DECIMAL(38, 15), "
            "at most 23 integer digits")


def _typed(frame: pl.DataFrame, header: list[str], version: FocusVersion, allow_nulls_in: frozenset[str]) -> pl.DataFrame:
    """Typed columns (Decimal, UTC timestamps, checked JSON and currency) plus ``_reason``: the
    row's problems (``row N: column C: ...``), NULL when it has none. Currency not yet resolved."""
    known = [c for c in FOCUS_COLUMNS if c.name in header]
    frame = frame.with_columns(
        [pl.when(pl.col(h).is_in(["NULL", ""])).then(None).otherwise(pl.col(h)).alias(h) for h in header]
    )
    ts_values: set[str] = set()
    json_values: set[str] = set()
    for c in known:
        if c.data_type == "Date/Time":
            ts_values.update(frame[c.name].drop_nulls().unique().to_list())
        elif c.data_type == "JSON":
            json_values.update(frame[c.name].drop_nulls().unique().to_list())
    ts_keys = sorted(ts_values)
    ts_map_old = pl.Series(ts_keys, dtype=pl.String)
    ts_map_new = pl.Series([_parse_ts(v) for v in ts_keys], dtype=UTC_TS)
    bad_json = sorted(v for v in json_values if not _is_json_object(v))

    typed: list[pl.Expr] = []
    errors: list[pl.Expr] = []
    times: dict[str, pl.Expr] = {}
    for c in known:
        raw = pl.col(c.name)
        if c.data_type == "Decimal":
            value = raw.str.strip_chars().cast(MONEY, strict=False)
            failed = frame.select(raw.filter(raw.is_not_null() & value.is_null()).unique())[c.name].to_list()
            if failed:
                errors.append(
                    pl.when(raw.is_not_null() & value.is_null()).then(
                        raw.replace_strict(failed, [_decimal_problem(c.name, v) for v in failed], default=None)
                    )
                )
            if c.name in WAREHOUSE_DECIMALS:
                typed.append(raw.alias(f"_raw_{c.name}"))
        elif c.data_type == "Date/Time":
            value = raw.replace_strict(ts_map_old, ts_map_new, default=None, return_dtype=UTC_TS)
            times[c.name] = value
            errors.append(
                pl.when(raw.is_not_null() & value.is_null()).then(
                    pl.format(f"column {c.name}: invalid timestamp '{{}}'", raw)
                )
            )
        elif c.data_type == "JSON":
            value = raw
            errors.append(
                pl.when(raw.is_in(bad_json)).then(
                    pl.format(f"column {c.name}: not a JSON object: '{{}}'", raw.str.slice(0, 80))
                )
            )
        elif c.name == "BillingCurrency":
            value = raw
            foreign = [v for v in frame[c.name].drop_nulls().unique().to_list() if v not in ISO_4217_CODES]
            if foreign:
                errors.append(
                    pl.when(raw.is_in(foreign)).then(
                        raw.replace_strict(
                            foreign,
                            [f"column BillingCurrency: '{_shown(v)}' is not an ISO 4217 currency code" for v in foreign],
                            default=None,
                        )
                    )
                )
        else:
            value = raw
        if not c.allows_nulls and c.name not in allow_nulls_in:
            errors.append(
                pl.when(raw.is_null()).then(pl.lit(f"column {c.name}: NULL in a non-nullable column"))
            )
        typed.append(value.alias(c.name))
    if {"ChargePeriodStart", "ChargePeriodEnd"} <= set(times):
        # FOCUS: a charge period is [ChargePeriodStart, ChargePeriodEnd), start inclusive, end
        # exclusive; an end at or before the start is no period at all, and which day it charges
        # cannot be known
        start, end = times["ChargePeriodStart"], times["ChargePeriodEnd"]
        errors.append(
            pl.when(end <= start).then(
                pl.format("column ChargePeriodEnd: {} is not after ChargePeriodStart {} (the charge period is "
                          "empty or inverted)", end.dt.to_string("%Y-%m-%dT%H:%M:%SZ"),
                          start.dt.to_string("%Y-%m-%dT%H:%M:%SZ"))
            )
        )
    error_text = pl.concat_str(errors, separator="; ", ignore_nulls=True) if errors else pl.lit("")
    frame = frame.with_columns(*typed, _error=error_text)
    return frame.with_columns(
        _reason=pl.when(pl.col("_error").is_not_null() & (pl.col("_error") != "")).then(
            pl.format("row {}: {}", pl.col("source_row"), pl.col("_error"))
        )
    )



def _validate(
    frame: pl.DataFrame,
    header: list[str],
    version: FocusVersion,
    source: str,
    currency: str | None,
    rates: dict[tuple[str, str], Decimal],
    allow_nulls_in: frozenset[str],
    raw_of: Callable[[list[int]], list[str]],
    dominant: pl.DataFrame | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    known_names = {c.name for c in FOCUS_COLUMNS if c.name in header}
    frame = _typed(frame, header, version, allow_nulls_in)
    frame = _apply_currency(frame, currency, rates, dominant)

    extra = [h for h in header if h not in _BY_NAME]
    good = frame.filter(pl.col("_reason").is_null())
    out = good.select(
        *[
            (pl.col(name) if name in known_names else pl.lit(None)).cast(dtype).alias(name)
            for name, dtype in FOCUS_TABLE_SCHEMA.items()
            if name in _BY_NAME
        ],
        extra_columns=pl.struct(extra).struct.json_encode() if extra else pl.lit(None, dtype=pl.String),
        source=pl.lit(source, dtype=pl.String),
        source_row=pl.col("source_row").cast(pl.Int32),
        focus_version=pl.lit(version, dtype=pl.String),
        original_currency=pl.col("_original_currency"),
        conversion_rate=pl.col("_rate").cast(MONEY),
    )
    bad = frame.filter(pl.col("_reason").is_not_null())
    quarantine = bad.select(
        source=pl.lit(source, dtype=pl.String),
        source_row=pl.col("source_row").cast(pl.Int32),
        raw=pl.Series(raw_of(bad["source_row"].to_list()), dtype=pl.String),
        reason=pl.col("_reason"),
        **{name: (pl.col(name) if name in known_names else pl.lit(None)).cast(FOCUS_QUARANTINE_SCHEMA[name])
           for name in _QUARANTINE_MONEY},
    )
    return out, quarantine


_QUARANTINE_MONEY = ("ChargePeriodStart", "BillingCurrency", "BilledCost", "EffectiveCost")
"""The cells a quarantined row keeps typed beside its raw text (``FOCUS_QUARANTINE_SCHEMA``)."""
