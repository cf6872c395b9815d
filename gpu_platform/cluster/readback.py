"""The cluster's word read back: what Kueue did with each of the gate's Jobs.

In production both the gate and Kueue admit (docs/execution.md, "Who decides what"). On every
tick the gate lists, namespace by namespace, its Jobs (label `gpu-platform.io/request-id`) and
Kueue's Workloads (`kueue.x-k8s.io/v1beta2`, owned by those Jobs), and turns each Workload's
current condition into a ledger `cluster` event carrying Kueue's own reason and message:

| Workload condition (status True) | observation |
|---|---|
| `QuotaReserved=False` (`Pending`, `Inadmissible`) | waiting in Kueue, with Kueue's reason |
| `QuotaReserved` | quota reserved on the flavor of `status.admission.podSetAssignments` |
| `Admitted` | admitted (the Job is unsuspended), on that flavor |
| `Evicted` (+ `Preempted`: `InClusterQueue`, `InCohortReclamation`, ...) | evicted by Kueue |
| `Finished` (`Succeeded`, `Failed`) | finished |

Admission checks (`status.admissionChecks[]`: a ProvisioningRequest check waiting for nodes, a
MultiKueue check dispatching to a site's worker cluster) are recorded with the observation, each
as its name, state (`Pending`, `Ready`, `Retry`, `Rejected`) and message; a change of any check's
state or message is a new `cluster` event, and the summary names the checks that are not `Ready`
yet (or were rejected). `status.clusterName` (the MultiKueue worker the Workload runs on) is
recorded as `cluster_name`.

A Job Kueue never made a Workload for is read from the Job's Warning events (Kueue reports,
for example, `WorkloadPriorityClassNotFound` there and creates nothing). A Job the ledger cannot
match to a pending or running request's current attempt is recorded as such (`read_back` /
`record_read_back`: ledger table `gp_cluster_unmatched`, for the bypass scorecard), never
dropped. Parsing works on the
objects as the API returns them (dicts); `read_cluster` is the one place that talks to the API,
through the `kubernetes` client.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gpu_platform.cluster.client import SERVICE_ACCOUNT_DIR, api_client
from gpu_platform.cluster.names import (
    ANNOTATION_GATE_FLAVOR,
    ANNOTATION_REQUEST_ID,
    KUEUE_API_GROUP,
    KUEUE_API_VERSION,
    KUEUE_QUEUE_NAME,
    LABEL_ATTEMPT,
    LABEL_REQUEST_ID,
)
from gpu_platform.policy.aging import PRIORITY_BOOST_ANNOTATION as ANNOTATION_PRIORITY_BOOST

GPU = "nvidia.com/gpu"
_PRECEDENCE = {"Finished": 5, "Preempted": 4, "Evicted": 3, "Admitted": 2, "QuotaReserved": 1}
NO_WORKLOAD = "NoWorkload"
"""Observation condition for a Kueue-labelled Job that has no Workload (yet)."""


@dataclass(frozen=True, slots=True)
class Observation:
    """What the cluster says about one Job of one request attempt.

    condition: the Workload condition that describes it now (`QuotaReserved`, `Admitted`,
    `Evicted`, `Preempted`, `Finished`) or `NoWorkload`; status: that condition's status.
    kueue_reason / message: Kueue's words. flavor: the flavor Kueue assigned (None while it has
    assigned none). gate_flavor: the flavor the gate admitted the request on (Job annotation).
    """

    request_id: str
    attempt: int
    namespace: str
    job: str
    workload: str | None
    condition: str
    status: str
    kueue_reason: str
    message: str
    flavor: str | None = None
    gate_flavor: str | None = None
    cluster_queue: str | None = None
    at: str | None = None
    admission_checks: tuple[dict[str, Any], ...] | None = None
    """The Workload's admission checks, each `{name, state, message}` (+ `retry_count`); None: none."""
    cluster_name: str | None = None
    """The MultiKueue worker cluster the Workload was dispatched to (`status.clusterName`)."""
    priority_boost: str | None = None
    """The Workload's `kueue.x-k8s.io/priority-boost` annotation as read (None: not set); the
    gate's aging sync compares it with the boost due (`cluster.aging`). Not recorded in the ledger."""

    @property
    def waiting(self) -> bool:
        """Kueue holds the Workload pending: no quota reserved (never reserved, or evicted and
        requeued) and not finished. Only such a Workload's priority boost is the gate's to change."""
        if self.workload is None:
            return False
        return self.condition in ("Evicted", "Preempted") or (self.condition == "QuotaReserved" and self.status != "True")

    @property
    def summary(self) -> str:
        text = f"Kueue {self.condition}={self.status} ({self.kueue_reason}): {self.message}".rstrip(": ")
        if self.flavor and self.gate_flavor and self.flavor != self.gate_flavor:
            text += f" [Kueue assigned {self.flavor}; the gate had chosen {self.gate_flavor}]"
        checks = [c for c in self.admission_checks or () if c.get("state") != "Ready"]
        if checks:
            text += "; admission check " + "; ".join(
                f"{c['name']} {c['state']}" + (f" ({c['message']})" if c.get("message") else "") for c in checks
            )
        elif self.admission_checks:
            text += "; admission checks Ready: " + ", ".join(c["name"] for c in self.admission_checks)
        if self.cluster_name:
            text += f"; runs on worker cluster {self.cluster_name}"
        return text

    def key(self) -> tuple[Any, ...]:
        """What makes an observation new (a changed message counts: Kueue's numbers change; so
        does an admission check's state or message, and the worker cluster)."""
        return (
            self.attempt, self.condition, self.status, self.kueue_reason, self.message, self.flavor,
            checks_key(self.admission_checks), self.cluster_name,
        )


