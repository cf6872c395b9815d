"""NVML sampling on the local node, into the ``raw_dcgm_samples`` schema.

:class:`NvmlSampler` reads each GPU through ``pynvml`` (``nvidia-ml-py``) and names its
readings after the DCGM fields dcgm-exporter would report, so that local samples and cluster
samples share one table:

================================  ==========================================  =====
DCGM field                        NVML call                                   unit
================================  ==========================================  =====
``DCGM_FI_DEV_GPU_UTIL``          ``nvmlDeviceGetUtilizationRates().gpu``     %
``DCGM_FI_DEV_MEM_COPY_UTIL``     ``nvmlDeviceGetUtilizationRates().memory``  %
``DCGM_FI_DEV_FB_USED``           ``nvmlDeviceGetMemoryInfo().used``          MiB
``DCGM_FI_DEV_FB_FREE``           ``nvmlDeviceGetMemoryInfo().free``          MiB
``DCGM_FI_DEV_POWER_USAGE``       ``nvmlDeviceGetPowerUsage()`` (mW / 1000)   W
``DCGM_FI_DEV_GPU_TEMP``          ``nvmlDeviceGetTemperature(GPU sensor)``    C
================================  ==========================================  =====

``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` (graphics engine activity, the better busy signal) is a DCGM
profiling field with no NVML call: NVML-only nodes have ``DCGM_FI_DEV_GPU_UTIL`` only, which
counts a kernel running on any SM as 100 %. MIG instances are not enumerated here
(``gpu_instance_*`` are NULL). A reading the device does not support (NVML ``NotSupported``)
is quarantined with its reason, so ``rows_in`` = GPUs x fields.

When NVML cannot start (no driver, no library, no GPU) every entry point raises
:class:`gpu_platform.devices.gpus.NvmlUnavailable` with NVML's reason. Device discovery
(:func:`gpu_platform.devices.gpus.discover_gpus`), the NVML session and the ``FakeNvml`` test double live
in :mod:`gpu_platform.devices.gpus`; this module only samples.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import polars as pl

from gpu_platform.devices.gpus import GpuDevice, discover_gpus, nvml_handles, nvml_session, nvml_text
from gpu_platform.finops.feeds.schemas import DCGM_QUARANTINE_SCHEMA, DCGM_SAMPLE_SCHEMA, FeedBatch

__all__ = ["GpuInventory", "GpuProcess", "NvmlSampler"]

_MIB = 1024 * 1024


@dataclass(frozen=True)
class GpuProcess:
    """A compute process on a GPU; ``used_memory`` in bytes, None when NVML cannot tell."""

    gpu_index: int
    pid: int
    used_memory: int | None


class GpuInventory(Protocol):
    """What the platform needs from a node's GPUs."""

    def list_gpus(self) -> list[GpuDevice]: ...

    def sample(self, *, source: str | None = None, at: datetime | None = None) -> FeedBatch: ...

    def processes(self) -> list[GpuProcess]: ...


