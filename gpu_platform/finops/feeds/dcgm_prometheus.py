"""dcgm-exporter series from Prometheus' HTTP API: a ``query_range`` (matrix) or ``query`` (vector)
answer, each point one sample row of ``raw_dcgm_samples`` (its labels rendered as a block and read
by the same rules as the text), a point that is not a sample quarantined with its reason.

May import `finops/feeds/schemas.py`, `dcgm_tokenized.py`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import polars as pl

from gpu_platform.finops.feeds.dcgm_tokenized import _PRE_SCHEMA, _empty_batch, _finish
from gpu_platform.finops.feeds.schemas import FeedBatch


class PrometheusQueryError(ValueError):
    """A Prometheus API answer that is not ``status: success`` or not a matrix/vector."""


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
