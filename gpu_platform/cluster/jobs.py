"""What a request's step Jobs look like, from the request and the lane's flavors.

Pure functions: no Dagster import. `k8s_config_for` returns the `dagster-k8s/config` mapping
(the shape of dagster-k8s's `UserDefinedDagsterK8sConfig`, snake_case keys of the Kubernetes
models) of the request's one GPU step; `cpu_step_config_for` that of every other step of its
run (checks, evidence bookkeeping), which asks for no GPU and no Kueue queue. `executor_config_for`
puts both in `k8s_job_executor` config (`step_k8s_config` + `per_step_k8s_config`).
`resources/k8s.py` turns them into full manifests with dagster-k8s's own builder.

The GPU Job is created suspended (`spec.suspend: true`) in the team's namespace with Kueue's
`queue-name` and `priority-class` labels, named by `gpu_platform.cluster.names` exactly as the
export names the LocalQueue and WorkloadPriorityClass. The Job does not pin a flavor: its pod
template has a required node affinity with one term per flavor the request accepts (its lane's
flavors that match its `gpu_type`) of the gate flavor's kind, topology-aware or not, and the
Topology Aware Scheduling annotation that kind needs in Kueue (`topology_annotations`), so Kueue
chooses among them and, on admission, injects the chosen ResourceFlavor's node labels and
tolerations. `activeDeadlineSeconds` counts from the
Job's start, which Kubernetes resets on every suspend/resume, so queue time does not eat the
request's timeout.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpu_platform.cluster.names import (  # noqa: F401  (re-exported: the Job's names live there)
    ANNOTATION_GATE_FLAVOR,
    ANNOTATION_REQUEST_ID,
    KUEUE_PRIORITY_CLASS,
    KUEUE_QUEUE_NAME,
    LABEL_ATTEMPT,
    LABEL_GPU_PRODUCT,
    LABEL_GPU_SHARING,
    LABEL_LANE,
    LABEL_NODE_POOL,
    LABEL_REQUEST_ID,
    LABEL_STEP,
    LABEL_TEAM,
    flavor_topology_levels,
    gang_job_name,
    k8s_name,
    label_value,
    local_queue_name,
    priority_class_name,
)
from gpu_platform.policy import GPU, Flavor, Policy
from gpu_platform.requests.model import JobRequest, matching_flavors, shaped_flavors

ENV_REQUEST_ID = "GPU_PLATFORM_REQUEST_ID"
ENV_CHECKPOINT_DIR = "GPU_PLATFORM_CHECKPOINT_DIR"
ENV_WORK_ROOT = "GPU_PLATFORM_WORK_ROOT"
WORK_VOLUME_NAME = "gpu-platform-work"
STEP_SERVICE_ACCOUNT = "gpu-platform-step"
"""The ServiceAccount every step Job of a run runs as, in the team's namespace (where the
deploy tree creates it, with a Role for what the gang step does: its Service, Job and pods). The
run launcher's account lives in the Dagster namespace only, so a step pod could not use it."""

JOB_BACKOFF_LIMIT = 0
"""Pods are not retried by the Job controller: Dagster owns step retries, Kueue owns requeueing."""


@dataclass(frozen=True, slots=True)
class WorkVolume:
    """The volume that holds every request's work directory (checkpoints, scratch, logs before
    they enter the evidence store) and outlives any pod: a PersistentVolumeClaim, ReadWriteMany,
    on a filesystem with atomic rename (NFS, EFS, Filestore, CephFS).

    It is mounted at `mount_path` in every step pod and in the pod that runs the admission
    gate, so the gate's "checkpointed" test reads the checkpoints where the workload wrote them.
    `mount_path` is the work root (`GPU_PLATFORM_WORK_ROOT`): a request's checkpoints are at
    `<mount_path>/<request>/checkpoints/<workload kind>/ckpt-*`.
    """

    claim_name: str
    mount_path: str = "/var/lib/gpu-platform/work"


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


def pod_labels(request: JobRequest, attempt: int = 1, step: str | None = None) -> dict[str, str]:
    """Labels on the step pod, so DCGM samples (pod labels) map back to team, lane and request,
    and the gate's read-back maps a Job (and its Kueue Workload) back to a request attempt."""
    labels = {
        LABEL_TEAM: label_value(request.team or ""),
        LABEL_LANE: label_value(request.lane or ""),
        LABEL_REQUEST_ID: label_value(_request_id(request)),
        LABEL_ATTEMPT: str(attempt),
    }
    if step:
        labels[LABEL_STEP] = label_value(step)
    return labels


