"""The ledger's view of each running service's replicas, and what keeps it current.

`current_replicas` per service request is the count of its newest `replicas` event since its
latest admission, else the admission's own (`details.replicas`, else `service.replicas.min`: what
the engine admits). The replicas sensor (`assets/serving.py`) observes the replicas running now
and records a `replicas` event (details `replicas`, `source`, `previous`) only when a count changed:

- on a cluster (`cluster_replicas`): the `.status.replicas` of each service's Deployment
  (apps/v1; label `gpu-platform.io/service`, request id from the `gpu-platform.io/request-id`
  annotation, else the label): the replica pods the Deployment has, which hold their GPUs once
  scheduled;
- with the local executor (`local_replicas`, the demo): what KEDA would ask for from the same
  request counts the cost models read: the newest saved point at or before now of the service
  (`feeds/requests/<day>/*.json`, requests of the last 5 minutes) over 300 s is its QPS, and
  replicas = ceil(QPS / `slo.target_qps_per_replica`) within [min, max] (`desired_replicas`,
  the HPA rule for an `AverageValue` target). A service without a point keeps its count.

The replica pods the cost models price come from these events (`gpu_platform.finops.snapshot`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from gpu_platform.cluster.names import ANNOTATION_REQUEST_ID, LABEL_REQUEST_ID
from gpu_platform.finops.feeds.requests_prom import REQUESTS_DIR, STEP_S, read_service_requests_file
from gpu_platform.requests.ledger import EventRow, Ledger, RequestState
from gpu_platform.serving.model import ServiceSpec, service_name

LABEL_SERVICE = "gpu-platform.io/service"
"""The label a service's Deployment and pods carry: the service's name."""
REPLICAS_EVENT = "replicas"


@dataclass(frozen=True)
class ServiceView:
    """One running service request as the ledger sees it."""

    request_id: str
    service: str
    team: str | None
    model_id: str
    min_replicas: int
    max_replicas: int
    gpus_per_replica: int
    current_replicas: int
    since: datetime | None
    """When the count was last recorded (the admission or the newest `replicas` event)."""
    source: str
    """Who recorded it: `admission`, `cluster` or `local`."""


def running_services(states: Iterable[RequestState]) -> list[RequestState]:
    """The admitted service requests (workload service with a `service:` block)."""
    return [s for s in states if s.state == "admitted" and getattr(s.request, "service", None) is not None]


def replicas_from_events(spec: ServiceSpec, events: Iterable[EventRow]) -> tuple[int, datetime | None, str]:
    """(current replicas, recorded at, source) from one request's events in order."""
    count, at, source = spec.replicas.min, None, "admission"
    for ev in events:
        details = ev.details or {}
        if ev.event == "admitted":
            wanted = details.get("replicas")
            count = wanted if _count(wanted) else spec.replicas.min
            at, source = ev.at, "admission"
        elif ev.event == REPLICAS_EVENT and _count(details.get("replicas")):
            count, at, source = details["replicas"], ev.at, str(details.get("source") or "unknown")
    return count, at, source


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def service_views(ledger: Ledger, states: Iterable[RequestState] | None = None) -> list[ServiceView]:
    """Every running service with its current replicas, by service name then request id."""
    running = running_services(ledger.states() if states is None else states)
    out = []
    for s in running:
        spec = s.request.service
        count, at, source = replicas_from_events(spec, ledger.events(s.request_id))
        out.append(ServiceView(
            request_id=s.request_id, service=service_name(spec, s.request.name) or s.request_id,
            team=s.request.team, model_id=spec.model_id, min_replicas=spec.replicas.min,
            max_replicas=spec.replicas.max, gpus_per_replica=s.request.gpu_count or 1,
            current_replicas=count, since=at, source=source,
        ))
    return sorted(out, key=lambda v: (v.service, v.request_id))


def desired_replicas(spec: ServiceSpec, qps: float) -> int:
    """ceil(qps / target QPS per replica) within [min, max]: the HPA/KEDA rule for a target per replica."""
    wanted = math.ceil(max(qps, 0.0) / spec.slo.target_qps_per_replica - 1e-9)
    return min(max(wanted, spec.replicas.min), spec.replicas.max)


def latest_qps(feeds: Path, now: datetime) -> dict[str, float]:
    """Service -> requests per second of its newest saved point at or before `now` (today's and
    yesterday's folders under `feeds/requests/`); a service with no such point is absent."""
    now = now.astimezone(UTC)
    newest: dict[str, tuple[datetime, float]] = {}
    for day in (now.date() - timedelta(days=1), now.date()):
        folder = feeds / REQUESTS_DIR / day.isoformat()
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.json")):
            try:
                batch = read_service_requests_file(path, path.name)
            except Exception:  # noqa: BLE001 - an unreadable file is the ingest's to quarantine; no signal here
                continue
            for ts, service, requests in batch.rows.select("ts", "service", "requests").iter_rows():
                if ts <= now and (service not in newest or ts > newest[service][0]):
                    newest[service] = (ts, requests)
    return {service: requests / STEP_S for service, (_, requests) in newest.items()}


def local_replicas(states: Iterable[RequestState], feeds: Path, now: datetime) -> dict[str, int]:
    """Request id -> the replicas the local executor runs now (the demo's autoscaler, see the module)."""
    qps = latest_qps(feeds, now)
    out = {}
    for s in running_services(states):
        name = service_name(s.request.service, s.request.name) or s.request_id
        if name in qps:
            out[s.request_id] = desired_replicas(s.request.service, qps[name])
    return out


