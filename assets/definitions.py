"""The one Definitions object of the gpu_platform code location (loaded by workspace.yaml).

Built by a function so the environment is read when Dagster loads the code, not at import.
"""

from __future__ import annotations

import os

import dagster as dg

from assets.finops import finops_assets, finops_jobs, finops_schedules
from assets.finops_today import finops_today_sensor
from assets.gate import gate_assets, gate_jobs, gate_sensors, make_workload_job
from assets.ingest import ingest_assets
from assets.workloads import workload_assets, workload_checks, workload_jobs, workload_schedules
from resources.build import build_resources


def build_definitions(env_name: str | None = None) -> dg.Definitions:
    env_name = env_name or os.environ.get("GPU_PLATFORM_ENV", "local")
    executor = None
    if env_name == "prod":
        from dagster_k8s import k8s_job_executor

        executor = k8s_job_executor
    return dg.Definitions(
        assets=[*workload_assets, *ingest_assets, *finops_assets, *gate_assets],
        asset_checks=[*workload_checks],
        jobs=[*gate_jobs, make_workload_job(executor), *workload_jobs, *finops_jobs],
        sensors=[*gate_sensors, finops_today_sensor],
        schedules=[*workload_schedules, *finops_schedules],
        resources=build_resources(env_name),
    )


@dg.definitions
def defs() -> dg.Definitions:
    return build_definitions()