def kueue_labels(request: JobRequest) -> dict[str, str]:
    """Job labels Kueue reads: the lane's LocalQueue and WorkloadPriorityClass, named as the
    export names them (`gpu_platform.cluster.names`)."""
    if not request.lane:
        raise ValueError("request has no lane")
    return {
        KUEUE_QUEUE_NAME: local_queue_name(request.lane),
        KUEUE_PRIORITY_CLASS: priority_class_name(request.lane),
    }


RUN_STEPS: dict[str, tuple[str, ...]] = {
    **{k: (k,) for k in ("label_batch", "training_run", "replay", "map_segmentation", "evidence_pack")},
    "released_model": ("model_evidence_pack", "released_model"),
    "released_map": ("map_evidence_pack", "released_map"),
}
"""Request workload -> the steps (asset keys) one run of it has, in order: a release needs its
evidence pack step in the same run, so that the pack's blocking checks can stop it. The
workload assets' jobs (`assets/workloads.py`) select exactly these."""


def workload_step(request: JobRequest) -> str:
    """The step (op name) of a request's run that runs its workload and so asks for its GPUs:
    the asset named after the request's workload (`replay`, `released_model`, ...)."""
    if not request.workload:
        raise ValueError("workload: required to know which step asks for GPUs")
    return request.workload


def namespace_for(request: JobRequest, policy: Policy) -> str:
    """The team's namespace, where the lane's LocalQueue lives and the step Job must be created."""
    _, team = _lane_and_team(request, policy)
    return policy.team(team).namespace


def resolve_flavor(request: JobRequest, policy: Policy, flavor_name: str | None = None) -> Flavor:
    """The flavor a request runs on: `flavor_name` (admission's choice) checked against the lane's
    quota, the request's gpu_type and its `topology:` (only a topology-aware flavor), or, when
    None, the first flavor the gate's engine could choose: matching, able to place the request's
    node shape, topology-aware when it asks for a topology (the order both the engine and Kueue
    try them in)."""
    lane, _ = _lane_and_team(request, policy)
    candidates = matching_flavors(policy, lane, request.gpu_type, request.gpu_resource, request.site)
    if flavor_name is None:
        usable = [n for n in candidates if request.topology is None or is_topology_aware(policy, n)]
        if request.gpu_resource == GPU and request.gpu_count:
            usable = shaped_flavors(policy, request, usable) or usable
        if not usable:
            raise ValueError(f"lane {lane} has no quota on a flavor matching gpu_type {request.gpu_type!r}")
        return policy.flavor(usable[0])
    if flavor_name not in policy.flavor_by_name:
        raise ValueError(f"unknown flavor {flavor_name!r} (one of: {', '.join(policy.flavor_by_name)})")
    if flavor_name not in candidates:
        raise ValueError(
            f"flavor {flavor_name!r} does not fit request: lane {lane} with gpu_type {request.gpu_type!r} "
            f"may use {', '.join(candidates) or 'no flavor'}"
        )
    if request.topology is not None and not is_topology_aware(policy, flavor_name):
        raise ValueError(
            f"flavor {flavor_name!r} does not fit request: its topology ({request.topology.mode} "
            f"{request.topology.level}) needs a topology-aware flavor, and Kueue would refuse this one: "
            f'Flavor "{flavor_name}" does not support TopologyAwareScheduling'
        )
    return policy.flavor(flavor_name)


def _cpu_quantity(cores: float) -> str:
    millis = math.ceil(cores * 1000)
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def _memory_quantity(gib: float) -> str:
    mib = math.ceil(gib * 1024)
    return f"{mib // 1024}Gi" if mib % 1024 == 0 else f"{mib}Mi"


def resources_for(request: JobRequest) -> dict[str, dict[str, str | int]]:
    """Container resources of one pod: `gpu_count` of the request's GPU resource (whole GPUs, a MIG
    profile or shared replicas, as the device plugin names them), or `gpus_per_node` for each pod of
    a multi-node request; request == limit (Kubernetes requires it for extended resources)."""
    if request.gpu_count is None:
        raise ValueError("gpu_count: required")
    res = request.gpu_resource or GPU
    per_pod = request.gpus_per_pod if is_gang(request) else request.gpu_count
    limits: dict[str, str | int] = {res: per_pod}
    requests: dict[str, str | int] = {res: per_pod}
    if request.cpu is not None:
        requests["cpu"] = _cpu_quantity(request.cpu)
    if request.memory_gib is not None:
        requests["memory"] = limits["memory"] = _memory_quantity(request.memory_gib)
    return {"limits": limits, "requests": requests}


