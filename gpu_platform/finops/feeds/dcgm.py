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

Speed: the input is cut at newlines into pieces (about two per core, none under 4 MiB, none over
8 MiB, so that a piece is scanned and parsed while its bytes are in the cache), parsed on a thread
per core (numpy, polars and Arrow release the GIL); each piece numbers its lines from 1 and is
renumbered once the earlier pieces' newlines are known. The per-byte work is done by a compiled
scan (the C extension ``_dcgm_scan``, built at install when a C compiler is present;
:data:`SCAN_PATH` says which scan is in use): in one pass over a piece it finds each line's shape
and offsets by the rule below, numbers the metric names and label blocks with hash tables (a block
is first compared with the one that followed the previous line's block last time, which is where
exposition text repeats its series, so most lines are numbered without hashing), reads decimal
values of up to 19 significant digits and a power of ten of at most 22 correctly rounded (the 17
digits of Go's shortest float text, as Prometheus' ``/federate`` writes values, included; the value
the cast gives, bit for bit; anything else is cast as below) and timestamps, and recognises the
sentinels; the rest is the same code on both scans. Without the extension, numpy does it: one numpy pass over a piece finds every
newline, ``{`` and ``}``; a line whose first delimiter is a ``{`` and whose last is a ``}``
followed by one space is a fast-path line: its metric name (to the ``{``), label block (to the
last ``}``) and value become zero-copy Arrow string views into the input, built from the offsets.
Arrow dictionary-encodes the label blocks (metric names by their runs; when metrics interleave,
as when HELP/TYPE precede every line, the (name, block) pairs, and only the distinct pairs are
split), so each distinct block is parsed once in Python and each row carries an integer id, not
a copy of its labels, until the label columns are gathered once for the accepted rows. DCGM's
int64 blank sentinels are recognised by their bytes (19 digits from ``92233720``); polars casts
the other values and the timestamps. Quarantined fast-path lines are built column-wise: the raw
text as views, and per reason one ``format`` over every piece, or, when every line has the same
detail (one sentinel repeated), the reason texts written into one buffer by numpy. No Python
object is created per line. A line the fast path cannot prove well-formed (no labels, a leading
blank, a delimiter after the value, an unparseable value or timestamp) goes through
:func:`_split_line`, a character-level tokenizer, so correctness never depends on the fast path.
Lines end at ``\\n`` (a trailing ``\\r`` is ignored); leading blanks are tolerated.

Bounds: a line longer than :data:`MAX_LINE_BYTES` (64 KiB) is quarantined before any parsing (its
first 200 bytes kept; an overlong comment is dropped), so a 30 MB label costs one byte scan (the
compiled scan sets such a line apart as it meets it; the numpy scan drops them in a pass first);
a label value longer than :data:`MAX_LABEL_VALUE_CHARS` (4,096 characters) quarantines its line.
dcgm-exporter's own lines are a few hundred bytes (label values are Kubernetes names of at most
253 characters, UUIDs, driver versions).
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
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

try:
    from gpu_platform.finops.feeds import _dcgm_scan
except ImportError:  # installed without a C compiler: the numpy scan does the same, slower
    _dcgm_scan = None
if _dcgm_scan is not None and getattr(_dcgm_scan, "ABI", 1) != 2:
    _dcgm_scan = None  # built from an older source (rebuilt by `make install`): not used

__all__ = [
    "LABEL_COLUMNS",
    "SCAN_PATH",
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

SCAN_PATH: str = "compiled" if _dcgm_scan is not None else "numpy"
"""How :func:`parse_text` scans its input: ``"compiled"`` (the C extension
``gpu_platform.finops.feeds._dcgm_scan``, built at install when a C compiler is present) or
``"numpy"`` (its fallback; the same result, slower)."""
_HASH_SEED = int.from_bytes(os.urandom(8), "little")
"""Seeds the compiled scan's hash tables (so that no input can be made to collide in them)."""

MAX_LINE_BYTES = 64 << 10
"""The longest exposition line read (bytes, newline not counted); a longer one is quarantined."""
MAX_LABEL_VALUE_CHARS = 4096
"""The longest label value read (characters, escapes decoded); a longer one quarantines its line."""

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


_SIMPLE_PAIR = r'[ \t]*[a-zA-Z_][a-zA-Z0-9_]*[ \t]*=[ \t]*"[^"\\]*"[ \t]*'
_SIMPLE_BLOCK_RE = re.compile(rf"(?:{_SIMPLE_PAIR},)*(?:{_SIMPLE_PAIR},?)?[ \t]*")
_SIMPLE_PAIR_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"([^"\\]*)"')


def _block_columns(block: str) -> tuple[dict[str, Any], str | None]:
    """The label columns of one label block and its error (None when fine; the columns are then
    all NULL). A block without escapes is read by one regular expression; any other, or one the
    expression does not take, by :func:`parse_label_block`, which says what is wrong."""
    labels: Mapping[str, str] | None = None
    if _SIMPLE_BLOCK_RE.fullmatch(block):
        pairs = _SIMPLE_PAIR_RE.findall(block)
        if len({name for name, _ in pairs}) == len(pairs):
            labels = dict(pairs)
    try:
        labels = labels if labels is not None else parse_label_block(block)
        long = next((name for name, value in labels.items() if len(value) > MAX_LABEL_VALUE_CHARS), None)
        if long is not None:
            raise _LineError(f"value of label {long!r} is {len(labels[long])} characters, over the limit of "
                             f"{MAX_LABEL_VALUE_CHARS}")
        cols, error = _labels_to_columns(labels)
    except _LineError as exc:
        error = str(exc)
    if error is not None:
        cols = dict.fromkeys((*LABEL_COLUMNS, "extra_labels"))
    return cols, error


