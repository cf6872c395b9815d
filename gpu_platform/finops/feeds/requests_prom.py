"""Requests per inference service from Prometheus ``query_range`` answers, into ``raw_service_requests``.

What is read (docs/serving.md, "Cost per request"): the answer of

    sum by (service) (increase(http_requests_total[5m]))      evaluated with step=5m (300 s)

or of the recorded series ``gpu_platform:service_requests:increase5m{service="..."}`` that a
Prometheus recording rule writes from the same expression. Each point ``[t, "v"]`` is the number of
requests the service answered in the 5 minutes before ``t``. ``service`` is the service's
Kubernetes name (the ``gpu-platform.io/service`` label of its pods and the ``service`` label its
HTTP metrics carry), a DNS-1035 label.

As for DCGM's ``query_range`` answers (:func:`gpu_platform.finops.feeds.dcgm.parse_query_range`),
points are numbered 1.. in answer order, series by series, and every point is either a row or a
quarantined row (rows in = accepted + quarantined), its reason starting with ``row N:``. A point is
quarantined when its series has another name, no ``service`` label or one that is not a DNS-1035
label, or is a second series of a service already in the answer (one series per service: two
would be the replicas of an HA Prometheus or an unsummed query, counted twice); when it is not ``[seconds, "value"]``; when its timestamp is not a finite time; when its
value is NaN (no sample in the window), infinite or negative (an increase never is); or when it
lies less than one step after the previous accepted point of its series (windows of 5 minutes
taken closer than 5 minutes apart would count the same requests twice). An answer whose
``status`` is not ``success``, or whose result is neither a matrix nor a vector, is refused whole
(:class:`~gpu_platform.finops.feeds.dcgm.PrometheusQueryError`); the day loader quarantines that
file with the reason.

Saved answers live under ``feeds/requests/<YYYY-MM-DD>/*.json``. A point belongs to the day its
window ends in (the models read ``ts``, not the load day), so a file of 23:00-01:00 feeds both
days; a service's point at one time loaded from two files counts once (``stg_service_requests``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from datetime import date
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from gpu_platform.finops.feeds.dcgm import PrometheusQueryError
from gpu_platform.finops.feeds.ingest import IngestReport, _files, read_feed_file
from gpu_platform.finops.feeds.load import load_batches, record_file_quarantine
from gpu_platform.finops.feeds.schemas import DCGM_QUARANTINE_SCHEMA, SERVICE_REQUEST_SCHEMA, FeedBatch
from gpu_platform.safeload import FEED_JSON_LIMITS, decode_utf8, load_json_text
from gpu_platform.serving.model import DNS_LABEL

__all__ = [
    "QUERY",
    "RECORDED_METRIC",
    "SERVICE_LABEL",
    "STEP_S",
    "load_service_requests_day",
    "parse_service_requests",
    "read_service_requests_file",
]

SERVICE_LABEL = "service"
"""The label that names the service in the answer."""
RECORDED_METRIC = "gpu_platform:service_requests:increase5m"
"""The recorded series' name (a Prometheus recording rule over :data:`QUERY`)."""
QUERY = "sum by (service) (increase(http_requests_total[5m]))"
"""The query whose answer (at step :data:`STEP_S`) the feed reads; an unnamed series."""
STEP_S = 300
"""Seconds between points: the query's range window (``[5m]``) and its ``step``."""
REQUESTS_DIR = "requests"
"""The feed's folder under ``feeds/``."""

_MIN_S = 0.0
_MAX_S = 1e11  # year 5138: beyond any real time, below the float limits of a timestamp


