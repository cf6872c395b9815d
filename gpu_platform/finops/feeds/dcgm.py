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

One module per job, each importing only those below it: this one reads the text (pieces,
threads, the batch) and re-exports the rest; `dcgm_piece.py` scans and parses one piece (both
scans); `dcgm_tokenized.py` the lines the fast path did not take; `dcgm_quarantine.py` the value
rules, reasons and the line bound; `dcgm_labels.py` label blocks and the line tokenizer;
`dcgm_buffer.py` the piece's bytes and the compiled scan's helpers; `dcgm_prometheus.py`
Prometheus' query_range answers; `dcgm_history.py` Parquet history.
May import `finops/feeds/schemas.py` and the `dcgm_*` modules.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import polars as pl

from gpu_platform.finops.feeds.dcgm_buffer import _Buffer, _dcgm_scan
from gpu_platform.finops.feeds.dcgm_history import read_history_parquet
from gpu_platform.finops.feeds.dcgm_labels import (  # noqa: F401 (kept import paths)
    LABEL_COLUMNS,
    MAX_LABEL_VALUE_CHARS,
    _block_columns,
    _label_table,
    _labels_to_columns,
    parse_label_block,
)
from gpu_platform.finops.feeds.dcgm_piece import _FAST_DTYPES, _FAST_SCHEMA, _Chunk, _Dictionary, _parse_chunk
from gpu_platform.finops.feeds.dcgm_prometheus import PrometheusQueryError, parse_query_range
from gpu_platform.finops.feeds.dcgm_quarantine import BLANK_THRESHOLD, _drop_overlong_lines, _quarantine_frame
from gpu_platform.finops.feeds.dcgm_tokenized import _empty_batch, _finish
from gpu_platform.finops.feeds.schemas import DCGM_QUARANTINE_SCHEMA, DCGM_SAMPLE_SCHEMA, FeedBatch

__all__ = [
    "BLANK_THRESHOLD",
    "LABEL_COLUMNS",
    "MAX_LABEL_VALUE_CHARS",
    "MAX_LINE_BYTES",
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


SCAN_PATH: str = "compiled" if _dcgm_scan is not None else "numpy"
"""How :func:`parse_text` scans its input: ``"compiled"`` (the C extension
``gpu_platform.finops.feeds._dcgm_scan``, built at install when a C compiler is present) or
``"numpy"`` (its fallback; the same result, slower)."""


MAX_LINE_BYTES = 64 << 10
"""The longest exposition line read (bytes, newline not counted); a longer one is quarantined."""


class ScrapeError(OSError):
    """A scrape that did not return a 200 answer; names the URL and the cause."""


def _assemble(
    chunks: list[_Chunk], dictionary: _Dictionary, *, source: str, scraped_at: datetime, compiled: bool
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
    quarantine = [_quarantine_frame(parts, source, compiled=compiled)] if parts else []
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
    compiled, max_line = SCAN_PATH == "compiled", MAX_LINE_BYTES  # read at call time
    buf = _to_utf8(data)
    # the compiled scan sets overlong lines apart as it meets them; the numpy scan first drops them
    buf, overlong = (buf, None) if compiled else _drop_overlong_lines(buf, source, max_line)
    if overlong is not None:
        batch = parse_text(buf, source=source, scraped_at=scraped_at)
        quarantine = pl.concat([batch.quarantine, overlong]).sort("source_line")
        return FeedBatch(rows=batch.rows, quarantine=quarantine, rows_in=batch.rows_in + overlong.height)
    if not buf:
        return _empty_batch()
    dictionary = _Dictionary()
    workers = _workers()
    pieces = [_Buffer(piece, compiled=compiled) for piece in _chunks(buf, _piece_size(len(buf), workers))]
    threads = min(workers, len(pieces))
    pool = ThreadPoolExecutor(max_workers=threads) if threads > 1 else None
    run = pool.map if pool is not None else map
    try:
        chunks = list(
            run(
                lambda piece: _parse_chunk(piece, scraped_at=scraped_at, dictionary=dictionary, max_line=max_line),
                pieces,
            )
        )
    finally:
        if pool is not None:
            pool.shutdown()
    return _assemble(chunks, dictionary, source=source, scraped_at=scraped_at, compiled=compiled)


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
