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

Files are read in batches (:func:`iter_focus`): CSV through Arrow's streaming reader, one
batch per block of ``FOCUS_BATCH_BYTES``; from the first malformed row on, Python's csv module,
which numbers every row exactly (quoted values may hold newlines); Parquet by its record
batches. Memory follows the batch, not the file. ``source_row`` counts data rows from 1 (header
and blank lines not counted). :func:`load_focus` puts the batches together.

BillingCurrency must be an ISO 4217 code as the ISO maintenance agency lists it now (three
uppercase letters; the list ships with the ``iso4217`` package, its ``table.xml`` being the
agency's list one), else the row is quarantined naming the value. Amounts must fit the
warehouse: every Decimal column the raw table's DECIMAL(38, 15), and the columns the staging
model casts (``WAREHOUSE_DECIMALS``: BilledCost and EffectiveCost to DECIMAL(18, 6)) that
type too, so one amount can never fail a day's build; a row that does not is quarantined
naming the column and the value.

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
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, BinaryIO, Literal

import iso4217
import polars as pl
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from gpu_platform.finops.feeds.schemas import FOCUS_QUARANTINE_SCHEMA, UTC_TS, FeedBatch, FeedSchemaError

__all__ = [
    "FOCUS_COLUMNS",
    "FOCUS_TABLE_SCHEMA",
    "FocusColumn",
    "ISO_4217_CODES",
    "WAREHOUSE_DECIMALS",
    "iter_focus",
    "load_focus",
    "mandatory_columns",
]

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

FOCUS_BATCH_BYTES = 4 << 20
"""CSV bytes per batch (Arrow's block size)."""
FOCUS_BATCH_ROWS = 65_536
"""Rows per batch of a Parquet file, or of a CSV file read by Python's csv module."""


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


def _csv_line(fields: list[str]) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="").writerow(fields)
    return out.getvalue()


def detect_version(header: list[str]) -> FocusVersion:
    """``"1.2"`` when any column introduced after 1.0 is present, else ``"1.0"``."""
    later = {c.name for c in FOCUS_COLUMNS if c.introduced not in _UP_TO_1_0}
    return "1.2" if later & set(header) else "1.0"


@dataclass
class _Chunk:
    """One batch of input rows, every cell text: ``frame`` (the header's columns plus
    ``source_row``), ``ragged`` rows (wrong field count: (row, raw, reason)) and ``raw_of``
    (row numbers of this chunk -> their raw text for the quarantine)."""

    frame: pl.DataFrame
    ragged: list[tuple[int, str, str]]
    raw_of: Callable[[list[int]], list[str]]

    @property
    def rows_in(self) -> int:
        return self.frame.height + len(self.ragged)


class _Malformed(Exception):
    """Arrow met a row it cannot number exactly: re-read from data row ``done + 1`` with Python's csv."""

    def __init__(self, done: int) -> None:
        super().__init__(done)
        self.done = done


def _open_binary(payload: Path | bytes) -> BinaryIO:
    return io.BytesIO(payload) if isinstance(payload, bytes) else open(payload, "rb")  # noqa: SIM115


def _csv_header(payload: Path | bytes) -> list[str]:
    with io.TextIOWrapper(_open_binary(payload), encoding="utf-8-sig", newline="") as text:
        header = next(csv.reader(text), None)
    if header is None:
        raise ValueError("FOCUS file is empty: no header row")
    return [h.strip() for h in header]


def _record_blocks(payload: Path | bytes, batch_bytes: int) -> Iterator[bytes]:
    """The data rows of a CSV file (header and UTF-8 BOM left out) in blocks of about
    ``batch_bytes``, each cut at a newline after an even number of ``"`` since the file's start:
    a record boundary in RFC 4180 CSV (a quoted value's ``""`` counts twice). Read with plain
    reads, one block ahead at most (Arrow's own streaming reader reads up to 32 blocks ahead).

    A stray ``"`` inside an unquoted value breaks the count; a block then ends inside a record,
    which the Arrow parse of the block reports (unterminated quote or a short row), and the
    caller re-reads the file exactly. A block that finds no boundary within 8x ``batch_bytes``
    raises :class:`_Malformed` the same way."""
    stream = _open_binary(payload)
    try:
        buf = bytearray()
        odd = False  # quote parity at the start of `buf`
        header_done = False
        first = True
        while True:
            data = stream.read(batch_bytes)
            if first and data.startswith(b"\xef\xbb\xbf"):
                data = data[3:]
            first = False
            if not data:
                if header_done and buf:
                    yield bytes(buf)
                return
            buf += data
            del data
            cut, end = -1, len(buf)
            total = buf.count(b'"')
            while (i := buf.rfind(b"\n", 0, end)) >= 0:
                # quotes before position i: all of them but those from i on
                if ((total - buf.count(b'"', i)) % 2 == 1) == odd:
                    cut = i
                    break
                end = i
            if cut < 0:
                if len(buf) > 8 * batch_bytes:
                    raise _Malformed(-1)
                continue
            start = 0
            if not header_done:
                # the header is the first record: up to the first newline after an even count
                j = quotes = 0
                while True:
                    k = buf.find(b"\n", j)
                    quotes += buf.count(b'"', j, k)
                    if quotes % 2 == 0:
                        break
                    j = k + 1
                start, header_done = k + 1, True
            block = bytes(memoryview(buf)[start : cut + 1])
            odd = odd ^ ((total - buf.count(b'"', cut + 1)) % 2 == 1)
            del buf[: cut + 1]
            if block:
                yield block
            del block
    finally:
        stream.close()