class NvmlSampler:
    """:class:`GpuInventory` backed by NVML.

    ``nvml``: the module to call; None means ``pynvml`` (imported at call time). Tests pass a
    :class:`gpu_platform.devices.gpus.FakeNvml`. ``hostname``: written on every sample; None means this machine's name.
    Each call initialises and shuts NVML down (NVML reference-counts ``nvmlInit``).
    """

    def __init__(self, nvml: Any | None = None, *, hostname: str | None = None) -> None:
        self._nvml = nvml
        self._hostname = hostname

    def list_gpus(self) -> list[GpuDevice]:
        """Every GPU in NVML index order (:func:`gpu_platform.devices.gpus.discover_gpus`)."""
        return discover_gpus(self._nvml)

    def processes(self) -> list[GpuProcess]:
        """Compute processes per GPU (``nvmlDeviceGetComputeRunningProcesses``)."""
        with nvml_session(self._nvml) as nvml:
            out = []
            for i, h in nvml_handles(nvml):
                for p in nvml.nvmlDeviceGetComputeRunningProcesses(h):
                    used = getattr(p, "usedGpuMemory", None)
                    out.append(
                        GpuProcess(
                            gpu_index=i, pid=int(p.pid), used_memory=None if used is None else int(used)
                        )
                    )
            return out

    def sample(self, *, source: str | None = None, at: datetime | None = None) -> FeedBatch:
        """One reading of every mapped field of every GPU.

        ``source=None``: ``nvml://<hostname>``. ``at=None``: now (UTC); must be aware.
        ``source_line`` numbers the readings 1.. (GPU by GPU, fields in the table's order).
        """
        when = datetime.now(UTC) if at is None else at
        if when.tzinfo is None:
            raise ValueError("at must be timezone-aware")
        host = self._hostname or socket.gethostname()
        src = f"nvml://{host}" if source is None else source
        rows: list[dict[str, Any]] = []
        quarantine: list[tuple[str, int, str, str]] = []
        number = 0
        with nvml_session(self._nvml) as nvml:
            for i, h in nvml_handles(nvml):
                uuid = nvml_text(nvml.nvmlDeviceGetUUID(h))
                labels = {
                    "hostname": host,
                    "gpu": i,
                    "uuid": uuid,
                    "model_name": nvml_text(nvml.nvmlDeviceGetName(h)),
                    "pci_bus_id": self._optional(
                        nvml, lambda h=h: nvml_text(nvml.nvmlDeviceGetPciInfo(h).busId)
                    ),
                    "device": self._optional(nvml, lambda h=h: f"nvidia{nvml.nvmlDeviceGetMinorNumber(h)}"),
                }
                for metric, read in self._readers(nvml, h):
                    number += 1
                    try:
                        value = float(read())
                    except nvml.NVMLError as exc:
                        raw = f"gpu={i} uuid={uuid} metric={metric}"
                        quarantine.append(
                            (src, number, raw, f"reading {number}: gpu {i} {metric}: NVML {exc}")
                        )
                        continue
                    rows.append(
                        {
                            "ts": when,
                            "metric": metric,
                            "value": value,
                            **labels,
                            "source": src,
                            "source_line": number,
                        }
                    )
        schema = {c: t for c, t in DCGM_SAMPLE_SCHEMA.items() if c != "extra_labels"}
        frame = pl.DataFrame(rows or None, schema=schema)
        frame = frame.with_columns(extra_labels=pl.lit(None, dtype=pl.String)).select(
            DCGM_SAMPLE_SCHEMA.keys()
        )
        q = pl.DataFrame(quarantine, schema=DCGM_QUARANTINE_SCHEMA, orient="row")
        return FeedBatch(rows=frame, quarantine=q, rows_in=number)

    @staticmethod
    def _optional(nvml: Any, read: Callable[[], str]) -> str | None:
        try:
            return read()
        except nvml.NVMLError:
            return None

    @staticmethod
    def _readers(nvml: Any, h: Any) -> list[tuple[str, Callable[[], float]]]:
        return [
            ("DCGM_FI_DEV_GPU_UTIL", lambda: nvml.nvmlDeviceGetUtilizationRates(h).gpu),
            ("DCGM_FI_DEV_MEM_COPY_UTIL", lambda: nvml.nvmlDeviceGetUtilizationRates(h).memory),
            ("DCGM_FI_DEV_FB_USED", lambda: nvml.nvmlDeviceGetMemoryInfo(h).used / _MIB),
            ("DCGM_FI_DEV_FB_FREE", lambda: nvml.nvmlDeviceGetMemoryInfo(h).free / _MIB),
            ("DCGM_FI_DEV_POWER_USAGE", lambda: nvml.nvmlDeviceGetPowerUsage(h) / 1000.0),
            ("DCGM_FI_DEV_GPU_TEMP", lambda: nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU)),
        ]
