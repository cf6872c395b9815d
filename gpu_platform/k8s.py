"""What a workload step's Kubernetes Job looks like, from the request and the admitted flavor.

Pure functions: no Dagster import. `k8s_config_for` returns the `dagster-k8s/config` mapping
(the shape of dagster-k8s's `UserDefinedDagsterK8sConfig`, snake_case keys of the Kubernetes
models) that `k8s_job_executor` merges into the step Job. `resources/k8s.py` turns it into a
full manifest with dagster-k8s's own builder.

The Job is created suspended (`spec.suspend: true`) in the team's namespace with Kueue's
`queue-name` and `priority-class` labels; Kueue admits it (unsuspends it) when the lane's
ClusterQueue has quota on the flavor. `activeDeadlineSeconds` counts from the Job's start, which
Kubernetes resets on every suspend/resume, so queue time does not eat the request's timeout.
"""

from __future__ import annotations

import hashlib
import math
import re
from typing import Any

from gpu_platform.policy import GPU, Flavor, Policy
from gpu_platform.requests import JobRequest, matching_flavors

LABEL_TEAM = "gpu-platform.io/team"
LABEL_LANE = "gpu-platform.io/lane"
LABEL_REQUEST_ID = "gpu-platform.io/request-id"
LABEL_FLAVOR = "gpu-platform.io/flavor"
ANNOTATION_REQUEST_ID = "gpu-platform.io/request-id"
"""Annotation with the request id verbatim (a label value is capped at 63 characters)."""

LABEL_NODE_POOL = "gpu-platform.io/node-pool"
"""Node label naming the node pool (`training`, `inference`, `spot`) of a flavor."""
LABEL_GPU_PRODUCT = "nvidia.com/gpu.product"
"""Node label set by NVIDIA GPU feature discovery (`NVIDIA-H100-80GB-HBM3`)."""

KUEUE_QUEUE_NAME = "kueue.x-k8s.io/queue-name"
KUEUE_PRIORITY_CLASS = "kueue.x-k8s.io/priority-class"

ENV_REQUEST_ID = "GPU_PLATFORM_REQUEST_ID"
ENV_CHECKPOINT_DIR = "GPU_PLATFORM_CHECKPOINT_DIR"

JOB_BACKOFF_LIMIT = 0
"""Pods are not retried by the Job controller: Dagster owns step retries, Kueue owns requeueing."""

_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def kueue_name(lane: str) -> str:
    """A lane name as a Kubernetes object name: underscores become hyphens (`release-eval`)."""
    return lane.replace("_", "-").lower()


def local_queue_name(lane: str) -> str:
    """The LocalQueue (one per lane in each team namespace) that a lane's Jobs are queued in."""
    return kueue_name(lane)


def priority_class_name(lane: str) -> str:
    """The Kueue WorkloadPriorityClass of a lane (named after the lane, hyphenated)."""
    return kueue_name(lane)


def label_value(value: str) -> str:
    """`value` if it is a valid Kubernetes label value, else a stable, valid stand-in.

    The stand-in keeps the readable part (invalid characters become `-`, at most 52 characters)
    and appends 10 hex characters of the value's sha256, so two different values never share it.
    """
    if len(value) <= 63 and _LABEL_VALUE.match(value):
        return value
    digest = hashlib.sha256(value.encode()).hexdigest()[:10]
    readable = re.sub(r"[^A-Za-z0-9_.-]", "-", value)[:52].strip("-_.")
    return f"{readable}-{digest}" if readable else digest


def _request_id(request: JobRequest) -> str:
    if not request.request_id:
        raise ValueError("request has no request_id: submit it to the ledger first (or pass one to render)")
    return request.request_id


def _lane_and_team(request: JobRequest, policy: Policy) -> tuple[str, str]:
    if not request.lane or request.lane not in policy.lanes:
        raise ValueError(f"lane: unknown lane {request.lane!r}")
    if not request.team or request.team not in policy.teams:
        raise ValueError(f"team: unknown team {request.team!r}")
    return request.lane, request.team


def pod_labels(request: JobRequest, flavor_name: str | None = None) -> dict[str, str]:
    """Labels on the step pod, so DCGM samples (pod labels) map back to team, lane and request."""
    labels = {
        LABEL_TEAM: label_value(request.team or ""),
        LABEL_LANE: label_value(request.lane or ""),
        LABEL_REQUEST_ID: label_value(_request_id(request)),
    }
    if flavor_name:
        labels[LABEL_FLAVOR] = label_value(flavor_name)
    return labels


def kueue_labels(request: JobRequest) -> dict[str, str]:
    """Job labels Kueue reads: the lane's LocalQueue and WorkloadPriorityClass."""
    if not request.lane:
        raise ValueError("request has no lane")
    return {
        KUEUE_QUEUE_NAME: local_queue_name(request.lane),
        KUEUE_PRIORITY_CLASS: priority_class_name(request.lane),
    }


def namespace_for(request: JobRequest, policy: Policy) -> str:
    """The team's namespace, where the lane's LocalQueue lives and the step Job must be created."""
    _, team = _lane_and_team(request, policy)
    return policy.team(team).namespace