CHECK_STATES = ("Pending", "Ready", "Retry", "Rejected")
"""Kueue's AdmissionCheckState values (`status.admissionChecks[].state`)."""


def checks_key(checks: Any) -> tuple[tuple[str, str, str], ...] | None:
    """Admission checks as a comparable value (from an observation or a recorded ledger row)."""
    if not checks:
        return None
    return tuple(sorted((str(c.get("name", "")), str(c.get("state", "")), str(c.get("message", ""))) for c in checks))


def admission_checks_of(workload: Mapping[str, Any]) -> tuple[dict[str, Any], ...] | None:
    """`status.admissionChecks` as `{name, state, message[, retry_count]}` in name order; None: none."""
    out = []
    for c in (workload.get("status") or {}).get("admissionChecks") or []:
        if not isinstance(c, Mapping) or not c.get("name"):
            continue
        state = str(c.get("state") or "Pending")
        entry: dict[str, Any] = {"name": str(c["name"]), "state": state, "message": str(c.get("message") or "")}
        if c.get("retryCount"):
            entry["retry_count"] = int(c["retryCount"])
        out.append(entry)
    return tuple(sorted(out, key=lambda c: c["name"])) or None


def _request_of(job: Mapping[str, Any]) -> tuple[str | None, int]:
    meta = job.get("metadata") or {}
    ann, labels = meta.get("annotations") or {}, meta.get("labels") or {}
    rid = ann.get(ANNOTATION_REQUEST_ID) or labels.get(LABEL_REQUEST_ID)
    try:
        attempt = int(labels.get(LABEL_ATTEMPT, "0"))
    except ValueError:
        attempt = 0
    return rid, attempt


def assigned_flavor(workload: Mapping[str, Any]) -> str | None:
    """The flavor Kueue assigned to the GPUs (first pod set), from `status.admission`."""
    admission = (workload.get("status") or {}).get("admission") or {}
    for psa in admission.get("podSetAssignments") or []:
        flavors = psa.get("flavors") or {}
        if GPU in flavors:
            return flavors[GPU]
        if flavors:
            return next(iter(flavors.values()))
    return None


