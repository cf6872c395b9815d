"""FOCUS billing exports (CSV or Parquet), versions 1.0 and 1.2, into ``raw_focus_billing``.

Columns keep their FOCUS names and types: Decimal columns become ``Decimal(38, 15)`` (never
floats: the official 1.0 sample carries costs such as 0.0000008 USD that DECIMAL(18, 6) would
round away; cast down in marts once summed), Date/Time columns become UTC timestamps (a value
without an offset is read as UTC, which FOCUS requires), String and JSON columns stay text
(``Tags`` is kept as its JSON text after checking that it is a JSON object). FOCUS columns the
file lacks are NULL. Non-FOCUS columns (the sample's ``Id``, provider ``x_`` columns) are kept
in ``extra_columns`` as a JSON object, NULL when there are none. Our own columns are
``source``, ``source_row`` (1-based data row, header not counted), ``focus_version``,
``original_currency`` (the BillingCurrency as read) and ``conversion_rate`` (1 unless the row
was converted).

CSV goes through Arrow's reader; a file with a malformed row is re-read with Python's csv
module, which numbers every row exactly (quoted values may hold newlines). ``source_row``
counts data rows from 1 (header and blank lines not counted).

A file missing Mandatory columns of its version raises :class:`FeedSchemaError` naming all of
them. A row with a wrong field count, an unparseable decimal/timestamp/JSON, or NULL in a
non-nullable column is quarantined with ``row N: column C: ...`` (all problems of the row).
The literal ``NULL`` and the empty string are NULL. Credits, adjustments and negative costs
are kept.

Currency: with ``currency="USD"`` every row must be in USD; with ``currency=None`` each charge
period (ChargePeriodStart, ChargePeriodEnd) has the currency most of its rows carry (ties: the
one that appears first). A row in another currency is converted with ``conversions[(from, to)]`` when
given (BilledCost, EffectiveCost, ListCost, ContractedCost, ListUnitPrice, ContractedUnitPrice
are multiplied; BillingCurrency becomes the target) and quarantined otherwise.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

import polars as pl
import pyarrow as pa
import pyarrow.csv as pacsv

from gpu_platform.finops.feeds.schemas import FOCUS_QUARANTINE_SCHEMA, UTC_TS, FeedBatch, FeedSchemaError

__all__ = [
    "FOCUS_COLUMNS",
    "FOCUS_TABLE_SCHEMA",
    "FocusColumn",
    "load_focus",
    "mandatory_columns",
]

FocusVersion = Literal["1.0", "1.2"]
MONEY = pl.Decimal(38, 15)


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


def _parse_ts(text: str) -> datetime | None:
    try:
        parsed = datetime.fromisoformat(text.strip())
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


def _csv_line(fields: list[str]) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="").writerow(fields)
    return out.getvalue()


def _read_csv(data: str | bytes) -> tuple[list[str], list[list[str]]]:
    text = data.decode("utf-8-sig") if isinstance(data, bytes) else data.removeprefix("\ufeff")
    reader = csv.reader(io.StringIO(text, newline=""))
    header = next(reader, None)
    if header is None:
        raise ValueError("FOCUS file is empty: no header row")
    return [h.strip() for h in header], [row for row in reader if row]


def _read_csv_arrow(data: bytes) -> tuple[list[str], pl.DataFrame] | None:
    """All-string frame of a CSV through Arrow's reader; None when any row is malformed.

    Arrow cannot say which data row a malformed row was once quoted values hold newlines, so
    such a file goes through :func:`_read_csv`, which numbers every row exactly.
    """
    data = data.removeprefix(b"\xef\xbb\xbf")
    first = next(csv.reader(io.StringIO(data[: 1 << 20].decode("utf-8", "replace"), newline="")), None)
    if not first:
        return None
    header = [h.strip() for h in first]
    if len(set(header)) != len(header):
        return None
    invalid: list[Any] = []

    def on_invalid(row: Any) -> str:
        invalid.append(row)
        return "skip"

    try:
        table = pacsv.read_csv(
            pa.py_buffer(data),
            read_options=pacsv.ReadOptions(column_names=header, skip_rows=1, block_size=1 << 24),
            parse_options=pacsv.ParseOptions(newlines_in_values=True, invalid_row_handler=on_invalid),
            convert_options=pacsv.ConvertOptions(
                column_types={h: pa.string() for h in header}, strings_can_be_null=False
            ),
        )
    except (pa.ArrowInvalid, UnicodeDecodeError):
        return None
    if invalid:
        return None
    return header, pl.from_arrow(table)  # type: ignore[return-value]


def _read_parquet(path: str | Path | bytes) -> tuple[list[str], pl.DataFrame]:
    df = pl.read_parquet(io.BytesIO(path) if isinstance(path, bytes) else path)
    cols = []
    for name, dtype in df.schema.items():
        col = pl.col(name)
        if isinstance(dtype, pl.Datetime):
            if dtype.time_zone is not None:
                col = col.dt.convert_time_zone("UTC")
            cols.append(col.dt.to_string("%Y-%m-%dT%H:%M:%S%.f").alias(name))
        elif isinstance(dtype, (pl.Struct, pl.List, pl.Array, pl.Object)):
            cols.append(
                pl.Series(
                    name, [None if v is None else json.dumps(v) for v in df[name].to_list()], dtype=pl.String
                )
            )
        else:
            cols.append(col.cast(pl.String))
    return list(df.columns), df.select(cols)


def detect_version(header: list[str]) -> FocusVersion:
    """``"1.2"`` when any column introduced after 1.0 is present, else ``"1.0"``."""
    later = {c.name for c in FOCUS_COLUMNS if c.introduced not in _UP_TO_1_0}
    return "1.2" if later & set(header) else "1.0"


def load_focus(
    data: str | Path | bytes,
    *,
    source: str | None = None,
    focus_version: FocusVersion | None = None,
    currency: str | None = None,
    conversions: Mapping[tuple[str, str], Decimal | str | int] | None = None,
    file_format: Literal["csv", "parquet"] | None = None,
    allow_nulls_in: Collection[str] = (),
) -> FeedBatch:
    """Load one FOCUS export into a :class:`FeedBatch` for ``raw_focus_billing``.

    ``data``: a path (``.parquet``/``.pq`` read as Parquet unless ``file_format`` says
    otherwise) or the file's bytes (CSV unless ``file_format="parquet"``). ``source=None``:
    the path, or ``"<bytes>"``. ``focus_version=None``: detected by :func:`detect_version`.
    ``currency=None``: one currency per charge period (see the module docstring).
    ``conversions``: ``{(from, to): rate}``; floats are refused, pass ``Decimal`` or ``str``.
    ``allow_nulls_in``: non-nullable columns whose NULLs are accepted anyway, for a provider's
    known gap (the official 1.0 sample's Oracle rows have NULL ContractedCost); empty: the spec.
    """
    if isinstance(data, (str, Path)):
        path = Path(data)
        src = str(data) if source is None else source
        fmt = file_format or ("parquet" if path.suffix.lower() in (".parquet", ".pq") else "csv")
        payload: str | Path | bytes = path if fmt == "parquet" else path.read_bytes()
    else:
        src = "<bytes>" if source is None else source
        fmt = file_format or "csv"
        payload = data
    rates = _rates(conversions or {})
    ragged: list[tuple[int, str, str]] = []
    if fmt == "parquet":
        header, frame = _read_parquet(payload)  # type: ignore[arg-type]
        version = focus_version or detect_version(header)
        _check_header(header, version, src)
        original = frame
        frame = frame.with_columns(source_row=pl.int_range(1, frame.height + 1, dtype=pl.Int32))

        def raw_of(numbers: list[int]) -> list[str]:
            picked = original[[n - 1 for n in numbers]]
            return [json.dumps(r, sort_keys=True) for r in picked.iter_rows(named=True)]
    elif (fast := _read_csv_arrow(payload if isinstance(payload, bytes) else payload.encode())) is not None:  # type: ignore[union-attr]
        header, frame = fast
        version = focus_version or detect_version(header)
        _check_header(header, version, src)
        csv_frame = frame
        frame = frame.with_columns(source_row=pl.int_range(1, frame.height + 1, dtype=pl.Int32))

        def raw_of(numbers: list[int]) -> list[str]:
            picked = csv_frame[[n - 1 for n in numbers]]
            return [_csv_line([v or "" for v in r]) for r in picked.iter_rows()]
    else:
        header, rows = _read_csv(payload)  # type: ignore[arg-type]
        version = focus_version or detect_version(header)
        _check_header(header, version, src)
        good_rows, numbers = [], []
        for number, fields in enumerate(rows, start=1):
            if len(fields) != len(header):
                reason = f"row {number}: expected {len(header)} fields, found {len(fields)}"
                ragged.append((number, _csv_line(fields), reason))
                continue
            good_rows.append(fields)
            numbers.append(number)
        frame = pl.DataFrame(good_rows, schema={h: pl.String for h in header}, orient="row").with_columns(
            source_row=pl.Series(numbers, dtype=pl.Int32)
        )

        def raw_of(numbers: list[int]) -> list[str]:
            return [_csv_line(rows[n - 1]) for n in numbers]

    accepted, quarantine = _validate(
        frame, header, version, src, currency, rates, frozenset(allow_nulls_in), raw_of
    )
    if ragged:
        extra = pl.DataFrame(
            [(src, n, raw, reason) for n, raw, reason in ragged], schema=FOCUS_QUARANTINE_SCHEMA, orient="row"
        )
        quarantine = pl.concat([quarantine, extra]).sort("source_row")
    return FeedBatch(rows=accepted, quarantine=quarantine, rows_in=frame.height + len(ragged))


def _rates(conversions: Mapping[tuple[str, str], Any]) -> dict[tuple[str, str], Decimal]:
    out = {}
    for (from_cur, to_cur), rate in conversions.items():
        if isinstance(rate, float):
            raise TypeError(f"conversion rate {from_cur}->{to_cur} is a float; pass Decimal or str")
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


def _validate(
    frame: pl.DataFrame,
    header: list[str],
    version: FocusVersion,
    source: str,
    currency: str | None,
    rates: dict[tuple[str, str], Decimal],
    allow_nulls_in: frozenset[str],
    raw_of: Callable[[list[int]], list[str]],
) -> tuple[pl.DataFrame, pl.DataFrame]:
    known = [c for c in FOCUS_COLUMNS if c.name in header]
    known_names = {c.name for c in known}
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
    for c in known:
        raw = pl.col(c.name)
        if c.data_type == "Decimal":
            value = raw.str.strip_chars().cast(MONEY, strict=False)
            errors.append(
                pl.when(raw.is_not_null() & value.is_null()).then(
                    pl.format(f"column {c.name}: invalid decimal '{{}}'", raw)
                )
            )
        elif c.data_type == "Date/Time":
            value = raw.replace_strict(ts_map_old, ts_map_new, default=None, return_dtype=UTC_TS)
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
        else:
            value = raw
        if not c.allows_nulls and c.name not in allow_nulls_in:
            errors.append(
                pl.when(raw.is_null()).then(pl.lit(f"column {c.name}: NULL in a non-nullable column"))
            )
        typed.append(value.alias(c.name))
    error_text = pl.concat_str(errors, separator="; ", ignore_nulls=True) if errors else pl.lit("")
    frame = frame.with_columns(*typed, _error=error_text)
    frame = frame.with_columns(
        _reason=pl.when(pl.col("_error").is_not_null() & (pl.col("_error") != "")).then(
            pl.format("row {}: {}", pl.col("source_row"), pl.col("_error"))
        )
    )
    frame = _apply_currency(frame, currency, rates)

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
    )
    return out, quarantine


def _apply_currency(
    frame: pl.DataFrame, currency: str | None, rates: dict[tuple[str, str], Decimal]
) -> pl.DataFrame:
    """Add ``_target``, ``_rate`` and ``_original_currency``; convert or quarantine foreign rows."""
    ok = pl.col("_reason").is_null()
    period = ["ChargePeriodStart", "ChargePeriodEnd"]
    if currency is not None:
        frame = frame.with_columns(_target=pl.lit(currency, dtype=pl.String))
        where = "the load's currency"
    else:
        dominant = (
            frame.filter(ok)
            .group_by(*period, "BillingCurrency")
            .agg(pl.len().alias("len"), pl.col("source_row").min().alias("first_row"))
            .sort(["len", "first_row"], descending=[True, False])
            .unique(subset=period, keep="first", maintain_order=True)
            .select(*period, _target=pl.col("BillingCurrency"))
        )
        frame = frame.join(dominant, on=period, how="left", maintain_order="left", nulls_equal=True)
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
        .otherwise(pl.col("_reason")),
    )
    converted = foreign & pl.col("_conv").is_not_null()
    money = [c for c in MONEY_COLUMNS if c in frame.columns]
    return frame.with_columns(
        *[
            pl.when(converted).then((pl.col(c) * pl.col("_rate")).cast(MONEY)).otherwise(pl.col(c)).alias(c)
            for c in money
        ],
        BillingCurrency=pl.when(converted).then(pl.col("_target")).otherwise(pl.col("BillingCurrency")),
    )
