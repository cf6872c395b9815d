"""The Kubernetes objects of a service request (docs/serving.md, Rendering).

`service_manifests(request, policy)` returns, as `kubectl apply` takes them (camelCase):

- a `Deployment` (apps/v1) of `replicas.min` pods, each asking for the request's GPUs per replica,
  or, when one replica spans several nodes (`nodes` x `gpus_per_node`), a `LeaderWorkerSet`
  (leaderworkerset.x-k8s.io/v1) whose groups are one leader and `nodes - 1` workers;
- a `Service` (v1) on the service's port;
- its autoscaler: a KEDA `ScaledObject` (keda.sh/v1alpha1) with two Prometheus triggers, requests
  per second per replica (`AverageValue`: KEDA divides the query's total by the replicas) and p95
  latency (`Value`), or, with `autoscaler: hpa`, an autoscaling/v2 `HorizontalPodAutoscaler` on the
  same two signals as custom metrics (a `Pods` metric and an `External` one, which a metrics
  adapter such as prometheus-adapter serves). Both between `replicas.min` and `replicas.max`.

Kueue admits the replicas through its pod integration: the Deployment (or LeaderWorkerSet) carries
the lane's LocalQueue in `kueue.x-k8s.io/queue-name` (Kueue's Deployment webhook copies it to the
pod template, `pkg/controller/jobs/deployment/deployment_webhook.go`; it is written there too) and
the pods the lane's WorkloadPriorityClass in `kueue.x-k8s.io/priority-class`, named as the export
names them (`gpu_platform.cluster.names`). Each pod (each LeaderWorkerSet group) is one Workload,
so scaling up queues a Workload per new replica, admitted against the lane's quota. The pods keep
the Job's flavor affinity (one node-affinity term per accepted flavor: the inference pool's L4s
for the shipped lane) and tolerate the flavor's taints. The settings (labels, cadence, metric
names, the Prometheus address) are `gpu_platform.serving.render`'s.

Pure functions; no Dagster, no cluster access.
"""

from __future__ import annotations

import re
from typing import Any