def observe_workload(workload: Mapping[str, Any], job: Mapping[str, Any]) -> Observation | None:
    """The Workload's current state as one observation; None when the Job is not a request's."""
    rid, attempt = _request_of(job)
    if rid is None:
        return None
    meta, status = workload.get("metadata") or {}, workload.get("status") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    true = [c for t, c in conditions.items() if t in _PRECEDENCE and c.get("status") == "True"]
    if true:
        # Evicted workloads also carry Preempted (the detailed reason); Kueue flips Evicted back
        # to False once the workload reserves quota again, so "true now" is the current story.
        cond = max(true, key=lambda c: (c.get("lastTransitionTime") or "", _PRECEDENCE[c["type"]]))
        if cond["type"] == "Evicted" and conditions.get("Preempted", {}).get("status") == "True":
            cond = conditions["Preempted"]
    elif "QuotaReserved" in conditions:
        cond = conditions["QuotaReserved"]
    else:
        cond = {"type": "QuotaReserved", "status": "Unknown", "reason": "Created", "message": "Workload created, not yet considered"}
    admission = status.get("admission") or {}
    checks = admission_checks_of(workload)
    # a check changes state without a condition transition: the observation is as new as either
    check_times = [str(c.get("lastTransitionTime")) for c in status.get("admissionChecks") or [] if isinstance(c, Mapping) and c.get("lastTransitionTime")]
    job_ann = (job.get("metadata") or {}).get("annotations") or {}
    flavor = assigned_flavor(workload) if cond["type"] in ("QuotaReserved", "Admitted", "Finished") else None
    return Observation(
        request_id=rid,
        attempt=attempt,
        namespace=meta.get("namespace") or (job.get("metadata") or {}).get("namespace", ""),
        job=(job.get("metadata") or {}).get("name", ""),
        workload=meta.get("name"),
        condition=cond["type"],
        status=cond.get("status", "Unknown"),
        kueue_reason=cond.get("reason", ""),
        message=cond.get("message", ""),
        flavor=flavor,
        gate_flavor=job_ann.get(ANNOTATION_GATE_FLAVOR),
        cluster_queue=admission.get("clusterQueue"),
        at=max([t for t in (cond.get("lastTransitionTime"), *check_times) if t], default=None),
        admission_checks=checks,
        cluster_name=status.get("clusterName") or None,
        priority_boost=(meta.get("annotations") or {}).get(ANNOTATION_PRIORITY_BOOST),
    )


def observe_job_without_workload(job: Mapping[str, Any], events: Iterable[Mapping[str, Any]]) -> Observation | None:
    """A Kueue-labelled Job with no Workload: Kueue's latest Warning event on it, if any."""
    rid, attempt = _request_of(job)
    meta = job.get("metadata") or {}
    if rid is None or KUEUE_QUEUE_NAME not in (meta.get("labels") or {}):
        return None
    warnings = [e for e in events if e.get("type") == "Warning"]

    def when(e: Mapping[str, Any]) -> str:
        return str(e.get("lastTimestamp") or e.get("eventTime") or e.get("firstTimestamp") or "")

    latest = max(warnings, key=when) if warnings else None
    return Observation(
        request_id=rid,
        attempt=attempt,
        namespace=meta.get("namespace", ""),
        job=meta.get("name", ""),
        workload=None,
        condition=NO_WORKLOAD,
        status="True",
        kueue_reason=latest.get("reason", "") if latest else "WorkloadNotCreated",
        message=latest.get("message", "") if latest else "Kueue has not created a Workload for the Job",
        gate_flavor=(meta.get("annotations") or {}).get(ANNOTATION_GATE_FLAVOR),
        at=when(latest) if latest else None,
    )