def resolve_flavor(request: JobRequest, policy: Policy, flavor_name: str | None = None) -> Flavor:
    """The flavor a request runs on: `flavor_name` (admission's choice) checked against the lane's
    quota and the request's gpu_type, or, when None, the first flavor that matches."""
    lane, _ = _lane_and_team(request, policy)
    candidates = matching_flavors(policy, lane, request.gpu_type)
    if flavor_name is None:
        if not candidates:
            raise ValueError(f"lane {lane} has no quota on a flavor matching gpu_type {request.gpu_type!r}")
        return policy.flavor(candidates[0])
    if flavor_name not in policy.flavor_by_name:
        raise ValueError(f"unknown flavor {flavor_name!r} (one of: {', '.join(policy.flavor_by_name)})")
    if flavor_name not in candidates:
        raise ValueError(
            f"flavor {flavor_name!r} does not fit request: lane {lane} with gpu_type {request.gpu_type!r} "
            f"may use {', '.join(candidates) or 'no flavor'}"
        )
    return policy.flavor(flavor_name)


def _cpu_quantity(cores: float) -> str:
    millis = math.ceil(cores * 1000)
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def _memory_quantity(gib: float) -> str:
    mib = math.ceil(gib * 1024)
    return f"{mib // 1024}Gi" if mib % 1024 == 0 else f"{mib}Mi"


def resources_for(request: JobRequest) -> dict[str, dict[str, str | int]]:
    """Container resources. GPUs are whole devices: request == limit (Kubernetes requires it)."""
    if request.gpu_count is None:
        raise ValueError("gpu_count: required")
    limits: dict[str, str | int] = {GPU: request.gpu_count}
    requests: dict[str, str | int] = {GPU: request.gpu_count}
    if request.cpu is not None:
        requests["cpu"] = _cpu_quantity(request.cpu)
    if request.memory_gib is not None:
        requests["memory"] = limits["memory"] = _memory_quantity(request.memory_gib)
    return {"limits": limits, "requests": requests}


def tolerations_for(flavor: Flavor) -> list[dict[str, str]]:
    """One toleration per flavor taint (GPU taint, spot taint, ...)."""
    out = []
    for taint in flavor.taints:
        tol = {"key": taint.key, "effect": taint.effect}
        if taint.value is None:
            tol["operator"] = "Exists"
        else:
            tol["operator"] = "Equal"
            tol["value"] = taint.value
        out.append(tol)
    return out


def node_selector_for(flavor: Flavor) -> dict[str, str]:
    """GPU product and node pool of the flavor, plus any extra node labels it declares."""
    return {LABEL_GPU_PRODUCT: flavor.gpu_product, LABEL_NODE_POOL: flavor.node_pool, **flavor.node_labels}


def timeout_seconds(request: JobRequest, policy: Policy) -> int:
    """The request's timeout in whole seconds; without one, the lane's max_run_duration."""
    timeout = request.timeout
    if timeout is None:
        lane, _ = _lane_and_team(request, policy)
        timeout = policy.lane(lane).max_run_duration
    return max(1, math.ceil(timeout.total_seconds()))


def k8s_config_for(request: JobRequest, flavor_name: str, policy: Policy) -> dict[str, Any]:
    """The `dagster-k8s/config` mapping for the request's workload step on `flavor_name`.

    Keys are those of dagster-k8s's `UserDefinedDagsterK8sConfig`: `container_config`,
    `pod_template_spec_metadata`, `pod_spec_config`, `job_metadata`, `job_spec_config`.
    Raises ValueError when the request lacks what a Job needs (request_id, container_digest,
    gpu_count, a known lane and team) or the flavor does not fit it.
    """
    flavor = resolve_flavor(request, policy, flavor_name)
    request_id = _request_id(request)
    if not request.container_digest:
        raise ValueError("container_digest: required to pin the image by digest")
    labels = pod_labels(request, flavor.name)
    annotations = {ANNOTATION_REQUEST_ID: request_id}
    return {
        "container_config": {
            "image": request.image_ref,
            "resources": resources_for(request),
            "env": [{"name": ENV_REQUEST_ID, "value": request_id}],
        },
        "pod_template_spec_metadata": {"labels": labels, "annotations": annotations},
        "pod_spec_config": {
            "node_selector": node_selector_for(flavor),
            "tolerations": tolerations_for(flavor),
        },
        "job_metadata": {
            "namespace": namespace_for(request, policy),
            "labels": {**labels, **kueue_labels(request)},
            "annotations": annotations,
        },
        "job_spec_config": {
            "suspend": True,
            "active_deadline_seconds": timeout_seconds(request, policy),
            "backoff_limit": JOB_BACKOFF_LIMIT,
        },
    }


def executor_config_for(request: JobRequest, flavor_name: str, policy: Policy) -> dict[str, Any]:
    """`k8s_job_executor` config for a run that executes this one request.

    `job_namespace` is the team's namespace (the LocalQueue's); `step_k8s_config` applies
    `k8s_config_for` to the run's steps. Static op tags cannot vary per request, so the gate
    passes this as the run's `execution.config`.
    """
    return {
        "job_namespace": namespace_for(request, policy),
        "step_k8s_config": k8s_config_for(request, flavor_name, policy),
    }
