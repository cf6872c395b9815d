"""dcgm-exporter samples: Prometheus text exposition, ``query_range`` JSON, Parquet history.

Every input becomes a :class:`~gpu_platform.finops.feeds.schemas.FeedBatch` whose ``rows`` follow
``raw_dcgm_samples`` (:data:`~gpu_platform.finops.feeds.schemas.DCGM_SAMPLE_SCHEMA`) and whose
``quarantine`` follows ``raw_dcgm_quarantine`` (source, source_line, raw, reason). Every
non-blank, non-comment input line is exactly one of the two.

Labels: the variants dcgm-exporter writes map onto one column each: ``Hostname``/``hostname``
-> hostname, ``UUID``/``uuid`` -> uuid, ``pod``/``pod_name`` -> pod,
``namespace``/``pod_namespace`` -> namespace, ``container``/``container_name`` -> container,
``modelName`` -> model_name, ``GPU_I_PROFILE`` -> gpu_instance_profile, ``GPU_I_ID`` ->
gpu_instance_id, plus ``gpu``, ``pci_bus_id`` and ``device``. Every other label
(``DCGM_FI_DRIVER_VERSION``, ``pod_uid``, ``err_code``, ...) is kept in ``extra_labels`` as a
JSON object with sorted keys. An empty label value is NULL. Two spellings of one label with
different non-empty values, a repeated label, or a ``gpu`` that is not an integer quarantine
the line.

Values: NaN, infinities, values >= 9.2e18 (DCGM's int64 blank sentinels such as
9223372036854775794, ``DCGM_INT64_NOT_SUPPORTED``) and DCGM's fp64 blanks
(140737488355328.0 .. 140737488355331.0) are not data; those lines are quarantined with the
reason. A trailing timestamp (integer milliseconds since the epoch) sets ``ts``; without one
``ts`` is the scrape time given by the caller.

Speed: numpy finds every newline and the first ``{``/``}`` of each line in the UTF-8 buffer;
the metric name, label block and value text of each line become zero-copy Arrow string views
into that buffer; polars casts values and timestamps; Arrow dictionary-encodes the label
blocks so that each distinct block is parsed once in Python (a scrape repeats one block per
GPU across all of its metrics). No Python object is created per line. A line the fast path
cannot prove well-formed (no ``{``, a quote after the first ``}``, an unparseable value or
timestamp, leading blanks) goes through :func:`_split_line`, a character-level tokenizer, so
correctness never depends on the fast path. Lines end at ``\\n`` (a trailing ``\\r`` is
ignored); leading blanks are tolerated.
"""

from __future__ import annotations

import json
import math
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pac

from gpu_platform.finops.feeds.schemas import (
    DCGM_QUARANTINE_SCHEMA,
    DCGM_SAMPLE_SCHEMA,
    UTC_TS,
    FeedBatch,
    FeedSchemaError,
)

__all__ = [
    "LABEL_COLUMNS",
    "PrometheusQueryError",
    "ScrapeError",
    "parse_file",
    "parse_label_block",
    "parse_query_range",
    "parse_text",
    "read_history_parquet",
    "scrape",
]

LABEL_COLUMNS: tuple[str, ...] = (
    "hostname",
    "gpu",
    "uuid",
    "model_name",
    "pci_bus_id",
    "device",
    "gpu_instance_profile",
    "gpu_instance_id",
    "namespace",
    "pod",
    "container",
)

_COLUMN_FOR_LABEL: dict[str, str] = {
    "Hostname": "hostname",
    "hostname": "hostname",
    "UUID": "uuid",
    "uuid": "uuid",
    "gpu": "gpu",
    "modelName": "model_name",
    "pci_bus_id": "pci_bus_id",
    "device": "device",
    "GPU_I_PROFILE": "gpu_instance_profile",
    "GPU_I_ID": "gpu_instance_id",
    "namespace": "namespace",
    "pod_namespace": "namespace",
    "pod": "pod",
    "pod_name": "pod",
    "container": "container",
    "container_name": "container",
}

BLANK_THRESHOLD = 9.2e18
_FP64_BLANKS = (140737488355328.0, 140737488355329.0, 140737488355330.0, 140737488355331.0)
_MAX_ABS_TS_MS = 10**14

_METRIC_NAME_RE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME_RE = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_VALUE_CHUNK_RE = re.compile(r'[^"\\]*')
_INT_RE = re.compile(r"-?[0-9]+")
_BLANKS = " \t"