# -- multi-node (gang) requests ------------------------------------------------------------------

TAS_REQUIRED = "kueue.x-k8s.io/podset-required-topology"
TAS_PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
"""Kueue Topology Aware Scheduling: the pod template annotations naming the topology level (a node
label of the flavor's Topology) that all pods of the PodSet must / should share."""
TAS_UNCONSTRAINED = "kueue.x-k8s.io/podset-unconstrained-topology"
"""Kueue TAS without a constraint (`"true"`): the PodSet is placed by TAS on any nodes of the
flavor, and, being an explicit request, may use a topology-aware flavor in any ClusterQueue."""
COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
RENDEZVOUS_PORT = 29500
"""torchrun's default c10d / static rendezvous port (`--master_port`)."""


def is_gang(request: JobRequest) -> bool:
    """A request of more than one node: one pod per node, admitted together (one Kueue Workload)."""
    return (request.nodes or 1) > 1


def is_topology_aware(policy: Policy, flavor: Flavor | str) -> bool:
    """The flavor's exported ResourceFlavor names a Topology (`spec.topologyName`)."""
    return bool(flavor_topology_levels(policy, flavor if isinstance(flavor, str) else flavor.name))


def topology_annotations(request: JobRequest, flavor: Flavor | str, policy: Policy) -> dict[str, str]:
    """The TAS annotation of the Job's pod template on the flavor the gate admitted it on.

    Kueue (kubernetes-sigs/kueue `pkg/scheduler/flavorassigner/tas_flavorassigner.go`
    `checkPodSetAndFlavorMatchForTAS`; the rule in `gpu_platform/admission/tas.py`) lets a PodSet
    without a topology annotation use a topology-aware flavor only when every flavor of its
    ClusterQueue is topology-aware, and one with an annotation only topology-aware flavors. So the
    annotation follows the gate's flavor: on a topology-aware flavor the request's `topology`
    level (`podset-required-topology` / `podset-preferred-topology`), or, without one,
    `podset-unconstrained-topology: "true"` (single pods and gangs alike); on any other flavor
    none. Raises ValueError for a request with `topology:` on a flavor that is not
    topology-aware (Kueue would refuse it: `does not support TopologyAwareScheduling`)."""
    name = flavor if isinstance(flavor, str) else flavor.name
    topo = request.topology
    if not is_topology_aware(policy, name):
        if topo is not None:
            raise ValueError(
                f"topology: flavor {name} is not topology-aware (no topology_levels), so Kueue would refuse "
                f'the Job: Flavor "{name}" does not support TopologyAwareScheduling'
            )
        return {}
    if topo is None:
        return {TAS_UNCONSTRAINED: "true"}
    return {TAS_REQUIRED: topo.required} if topo.required else {TAS_PREFERRED: topo.preferred or ""}


def rendezvous_env(request: JobRequest, attempt: int = 1) -> list[dict[str, Any]]:
    """What `torchrun` and `torch.distributed` read, for every pod of the Indexed Job: MASTER_ADDR
    is pod 0's stable name under the headless Service (`<job>-0.<service>`), NODE_RANK the pod's
    completion index (downward API), NNODES the pod count, NPROC_PER_NODE the GPUs of one pod,
    WORLD_SIZE all processes; the same values as torchrun's `PET_*` variables, so a plain
    `torchrun train.py` needs no flags."""
    name = gang_job_name(_request_id(request), attempt)
    nodes, per = request.nodes or 1, request.gpus_per_pod
    index = {"value_from": {"field_ref": {"field_path": f"metadata.annotations['{COMPLETION_INDEX_ANNOTATION}']"}}}
    plain = {
        "MASTER_ADDR": f"{name}-0.{name}",
        "MASTER_PORT": str(RENDEZVOUS_PORT),
        "NNODES": str(nodes),
        "NPROC_PER_NODE": str(per),
        "WORLD_SIZE": str(nodes * per),
    }
    env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in plain.items()]
    env.append({"name": "NODE_RANK", **index})
    env += [{"name": f"PET_{k}", "value": v} for k, v in plain.items() if k != "WORLD_SIZE"]
    env.append({"name": "PET_NODE_RANK", **index})
    return env