def _arrow_csv_batches(
    payload: Path | bytes, header: list[str], batch_bytes: int, columns: list[str] | None = None
) -> Iterator[pa.Table]:
    """Arrow's CSV parser over :func:`_record_blocks`, one table per block, every cell text.
    Raises :class:`_Malformed` (with the rows already yielded) at the first row Arrow skips or
    cannot parse: its row number is not known once quoted values hold newlines."""
    invalid: list[Any] = []

    def on_invalid(row: Any) -> str:
        invalid.append(row)
        return "skip"

    done = 0
    read = pacsv.ReadOptions(column_names=header, use_threads=False, block_size=max(1 << 20, batch_bytes))
    parse = pacsv.ParseOptions(newlines_in_values=True, invalid_row_handler=on_invalid)
    convert = pacsv.ConvertOptions(
        column_types={h: pa.string() for h in header}, strings_can_be_null=False, include_columns=columns or []
    )
    try:
        for block in _record_blocks(payload, batch_bytes):
            table = pacsv.read_csv(pa.py_buffer(block), read_options=read, parse_options=parse, convert_options=convert)
            if invalid:
                raise _Malformed(done)
            done += table.num_rows
            yield table
    except pa.ArrowInvalid:
        raise _Malformed(done) from None
    except _Malformed as exc:
        if exc.done < 0:
            raise _Malformed(done) from None
        raise


_CSV_FIELD_LIMIT = 2**31 - 1
"""Python's csv module refuses a field over 128 KiB by default (`_csv.Error: field larger than
field limit`), which Arrow reads: a long ChargeDescription or Tags value in a file that also has
one ragged row would stop the file. A field can be as long as the file the size limit allows."""


def _python_csv_chunks(payload: Path | bytes, header: list[str], skip: int, batch_rows: int) -> Iterator[_Chunk]:
    """Python's csv reader, which numbers every row exactly (blank lines not counted), from data
    row ``skip + 1`` on, ``batch_rows`` rows at a time. Fields of any length are read, as Arrow
    reads them (the process-wide csv field limit is raised once, never lowered)."""
    if csv.field_size_limit() < _CSV_FIELD_LIMIT:
        csv.field_size_limit(_CSV_FIELD_LIMIT)
    width = len(header)
    with io.TextIOWrapper(_open_binary(payload), encoding="utf-8-sig", newline="") as text:
        reader = csv.reader(text)
        next(reader, None)
        number = 0
        rows: list[list[str]] = []
        numbers: list[int] = []
        ragged: list[tuple[int, str, str]] = []

        def flush() -> _Chunk:
            frame = pl.DataFrame(rows, schema={h: pl.String for h in header}, orient="row").with_columns(
                source_row=pl.Series(numbers, dtype=pl.Int32)
            )
            by_number = dict(zip(numbers, rows, strict=True))

            def raw_of(wanted: list[int]) -> list[str]:
                return [_csv_line(by_number[n]) for n in wanted]

            return _Chunk(frame, list(ragged), raw_of)

        for fields in reader:
            if not fields:
                continue
            number += 1
            if number <= skip:
                continue
            if len(fields) != width:
                ragged.append((number, _csv_line(fields), f"row {number}: expected {width} fields, found {len(fields)}"))
            else:
                rows.append(fields)
                numbers.append(number)
            if len(rows) + len(ragged) >= batch_rows:
                yield flush()
                rows, numbers, ragged = [], [], []
        if rows or ragged:
            yield flush()


