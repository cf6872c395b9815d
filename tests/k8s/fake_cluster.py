"""A stateful Kubernetes API double for the gang step: Services, Jobs, their pods and pod logs.

Test double: there is no cluster where the tests run. It speaks the API server's HTTP paths, so
the real `kubernetes` client and dagster-k8s's `DagsterKubernetesClient` talk to it unchanged,
and it checks every object it is given against the Kubernetes schema (kubernetes-validate,
strict), as an API server would refuse an invalid one. In place of Kueue and the Job controller
it runs a script: a created Job stays suspended for `admit_after` status reads (queued in Kueue),
then gets one Running pod per completion index (labels `job-name` and
`batch.kubernetes.io/job-completion-index`, the index annotation, the Job's pod template); one
read later each pod ends with the exit code and log the script gives its index (default 0 and
"rank <i> done"). A failed pod fails the Job (`backoffLimit: 0`: condition Failed,
BackoffLimitExceeded) and stops the other pods, as the Job controller does. `hold=True` keeps the
pods running until the Job is deleted.

Everything it was sent is kept (`created`, `deleted`, `requests`) for the tests to assert on.
"""

from __future__ import annotations

import json
import re
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import kubernetes_validate

INDEX = "batch.kubernetes.io/job-completion-index"


@dataclass
class Script:
    """How the double's pods end: index -> (exit code, log text); admit_after: status reads
    before Kueue "admits" (resumes) the Job; hold: pods never end by themselves."""

    ends: dict[int, tuple[int, str]] = field(default_factory=dict)
    admit_after: int = 1
    hold: bool = False


@dataclass
class _JobState:
    manifest: dict[str, Any]
    reads: int = 0
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    logs: dict[str, str] = field(default_factory=dict)
    phase: str = "Suspended"  # Suspended -> Running -> Ended


