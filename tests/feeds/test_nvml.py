from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpu_platform.devices.gpus import (
    FakeGpu,
    FakeNvml,
    GpuDevice,
    NvmlUnavailable,
    cuda_visible_devices,
    discover_gpus,
)
from gpu_platform.finops.feeds.nvml import GpuInventory, GpuProcess, NvmlSampler
from gpu_platform.finops.feeds.schemas import DCGM_QUARANTINE_SCHEMA, DCGM_SAMPLE_SCHEMA

AT = datetime(2024, 9, 18, 12, tzinfo=UTC)
MIB = 1024 * 1024


def _node() -> FakeNvml:
    return FakeNvml(
        [
            FakeGpu(
                "GPU-aaaa",
                util_gpu=97,
                util_memory=41,
                memory_used=30_000 * MIB,
                power_mw=612_500,
                temperature_c=66,
                bus_id="00000000:18:00.0",
                minor=0,
                processes=[(4242, 29_000 * MIB)],
            ),
            FakeGpu(
                "GPU-bbbb",
                name="NVIDIA L4",
                memory_total=23_034 * MIB,
                minor=1,
                unsupported=frozenset({"nvmlDeviceGetPowerUsage", "nvmlDeviceGetPciInfo"}),
            ),
        ]
    )


def test_sampler_is_a_gpu_inventory() -> None:
    sampler: GpuInventory = NvmlSampler(_node(), hostname="n1")
    assert isinstance(sampler.list_gpus(), list)


def test_discover_gpus_and_cuda_visible_devices() -> None:
    gpus = discover_gpus(_node())
    assert gpus == [
        GpuDevice(0, "GPU-aaaa", "NVIDIA H100 80GB HBM3", 80 * 1024),
        GpuDevice(1, "GPU-bbbb", "NVIDIA L4", 23_034),
    ]
    assert NvmlSampler(_node()).list_gpus() == gpus
    assert cuda_visible_devices(gpus) == "GPU-aaaa,GPU-bbbb"
    assert cuda_visible_devices([]) == ""


def test_sample_maps_nvml_readings_to_dcgm_fields() -> None:
    nvml = _node()
    batch = NvmlSampler(nvml, hostname="gpu-node-07").sample(at=AT)
    assert dict(batch.rows.schema) == DCGM_SAMPLE_SCHEMA
    assert dict(batch.quarantine.schema) == DCGM_QUARANTINE_SCHEMA
    assert batch.rows_in == 12 == batch.accepted + batch.quarantined
    gpu0 = {r["metric"]: r["value"] for r in batch.rows.filter(batch.rows["gpu"] == 0).to_dicts()}
    assert gpu0 == {
        "DCGM_FI_DEV_GPU_UTIL": 97.0,
        "DCGM_FI_DEV_MEM_COPY_UTIL": 41.0,
        "DCGM_FI_DEV_FB_USED": 30_000.0,
        "DCGM_FI_DEV_FB_FREE": 80 * 1024 - 30_000.0,
        "DCGM_FI_DEV_POWER_USAGE": 612.5,
        "DCGM_FI_DEV_GPU_TEMP": 66.0,
    }
    first = batch.rows.row(0, named=True)
    assert (first["hostname"], first["uuid"], first["pci_bus_id"], first["device"], first["ts"]) == (
        "gpu-node-07",
        "GPU-aaaa",
        "00000000:18:00.0",
        "nvidia0",
        AT,
    )
    assert first["source"] == "nvml://gpu-node-07" and first["gpu_instance_id"] is None
    assert nvml.init_count == 0, "every nvmlInit is matched by nvmlShutdown"


def test_unsupported_readings_are_quarantined_not_dropped() -> None:
    batch = NvmlSampler(_node(), hostname="n").sample(at=AT, source="local")
    assert batch.quarantine.select("source", "source_line", "reason").rows() == [
        ("local", 11, "reading 11: gpu 1 DCGM_FI_DEV_POWER_USAGE: NVML Not Supported")
    ]
    gpu1 = batch.rows.filter(batch.rows["gpu"] == 1)
    assert gpu1.height == 5 and gpu1["pci_bus_id"].null_count() == 5


def test_processes() -> None:
    assert NvmlSampler(_node()).processes() == [GpuProcess(gpu_index=0, pid=4242, used_memory=29_000 * MIB)]


def test_no_driver_raises_typed_error_with_reason() -> None:
    sampler = NvmlSampler(FakeNvml([], fail_init="Driver Not Loaded"))
    for call in (sampler.list_gpus, sampler.sample, sampler.processes):
        with pytest.raises(NvmlUnavailable) as info:
            call()
        assert info.value.reason == "nvmlInit failed: Driver Not Loaded"


def test_naive_sample_time_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        NvmlSampler(_node()).sample(at=datetime(2024, 1, 1))


@pytest.mark.gpu
def test_real_nvml_lists_and_samples_gpus() -> None:
    try:
        gpus = discover_gpus()
    except NvmlUnavailable as exc:
        pytest.skip(
            f"needs an NVIDIA GPU with a driver (NVML); run on a GPU node with: make test-gpu ({exc.reason})"
        )
    assert gpus, "NVML initialised but reported no GPU"
    assert all(g.uuid.startswith(("GPU-", "MIG-")) and g.memory_mib > 0 for g in gpus)
    batch = NvmlSampler().sample()
    assert batch.rows_in == len(gpus) * 6 == batch.accepted + batch.quarantined
    assert batch.rows.filter(batch.rows["metric"] == "DCGM_FI_DEV_FB_FREE").height == len(gpus)


def test_recorder_writes_a_days_samples_of_the_pods_gpus_as_dcgm_history(tmp_path):
    """NVML readings of a local run's GPUs become a raw DCGM feed file the ingest loads."""
    from datetime import UTC, datetime, timedelta

    from gpu_platform.devices.gpus import FakeNvml
    from gpu_platform.finops.feeds.dcgm import read_history_parquet
    from gpu_platform.finops.feeds.nvml_recorder import NvmlRecorder

    rec = NvmlRecorder(tmp_path, [1, 2], "team-perception", "req-1-a2", run_id="abcdef123456",
                       nvml_module=FakeNvml(count=4), hostname="Box-1")
    t0 = datetime(2026, 11, 28, 23, 59, 45, tzinfo=UTC)
    assert rec.sample_once(at=t0) == 2 * 6  # two GPUs x six fields
    rec.sample_once(at=t0 + timedelta(seconds=30))  # the next day
    files = rec.stop()
    assert [f.relative_to(tmp_path).as_posix() for f in files] == [
        "dcgm/2026-11-28/nvml-req-1-a2-abcdef12.parquet", "dcgm/2026-11-29/nvml-req-1-a2-abcdef12.parquet"]
    batch = read_history_parquet(files[0], source="dcgm/2026-11-28/x.parquet")
    assert batch.accepted == 12 and batch.quarantined == 0
    row = batch.rows.filter(batch.rows["metric"] == "DCGM_FI_DEV_GPU_UTIL").row(0, named=True)
    assert (row["hostname"], row["namespace"], row["pod"], row["gpu"]) == ("box-1", "team-perception", "req-1-a2", 1)