def _csv_chunks(payload: Path | bytes, header: list[str], batch_bytes: int, batch_rows: int) -> Iterator[_Chunk]:
    done = 0
    try:
        for batch in _arrow_csv_batches(payload, header, batch_bytes):
            frame = pl.from_arrow(batch)
            assert isinstance(frame, pl.DataFrame)
            first = done + 1
            frame = frame.with_columns(source_row=pl.int_range(first, first + frame.height, dtype=pl.Int32))
            done += frame.height

            def raw_of(wanted: list[int], frame: pl.DataFrame = frame, first: int = first) -> list[str]:
                picked = frame.drop("source_row")[[n - first for n in wanted]]
                return [_csv_line([v or "" for v in r]) for r in picked.iter_rows()]

            yield _Chunk(frame, [], raw_of)
    except _Malformed as malformed:
        yield from _python_csv_chunks(payload, header, malformed.done, batch_rows)


def _parquet_text(batch: pa.RecordBatch) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(the batch as read, the batch with every column as text: timestamps ISO in UTC, nested
    values as JSON)."""
    df = pl.from_arrow(batch)
    assert isinstance(df, pl.DataFrame)
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
                    name, [None if v is None else json.dumps(v, default=str) for v in df[name].to_list()],
                    dtype=pl.String,
                )
            )
        else:
            cols.append(col.cast(pl.String))
    return df, df.select(cols)


def _parquet_chunks(parquet: pq.ParquetFile, batch_rows: int) -> Iterator[_Chunk]:
    done = 0
    for batch in parquet.iter_batches(batch_size=batch_rows):
        original, frame = _parquet_text(batch)
        first = done + 1
        frame = frame.with_columns(source_row=pl.int_range(first, first + frame.height, dtype=pl.Int32))
        done += frame.height

        def raw_of(wanted: list[int], original: pl.DataFrame = original, first: int = first) -> list[str]:
            picked = original[[n - first for n in wanted]]
            return [json.dumps(r, sort_keys=True, default=str) for r in picked.iter_rows(named=True)]

        yield _Chunk(frame, [], raw_of)


def _distinct_currencies(
    payload: Path | bytes, fmt: str, header: list[str], batch_bytes: int, batch_rows: int
) -> set[str] | None:
    """The distinct BillingCurrency texts of a file, reading that column only; None when they
    cannot be had cheaply (a malformed row, more than 64 of them)."""
    seen: set[str] = set()
    try:
        if fmt == "parquet":
            parquet = pq.ParquetFile(pa.BufferReader(payload) if isinstance(payload, bytes) else payload)
            batches: Iterable[pa.RecordBatch | pa.Table] = parquet.iter_batches(
                batch_size=batch_rows, columns=["BillingCurrency"]
            )
        else:
            batches = _arrow_csv_batches(payload, header, batch_bytes, columns=["BillingCurrency"])
        for batch in batches:
            column = pl.Series(batch.column(0)).cast(pl.String)
            seen.update(v for v in column.unique().to_list() if v is not None)
            if len(seen) > 64:
                return None
    except (_Malformed, pa.ArrowException, pl.exceptions.PolarsError):
        return None
    return seen


def iter_focus(
    data: str | Path | bytes,
    *,
    source: str | None = None,
    focus_version: FocusVersion | None = None,
    currency: str | None = None,
    conversions: Mapping[tuple[str, str], Decimal | str | int] | None = None,
    file_format: Literal["csv", "parquet"] | None = None,
    allow_nulls_in: Collection[str] = (),
    batch_bytes: int = FOCUS_BATCH_BYTES,
    batch_rows: int = FOCUS_BATCH_ROWS,
) -> Iterator[FeedBatch]:
    """:func:`load_focus` batch by batch: one :class:`FeedBatch` per CSV block of ``batch_bytes``
    (Arrow's streaming reader) or per ``batch_rows`` rows (a Parquet file's batches; a CSV file
    with a malformed row, re-read by Python's csv module), in row order. Each batch holds its own
    rows (``rows_in == accepted + quarantined`` per batch); memory follows the batch, not the
    file. The header is checked before the first batch is yielded (:class:`FeedSchemaError`).

    One currency per charge period (``currency=None``) needs the whole file: when the file's
    BillingCurrency column (read alone first) holds more than one ISO 4217 code, the file is
    validated twice, first to count each period's currencies, then to yield."""
    if isinstance(data, (str, Path)):
        path = Path(data)
        src = str(data) if source is None else source
        fmt = file_format or ("parquet" if path.suffix.lower() in (".parquet", ".pq") else "csv")
        payload: Path | bytes = path
    else:
        src = "<bytes>" if source is None else source
        fmt = file_format or "csv"
        payload = data
    if currency is not None and currency not in ISO_4217_CODES:
        raise ValueError(f"currency {currency!r} is not an ISO 4217 code")
    rates = _rates(conversions or {})
    allow = frozenset(allow_nulls_in)
    if fmt == "parquet":
        parquet = pq.ParquetFile(pa.BufferReader(payload) if isinstance(payload, bytes) else payload)
        header = list(parquet.schema_arrow.names)
    else:
        header = _csv_header(payload)
    version = focus_version or detect_version(header)
    _check_header(header, version, src)

    def chunks() -> Iterator[_Chunk]:
        if fmt == "parquet":
            return _parquet_chunks(pq.ParquetFile(pa.BufferReader(payload) if isinstance(payload, bytes)
                                                  else payload), batch_rows)
        return _csv_chunks(payload, header, batch_bytes, batch_rows)

    dominant = None
    if currency is None:
        codes = _distinct_currencies(payload, fmt, header, batch_bytes, batch_rows)
        if codes is None or len(codes & ISO_4217_CODES) > 1 or "BillingCurrency" in allow:
            dominant = _dominant_currencies(
                _typed(c.frame, header, version, allow) for c in chunks()
            )
    return _batches(chunks(), header, version, src, currency, rates, allow, dominant)


def _batches(
    chunks: Iterable[_Chunk],
    header: list[str],
    version: FocusVersion,
    src: str,
    currency: str | None,
    rates: dict[tuple[str, str], Decimal],
    allow: frozenset[str],
    dominant: pl.DataFrame | None,
) -> Iterator[FeedBatch]:
    for chunk in chunks:
        accepted, quarantine = _validate(
            chunk.frame, header, version, src, currency, rates, allow, chunk.raw_of, dominant
        )
        if chunk.ragged:
            extra = pl.DataFrame(
                [(src, n, raw, reason, None, None, None, None) for n, raw, reason in chunk.ragged],
                schema=FOCUS_QUARANTINE_SCHEMA, orient="row",
            )
            quarantine = pl.concat([quarantine, extra]).sort("source_row")
        yield FeedBatch(rows=accepted, quarantine=quarantine, rows_in=chunk.rows_in)


def load_focus(
    data: str | Path | bytes,
    *,
    source: str | None = None,
    focus_version: FocusVersion | None = None,
    currency: str | None = None,
    conversions: Mapping[tuple[str, str], Decimal | str | int] | None = None,
    file_format: Literal["csv", "parquet"] | None = None,
    allow_nulls_in: Collection[str] = (),
    batch_bytes: int = FOCUS_BATCH_BYTES,
    batch_rows: int = FOCUS_BATCH_ROWS,
) -> FeedBatch:
    """Load one FOCUS export into a :class:`FeedBatch` for ``raw_focus_billing``: the batches of
    :func:`iter_focus` put together (the whole file in memory; the ingest streams instead).

    ``data``: a path (``.parquet``/``.pq`` read as Parquet unless ``file_format`` says
    otherwise) or the file's bytes (CSV unless ``file_format="parquet"``). ``source=None``:
    the path, or ``"<bytes>"``. ``focus_version=None``: detected by :func:`detect_version`.
    ``currency=None``: one currency per charge period (see the module docstring); else an ISO
    4217 code every row must be in.
    ``conversions``: ``{(from, to): rate}``; floats are refused, pass ``Decimal`` or ``str``.
    ``allow_nulls_in``: non-nullable columns whose NULLs are accepted anyway, for a provider's
    known gap (the official 1.0 sample's Oracle rows have NULL ContractedCost); empty: the spec.
    """
    batches = list(
        iter_focus(
            data, source=source, focus_version=focus_version, currency=currency, conversions=conversions,
            file_format=file_format, allow_nulls_in=allow_nulls_in, batch_bytes=batch_bytes, batch_rows=batch_rows,
        )
    )
    if not batches:
        return FeedBatch(
            rows=pl.DataFrame(schema=FOCUS_TABLE_SCHEMA), quarantine=pl.DataFrame(schema=FOCUS_QUARANTINE_SCHEMA),
            rows_in=0,
        )
    return FeedBatch(
        rows=pl.concat([b.rows for b in batches]),
        quarantine=pl.concat([b.quarantine for b in batches]),
        rows_in=sum(b.rows_in for b in batches),
    )


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