def _series_problem(metric: Any) -> tuple[str | None, str | None, str | None, str | None]:
    """(service, metric name, extra labels JSON, problem) of one series' label set."""
    if not isinstance(metric, Mapping):
        return None, None, None, f"series labels are {type(metric).__name__}, not an object"
    bad = sorted(str(k) for k, v in metric.items() if not isinstance(v, str))
    if bad:
        return None, None, None, f"label(s) {', '.join(bad)} are not strings"
    name = metric.get("__name__")
    if name is not None and name != RECORDED_METRIC:
        return None, name, None, (
            f"series {name!r} is not a request count per service (expected {RECORDED_METRIC} "
            f"or the unnamed answer of {QUERY})"
        )
    service = metric.get(SERVICE_LABEL)
    if not service:
        return None, name, None, f"no {SERVICE_LABEL!r} label: the point names no service"
    if len(service) > 63 or not DNS_LABEL.fullmatch(service):
        return None, name, None, (
            f"{SERVICE_LABEL} {service[:80]!r} is not a service name (a DNS-1035 label: lower case "
            "letters, digits and '-', starting with a letter, at most 63 characters)"
        )
    extra = {k: v for k, v in metric.items() if k not in ("__name__", SERVICE_LABEL)}
    return service, name, json.dumps(extra, sort_keys=True) if extra else None, None


def _point_problem(point: Any) -> tuple[float | None, float | None, str | None]:
    """(seconds, value, problem) of one ``[t, "v"]`` point."""
    if not isinstance(point, list | tuple) or len(point) != 2:
        return None, None, 'malformed point (expected [unix seconds, "value"])'
    ts, raw = point
    if isinstance(ts, bool) or not isinstance(ts, int | float | str):
        return None, None, f"invalid timestamp {ts!r} (expected unix seconds)"
    try:
        seconds = float(ts)
    except ValueError:
        return None, None, f"invalid timestamp {ts!r} (expected unix seconds)"
    if not math.isfinite(seconds) or not _MIN_S <= seconds <= _MAX_S:
        return None, None, f"timestamp {ts!r} is out of range"
    if isinstance(raw, bool) or not isinstance(raw, str | int | float):
        return seconds, None, f"invalid sample value {raw!r}"
    try:
        value = float(raw)
    except ValueError:
        return seconds, None, f"invalid sample value {raw!r}"
    if math.isnan(value):
        return seconds, None, f"value {raw} is a blank (no sample in the window)"
    if math.isinf(value):
        return seconds, None, f"value {raw} is not a finite count"
    if value < 0:
        return seconds, None, f"negative count {raw} (an increase of a counter is never negative)"
    return seconds, value, None


