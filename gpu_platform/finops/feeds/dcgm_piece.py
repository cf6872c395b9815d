"""One piece of dcgm-exporter text scanned and parsed in one go, its lines numbered from 1.

Two scans give the same result: the compiled one (`_parse_chunk_compiled`, one pass of the C
extension `_dcgm_scan` over the piece) and the numpy one (`_parse_chunk`, numpy passes for
newlines and braces, string views and polars casts). Fast-path lines become arrays of ids into the
call's `_Dictionary` (each distinct metric name and label block checked or parsed once) with
their values and timestamps (`_fast_rows`); the others go to the tokenizer (`_slow_rows`). A
`_Chunk` holds what one piece gave until `dcgm.parse_text` renumbers and assembles them.

May import `finops/feeds/dcgm_buffer.py`, `dcgm_labels.py`, `dcgm_quarantine.py`, `dcgm_tokenized.py`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import numpy as np
import polars as pl

from gpu_platform.finops.feeds.dcgm_buffer import _HASH_SEED, _Buffer, _dcgm_scan, _encode
from gpu_platform.finops.feeds.dcgm_labels import _METRIC_NAME_RE, _block_columns
from gpu_platform.finops.feeds.dcgm_quarantine import _fast_quarantine, _overlong_row, _value_causes
from gpu_platform.finops.feeds.dcgm_tokenized import _PRE_SCHEMA, _slow_path


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


def _parse_chunk(buf: _Buffer, *, scraped_at: datetime, dictionary: _Dictionary, max_line: int) -> _Chunk:
    """Parse one piece of the input, its lines numbered from 1 (see :meth:`_Chunk.shift`).

    The piece is scanned and parsed in one go, so that its bytes are still in the cache.

    The fast path takes lines shaped ``name{labels} value[ timestamp]`` (no leading blank, one
    space after the last ``}``): the name runs to the first ``{``, the label block to the last
    ``}``. A block whose quotes hide a ``}`` still ends at the real one, and one that is not
    well-formed fails :func:`parse_label_block` with its reason, as the tokenizer's block would.
    Every other line goes to :func:`_split_line`. The buffer says which scan runs (``compiled``);
    ``max_line``: the line bound the compiled scan applies (the numpy scan's caller drops longer
    lines before it).
    """
    if buf.compiled:
        return _parse_chunk_compiled(buf, scraped_at=scraped_at, dictionary=dictionary, max_line=max_line)
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


def _parse_chunk_compiled(buf: _Buffer, *, scraped_at: datetime, dictionary: _Dictionary, max_line: int) -> _Chunk:
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
        data, _HASH_SEED, max_line
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
        out.slow_quarantine.append((line + 1, *_overlong_row(buf.data, start, end, max_line)))
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
