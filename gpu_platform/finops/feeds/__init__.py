"""Feed ingestion: dcgm-exporter text and history, FOCUS billing, local NVML sampling.

Pure Python (no Dagster). Parsers return a :class:`~gpu_platform.finops.feeds.schemas.FeedBatch`
(accepted rows, quarantined rows with a reason, and the input row count);
:func:`~gpu_platform.finops.feeds.load.load_batch` writes one (source, day) partition to DuckDB.
:mod:`~gpu_platform.finops.feeds.ingest` loads a day's saved feed files (and DCGM scrapes) with it.
May import `devices/`, `cluster/`, `policy/`, `safeload/`.
"""

from gpu_platform.finops.feeds.schemas import FeedBatch, FeedSchemaError

__all__ = ["FeedBatch", "FeedSchemaError"]