def parse_service_requests(obj: str | bytes | Mapping[str, Any], source: str, step_s: int = STEP_S) -> FeedBatch:
    """Parse one ``query_range`` (matrix) or ``query`` (vector) answer of request counts per service.

    Rows follow ``raw_service_requests`` (:data:`SERVICE_REQUEST_SCHEMA`), the quarantine
    ``raw_service_requests_quarantine`` (source, source_line, raw, reason); ``raw`` of a
    quarantined point is ``{"metric": ..., "value": point}`` as JSON. Raises
    :class:`PrometheusQueryError` for an answer that is not a successful matrix or vector.
    """
    doc = json.loads(obj) if isinstance(obj, str | bytes) else obj
    if not isinstance(doc, Mapping):
        raise PrometheusQueryError(f"{source}: expected a JSON object, got {type(doc).__name__}")
    if doc.get("status") != "success":
        raise PrometheusQueryError(
            f"{source}: Prometheus query failed: status={doc.get('status')!r} "
            f"errorType={doc.get('errorType')!r} error={doc.get('error')!r}"
        )
    data = doc.get("data")
    result_type = data.get("resultType") if isinstance(data, Mapping) else None
    if result_type not in ("matrix", "vector"):
        raise PrometheusQueryError(f"{source}: resultType {result_type!r} is not 'matrix' or 'vector'")
    result = data.get("result") or []
    if not isinstance(result, list):
        raise PrometheusQueryError(f"{source}: data.result is {type(result).__name__}, not a list")
    rows: dict[str, list[Any]] = {c: [] for c in SERVICE_REQUEST_SCHEMA}
    bad: dict[str, list[Any]] = {c: [] for c in DCGM_QUARANTINE_SCHEMA}
    number = 0
    seen: dict[str, str | None] = {}  # service -> the extra labels of its first series in this answer
    for series in result:
        metric = series.get("metric") if isinstance(series, Mapping) else None
        if not isinstance(series, Mapping):
            points: Any = [None]
        elif result_type == "matrix":
            points = series.get("values")
        else:
            points = [series.get("value")]
        if not isinstance(points, list):
            points = [points]
        service, name, extra, series_problem = _series_problem(metric if metric is not None else {})
        if not isinstance(series, Mapping):
            series_problem = f"series is {type(series).__name__}, not an object"
        elif series_problem is None and service in seen:
            series_problem = (
                f"a second series of {service!r} in this answer (labels {extra or '{}'}; the first: "
                f"{seen[service] or '{}'}): the count is one series per service ({QUERY}); replicas of an "
                "HA Prometheus or unsummed series would count the same requests twice"
            )
        elif series_problem is None:
            seen[service] = extra
        previous: float | None = None
        for point in points:
            number += 1
            seconds, value, problem = _point_problem(point)
            problem = series_problem or problem
            if problem is None and previous is not None and seconds is not None and seconds - previous < step_s:
                problem = (
                    f"{seconds - previous:g} s after the previous point of {service!r}: points are "
                    f"increases over {step_s} s taken every {step_s} s (query_range step={step_s}); "
                    "a closer point would count the same requests twice"
                )
            if problem is not None:
                bad["source"].append(source)
                bad["source_line"].append(number)
                bad["raw"].append(json.dumps({"metric": metric, "value": point}, sort_keys=True, default=str)[:2000])
                bad["reason"].append(f"row {number}: {problem}")
                continue
            previous = seconds
            rows["ts"].append(round(seconds * 1_000_000))
            rows["service"].append(service)
            rows["requests"].append(value)
            rows["metric"].append(name)
            rows["extra_labels"].append(extra)
            rows["source"].append(source)
            rows["source_line"].append(number)
    # microseconds since the epoch -> UTC timestamps, in one cast
    ts = pl.Series("ts", rows.pop("ts"), dtype=pl.Int64).cast(pl.Datetime("us")).dt.replace_time_zone("UTC")
    frame = pl.DataFrame(rows, schema={k: v for k, v in SERVICE_REQUEST_SCHEMA.items() if k != "ts"})
    return FeedBatch(
        rows=frame.with_columns(ts).select(list(SERVICE_REQUEST_SCHEMA)),
        quarantine=pl.DataFrame(bad, schema=DCGM_QUARANTINE_SCHEMA),
        rows_in=number,
    )


def read_service_requests_file(path: Path, source: str) -> FeedBatch:
    """One saved answer (UTF-8 JSON within the feed limits) parsed with :func:`parse_service_requests`."""
    text = decode_utf8(path.read_bytes(), source)
    return parse_service_requests(load_json_text(text, source, FEED_JSON_LIMITS), source=source)


def load_service_requests_day(con: duckdb.DuckDBPyConnection, feeds: Path, day: date) -> IngestReport:
    """Load every ``feeds/requests/<day>/*.json`` answer under ``day`` in one transaction; the day's
    rows under ``requests/`` become exactly these files' (a removed file loses its rows). A file
    that cannot be read whole (not UTF-8 or JSON, a failed query, a link out of the folder) is
    quarantined with its reason in ``raw_feed_file_quarantine`` and the other files load."""
    report = IngestReport()
    parts: list[tuple[str, FeedBatch]] = []
    bad_files: list[tuple[str, int | None, str]] = []
    for path in _files(feeds / REQUESTS_DIR / day.isoformat(), (".json",)):
        source = path.relative_to(feeds).as_posix()
        report.files_in += 1
        batch, size, reason = read_feed_file(
            path, lambda p=path, s=source: read_service_requests_file(p, s), root=feeds
        )
        if batch is None:
            bad_files.append((source, size, reason or "unreadable"))
            report.quarantined_files.append((source, reason or "unreadable"))
            continue
        parts.append((source, batch))
        report.files_loaded += 1
    loaded = load_batches(con, "requests", parts, day=day, replace_prefix=f"{REQUESTS_DIR}/")
    for (_, batch), stats in zip(parts, loaded, strict=True):
        report.add(batch, stats.accepted, stats.quarantined)
    record_file_quarantine(con, "requests", day, bad_files)
    return report
