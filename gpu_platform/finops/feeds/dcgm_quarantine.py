"""Why a dcgm-exporter line is not a sample, and the quarantine rows that say so.

The value rules (NaN, infinities, DCGM's int64 and fp64 blank sentinels, timestamps out of
range), the reasons in the order they are tested (`_FAST_REASONS`, `_reason_expr`: the same texts
for the scan's fast-path lines and the tokenizer's), the quarantine of the fast-path lines built
column-wise (`_fast_quarantine`, `_quarantine_frame`), and the line bound (`_overlong_row`, and
`_drop_overlong_lines` for the numpy scan; the compiled scan sets such lines apart itself).

May import `finops/feeds/schemas.py`, `dcgm_buffer.py`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import polars as pl

from gpu_platform.finops.feeds.dcgm_buffer import _Buffer, _numbered, _same_text
from gpu_platform.finops.feeds.schemas import DCGM_QUARANTINE_SCHEMA

BLANK_THRESHOLD = 9.2e18


_FP64_BLANKS = (140737488355328.0, 140737488355329.0, 140737488355330.0, 140737488355331.0)


_MAX_ABS_TS_MS = 10**14


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


def _quarantine_frame(parts: list[_QuarantinePart], source: str, *, compiled: bool) -> pl.DataFrame:
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
            reason = _numbered(numbers, "line ", ": " + template.format(details.pop()), compiled=compiled)
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


def _drop_overlong_lines(buf: bytes, source: str, max_line: int) -> tuple[bytes, pl.DataFrame | None]:
    """``buf`` with every line over ``max_line`` bytes emptied (its newline kept, so the other
    lines keep their numbers), and those lines as quarantine rows (None when there are none).
    One vectorised scan for newlines; nothing else reads the long line."""
    if len(buf) <= max_line:
        return buf, None
    newlines = np.flatnonzero(np.frombuffer(buf, dtype=np.uint8) == 10)
    starts = np.concatenate(([0], newlines + 1))
    ends = np.concatenate((newlines, [len(buf)]))
    long = np.flatnonzero(ends - starts > max_line)
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
        raw, reason = _overlong_row(buf, start, end, max_line)
        rows.append((source, i + 1, raw, f"line {i + 1}: {reason}"))
    kept += buf[pos:]
    return bytes(kept), pl.DataFrame(rows, schema=DCGM_QUARANTINE_SCHEMA, orient="row")


def _overlong_row(buf: bytes | memoryview, start: int, end: int, max_line: int) -> tuple[str, str]:
    """The quarantine's raw text (the first 200 bytes) and reason of a line over the bound."""
    head = bytes(buf[start : min(end, start + 200)]).decode("utf-8", "replace")
    return f"{head}... ({end - start} bytes)", f"line is {end - start} bytes, over the limit of {max_line}"
