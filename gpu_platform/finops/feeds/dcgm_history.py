"""dcgm-exporter history from Parquet files written with the ``raw_dcgm_samples`` columns (a
fleet's archive, the NVML recorder's output): read, checked for the required columns, and the
samples that are not data (NaN, infinities, DCGM's blank sentinels) quarantined with their reason.

May import `finops/feeds/schemas.py`, `dcgm_quarantine.py`, `dcgm_tokenized.py`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import polars as pl

from gpu_platform.finops.feeds.dcgm_quarantine import _FP64_BLANKS, BLANK_THRESHOLD
from gpu_platform.finops.feeds.dcgm_tokenized import _empty_batch
from gpu_platform.finops.feeds.schemas import (
    DCGM_QUARANTINE_SCHEMA,
    DCGM_SAMPLE_SCHEMA,
    UTC_TS,
    FeedBatch,
    FeedSchemaError,
)

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