def observe(
    jobs: Iterable[Mapping[str, Any]],
    workloads: Iterable[Mapping[str, Any]],
    events: Iterable[Mapping[str, Any]] = (),
) -> list[Observation]:
    """Join Jobs, Workloads (by owner UID) and the Jobs' events (by involved object UID)."""
    by_owner: dict[str, Mapping[str, Any]] = {}
    for wl in workloads:
        for ref in (wl.get("metadata") or {}).get("ownerReferences") or []:
            if ref.get("kind") == "Job":
                by_owner[ref.get("uid", "")] = wl
    events_by_uid: dict[str, list[Mapping[str, Any]]] = {}
    for ev in events:
        uid = (ev.get("involvedObject") or {}).get("uid", "")
        events_by_uid.setdefault(uid, []).append(ev)
    out = []
    for job in jobs:
        uid = (job.get("metadata") or {}).get("uid", "")
        wl = by_owner.get(uid)
        obs = observe_workload(wl, job) if wl is not None else observe_job_without_workload(job, events_by_uid.get(uid, []))
        if obs is not None:
            out.append(obs)
    return out


def ledger_rows(states: Iterable[Any], observations: Iterable[Observation]) -> list[tuple]:
    """`cluster` ledger rows for observations that are new for a request's current attempt.

    states: `RequestState`s (the request's `cluster` field holds the last recorded observation).
    Observations of another attempt than the request's current one (an earlier, superseded
    attempt; or one ahead of the ledger's) and of unknown requests are skipped (`unmatched`).
    """
    by_id = {s.request_id: s for s in states}
    latest: dict[str, Observation] = {}
    for obs in observations:
        if _why_unmatched(by_id.get(obs.request_id), obs) is not None:
            continue
        prev = latest.get(obs.request_id)
        if prev is None or (obs.at or "") >= (prev.at or ""):
            latest[obs.request_id] = obs
    rows = []
    for rid, obs in latest.items():
        last = by_id[rid].cluster
        if last is not None and _recorded_key(last) == obs.key():
            continue
        details = {k: v for k, v in asdict(obs).items() if k not in ("request_id", "priority_boost") and v is not None}
        rows.append((rid, "cluster", obs.summary, obs.flavor, None, details))
    return rows


def _recorded_key(last: Mapping[str, Any]) -> tuple[Any, ...]:
    """`Observation.key()` of the last recorded `cluster` event's details."""
    return (
        *(last.get(k) for k in ("attempt", "condition", "status", "kueue_reason", "message", "flavor")),
        checks_key(last.get("admission_checks")),
        last.get("cluster_name"),
    )


def unmatched(
    states: Iterable[Any], observations: Iterable[Observation], known: Mapping[str, str] | None = None
) -> list[tuple[Observation, str, str]]:
    """The observations `ledger_rows` does not record, each as (observation, kind, why): a Job of
    a request that is not pending or running in the ledger (`unknown_request`: never submitted
    through the gate; `ended_request`: finished, failed or rejected), of an attempt before the
    request's current one (`superseded_attempt`: a superseded Job being deleted), or of an
    attempt after it (`ahead_attempt`: a Job the ledger records no launch of, as when a gate's
    ledger write was lost after it launched, or the ledger was restored from an earlier copy).

    known: every request id of the ledger with its state (`Ledger.states()`); None: a request
    not in `states` counts as unknown."""
    by_id = {s.request_id: s for s in states}
    known = known or {}
    out = []
    for obs in observations:
        why = _why_unmatched(by_id.get(obs.request_id), obs)
        if why is None:
            continue
        if obs.request_id in by_id:
            kind = "ahead_attempt" if obs.attempt > by_id[obs.request_id].attempts else "superseded_attempt"
        elif obs.request_id in known:
            kind = "ended_request"
            why = f"the request is {known[obs.request_id]} in the ledger; its Job is still on the cluster"
        else:
            kind = "unknown_request"
            why = "no request with this id in the ledger (not submitted through the gate)"
        out.append((obs, kind, why))
    return out


def _why_unmatched(state: Any, obs: Observation) -> str | None:
    """None when the observation is of the request's current attempt, else why it is not."""
    if state is None:
        return "no pending or running request with this id in the ledger"
    if obs.attempt > state.attempts:
        return (
            f"attempt {obs.attempt} is ahead of the ledger, whose current attempt of the request is "
            f"{state.attempts}: the ledger records no launch of this Job"
        )
    if obs.attempt != state.attempts:
        return f"attempt {obs.attempt}; the request's current attempt is {state.attempts}"
    return None