def cluster_replicas(deployments: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Request id -> `.status.replicas` of the services' Deployments (dicts as the API returns them
    with `to_dict()` or `kubectl get deploy -o json` items; a missing status counts 0)."""
    out: dict[str, int] = {}
    for d in deployments:
        meta = d.get("metadata") or {}
        labels, notes = meta.get("labels") or {}, meta.get("annotations") or {}
        if LABEL_SERVICE not in labels:
            continue
        rid = notes.get(ANNOTATION_REQUEST_ID) or labels.get(LABEL_REQUEST_ID)
        if not rid:
            continue
        replicas = (d.get("status") or {}).get("replicas")
        out[rid] = replicas if _count(replicas) else 0
    return out


def read_cluster_deployments(api: Any = None) -> list[dict[str, Any]]:
    """Every Deployment labelled `gpu-platform.io/service`, in all namespaces (apps/v1)."""
    from kubernetes import client

    from gpu_platform.cluster.client import api_client

    apps = client.AppsV1Api(api or api_client())
    items = apps.list_deployment_for_all_namespaces(label_selector=LABEL_SERVICE).items
    return [apps.api_client.sanitize_for_serialization(d) for d in items]


def replicas_changes(views: Iterable[ServiceView], observed: Mapping[str, int]) -> list[tuple[ServiceView, int]]:
    """(view, observed count) of every running service whose observed count differs from the ledger's."""
    return [(v, observed[v.request_id]) for v in views
            if v.request_id in observed and observed[v.request_id] != v.current_replicas]


def record_replicas(
    ledger: Ledger, changes: Iterable[tuple[ServiceView, int]], source: str, at: datetime | None = None
) -> int:
    """One `replicas` event per change, in one transaction; returns how many were recorded."""
    rows = [
        (v.request_id, REPLICAS_EVENT, f"{v.current_replicas} -> {n} replicas ({source})", None, None,
         {"replicas": n, "previous": v.current_replicas, "source": source})
        for v, n in changes
    ]
    return ledger.record_many(rows, at=at) if rows else 0


def sync_replicas(ledger: Ledger, observed: Mapping[str, int], source: str, at: datetime | None = None,
                  states: Iterable[RequestState] | None = None) -> list[tuple[ServiceView, int]]:
    """Bring the ledger's view up to `observed` (request id -> replicas); returns the changes recorded."""
    changes = replicas_changes(service_views(ledger, states), observed)
    record_replicas(ledger, changes, source, at)
    return changes



def latest_service_day(con: Any):
    """The newest day unit_cost_inference_request holds (None: never built)."""
    tables = {r[0] for r in con.execute(
        "select table_name from information_schema.tables where table_schema = 'main'").fetchall()}
    if "unit_cost_inference_request" not in tables:
        return None
    (d,) = con.execute("select max(day) from unit_cost_inference_request").fetchone()
    return d


def released_model_request(states: Iterable[RequestState], model_id: str) -> RequestState | None:
    """The released_model request that released `model_id` (named in its `artifact_set` or
    `output_artifact_ids`, or its own id): a finished one first, the newest of those; None: none."""
    found = [s for s in states if s.request.workload == "released_model"
             and (model_id in s.request.artifact_set or model_id in s.request.output_artifact_ids
                  or model_id == s.request_id)]
    found.sort(key=lambda s: (s.state == "finished", s.submitted_at))
    return found[-1] if found else None


def service_summary(ledger: Ledger, request_id: str, con: Any = None) -> dict[str, Any]:
    """What the service asset shows of one service request: the service, its model and the
    release that produced it, replicas now (min, max, who recorded them), GPUs per replica, and
    with a warehouse connection `con` its newest priced day (`service_rows`, as `cost report`)."""
    from gpu_platform.finops.sqlmodels.report import service_rows

    states = ledger.states()
    state = next((s for s in states if s.request_id == request_id), None)
    if state is None or getattr(state.request, "service", None) is None:
        raise ValueError(f"{request_id}: not a service request in the ledger")
    spec = state.request.service
    count, at, source = replicas_from_events(spec, ledger.events(request_id))
    release = released_model_request(states, spec.model_id)
    out: dict[str, Any] = {
        "service": service_name(spec, state.request.name) or request_id,
        "request_id": request_id,
        "state": state.state,
        "team": state.request.team,
        "lane": state.request.lane,
        "model_id": spec.model_id,
        "released_model_request": release.request_id if release else None,
        "replicas": count if state.state == "admitted" else 0,
        "replicas_min": spec.replicas.min,
        "replicas_max": spec.replicas.max,
        "replicas_source": source,
        "replicas_since": at.isoformat() if at else None,
        "gpus_per_replica": state.request.gpu_count or 1,
        # serving GPUs the service holds no replica on now: idle quota batch lanes may borrow until it scales up
        "lendable_gpus": (spec.replicas.max - min(count, spec.replicas.max)) * (state.request.gpu_count or 1)
        if state.state == "admitted" else 0,
        "gpu_resource": state.request.gpu_resource,
        "target_qps_per_replica": spec.slo.target_qps_per_replica,
        "p95_latency_ms": spec.slo.p95_latency_ms,
        "cost_day": None,
        "cost_rows": [],
    }
    if con is not None:
        day = latest_service_day(con)
        if day is not None:
            out["cost_day"] = day.isoformat()
            out["cost_rows"] = [r for r in service_rows(con, day) if r["service"] == out["service"]]
    return out


def current_replicas(ledger: Ledger, states: Iterable[RequestState]) -> dict[str, int]:
    """Request id -> the replicas each running service holds now (what the gate gives the engine)."""
    running = running_services(states)
    if not running:
        return {}
    return {v.request_id: v.current_replicas for v in service_views(ledger, running)}
