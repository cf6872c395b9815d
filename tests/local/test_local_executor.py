"""The local executor runs a real dagster-pipes subprocess inside `dg.materialize`."""

import os
import time
from datetime import timedelta
from pathlib import Path

import dagster as dg
import pytest

from gpu_platform.devices.gpus import FakeNvml, NvmlUnavailable, discover_gpus
from resources.local_executor import LocalGpuExecutor

# dagster-pipes itself (open_pipes_session) touches a preview API; not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore::dagster.PreviewWarning")


def _materialize(executor: LocalGpuExecutor, request, checkpoint_dir: Path, nvml_module, instance):
    @dg.asset
    def training_run(context: dg.AssetExecutionContext, gpu_executor: LocalGpuExecutor):
        invocation = gpu_executor.run(context, request, checkpoint_dir, nvml_module=nvml_module)
        return invocation.get_materialize_result()

    return dg.materialize(
        [training_run], resources={"gpu_executor": executor}, instance=instance, raise_on_error=False
    )


def _metadata(result) -> dict[str, str]:
    (mat,) = result.asset_materializations_for_node("training_run")
    return {k: v.value for k, v in mat.metadata.items()}


def _messages(instance, result) -> list[str]:
    return [e.user_message for e in instance.all_logs(result.run_id)]


def test_gpus_from_fake_nvml(tmp_path: Path, make_request) -> None:
    executor = LocalGpuExecutor(state_dir=str(tmp_path / "state"), local_gpus="7")
    with dg.instance_for_test() as instance:
        result = _materialize(
            executor, make_request(gpu_count=2), tmp_path / "ckpt", FakeNvml(count=4), instance
        )
        assert result.success
        meta = _metadata(result)
        assert meta["cuda_visible_devices"] == "0,1"
        assert meta["extras_gpus"] == "0,1"
        assert meta["cuda_device_order"] == "PCI_BUS_ID"
        assert meta["checkpoint_dir"] == str(tmp_path / "ckpt")
        assert meta["request_id"] == "req-20261129-local-report"
        assert meta["own_env"] == "on"
        assert (tmp_path / "ckpt").is_dir()
        messages = _messages(instance, result)
        assert any("NVML inventory: 4 GPU(s)" in m for m in messages)
        assert not any("no NVML" in m for m in messages)
    assert executor.inventory(FakeNvml(count=4)).source == "nvml"


def test_gpus_from_configured_inventory_when_nvml_fails(tmp_path: Path, make_request) -> None:
    executor = LocalGpuExecutor(state_dir=str(tmp_path / "state"), local_gpus="2,3,5")
    no_driver = FakeNvml(fail_init="NVML Shared Library Not Found")
    with dg.instance_for_test() as instance:
        result = _materialize(executor, make_request(gpu_count=2), tmp_path / "ckpt", no_driver, instance)
        assert result.success
        assert _metadata(result)["cuda_visible_devices"] == "2,3"
        messages = _messages(instance, result)
        assert any(
            "no NVML (nvmlInit failed: NVML Shared Library Not Found): using configured inventory "
            "GPU_PLATFORM_LOCAL_GPUS=2,3,5" in m
            for m in messages
        ), messages


def test_configured_inventory_from_env(tmp_path: Path, make_request, monkeypatch) -> None:
    monkeypatch.setenv("GPU_PLATFORM_LOCAL_GPUS", "1")
    executor = LocalGpuExecutor(state_dir=str(tmp_path / "state"), use_nvml=False)
    with dg.instance_for_test() as instance:
        result = _materialize(executor, make_request(gpu_count=1), tmp_path / "ckpt", None, instance)
        assert result.success
        assert _metadata(result)["cuda_visible_devices"] == "0"
        assert any("GPU_PLATFORM_LOCAL_GPUS=1" in m for m in _messages(instance, result))