def rendezvous_service_for(request: JobRequest, policy: Policy, attempt: int = 1) -> dict[str, Any]:
    """The headless Service of a multi-node request's Indexed Job (same name): it gives pod 0 the
    stable DNS name MASTER_ADDR points at. `publishNotReadyAddresses`: pods rendezvous before any is
    ready. A manifest (camelCase), as `kubectl apply` takes it."""
    name = gang_job_name(_request_id(request), attempt)
    labels = pod_labels(request, attempt)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace_for(request, policy), "labels": labels},
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {LABEL_REQUEST_ID: labels[LABEL_REQUEST_ID], LABEL_ATTEMPT: labels[LABEL_ATTEMPT]},
            "ports": [{"name": "rendezvous", "port": RENDEZVOUS_PORT, "targetPort": RENDEZVOUS_PORT}],
        },
    }


def gang_job_config_for(
    request: JobRequest,
    flavor_name: str,
    policy: Policy,
    attempt: int = 1,
    work_volume: WorkVolume | None = None,
    env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The `dagster-k8s/config`-shaped mapping of a multi-node request's Indexed Job: the GPU
    step's config (`k8s_config_for`: Kueue labels, flavor affinity, suspend, deadline) with
    `completionMode: Indexed`, `parallelism = completions = nodes`, one pod per node asking for
    `gpus_per_node`, the rendezvous env, the pods under the headless Service (`subdomain`) and the
    TAS annotations. Kueue admits it as one Workload with one PodSet of `nodes` pods.

    Its pods run the request's `command` themselves (no Dagster step wraps them), so the request's
    own `env` and `env` (what the launching step adds: output and checkpoint directories) are set
    on the container. The Job's name is the builder's (`gang_job_name`, `resources.k8s.render_gang_job`)."""
    if not is_gang(request):
        raise ValueError(f"request {request.request_id} is one pod (nodes: {request.nodes or 1}); render its step Job")
    cfg = k8s_config_for(request, flavor_name, policy, attempt, work_volume)
    nodes = request.nodes or 1
    container = cfg["container_config"]
    given = {**request.env, **(env or {})}
    container["env"] = [
        *container["env"],
        *({"name": k, "value": str(v)} for k, v in given.items()),
        *rendezvous_env(request, attempt),
    ]
    container["ports"] = [{"name": "rendezvous", "container_port": RENDEZVOUS_PORT}]
    if request.command:
        container["args"] = list(request.command)
    cfg["pod_spec_config"]["subdomain"] = gang_job_name(_request_id(request), attempt)
    cfg["job_spec_config"].update(
        {"completion_mode": "Indexed", "completions": nodes, "parallelism": nodes}
    )
    return cfg


def tolerations_for(flavor: Flavor) -> list[dict[str, str]]:
    """One toleration per flavor taint (GPU taint, spot taint, ...): what Kueue injects from the
    exported ResourceFlavor's `spec.tolerations` when it admits a Job on this flavor."""
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
    """A flavor's node labels (the exported ResourceFlavor's `spec.nodeLabels`): GPU product and
    node pool, plus any extra node labels it declares. Kueue injects them as the pod's
    nodeSelector when it admits the Job on this flavor."""
    labels = {LABEL_GPU_PRODUCT: flavor.gpu_product, LABEL_NODE_POOL: flavor.node_pool}
    if flavor.sharing.mode != "exclusive":
        labels[LABEL_GPU_SHARING] = flavor.sharing.mode
    return {**labels, **flavor.node_labels}


def accepted_flavors(request: JobRequest, policy: Policy, flavor: Flavor | str | None = None) -> list[Flavor]:
    """The flavors a request may run on: its lane's flavors (quota order) matching its gpu_type.

    flavor: the gate's flavor; given, only the accepted flavors of its kind, topology-aware or not
    (the kind the Job's topology annotation admits in Kueue, `topology_annotations`). A request
    with `topology:` accepts only topology-aware flavors either way."""
    lane, _ = _lane_and_team(request, policy)
    names = matching_flavors(policy, lane, request.gpu_type, request.gpu_resource, request.site)
    if not names:
        raise ValueError(
            f"lane {lane} has no quota of {request.gpu_resource} on a flavor matching gpu_type {request.gpu_type!r}"
        )
    if flavor is not None:
        aware = is_topology_aware(policy, flavor if isinstance(flavor, str) else flavor.name)
        names = [n for n in names if is_topology_aware(policy, n) == aware]
    if request.topology is not None:
        names = [n for n in names if is_topology_aware(policy, n)]
    return [policy.flavor(n) for n in names]


def flavor_affinity(request: JobRequest, policy: Policy, flavor: Flavor | str | None = None) -> dict[str, Any]:
    """A required node affinity with one term per accepted flavor (its node labels, `In`).

    Kueue keeps a flavor for the Job only if the pod's node affinity admits that flavor's node
    labels, so this leaves Kueue the choice among exactly the flavors the request accepts (a
    request for `h100-ondemand` never lands on `l4-inference`; `gpu_type: any` may borrow on
    every flavor of its lane of the gate flavor's kind). flavor: the gate's flavor; the terms then
    name only the accepted flavors of its kind, topology-aware or not (`accepted_flavors`), the
    ones Kueue's TAS check lets the Job's annotation use, so the Job names no flavor Kueue would
    refuse. The terms stay true after Kueue injects the chosen flavor's labels.
    """
    terms = []
    for accepted in accepted_flavors(request, policy, flavor):
        terms.append(
            {
                "match_expressions": [
                    {"key": key, "operator": "In", "values": [value]}
                    for key, value in node_selector_for(accepted).items()
                ]
            }
        )
    return {"node_affinity": {"required_during_scheduling_ignored_during_execution": {"node_selector_terms": terms}}}


def timeout_seconds(request: JobRequest, policy: Policy) -> int:
    """The request's timeout in whole seconds; without one, the lane's max_run_duration."""
    timeout = request.timeout
    if timeout is None:
        lane, _ = _lane_and_team(request, policy)
        timeout = policy.lane(lane).max_run_duration
    return max(1, math.ceil(timeout.total_seconds()))


def _work_volume_config(work_volume: WorkVolume | None) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, str]]]:
    """(container part, pod part, env) that mount the work volume, or nothing without one."""
    if work_volume is None:
        return {}, {}, []
    container = {"volume_mounts": [{"name": WORK_VOLUME_NAME, "mount_path": work_volume.mount_path}]}
    pod = {
        "volumes": [
            {"name": WORK_VOLUME_NAME, "persistent_volume_claim": {"claim_name": work_volume.claim_name}}
        ]
    }
    return container, pod, [{"name": ENV_WORK_ROOT, "value": work_volume.mount_path}]


