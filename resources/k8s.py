"""The Kubernetes Job a workload step becomes, built by dagster-k8s's own code.

`render_job_manifest` goes through the same path as `k8s_job_executor.launch_step`: the
`dagster-k8s/config` tag is parsed by `get_user_defined_k8s_config` and the Job is built by
`construct_dagster_k8s_job` with the executor's job name, labels and component. What differs in a
real run is only what the executor fills in from the run (step args and env, run launcher config).
"""

from __future__ import annotations

import json
from typing import Any

from dagster_k8s.job import (
    USER_DEFINED_K8S_CONFIG_KEY,
    DagsterK8sJobConfig,
    construct_dagster_k8s_job,
    get_k8s_job_name,
    get_user_defined_k8s_config,
)
from kubernetes.client import ApiClient

from gpu_platform.k8s import executor_config_for, k8s_config_for
from gpu_platform.policy import Policy
from gpu_platform.requests import JobRequest

PREVIEW_RUN_ID = "00000000-0000-0000-0000-000000000000"
STEP_ARGS_PLACEHOLDER = ("dagster", "api", "execute_step")
"""What the executor passes as container args (it appends the serialized step; omitted here)."""


def k8s_tags(request: JobRequest, flavor_name: str, policy: Policy) -> dict[str, str]:
    """`{"dagster-k8s/config": <json>}` for an op's or asset's `op_tags`."""
    return {
        USER_DEFINED_K8S_CONFIG_KEY: json.dumps(k8s_config_for(request, flavor_name, policy), sort_keys=True)
    }


def k8s_run_config(request: JobRequest, flavor_name: str, policy: Policy) -> dict[str, Any]:
    """Run config that gives a one-request run's steps the request's Job config and namespace.

    Used by the gate when it launches the run; validated against `k8s_job_executor`'s schema in
    tests.
    """
    return {"execution": {"config": executor_config_for(request, flavor_name, policy)}}


def render_job(
    request: JobRequest,
    flavor_name: str,
    policy: Policy,
    run_id: str = PREVIEW_RUN_ID,
    step_key: str = "workload",
    job_name: str = "workload",
    image_pull_policy: str = "IfNotPresent",
    service_account_name: str | None = None,
):
    """The `kubernetes.client.V1Job` the k8s executor would create for this request's step."""
    tags = k8s_tags(request, flavor_name, policy)
    user_config = get_user_defined_k8s_config(tags)
    job_config = DagsterK8sJobConfig(
        job_image=request.image_ref,
        image_pull_policy=image_pull_policy,
        service_account_name=service_account_name,
    )
    k8s_job_name = f"dagster-step-{get_k8s_job_name(run_id, step_key)}"
    return construct_dagster_k8s_job(
        job_config=job_config,
        args=list(STEP_ARGS_PLACEHOLDER),
        job_name=k8s_job_name,
        pod_name=k8s_job_name,
        component="step_worker",
        user_defined_k8s_config=user_config,
        labels={"dagster/job": job_name, "dagster/op": step_key, "dagster/run-id": run_id},
        env_vars=[
            {"name": "DAGSTER_RUN_JOB_NAME", "value": job_name},
            {"name": "DAGSTER_RUN_STEP_KEY", "value": step_key},
        ],
    )


def render_job_manifest(
    request: JobRequest,
    flavor_name: str,
    policy: Policy,
    run_id: str = PREVIEW_RUN_ID,
    step_key: str = "workload",
    job_name: str = "workload",
) -> dict[str, Any]:
    """The Job manifest (camelCase, as `kubectl apply` takes it) for this request's step."""
    job = render_job(request, flavor_name, policy, run_id=run_id, step_key=step_key, job_name=job_name)
    return ApiClient().sanitize_for_serialization(job)
