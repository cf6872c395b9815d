"""Feed ingestion: dcgm-exporter text and history, FOCUS billing, local NVML sampling.

Pure Python (no Dagster). Parsers return a :class:`~gpu_platform.feeds.schemas.FeedBatch`
(accepted rows, quarantined rows with a reason, and the input row count);
:func:`~gpu_platform.feeds.load.load_batch` writes one (source, day) partition to DuckDB.
:mod:`~gpu_platform.feeds.ingest` loads a day's saved feed files (and DCGM scrapes) with it.
"""

from gpu_platform.feeds.schemas import FeedBatch, FeedSchemaError

__all__ = ["FeedBatch", "FeedSchemaError"]
