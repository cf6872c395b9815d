"""The Launchpad's `submit_request`: a typed config with a description per field and a working
example the Launchpad opens with (examples/requests/research_best_effort.yaml, named).

The fields are `JobRequest`'s (tests keep them equal); validation is still
`gpu_platform.requests.model.validate_request`, failing closed with every problem at once.
Fields with a sensible default have it; who pays and owns the job (owner, team, cost center) has
none, so a launch never bills someone by default; the example fills them in.
"""

from __future__ import annotations

from typing import Any

import dagster as dg
from pydantic import Field

from gpu_platform.requests.identity import Identity, configured_source, current_identity

DAGSTER_USER_TAG = "user"
"""The run tag Dagster+ sets to the email of whoever launched a run from the UI (Dagster's
`USER_TAG`). Open-source Dagster sets none, and a tag can be typed at launch, so it counts only
where the deployment says Dagster+ sets it (`GPU_PLATFORM_IDENTITY=dagster`)."""


def launchpad_identity(context: dg.OpExecutionContext) -> Identity:
    """Who launched this `submit_request` run (`identity.current_identity`): the Dagster+ user
    where the deployment configures `dagster`; else the source it configures for the run's
    process (`os_user`: the run worker's login, as the demo does); else an unverified `$USER`,
    which the ledger records as unverified below scale S4 and refuses from S4."""
    user = context.run.tags.get(DAGSTER_USER_TAG) if configured_source() == "dagster" else None
    return current_identity(dagster_user=user)


_MAY = "; required by some lanes (the policy's lanes.<lane>.required_fields)"


class ServiceReplicasConfig(dg.Config):
    min: int = Field(description="Replicas always running (at least 1).")
    max: int = Field(description="The most replicas the autoscaler may run (at least min).")


class ServiceSloConfig(dg.Config):
    p95_latency_ms: float = Field(description="The p95 latency the service promises, in milliseconds.")
    target_qps_per_replica: float = Field(description="Requests per second one replica serves within it.")


class ServiceMetricsConfig(dg.Config):
    qps_query: str | None = Field(default=None, description="PromQL of the service's requests per second ($service, $namespace).")
    latency_query: str | None = Field(default=None, description="PromQL of its p95 latency in seconds ($service, $namespace).")


class ServiceConfig(dg.Config):
    """A serving lane's `service:` block (docs/serving.md)."""

    model_id: str = Field(description="The released model the service serves.")
    replicas: ServiceReplicasConfig = Field(description="Min and max replicas; GPUs per replica are gpu_count.")
    slo: ServiceSloConfig = Field(description="The p95 latency and target QPS per replica.")
    port: int = Field(default=8080, description="The container's and the Service's port.")
    autoscaler: str = Field(default="keda", description="keda (a KEDA ScaledObject) or hpa (a HorizontalPodAutoscaler).")
    metrics: ServiceMetricsConfig | None = Field(default=None, description="The autoscaler's PromQL templates (default: derived from the name).")
    name: str | None = Field(default=None, description="The Kubernetes name (default: the request's name).")


def _without_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    return value


