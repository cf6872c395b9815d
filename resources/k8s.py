"""The Kubernetes Jobs a request's run becomes, built by dagster-k8s's own code.

`render_step_job` goes through the same path as `k8s_job_executor.launch_step`: the executor
config (`step_k8s_config` for every step, `per_step_k8s_config` for the workload step) is merged
the way `K8sStepHandler` merges it, with dagster-k8s's `K8sContainerContext`, and the Job is built
by `construct_dagster_k8s_job` with the executor's job name, labels and component. What differs in
a real run is only what the executor fills in from the run (step args and env, run launcher
config) and the run id (random per run, so per attempt).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from dagster_k8s.client import DagsterKubernetesClient
from dagster_k8s.container_context import K8sContainerContext
from dagster_k8s.job import (
    USER_DEFINED_K8S_CONFIG_KEY,
    DagsterK8sJobConfig,
    UserDefinedDagsterK8sConfig,
    construct_dagster_k8s_job,
    get_k8s_job_name,
)
from kubernetes.client import ApiClient, BatchV1Api, CoreV1Api

from gpu_platform.cluster.client import api_client
from gpu_platform.cluster.gang import GangOutcome, PodEnd, run_gang
from gpu_platform.cluster.jobs import (
    WorkVolume,
    executor_config_for,
    gang_job_config_for,
    is_gang,
    k8s_config_for,
    rendezvous_service_for,
    workload_step,
)
from gpu_platform.cluster.names import gang_job_name, run_id_for
from gpu_platform.policy import Policy
from gpu_platform.requests.model import JobRequest

STEP_ARGS_PLACEHOLDER = ("dagster", "api", "execute_step")
"""What the executor passes as container args (it appends the serialized step; omitted here)."""


def k8s_tags(
    request: JobRequest, flavor_name: str, policy: Policy, attempt: int = 1, work_volume: WorkVolume | None = None
) -> dict[str, str]:
    """`{"dagster-k8s/config": <json>}` of the workload step, for an op's or asset's `op_tags`."""
    config = k8s_config_for(request, flavor_name, policy, attempt, work_volume)
    return {USER_DEFINED_K8S_CONFIG_KEY: json.dumps(config, sort_keys=True)}


def k8s_run_config(
    request: JobRequest, flavor_name: str, policy: Policy, attempt: int = 1, work_volume: WorkVolume | None = None
) -> dict[str, Any]:
    """Run config that gives the workload step the request's GPU Job and every other step a
    CPU-only Job in the team's namespace. Used by the gate when it launches the run; validated
    against `k8s_job_executor`'s schema in tests."""
    return {"execution": {"config": executor_config_for(request, flavor_name, policy, attempt, work_volume)}}


def step_container_context(executor_config: dict[str, Any], op_name: str) -> K8sContainerContext:
    """The container context `K8sStepHandler` builds for one step from the executor config:
    `step_k8s_config`, then the step's `per_step_k8s_config` entry merged over it."""
    base = K8sContainerContext(
        namespace=executor_config.get("job_namespace"),
        service_account_name=executor_config.get("service_account_name"),
        run_k8s_config=UserDefinedDagsterK8sConfig.from_dict(executor_config.get("step_k8s_config", {})),
    )
    per_step = executor_config.get("per_step_k8s_config", {}).get(op_name, {})
    return base.merge(K8sContainerContext(run_k8s_config=UserDefinedDagsterK8sConfig.from_dict(per_step)))


def step_job_name(run_id: str, step_key: str) -> str:
    """The executor's name for a step Job (`dagster-step-<hash of run id and step key>`)."""
    return f"dagster-step-{get_k8s_job_name(run_id, step_key)}"


def _job_config(request: JobRequest, image_pull_policy: str, service_account_name: str | None) -> DagsterK8sJobConfig:
    return DagsterK8sJobConfig(
        job_image=request.image_ref,
        image_pull_policy=image_pull_policy,
        service_account_name=service_account_name,
    )


