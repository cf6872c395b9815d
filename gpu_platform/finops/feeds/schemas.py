"""Table schemas shared by the feed parsers and the DuckDB loader.

Every parser returns a :class:`FeedBatch`: accepted rows in the raw table's schema plus
quarantined rows with a reason, and the count of input rows so that
``rows_in == accepted + quarantined`` can be checked by callers and tests.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

RAW_DCGM_SAMPLES = "raw_dcgm_samples"
RAW_DCGM_QUARANTINE = "raw_dcgm_quarantine"
RAW_DCGM_HOURLY = "raw_dcgm_hourly"
RAW_FOCUS_BILLING = "raw_focus_billing"
RAW_FOCUS_QUARANTINE = "raw_focus_quarantine"
RAW_FEED_FILE_QUARANTINE = "raw_feed_file_quarantine"
RAW_SERVICE_REQUESTS = "raw_service_requests"
RAW_SERVICE_REQUESTS_QUARANTINE = "raw_service_requests_quarantine"

UTC_TS = pl.Datetime("us", "UTC")

DCGM_SAMPLE_SCHEMA: dict[str, pl.DataType] = {
    "ts": UTC_TS,
    "metric": pl.String(),
    "value": pl.Float64(),
    "hostname": pl.String(),
    "gpu": pl.Int32(),
    "uuid": pl.String(),
    "model_name": pl.String(),
    "pci_bus_id": pl.String(),
    "device": pl.String(),
    "gpu_instance_profile": pl.String(),
    "gpu_instance_id": pl.String(),
    "namespace": pl.String(),
    "pod": pl.String(),
    "container": pl.String(),
    "source": pl.String(),
    "source_line": pl.Int32(),
    "extra_labels": pl.String(),
}
"""Columns of ``raw_dcgm_samples`` in order.

Label columns are NULL when the exporter did not report the label or reported it empty
(dcgm-exporter writes ``pod=""`` for a GPU no pod holds). ``extra_labels`` is a JSON object
(sorted keys) of every label without a column of its own (``DCGM_FI_DRIVER_VERSION``,
``pod_uid``, ``err_code``, ...), NULL when there are none.
"""

DCGM_HOURLY_SCHEMA: dict[str, pl.DataType] = {
    "hour": pl.Datetime("us"),
    "metric": pl.String(),
    "hostname": pl.String(),
    "gpu": pl.Int32(),
    "gpu_instance_id": pl.String(),
    "gpu_instance_profile": pl.String(),
    "namespace": pl.String(),
    "pod": pl.String(),
    "model_name": pl.String(),
    "samples": pl.Int64(),
    "distinct_ts": pl.Int64(),
    "busy_micro": pl.Int64(),
    "source": pl.String(),
}
"""Columns of ``raw_dcgm_hourly``: the busy samples of ``raw_dcgm_samples`` rolled up per UTC hour,
GPU (or MIG instance), pod, metric and source when they are loaded (``load_batch``, same
transaction, same (source, day) partition), so the cost models never re-read 15 s samples.

Only ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` and ``DCGM_FI_DEV_GPU_UTIL``, without DCGM blank sentinels
(>= 1e15), NaN or negatives; label values as loaded (the models normalise them). ``busy_micro``:
the sum over the samples of the busy fraction (GPU_UTIL / 100, clamped to 1) in whole
micro-units, each sample rounded half away from zero as ``decimal(9, 6)`` does, so sums are exact.
``distinct_ts``: distinct timestamps of the group (``samples - distinct_ts`` samples repeat a
timestamp of the same GPU, instance, pod, metric and source)."""

DCGM_QUARANTINE_SCHEMA: dict[str, pl.DataType] = {
    "source": pl.String(),
    "source_line": pl.Int32(),
    "raw": pl.String(),
    "reason": pl.String(),
}

SERVICE_REQUEST_SCHEMA: dict[str, pl.DataType] = {
    "ts": UTC_TS,
    "service": pl.String(),
    "requests": pl.Float64(),
    "metric": pl.String(),
    "extra_labels": pl.String(),
    "source": pl.String(),
    "source_line": pl.Int32(),
}
"""Columns of ``raw_service_requests``: requests a service answered in the step that ends at
``ts`` (a Prometheus ``query_range`` point of ``increase(...[5m])`` at step 5m; see
``gpu_platform.finops.feeds.requests_prom``). ``service``: the ``service`` label (the service's
Kubernetes name); ``metric``: the series name (NULL for an unnamed ``sum by (service)``);
``extra_labels``: the series' other labels as JSON (sorted keys), NULL when none;
``source_line``: the point's position in the answer (1-based, series by series)."""

FOCUS_QUARANTINE_SCHEMA: dict[str, pl.DataType] = {
    "source": pl.String(),
    "source_row": pl.Int32(),
    "raw": pl.String(),
    "reason": pl.String(),
    "ChargePeriodStart": UTC_TS,
    "BillingCurrency": pl.String(),
    "BilledCost": pl.Decimal(38, 15),
    "EffectiveCost": pl.Decimal(38, 15),
}
"""Columns of ``raw_focus_quarantine``: the row as read (``raw``), why (``reason``), and the money
it carries as far as its own cells say (NULL where a cell is missing or unreadable; the amounts
before any currency conversion), so a report can show the quarantined billed and effective
amounts per currency beside the totals (money never leaves unseen)."""

FILE_QUARANTINE_SCHEMA: dict[str, pl.DataType] = {
    "feed": pl.String(),
    "source": pl.String(),
    "size_bytes": pl.Int64(),
    "reason": pl.String(),
}
"""Columns of ``raw_feed_file_quarantine``: a saved feed file that could not be read as a whole
(not UTF-8, broken header, not Parquet, not JSON), with its path under ``feeds/`` and why."""


class FeedSchemaError(ValueError):
    """An input lacks required columns; ``missing`` lists every one of them."""

    def __init__(self, what: str, missing: list[str]) -> None:
        self.missing = sorted(missing)
        super().__init__(f"{what}: missing required column(s): {', '.join(self.missing)}")


@dataclass(frozen=True)
class FeedBatch:
    """One parsed input: accepted ``rows``, ``quarantine`` rows, and ``rows_in``.

    ``rows_in`` counts the input's data rows (for text exposition: every non-blank,
    non-comment line); each one is either in ``rows`` or in ``quarantine``.
    """

    rows: pl.DataFrame
    quarantine: pl.DataFrame
    rows_in: int

    @property
    def accepted(self) -> int:
        return self.rows.height

    @property
    def quarantined(self) -> int:
        return self.quarantine.height