class PrometheusQueryError(ValueError):
    """A Prometheus API answer that is not ``status: success`` or not a matrix/vector."""


class ScrapeError(OSError):
    """A scrape that did not return a 200 answer; names the URL and the cause."""


class _LineError(ValueError):
    """A malformed line; the message says what is wrong, without the line number."""


def parse_label_block(block: str) -> dict[str, str]:
    """Parse the text between ``{`` and ``}``: ``a="x",b="y\\"z"`` -> ``{"a": "x", "b": 'y"z'}``.

    Escapes ``\\\\``, ``\\"`` and ``\\n`` are decoded; commas, braces and blanks inside quotes
    are literal. A trailing comma is allowed. Raises ``ValueError`` saying what is wrong.
    """
    labels: dict[str, str] = {}
    i, n = 0, len(block)
    while True:
        while i < n and block[i] in _BLANKS:
            i += 1
        if i >= n:
            return labels
        m = _LABEL_NAME_RE.match(block, i)
        if m is None:
            raise _LineError(f"invalid label name at {block[i : i + 20]!r}")
        name = m.group()
        i = m.end()
        while i < n and block[i] in _BLANKS:
            i += 1
        if i >= n or block[i] != "=":
            raise _LineError(f"expected '=' after label name {name!r}")
        i += 1
        while i < n and block[i] in _BLANKS:
            i += 1
        if i >= n or block[i] != '"':
            raise _LineError(f"value of label {name!r} is not quoted")
        i += 1
        parts: list[str] = []
        while True:
            chunk = _VALUE_CHUNK_RE.match(block, i)
            assert chunk is not None
            parts.append(chunk.group())
            i = chunk.end()
            if i >= n:
                raise _LineError(f"unterminated label value (label {name!r})")
            if block[i] == '"':
                i += 1
                break
            if i + 1 >= n:
                raise _LineError(f"unterminated label value (label {name!r})")
            escaped = block[i + 1]
            if escaped == "\\":
                parts.append("\\")
            elif escaped == '"':
                parts.append('"')
            elif escaped == "n":
                parts.append("\n")
            else:
                raise _LineError(f"invalid escape sequence '\\{escaped}' in label {name!r}")
            i += 2
        if name in labels:
            raise _LineError(f"duplicate label {name!r}")
        labels[name] = "".join(parts)
        while i < n and block[i] in _BLANKS:
            i += 1
        if i >= n:
            return labels
        if block[i] != ",":
            raise _LineError(f"expected ',' or '}}' after label {name!r}, found {block[i]!r}")
        i += 1


def _split_line(line: str) -> tuple[str, str, str, str | None]:
    """Tokenize one sample line into (metric name, label block, value text, timestamp text)."""
    s = line.strip(" \t\r\n")
    m = _METRIC_NAME_RE.match(s)
    if m is None:
        raise _LineError(f"invalid metric name at {s[:20]!r}")
    i, n = m.end(), len(s)
    block = ""
    if i < n and s[i] == "{":
        j, in_quotes = i + 1, False
        while j < n:
            c = s[j]
            if in_quotes:
                if c == "\\":
                    j += 2
                    continue
                if c == '"':
                    in_quotes = False
            elif c == '"':
                in_quotes = True
            elif c == "}":
                break
            j += 1
        if j >= n:
            raise _LineError("unterminated label value" if in_quotes else "missing '}' after labels")
        block = s[i + 1 : j]
        i = j + 1
    rest = s[i:]
    if not rest:
        raise _LineError("missing value")
    if rest[0] not in _BLANKS:
        raise _LineError(f"expected a blank before the value, found {rest[0]!r}")
    tokens = rest.split()
    if len(tokens) > 2:
        raise _LineError(f"unexpected text after the timestamp: {' '.join(tokens[2:])!r}")
    return m.group(), block, tokens[0], tokens[1] if len(tokens) == 2 else None