class SubmitRequestConfig(dg.Config):
    """One GPU job request, as a request file would hold it (docs/reference.md, Job requests)."""

    name: str | None = Field(default=None, description="A human name shown in queue, explain and on the runs (letters, digits, space, ._:/@+()-; max 100).")
    request_id: str | None = Field(default=None, description="Leave empty for a new random id; an existing id with other content is refused, and so is that of a request that ended (leave it empty to run the job again).")
    owner: str | None = Field(default=None, description="Who owns the job (an e-mail); `gpu-platform queue --owner` finds it.")
    team: str | None = Field(default=None, description="A team of the policy (`gpu-platform policy check` lists them).")
    cost_center: str | None = Field(default=None, description="The team's cost center (must match the policy's).")
    lane: str | None = Field(default=None, description="incident_response, release_eval, map_semantic_batch, candidate_train, platform_maintenance, labeler_batch, baseline_rebuild or research_best_effort.")
    workload: str | None = Field(default=None, description="label_batch, training_run, replay, map_segmentation, evidence_pack, released_model or released_map; default: the lane's.")
    site: str | None = Field(default=None, description="Site / depot (e.g. sfo-depot).")
    odd_cell: str | None = Field(default=None, description="ODD cell the job is evidence for" + _MAY + ".")
    data_access_scope: str | None = Field(default=None, description="A data-access scope the team may use (e.g. labeled-frames).")
    source_commit: str | None = Field(default=None, description="Full 40-hex git commit of the code.")
    container_digest: str | None = Field(default=None, description="Image digest: sha256: + 64 hex.")
    image: str = Field(default="registry.local/gpu-platform/workload", description="Image repository (pinned by container_digest).")
    command: list[str] = Field(default_factory=list, description="Command and arguments the workload runs (empty: the workload kind's program).")
    env: dict[str, str] = Field(default_factory=dict, description="Environment variables for the workload.")
    dataset_ids: list[str] = Field(default_factory=list, description="Input dataset ids" + _MAY + ".")
    map_ids: list[str] = Field(default_factory=list, description="Input map ids" + _MAY + ".")
    calibration_ids: list[str] = Field(default_factory=list, description="Calibration ids" + _MAY + ".")
    taxonomy_ids: list[str] = Field(default_factory=list, description="Taxonomy ids.")
    labeler_ids: list[str] = Field(default_factory=list, description="Labeler ids.")
    prompt_ids: list[str] = Field(default_factory=list, description="Prompt ids.")
    evaluator_ids: list[str] = Field(default_factory=list, description="Evaluator (scenario suite) ids" + _MAY + ".")
    gpu_type: str = Field(default="any", description="A flavor (h100-ondemand, a100-spot, l4-inference, ...), a GPU product label, or any.")
    gpu_resource: str = Field(default="nvidia.com/gpu", description="What gpu_count counts: nvidia.com/gpu, a MIG slice nvidia.com/mig-<profile>, or nvidia.com/gpu.shared.")
    gpu_count: int = Field(default=1, description="GPUs (or slices / replicas) the job needs; over one node: a whole number of nodes (16 on 8-GPU nodes runs as 2 x 8).")
    nodes: int | None = Field(default=None, description="Leave empty: validation writes the shape of a job over one node (nodes x gpus_per_node).")
    gpus_per_node: int | None = Field(default=None, description="Leave empty: written with nodes.")
    topology: dict[str, str] | None = Field(default=None, description="Multi-node jobs: {required: LEVEL} or {preferred: LEVEL}, a topology level of the flavor (topology.kubernetes.io/zone).")
    gpu_memory_gib: float | None = Field(default=None, description="Shared GPUs only: the memory the job stays under.")
    cpu: float | None = Field(default=None, description="CPU cores (default: the executor's).")
    memory_gib: float | None = Field(default=None, description="Memory in GiB (default: the executor's).")
    expected_duration: str | None = Field(default=None, description="How long it is expected to run (90s, 30m, 4h, 1h30m, PT4H); the queue's estimates use it.")
    max_cost: float | None = Field(default=None, description="Most the job may cost, in the policy's currency (at most the lane's budget).")
    timeout: str | None = Field(default=None, description="Hard limit (>= expected_duration, <= the lane's max_run_duration).")
    checkpoint_interval: str = Field(default="10m", description="How often the workload checkpoints.")
    output_artifact_ids: list[str] = Field(default_factory=list, description="Ids of what the job produces (lineage follows them).")
    preemption_policy: str = Field(default="checkpoint_requeue", description="requeue (restart), checkpoint_requeue (resume from the last checkpoint) or fail.")
    retention_policy: str = Field(default="lane_default", description="lane_default or a duration (365d).")
    experiment_id: str | None = Field(default=None, description="research_best_effort: the experiment.")
    baseline_id: str | None = Field(default=None, description="baseline_rebuild: the baseline.")
    candidate_id: str | None = Field(default=None, description="candidate_train: the release candidate.")
    release_packet_id: str | None = Field(default=None, description="release_eval: the release packet.")
    artifact_set: list[str] = Field(default_factory=list, description="release_eval: the artifacts under evaluation.")
    rollback_target: str | None = Field(default=None, description="release_eval: what to roll back to.")
    incident_id: str | None = Field(default=None, description="incident_response: the incident.")
    evidence_hold: bool | None = Field(default=None, description="incident_response: keep the evidence under hold (must be true).")
    approver: str | None = Field(default=None, description="incident_response: the approver (a member of a roster role).")
    safety_approval: str | None = Field(default=None, description="Recorded but grants nothing: use `gpu-platform approve`.")
    labeler_registry_id: str | None = Field(default=None, description="labeler_batch: the labeler model.")
    prompt_pack: str | None = Field(default=None, description="labeler_batch: the prompt pack.")
    allowed_use: str | None = Field(default=None, description="labeler_batch: the allowed use of the labels.")
    source_map_acceptance_id: str | None = Field(default=None, description="map_semantic_batch: the accepted source map.")
    tile_set: str | None = Field(default=None, description="map_semantic_batch: the tile set.")
    semantic_taxonomy: str | None = Field(default=None, description="map_semantic_batch: the taxonomy.")
    publication_target: str | None = Field(default=None, description="map_semantic_batch: where the map is published.")
    change_ticket: str | None = Field(default=None, description="platform_maintenance: the change ticket.")
    maintenance_window: str | None = Field(default=None, description="platform_maintenance: the window.")
    service: ServiceConfig | None = Field(default=None, description="online_serving (a serving lane): the service to run, its replicas and SLO (docs/serving.md).")

    def request_fields(self) -> dict[str, Any]:
        """The request as validate_request reads it: unset optional fields left out."""
        return {k: _without_none(v) for k, v in self.model_dump().items() if v is not None}


EXAMPLE: dict[str, Any] = {
    "name": "occupancy lr sweep (Launchpad example)",
    "owner": "ana@example.com",
    "team": "perception",
    "cost_center": "CC-1010",
    "lane": "research_best_effort",
    "site": "sfo-depot",
    "data_access_scope": "labeled-frames",
    "source_commit": "3f2c1a9b8e7d6c5b4a3928171615141312111009",
    "container_digest": "sha256:9b2f8e1c4d7a6b5c3e2f1a0d9c8b7a6e5f4d3c2b1a09f8e7d6c5b4a392817161",
    "image": "registry.local/ml/trainer",
    "gpu_type": "a100-spot",
    "gpu_count": 4,
    "experiment_id": "exp-occupancy-lr-sweep-17",
    "dataset_ids": ["ds-frames-2026-11"],
    "expected_duration": "3h",
    "timeout": "6h",
    "max_cost": 400.0,
    "output_artifact_ids": ["ckpt-exp17-occupancy"],
    "preemption_policy": "checkpoint_requeue",
    "retention_policy": "lane_default",
    "checkpoint_interval": "10m",
}
"""The config the Launchpad opens with: examples/requests/research_best_effort.yaml with a name
(a test keeps the two equal). Change owner, team and cost center to yours."""