def _label_table(blocks: list[str | None], parsed: list[tuple[dict[str, Any], str | None]] | None = None) -> pl.DataFrame:
    """One row per distinct label block: its columns and ``label_error`` (NULL when fine).
    ``parsed``: :func:`_block_columns` of each block, when the caller has it already."""
    rows: dict[str, list[Any]] = {c: [] for c in ("labels", *LABEL_COLUMNS, "extra_labels", "label_error")}
    for i, block in enumerate(blocks):
        cols, error = _block_columns(block or "") if parsed is None else parsed[i]
        rows["labels"].append(block)
        for c in (*LABEL_COLUMNS, "extra_labels"):
            rows[c].append(cols[c])
        rows["label_error"].append(error)
    schema = {"labels": pl.String(), "label_error": pl.String(), "extra_labels": pl.String()}
    schema.update({c: DCGM_SAMPLE_SCHEMA[c] for c in LABEL_COLUMNS})
    return pl.DataFrame(rows, schema={c: schema[c] for c in rows})


def _delimiters(buf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted offsets of every newline, ``{``, ``|`` and ``}`` in ``buf``, and the byte at each.

    One pass in 1 MiB blocks, so that its temporaries stay in cache. ``{``, ``|`` and ``}`` are
    the bytes 123..125: one subtraction and one comparison find the braces (``|``, rare in this
    text, is dropped by the caller).
    """
    step = 1 << 20
    size = max(1, min(step, len(buf)))
    shifted = np.empty(size, dtype=np.uint8)
    hit = np.empty(size, dtype=np.bool_)
    newline = np.empty(size, dtype=np.bool_)
    found: list[np.ndarray] = [np.zeros(0, dtype=np.int64)]
    for start in range(0, len(buf), step):
        block = buf[start : start + step]
        k = len(block)
        np.subtract(block, 123, out=shifted[:k])
        np.less_equal(shifted[:k], 2, out=hit[:k])
        np.equal(block, 10, out=newline[:k])
        hit[:k] |= newline[:k]
        offsets = np.flatnonzero(hit[:k])
        offsets += start
        found.append(offsets)
    offsets = np.concatenate(found)
    return offsets, buf[offsets]


# _LOW_BYTES32[k] / _LOW_BYTES64[k]: a little-endian word whose first k bytes are 0xFF
_LOW_BYTES32 = np.array([(1 << (8 * k)) - 1 for k in range(5)], dtype=np.uint32)
_LOW_BYTES64 = np.array([(1 << (8 * k)) - 1 for k in range(9)], dtype=np.uint64)


class _Buffer:
    """One chunk of input as bytes, and every (unaligned) little-endian uint32 and uint64 of it.

    The input is not copied (a chunk of under 16 bytes is padded with newlines: ``length`` is
    the chunk's own, ``size`` the padded one): a view near the end reads its bytes from a
    padded copy of the last 16.
    """

    def __init__(self, data: bytes | memoryview) -> None:
        self.length = len(data)
        if len(data) < 16:
            data = bytes(data) + b"\n" * (16 - len(data))
        self.data = data
        self.size = len(data)
        self.bytes = np.frombuffer(data, dtype=np.uint8)
        self.words = np.ndarray(shape=(self.size - 3,), dtype="<u4", buffer=data, strides=(1,))
        self.dwords = np.ndarray(shape=(self.size - 7,), dtype="<u8", buffer=data, strides=(1,))
        self._tail = np.frombuffer(bytes(data[-16:]) + bytes(16), dtype=np.uint8)

    def strings(self, starts: np.ndarray, lengths: np.ndarray) -> pl.Series:
        """Zero-copy strings ``data[start:start+length]`` as a String Series (Arrow string_view).

        Each view is four 32-bit words: the length, then the bytes themselves when <= 12, else
        a 4-byte prefix, buffer 0 and the offset (Arrow reads them as int32, so a chunk is at most
        ``_MAX_CHUNK``, 1 GiB). No string is copied. A view is built as two uint64 words from
        two unaligned loads (the bytes at ``start`` and at ``start + 4``) and masks (the compiled
        scan's module writes them in one loop).
        """
        n = len(starts)
        if SCAN_PATH == "compiled":
            views = _dcgm_scan.views(
                self.data, np.ascontiguousarray(starts, dtype=np.int64), np.ascontiguousarray(lengths, dtype=np.int64)
            )
            return pl.Series(
                pa.Array.from_buffers(pa.string_view(), n, [None, pa.py_buffer(views), pa.py_buffer(self.data)])
            )
        lengths = np.maximum(lengths, 0)
        views = np.empty((n, 2), dtype="<u8")
        safe = np.minimum(starts, self.size - 12)
        short = lengths <= 12
        head = self.words[safe] & _LOW_BYTES32[np.minimum(lengths, 4)]
        views[:, 0] = head
        views[:, 0] <<= 32
        views[:, 0] |= lengths.astype(np.uint64)
        if short.all():
            views[:, 1] = self.dwords[safe + 4] & _LOW_BYTES64[np.clip(lengths - 4, 0, 8)]
        elif not short.any():
            views[:, 1] = starts.astype(np.uint64) << 32
        else:
            views[:, 1] = np.where(
                short,
                self.dwords[safe + 4] & _LOW_BYTES64[np.clip(lengths - 4, 0, 8)],
                starts.astype(np.uint64) << 32,
            )
        late = np.flatnonzero(safe != starts)
        if len(late):
            # a short string within 12 bytes of the end (a long one starts earlier than that)
            words = views.view("<u4")
            for i in late.tolist():
                k = int(lengths[i])
                lo = int(starts[i]) - (self.size - 16)
                inline = np.zeros(12, dtype=np.uint8)
                inline[:k] = self._tail[lo : lo + k]
                words[i, 1:] = inline.view("<u4")
        arr = pa.Array.from_buffers(pa.string_view(), n, [None, pa.py_buffer(views), pa.py_buffer(self.data)])
        return pl.Series(arr)


def _encode(values: pl.Series, *, distinct: bool = True) -> tuple[np.ndarray, list[str]]:
    """Dictionary-encode ``values``: (the code of each value, the distinct values in code order,
    numbered in order of first appearance; an empty list unless ``distinct``)."""
    encoded = pac.dictionary_encode(values.to_arrow(compat_level=pl.CompatLevel.newest()))
    return encoded.indices.to_numpy(zero_copy_only=False), encoded.dictionary.to_pylist() if distinct else []


class _Dictionary:
    """The distinct metric names and label blocks of one ``parse_text`` call, each checked or
    parsed once (a scrape repeats one label block per GPU across all of its metrics)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.names: dict[str, int] = {}
        self.name_errors: list[str | None] = []
        self.blocks: dict[str, int] = {}
        self.block_list: list[str] = []
        self.block_parsed: list[tuple[dict[str, Any], str | None]] = []
        self.block_errors: list[str | None] = []

    def name_ids(self, distinct: list[str]) -> np.ndarray:
        with self.lock:
            return self._name_ids(distinct)

    def block_ids(self, distinct: list[str]) -> np.ndarray:
        with self.lock:
            return self._block_ids(distinct)

    def _name_ids(self, distinct: list[str]) -> np.ndarray:
        ids = np.empty(len(distinct), dtype=np.uint32)
        for i, name in enumerate(distinct):
            gid = self.names.get(name)
            if gid is None:
                gid = self.names[name] = len(self.name_errors)
                self.name_errors.append(None if _METRIC_NAME_RE.fullmatch(name) else f"invalid metric name {name!r}")
            ids[i] = gid
        return ids

    def _block_ids(self, distinct: list[str]) -> np.ndarray:
        ids = np.empty(len(distinct), dtype=np.uint32)
        for i, block in enumerate(distinct):
            gid = self.blocks.get(block)
            if gid is None:
                gid = self.blocks[block] = len(self.block_list)
                self.block_list.append(block)
                parsed = _block_columns(block)
                self.block_parsed.append(parsed)
                self.block_errors.append(parsed[1])
            ids[i] = gid
        return ids

    def errors(self, which: str) -> tuple[np.ndarray, pl.Series]:
        """(is bad, error text) by id, for ``names`` or ``blocks``."""
        with self.lock:
            errors = list(self.name_errors if which == "names" else self.block_errors)
        return np.array([e is not None for e in errors], dtype=np.bool_), pl.Series(errors, dtype=pl.String)

    def name_series(self) -> pl.Series:
        return pl.Series(list(self.names), dtype=pl.String)


class _Chunk:
    """What :func:`_parse_chunk` returns, numbered from the piece's own first line (the pieces are
    parsed independently; :meth:`shift` renumbers them once the earlier pieces' newlines are
    known): the fast rows as arrays (ids into the :class:`_Dictionary`), their quarantine in
    parts (one per reason template: line numbers, raw text, detail), the lines left to the
    tokenizer (their pre-rows and their quarantine), counts."""

    def __init__(self) -> None:
        self.fast: dict[str, np.ndarray] = {c: np.zeros(0, dtype=t) for c, t in _FAST_DTYPES.items()}
        self.quarantine: list[tuple[str, np.ndarray, pl.Series, pl.Series]] = []
        self.slow = pl.DataFrame(schema=_PRE_SCHEMA)
        self.slow_raw: dict[int, str] = {}
        self.slow_quarantine: list[tuple[int, str, str]] = []
        self.rows_in = 0
        self.newlines = 0

    def shift(self, lines: int) -> None:
        """Renumber the lines of this piece as if ``lines`` lines came before it."""
        if not lines:
            return
        self.fast["source_line"] = self.fast["source_line"] + np.int32(lines)
        self.quarantine = [(t, numbers + np.int32(lines), raw, d) for t, numbers, raw, d in self.quarantine]
        if self.slow.height:
            self.slow = self.slow.with_columns(pl.col("source_line") + lines)
        self.slow_raw = {k + lines: v for k, v in self.slow_raw.items()}
        self.slow_quarantine = [(n + lines, text, reason) for n, text, reason in self.slow_quarantine]


_FAST_DTYPES: dict[str, type] = {
    "source_line": np.int32,
    "name_id": np.uint32,
    "block_id": np.uint32,
    "value": np.float64,
    "ts_us": np.int64,
}
_FAST_SCHEMA: dict[str, pl.DataType] = {
    "source_line": pl.Int32(),
    "name_id": pl.UInt32(),
    "block_id": pl.UInt32(),
    "value": pl.Float64(),
    "ts_us": pl.Int64(),
}


def _parse_chunk(buf: _Buffer, *, scraped_at: datetime, dictionary: _Dictionary) -> _Chunk:
    """Parse one piece of the input, its lines numbered from 1 (see :meth:`_Chunk.shift`).

    The piece is scanned and parsed in one go, so that its bytes are still in the cache.

    The fast path takes lines shaped ``name{labels} value[ timestamp]`` (no leading blank, one
    space after the last ``}``): the name runs to the first ``{``, the label block to the last
    ``}``. A block whose quotes hide a ``}`` still ends at the real one, and one that is not
    well-formed fails :func:`parse_label_block` with its reason, as the tokenizer's block would.
    Every other line goes to :func:`_split_line`.
    """
    if SCAN_PATH == "compiled":
        return _parse_chunk_compiled(buf, scraped_at=scraped_at, dictionary=dictionary)
    out = _Chunk()
    size, b = buf.length, buf.bytes
    # (numpy's take and compress are used throughout: they are several times cheaper than
    # fancy and boolean indexing)
    offsets, kinds = _delimiters(b[:size])
    is_newline = kinds == 10
    stream_nl = np.flatnonzero(is_newline)
    newlines = offsets.take(stream_nl)
    out.newlines = len(newlines)
    starts = np.concatenate((np.zeros(1, dtype=np.int64), newlines + 1))
    ends = np.concatenate((newlines, np.array([size], dtype=np.int64)))
    if starts[-1] == size:
        starts, ends = starts[:-1], ends[:-1]
    n = len(starts)
    # a fast-path candidate's first delimiter is a '{' and its last a '}': read them off the
    # delimiter stream beside each line's newlines (the stream is small and cache-resident)
    after_prev = np.empty(n, dtype=np.int64)
    after_prev[0] = 0
    after_prev[1:] = stream_nl[: n - 1] + 1
    before_next = (stream_nl[:n] if len(stream_nl) >= n else np.append(stream_nl, len(kinds))) - 1
    padded = np.append(kinds, 0)  # index -1 and len(kinds) read the 0
    cand = np.flatnonzero(
        (before_next > after_prev) & (padded.take(after_prev) == 123) & (padded.take(before_next) == 125)
    )
    first = b.take(starts)
    c_start = starts.take(cand)
    c_first = first.take(cand)
    c_po = offsets.take(after_prev.take(cand))
    keep = np.flatnonzero((c_po > c_start) & (c_first != 35) & (c_first != 32) & (c_first != 9))
    cand, c_start, c_po = cand.take(keep), c_start.take(keep), c_po.take(keep)
    c_pc = offsets.take(before_next.take(cand))
    c_end = ends.take(cand)
    c_end -= b.take(c_end - 1) == 13  # a trailing '\r' is not part of the line
    vstart = c_pc + 2
    last = size - 1
    shaped = np.flatnonzero(
        (vstart < c_end)
        & (b.take(np.minimum(c_pc + 1, last)) == 32)
        & (b.take(np.minimum(vstart, last)) != 32)
        & (b.take(c_end - 1) != 13)
    )
    fast = cand.take(shaped)
    ends[cand] = c_end
    others = (first != 35) & (ends > starts)
    others[fast] = False
    slow = [np.flatnonzero(others)]
    f_start, f_end, f_po, f_pc, f_v = (a.take(shaped) for a in (c_start, c_end, c_po, c_pc, vstart))
    v_len = f_end - f_v
    # DCGM's int64 blank sentinels are recognised by their bytes; every other value is cast
    blank, blank_text = _blank_sentinels(buf, f_v, v_len)
    rest = np.flatnonzero(~blank) if blank is not None else None
    vtext = buf.strings(f_v, v_len) if rest is None else buf.strings(f_v.take(rest), v_len.take(rest))
    as_float = vtext.cast(pl.Float64, strict=False)
    if rest is None:
        value = as_float.to_numpy(writable=True)
    else:
        value = np.full(len(fast), 1e19)
        value[rest] = as_float.to_numpy()
    ts_ms = np.zeros(len(fast), dtype=np.int64)
    has_ts = np.zeros(len(fast), dtype=np.bool_)
    failed = np.flatnonzero(as_float.is_null().to_numpy())
    unparsed = failed if rest is None else rest[failed]
    if len(unparsed):
        ok = _split_timestamps(buf, vtext, failed, unparsed, f_v, v_len, value, ts_ms, has_ts)
        if not ok.all():
            slow.append(fast[unparsed[~ok]])
            keep = np.ones(len(fast), dtype=np.bool_)
            keep[unparsed[~ok]] = False
            fast, f_start, f_end, f_po, f_pc, f_v, v_len, value, ts_ms, has_ts = (
                a[keep] for a in (fast, f_start, f_end, f_po, f_pc, f_v, v_len, value, ts_ms, has_ts)
            )
            if blank is not None:
                blank = blank[keep]
    name_len = f_po - f_start
    if np.count_nonzero(name_len[1:] != name_len[:-1]) * 4 < len(name_len):
        # metric names come in runs (a scrape prints each metric's lines together): encode the
        # runs, then the label blocks
        names = buf.strings(f_start, name_len)
        run = names.rle_id().to_numpy().astype(np.int64)
        heads = np.flatnonzero(np.diff(run, prepend=-1))
        if len(heads) * 4 < len(run):
            codes, distinct = _encode(names.gather(pl.Series(heads, dtype=pl.UInt32)))
            codes = codes[run]
        else:
            codes, distinct = _encode(names)
        name_id = dictionary.name_ids(distinct).take(codes)
        codes, distinct = _encode(buf.strings(f_po + 1, f_pc - f_po - 1))
        block_id = dictionary.block_ids(distinct).take(codes)
    else:
        # metrics interleaved (a feed that prints HELP/TYPE before each line, one GPU after
        # another): a history repeats each (metric, label block) pair once a scrape, so encode
        # the pairs (the text from the line start to the last '}') and split only the distinct
        # pairs into name and block. Arrow numbers the distinct values in order of first
        # appearance: pair k first appears where the running maximum of the codes first reaches k.
        codes, _ = _encode(buf.strings(f_start, f_pc - f_start), distinct=False)
        heads = np.flatnonzero(np.diff(np.maximum.accumulate(codes), prepend=-1) > 0)
        h_start, h_po, h_pc = f_start.take(heads), f_po.take(heads), f_pc.take(heads)
        pair_codes, distinct = _encode(buf.strings(h_start, h_po - h_start))
        name_id = dictionary.name_ids(distinct).take(pair_codes).take(codes)
        pair_codes, distinct = _encode(buf.strings(h_po + 1, h_pc - h_po - 1))
        block_id = dictionary.block_ids(distinct).take(pair_codes).take(codes)
    _fast_rows(
        out, buf, dictionary, scraped_at, fast, f_start, f_end, f_v, v_len, value, ts_ms, has_ts, name_id, block_id,
        (blank, blank_text) if blank_text is not None else None,
    )
    lines = np.concatenate(slow)
    if len(lines):

        def raw(number: int) -> str:
            i = number - 1
            return bytes(buf.data[starts[i] : ends[i]]).decode("utf-8").rstrip("\r")

        _slow_rows(out, lines, raw)
    out.rows_in += len(fast)
    return out


def _parse_chunk_compiled(buf: _Buffer, *, scraped_at: datetime, dictionary: _Dictionary) -> _Chunk:
    """:func:`_parse_chunk` with the per-byte work done by the compiled scan, in one pass over the
    piece: which lines are on the fast path (the same rule), their offsets, their metric names
    and label blocks numbered (each distinct one is then checked or parsed once, as there), their
    values and timestamps read when the text is a plain decimal number that binary64 arithmetic
    reads exactly (the value the cast gives), DCGM's int64 sentinels recognised by their bytes.
    A value the scan does not read (NaN, Inf, long mantissas, ...) is cast here as the numpy path
    casts it; everything after that is the numpy path's own code."""
    out = _Chunk()
    data = buf.data if buf.length == buf.size else memoryview(buf.data)[: buf.length]
    newlines, fast_cols, names, blocks, slow_cols, sentinel_at, sentinel_same, overlong = _dcgm_scan.scan(
        data, _HASH_SEED, MAX_LINE_BYTES
    )
    out.newlines = newlines
    o_line, o_start, o_end = (np.frombuffer(c, dtype=np.int64) for c in overlong)
    fast, f_start, f_v, f_end, v_len, ts_ms = (np.frombuffer(c, dtype=np.int64) for c in fast_cols[:6])
    value = np.frombuffer(fast_cols[6], dtype=np.float64)
    status, cause = (np.frombuffer(c, dtype=np.uint8) for c in fast_cols[7:9])
    name_code, block_code = (np.frombuffer(c, dtype=np.uint32) for c in fast_cols[9:])
    has_ts = status == 1
    blank = status == 2 if sentinel_at >= 0 else None
    blank_text = bytes(buf.data[sentinel_at : sentinel_at + 19]).decode("ascii") if sentinel_at >= 0 and sentinel_same else None
    n_start, n_len = (np.frombuffer(c, dtype=np.int64) for c in names)
    name_id = dictionary.name_ids(buf.strings(n_start, n_len).to_list()).take(name_code)
    b_start, b_len = (np.frombuffer(c, dtype=np.int64) for c in blocks)
    block_id = dictionary.block_ids(buf.strings(b_start, b_len).to_list()).take(block_code)
    s_line, s_start, s_end = (np.frombuffer(c, dtype=np.int64) for c in slow_cols)
    deferred = np.flatnonzero(status == 3)
    if len(deferred):
        # values the scan left alone: cast as the numpy path casts them
        vtext = buf.strings(f_v.take(deferred), v_len.take(deferred))
        as_float = vtext.cast(pl.Float64, strict=False)
        value[deferred] = as_float.to_numpy()
        failed = np.flatnonzero(as_float.is_null().to_numpy())
        unparsed = deferred[failed]
        if len(unparsed):
            ok = _split_timestamps(buf, vtext, failed, unparsed, f_v, v_len, value, ts_ms, has_ts)
        cause[deferred] = _value_causes(value.take(deferred), ts_ms.take(deferred), has_ts.take(deferred))
        if len(unparsed):
            if not ok.all():
                drop = unparsed[~ok]
                s_line, s_start, s_end = (
                    np.concatenate((a, b.take(drop))) for a, b in ((s_line, fast), (s_start, f_start), (s_end, f_end))
                )
                keep = np.ones(len(fast), dtype=np.bool_)
                keep[drop] = False
                fast, f_start, f_end, f_v, v_len, value, ts_ms, has_ts, name_id, block_id, cause = (
                    a[keep]
                    for a in (fast, f_start, f_end, f_v, v_len, value, ts_ms, has_ts, name_id, block_id, cause)
                )
                if blank is not None:
                    blank = blank[keep]
    _fast_rows(
        out, buf, dictionary, scraped_at, fast, f_start, f_end, f_v, v_len, value, ts_ms, has_ts, name_id, block_id,
        (blank, blank_text) if blank_text is not None else None, cause,
    )
    if len(s_line):
        spans = dict(zip((s_line + 1).tolist(), zip(s_start.tolist(), s_end.tolist(), strict=True), strict=True))

        def raw(number: int) -> str:
            start, end = spans[number]
            return bytes(buf.data[start:end]).decode("utf-8").rstrip("\r")

        _slow_rows(out, s_line, raw)
    for line, start, end in zip(o_line.tolist(), o_start.tolist(), o_end.tolist(), strict=True):
        out.slow_quarantine.append((line + 1, *_overlong_row(buf.data, start, end)))
    out.rows_in += len(fast) + len(o_line)
    return out


def _split_timestamps(
    buf: _Buffer,
    vtext: pl.Series,
    failed: np.ndarray,
    unparsed: np.ndarray,
    f_v: np.ndarray,
    v_len: np.ndarray,
    value: np.ndarray,
    ts_ms: np.ndarray,
    has_ts: np.ndarray,
) -> np.ndarray:
    """A timestamp after the value: the rows ``unparsed`` (``failed``: their index in ``vtext``,
    the value texts that did not cast) split at the first space, value and timestamp cast;
    ``value``, ``ts_ms``, ``has_ts`` and ``v_len`` of those rows are set. Returns whether each
    of them is a sample (what is not goes to the tokenizer)."""
    sub_v, sub_len = f_v[unparsed], v_len[unparsed]
    space = vtext.gather(pl.Series(failed, dtype=pl.UInt32)).str.find(" ", literal=True)
    found = space.is_not_null().to_numpy()
    cut = space.fill_null(0).to_numpy().astype(np.int64)
    v2 = buf.strings(sub_v, np.where(found, cut, sub_len)).cast(pl.Float64, strict=False)
    t2 = buf.strings(sub_v + cut + 1, np.where(found, sub_len - cut - 1, 0)).cast(pl.Int64, strict=False)
    ok = found & v2.is_not_null().to_numpy() & t2.is_not_null().to_numpy()
    value[unparsed] = v2.fill_null(0.0).to_numpy()
    ts_ms[unparsed] = t2.fill_null(0).to_numpy()
    has_ts[unparsed] = ok
    v_len[unparsed] = np.where(found, cut, sub_len)
    return ok


def _fast_rows(
    out: _Chunk,
    buf: _Buffer,
    dictionary: _Dictionary,
    scraped_at: datetime,
    fast: np.ndarray,
    f_start: np.ndarray,
    f_end: np.ndarray,
    f_v: np.ndarray,
    v_len: np.ndarray,
    value: np.ndarray,
    ts_ms: np.ndarray,
    has_ts: np.ndarray,
    name_id: np.ndarray,
    block_id: np.ndarray,
    same: tuple[np.ndarray, str] | None,
    value_cause: np.ndarray | None = None,
) -> None:
    """The fast-path lines ``fast`` (their index in the piece), read: accepted rows into
    ``out.fast``, the others into ``out.quarantine`` with their reasons. ``same``: which rows are
    int64 blank sentinels and their one text, when every one of them reads the same.
    ``value_cause``: why each value or timestamp is not a sample (see :func:`_value_causes`),
    when the caller knows it (the compiled scan does); else it is worked out here. A row is
    quarantined for its metric name, else its label block, else its value cause: the order of
    :data:`_FAST_REASONS`."""
    if value_cause is None:
        value_cause = _value_causes(value, ts_ms, has_ts)
    name_bad, name_errors = dictionary.errors("names")
    block_bad, block_errors = dictionary.errors("blocks")
    bad = value_cause != 0
    by_name = name_bad.take(name_id) if name_bad.any() else None
    by_block = block_bad.take(block_id) if block_bad.any() else None
    for check in (by_name, by_block):
        if check is not None:
            bad |= check
    source_line = (fast + 1).astype(np.int32)
    ts_us = np.where(has_ts, ts_ms * 1000, _epoch_us(scraped_at))
    columns = (source_line, name_id, block_id, value, ts_us)
    if bad.any():
        good = ~bad
        columns = tuple(np.compress(good, a) for a in columns)
    out.fast = {c: np.ascontiguousarray(a, dtype=t) for (c, t), a in zip(_FAST_DTYPES.items(), columns, strict=True)}
    rows = np.flatnonzero(bad)
    if len(rows):
        causes = value_cause.take(rows)
        if by_block is not None:
            causes = np.where(by_block.take(rows), 1, causes)
        if by_name is not None:
            causes = np.where(by_name.take(rows), 0, causes)

        def errors(cause: int, sel: np.ndarray) -> pl.Series:
            if cause == 0:
                return name_errors.gather(pl.Series(name_id.take(sel)))
            return block_errors.gather(pl.Series(block_id.take(sel)))

        # the sentinels' reason takes their text: known already when they are all one number
        out.quarantine = _fast_quarantine(
            buf, rows, causes, source_line, f_start, f_end, f_v, v_len, errors, same
        )


def _value_causes(value: np.ndarray, ts_ms: np.ndarray, has_ts: np.ndarray) -> np.ndarray:
    """Why each value or timestamp is not a sample: the index in :data:`_FAST_REASONS` of the
    first reason that holds (its reasons 2..6, in that order), 0 when none does."""
    with np.errstate(invalid="ignore"):
        checks = (
            has_ts & (np.abs(ts_ms) > _MAX_ABS_TS_MS),
            np.isnan(value),
            np.isinf(value),
            value >= BLANK_THRESHOLD,
            np.isin(value, _FP64_BLANKS),
        )
    cause = np.zeros(len(value), dtype=np.uint8)
    for reason, check in reversed(list(enumerate(checks, 2))):
        cause[check] = reason
    return cause


def _slow_rows(out: _Chunk, lines: np.ndarray, raw: Callable[[int], str]) -> None:
    """The lines ``lines`` (their index in the piece, any order) through the tokenizer;
    ``raw(n)``: the text of line number ``n`` (from 1)."""
    lines = np.sort(lines)
    numbers = (lines + 1).tolist()
    out.slow, out.slow_quarantine, skipped = _slow_path(numbers, raw)
    out.slow_raw = {m: raw(m) for m in out.slow["source_line"].to_list()}
    out.rows_in += len(numbers) - skipped


def _u64(text: bytes) -> np.uint64:
    return np.frombuffer(text, dtype="<u8")[0]


_SENTINEL_HEAD = _u64(b"92233720")
_DIGIT_HIGH, _DIGIT_ZERO, _DIGIT_SIX = _u64(b"\xf0" * 8), _u64(b"0" * 8), _u64(b"\x06" * 8)


def _all_digits(words: np.ndarray) -> np.ndarray:
    """Whether each of the 8 bytes of each word is an ASCII digit."""
    return ((words & _DIGIT_HIGH) == _DIGIT_ZERO) & (((words + _DIGIT_SIX) & _DIGIT_HIGH) == _DIGIT_ZERO)


def _blank_sentinels(
    buf: _Buffer, starts: np.ndarray, lengths: np.ndarray
) -> tuple[np.ndarray | None, str | None]:
    """Which values are DCGM int64 blank sentinels (``9223372036854775794`` and its kin): 19
    digits starting ``92233720``, read as three words. Any such number is over 9.2e18 and is
    quarantined with that reason whatever its last digits (1e19 stands in for its value), so
    it need not be cast. (None, None) when there are none; the second item is their text when
    every one of them is the same number (as a GPU that does not report a field repeats it)."""
    long = np.flatnonzero(lengths == 19)
    if not len(long):
        return None, None
    at = starts.take(long)
    words = buf.dwords
    middle, tail = words[at + 8], words[at + 11]
    hit = (words[at] == _SENTINEL_HEAD) & _all_digits(middle) & _all_digits(tail)
    if not hit.any():
        return None, None
    blank = np.zeros(len(starts), dtype=np.bool_)
    hits = long.compress(hit)
    blank[hits] = True
    middle, tail = middle.compress(hit), tail.compress(hit)
    same = None
    if (middle == middle[0]).all() and (tail == tail[0]).all():
        first = int(starts[hits[0]])
        same = bytes(buf.data[first : first + 19]).decode("ascii")
    return blank, same


def _epoch_us(at: datetime) -> int:
    delta = at - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


# why a fast-path line is quarantined, in the order _reason_expr tests them: a fixed text after the
# line number and the value or timestamp text (NULL: the error text of its name or label block)
_FAST_REASONS: tuple[tuple[str | None, str], ...] = (
    (None, "name_error"),
    (None, "label_error"),
    ("timestamp {} ms is out of range", "traw"),
    ("value {} is a blank (no data)", "vraw"),
    ("value {} is not a finite sample", "vraw"),
    ("value {} is a DCGM blank sentinel (>= 9.2e18, no data)", "vraw"),
    ("value {} is a DCGM fp64 blank sentinel (no data)", "vraw"),
)
_SENTINEL_CAUSE = 5


_QuarantinePart = tuple[str, np.ndarray, pl.Series, "pl.Series | str"]


def _fast_quarantine(
    buf: _Buffer,
    rows: np.ndarray,
    causes: np.ndarray,
    source_line: np.ndarray,
    f_start: np.ndarray,
    f_end: np.ndarray,
    f_v: np.ndarray,
    v_len: np.ndarray,
    errors: Callable[[int, np.ndarray], pl.Series],
    sentinels: tuple[np.ndarray, str] | None = None,
) -> list[_QuarantinePart]:
    """The quarantine of fast-path lines ``rows``, ``causes`` their index in :data:`_FAST_REASONS`:
    one part per cause (its reason template after ``line N: ``, line numbers, raw text as views,
    the detail the template takes: a ``str`` when it is the same text on every line, as a DCGM
    blank sentinel is), column-wise, no Python object per line; the reasons are formatted once
    for every piece in :func:`_quarantine_frame`. ``sentinels``: which rows are int64 blank
    sentinels that all read as the one text given, when they do."""
    parts: list[_QuarantinePart] = []
    counts = np.bincount(causes, minlength=len(_FAST_REASONS))
    for cause in np.flatnonzero(counts).tolist():
        sel = rows[causes == cause] if counts[cause] < len(rows) else rows
        template, column = _FAST_REASONS[cause]
        detail: pl.Series | str | None
        if template is None:
            detail = errors(cause, sel)
            template = "{}"
        elif column == "vraw":
            detail = None
            if sentinels is not None and cause == _SENTINEL_CAUSE and sentinels[0].take(sel).all():
                detail = sentinels[1]
            if detail is None:
                detail = _same_text(buf, f_v.take(sel), v_len.take(sel))
            if detail is None:
                detail = buf.strings(f_v.take(sel), v_len.take(sel))
        else:
            t_start = f_v.take(sel) + v_len.take(sel) + 1
            detail = buf.strings(t_start, f_end.take(sel) - t_start)
        raw = buf.strings(f_start.take(sel), f_end.take(sel) - f_start.take(sel))
        parts.append((template, source_line.take(sel), raw, detail))
    return parts


def _same_text(buf: _Buffer, starts: np.ndarray, lengths: np.ndarray) -> str | None:
    """The text ``data[start:start+length]`` when it is the same for every row (and 1..24 bytes
    long; one under 8 bytes not within 8 bytes of the end), else None: compared as up to three
    uint64 words a row."""
    k = int(lengths[0])
    if not 0 < k <= 24 or (k < 8 and int(starts.max()) + 8 > buf.size) or not (lengths == k).all():
        return None
    first = int(starts[0])
    for at in sorted({0, min(8, k - 8), max(0, k - 8)}) if k >= 8 else (0,):
        words = buf.dwords[starts + at]
        if k < 8:
            words &= _LOW_BYTES64[k]
        if not (words == words[0]).all():
            return None
    return bytes(buf.data[first : first + k]).decode("utf-8")


def _numbered(numbers: np.ndarray, head: str, tail: str) -> pl.Series:
    """``f"{head}{n}{tail}"`` for each of ``numbers`` (non-negative, ascending), written into one
    byte buffer with numpy: the lines with as many digits are a run of equal-width rows (by the
    compiled scan's module: in one loop)."""
    head_b, tail_b = head.encode(), tail.encode()
    if SCAN_PATH == "compiled":
        offsets, text = _dcgm_scan.numbered(np.ascontiguousarray(numbers, dtype=np.int64), head_b, tail_b)
        return pl.Series(pa.LargeStringArray.from_buffers(len(numbers), pa.py_buffer(offsets), pa.py_buffer(text)))
    pieces = []
    bounds = np.searchsorted(numbers, [10**k for k in range(1, 11)]).tolist()
    lo = 0
    for digits, hi in enumerate(bounds, 1):
        if hi > lo:
            width = len(head_b) + digits + len(tail_b)
            row = np.frombuffer(head_b + b"0" * digits + tail_b, dtype=np.uint8)
            text = np.broadcast_to(row, (hi - lo, width)).copy()
            rest = numbers[lo:hi]
            for j in range(len(head_b) + digits - 1, len(head_b) - 1, -1):
                rest, digit = np.divmod(rest, 10)
                text[:, j] += digit.astype(np.uint8)
            offsets = np.arange(hi - lo + 1, dtype=np.int64) * width
            pieces.append(
                pl.Series(pa.LargeStringArray.from_buffers(hi - lo, pa.py_buffer(offsets), pa.py_buffer(text)))
            )
        lo = hi
    return pl.concat(pieces) if len(pieces) > 1 else pieces[0]


def _quarantine_frame(parts: list[_QuarantinePart], source: str) -> pl.DataFrame:
    """The quarantine rows of every piece's fast-path parts, in line order: per reason template
    over all pieces, one ``format``, or, when every line has the same detail, the reason texts
    written by :func:`_numbered`."""
    by_template: dict[str, list[_QuarantinePart]] = {}
    for part in parts:
        by_template.setdefault(part[0], []).append(part)
    frames = []
    for template, group in by_template.items():
        numbers = np.concatenate([g[1] for g in group])
        raw = pl.concat([g[2] for g in group])
        details = {g[3] for g in group if isinstance(g[3], str)}
        if len(details) == 1 and all(isinstance(g[3], str) for g in group):
            reason = _numbered(numbers, "line ", ": " + template.format(details.pop()))
        else:
            detail = pl.concat(
                [
                    pl.repeat(g[3], len(g[1]), dtype=pl.String, eager=True) if isinstance(g[3], str) else g[3]
                    for g in group
                ]
            )
            reason = pl.DataFrame({"n": numbers, "d": detail}).select(
                pl.format("line {}: " + template, pl.col("n"), pl.col("d"))
            ).to_series()
        frames.append(
            pl.DataFrame(
                {
                    "source": pl.repeat(source, len(numbers), dtype=pl.String, eager=True),
                    "source_line": numbers,
                    "raw": raw,
                    "reason": reason,
                },
                schema=DCGM_QUARANTINE_SCHEMA,
            )
        )
    return pl.concat(frames).sort("source_line") if len(frames) > 1 else frames[0]


def _assemble(
    chunks: list[_Chunk], dictionary: _Dictionary, *, source: str, scraped_at: datetime
) -> FeedBatch:
    """One batch from the chunks: label columns gathered once from the label table by block id."""
    first_line = 0
    for c in chunks:
        lines, first_line = first_line, first_line + c.newlines
        c.shift(lines)
    fast = pl.DataFrame(
        {c: np.concatenate([chunk.fast[c] for chunk in chunks]) for c in _FAST_DTYPES},
        schema=_FAST_SCHEMA,
    )
    labels = _label_table(dictionary.block_list, dictionary.block_parsed).select(*LABEL_COLUMNS, "extra_labels")
    block_id = fast["block_id"]
    usable = pl.Series(dictionary.errors("blocks")[0]).not_()  # accepted rows only hold these blocks
    columns: dict[str, pl.Series] = {}
    for c in (*LABEL_COLUMNS, "extra_labels"):
        seen = labels[c].filter(usable).unique()
        # a column with one value over every usable block (a model name, an absent label) is
        # that value repeated, not gathered row by row
        columns[c] = (
            pl.repeat(seen[0], fast.height, dtype=labels[c].dtype, eager=True)
            if len(seen) == 1
            else labels[c].gather(block_id)
        )
    rows = pl.DataFrame(
        {
            "ts": fast["ts_us"].cast(pl.Datetime("us")).dt.replace_time_zone("UTC"),
            "metric": dictionary.name_series().gather(fast["name_id"]),
            "value": fast["value"],
            "source": pl.repeat(source, fast.height, dtype=pl.String, eager=True),
            "source_line": fast["source_line"],
            **columns,
        }
    ).select(DCGM_SAMPLE_SCHEMA.keys())
    parts = [part for c in chunks for part in c.quarantine]
    quarantine = [_quarantine_frame(parts, source)] if parts else []
    slow = [c.slow for c in chunks if c.slow.height]
    slow_q = [q for c in chunks for q in c.slow_quarantine]
    if slow:
        slow_raw = {k: v for c in chunks for k, v in c.slow_raw.items()}
        s_rows, s_quarantine = _finish(
            pl.concat(slow), source=source, scraped_at=scraped_at, raw=slow_raw.__getitem__
        )
        rows = pl.concat([rows, s_rows]).sort("source_line")
        quarantine.append(s_quarantine)
    if slow_q:
        quarantine.append(
            pl.DataFrame(
                [(source, n, text, f"line {n}: {reason}") for n, text, reason in slow_q],
                schema=DCGM_QUARANTINE_SCHEMA,
                orient="row",
            )
        )
    if not quarantine:
        q = pl.DataFrame(schema=DCGM_QUARANTINE_SCHEMA)
    elif len(quarantine) == 1:
        q = quarantine[0]
    else:
        # the pieces' own quarantines come in line order; the tokenizer's interleave with them
        q = pl.concat(quarantine)
        if slow or slow_q:
            q = q.sort("source_line")
    return FeedBatch(rows=rows, quarantine=q, rows_in=sum(c.rows_in for c in chunks))


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
    # the compiled scan sets overlong lines apart as it meets them; the numpy scan first drops them
    buf, overlong = _drop_overlong_lines(buf, source) if SCAN_PATH != "compiled" else (buf, None)
    if overlong is not None:
        batch = parse_text(buf, source=source, scraped_at=scraped_at)
        quarantine = pl.concat([batch.quarantine, overlong]).sort("source_line")
        return FeedBatch(rows=batch.rows, quarantine=quarantine, rows_in=batch.rows_in + overlong.height)
    if not buf:
        return _empty_batch()
    dictionary = _Dictionary()
    workers = _workers()
    pieces = [_Buffer(piece) for piece in _chunks(buf, _piece_size(len(buf), workers))]
    threads = min(workers, len(pieces))
    pool = ThreadPoolExecutor(max_workers=threads) if threads > 1 else None
    run = pool.map if pool is not None else map
    try:
        chunks = list(
            run(lambda piece: _parse_chunk(piece, scraped_at=scraped_at, dictionary=dictionary), pieces)
        )
    finally:
        if pool is not None:
            pool.shutdown()
    return _assemble(chunks, dictionary, source=source, scraped_at=scraped_at)


def _drop_overlong_lines(buf: bytes, source: str) -> tuple[bytes, pl.DataFrame | None]:
    """``buf`` with every line over :data:`MAX_LINE_BYTES` emptied (its newline kept, so the other
    lines keep their numbers), and those lines as quarantine rows (None when there are none).
    One vectorised scan for newlines; nothing else reads the long line."""
    if len(buf) <= MAX_LINE_BYTES:
        return buf, None
    newlines = np.flatnonzero(np.frombuffer(buf, dtype=np.uint8) == 10)
    starts = np.concatenate(([0], newlines + 1))
    ends = np.concatenate((newlines, [len(buf)]))
    long = np.flatnonzero(ends - starts > MAX_LINE_BYTES)
    if not long.size:
        return buf, None
    kept = bytearray()
    rows: list[tuple[str, int, str, str]] = []
    pos = 0
    for i in long.tolist():
        start, end = int(starts[i]), int(ends[i])
        kept += buf[pos:start]
        pos = end
        if buf[start : min(end, start + 200)].decode("utf-8", "replace").lstrip(" \t\r").startswith("#"):
            continue  # a comment carries no sample
        raw, reason = _overlong_row(buf, start, end)
        rows.append((source, i + 1, raw, f"line {i + 1}: {reason}"))
    kept += buf[pos:]
    return bytes(kept), pl.DataFrame(rows, schema=DCGM_QUARANTINE_SCHEMA, orient="row")


def _overlong_row(buf: bytes | memoryview, start: int, end: int) -> tuple[str, str]:
    """The quarantine's raw text (the first 200 bytes) and reason of a line over the bound."""
    head = bytes(buf[start : min(end, start + 200)]).decode("utf-8", "replace")
    return f"{head}... ({end - start} bytes)", f"line is {end - start} bytes, over the limit of {MAX_LINE_BYTES}"


_MAX_CHUNK = 1 << 30
"""The largest piece parsed as one buffer (string views hold 32-bit offsets)."""
_MIN_PIECE = 4 << 20
"""Inputs are cut into about two pieces per worker thread, none smaller than this ..."""
_MAX_PIECE = 8 << 20
"""... and none larger than this: a piece is scanned and parsed while its bytes are in the cache."""


def _workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def _piece_size(size: int, workers: int) -> int:
    return min(_MAX_CHUNK, _MAX_PIECE, max(_MIN_PIECE, -(-size // (2 * workers))))


def _chunks(buf: bytes, size: int) -> Iterator[memoryview]:
    """Pieces of at most about ``size`` bytes, each ending just after a newline (the last may not),
    as views of ``buf`` (nothing is copied)."""
    view = memoryview(buf)
    start = 0
    while len(buf) - start > size:
        cut = buf.rfind(b"\n", start, start + size)
        if cut < 0:
            cut = buf.find(b"\n", start + size)
            if cut < 0:
                break
        yield view[start : cut + 1]
        start = cut + 1
    if start < len(buf):
        yield view[start:]


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
