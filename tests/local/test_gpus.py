"""Local GPU inventory (NVML via the FakeNvml double, configured inventory) and the allocator."""

from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path

import pytest

from gpu_platform.devices.gpus import (
    ConfiguredInventory,
    FakeNvml,
    GpuDevice,
    GpusBusy,
    InventoryError,
    LocalGpuAllocator,
    NvmlUnavailable,
    discover_gpus,
    local_inventory,
)


def test_discover_with_fake_nvml() -> None:
    nvml = FakeNvml(count=2, name="NVIDIA L4", memory_mib=23034)
    devices = discover_gpus(nvml)
    assert devices == [
        GpuDevice(0, "GPU-00000000-0000-0000-0000-000000000000", "NVIDIA L4", 23034),
        GpuDevice(1, "GPU-00000000-0000-0000-0000-000000000001", "NVIDIA L4", 23034),
    ]
    assert not nvml.initialized, "NVML must be shut down after listing"


def test_nvml_init_failure_is_typed() -> None:
    with pytest.raises(NvmlUnavailable) as info:
        discover_gpus(FakeNvml(fail_init="Driver Not Loaded"))
    assert info.value.reason == "nvmlInit failed: Driver Not Loaded"


@pytest.mark.parametrize(
    ("text", "indices"),
    [
        ("4", (0, 1, 2, 3)),
        ("0,1,3", (0, 1, 3)),
        (" 2 , 0 ", (0, 2)),
        ("[1, 0]", (0, 1)),
        ('[{"index": 5, "name": "RTX 4090", "memory_mib": 24564}]', (5,)),
        ("", ()),
        (None, ()),
        ("0", ()),
    ],
)
def test_configured_inventory_forms(text: str | None, indices: tuple[int, ...]) -> None:
    assert tuple(d.index for d in ConfiguredInventory.parse(text).devices) == indices


@pytest.mark.parametrize("text", ["four", "-1", "0,0", "[-2]", '{"index": 1}', '["a"]'])
def test_configured_inventory_errors(text: str) -> None:
    with pytest.raises(InventoryError, match="GPU_PLATFORM_LOCAL_GPUS"):
        ConfiguredInventory.parse(text)


def test_local_inventory_says_where_gpus_came_from() -> None:
    nvml = local_inventory(FakeNvml(count=3), env={"GPU_PLATFORM_LOCAL_GPUS": "1"})
    assert (nvml.source, nvml.indices) == ("nvml", (0, 1, 2))
    fallback = local_inventory(FakeNvml(fail_init="no driver"), env={"GPU_PLATFORM_LOCAL_GPUS": "0,1"})
    assert (fallback.source, fallback.indices) == ("configured", (0, 1))
    assert fallback.detail.startswith("no NVML (nvmlInit failed: no driver): using configured inventory")
    assert "GPU_PLATFORM_LOCAL_GPUS=0,1" in fallback.detail
    unset = local_inventory(FakeNvml(fail_init="no driver"), env={})
    assert unset.indices == () and "GPU_PLATFORM_LOCAL_GPUS=(unset)" in unset.detail
    off = local_inventory(FakeNvml(count=8), configured="2", use_nvml=False)
    assert (off.source, off.indices) == ("configured", (0, 1))


def test_allocator_assigns_releases_and_refuses(tmp_path: Path) -> None:
    alloc = LocalGpuAllocator([0, 1, 2, 3], tmp_path)
    assert alloc.acquire("a", 2) == (0, 1)
    assert alloc.acquire("a", 2) == (0, 1), "acquire is idempotent per request"
    assert alloc.acquire("b", 1) == (2,)
    with pytest.raises(GpusBusy, match="1 free of 4"):
        alloc.acquire("c", 2)
    with pytest.raises(GpusBusy, match="this machine has 4"):
        alloc.acquire("d", 5)
    alloc.release("a")
    assert alloc.acquire("c", 2) == (0, 1)
    assert alloc.allocations() == {"b": (2,), "c": (0, 1)}


def test_allocation_of_a_dead_process_is_reclaimed(tmp_path: Path) -> None:
    proc = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(0,))
    proc.start()
    proc.join()
    alloc = LocalGpuAllocator([0], tmp_path)
    alloc.acquire("crashed", 1, pid=proc.pid)
    assert alloc.acquire("next", 1) == (0,)


def test_allocated_waits_for_a_free_gpu(tmp_path: Path) -> None:
    alloc = LocalGpuAllocator([0], tmp_path)
    alloc.acquire("holder", 1)
    with pytest.raises(GpusBusy):
        with alloc.allocated("waiter", 1, wait_seconds=0.2):
            pass
    alloc.release("holder")
    with alloc.allocated("waiter", 1) as devices:
        assert devices == (0,)
    assert alloc.allocations() == {}


def _worker(state_dir: str, marks: str, worker: int, rounds: int) -> None:
    alloc = LocalGpuAllocator([0, 1, 2, 3], state_dir)
    for r in range(rounds):
        count = 1 + (worker + r) % 2
        with alloc.allocated(f"w{worker}-r{r}", count, wait_seconds=30, poll_seconds=0.002) as devices:
            assert len(devices) == count
            held = []
            for d in devices:
                # O_EXCL: fails if another holder has this GPU right now.
                fd = os.open(os.path.join(marks, f"gpu-{d}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
                os.close(fd)
                held.append(d)
            time.sleep(0.002)
            for d in held:
                os.unlink(os.path.join(marks, f"gpu-{d}"))


def test_concurrent_processes_never_share_a_gpu(tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_worker, args=(str(tmp_path / "state"), str(marks), i, 15)) for i in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * len(procs)
    assert list(marks.iterdir()) == []
    assert LocalGpuAllocator([0, 1, 2, 3], tmp_path / "state").allocations() == {}