def unmatched_rows(
    last: Mapping[tuple[str, str], Mapping[str, Any]], found: Iterable[tuple[Observation, str, str]]
) -> list[dict[str, Any]]:
    """`gp_cluster_unmatched` rows for the unmatched Jobs whose story is new: never recorded, or
    changed (request, attempt, Kueue's condition, reason, message or flavor, or why) since the
    last row of that Job (`Ledger.last_unmatched()`), so a Job seen every tick is written once
    per change, never dropped."""
    out = []
    for obs, kind, why in found:
        row = {
            "namespace": obs.namespace,
            "job": obs.job,
            "request_id": obs.request_id,
            "attempt": obs.attempt,
            "kind": kind,
            "why": why,
            "condition": obs.condition,
            "status": obs.status,
            "kueue_reason": obs.kueue_reason,
            "message": obs.message,
            "flavor": obs.flavor,
            "cluster_queue": obs.cluster_queue,
        }
        prev = last.get((obs.namespace, obs.job))
        if prev is not None and all(prev.get(k) == row[k] for k in row):
            continue
        out.append(row)
    return out


@dataclass(frozen=True, slots=True)
class ReadBack:
    """One read-back against the ledger: `changed` = `cluster` event rows (`ledger_rows`),
    `unmatched` = every Job the ledger cannot match (observation, kind, why), `unmatched_new` = the
    `gp_cluster_unmatched` rows among them that are new (`unmatched_rows`)."""

    changed: list[tuple]
    unmatched: list[tuple[Observation, str, str]]
    unmatched_new: list[dict[str, Any]]


def read_back(ledger: Any, observations: list[Observation], active: Iterable[Any] | None = None) -> ReadBack:
    """What the observations mean for the ledger, nothing written: `record_read_back` writes it.

    active: the pending and running `RequestState`s (default: read from the ledger)."""
    from gpu_platform.requests.ledger import ACTIVE_STATES, PENDING_STATES

    states = list(active) if active is not None else ledger.states((*PENDING_STATES, *ACTIVE_STATES))
    observed = {o.request_id for o in observations}
    current = {s.request_id for s in states}
    known = {}
    for rid in sorted(ledger.known_ids(sorted(observed - current))):
        known.update({s.request_id: s.state for s in ledger.states(request_id=rid)})
    found = unmatched(states, observations, known)
    return ReadBack(ledger_rows(states, observations), found, unmatched_rows(ledger.last_unmatched(), found))


def record_read_back(ledger: Any, rb: ReadBack) -> None:
    """Record a read-back: its `cluster` events and its new unmatched-Job rows."""
    if rb.changed:
        ledger.record_many(rb.changed)
    if rb.unmatched_new:
        ledger.record_unmatched(rb.unmatched_new)


def read_cluster(
    namespaces: Iterable[str],
    batch_api: Any = None,
    custom_api: Any = None,
    core_api: Any = None,
) -> list[Observation]:
    """List the gate's Jobs, Kueue's Workloads and the Jobs' events in each namespace.

    The APIs default to `kubernetes.client`'s, with whatever configuration the caller loaded
    (`kubernetes.config.load_incluster_config()` in the gate's pod, a kubeconfig elsewhere).
    """
    from kubernetes import client

    batch_api = batch_api or client.BatchV1Api()
    custom_api = custom_api or client.CustomObjectsApi()
    core_api = core_api or client.CoreV1Api()
    serialize = batch_api.api_client.sanitize_for_serialization
    out: list[Observation] = []
    for ns in namespaces:
        jobs = [serialize(j) for j in batch_api.list_namespaced_job(ns, label_selector=LABEL_REQUEST_ID).items]
        if not jobs:
            continue
        workloads = custom_api.list_namespaced_custom_object(KUEUE_API_GROUP, KUEUE_API_VERSION, ns, "workloads")["items"]
        owned = {
            ref.get("uid") for wl in workloads for ref in (wl.get("metadata") or {}).get("ownerReferences") or []
        }
        events: list[dict[str, Any]] = []
        for job in jobs:
            uid = job["metadata"].get("uid")
            if uid not in owned and KUEUE_QUEUE_NAME in (job["metadata"].get("labels") or {}):
                listed = core_api.list_namespaced_event(ns, field_selector=f"involvedObject.uid={uid}").items
                events += [serialize(e) for e in listed]
        out += observe(jobs, workloads, events)
    return out