def _step_config(
    request: JobRequest,
    policy: Policy,
    attempt: int,
    work_volume: WorkVolume | None,
    *,
    step: str | None = None,
    annotations: dict[str, str] | None = None,
    job_labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """What every Job of a request's run carries, built once for the CPU steps, the GPU step and
    the gang's Indexed Job: the request id in the env, the work volume, the request's labels and
    annotations on pod and Job, the team's namespace, `backoffLimit: 0`. job_labels: added to the
    Job's labels only (Kueue's)."""
    request_id = _request_id(request)
    labels = pod_labels(request, attempt, step)
    annotations = {ANNOTATION_REQUEST_ID: request_id, **(annotations or {})}
    container_volume, pod_volume, volume_env = _work_volume_config(work_volume)
    return {
        "container_config": {
            "env": [{"name": ENV_REQUEST_ID, "value": request_id}, *volume_env],
            **container_volume,
        },
        "pod_template_spec_metadata": {"labels": labels, "annotations": dict(annotations)},
        "pod_spec_config": dict(pod_volume),
        "job_metadata": {
            "namespace": namespace_for(request, policy),
            "labels": {**labels, **(job_labels or {})},
            "annotations": dict(annotations),
        },
        "job_spec_config": {"backoff_limit": JOB_BACKOFF_LIMIT},
    }


def cpu_step_config_for(
    request: JobRequest, policy: Policy, attempt: int = 1, work_volume: WorkVolume | None = None
) -> dict[str, Any]:
    """The `dagster-k8s/config` mapping of every step of the request's run but the workload step.

    Checks and bookkeeping steps (the evidence pack and its blocking checks) ask for no GPU, carry
    no Kueue label (Kueue's default `manageJobsWithoutQueueName: false` leaves them alone) and no
    flavor affinity; they run in the team's namespace with the request's labels, so the cluster
    still attributes them to the request. The workload step of a multi-node request is such a
    step too: it launches and watches the gang's Indexed Job (`gang_step_config_for`).
    """
    cfg = _step_config(request, policy, attempt, work_volume)
    if not cfg["pod_spec_config"]:
        del cfg["pod_spec_config"]
    return cfg


def k8s_config_for(
    request: JobRequest,
    flavor_name: str,
    policy: Policy,
    attempt: int = 1,
    work_volume: WorkVolume | None = None,
) -> dict[str, Any]:
    """The `dagster-k8s/config` mapping for the request's workload step (its one GPU Job).

    flavor_name: the flavor the gate admitted the request on; checked against the lane's quota
    and the request's gpu_type and recorded as an annotation, but not pinned: the pod template
    accepts every flavor of its kind the request may use (`flavor_affinity`), carries the TAS
    annotation that kind needs (`topology_annotations`), and Kueue picks one, in its
    ClusterQueue's order as the gate's engine does.
    Keys are those of dagster-k8s's `UserDefinedDagsterK8sConfig`: `container_config`,
    `pod_template_spec_metadata`, `pod_spec_config`, `job_metadata`, `job_spec_config`.
    Raises ValueError when the request lacks what a Job needs (request_id, container_digest,
    gpu_count, workload, a known lane and team), the flavor does not fit it, or the request is a
    service (`service:`, rendered by `gpu_platform.cluster.services`).
    """
    if request.service is not None:
        raise ValueError(
            f"request {request.request_id} is a service (workload service): it runs as a Deployment, not a Job; "
            "render it with gpu_platform.cluster.services (`gpu-platform k8s render` does)"
        )
    flavor = resolve_flavor(request, policy, flavor_name)
    _request_id(request)
    if not request.container_digest:
        raise ValueError("container_digest: required to pin the image by digest")
    cfg = _step_config(
        request,
        policy,
        attempt,
        work_volume,
        step=workload_step(request),
        annotations={ANNOTATION_GATE_FLAVOR: flavor.name},
        job_labels=kueue_labels(request),
    )
    cfg["container_config"].update({"image": request.image_ref, "resources": resources_for(request)})
    meta = cfg["pod_template_spec_metadata"]
    meta["annotations"] = {**meta["annotations"], **topology_annotations(request, flavor, policy)}
    cfg["pod_spec_config"] = {"affinity": flavor_affinity(request, policy, flavor), **cfg["pod_spec_config"]}
    cfg["job_spec_config"].update(
        {"suspend": True, "active_deadline_seconds": timeout_seconds(request, policy)}
    )
    return cfg


def executor_config_for(
    request: JobRequest,
    flavor_name: str,
    policy: Policy,
    attempt: int = 1,
    work_volume: WorkVolume | None = None,
) -> dict[str, Any]:
    """`k8s_job_executor` config for a run that executes this one request.

    `job_namespace` is the team's namespace (the LocalQueue's), `service_account_name` the step
    account there (`STEP_SERVICE_ACCOUNT`, overriding the run launcher's). `step_k8s_config` applies to
    every step (CPU only, no Kueue queue); `per_step_k8s_config` gives the workload step alone
    the GPU Job (`k8s_config_for`), which dagster-k8s merges over the former. So a release run
    (evidence pack, its checks, the release) creates exactly one Job that asks for GPUs. Static op
    tags cannot vary per request, so the gate passes this as the run's `execution.config`.
    """
    if is_gang(request):
        # the workload step only launches and watches the gang's Indexed Job (the GPUs are its
        # pods'): a CPU step pod like the others, without Kueue's labels
        workload = cpu_step_config_for(request, policy, attempt, work_volume)
        workload["pod_template_spec_metadata"]["labels"][LABEL_STEP] = label_value(workload_step(request))
        workload["job_metadata"]["annotations"][ANNOTATION_GATE_FLAVOR] = resolve_flavor(request, policy, flavor_name).name
        return {
            "job_namespace": namespace_for(request, policy),
            "service_account_name": STEP_SERVICE_ACCOUNT,
            "step_k8s_config": cpu_step_config_for(request, policy, attempt, work_volume),
            "per_step_k8s_config": {workload_step(request): workload},
        }
    return {
        "job_namespace": namespace_for(request, policy),
        "service_account_name": STEP_SERVICE_ACCOUNT,
        "step_k8s_config": cpu_step_config_for(request, policy, attempt, work_volume),
        "per_step_k8s_config": {
            workload_step(request): k8s_config_for(request, flavor_name, policy, attempt, work_volume)
        },
    }
