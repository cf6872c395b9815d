"""One name for each thing on the cluster.

`gpu-platform kueue export` names the Kueue objects and `gpu-platform k8s render` labels the step
Jobs; both call these functions, so a Job's `kueue.x-k8s.io/queue-name` is always a LocalQueue
of the export and its `kueue.x-k8s.io/priority-class` always an exported WorkloadPriorityClass.

Kubernetes object names are DNS labels (lower case, digits, `-`); lane `release_eval` becomes
`release-eval`. Priority classes are cluster-scoped and carry a `gpu-platform-` prefix so they
do not collide with classes other tenants of the cluster define.
"""

from __future__ import annotations

import hashlib
import re
import uuid

from gpu_platform.policy.model import SITE_LABEL

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
"""RFC 1123 label: what a Job, LocalQueue or ClusterQueue name must match (at most 63 characters)."""
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

PRIORITY_CLASS_PREFIX = "gpu-platform-"

# Labels and annotations the platform sets on Jobs and pods.
LABEL_TEAM = "gpu-platform.io/team"
LABEL_LANE = "gpu-platform.io/lane"
LABEL_REQUEST_ID = "gpu-platform.io/request-id"
LABEL_ATTEMPT = "gpu-platform.io/attempt"
LABEL_STEP = "gpu-platform.io/step"
ANNOTATION_REQUEST_ID = "gpu-platform.io/request-id"
"""Annotation with the request id verbatim (a label value is capped at 63 characters)."""
ANNOTATION_GATE_FLAVOR = "gpu-platform.io/gate-flavor"
"""The flavor the admission gate admitted the request on; Kueue's own choice is read back from
the Workload (`status.admission.podSetAssignments[].flavors`)."""

# Node labels a flavor is made of (ResourceFlavor `spec.nodeLabels`).
LABEL_NODE_POOL = "gpu-platform.io/node-pool"
"""Node label naming the node pool (`training`, `inference`, `spot`) of a flavor."""
LABEL_GPU_PRODUCT = "nvidia.com/gpu.product"
"""Node label set by NVIDIA GPU feature discovery (`NVIDIA-H100-80GB-HBM3`)."""
LABEL_GPU_SHARING = "gpu-platform.io/gpu-sharing"
"""Node label of a fractional-GPU pool (`mig` or `shared`); absent on whole-GPU nodes. Two flavors
of one GPU product in one node pool differ by it (the GPU operator's MIG / time-slicing config
is per node)."""

LABEL_SITE = SITE_LABEL
"""Node label naming the site (MultiKueue worker cluster) of a flavor's nodes; set on every flavor
that a policy's `sites:` block places, so the Job's flavor affinity keeps it to that site."""

# Kueue's own labels.
KUEUE_QUEUE_NAME = "kueue.x-k8s.io/queue-name"
KUEUE_PRIORITY_CLASS = "kueue.x-k8s.io/priority-class"
KUEUE_API_GROUP = "kueue.x-k8s.io"
KUEUE_API_VERSION = "v1beta2"

_RUN_ID_NAMESPACE = uuid.UUID("6a1f3c52-9e0b-4d1e-8f5a-2b7c9d4e1f03")


def k8s_name(name: str) -> str:
    """A policy name as a Kubernetes object name: underscores become hyphens, lower case."""
    return name.replace("_", "-").lower()


def cluster_queue_name(lane: str) -> str:
    """The ClusterQueue of a lane (`release-eval`)."""
    return k8s_name(lane)


def local_queue_name(lane: str) -> str:
    """The LocalQueue (one per lane in each team namespace) that a lane's Jobs are queued in."""
    return k8s_name(lane)


def priority_class_name(lane: str) -> str:
    """The WorkloadPriorityClass of a lane (`gpu-platform-release-eval`)."""
    return f"{PRIORITY_CLASS_PREFIX}{k8s_name(lane)}"


def resource_flavor_name(flavor: str) -> str:
    """The ResourceFlavor of a policy flavor (policy flavor names are already DNS labels)."""
    return flavor


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


def run_id_for(request_id: str, attempt: int) -> str:
    """A stable Dagster-style run id (a UUID) for one attempt of a request.

    Used where no Dagster run exists yet (`gpu-platform k8s render`, the cluster test): dagster-k8s
    names a step Job after its run id and step key, so distinct requests and attempts get distinct
    Job names. Real runs have their own random run id, unique per attempt.
    """
    return str(uuid.uuid5(_RUN_ID_NAMESPACE, f"{request_id}#{attempt}"))


def is_dns_label(name: str) -> bool:
    return len(name) <= 63 and bool(DNS_LABEL.match(name))


def gang_job_name(request_id: str, attempt: int) -> str:
    """The Indexed Job (and its headless rendezvous Service, same name) of one attempt of a
    multi-node request: `gang-<readable id>-<sha256 6>-<attempt>`, a DNS label short enough that
    its pods' hostnames (`<name>-<index>`) stay DNS labels too."""
    readable = re.sub(r"[^a-z0-9-]", "-", k8s_name(request_id))[:36].strip("-") or "req"
    digest = hashlib.sha256(f"{request_id}#{attempt}".encode()).hexdigest()[:6]
    return f"gang-{readable}-{digest}-{attempt}"


def topology_name(name: str) -> str:
    """The Kueue Topology of a node pool (or of a flavor whose levels differ from its pool's)."""
    return f"{PRIORITY_CLASS_PREFIX}{k8s_name(name)}"


def flavor_topology_levels(policy, flavor_name: str) -> tuple[str, ...]:
    """The levels of the Topology a flavor's ResourceFlavor names in `spec.topologyName`: its node
    shape's topology levels (the export writes `topologyName` for exactly these flavors); ():
    the flavor is not topology-aware. One answer for the export, the step Jobs' topology
    annotations and the admission engine's copy of Kueue's TAS rule."""
    shape = policy.node_shape(flavor_name)
    return tuple(shape.topology_levels) if shape is not None else ()


def multikueue_cluster_name(site: str) -> str:
    """The MultiKueueCluster (cluster-scoped) of a site's worker cluster (`gpu-platform-sfo-depot`)."""
    return f"{PRIORITY_CLASS_PREFIX}{k8s_name(site)}"


def site_of_cluster(cluster: str | None) -> str | None:
    """The site of a MultiKueueCluster name (a Workload's `status.clusterName`); None: not one of ours."""
    if not cluster or not cluster.startswith(PRIORITY_CLASS_PREFIX):
        return None
    return cluster.removeprefix(PRIORITY_CLASS_PREFIX)