from gpu_platform.cluster.jobs import (
    ANNOTATION_GATE_FLAVOR,
    ANNOTATION_REQUEST_ID,
    ENV_REQUEST_ID,
    flavor_affinity,
    is_gang,
    kueue_labels,
    namespace_for,
    resolve_flavor,
    resources_for,
    tolerations_for,
)
from gpu_platform.cluster.names import LABEL_LANE, LABEL_REQUEST_ID, LABEL_TEAM, label_value
from gpu_platform.policy import Policy
from gpu_platform.requests.model import JobRequest
from gpu_platform.serving.model import ServiceSpec, service_name
from gpu_platform.serving.render import (
    ANNOTATION_MODEL_ID,
    CONTAINER,
    DEFAULT_PROMETHEUS_URL,
    ENV_MODEL_ID,
    ENV_PORT,
    HPA_LATENCY_METRIC,
    HPA_QPS_METRIC,
    KEDA_COOLDOWN_S,
    KEDA_POLLING_INTERVAL_S,
    LABEL_SERVICE,
    LWS_API_VERSION,
    SCALE_DOWN_STABILIZATION_S,
    number,
    quantity,
)


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def camel_keys(value: Any) -> Any:
    """A snake_case mapping of the Kubernetes models (as `cluster.jobs` builds for dagster-k8s)
    with its keys in the API's camelCase; values are left alone."""
    if isinstance(value, dict):
        return {_camel(k): camel_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [camel_keys(v) for v in value]
    return value


def _spec(request: JobRequest) -> ServiceSpec:
    if request.service is None:
        raise ValueError(f"request {request.request_id}: not a service (no service: block)")
    return request.service


def name_of(request: JobRequest) -> str:
    """The service's Kubernetes name (`ServiceSpec.name`, else the request's name)."""
    name = service_name(_spec(request), request.name)
    if name is None:
        raise ValueError("name: a service needs service.name or a request name that is a DNS-1035 label")
    return name


def _labels(request: JobRequest, name: str) -> dict[str, str]:
    return {
        LABEL_SERVICE: name,
        LABEL_TEAM: label_value(request.team or ""),
        LABEL_LANE: label_value(request.lane or ""),
        LABEL_REQUEST_ID: label_value(request.request_id or ""),
    }


def _annotations(request: JobRequest, flavor: str) -> dict[str, str]:
    return {
        ANNOTATION_REQUEST_ID: request.request_id or "",
        ANNOTATION_MODEL_ID: _spec(request).model_id,
        ANNOTATION_GATE_FLAVOR: flavor,
    }


def _pod_template(request: JobRequest, policy: Policy, flavor_name: str, name: str) -> dict[str, Any]:
    """The pod template of one replica (or of each pod of a multi-node replica)."""
    spec = _spec(request)
    flavor = resolve_flavor(request, policy, flavor_name)
    if not request.container_digest:
        raise ValueError("container_digest: required to pin the image by digest")
    ours = {ENV_REQUEST_ID: request.request_id or "", ENV_MODEL_ID: spec.model_id, ENV_PORT: str(spec.port)}
    # the platform's values win over a request `env` entry of the same name (one entry per name)
    env = [{"name": k, "value": v} for k, v in ours.items()]
    env += [{"name": k, "value": str(v)} for k, v in request.env.items() if k not in ours]
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": request.image_ref,
        "env": env,
        "ports": [{"name": "http", "containerPort": spec.port, "protocol": "TCP"}],
        "resources": {k: {r: str(v) for r, v in q.items()} for k, q in resources_for(request).items()},
        "readinessProbe": {"tcpSocket": {"port": spec.port}, "periodSeconds": 10},
    }
    if request.command:
        container["args"] = list(request.command)
    pod_spec: dict[str, Any] = {
        "affinity": camel_keys(flavor_affinity(request, policy, flavor)),
        "containers": [container],
    }
    tolerations = tolerations_for(flavor)
    if tolerations:
        pod_spec["tolerations"] = tolerations
    return {
        "metadata": {
            "labels": {**_labels(request, name), **kueue_labels(request)},
            "annotations": _annotations(request, flavor.name),
        },
        "spec": pod_spec,
    }


def workload_manifest(request: JobRequest, policy: Policy, flavor_name: str | None = None) -> dict[str, Any]:
    """The Deployment of the service's replicas, or its LeaderWorkerSet when a replica spans
    several nodes (`nodes` > 1: one leader and `nodes - 1` workers, each pod `gpus_per_node`)."""
    spec = _spec(request)
    name = name_of(request)
    flavor = resolve_flavor(request, policy, flavor_name).name
    template = _pod_template(request, policy, flavor, name)
    meta = {
        "name": name,
        "namespace": namespace_for(request, policy),
        "labels": {**_labels(request, name), **kueue_labels(request)},
        "annotations": _annotations(request, flavor),
    }
    if is_gang(request):
        return {
            "apiVersion": LWS_API_VERSION,
            "kind": "LeaderWorkerSet",
            "metadata": meta,
            "spec": {
                "replicas": spec.replicas.min,
                "startupPolicy": "LeaderCreated",
                "leaderWorkerTemplate": {
                    "size": request.nodes,
                    "restartPolicy": "RecreateGroupOnPodRestart",
                    "leaderTemplate": template,
                    "workerTemplate": template,
                },
            },
        }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": {
            "replicas": spec.replicas.min,
            "selector": {"matchLabels": {LABEL_SERVICE: name}},
            # one new replica at a time, the old one kept until it is ready: GPUs are scarce
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": template,
        },
    }


