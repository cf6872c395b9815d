"""A service request's `service:` block (docs/serving.md).

A request in a serving lane (`Lane.serving`) is a long-running service: `gpu_count` GPUs of
`gpu_resource` per replica (whole, MIG or shared, as for jobs), between `replicas.min` and
`replicas.max` replicas, scaled on its traffic against its SLO. The block is validated here;
`gpu_platform.requests.model.validate_request` checks it against the lane.
"""

from __future__ import annotations

import re
from string import Template
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

MODEL_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,199}$")
"""A released-model id (`model-perception-2026.12-rc1`): the id alphabet of request ids."""
DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
"""A Kubernetes Service name (DNS-1035 label: lower case, starts with a letter, at most 63)."""
MAX_QUERY_CHARS = 2048
TEMPLATE_VARS = ("service", "namespace")
"""Placeholders a PromQL template may use (`$service`, `$namespace`; `$$` is a literal `$`)."""

DEFAULT_QPS_QUERY = 'sum(rate(http_requests_total{namespace="$namespace",service="$service"}[2m]))'
"""Requests per second the service answers, summed over its replicas (KEDA divides by replicas)."""
DEFAULT_LATENCY_QUERY = (
    "histogram_quantile(0.95, sum by (le) (rate("
    'http_request_duration_seconds_bucket{namespace="$namespace",service="$service"}[5m])))'
)
"""The service's p95 latency in seconds over 5 minutes."""

Autoscaler = Literal["keda", "hpa"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def _not_bool(v: Any) -> Any:
    # YAML `true` is not 1 replica; pydantic's lax mode would take it as one.
    if isinstance(v, bool):
        raise ValueError(f"must be a number, not a boolean ({str(v).lower()})")
    return v


class Replicas(_Frozen):
    """min: replicas always running (at least 1: a service never scales to zero, GPU nodes start
    slowly); max: the most the autoscaler may run (at least min)."""

    min: int = Field(ge=1, le=1000)
    max: int = Field(ge=1, le=1000)

    _bools = field_validator("min", "max", mode="before")(classmethod(lambda cls, v: _not_bool(v)))

    @model_validator(mode="after")
    def _order(self) -> Replicas:
        if self.max < self.min:
            raise ValueError(f"max ({self.max}) is below min ({self.min})")
        return self


class Slo(_Frozen):
    """p95_latency_ms: the p95 latency the service promises; target_qps_per_replica: the requests
    per second one replica serves within it (the autoscaler's target per replica)."""

    p95_latency_ms: float = Field(gt=0, le=3_600_000)
    target_qps_per_replica: float = Field(gt=0, le=1_000_000)

    _bools = field_validator("p95_latency_ms", "target_qps_per_replica", mode="before")(
        classmethod(lambda cls, v: _not_bool(v))
    )


class Metrics(_Frozen):
    """PromQL templates of the autoscaler's queries; `$service` and `$namespace` are filled in.
    None: the default (`DEFAULT_QPS_QUERY`, `DEFAULT_LATENCY_QUERY`). qps_query answers the
    service's total requests per second, latency_query its p95 latency in seconds."""

    qps_query: str | None = Field(default=None, min_length=1, max_length=MAX_QUERY_CHARS)
    latency_query: str | None = Field(default=None, min_length=1, max_length=MAX_QUERY_CHARS)

    @field_validator("qps_query", "latency_query")
    @classmethod
    def _template(cls, v: str | None) -> str | None:
        if v is None:
            return v
        if any(ord(c) < 32 and c not in "\t\n" or 0x7F <= ord(c) < 0xA0 for c in v):
            raise ValueError("holds a control character")
        tpl = Template(v)
        if not tpl.is_valid():
            raise ValueError("is not a valid template: write `$$` for a literal `$`")
        unknown = sorted(set(tpl.get_identifiers()) - set(TEMPLATE_VARS))
        if unknown:
            raise ValueError(
                f"unknown placeholder(s) {', '.join('$' + u for u in unknown)} (known: $service, $namespace)"
            )
        return v


class ServiceSpec(_Frozen):
    """A request's `service:` block.

    model_id: the released model it serves (`model-perception-2026.12-rc1`).
    replicas: min and max replicas; GPUs per replica are the request's `gpu_count` of its
    `gpu_resource`. slo: p95 latency and target QPS per replica. port: the container's and the
    Service's port. autoscaler: `keda` (a KEDA ScaledObject on Prometheus, the default) or `hpa`
    (an autoscaling/v2 HorizontalPodAutoscaler on custom metrics). metrics: the PromQL templates.
    name: the Kubernetes name of the service (DNS-1035 label); None: the request's `name`,
    which must then be one.
    """

    model_id: str = Field(pattern=MODEL_ID.pattern)
    replicas: Replicas
    slo: Slo
    port: int = Field(default=8080, ge=1, le=65535)
    autoscaler: Autoscaler = "keda"
    metrics: Metrics = Metrics()
    name: str | None = Field(default=None, pattern=DNS_LABEL.pattern)

    _bools = field_validator("port", mode="before")(classmethod(lambda cls, v: _not_bool(v)))

    def queries(self, service: str, namespace: str) -> tuple[str, str]:
        """(qps query, latency query) with `$service` and `$namespace` filled in."""
        values = {"service": service, "namespace": namespace}
        qps = Template(self.metrics.qps_query or DEFAULT_QPS_QUERY).substitute(values)
        latency = Template(self.metrics.latency_query or DEFAULT_LATENCY_QUERY).substitute(values)
        return qps, latency

    @property
    def p95_latency_seconds(self) -> float:
        return self.slo.p95_latency_ms / 1000.0


def service_name(spec: ServiceSpec, request_name: str | None) -> str | None:
    """The Kubernetes name of a service: `spec.name`, else the request's name when it is a
    DNS-1035 label; None when neither is."""
    if spec.name:
        return spec.name
    if request_name and DNS_LABEL.fullmatch(request_name):
        return request_name
    return None
