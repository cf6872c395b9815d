"""Reading a FOCUS file into chunks of text rows: CSV through Arrow's streaming reader (one block
of `FOCUS_BATCH_BYTES` cut at a record boundary), from the first malformed row on Python's csv
module (which numbers every row exactly), Parquet by its record batches. Each `_Chunk` holds its
rows as text, its ragged rows, and a way back to each row's raw text for the quarantine.
`_distinct_currencies` reads the BillingCurrency column alone.

May import nothing of the project (polars, pyarrow and the standard library only).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import polars as pl
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

FOCUS_BATCH_BYTES = 4 << 20
"""CSV bytes per batch (Arrow's block size)."""
FOCUS_BATCH_ROWS = 65_536
"""Rows per batch of a Parquet file, or of a CSV file read by Python's csv module."""


def _csv_line(fields: list[str]) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="").writerow(fields)
    return out.getvalue()


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