def service_manifest(request: JobRequest, policy: Policy) -> dict[str, Any]:
    """The Service in front of the replicas (the leaders of a LeaderWorkerSet's groups)."""
    spec = _spec(request)
    name = name_of(request)
    selector: dict[str, str] = {LABEL_SERVICE: name}
    if is_gang(request):
        selector["leaderworkerset.sigs.k8s.io/worker-index"] = "0"
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace_for(request, policy), "labels": _labels(request, name)},
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            "ports": [{"name": "http", "port": spec.port, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def _target(request: JobRequest, name: str) -> dict[str, str]:
    if is_gang(request):
        return {"apiVersion": LWS_API_VERSION, "kind": "LeaderWorkerSet", "name": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}


def autoscaler_manifest(
    request: JobRequest, policy: Policy, prometheus_url: str = DEFAULT_PROMETHEUS_URL
) -> dict[str, Any]:
    """The service's autoscaler: a KEDA ScaledObject (`autoscaler: keda`) or an autoscaling/v2
    HorizontalPodAutoscaler (`hpa`), from `replicas.min` to `replicas.max`."""
    spec = _spec(request)
    name = name_of(request)
    namespace = namespace_for(request, policy)
    meta = {"name": name, "namespace": namespace, "labels": _labels(request, name)}
    behavior = {"scaleDown": {"stabilizationWindowSeconds": SCALE_DOWN_STABILIZATION_S}}
    if spec.autoscaler == "hpa":
        return {
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": meta,
            "spec": {
                "scaleTargetRef": _target(request, name),
                "minReplicas": spec.replicas.min,
                "maxReplicas": spec.replicas.max,
                "behavior": behavior,
                "metrics": [
                    {
                        "type": "Pods",
                        "pods": {
                            "metric": {"name": HPA_QPS_METRIC},
                            "target": {"type": "AverageValue", "averageValue": quantity(spec.slo.target_qps_per_replica)},
                        },
                    },
                    {
                        "type": "External",
                        "external": {
                            "metric": {"name": HPA_LATENCY_METRIC, "selector": {"matchLabels": {"service": name, "namespace": namespace}}},
                            "target": {"type": "Value", "value": quantity(spec.p95_latency_seconds)},
                        },
                    },
                ],
            },
        }
    qps, latency = spec.queries(name, namespace)
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": meta,
        "spec": {
            "scaleTargetRef": _target(request, name),
            "minReplicaCount": spec.replicas.min,
            "maxReplicaCount": spec.replicas.max,
            "pollingInterval": KEDA_POLLING_INTERVAL_S,
            "cooldownPeriod": KEDA_COOLDOWN_S,
            "advanced": {"horizontalPodAutoscalerConfig": {"behavior": behavior}},
            "triggers": [
                {
                    "type": "prometheus",
                    "name": "qps-per-replica",
                    "metricType": "AverageValue",
                    "metadata": {
                        "serverAddress": prometheus_url,
                        "query": qps,
                        "threshold": number(spec.slo.target_qps_per_replica),
                    },
                },
                {
                    "type": "prometheus",
                    "name": "p95-latency",
                    "metricType": "Value",
                    "metadata": {
                        "serverAddress": prometheus_url,
                        "query": latency,
                        "threshold": number(spec.p95_latency_seconds),
                    },
                },
            ],
        },
    }


_URL = re.compile(r"^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~/-]*)?$")


def service_manifests(
    request: JobRequest,
    policy: Policy,
    flavor_name: str | None = None,
    prometheus_url: str = DEFAULT_PROMETHEUS_URL,
) -> list[dict[str, Any]]:
    """Every object of a service, in the order to apply them: its replicas (Deployment or
    LeaderWorkerSet), its Service, its autoscaler. Raises ValueError naming what is missing."""
    if not request.request_id:
        raise ValueError("request has no request_id: submit it to the ledger first (or pass one to render)")
    if not _URL.fullmatch(prometheus_url):
        raise ValueError(f"prometheus url: {prometheus_url!r} is not an http(s) URL of a host")
    return [
        workload_manifest(request, policy, flavor_name),
        service_manifest(request, policy),
        autoscaler_manifest(request, policy, prometheus_url),
    ]
