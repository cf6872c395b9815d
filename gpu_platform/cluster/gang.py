"""Launch and watch a multi-node request's Indexed Job: what the workload step of a gang does.

Dagster-free: `run_gang` talks to the cluster through `client`, an object with the methods of
dagster-k8s's `DagsterKubernetesClient` that the k8s executor uses for its own step Jobs
(`create_namespaced_job_with_retries`, `get_job_status`, `get_pods_in_job`, `retrieve_pod_logs`,
`delete_job`, and `core_api` for the Service); `resources/k8s.py` builds it on the platform's
one API client (`gpu_platform.cluster.client.api_client`).

What it does, in order:
1. creates the headless rendezvous Service, then the Indexed Job (suspended: Kueue admits it as
   one Workload and resumes it); an object that already exists (a retried step of the same
   attempt) is taken over, not duplicated;
2. polls the Job and its pods (`job-name=<job>`, the label the Job controller puts on its pods)
   every `poll_seconds`; each pod's log is read once the pod has ended (or when the watch stops)
   and handed to `on_pod_log`, so every pod's log is kept, also those of a gang Kueue evicted;
3. returns when the Job is Complete (every index succeeded); raises `GangFailed` naming the pod,
   its completion index and exit code as soon as any pod fails (the Job has `backoffLimit: 0`,
   so Kubernetes fails the Job and stops its other pods), or with the Job's own reason when it
   fails without a failed pod (`DeadlineExceeded`);
4. always deletes the Service; on an interrupt (the run terminated: preemption, a cancel) also
   deletes the Job and its pods, so no GPU keeps running for a run that is gone. A failed or
   completed Job stays for the gate's read-back and for `kubectl describe`.

A Job that Kueue suspends again after starting (an eviction, `waitForPodsReady` timeout) is not a
failure here: its pods are stopped (their logs kept), and the watch goes on until Kueue admits it
again or the run is terminated; the gate reads the eviction back into the ledger.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"


class GangFailed(Exception):
    """The gang failed: `pod` (its completion `index`) ended with `exit_code`, or the Job failed
    with `reason` (pod and exit code None)."""

    def __init__(self, message: str, pod: str | None = None, index: int | None = None,
                 exit_code: int | None = None, reason: str = ""):
        super().__init__(message)
        self.pod, self.index, self.exit_code, self.reason = pod, index, exit_code, reason


@dataclass
class PodEnd:
    """How one pod ended: its phase, completion index, exit code (first terminated container) and reason."""

    name: str
    index: int | None
    phase: str
    exit_code: int | None
    reason: str = ""


@dataclass
class GangOutcome:
    """A completed gang: every pod's end, in completion-index order, and the watch's polls."""

    job_name: str
    pods: list[PodEnd] = field(default_factory=list)
    polls: int = 0


def _get(obj: Any, name: str, default: Any = None) -> Any:
    if obj is None:
        return default
    if isinstance(obj, Mapping):
        return obj.get(name, default)
    return getattr(obj, name, default)


def pod_index(pod: Any) -> int | None:
    """A pod's completion index (the Job controller's annotation, else its label), None if absent."""
    meta = _get(pod, "metadata")
    raw = (_get(meta, "annotations") or {}).get(COMPLETION_INDEX_LABEL) or (_get(meta, "labels") or {}).get(
        COMPLETION_INDEX_LABEL
    )
    return int(raw) if raw is not None and str(raw).isdigit() else None


def pod_end(pod: Any) -> PodEnd | None:
    """How a pod ended, or None while it has not (Pending, Running). A pod whose container
    terminated with a non-zero code counts as failed even before its phase says so."""
    meta, status = _get(pod, "metadata"), _get(pod, "status")
    name, index = _get(meta, "name", ""), pod_index(pod)
    phase = _get(status, "phase", "") or ""
    exit_code, reason = None, _get(status, "reason", "") or ""
    for cs in _get(status, "container_statuses") or []:
        terminated = _get(_get(cs, "state"), "terminated")
        if terminated is not None:
            exit_code = _get(terminated, "exit_code")
            reason = reason or _get(terminated, "reason", "") or ""
            if exit_code not in (None, 0):
                return PodEnd(name, index, "Failed", exit_code, reason)
            break
    if phase in ("Succeeded", "Failed"):
        return PodEnd(name, index, phase, exit_code, reason)
    return None


def _condition(status: Any, kind: str) -> Any:
    for c in _get(status, "conditions") or []:
        if _get(c, "type") == kind and str(_get(c, "status")) == "True":
            return c
    return None


def _is_conflict(exc: BaseException) -> bool:
    return getattr(exc, "status", None) == 409


def _delete_service(core_api: Any, name: str, namespace: str, log: Callable[[str], None]) -> None:
    try:
        core_api.delete_namespaced_service(name=name, namespace=namespace)
    except Exception as exc:  # never hide why the gang ended; a Service left behind is harmless
        if getattr(exc, "status", None) != 404:
            log(f"could not delete Service {namespace}/{name}: {exc}")


def run_gang(
    client: Any,
    service: Mapping[str, Any],
    job: Any,
    *,
    on_pod_log: Callable[[PodEnd, str], None],
    log: Callable[[str], None] = lambda _m: None,
    poll_seconds: float = 10.0,
    sleep: Callable[[float], None] = time.sleep,
) -> GangOutcome:
    """Create `service` (a manifest) and `job` (a `V1Job`), watch until the Job completes.

    Raises GangFailed when a pod or the Job fails. See the module docstring for the rules."""
    namespace = service["metadata"]["namespace"]
    service_name = service["metadata"]["name"]
    name = job.metadata.name
    completions = int(job.spec.completions or 1)
    try:
        client.core_api.create_namespaced_service(namespace=namespace, body=dict(service))
        log(f"created headless Service {namespace}/{service_name}")
    except Exception as exc:
        if not _is_conflict(exc):
            raise
        log(f"Service {namespace}/{service_name} exists: reusing it")
    logged: dict[str, PodEnd] = {}
    outcome = GangOutcome(name)
    try:
        try:
            client.create_namespaced_job_with_retries(body=job, namespace=namespace)
            log(f"created Indexed Job {namespace}/{name}: {completions} pods, suspended until Kueue admits it")
        except Exception as exc:
            if not _is_conflict(exc):
                raise
            log(f"Job {namespace}/{name} exists: watching it")
        started = False
        while True:
            outcome.polls += 1
            status = client.get_job_status(name, namespace)
            if status is None:
                raise GangFailed(f"Job {namespace}/{name} is gone (deleted outside this step)", reason="JobDeleted")
            pods = client.get_pods_in_job(name, namespace)
            failed: PodEnd | None = None
            for pod in pods:
                end = pod_end(pod)
                if end is None:
                    continue
                if end.name not in logged:
                    logged[end.name] = end
                    _keep_log(client, end, namespace, on_pod_log, log)
                if end.phase == "Failed" and failed is None:
                    failed = end
            suspended = _condition(status, "Suspended") is not None
            if failed is not None and not suspended:
                raise GangFailed(
                    f"pod {failed.name} (index {failed.index}) of Job {namespace}/{name} failed with exit code "
                    f"{failed.exit_code}" + (f" ({failed.reason})" if failed.reason else ""),
                    pod=failed.name, index=failed.index, exit_code=failed.exit_code, reason=failed.reason,
                )
            if _condition(status, "Complete") is not None or int(_get(status, "succeeded") or 0) >= completions:
                outcome.pods = sorted(logged.values(), key=lambda e: (e.index is None, e.index or 0, e.name))
                return outcome
            job_failed = _condition(status, "Failed")
            if job_failed is not None:
                reason = _get(job_failed, "reason", "") or "Failed"
                raise GangFailed(
                    f"Job {namespace}/{name} failed: {reason}: {_get(job_failed, 'message', '') or ''}".rstrip(": "),
                    reason=reason,
                )
            active = int(_get(status, "active") or 0)
            if active and not started:
                started = True
                log(f"Job {namespace}/{name} admitted: {active} of {completions} pods active")
            elif started and suspended:
                started = False
                log(f"Job {namespace}/{name} suspended again by Kueue (evicted): waiting until it is readmitted")
            sleep(poll_seconds)
    except BaseException as exc:
        if not isinstance(exc, Exception):  # the run is being terminated: stop the gang's pods
            _stop(client, name, namespace, logged, on_pod_log, log)
        raise
    finally:
        _delete_service(client.core_api, service_name, namespace, log)


def _keep_log(client: Any, end: PodEnd, namespace: str, on_pod_log: Callable[[PodEnd, str], None],
              log: Callable[[str], None]) -> None:
    try:
        text = client.retrieve_pod_logs(end.name, namespace)
    except Exception as exc:  # a pod already garbage-collected: say so in place of its log
        text = f"(log of pod {end.name} could not be read: {exc})\n"
        log(text.strip())
    on_pod_log(end, text)


def _stop(client: Any, name: str, namespace: str, logged: dict[str, PodEnd],
          on_pod_log: Callable[[PodEnd, str], None], log: Callable[[str], None]) -> None:
    """Keep the logs of the pods still running, then delete the Job and its pods."""
    try:
        for pod in client.get_pods_in_job(name, namespace):
            pod_name = _get(_get(pod, "metadata"), "name", "")
            if pod_name and pod_name not in logged:
                end = pod_end(pod) or PodEnd(pod_name, pod_index(pod), "Stopped", None, "RunTerminated")
                logged[pod_name] = end
                _keep_log(client, end, namespace, on_pod_log, log)
        client.delete_job(name, namespace)
        log(f"deleted Job {namespace}/{name} and its pods: the run was terminated")
    except Exception as exc:
        log(f"could not stop Job {namespace}/{name}: {exc}")