class FakeCluster:
    def __init__(self, script: Script | None = None):
        self.script = script or Script()
        self.services: dict[tuple[str, str], dict[str, Any]] = {}
        self.jobs: dict[tuple[str, str], _JobState] = {}
        self.created: list[dict[str, Any]] = []
        self.deleted: list[tuple[str, str, str]] = []
        self.requests: list[str] = []
        self.invalid: list[str] = []
        self.orphans: list[_JobState] = []
        self.lock = threading.Lock()

    # the script standing in for Kueue and the Job controller --------------------------------

    def _advance(self, job: _JobState) -> None:
        job.reads += 1
        spec = job.manifest["spec"]
        name, ns = job.manifest["metadata"]["name"], job.manifest["metadata"]["namespace"]
        n = int(spec.get("completions") or 1)
        if job.phase == "Suspended" and job.reads > self.script.admit_after:
            job.phase = "Running"
            for i in range(n):
                pod_name = f"{name}-{i}-fake{i:02d}"
                template = job.manifest["spec"]["template"]
                meta = template.get("metadata") or {}
                job.pods[pod_name] = {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": pod_name,
                        "namespace": ns,
                        "labels": {**(meta.get("labels") or {}), "job-name": name,
                                   "batch.kubernetes.io/job-name": name, INDEX: str(i)},
                        "annotations": {**(meta.get("annotations") or {}), INDEX: str(i)},
                    },
                    "spec": {**template["spec"], "hostname": f"{name}-{i}"},
                    "status": {"phase": "Running", "containerStatuses": [self._cstatus(template, None)]},
                }
            return
        if job.phase == "Running" and not self.script.hold:
            failed = False
            for pod_name, pod in job.pods.items():
                i = int(pod["metadata"]["labels"][INDEX])
                code, text = self.script.ends.get(i, (0, f"rank {i} done\n"))
                job.logs[pod_name] = text
                pod["status"] = {
                    "phase": "Succeeded" if code == 0 else "Failed",
                    "containerStatuses": [self._cstatus(job.manifest["spec"]["template"], code)],
                }
                failed = failed or code != 0
            job.phase = "Ended"
            kind = "Failed" if failed else "Complete"
            job.manifest["status"] = {
                "conditions": [{"type": kind, "status": "True",
                                **({"reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"}
                                   if failed else {})}],
                "succeeded": 0 if failed else n,
                "failed": 1 if failed else 0,
            }
            return
        if job.phase == "Running":
            job.manifest["status"] = {"active": len(job.pods)}
            for pod_name in job.pods:
                job.logs.setdefault(pod_name, "still running\n")

    @staticmethod
    def _cstatus(template: dict[str, Any], code: int | None) -> dict[str, Any]:
        container = template["spec"]["containers"][0]
        state = {"running": {}} if code is None else {
            "terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error"}}
        return {"name": container["name"], "image": container.get("image", ""), "imageID": "", "ready": code is None,
                "restartCount": 0, "state": state}

    # HTTP ---------------------------------------------------------------------------------------

    def handle(self, method: str, path: str, body: dict[str, Any] | None) -> tuple[int, Any]:
        url = urlparse(path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        p = url.path
        with self.lock:
            self.requests.append(f"{method} {url.path}")
            if m := re.match(r"^/api/v1/namespaces/([^/]+)/services$", p):
                return self._create(self.services, m.group(1), body, lambda b: b)
            if m := re.match(r"^/apis/batch/v1/namespaces/([^/]+)/jobs$", p):
                return self._create(self.jobs, m.group(1), body, lambda b: _JobState(b))
            if m := re.match(r"^/api/v1/namespaces/([^/]+)/services/([^/]+)$", p):
                return self._delete(self.services, "Service", m.group(1), m.group(2))
            if m := re.match(r"^/apis/batch/v1/namespaces/([^/]+)/jobs/([^/]+)(/status)?$", p):
                key = (m.group(1), m.group(2))
                if method == "DELETE":  # the API's default for Jobs orphans their pods
                    if key in self.jobs:
                        self.orphans.append(self.jobs[key])
                    return self._delete(self.jobs, "Job", *key)
                job = self.jobs.get(key)
                if job is None:
                    return 404, _status(404, "NotFound")
                self._advance(job)
                return 200, {**job.manifest, "status": job.manifest.get("status") or (
                    {"conditions": [{"type": "Suspended", "status": "True", "reason": "JobSuspended"}]}
                    if job.phase == "Suspended" else {})}
            if m := re.match(r"^/api/v1/namespaces/([^/]+)/pods$", p):
                selector = query.get("labelSelector", "")
                k, _, v = selector.partition("=")
                pods = [pod for job in [*self.jobs.values(), *self.orphans] for pod in job.pods.values()
                        if pod["metadata"]["namespace"] == m.group(1) and pod["metadata"]["labels"].get(k) == v]
                return 200, {"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": pods}
            if m := re.match(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)/log$", p):
                for job in self.jobs.values():
                    if m.group(2) in job.logs:
                        return 200, job.logs[m.group(2)]
                return 404, _status(404, "NotFound")
            if (m := re.match(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)$", p)) and method == "DELETE":
                for job in [*self.jobs.values(), *self.orphans]:
                    if job.pods.pop(m.group(2), None) is not None:
                        self.deleted.append(("Pod", m.group(1), m.group(2)))
                        return 200, _status(200, "")
                return 404, _status(404, "NotFound")
        return 404, _status(404, "NotFound")

    def _create(self, table: dict, namespace: str, body: dict[str, Any] | None, make) -> tuple[int, Any]:
        assert body is not None
        try:
            kubernetes_validate.validate(body, kubernetes_validate.utils.latest_version(), strict=True)
        except Exception as exc:  # an API server refuses what its schema refuses
            self.invalid.append(f"{body.get('kind')}: {exc}")
            return 422, _status(422, "Invalid", str(exc))
        key = (namespace, body["metadata"]["name"])
        if key in table:
            return 409, _status(409, "AlreadyExists")
        body.setdefault("metadata", {})["namespace"] = namespace
        table[key] = make(body)
        self.created.append(body)
        return 201, body

    def _delete(self, table: dict, kind: str, namespace: str, name: str) -> tuple[int, Any]:
        if table.pop((namespace, name), None) is None:
            return 404, _status(404, "NotFound")
        self.deleted.append((kind, namespace, name))
        return 200, _status(200, "")


def _status(code: int, reason: str, message: str = "") -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Success" if code < 300 else "Failure",
            "reason": reason, "message": message, "code": code}


@contextmanager
def serve(cluster: FakeCluster):
    """The double's base URL, served on 127.0.0.1 for the test's duration."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def _do(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            code, out = cluster.handle(method, self.path, body)
            data = out.encode() if isinstance(out, str) else json.dumps(out).encode()
            self.send_response(code)
            self.send_header("Content-Type", "text/plain" if isinstance(out, str) else "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802
            self._do("GET")

        def do_POST(self) -> None:  # noqa: N802
            self._do("POST")

        def do_DELETE(self) -> None:  # noqa: N802
            self._do("DELETE")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
