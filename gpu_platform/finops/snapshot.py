"""The request ledger as the cost models read it: rows for `raw_requests` and `raw_pod_requests`.

Pure Python (no Dagster, no DuckDB): `ledger_snapshot` turns the ledger's requests and events,
and the lineage store's `workload_runs` when given, into dicts in the shapes of
`gpu_platform.finops.sqlmodels.raw.REQUEST_COLUMNS` / `POD_COLUMNS`, ready for `load_ledger_snapshot`.

Pod identity: attempt N of a request runs as pod `<request_id>-a<N>` in its team's namespace
(the local executor and the demo name them so; on Kubernetes the pod carries the label
`gpu-platform.io/request-id`, see docs/finops.md). One pod row per `admitted` event:
`started_at` = the admission time, `ended_at` = the next `finished` / `failed` / `preempted`
event of the request (None while running), `exit_status` = `Succeeded` / `Failed` / `Preempted`
(None while running). `hostname` and `gpu_uuids` come from the admitted event's details when
recorded there (keys `hostname`, `gpu_uuids`), else None: a pod without a hostname cannot be
matched to a node's price.

Times are naive UTC datetimes, as the warehouse's `timestamp` columns hold them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from gpu_platform.devices.sharing import GPU, gpu_share
from gpu_platform.lineage.graph import SUCCEEDED, LineageStore, WorkloadRun
from gpu_platform.policy import Policy
from gpu_platform.requests.ledger import EventRow, Ledger, RequestState
from gpu_platform.serving.model import service_name

END_EVENTS = {"finished": "Succeeded", "failed": "Failed", "preempted": "Preempted"}
"""Ledger events that end an attempt's pod, and the pod exit status each one means."""


def pod_name(request_id: str, attempt: int) -> str:
    """The pod of attempt `attempt` (1-based) of a request: `<request_id>-a<attempt>`."""
    return f"{request_id}-a{attempt}"


def _naive_utc(at: datetime | None) -> datetime | None:
    if at is None:
        return None
    return (at.astimezone(UTC) if at.tzinfo else at).replace(tzinfo=None)


def _namespace(policy: Policy, team: str | None) -> str | None:
    if team and team in policy.teams:
        return policy.team(team).namespace
    return team


def unit_share(policy: Policy, flavor_name: str | None, resource: str | None) -> float | None:
    """The share of one physical GPU a unit of `resource` on flavor `flavor_name` is priced at:
    1 for a whole GPU, the policy's `profile_weights` or compute slices / 7 for a MIG slice,
    1 / replicas for a shared replica. None when the flavor is not in the policy."""
    resource = resource or GPU
    flavor = next((f for f in policy.flavors if f.name == flavor_name), None)
    if flavor is None:
        return None
    try:
        return gpu_share(flavor.gpu_product, resource, flavor.sharing.replicas, flavor.sharing.profile_weights)
    except ValueError:
        return None


def pod_rows(state: RequestState, events: Iterable[EventRow], policy: Policy) -> list[dict[str, Any]]:
    """One `raw_pod_requests` row per admitted attempt of one request, from its events in order
    (a service: one per replica, `service_pod_rows`).

    `gpu_resource` / `gpu_share`: the resource the request counts and the share of a GPU one unit
    of it is on the admitted flavor (`unit_share`), so slices and replicas are priced by their share."""
    req = state.request
    if getattr(req, "service", None) is not None:
        return service_pod_rows(state, events, policy)
    namespace = _namespace(policy, req.team)
    resource = req.gpu_resource or GPU
    pods: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    for ev in events:
        if ev.event == "admitted":
            attempt = len(pods) + 1
            uuids = ev.details.get("gpu_uuids")
            current = {
                "namespace": namespace,
                "pod": pod_name(state.request_id, attempt),
                "request_id": state.request_id,
                "attempt": attempt,
                "flavor_name": ev.flavor,
                "hostname": ev.details.get("hostname"),
                "gpu_uuids": list(uuids) if uuids else None,
                "started_at": _naive_utc(ev.at),
                "ended_at": None,
                "exit_status": None,
                "gpu_resource": resource,
                "gpu_share": unit_share(policy, ev.flavor, resource),
            }
            pods.append(current)
        elif ev.event in END_EVENTS and current is not None:
            current["ended_at"] = _naive_utc(ev.at)
            current["exit_status"] = END_EVENTS[ev.event]
            current = None
    return pods


