"""The one Definitions object of the gpu_platform code location (loaded by workspace.yaml).

Built by a function so the environment is read when Dagster loads the code, not at import.
"""

from __future__ import annotations

import os

import dagster as dg

from assets.finops import finops_assets, finops_jobs, finops_schedules
from assets.finops_today import finops_today_sensor
from assets.gate import admission_sensor, gate_assets, gate_jobs, make_admission_sensor
from assets.ingest import ingest_assets
from assets.serving import serving_assets, serving_jobs, serving_sensors
from assets.workloads import (
    kind_jobs,
    make_retention_schedule,
    make_workload_jobs,
    retention_sweep,
    workload_assets,
    workload_checks,
)
from resources.build import build_resources


def build_definitions(env_name: str | None = None) -> dg.Definitions:
    env_name = env_name or os.environ.get("GPU_PLATFORM_ENV", "local")
    retention = os.environ.get("GPU_PLATFORM_RETENTION_SCHEDULE", "off")
    if retention not in ("on", "off"):
        raise ValueError(f"GPU_PLATFORM_RETENTION_SCHEDULE={retention!r}: expected on or off")
    retention_on = retention == "on"
    jobs, sensor = kind_jobs, admission_sensor
    if env_name == "prod":
        from dagster_k8s import k8s_job_executor

        # the workload jobs (one per kind) run their GPU step as a Kubernetes Job
        jobs = make_workload_jobs(k8s_job_executor)
        sensor = make_admission_sensor(jobs)
    return dg.Definitions(
        assets=[*workload_assets, *ingest_assets, *finops_assets, *gate_assets, *serving_assets],
        asset_checks=[*workload_checks],
        jobs=[*gate_jobs, *jobs, retention_sweep, *finops_jobs, *serving_jobs],
        sensors=[sensor, finops_today_sensor, *serving_sensors],
        schedules=[make_retention_schedule(retention_on), *finops_schedules],
        resources=build_resources(env_name),
        # what runs without a job of their own use: asset backfills and materializations from the
        # UI. Their cost steps share one warehouse slot, so they run one after the other anyway;
        # a process per step would only add its start-up (the workload jobs name their executor)
        executor=dg.in_process_executor,
    )


@dg.definitions
def defs() -> dg.Definitions:
    return build_definitions()
