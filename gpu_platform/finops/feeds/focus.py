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

One module per job, each importing only those below it: this one reads a file batch by batch
(`iter_focus`, `load_focus`) and re-exports the rest; `focus_validate.py` checks the header and
types and checks the rows; `focus_currency.py` resolves each row's currency and the warehouse
bounds; `focus_read.py` cuts the file into chunks of text rows; `focus_columns.py` is the column
catalogue.
May import `finops/feeds/schemas.py` and the `focus_*` modules.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping
from decimal import Decimal
from pathlib import Path
from typing import Literal

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from gpu_platform.finops.feeds.focus_columns import (  # noqa: F401 (kept import paths)
    _BY_NAME,
    _UP_TO_1_0,
    FOCUS_COLUMNS,
    FOCUS_TABLE_SCHEMA,
    ISO_4217_CODES,
    MONEY,
    MONEY_COLUMNS,
    WAREHOUSE_DECIMALS,
    FocusColumn,
    FocusVersion,
    _pl_type,
    columns_for,
    detect_version,
    mandatory_columns,
)
from gpu_platform.finops.feeds.focus_currency import (  # noqa: F401 (kept import paths)
    _PERIOD,
    _apply_currency,
    _check_bounds,
    _dominant_currencies,
    _period_currencies,
    _pick_dominant,
)
from gpu_platform.finops.feeds.focus_read import (  # noqa: F401 (kept import paths)
    _CSV_FIELD_LIMIT,
    FOCUS_BATCH_BYTES,
    FOCUS_BATCH_ROWS,
    _arrow_csv_batches,
    _Chunk,
    _csv_chunks,
    _csv_header,
    _csv_line,
    _distinct_currencies,
    _Malformed,
    _open_binary,
    _parquet_chunks,
    _parquet_text,
    _python_csv_chunks,
    _record_blocks,
)
from gpu_platform.finops.feeds.focus_validate import (  # noqa: F401 (kept import paths)
    _QUARANTINE_MONEY,
    _UTC_SUFFIXES,
    _check_header,
    _decimal_problem,
    _is_json_object,
    _parse_ts,
    _rates,
    _shown,
    _typed,
    _validate,
)
from gpu_platform.finops.feeds.schemas import FOCUS_QUARANTINE_SCHEMA, UTC_TS, FeedBatch  # noqa: F401

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