def read_kueue(namespaces: Iterable[str], kubeconfig: str = "", service_account_dir: str | Path = SERVICE_ACCOUNT_DIR) -> list[Observation]:
    """Kueue's word on the gate's Jobs in these namespaces, through `cluster.client.api_client`
    (the configuration loaded before the client is built, so a private CA is trusted).

    kubeconfig: a kubeconfig file; "" = the pod's in-cluster service account (it needs `list` on
    jobs, events and workloads.kueue.x-k8s.io in the team namespaces), else `KUBECONFIG`.
    """
    from kubernetes import client

    api = api_client(kubeconfig, service_account_dir)
    return read_cluster(namespaces, client.BatchV1Api(api), client.CustomObjectsApi(api), client.CoreV1Api(api))


# -- Admission Fair Sharing: each team's LocalQueue usage -------------------------------------
def team_usage_of(local_queues: Iterable[Mapping[str, Any]], policy: Any) -> dict[str, dict[str, dict[str, float]]]:
    """lane -> team -> {resource: decayed consumed amount}, from LocalQueues as the API returns
    them: Kueue keeps each LocalQueue's usage in
    `status.fairSharing.admissionFairSharingStatus.consumedResources` (a resource list of
    quantities). Only the lanes with Admission Fair Sharing count; a LocalQueue of a namespace no
    team owns, of a name that is no lane's, or without that status (Kueue has not sampled it
    yet: no usage) adds nothing. The engine orders each such lane's teams by it, as Kueue does."""
    from kubernetes.utils import parse_quantity

    from gpu_platform.cluster.names import local_queue_name

    lanes = {local_queue_name(n): n for n, lane in policy.lanes.items() if lane.admission_fair_sharing is not None}
    teams = {t.namespace: t.name for t in policy.teams.values()}
    out: dict[str, dict[str, dict[str, float]]] = {}
    for lq in local_queues:
        meta = lq.get("metadata") or {}
        lane, team = lanes.get(meta.get("name", "")), teams.get(meta.get("namespace", ""))
        if lane is None or team is None:
            continue
        fs = ((lq.get("status") or {}).get("fairSharing") or {}).get("admissionFairSharingStatus") or {}
        consumed = fs.get("consumedResources") or {}
        usage: dict[str, float] = {}
        for resource, qty in consumed.items():
            try:
                usage[str(resource)] = float(parse_quantity(qty))
            except (ValueError, TypeError) as exc:
                raise ValueError(
                    f"LocalQueue {meta.get('namespace')}/{meta.get('name')}: status.fairSharing."
                    f"admissionFairSharingStatus.consumedResources.{resource}: {qty!r} is not a quantity ({exc})"
                ) from exc
        if usage:
            out.setdefault(lane, {})[team] = usage
    return out


def read_team_usage(
    policy: Any, kubeconfig: str = "", service_account_dir: str | Path = SERVICE_ACCOUNT_DIR, custom_api: Any = None
) -> dict[str, dict[str, dict[str, float]]]:
    """Each team's LocalQueue usage on the lanes with Admission Fair Sharing (`team_usage_of`),
    listed in the teams' namespaces ({} when no lane has it: nothing is read)."""
    if not any(lane.admission_fair_sharing is not None for lane in policy.lanes.values()):
        return {}
    if custom_api is None:
        from kubernetes import client

        custom_api = client.CustomObjectsApi(api_client(kubeconfig, service_account_dir))
    items: list[dict[str, Any]] = []
    for ns in sorted({t.namespace for t in policy.teams.values()}):
        items += custom_api.list_namespaced_custom_object(KUEUE_API_GROUP, KUEUE_API_VERSION, ns, "localqueues")["items"]
    return team_usage_of(items, policy)
