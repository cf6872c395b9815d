"""Local GPU inventory and allocation for the local executor (one machine, no Kubernetes).

Inventory comes from NVML (`pynvml`) when it initializes; otherwise from the configured
inventory in `GPU_PLATFORM_LOCAL_GPUS`, and `local_inventory` says so in `detail`.
`LocalGpuAllocator` hands device indices to request ids under a file lock in a state directory,
so concurrent steps (threads or processes) never get the same GPU.

This is the one NVML adapter of the package: `NvmlUnavailable`, `nvml_session` (import, init,
shutdown), `discover_gpus`, and the `FakeNvml` test double. NVML *sampling* into the DCGM sample
schema (`gpu_platform.finops.feeds.nvml.NvmlSampler`) builds on these.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
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


@dataclass(frozen=True)
class MigDevice:
    """One MIG device (a GPU instance + compute instance of a MIG-enabled GPU). CUDA addresses it
    by `uuid` (`MIG-...`) in `CUDA_VISIBLE_DEVICES`; `profile` is its MIG profile (`1g.10gb`)."""

    parent_index: int
    uuid: str
    profile: str
    gpu_instance_id: int
    compute_instance_id: int
    memory_mib: int

    @property
    def resource(self) -> str:
        return "nvidia.com/mig-" + self.profile


_PROFILE = re.compile(r"(\d+g\.\d+gb)")


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


def _mig_enabled(nvml: Any, handle: Any) -> bool:
    try:
        current, _pending = nvml.nvmlDeviceGetMigMode(handle)
    except Exception:  # NVMLError_NotSupported on GPUs without MIG (L4, consumer cards)
        return False
    return current == getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1)


def _mig_devices_of(nvml: Any, index: int, handle: Any) -> list[MigDevice]:
    out = []
    for slot in range(int(nvml.nvmlDeviceGetMaxMigDeviceCount(handle))):
        try:
            mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except Exception:  # NVMLError_NotFound: an empty slot
            continue
        name = nvml_text(nvml.nvmlDeviceGetName(mig))
        m = _PROFILE.search(name)
        out.append(
            MigDevice(
                parent_index=index,
                uuid=nvml_text(nvml.nvmlDeviceGetUUID(mig)),
                profile=m.group(1) if m else name,
                gpu_instance_id=int(nvml.nvmlDeviceGetGpuInstanceId(mig)),
                compute_instance_id=int(nvml.nvmlDeviceGetComputeInstanceId(mig)),
                memory_mib=int(nvml.nvmlDeviceGetMemoryInfo(mig).total) // _MIB,
            )
        )
    return out


def discover_devices(nvml_module: Any = None) -> tuple[list[GpuDevice], list[MigDevice]]:
    """Whole GPUs (MIG disabled) and the MIG devices of MIG-enabled GPUs, through NVML.

    A MIG-enabled GPU is not usable as a whole device, so it appears only through its MIG
    devices. Raises NvmlUnavailable(reason) when pynvml is missing or NVML cannot initialize.
    """
    with nvml_session(nvml_module) as nvml:
        whole: list[GpuDevice] = []
        migs: list[MigDevice] = []
        for i, handle in nvml_handles(nvml):
            if _mig_enabled(nvml, handle):
                migs.extend(_mig_devices_of(nvml, i, handle))
                continue
            whole.append(
                GpuDevice(
                    index=i,
                    uuid=nvml_text(nvml.nvmlDeviceGetUUID(handle)),
                    name=nvml_text(nvml.nvmlDeviceGetName(handle)),
                    memory_mib=int(nvml.nvmlDeviceGetMemoryInfo(handle).total) // _MIB,
                )
            )
        return whole, migs


def discover_gpus(nvml_module: Any = None) -> list[GpuDevice]:
    """List whole GPUs through NVML. `nvml_module=None` imports `pynvml`; pass a `FakeNvml` in tests.

    Raises NvmlUnavailable(reason) when pynvml is missing or NVML cannot initialize.
    """
    return discover_devices(nvml_module)[0]


def discover_mig_devices(nvml_module: Any = None) -> list[MigDevice]:
    """The MIG devices of every MIG-enabled GPU (empty when none has MIG on)."""
    return discover_devices(nvml_module)[1]


def cuda_visible_devices(devices: Iterable[GpuDevice]) -> str:
    """`CUDA_VISIBLE_DEVICES` value naming `devices` by UUID (stable across reboots, unlike indexes)."""
    return ",".join(d.uuid for d in devices)


class ConfiguredInventory:
    """GPUs declared by configuration, for machines where NVML is not available.

    `GPU_PLATFORM_LOCAL_GPUS` accepts a count (`4`: devices 0-3), a list of indices (`0,1,3`), or a
    JSON list of indices or of objects `{"index": 0, "uuid": ..., "name": ..., "memory_mib": ...}`.
    Unset or empty: no GPUs.
    """

    def __init__(self, devices: Sequence[GpuDevice], text: str | None = None, mig: Sequence[MigDevice] = ()):
        self.devices = tuple(devices)
        self.text = text
        self.mig = tuple(mig)

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
        migs: list[MigDevice] = []
        for item in items:
            if isinstance(item, int) and not isinstance(item, bool):
                item = {"index": item}
            if isinstance(item, dict) and "mig" in item:
                migs.extend(_configured_migs(text, item))
                continue
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
        indices = [d.index for d in devices] + sorted({m.parent_index for m in migs})
        if len(set(indices)) != len(indices):
            raise InventoryError(f"{ENV_LOCAL_GPUS}={text!r}: duplicate device indices")
        return cls(sorted(devices, key=lambda d: d.index), text, migs)

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
    mig: tuple[MigDevice, ...] = ()

    @property
    def indices(self) -> tuple[int, ...]:
        return tuple(d.index for d in self.devices)

    def allocatable(self, resource: str) -> tuple[int | str, ...]:
        """What the allocator hands out for a GPU resource: whole-GPU indices for `nvidia.com/gpu`,
        MIG device UUIDs of that profile for `nvidia.com/mig-<profile>`."""
        if resource == "nvidia.com/gpu":
            return self.indices
        if resource.startswith("nvidia.com/mig-"):
            profile = resource.removeprefix("nvidia.com/mig-")
            return tuple(m.uuid for m in self.mig if m.profile == profile)
        raise ValueError(f"{resource}: the local executor hands out whole GPUs and MIG devices only")


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
        devices, migs = discover_devices(nvml_module)
    except NvmlUnavailable as exc:
        env = os.environ if env is None else env
        text = configured if configured is not None else env.get(ENV_LOCAL_GPUS)
        inv = ConfiguredInventory.parse(text)
        shown = "(unset)" if text is None else text
        return Inventory(
            inv.devices,
            "configured",
            f"no NVML ({exc.reason}): using configured inventory {ENV_LOCAL_GPUS}={shown}"
            f" -> {len(inv.devices)} GPU(s)" + (f", {len(inv.mig)} MIG device(s)" if inv.mig else ""),
            inv.mig,
        )
    names = ", ".join(f"{d.index}:{d.name}" for d in devices) or "none"
    mig_text = f"; {len(migs)} MIG device(s) ({', '.join(sorted({m.profile for m in migs}))})" if migs else ""
    return Inventory(
        tuple(devices), "nvml", f"NVML inventory: {len(devices)} GPU(s) ({names}){mig_text}", tuple(migs)
    )


def _configured_migs(text: str | None, item: dict[str, Any]) -> list[MigDevice]:
    """`{"index": 0, "mig": [{"uuid": "MIG-...", "profile": "1g.10gb"}, ...]}`: a MIG-enabled GPU."""
    index = item.get("index")
    if not isinstance(index, int) or isinstance(index, bool) or index < 0 or not isinstance(item["mig"], list):
        raise InventoryError(f"{ENV_LOCAL_GPUS}={text!r}: bad MIG GPU {item!r} (need index and a mig list)")
    out = []
    for j, m in enumerate(item["mig"]):
        if not isinstance(m, dict) or not _PROFILE.fullmatch(str(m.get("profile", ""))):
            raise InventoryError(f"{ENV_LOCAL_GPUS}={text!r}: bad MIG device {m!r} (need a profile like 1g.10gb)")
        out.append(
            MigDevice(
                parent_index=index,
                uuid=str(m.get("uuid", f"MIG-configured-{index}-{j}")),
                profile=str(m["profile"]),
                gpu_instance_id=int(m.get("gpu_instance_id", j)),
                compute_instance_id=int(m.get("compute_instance_id", 0)),
                memory_mib=int(m.get("memory_mib", 0)),
            )
        )
    return out


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

    def __init__(self, devices: Sequence[int | str], state_dir: str | Path | None = None):
        self.devices = tuple(sorted(set(devices), key=lambda d: (isinstance(d, str), str(d).zfill(8))))
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
    mig: list[FakeMig] | None = None
    """None: MIG disabled (or not supported); a list: MIG enabled with these devices."""


@dataclass
class FakeMig:
    """One MIG device of a `FakeGpu` (TEST DOUBLE): NVML names it `<GPU name> MIG <profile>`."""

    uuid: str
    profile: str
    gpu_instance_id: int
    compute_instance_id: int = 0
    memory_total: int = 10 * 1024 * _MIB


def fake_mig_gpu(index: int, layout: Mapping[str, int], name: str = "NVIDIA H100 80GB HBM3") -> FakeGpu:
    """A MIG-partitioned `FakeGpu` cut into `layout` (`{"1g.10gb": 7}`), for tests."""
    migs = []
    gi = 0
    for profile, n in layout.items():
        mem_gb = int(profile.split(".")[1].removesuffix("gb"))
        for _ in range(n):
            migs.append(
                FakeMig(
                    uuid=f"MIG-{index:08d}-0000-0000-0000-{gi:012d}",
                    profile=profile,
                    gpu_instance_id=gi,
                    memory_total=mem_gb * 1024 * _MIB,
                )
            )
            gi += 1
    return FakeGpu(
        uuid=f"GPU-00000000-0000-0000-0000-{index:012d}",
        name=name,
        bus_id=f"00000000:{0x18 + index:02X}:00.0",
        minor=index,
        mig=migs,
    )


class _Struct:
    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)


class FakeNvml:
    """TEST DOUBLE for the `pynvml` module: exists because no GPU (and no NVML driver) is present
    on CI. Mimics exactly the pynvml functions this package uses: nvmlInit, nvmlShutdown,
    nvmlDeviceGetCount, nvmlDeviceGetHandleByIndex, nvmlDeviceGetUUID, nvmlDeviceGetName,
    nvmlDeviceGetMemoryInfo (`discover_gpus`), plus nvmlDeviceGetUtilizationRates,
    nvmlDeviceGetPowerUsage, nvmlDeviceGetTemperature, nvmlDeviceGetPciInfo,
    nvmlDeviceGetMinorNumber and nvmlDeviceGetComputeRunningProcesses (`NvmlSampler`), the MIG
    calls nvmlDeviceGetMigMode, nvmlDeviceGetMaxMigDeviceCount, nvmlDeviceGetMigDeviceHandleByIndex,
    nvmlDeviceGetGpuInstanceId and nvmlDeviceGetComputeInstanceId (`discover_devices`; a GPU built
    by `fake_mig_gpu` is MIG-partitioned), and the `NVMLError` / `NVML_TEMPERATURE_GPU` /
    `NVML_DEVICE_MIG_ENABLE` names. The real path is covered by the `gpu`-marked tests
    (`make test-gpu`).

    `gpus=[FakeGpu(...), ...]` describes each device; without it, `count` identical devices named
    `name` with `memory_mib` each. `fail_init="reason"` makes nvmlInit fail like a machine without a
    driver. `init_count` tracks nvmlInit/nvmlShutdown balance (`initialized` while above zero).
    """

    class NVMLError(Exception):  # noqa: N818 (pynvml's name)
        """Raised by FakeNvml where pynvml would raise an NVMLError."""

    NVML_TEMPERATURE_GPU = 0
    NVML_DEVICE_MIG_ENABLE = 1

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

    def nvmlDeviceGetUUID(self, h: FakeGpu | tuple) -> str:  # noqa: N802
        if isinstance(h, tuple):
            return h[1].uuid
        return self._gpu(h, "nvmlDeviceGetUUID").uuid

    def nvmlDeviceGetName(self, h: FakeGpu | tuple) -> str:  # noqa: N802
        if isinstance(h, tuple):
            return f"{h[0].name} MIG {h[1].profile}"
        return self._gpu(h, "nvmlDeviceGetName").name

    def nvmlDeviceGetMemoryInfo(self, h: FakeGpu | tuple) -> Any:  # noqa: N802
        if isinstance(h, tuple):
            return _Struct(total=h[1].memory_total, used=0, free=h[1].memory_total)
        g = self._gpu(h, "nvmlDeviceGetMemoryInfo")
        return _Struct(total=g.memory_total, used=g.memory_used, free=g.memory_total - g.memory_used)

    # MIG: a MIG device handle is (parent FakeGpu, FakeMig).
    def nvmlDeviceGetMigMode(self, h: FakeGpu) -> tuple[int, int]:  # noqa: N802
        g = self._gpu(h, "nvmlDeviceGetMigMode")
        on = int(g.mig is not None)
        return on, on

    def nvmlDeviceGetMaxMigDeviceCount(self, h: FakeGpu) -> int:  # noqa: N802
        return 7 if self._gpu(h, "nvmlDeviceGetMaxMigDeviceCount").mig is not None else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: FakeGpu, index: int) -> tuple:  # noqa: N802
        g = self._gpu(h, "nvmlDeviceGetMigDeviceHandleByIndex")
        if g.mig is None or not 0 <= index < len(g.mig):
            raise self.NVMLError("Not Found")
        return (g, g.mig[index])

    def nvmlDeviceGetGpuInstanceId(self, h: tuple) -> int:  # noqa: N802
        return h[1].gpu_instance_id

    def nvmlDeviceGetComputeInstanceId(self, h: tuple) -> int:  # noqa: N802
        return h[1].compute_instance_id

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
