"""A service's rendering settings (docs/serving.md, Rendering and The autoscaler): the labels,
the autoscaler's cadence and targets, the Prometheus address and the Kueue integrations a serving
lane needs. The objects themselves (Deployment or LeaderWorkerSet, Service, KEDA ScaledObject or
HPA) are built beside the Jobs, by `gpu_platform.cluster.services`, from these values; this module
imports nothing of the cluster, so the simulator reads the same cadence without it.
"""

from __future__ import annotations

import math
from typing import Any

from gpu_platform.policy import Policy

LABEL_SERVICE = "gpu-platform.io/service"
"""Label of every object and pod of a service: its name (the Deployment's selector)."""
ANNOTATION_MODEL_ID = "gpu-platform.io/model-id"
"""The released model a service's pods serve."""
DEFAULT_PROMETHEUS_URL = "http://prometheus-operated.monitoring.svc:9090"
"""Where KEDA's Prometheus scaler reads the queries (the Prometheus Operator's default Service)."""
ENV_MODEL_ID = "GPU_PLATFORM_MODEL_ID"
ENV_PORT = "PORT"
CONTAINER = "server"
KEDA_POLLING_INTERVAL_S = 15
KEDA_COOLDOWN_S = 300
SCALE_DOWN_STABILIZATION_S = 300
"""Scale down only after 5 minutes of lower demand: a GPU replica is slow to come back."""
HPA_QPS_METRIC = "http_requests_per_second"
"""The per-pod custom metric (custom.metrics.k8s.io) the HPA alternative scales on: the rate of
`http_requests_total` per pod, as a prometheus-adapter rule names it."""
HPA_LATENCY_METRIC = "http_request_duration_seconds_p95"
"""The external metric (external.metrics.k8s.io) of the service's p95 latency, selected by the
service's label."""
LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"


def quantity(value: float) -> str:
    """A Kubernetes quantity for a metric target: whole numbers as they are, else milli-units
    rounded up (`0.12` -> `120m`, `40.5` -> `40500m`)."""
    if float(value).is_integer():
        return str(int(value))
    return f"{math.ceil(value * 1000 - 1e-9)}m"


def number(value: float) -> str:
    """A number as KEDA's trigger metadata takes it (a string; no exponent)."""
    return f"{value:.6f}".rstrip("0").rstrip(".") if not float(value).is_integer() else str(int(value))


KUEUE_FRAMEWORKS = ("batch/job", "pod", "deployment", "leaderworkerset.x-k8s.io/leaderworkerset")
"""Kueue's integrations the platform's workloads need: Jobs, and for services the pod integration
with Deployments and LeaderWorkerSets on it (Kueue's Configuration `integrations.frameworks`)."""


def kueue_integrations(policy: Policy) -> dict[str, Any] | None:
    """The part of Kueue's manager Configuration (config.kueue.x-k8s.io) a policy with a serving
    lane needs: its `integrations.frameworks`, so Kueue admits a service's Deployment or
    LeaderWorkerSet pods; None: no serving lane (Jobs need nothing beyond Kueue's defaults)."""
    if not any(lane.serving for lane in policy.lanes.values()):
        return None
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "integrations": {"frameworks": list(KUEUE_FRAMEWORKS)},
    }
