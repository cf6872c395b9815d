"""Fixtures for the local executor tests: a tiny dagster-pipes workload script and a request."""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest

from gpu_platform.requests.model import JobRequest

WORKLOAD = """
import os, sys, time
from dagster_pipes import open_dagster_pipes

mode = sys.argv[1]
with open_dagster_pipes() as pipes:
    if mode == "sleep":
        child = __import__("subprocess").Popen(["sleep", "60"])
        open(sys.argv[2], "w").write(str(child.pid))
        time.sleep(60)
    if mode == "fail":
        sys.exit(3)
    pipes.report_asset_materialization(
        metadata={
            "cuda_visible_devices": os.environ["CUDA_VISIBLE_DEVICES"],
            "cuda_device_order": os.environ["CUDA_DEVICE_ORDER"],
            "checkpoint_dir": os.environ["GPU_PLATFORM_CHECKPOINT_DIR"],
            "request_id": os.environ["GPU_PLATFORM_REQUEST_ID"],
            "extras_gpus": ",".join(str(i) for i in pipes.extras["gpu_indices"]),
            "own_env": os.environ.get("TRAINER_FLAG", ""),
        }
    )
"""


@pytest.fixture
def workload_script(tmp_path: Path) -> Path:
    script = tmp_path / "workload.py"
    script.write_text(WORKLOAD)
    return script


@pytest.fixture
def make_request(workload_script: Path) -> Callable[..., JobRequest]:
    """A request that runs the workload script in `mode` (`report`, `sleep`, `fail`)."""

    def make(
        mode: str = "report", gpu_count: int = 2, timeout: timedelta = timedelta(minutes=5), *extra: str
    ):
        return JobRequest(
            request_id=f"req-20261129-local-{mode}",
            team="perception",
            lane="research_best_effort",
            gpu_count=gpu_count,
            timeout=timeout,
            command=(sys.executable, str(workload_script), mode, *extra),
            env={"TRAINER_FLAG": "on"},
        )

    return make
