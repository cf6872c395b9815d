"""Local GPU inventory and allocation for the local executor (one machine, no Kubernetes).

Inventory comes from NVML (`pynvml`) when it initializes; otherwise from the configured
inventory in `GPU_PLATFORM_LOCAL_GPUS`, and `local_inventory` says so in `detail`.
`LocalGpuAllocator` hands device indices to request ids under a file lock in a state directory,
so concurrent steps (threads or processes) never get the same GPU.

This is the one NVML adapter of the package: `NvmlUnavailable`, `nvml_session` (import, init,
shutdown), `discover_gpus`, and the `FakeNvml` test double. NVML *sampling* into the DCGM sample
schema (`gpu_platform.feeds.nvml.NvmlSampler`) builds on these.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

ENV_LOCAL_GPUS = "GPU_PLATFORM_LOCAL_GPUS"
ENV_STATE_DIR = "GPU_PLATFORM_STATE_DIR"
_MIB = 1024 * 1024


@dataclass(frozen=True)
class GpuDevice:
    """One local GPU. `index` is NVML's (PCI bus) order; the executor sets
    `CUDA_DEVICE_ORDER=PCI_BUS_ID` so CUDA numbers devices the same way."""

    index: int
    uuid: str
    name: str
    memory_mib: int


class NvmlUnavailable(RuntimeError):
    """NVML cannot be used here (no pynvml, no driver, no GPU). `reason` says which, plainly."""

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(f"NVML unavailable: {reason}")


class InventoryError(ValueError):
    """A configured inventory (`GPU_PLATFORM_LOCAL_GPUS`) that does not parse."""


def nvml_text(value: Any) -> str:
    """An NVML string (older pynvml returns bytes) as str."""
    return value.decode() if isinstance(value, bytes) else str(value)


@contextlib.contextmanager
def nvml_session(nvml_module: Any = None) -> Iterator[Any]:
    """Initialised NVML for the block, shut down after. `nvml_module=None` imports `pynvml`;
    tests pass a `FakeNvml`. NVML reference-counts `nvmlInit`, so sessions may nest.

    Raises NvmlUnavailable(reason) when pynvml is missing or NVML cannot initialize.
    """
    nvml = nvml_module
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError as exc:
            raise NvmlUnavailable(f"pynvml (nvidia-ml-py) is not installed ({exc})") from exc
    try:
        nvml.nvmlInit()
    except Exception as exc:  # pynvml raises NVMLError subclasses; a fake may raise anything
        raise NvmlUnavailable(f"nvmlInit failed: {exc}") from exc
    try:
        yield nvml
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


def nvml_handles(nvml: Any) -> list[tuple[int, Any]]:
    """(index, handle) of every GPU, in NVML index order; call inside `nvml_session`."""
    return [(i, nvml.nvmlDeviceGetHandleByIndex(i)) for i in range(nvml.nvmlDeviceGetCount())]


def discover_gpus(nvml_module: Any = None) -> list[GpuDevice]:
    """List GPUs through NVML. `nvml_module=None` imports `pynvml`; pass a `FakeNvml` in tests.

    Raises NvmlUnavailable(reason) when pynvml is missing or NVML cannot initialize.
    """
    with nvml_session(nvml_module) as nvml:
        return [
            GpuDevice(
                index=i,
                uuid=nvml_text(nvml.nvmlDeviceGetUUID(handle)),
                name=nvml_text(nvml.nvmlDeviceGetName(handle)),
                memory_mib=int(nvml.nvmlDeviceGetMemoryInfo(handle).total) // _MIB,
            )
            for i, handle in nvml_handles(nvml)
        ]


def cuda_visible_devices(devices: Iterable[GpuDevice]) -> str:
    """`CUDA_VISIBLE_DEVICES` value naming `devices` by UUID (stable across reboots, unlike indexes)."""
    return ",".join(d.uuid for d in devices)


class ConfiguredInventory:
    """GPUs declared by configuration, for machines where NVML is not available.

    `GPU_PLATFORM_LOCAL_GPUS` accepts a count (`4`: devices 0-3), a list of indices (`0,1,3`), or a
    JSON list of indices or of objects `{"index": 0, "uuid": ..., "name": ..., "memory_mib": ...}`.
    Unset or empty: no GPUs.
    """

    def __init__(self, devices: Sequence[GpuDevice], text: str | None = None):
        self.devices = tuple(devices)
        self.text = text

    @classmethod
    def parse(cls, text: str | None) -> ConfiguredInventory:
        raw = (text or "").strip()
        if not raw:
            return cls((), text)
        try:
            if raw.startswith("["):
                items = json.loads(raw)
                if not isinstance(items, list):
                    raise InventoryError("expected a JSON list")
            elif "," not in raw:
                count = int(raw)
                if count < 0:
                    raise InventoryError("negative GPU count")
                items = list(range(count))
            else:
                items = [int(part) for part in raw.split(",") if part.strip()]
        except (ValueError, json.JSONDecodeError) as exc:
            raise InventoryError(
                f"{ENV_LOCAL_GPUS}={text!r}: use a count (4), indices (0,1,3) or a JSON list ({exc})"
            ) from exc
        devices = []
        for item in items:
            if isinstance(item, int) and not isinstance(item, bool):
                item = {"index": item}
            if not isinstance(item, dict) or not isinstance(item.get("index"), int) or item["index"] < 0:
                raise InventoryError(
                    f"{ENV_LOCAL_GPUS}={text!r}: bad device {item!r} (need a non-negative index)"
                )
            i = item["index"]
            devices.append(
                GpuDevice(
                    index=i,
                    uuid=str(item.get("uuid", f"configured-{i}")),
                    name=str(item.get("name", "configured GPU")),
                    memory_mib=int(item.get("memory_mib", 0)),
                )
            )
        indices = [d.index for d in devices]
        if len(set(indices)) != len(indices):
            raise InventoryError(f"{ENV_LOCAL_GPUS}={text!r}: duplicate device indices")
        return cls(sorted(devices, key=lambda d: d.index), text)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ConfiguredInventory:
        env = os.environ if env is None else env
        return cls.parse(env.get(ENV_LOCAL_GPUS))


@dataclass(frozen=True)
class Inventory:
    """The GPUs of this machine and where the list came from (`detail` is for the logs)."""

    devices: tuple[GpuDevice, ...]
    source: Literal["nvml", "configured"]
    detail: str

    @property
    def indices(self) -> tuple[int, ...]:
        return tuple(d.index for d in self.devices)


def local_inventory(
    nvml_module: Any = None,
    env: Mapping[str, str] | None = None,
    configured: str | None = None,
    use_nvml: bool = True,
) -> Inventory:
    """NVML's devices when NVML initializes, else the configured inventory.

    configured=None: read `GPU_PLATFORM_LOCAL_GPUS` from `env` (default: the process environment).
    use_nvml=False: skip NVML and use the configured inventory.
    """
    try:
        if not use_nvml:
            raise NvmlUnavailable("NVML disabled by configuration (use_nvml=false)")
        devices = discover_gpus(nvml_module)
    except NvmlUnavailable as exc:
        env = os.environ if env is None else env
        text = configured if configured is not None else env.get(ENV_LOCAL_GPUS)
        inv = ConfiguredInventory.parse(text)
        shown = "(unset)" if text is None else text
        return Inventory(
            inv.devices,
            "configured",
            f"no NVML ({exc.reason}): using configured inventory {ENV_LOCAL_GPUS}={shown}"
            f" -> {len(inv.devices)} GPU(s)",
        )
    names = ", ".join(f"{d.index}:{d.name}" for d in devices) or "none"
    return Inventory(tuple(devices), "nvml", f"NVML inventory: {len(devices)} GPU(s) ({names})")


class GpusBusy(RuntimeError):
    """Not enough free GPUs right now for a request."""


def default_state_dir() -> Path:
    """`GPU_PLATFORM_STATE_DIR/gpus`, else a per-user directory under the system temp dir
    (allocations do not outlive a reboot, and neither do the processes holding them)."""
    base = os.environ.get(ENV_STATE_DIR)
    if base:
        return Path(base) / "gpus"
    return Path(tempfile.gettempdir()) / f"gpu-platform-{os.getuid()}" / "gpus"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class LocalGpuAllocator:
    """Hands out local GPU indices to request ids; state in `<state_dir>/allocations.json`.

    Every read-modify-write holds an exclusive `flock` on `<state_dir>/allocations.lock`, so
    threads and processes on this machine never get the same GPU. An allocation whose holder
    process has died is reclaimed on the next acquire.
    """

    def __init__(self, devices: Sequence[int], state_dir: str | Path | None = None):
        self.devices = tuple(sorted(set(devices)))
        self.state_dir = Path(state_dir) if state_dir is not None else default_state_dir()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._state = self.state_dir / "allocations.json"
        self._lock = self.state_dir / "allocations.lock"

    @contextlib.contextmanager
    def _locked(self) -> Iterator[dict[str, Any]]:
        with open(self._lock, "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                state = json.loads(self._state.read_text()) if self._state.exists() else {}
                before = json.dumps(state, sort_keys=True)
                yield state
                if json.dumps(state, sort_keys=True) != before:
                    tmp = self._state.with_suffix(f".{os.getpid()}.tmp")
                    tmp.write_text(json.dumps(state, indent=1, sort_keys=True))
                    os.replace(tmp, self._state)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def allocations(self) -> dict[str, tuple[int, ...]]:
        """Request id -> devices, for live holders."""
        with self._locked() as state:
            return {rid: tuple(a["devices"]) for rid, a in state.items() if _alive(a["pid"])}

    def acquire(self, request_id: str, count: int, pid: int | None = None) -> tuple[int, ...]:
        """Assign `count` free devices (lowest indices first) to `request_id`; raise GpusBusy.

        Idempotent: a request that already holds `count` devices gets the same ones back.
        """
        if count < 0:
            raise ValueError("count must be >= 0")
        if count > len(self.devices):
            raise GpusBusy(f"{request_id} needs {count} GPU(s); this machine has {len(self.devices)}")
        pid = os.getpid() if pid is None else pid
        with self._locked() as state:
            for rid in [rid for rid, a in state.items() if not _alive(a["pid"])]:
                del state[rid]
            held = state.get(request_id)
            if held is not None:
                if len(held["devices"]) != count:
                    raise GpusBusy(f"{request_id} already holds GPU(s) {held['devices']}")
                held["pid"] = pid
                return tuple(held["devices"])
            taken = {d for a in state.values() for d in a["devices"]}
            free = [d for d in self.devices if d not in taken]
            if len(free) < count:
                raise GpusBusy(
                    f"{request_id} needs {count} GPU(s); {len(free)} free of {len(self.devices)} "
                    f"(held by {', '.join(sorted(state)) or 'nobody'})"
                )
            chosen = free[:count]
            state[request_id] = {"devices": chosen, "pid": pid, "since": datetime.now(UTC).isoformat()}
            return tuple(chosen)

    def release(self, request_id: str) -> None:
        with self._locked() as state:
            state.pop(request_id, None)

    @contextlib.contextmanager
    def allocated(
        self, request_id: str, count: int, wait_seconds: float = 0.0, poll_seconds: float = 0.1
    ) -> Iterator[tuple[int, ...]]:
        """Hold `count` GPUs for the block, waiting up to `wait_seconds` for them to be free."""
        deadline = time.monotonic() + wait_seconds
        while True:
            try:
                devices = self.acquire(request_id, count)
                break
            except GpusBusy:
                if count > len(self.devices) or time.monotonic() >= deadline:
                    raise
                time.sleep(poll_seconds)
        try:
            yield devices
        finally:
            self.release(request_id)


@dataclass
class FakeGpu:
    """One simulated GPU for `FakeNvml`; memory in bytes, as NVML reports it.
    `unsupported` names NVML calls that fail with "Not Supported" on this device."""

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


class _Struct:
    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)


class FakeNvml:
    """TEST DOUBLE for the `pynvml` module: exists because no GPU (and no NVML driver) is present
    on CI. Mimics exactly the pynvml functions this package uses: nvmlInit, nvmlShutdown,
    nvmlDeviceGetCount, nvmlDeviceGetHandleByIndex, nvmlDeviceGetUUID, nvmlDeviceGetName,
    nvmlDeviceGetMemoryInfo (`discover_gpus`), plus nvmlDeviceGetUtilizationRates,
    nvmlDeviceGetPowerUsage, nvmlDeviceGetTemperature, nvmlDeviceGetPciInfo,
    nvmlDeviceGetMinorNumber and nvmlDeviceGetComputeRunningProcesses (`NvmlSampler`), and the
    `NVMLError` / `NVML_TEMPERATURE_GPU` names. The real path is covered by the `gpu`-marked tests
    (`make test-gpu`).

    `gpus=[FakeGpu(...), ...]` describes each device; without it, `count` identical devices named
    `name` with `memory_mib` each. `fail_init="reason"` makes nvmlInit fail like a machine without a
    driver. `init_count` tracks nvmlInit/nvmlShutdown balance (`initialized` while above zero).
    """

    class NVMLError(Exception):  # noqa: N818 (pynvml's name)
        """Raised by FakeNvml where pynvml would raise an NVMLError."""

    NVML_TEMPERATURE_GPU = 0

    def __init__(
        self,
        gpus: Sequence[FakeGpu] | None = None,
        *,
        count: int = 4,
        name: str = "NVIDIA H100 80GB HBM3",
        memory_mib: int = 81559,
        fail_init: str | None = None,
    ):
        if gpus is None:
            gpus = [
                FakeGpu(
                    uuid=f"GPU-00000000-0000-0000-0000-{i:012d}",
                    name=name,
                    memory_total=memory_mib * _MIB,
                    bus_id=f"00000000:{0x18 + i:02X}:00.0",
                    minor=i,
                )
                for i in range(count)
            ]
        self.gpus = list(gpus)
        self.fail_init = fail_init
        self.init_count = 0

    @property
    def initialized(self) -> bool:
        return self.init_count > 0

    def nvmlInit(self) -> None:  # noqa: N802
        if self.fail_init is not None:
            raise self.NVMLError(self.fail_init)
        self.init_count += 1

    def nvmlShutdown(self) -> None:  # noqa: N802
        if self.init_count <= 0:
            raise self.NVMLError("Uninitialized")
        self.init_count -= 1

    def _check(self) -> None:
        if self.init_count <= 0:
            raise self.NVMLError("Uninitialized")

    def _gpu(self, handle: FakeGpu, call: str) -> FakeGpu:
        self._check()
        if call in handle.unsupported:
            raise self.NVMLError("Not Supported")
        return handle

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        self._check()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:  # noqa: N802
        self._check()
        if not 0 <= index < len(self.gpus):
            raise self.NVMLError("Invalid Argument")
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


FakeNvmlError = FakeNvml.NVMLError
