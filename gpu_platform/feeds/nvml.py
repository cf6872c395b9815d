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
:class:`NvmlUnavailable` with NVML's reason.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import polars as pl

from gpu_platform.feeds.schemas import DCGM_QUARANTINE_SCHEMA, DCGM_SAMPLE_SCHEMA, FeedBatch

__all__ = [
    "FakeGpu",
    "FakeNvml",
    "GpuInfo",
    "GpuInventory",
    "GpuProcess",
    "NvmlSampler",
    "NvmlUnavailable",
    "cuda_visible_devices",
    "list_gpus",
]

_MIB = 1024 * 1024


class NvmlUnavailable(RuntimeError):
    """NVML could not be initialised; ``reason`` is NVML's own message."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"NVML unavailable: {reason}")


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as NVML enumerates it; ``memory_total`` in bytes."""

    index: int
    uuid: str
    name: str
    memory_total: int


@dataclass(frozen=True)
class GpuProcess:
    """A compute process on a GPU; ``used_memory`` in bytes, None when NVML cannot tell."""

    gpu_index: int
    pid: int
    used_memory: int | None


class GpuInventory(Protocol):
    """What the platform needs from a node's GPUs."""

    def list_gpus(self) -> list[GpuInfo]: ...

    def sample(self, *, source: str | None = None, at: datetime | None = None) -> FeedBatch: ...

    def processes(self) -> list[GpuProcess]: ...


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlSampler:
    """:class:`GpuInventory` backed by NVML.

    ``nvml``: the module to call; None means ``pynvml`` (imported at call time). Tests pass a
    :class:`FakeNvml`. ``hostname``: written on every sample; None means this machine's name.
    Each call initialises and shuts NVML down (NVML reference-counts ``nvmlInit``).
    """

    def __init__(self, nvml: Any | None = None, *, hostname: str | None = None) -> None:
        self._nvml = nvml
        self._hostname = hostname

    @property
    def nvml(self) -> Any:
        if self._nvml is None:
            import pynvml

            self._nvml = pynvml
        return self._nvml

    def _session(self) -> Any:
        try:
            nvml = self.nvml
        except ImportError as exc:
            raise NvmlUnavailable(f"pynvml (nvidia-ml-py) is not installed: {exc}") from exc
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            raise NvmlUnavailable(str(exc)) from exc
        return nvml

    def _handles(self, nvml: Any) -> list[tuple[int, Any]]:
        return [(i, nvml.nvmlDeviceGetHandleByIndex(i)) for i in range(nvml.nvmlDeviceGetCount())]

    def list_gpus(self) -> list[GpuInfo]:
        """Every GPU in NVML index order."""
        nvml = self._session()
        try:
            return [
                GpuInfo(
                    index=i,
                    uuid=_text(nvml.nvmlDeviceGetUUID(h)),
                    name=_text(nvml.nvmlDeviceGetName(h)),
                    memory_total=int(nvml.nvmlDeviceGetMemoryInfo(h).total),
                )
                for i, h in self._handles(nvml)
            ]
        finally:
            nvml.nvmlShutdown()

    def processes(self) -> list[GpuProcess]:
        """Compute processes per GPU (``nvmlDeviceGetComputeRunningProcesses``)."""
        nvml = self._session()
        try:
            out = []
            for i, h in self._handles(nvml):
                for p in nvml.nvmlDeviceGetComputeRunningProcesses(h):
                    used = getattr(p, "usedGpuMemory", None)
                    out.append(
                        GpuProcess(
                            gpu_index=i, pid=int(p.pid), used_memory=None if used is None else int(used)
                        )
                    )
            return out
        finally:
            nvml.nvmlShutdown()

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
        nvml = self._session()
        rows: list[dict[str, Any]] = []
        quarantine: list[tuple[str, int, str, str]] = []
        try:
            number = 0
            for i, h in self._handles(nvml):
                uuid = _text(nvml.nvmlDeviceGetUUID(h))
                labels = {
                    "hostname": host,
                    "gpu": i,
                    "uuid": uuid,
                    "model_name": _text(nvml.nvmlDeviceGetName(h)),
                    "pci_bus_id": self._optional(nvml, lambda h=h: _text(nvml.nvmlDeviceGetPciInfo(h).busId)),
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
        finally:
            nvml.nvmlShutdown()
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


def list_gpus(nvml: Any | None = None) -> list[GpuInfo]:
    """(index, uuid, name, memory_total) of every local GPU; raises :class:`NvmlUnavailable`."""
    return NvmlSampler(nvml).list_gpus()


def cuda_visible_devices(gpus: Iterable[GpuInfo]) -> str:
    """``CUDA_VISIBLE_DEVICES`` value naming ``gpus`` by UUID (stable across reboots, unlike indexes)."""
    return ",".join(g.uuid for g in gpus)


@dataclass
class FakeGpu:
    """One simulated GPU for :class:`FakeNvml`; ``unsupported`` names NVML calls that fail."""

    uuid: str
    name: str = "NVIDIA H100 80GB HBM3"
    memory_total: int = 80 * 1024 * _MIB
    memory_used: int = 0
    util_gpu: int = 0
    util_memory: int = 0
    power_mw: int = 70_000
    temperature_c: int = 35
    bus_id: str = "00000000:18:00.0"
    minor: int = 0
    processes: list[tuple[int, int | None]] = field(default_factory=list)
    unsupported: frozenset[str] = frozenset()


class _FakeNvmlError(Exception):
    pass


class FakeNvml:
    """TEST DOUBLE for the ``pynvml`` module: the few calls :class:`NvmlSampler` makes.

    It exists because no NVIDIA GPU or driver is present where the test suite runs; the real
    path is covered by the ``gpu``-marked test (``make test-gpu`` on a GPU node). Pass it as
    ``NvmlSampler(FakeNvml([...]))``. ``init_error`` makes ``nvmlInit`` fail with that message,
    as pynvml does without a driver. ``init_count`` tracks init/shutdown balance.
    """

    NVMLError = _FakeNvmlError
    NVML_TEMPERATURE_GPU = 0

    def __init__(self, gpus: list[FakeGpu], *, init_error: str | None = None) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.init_count = 0

    def nvmlInit(self) -> None:  # noqa: N802
        if self.init_error is not None:
            raise self.NVMLError(self.init_error)
        self.init_count += 1

    def nvmlShutdown(self) -> None:  # noqa: N802
        if self.init_count <= 0:
            raise self.NVMLError("Uninitialized")
        self.init_count -= 1

    def _gpu(self, handle: FakeGpu, call: str) -> FakeGpu:
        if self.init_count <= 0:
            raise self.NVMLError("Uninitialized")
        if call in handle.unsupported:
            raise self.NVMLError("Not Supported")
        return handle

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:  # noqa: N802
        return self.gpus[index]

    def nvmlDeviceGetUUID(self, h: FakeGpu) -> str:  # noqa: N802
        return self._gpu(h, "nvmlDeviceGetUUID").uuid

    def nvmlDeviceGetName(self, h: FakeGpu) -> str:  # noqa: N802
        return self._gpu(h, "nvmlDeviceGetName").name

    def nvmlDeviceGetMemoryInfo(self, h: FakeGpu) -> Any:  # noqa: N802
        g = self._gpu(h, "nvmlDeviceGetMemoryInfo")
        return _Struct(total=g.memory_total, used=g.memory_used, free=g.memory_total - g.memory_used)

    def nvmlDeviceGetUtilizationRates(self, h: FakeGpu) -> Any:  # noqa: N802
        g = self._gpu(h, "nvmlDeviceGetUtilizationRates")
        return _Struct(gpu=g.util_gpu, memory=g.util_memory)

    def nvmlDeviceGetPowerUsage(self, h: FakeGpu) -> int:  # noqa: N802
        return self._gpu(h, "nvmlDeviceGetPowerUsage").power_mw

    def nvmlDeviceGetTemperature(self, h: FakeGpu, sensor: int) -> int:  # noqa: N802
        return self._gpu(h, "nvmlDeviceGetTemperature").temperature_c

    def nvmlDeviceGetPciInfo(self, h: FakeGpu) -> Any:  # noqa: N802
        return _Struct(busId=self._gpu(h, "nvmlDeviceGetPciInfo").bus_id.encode())

    def nvmlDeviceGetMinorNumber(self, h: FakeGpu) -> int:  # noqa: N802
        return self._gpu(h, "nvmlDeviceGetMinorNumber").minor

    def nvmlDeviceGetComputeRunningProcesses(self, h: FakeGpu) -> list[Any]:  # noqa: N802
        g = self._gpu(h, "nvmlDeviceGetComputeRunningProcesses")
        return [_Struct(pid=pid, usedGpuMemory=used) for pid, used in g.processes]


class _Struct:
    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)