def _labels_to_columns(labels: Mapping[str, str]) -> tuple[dict[str, Any], str | None]:
    """Map a label dict onto the label columns + ``extra_labels``; second item is an error."""
    cols: dict[str, Any] = dict.fromkeys(LABEL_COLUMNS)
    seen_as: dict[str, str] = {}
    extra: dict[str, str] = {}
    for name, value in labels.items():
        column = _COLUMN_FOR_LABEL.get(name)
        if column is None:
            extra[name] = value
            continue
        if value == "":
            continue
        previous = cols[column]
        if previous is not None and previous != value:
            return cols, (f"conflicting labels {seen_as[column]}={previous!r} and {name}={value!r}")
        cols[column] = value
        seen_as[column] = name
    gpu = cols["gpu"]
    if gpu is not None:
        if _INT_RE.fullmatch(gpu) is None or not -(2**31) <= int(gpu) < 2**31:
            return cols, f"label gpu={gpu!r} is not an integer"
        cols["gpu"] = int(gpu)
    cols["extra_labels"] = json.dumps(extra, sort_keys=True, separators=(",", ":")) if extra else None
    return cols, None


def _label_table(blocks: list[str | None]) -> pl.DataFrame:
    """One row per distinct label block: its columns and ``label_error`` (NULL when fine)."""
    rows: dict[str, list[Any]] = {c: [] for c in ("labels", *LABEL_COLUMNS, "extra_labels", "label_error")}
    for block in blocks:
        try:
            cols, error = _labels_to_columns(parse_label_block(block or ""))
        except _LineError as exc:
            cols, error = dict.fromkeys((*LABEL_COLUMNS, "extra_labels")), str(exc)
        if error is not None:
            cols = dict.fromkeys((*LABEL_COLUMNS, "extra_labels"))
        rows["labels"].append(block)
        for c in (*LABEL_COLUMNS, "extra_labels"):
            rows[c].append(cols[c])
        rows["label_error"].append(error)
    schema = {"labels": pl.String(), "label_error": pl.String(), "extra_labels": pl.String()}
    schema.update({c: DCGM_SAMPLE_SCHEMA[c] for c in LABEL_COLUMNS})
    return pl.DataFrame(rows, schema={c: schema[c] for c in rows})