def test_not_enough_gpus_fails_plainly(tmp_path: Path, make_request) -> None:
    executor = LocalGpuExecutor(state_dir=str(tmp_path / "state"), local_gpus="")
    with dg.instance_for_test() as instance:
        result = _materialize(
            executor, make_request(gpu_count=1), tmp_path / "ckpt", FakeNvml(fail_init="x"), instance
        )
        assert not result.success
        (failure,) = [e for e in result.all_events if e.is_step_failure]
        text = failure.step_failure_data.error.message
        assert "cannot get 1 GPU(s)" in text and "set GPU_PLATFORM_LOCAL_GPUS" in text


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] not in "ZX"
    except FileNotFoundError:
        return False


def test_timeout_kills_process_group_and_fails_step(tmp_path: Path, make_request) -> None:
    pid_file = tmp_path / "child.pid"
    request = make_request("sleep", 1, timedelta(seconds=1), str(pid_file))
    executor = LocalGpuExecutor(state_dir=str(tmp_path / "state"), kill_grace_seconds=1.0)
    started = time.monotonic()
    with dg.instance_for_test() as instance:
        result = _materialize(executor, request, tmp_path / "ckpt", FakeNvml(count=1), instance)
    assert time.monotonic() - started < 20
    assert not result.success
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    text = failure.step_failure_data.error.message
    assert "request req-20261129-local-sleep exceeded its timeout of 1s" in text
    assert "process group" in text
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child), "the job's child process outlived the timeout"
    # The GPU went back to the pool.
    assert executor.inventory(FakeNvml(count=1)).indices == (0,)
    from gpu_platform.devices.gpus import LocalGpuAllocator

    assert LocalGpuAllocator([0], tmp_path / "state").allocations() == {}


def test_nonzero_exit_fails_step(tmp_path: Path, make_request) -> None:
    executor = LocalGpuExecutor(state_dir=str(tmp_path / "state"))
    with dg.instance_for_test() as instance:
        result = _materialize(
            executor, make_request("fail", 1), tmp_path / "ckpt", FakeNvml(count=1), instance
        )
    assert not result.success
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    assert "exited with code 3" in failure.step_failure_data.error.message


@pytest.mark.gpu
def test_real_nvml_inventory_and_run(tmp_path: Path, make_request) -> None:
    try:
        devices = discover_gpus()
    except NvmlUnavailable as exc:
        message = "needs an NVIDIA GPU with a driver (NVML); run on a GPU node with: make test-gpu"
        if os.environ.get("GPU_PLATFORM_REQUIRE_GPU"):
            pytest.fail(f"{message} ({exc.reason})")
        pytest.skip(message)
    assert devices, "NVML initialized but reports no GPU"
    assert [d.index for d in devices] == sorted(d.index for d in devices)
    assert all(d.uuid.startswith(("GPU-", "MIG-")) and d.memory_mib > 0 for d in devices)
    executor = LocalGpuExecutor(state_dir=str(tmp_path / "state"))
    with dg.instance_for_test() as instance:
        result = _materialize(executor, make_request(gpu_count=1), tmp_path / "ckpt", None, instance)
        assert result.success
        assert _metadata(result)["cuda_visible_devices"] == "0"
        assert any(m.startswith("NVML inventory:") for m in _messages(instance, result))


def test_mig_slice_runs_on_a_mig_device_of_the_double(tmp_path: Path, make_request) -> None:
    """FakeNvml (a test double: no GPU here) with GPU 1 MIG-partitioned: a 1g.10gb request gets one
    MIG device by its UUID; whole-GPU requests never see the partitioned GPU."""
    from gpu_platform.devices.gpus import FakeGpu, fake_mig_gpu

    nvml = FakeNvml(gpus=[FakeGpu(uuid="GPU-whole-0"), fake_mig_gpu(1, {"2g.20gb": 2, "1g.10gb": 3})])
    executor = LocalGpuExecutor(state_dir=str(tmp_path / "state"))
    inv = executor.inventory(nvml)
    assert inv.indices == (0,)
    assert [m.profile for m in inv.mig] == ["2g.20gb", "2g.20gb", "1g.10gb", "1g.10gb", "1g.10gb"]
    assert "5 MIG device(s) (1g.10gb, 2g.20gb)" in inv.detail
    slice_request = make_request(gpu_count=1).model_copy(update={"gpu_resource": "nvidia.com/mig-1g.10gb"})
    with dg.instance_for_test() as instance:
        result = _materialize(executor, slice_request, tmp_path / "ckpt", nvml, instance)
        assert result.success
        visible = _metadata(result)["cuda_visible_devices"]
        assert visible == inv.mig[2].uuid and visible.startswith("MIG-")
        too_many = make_request(gpu_count=4).model_copy(
            update={"gpu_resource": "nvidia.com/mig-1g.10gb", "request_id": "req-too-many"}
        )
        failed = _materialize(executor, too_many, tmp_path / "ckpt2", nvml, instance)
        assert not failed.success
        (failure,) = [e for e in failed.all_events if e.is_step_failure]
        assert "needs 4 GPU(s); this machine has 3" in failure.step_failure_data.error.message


