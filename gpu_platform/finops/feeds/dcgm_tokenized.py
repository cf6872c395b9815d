"""Lines the scan's fast path did not take, tokenized: their rows and their quarantine.

`_slow_path` runs the character-level tokenizer (`dcgm_labels._split_line`) over those lines;
`_finish` turns (name, labels, value text, timestamp text) rows into accepted rows and quarantine
rows with their reasons (also the path of Prometheus' query_range answers); `_empty_batch` is a
batch of nothing.

May import `finops/feeds/schemas.py`, `dcgm_labels.py`, `dcgm_quarantine.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import polars as pl
import pyarrow.compute as pac

from gpu_platform.finops.feeds.dcgm_labels import (
    _METRIC_NAME_RE,
    LABEL_COLUMNS,
    _label_table,
    _LineError,
    _split_line,
)
from gpu_platform.finops.feeds.dcgm_quarantine import (
    _FP64_BLANKS,
    _MAX_ABS_TS_MS,
    BLANK_THRESHOLD,
    _reason_expr,
)
from gpu_platform.finops.feeds.schemas import DCGM_QUARANTINE_SCHEMA, DCGM_SAMPLE_SCHEMA, UTC_TS, FeedBatch


def _value_expr() -> pl.Expr:
    return pl.col("vraw").cast(pl.Float64, strict=False).alias("value")


def _ts_ms_expr() -> pl.Expr:
    return pl.col("traw").cast(pl.Int64, strict=False).alias("ts_ms")


_PRE_SCHEMA: dict[str, pl.DataType] = {
    "source_line": pl.UInt32(),
    "name": pl.String(),
    "labels": pl.String(),
    "vraw": pl.String(),
    "traw": pl.String(),
}


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


def _empty_batch() -> FeedBatch:
    return FeedBatch(
        rows=pl.DataFrame(schema=DCGM_SAMPLE_SCHEMA),
        quarantine=pl.DataFrame(schema=DCGM_QUARANTINE_SCHEMA),
        rows_in=0,
    )