def _delimiters(buf: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sorted offsets of every newline, ``{`` and ``}`` in ``buf``, in one cache-sized pass."""
    step = 1 << 18
    found: tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]] = ([], [], [])
    for start in range(0, len(buf), step):
        block = buf[start : start + step]
        hit = block == 10
        hit |= block == 123
        hit |= block == 125
        offsets = np.flatnonzero(hit)
        kinds = block[offsets]
        offsets += start
        for out, byte in zip(found, (10, 123, 125), strict=True):
            out.append(offsets[kinds == byte])
    empty = np.zeros(0, dtype=np.int64)
    newline, open_brace, close_brace = (np.concatenate(f).astype(np.int64) if f else empty for f in found)
    return newline, open_brace, close_brace


def _first_in_line(positions: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Offset of the first of ``positions`` inside each line [start, end); -1 when none."""
    if len(positions) == 0:
        return np.full(len(starts), -1, dtype=np.int64)
    k = np.searchsorted(positions, starts)
    candidate = positions[np.minimum(k, len(positions) - 1)]
    return np.where((k < len(positions)) & (candidate < ends), candidate, -1)


def _views(buf: np.ndarray, data: bytes, starts: np.ndarray, lengths: np.ndarray) -> pl.Series:
    """Zero-copy strings ``data[start:start+length]`` as an Arrow string_view array.

    Each view is four int32: the length, then the bytes themselves when <= 12, else a 4-byte
    prefix, buffer 0 and the offset. Offsets are int32, so ``data`` must be under 2 GiB;
    ``data`` must hold at least 12 bytes.
    """
    n = len(starts)
    lengths = np.maximum(lengths, 0)
    windows = np.lib.stride_tricks.as_strided(buf, shape=(len(buf) - 11, 12), strides=(1, 1), writeable=False)
    head = windows[np.minimum(starts, len(buf) - 12)]
    for i in np.flatnonzero(starts > len(buf) - 12):
        piece = np.frombuffer(data[starts[i] : starts[i] + 12], dtype=np.uint8)
        head[i] = 0
        head[i, : len(piece)] = piece
    head *= np.arange(12, dtype=np.int64)[None, :] < lengths[:, None]
    words = head.view("<i4")
    short = lengths <= 12
    views = np.empty((n, 4), dtype="<i4")
    views[:, 0] = lengths
    views[:, 1] = words[:, 0]
    views[:, 2] = np.where(short, words[:, 1], 0)
    views[:, 3] = np.where(short, words[:, 2], starts)
    arr = pa.Array.from_buffers(pa.string_view(), n, [None, pa.py_buffer(views), pa.py_buffer(data)])
    return pl.Series(arr)


def _split(data: bytes, first_line: int = 0) -> tuple[pl.DataFrame, Callable[[int], str]]:
    """One row per non-comment line: number, and name/labels/value/timestamp text.

    ``fast`` is True for lines shaped ``name{labels} value [timestamp]`` whose value and
    timestamp parse and whose text after the first ``}`` holds no quote; the other rows go to
    :func:`_split_line`. Cuts happen at newline, ``{`` and ``}`` bytes, never inside a
    multi-byte UTF-8 character. Also returns ``raw(n)``: line ``n`` without its line ending.
    """
    if len(data) < 12:
        # _views reads 12-byte windows; blank lines are skipped, so padding changes nothing.
        data += b"\n" * (12 - len(data))
    buf = np.frombuffer(data, dtype=np.uint8)
    newlines, open_braces, close_braces = _delimiters(buf)
    starts = np.concatenate((np.zeros(1, dtype=np.int64), newlines + 1))
    ends = np.concatenate((newlines, np.array([len(buf)], dtype=np.int64)))
    if starts[-1] == len(buf):
        starts, ends = starts[:-1], ends[:-1]
    po = _first_in_line(open_braces, starts, ends)
    pc = _first_in_line(close_braces, starts, ends)
    lengths = ends - starts
    first = np.where(lengths > 0, buf[np.minimum(starts, len(buf) - 1)], 0)
    comment = first == ord("#")
    shaped = (po > starts) & (pc > po) & (first != ord(" ")) & (first != ord("\t")) & ~comment
    zero = np.zeros_like(starts)
    frame = pl.DataFrame(
        {
            "source_line": pl.Series(
                np.arange(first_line + 1, first_line + len(starts) + 1, dtype=np.uint32)
            ),
            "comment": comment,
            "shaped": shaped,
            "name": _views(buf, data, starts, np.where(shaped, po - starts, zero)),
            "labels": _views(buf, data, po + 1, np.where(shaped, pc - po - 1, zero)),
            "tail": _views(buf, data, pc + 1, np.where(shaped, ends - pc - 1, zero)),
        }
    )
    tail = pl.col("tail")
    stripped = tail.str.strip_chars(" \t\r")
    space = stripped.str.find(" ", literal=True)

    def raw(number: int) -> str:
        i = number - first_line - 1
        return data[starts[i] : ends[i]].decode("utf-8").rstrip("\r")

    split = (
        frame.lazy()
        .filter(~pl.col("comment"))
        .with_columns(
            vraw=pl.when(space.is_null()).then(stripped).otherwise(stripped.str.slice(0, space)),
            traw=stripped.str.slice(space + 1),
            tail_ok=tail.str.starts_with(" ") | tail.str.starts_with("\t"),
        )
        .with_columns(_value_expr(), _ts_ms_expr())
        .with_columns(
            fast=(
                pl.col("shaped")
                & pl.col("tail_ok")
                & pl.col("value").is_not_null()
                & (pl.col("traw").is_null() | pl.col("ts_ms").is_not_null())
            ).fill_null(False)
        )
        .drop("comment", "shaped", "tail", "tail_ok")
        .collect()
    )
    return split, raw


def _to_utf8(data: str | bytes) -> bytes:
    if isinstance(data, str):
        try:
            return data.encode("utf-8")
        except UnicodeEncodeError:
            return data.encode("utf-8", "replace")
    if data.isascii():
        return data
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("utf-8", "replace").encode("utf-8")
    return data


def _check_aware(scraped_at: datetime) -> datetime:
    if scraped_at.tzinfo is None or scraped_at.utcoffset() is None:
        raise ValueError("scraped_at must be timezone-aware (UTC); got a naive datetime")
    return scraped_at.astimezone(UTC)


def parse_text(data: str | bytes, *, source: str, scraped_at: datetime) -> FeedBatch:
    """Parse dcgm-exporter ``/metrics`` text (Prometheus text exposition format 0.0.4).

    ``source`` names the input (URL or file) and is written on every row. ``scraped_at`` must
    be timezone-aware; it is ``ts`` for lines without their own timestamp. ``bytes`` that are
    not valid UTF-8 are decoded with U+FFFD replacement characters. ``source_line`` is the
    1-based line number in ``data``.
    """
    scraped_at = _check_aware(scraped_at)
    buf = _to_utf8(data)
    if not buf:
        return _empty_batch()
    batches = []
    first_line = 0
    for chunk in _chunks(buf, _MAX_CHUNK):
        batches.append(_parse_chunk(chunk, first_line=first_line, source=source, scraped_at=scraped_at))
        first_line += chunk.count(b"\n")
    if len(batches) == 1:
        return batches[0]
    return FeedBatch(
        rows=pl.concat([b.rows for b in batches]),
        quarantine=pl.concat([b.quarantine for b in batches]),
        rows_in=sum(b.rows_in for b in batches),
    )


_MAX_CHUNK = 1 << 30


def _chunks(buf: bytes, size: int) -> Iterator[bytes]:
    """Pieces of at most about ``size`` bytes, each ending just after a newline (the last may not)."""
    start = 0
    while len(buf) - start > size:
        cut = buf.rfind(b"\n", start, start + size)
        if cut < 0:
            cut = buf.find(b"\n", start + size)
            if cut < 0:
                break
        yield buf[start : cut + 1]
        start = cut + 1
    if start < len(buf):
        yield buf[start:]


def _parse_chunk(buf: bytes, *, first_line: int, source: str, scraped_at: datetime) -> FeedBatch:
    """Parse one chunk whose first line is line ``first_line + 1`` of the whole input."""
    split, raw = _split(buf, first_line)
    fast = split.filter(pl.col("fast")).select(
        "source_line", "name", "labels", "vraw", "traw", "value", "ts_ms"
    )
    odd = split.filter(~pl.col("fast"))["source_line"].to_list()
    slow_rows, slow_quarantine, skipped = _slow_path(odd, raw)
    pre = (
        pl.concat([fast, slow_rows], how="vertical_relaxed").sort("source_line") if slow_rows.height else fast
    )
    rows, quarantine = _finish(pre, source=source, scraped_at=scraped_at, raw=raw)
    if slow_quarantine:
        extra_q = pl.DataFrame(
            [(source, n, text, f"line {n}: {reason}") for n, text, reason in slow_quarantine],
            schema=DCGM_QUARANTINE_SCHEMA,
            orient="row",
        )
        quarantine = pl.concat([quarantine, extra_q]).sort("source_line")
    return FeedBatch(rows=rows, quarantine=quarantine, rows_in=split.height - skipped)


def _value_expr() -> pl.Expr:
    return pl.col("vraw").cast(pl.Float64, strict=False).alias("value")


def _ts_ms_expr() -> pl.Expr:
    return pl.col("traw").cast(pl.Int64, strict=False).alias("ts_ms")


def _slow_path(
    numbers: list[int], raw: Callable[[int], str]
) -> tuple[pl.DataFrame, list[tuple[int, str, str]], int]:
    """Tokenize the lines the fast path did not take; returns (rows, quarantine, skipped)."""
    out: dict[str, list[Any]] = {"source_line": [], "name": [], "labels": [], "vraw": [], "traw": []}
    quarantine: list[tuple[int, str, str]] = []
    skipped = 0
    for number in numbers:
        text = raw(number)
        stripped = text.strip(" \t\r")
        if not stripped or stripped.startswith("#"):
            skipped += 1
            continue
        try:
            name, block, vraw, traw = _split_line(text)
        except _LineError as exc:
            quarantine.append((number, text, str(exc)))
            continue
        for key, value in (("source_line", number), ("name", name), ("labels", block), ("vraw", vraw)):
            out[key].append(value)
        out["traw"].append(traw)
    return (
        pl.DataFrame(out, schema=_PRE_SCHEMA).with_columns(_value_expr(), _ts_ms_expr()),
        quarantine,
        skipped,
    )


_PRE_SCHEMA: dict[str, pl.DataType] = {
    "source_line": pl.UInt32(),
    "name": pl.String(),
    "labels": pl.String(),
    "vraw": pl.String(),
    "traw": pl.String(),
}


def _finish(
    pre: pl.DataFrame, *, source: str, scraped_at: datetime | None, raw: Callable[[int], str]
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """From (source_line, name, labels, vraw, traw) rows to accepted and quarantined frames.

    ``traw`` NULL means the line had no timestamp; ``ts`` is then ``scraped_at``. ``raw(n)``
    gives the input text of row ``n`` for the quarantine.
    """
    if "value" not in pre.columns:
        pre = pre.with_columns(_value_expr(), _ts_ms_expr())
    names = pre["name"].unique().to_list()
    bad_names = {
        n: f"invalid metric name {n!r}" for n in names if n is None or not _METRIC_NAME_RE.fullmatch(n)
    }
    encoded = pac.dictionary_encode(
        pre["labels"].fill_null("").to_arrow(compat_level=pl.CompatLevel.newest())
    )
    label_table = _label_table(encoded.dictionary.to_pylist())
    joined = pre.lazy().with_columns(
        lid=pl.Series(encoded.indices),
        label_error=label_table["label_error"].gather(pl.Series(encoded.indices)),
    )
    if bad_names:
        name_errors = pl.LazyFrame(
            {"name": list(bad_names), "name_error": list(bad_names.values())},
            schema={"name": pl.String(), "name_error": pl.String()},
        )
        joined = joined.join(name_errors, on="name", how="left", maintain_order="left", nulls_equal=True)
    else:
        joined = joined.with_columns(name_error=pl.lit(None, dtype=pl.String))
    value, ts_ms, traw = pl.col("value"), pl.col("ts_ms"), pl.col("traw")
    is_bad = (
        pl.col("name_error").is_not_null()
        | pl.col("label_error").is_not_null()
        | value.is_null()
        | (traw.is_not_null() & ts_ms.is_null())
        | (ts_ms.abs() > _MAX_ABS_TS_MS).fill_null(False)
        | value.is_nan()
        | value.is_infinite()
        | (value >= BLANK_THRESHOLD)
        | value.is_in(_FP64_BLANKS)
    ).fill_null(True)
    joined_df = joined.with_columns(_bad=is_bad).collect()
    good = joined_df.filter(~pl.col("_bad"))
    label_cols = label_table.select(*LABEL_COLUMNS, "extra_labels").select(pl.all().gather(good["lid"]))
    ts_default = pl.lit(scraped_at, dtype=UTC_TS) if scraped_at is not None else pl.lit(None, dtype=UTC_TS)
    rows = (
        good.select(
            ts=pl.when(ts_ms.is_null())
            .then(ts_default)
            .otherwise(pl.from_epoch(ts_ms, time_unit="ms").dt.replace_time_zone("UTC"))
            .cast(UTC_TS),
            metric=pl.col("name"),
            value=value,
            source=pl.lit(source, dtype=pl.String),
            source_line=pl.col("source_line").cast(pl.Int32),
        )
        .hstack(label_cols)
        .select(DCGM_SAMPLE_SCHEMA.keys())
    )
    bad = joined_df.filter(pl.col("_bad"))
    quarantine = bad.select(
        source=pl.lit(source, dtype=pl.String),
        source_line=pl.col("source_line").cast(pl.Int32),
        raw=pl.Series([raw(n) for n in bad["source_line"].to_list()], dtype=pl.String),
        reason=pl.format("line {}: {}", pl.col("source_line"), _reason_expr()),
    )
    return rows, quarantine


def _reason_expr() -> pl.Expr:
    """Why a row is quarantined; evaluated on quarantined rows only (it formats strings)."""
    vraw, traw, value = pl.col("vraw"), pl.col("traw"), pl.col("value")
    return (
        pl.when(pl.col("name_error").is_not_null())
        .then(pl.col("name_error"))
        .when(pl.col("label_error").is_not_null())
        .then(pl.col("label_error"))
        .when(value.is_null())
        .then(pl.format("invalid sample value '{}'", vraw))
        .when(traw.is_not_null() & pl.col("ts_ms").is_null())
        .then(pl.format("invalid timestamp '{}' (expected integer milliseconds)", traw))
        .when(pl.col("ts_ms").abs() > _MAX_ABS_TS_MS)
        .then(pl.format("timestamp {} ms is out of range", traw))
        .when(value.is_nan())
        .then(pl.format("value {} is a blank (no data)", vraw))
        .when(value.is_infinite())
        .then(pl.format("value {} is not a finite sample", vraw))
        .when(value >= BLANK_THRESHOLD)
        .then(pl.format("value {} is a DCGM blank sentinel (>= 9.2e18, no data)", vraw))
        .otherwise(pl.format("value {} is a DCGM fp64 blank sentinel (no data)", vraw))
    )


def _empty_batch() -> FeedBatch:
    return FeedBatch(
        rows=pl.DataFrame(schema=DCGM_SAMPLE_SCHEMA),
        quarantine=pl.DataFrame(schema=DCGM_QUARANTINE_SCHEMA),
        rows_in=0,
    )


def parse_file(
    path: str | Path, *, source: str | None = None, scraped_at: datetime | None = None
) -> FeedBatch:
    """Parse a saved ``/metrics`` text file.

    ``source=None``: the path as given. ``scraped_at=None``: the file's modification time
    (UTC), used for lines without their own timestamp.
    """
    p = Path(path)
    if scraped_at is None:
        scraped_at = datetime.fromtimestamp(p.stat().st_mtime, tz=UTC)
    return parse_text(p.read_bytes(), source=str(path) if source is None else source, scraped_at=scraped_at)


def scrape(url: str, timeout: float = 10.0, *, source: str | None = None) -> FeedBatch:
    """GET a dcgm-exporter endpoint (``http``/``https`` only) and parse the answer.

    ``ts`` of lines without a timestamp is the time the answer arrived. ``source=None``: the
    URL. Raises :class:`ScrapeError` naming the URL on a refused connection, a timeout or
    a non-200 status.
    """
    scheme = urllib.parse.urlsplit(url).scheme
    if scheme not in ("http", "https"):
        raise ScrapeError(f"scrape {url!r}: only http and https URLs are allowed, not {scheme or 'none'!r}")
    request = urllib.request.Request(url, headers={"Accept": "text/plain;version=0.0.4"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            body = response.read()
            status = response.status
    except urllib.error.HTTPError as exc:
        raise ScrapeError(f"scrape {url}: HTTP {exc.code} {exc.reason}") from exc
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ScrapeError(f"scrape {url}: {reason}") from exc
    if status != 200:
        raise ScrapeError(f"scrape {url}: HTTP {status}")
    return parse_text(body, source=url if source is None else source, scraped_at=datetime.now(UTC))


def parse_query_range(obj: str | bytes | Mapping[str, Any], source: str) -> FeedBatch:
    """Parse a Prometheus ``/api/v1/query_range`` (matrix) or ``/api/v1/query`` (vector) answer.

    ``source_line`` numbers the points 1.. in answer order, series by series; ``raw`` of a
    quarantined point is ``{"metric": ..., "value": [ts, "v"]}`` as JSON. Timestamps are float
    seconds. Raises :class:`PrometheusQueryError` when ``status`` is not ``success`` (with
    Prometheus' ``errorType``/``error``) or the result type is neither matrix nor vector.
    """
    doc = json.loads(obj) if isinstance(obj, (str, bytes)) else obj
    if not isinstance(doc, Mapping):
        raise PrometheusQueryError(f"{source}: expected a JSON object, got {type(doc).__name__}")
    if doc.get("status") != "success":
        raise PrometheusQueryError(
            f"{source}: Prometheus query failed: status={doc.get('status')!r} "
            f"errorType={doc.get('errorType')!r} error={doc.get('error')!r}"
        )
    data = doc.get("data") or {}
    result_type = data.get("resultType")
    if result_type not in ("matrix", "vector"):
        raise PrometheusQueryError(f"{source}: resultType {result_type!r} is not 'matrix' or 'vector'")
    out: dict[str, list[Any]] = {"source_line": [], "name": [], "labels": [], "vraw": [], "traw": []}
    raws: list[str] = []
    number = 0
    for series in data.get("result") or []:
        metric = dict(series.get("metric") or {})
        points = series.get("values") if result_type == "matrix" else [series.get("value")]
        name = metric.pop("__name__", None)
        block = _render_block(metric)
        for point in points or []:
            number += 1
            out["source_line"].append(number)
            raws.append(json.dumps({"metric": series.get("metric"), "value": point}, sort_keys=True))
            out["name"].append(name)
            out["labels"].append(block)
            ts_ms, vraw = _point(point)
            out["vraw"].append(vraw)
            out["traw"].append(ts_ms)
    pre = pl.DataFrame(out, schema=_PRE_SCHEMA)
    if pre.height == 0:
        return _empty_batch()
    rows, quarantine = _finish(pre, source=source, scraped_at=None, raw=lambda n: raws[n - 1])
    return FeedBatch(rows=rows, quarantine=quarantine, rows_in=pre.height)


def _point(point: Any) -> tuple[str | None, str]:
    """(timestamp as integer ms text or an unparseable marker, value text) of ``[ts, "v"]``."""
    if not isinstance(point, (list, tuple)) or len(point) != 2:
        return "malformed-point", "malformed-point"
    ts, value = point
    try:
        seconds = float(ts)
    except (TypeError, ValueError):
        return f"{ts!r}", str(value)
    if not math.isfinite(seconds):
        return f"{ts!r}", str(value)
    return str(round(seconds * 1000)), str(value)


def _render_block(labels: Mapping[str, Any]) -> str:
    """Render labels as a text-format label block (the inverse of :func:`parse_label_block`)."""
    parts = []
    for k, v in labels.items():
        text = str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        parts.append(f'{k}="{text}"')
    return ",".join(parts)


_HISTORY_REQUIRED = tuple(c for c in DCGM_SAMPLE_SCHEMA if c not in ("source", "source_line", "extra_labels"))


def read_history_parquet(paths: str | Path | Iterable[str | Path], *, source: str | None = None) -> FeedBatch:
    """Read DCGM history saved as Parquet in the ``raw_dcgm_samples`` schema.

    Required columns: every ``raw_dcgm_samples`` column except ``source``, ``source_line``
    and ``extra_labels`` (optional; NULL when absent). ``source`` and ``source_line`` are
    rewritten: ``source=None`` means the file's path, ``source_line`` is the 1-based row number
    in each file. A naive ``ts`` is taken as UTC. Blank/sentinel values are quarantined as in
    :func:`parse_text`. Raises :class:`FeedSchemaError` naming every missing column.
    """
    path_list = [paths] if isinstance(paths, (str, Path)) else list(paths)
    batches = [_read_one_parquet(Path(p), source) for p in path_list]
    if not batches:
        return _empty_batch()
    return FeedBatch(
        rows=pl.concat([b.rows for b in batches]),
        quarantine=pl.concat([b.quarantine for b in batches]),
        rows_in=sum(b.rows_in for b in batches),
    )


def _read_one_parquet(path: Path, source: str | None) -> FeedBatch:
    schema = pl.read_parquet_schema(path)
    missing = [c for c in _HISTORY_REQUIRED if c not in schema]
    if missing:
        raise FeedSchemaError(f"DCGM history {path}", missing)
    src = str(path) if source is None else source
    df = pl.read_parquet(
        path, columns=[c for c in DCGM_SAMPLE_SCHEMA if c in schema and c not in ("source", "source_line")]
    )
    ts = pl.col("ts")
    if isinstance(schema["ts"], pl.Datetime) and schema["ts"].time_zone is None:
        ts = ts.dt.replace_time_zone("UTC")
    elif isinstance(schema["ts"], pl.Datetime):
        ts = ts.dt.convert_time_zone("UTC")
    df = df.with_row_index("source_line", offset=1).with_columns(
        ts.cast(UTC_TS),
        pl.col("value").cast(pl.Float64, strict=False),
        pl.col("gpu").cast(pl.Int32, strict=False),
        source=pl.lit(src, dtype=pl.String),
    )
    if "extra_labels" not in df.columns:
        df = df.with_columns(extra_labels=pl.lit(None, dtype=pl.String))
    v = pl.col("value")
    reason = (
        pl.when(pl.col("ts").is_null())
        .then(pl.lit("ts is NULL"))
        .when(pl.col("metric").is_null())
        .then(pl.lit("metric is NULL"))
        .when(v.is_null())
        .then(pl.lit("value is NULL"))
        .when(v.is_nan())
        .then(pl.lit("value NaN is a blank (no data)"))
        .when(v.is_infinite())
        .then(pl.format("value {} is not a finite sample", v))
        .when(v >= BLANK_THRESHOLD)
        .then(pl.format("value {} is a DCGM blank sentinel (>= 9.2e18, no data)", v))
        .when(v.is_in(_FP64_BLANKS))
        .then(pl.format("value {} is a DCGM fp64 blank sentinel (no data)", v))
    )
    df = df.with_columns(reason=reason)
    rows = df.filter(pl.col("reason").is_null()).select(
        [pl.col(c).cast(t) for c, t in DCGM_SAMPLE_SCHEMA.items()]
    )
    bad = df.filter(pl.col("reason").is_not_null())
    raw = [json.dumps(r, default=str, sort_keys=True) for r in bad.drop("reason", "source").to_dicts()]
    quarantine = pl.DataFrame(
        {
            "source": [src] * bad.height,
            "source_line": bad["source_line"].cast(pl.Int32),
            "raw": raw,
            "reason": bad.select(
                pl.format("row {}: {}", pl.col("source_line"), pl.col("reason"))
            ).to_series(),
        },
        schema=DCGM_QUARANTINE_SCHEMA,
    )
    return FeedBatch(rows=rows, quarantine=quarantine, rows_in=df.height)
