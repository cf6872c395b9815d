"""Feed ingestion: dcgm-exporter text and history, FOCUS billing, local NVML sampling.

Pure Python (no Dagster). Parsers return a :class:`~gpu_platform.finops.feeds.schemas.FeedBatch`
(accepted rows, quarantined rows with a reason, and the input row count);
:func:`~gpu_platform.finops.feeds.load.load_batch` writes one (source, day) partition to DuckDB.
:mod:`~gpu_platform.finops.feeds.ingest` loads a day's saved feed files (and DCGM scrapes) with it.
The DCGM parser is :mod:`~gpu_platform.finops.feeds.dcgm` (text: pieces, threads, the batch; every
name importable from it) over one module per job: ``dcgm_piece`` (one piece, the compiled scan
``_dcgm_scan.c`` or numpy), ``dcgm_tokenized`` (lines off the fast path), ``dcgm_quarantine``
(value rules, reasons, the line bound), ``dcgm_labels`` (label blocks, the line tokenizer),
``dcgm_buffer`` (a piece's bytes, the compiled helpers), ``dcgm_prometheus`` (query_range
answers) and ``dcgm_history`` (Parquet history).
May import `devices/`, `cluster/`, `policy/`, `safeload/`.
"""

from gpu_platform.finops.feeds.schemas import FeedBatch, FeedSchemaError

__all__ = ["FeedBatch", "FeedSchemaError"]
