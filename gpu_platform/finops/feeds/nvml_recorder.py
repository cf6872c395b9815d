"""NVML samples of a local run's GPUs as a raw DCGM feed (local runs priced from measured use).

While the local executor runs a request, :class:`NvmlRecorder` samples the request's GPUs with
:class:`~gpu_platform.finops.feeds.nvml.NvmlSampler` every `interval_s` (15 s, dcgm-exporter's
interval, which the cost models' integration rule assumes), labels each sample with the pod
identity of the attempt (`namespace`, `<request_id>-a<attempt>`), and on stop writes one Parquet
history file per UTC day under `feeds/dcgm/<day>/nvml-<pod>-<run>.parquet` in the
`raw_dcgm_samples` schema, where `raw_dcgm_samples` loads it like any DCGM history. A file is
written atomically (temp file + rename); readings NVML refuses are dropped (the sampler
quarantines them; only accepted rows are kept here).
"""

from __future__ import annotations

import os
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl

from gpu_platform.finops.feeds.nvml import NvmlSampler
from gpu_platform.finops.feeds.schemas import DCGM_SAMPLE_SCHEMA


class NvmlRecorder:
    """Samples `gpus` (NVML indices) of this machine for one pod until :meth:`stop`."""

    def __init__(self, feeds_dir: str | os.PathLike[str], gpus: list[int], namespace: str | None, pod: str,
                 run_id: str = "", interval_s: float = 15.0, nvml_module: Any = None, hostname: str | None = None):
        self.feeds_dir = Path(feeds_dir)
        self.gpus = set(gpus)
        self.namespace, self.pod, self.run_id = namespace, pod, run_id
        self.interval_s = interval_s
        self.sampler = NvmlSampler(nvml_module, hostname=hostname.lower() if hostname else None)
        self._frames: list[pl.DataFrame] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.errors: list[str] = []

    def sample_once(self, at: datetime | None = None) -> int:
        """One reading of the pod's GPUs; returns the rows kept."""
        batch = self.sampler.sample(source="nvml", at=at)
        rows = batch.rows.filter(pl.col("gpu").is_in(sorted(self.gpus))).with_columns(
            namespace=pl.lit(self.namespace, dtype=pl.String), pod=pl.lit(self.pod, dtype=pl.String),
            container=pl.lit("main", dtype=pl.String), hostname=pl.col("hostname").str.to_lowercase())
        if rows.height:
            self._frames.append(rows)
        return rows.height

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample_once()
            except Exception as exc:  # a sampling failure never fails the run; it is reported
                self.errors.append(str(exc))
            self._stop.wait(self.interval_s)

    def start(self) -> NvmlRecorder:
        self._thread = threading.Thread(target=self._loop, name=f"nvml-{self.pod}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> list[Path]:
        """Stop sampling and write the samples, one file per UTC day; returns the files written."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_s + 5)
        if not self._frames:
            return []
        frame = pl.concat(self._frames).select(DCGM_SAMPLE_SCHEMA.keys())
        written = []
        tag = f"{self.pod}-{self.run_id[:8]}" if self.run_id else self.pod
        for (day,), part in frame.with_columns(_day=pl.col("ts").dt.convert_time_zone("UTC").dt.date()).group_by(
                ["_day"], maintain_order=True):
            out = self.feeds_dir / "dcgm" / day.isoformat() / f"nvml-{tag}.parquet"
            out.parent.mkdir(parents=True, exist_ok=True)
            tmp = out.with_suffix(".parquet.tmp")
            part.drop("_day", "source", "source_line").write_parquet(tmp)
            os.replace(tmp, out)
            written.append(out)
        self._frames = []
        return written


def now() -> datetime:
    return datetime.now(UTC)