def render_step_job(
    request: JobRequest,
    flavor_name: str,
    policy: Policy,
    step_key: str | None = None,
    *,
    attempt: int = 1,
    run_id: str | None = None,
    job_name: str = "workload",
    work_volume: WorkVolume | None = None,
    image_pull_policy: str = "IfNotPresent",
    service_account_name: str | None = None,
):
    """The `kubernetes.client.V1Job` the k8s executor would create for one step of the request's run.

    step_key=None: the workload step. run_id=None: `run_id_for(request_id, attempt)`, so Jobs of
    different requests and attempts never share a name.
    """
    step_key = step_key or workload_step(request)
    run_id = run_id or run_id_for(request.request_id or "", attempt)
    executor_config = executor_config_for(request, flavor_name, policy, attempt, work_volume)
    context = step_container_context(executor_config, step_key)
    name = step_job_name(run_id, step_key)
    return construct_dagster_k8s_job(
        job_config=_job_config(request, image_pull_policy, service_account_name),
        args=list(STEP_ARGS_PLACEHOLDER),
        job_name=name,
        pod_name=name,
        component="step_worker",
        user_defined_k8s_config=context.run_k8s_config,
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
    step_key: str | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """The Job manifest (camelCase, as `kubectl apply` takes it) for one step (default: the workload step)."""
    job = render_step_job(request, flavor_name, policy, step_key, **kwargs)
    return ApiClient().sanitize_for_serialization(job)


def render_gang_job(
    request: JobRequest,
    flavor_name: str,
    policy: Policy,
    *,
    attempt: int = 1,
    work_volume: WorkVolume | None = None,
    image_pull_policy: str = "IfNotPresent",
    service_account_name: str | None = None,
    env: Mapping[str, str] | None = None,
):
    """The Indexed Job (`kubernetes.client.V1Job`) of a multi-node request, built by the same
    dagster-k8s builder as every step Job: one pod per node running the request's `command`, the
    rendezvous env, Kueue's labels and TAS annotations (`gang_job_config_for`; `env`: more
    container env, what the launching step adds)."""
    config = gang_job_config_for(request, flavor_name, policy, attempt, work_volume, env)
    name = gang_job_name(request.request_id or "", attempt)
    return construct_dagster_k8s_job(
        job_config=_job_config(request, image_pull_policy, service_account_name),
        args=list(request.command) or None,
        job_name=name,
        pod_name=name,
        component="gang_worker",
        user_defined_k8s_config=UserDefinedDagsterK8sConfig.from_dict(config),
        labels={"gpu-platform.io/workload": request.workload or ""},
    )


def render_workload_manifests(
    request: JobRequest, flavor_name: str, policy: Policy, **kwargs: Any
) -> list[dict[str, Any]]:
    """What the cluster gets for a request's GPU work: its workload step Job, or, for a
    multi-node request, the headless rendezvous Service and the Indexed Job (camelCase manifests)."""
    if not is_gang(request):
        return [render_job_manifest(request, flavor_name, policy, **kwargs)]
    attempt = kwargs.get("attempt", 1)
    job = render_gang_job(
        request, flavor_name, policy, attempt=attempt, work_volume=kwargs.get("work_volume")
    )
    return [rendezvous_service_for(request, policy, attempt), ApiClient().sanitize_for_serialization(job)]


def kubernetes_client(kubeconfig: str = "", api: Any = None) -> DagsterKubernetesClient:
    """dagster-k8s's `DagsterKubernetesClient` (what `k8s_job_executor` creates and watches step
    Jobs with) on the platform's one API client (`gpu_platform.cluster.client.api_client`:
    kubeconfig, else in-cluster service account). api: an existing `ApiClient`."""
    api = api or api_client(kubeconfig)
    return DagsterKubernetesClient(
        batch_api=BatchV1Api(api), core_api=CoreV1Api(api), logger=logging.info, sleeper=time.sleep, timer=time.time
    )


def launch_gang(
    request: JobRequest,
    flavor_name: str,
    policy: Policy,
    *,
    attempt: int,
    client: Any,
    on_pod_log: Callable[[PodEnd, str], None],
    log: Callable[[str], None] = lambda _m: None,
    work_volume: WorkVolume | None = None,
    env: Mapping[str, str] | None = None,
    poll_seconds: float = 10.0,
    sleep: Callable[[float], None] = time.sleep,
) -> GangOutcome:
    """Create a multi-node request's headless Service and Indexed Job (`render_gang_job`, the
    same builder as the executor's step Jobs) through `client` and watch them to the end
    (`gpu_platform.cluster.gang.run_gang`: raises `GangFailed` when a pod fails)."""
    job = render_gang_job(request, flavor_name, policy, attempt=attempt, work_volume=work_volume, env=env)
    service = rendezvous_service_for(request, policy, attempt)
    return run_gang(client, service, job, on_pod_log=on_pod_log, log=log, poll_seconds=poll_seconds, sleep=sleep)