def service_pod_rows(state: RequestState, events: Iterable[EventRow], policy: Policy) -> list[dict[str, Any]]:
    """A service's replicas as pods, from its events in order: an `admitted` event starts
    `details.replicas` replicas (else `service.replicas.min`), each `replicas` event (the replicas
    sensor's observation, details `replicas`) starts or stops replicas to its count (the newest
    stop first, `Succeeded`: a replica scaled down ended cleanly), and an end event
    (`finished` / `failed` / `preempted`) stops the rest with its status. Replica pod `k` of
    attempt `N` is `<request_id>-a<N>-r<k>` (k counts every replica the attempt started, from 1),
    `gpu_resource` x `gpu_count` each: what one replica holds. On a cluster, the Deployment's own
    pods (label `gpu-platform.io/request-id`) replace these rows (int_pods)."""
    req = state.request
    namespace = _namespace(policy, req.team)
    resource = req.gpu_resource or GPU
    spec = req.service
    pods: list[dict[str, Any]] = []
    running: list[dict[str, Any]] = []
    attempt = started = 0
    admitted: EventRow | None = None

    def start(ev: EventRow, n: int) -> None:
        nonlocal started
        assert admitted is not None
        for _ in range(n):
            started += 1
            pod = {
                "namespace": namespace,
                "pod": f"{pod_name(state.request_id, attempt)}-r{started}",
                "request_id": state.request_id,
                "attempt": attempt,
                "flavor_name": admitted.flavor,
                "hostname": admitted.details.get("hostname"),
                "gpu_uuids": None,
                "started_at": _naive_utc(ev.at),
                "ended_at": None,
                "exit_status": None,
                "gpu_resource": resource,
                "gpu_share": unit_share(policy, admitted.flavor, resource),
            }
            pods.append(pod)
            running.append(pod)

    def stop(ev: EventRow, n: int, status: str) -> None:
        for _ in range(min(n, len(running))):
            pod = running.pop()
            pod["ended_at"] = _naive_utc(ev.at)
            pod["exit_status"] = status

    for ev in events:
        if ev.event == "admitted":
            stop(ev, len(running), "Preempted")  # a relaunch without an end event on record
            attempt, started, admitted = attempt + 1, 0, ev
            wanted = ev.details.get("replicas") if ev.details else None
            start(ev, wanted if isinstance(wanted, int) and wanted >= 0 else spec.replicas.min)
        elif ev.event == "replicas" and admitted is not None:
            wanted = (ev.details or {}).get("replicas")
            if not isinstance(wanted, int) or isinstance(wanted, bool) or wanted < 0:
                continue
            if wanted > len(running):
                start(ev, wanted - len(running))
            else:
                stop(ev, len(running) - wanted, "Succeeded")
        elif ev.event in END_EVENTS and admitted is not None:
            stop(ev, len(running), END_EVENTS[ev.event])
            admitted = None
    return pods


def _results(runs: Iterable[WorkloadRun]) -> dict[str, dict[str, Any]]:
    """request id -> results of its newest succeeded run (any stage)."""
    out: dict[str, dict[str, Any]] = {}
    for run in runs:  # oldest first: later runs overwrite
        if run.status == SUCCEEDED:
            out[run.request_id] = {**out.get(run.request_id, {}), **dict(run.results)}
    return out


def request_row(state: RequestState, policy: Policy, results: dict[str, Any] | None = None) -> dict[str, Any]:
    """One `raw_requests` row. accepted/rejected labels and replay hours come from the request's
    recorded workload results (`accepted`, `rejected`, `replay_hours`); None when not recorded."""
    req = state.request
    results = results or {}
    workload = req.workload
    if workload is None and req.lane in policy.lanes:
        workload = policy.lane(req.lane).default_workload
    replay_hours = results.get("replay_hours")
    return {
        "request_id": state.request_id,
        "team": req.team,
        "cost_center": req.cost_center,
        "lane": req.lane,
        "site": req.site,
        "odd_cell": req.odd_cell,
        "workload": workload,
        "gpu_type": req.gpu_type,
        "gpu_count": req.gpu_count,
        "submitted_at": _naive_utc(state.submitted_at),
        "state": state.state,
        "attempts": state.attempts,
        "release_packet_id": req.release_packet_id,
        "candidate_id": req.candidate_id,
        "incident_id": req.incident_id,
        "output_artifact_ids": list(req.output_artifact_ids),
        "accepted_labels": results.get("accepted"),
        "rejected_labels": results.get("rejected"),
        "replay_hours": float(replay_hours) if replay_hours is not None else None,
        "gpu_resource": req.gpu_resource or GPU,
        "service_name": _service_name(req),
    }