def test_configured_inventory_declares_mig_devices() -> None:
    from gpu_platform.devices.gpus import ConfiguredInventory, InventoryError

    inv = ConfiguredInventory.parse(
        '[0, {"index": 1, "mig": [{"uuid": "MIG-a", "profile": "1g.10gb"}, {"uuid": "MIG-b", "profile": "1g.10gb"}]}]'
    )
    assert [d.index for d in inv.devices] == [0]
    assert [m.uuid for m in inv.mig] == ["MIG-a", "MIG-b"]
    with pytest.raises(InventoryError, match="need a profile like 1g.10gb"):
        ConfiguredInventory.parse('[{"index": 1, "mig": [{"uuid": "MIG-a", "profile": "tiny"}]}]')


@pytest.mark.gpu
def test_real_mig_devices_when_mig_is_enabled(tmp_path: Path) -> None:
    """On a GPU node with MIG enabled (`nvidia-smi -mig 1` and a layout), the inventory lists
    its MIG devices by MIG-... UUID and profile. Needs `make test-gpu` on such a node."""
    from gpu_platform.devices.gpus import discover_devices

    try:
        _whole, migs = discover_devices()
    except NvmlUnavailable as exc:
        message = "needs an NVIDIA GPU with a driver (NVML); run on a GPU node with: make test-gpu"
        if os.environ.get("GPU_PLATFORM_REQUIRE_GPU"):
            pytest.fail(f"{message} ({exc.reason})")
        pytest.skip(message)
    if not migs:
        pytest.skip(
            "needs an NVIDIA GPU with MIG enabled; enable it (nvidia-smi -i 0 -mig 1, then create "
            "instances with nvidia-smi mig -cgi ... -C) and run: make test-gpu"
        )
    assert all(m.uuid.startswith("MIG-") and "g." in m.profile and m.memory_mib > 0 for m in migs)


def test_run_records_nvml_samples_of_its_gpus_as_a_dcgm_feed(tmp_path: Path, make_request) -> None:
    feeds = tmp_path / "feeds"
    executor = LocalGpuExecutor(state_dir=str(tmp_path / "state"), nvml_feeds_dir=str(feeds))
    with dg.instance_for_test() as instance:
        result = _materialize(executor, make_request(gpu_count=2), tmp_path / "ckpt", FakeNvml(count=4), instance)
        assert result.success
        files = list(feeds.glob("dcgm/*/nvml-req-20261129-local-report-a1-*.parquet"))
        assert len(files) >= 1  # the first reading is taken when the run starts
        import polars as pl

        gpus = set(pl.concat([pl.read_parquet(f) for f in files])["gpu"].to_list())
        assert gpus == {0, 1}
        assert any("NVML samples in" in m for m in _messages(instance, result))


def test_pipes_preview_warning_is_not_repeated_to_users(tmp_path: Path, make_request) -> None:
    """dagster's pipes session warns on every run about a preview property it reads itself."""
    import warnings

    executor = LocalGpuExecutor(state_dir=str(tmp_path / "state"), local_gpus="1", use_nvml=False)
    with dg.instance_for_test() as instance, warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        result = _materialize(executor, make_request(gpu_count=1), tmp_path / "ckpt", None, instance)
    assert result.success
    assert not [w for w in seen if "expected_writer_count" in str(w.message)]