def _service_name(req: Any) -> str | None:
    """A service request's service (its Kubernetes name, the `service` label of its request
    counts); None for any other request."""
    spec = getattr(req, "service", None)
    if spec is None:
        return None
    return service_name(spec, req.name)


def ledger_snapshot(
    ledger: Ledger, policy: Policy, lineage_store: LineageStore | None = None, local_host: str | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(requests, pods) of every request in the ledger, in submission order.

    lineage_store=None: no workload results (accepted/rejected labels and replay hours are None).
    local_host: the machine the local executor runs on; pods without a recorded hostname ran
    there (pass it only when the executor is local, so live runs are priced on this node).
    """
    states = ledger.states()
    by_request: dict[str, list[EventRow]] = {}
    for ev in ledger.events():
        by_request.setdefault(ev.request_id, []).append(ev)
    results = _results(lineage_store.runs()) if lineage_store is not None else {}
    requests = [request_row(s, policy, results.get(s.request_id)) for s in states]
    pods = [p for s in states for p in pod_rows(s, by_request.get(s.request_id, []), policy)]
    if local_host:
        for p in pods:
            if p["hostname"] is None:
                p["hostname"] = local_host.lower()
    return requests, pods


def lineage_edges(lineage_store: LineageStore | None) -> list[tuple[str, str]]:
    """(child request id, parent request id) of every recorded lineage edge between requests."""
    if lineage_store is None:
        return []
    return sorted({(child, p.request_id) for (child, _), parents in lineage_store.edges().items() for p in parents
                   if p.request_id != child})


# --- scorecard sources (raw_request_events, raw_request_metadata, raw_workload_runs) ----------


def event_rows(events: Iterable[EventRow]) -> list[dict[str, Any]]:
    """One `raw_request_events` row per ledger event, `seq` = its position in ledger order."""
    return [
        {"request_id": ev.request_id, "seq": i, "event": ev.event, "event_at": _naive_utc(ev.at), "reason": ev.reason,
         "flavor": ev.flavor, "run_id": ev.run_id,
         "details": json.dumps(ev.details, sort_keys=True, default=str) if ev.details else None}
        for i, ev in enumerate(events, start=1)
    ]


def metadata_row(state: RequestState) -> dict[str, Any]:
    """One `raw_request_metadata` row: the request fields scorecards group by that raw_requests lacks."""
    req = state.request
    return {
        "request_id": state.request_id,
        "owner": req.owner,
        "image": req.image,
        "container_digest": req.container_digest,
        "dataset_ids": list(req.dataset_ids),
        "gpu_resource": req.gpu_resource,
        "preemption_policy": req.preemption_policy,
        "checkpoint_interval_s": req.checkpoint_interval.total_seconds(),
        "expected_duration_s": req.expected_duration.total_seconds() if req.expected_duration else None,
    }


def run_rows(runs: Iterable[WorkloadRun]) -> list[dict[str, Any]]:
    """One `raw_workload_runs` row per recorded workload run, oldest first."""
    return [
        {"request_id": r.request_id, "seq": i, "kind": r.kind, "status": r.status, "exit_status": r.exit_status,
         "attempts": r.attempts, "container_digest": r.container_digest, "dataset_ids": list(r.dataset_ids),
         "results": json.dumps(dict(r.results), sort_keys=True, default=str) if r.results else None,
         "recorded_at": _naive_utc(r.recorded_at)}
        for i, r in enumerate(runs, start=1)
    ]


def scorecard_snapshot(
    ledger: Ledger, lineage_store: LineageStore | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """(events, request metadata, workload runs) for `load_scorecard_snapshot`."""
    runs = run_rows(lineage_store.runs()) if lineage_store is not None else []
    return event_rows(ledger.events()), [metadata_row(s) for s in ledger.states()], runs


def unmatched_snapshot(ledger: Ledger) -> list[dict[str, Any]]:
    """`raw_cluster_unmatched` rows: every recorded observation of a Job the ledger cannot match
    (`Ledger.unmatched()`), oldest first, for `load_unmatched_snapshot` (the bypass scorecard)."""
    return [
        {"observed_at": _naive_utc(r["observed_at"]), "namespace": r["namespace"], "job": r["job"],
         "request_id": r["request_id"], "attempt": r["attempt"], "kind": r["kind"], "why": r["why"],
         "condition": r["condition"], "status": r["status"], "kueue_reason": r["kueue_reason"], "flavor": r["flavor"]}
        for r in ledger.unmatched()
    ]
