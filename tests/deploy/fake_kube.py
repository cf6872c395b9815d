"""A Kubernetes API server double for `deploy check`, answering over HTTP as the real one does.

Test double: there is no cluster where the tests run. The real `kubernetes` client talks to it
unchanged (a kubeconfig from `tests.k8s.fake_apiserver.write_kubeconfig`). It answers the
requests `deploy check` sends, from a `Cluster` a test describes, with bodies in the API server's
shapes (objects and lists as `kubectl get -o json` prints them, `Status` objects for errors, with
the reason and code the API server uses):
- GET a CustomResourceDefinition: Kueue's own CRDs (tests/fixtures/kueue-crds, Kueue's files);
- GET the Kueue controller Deployment and its webhook configurations;
- GET a Namespace, the Nodes, a Secret;
- PATCH (server-side apply) with `dryRun=All`: the object validated against the Kubernetes schema
  (kubernetes-validate) or its Kueue CRD, answered 200 with the object, or 404 when its namespace
  or its CRD is missing, 422 `Invalid` when the schema refuses it, or, for Kueue objects while
  the webhook is down, the 500 `InternalError` the API server returns when it cannot call a
  webhook (message as it words it: `failed calling webhook ...: failed to call webhook: Post ...:
  dial tcp ...: connect: connection refused`). Nothing is stored;
- POST a SubjectAccessReview: decided from the Roles, ClusterRoles and bindings the cluster holds
  (RBAC's rule: a binding to the account names a role whose rule matches group, resource,
  subresource and verb).
"""

from __future__ import annotations

import json
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import kubernetes_validate
import yaml

from tests.admission.test_export import _validate as validate_kueue

CRDS = Path(__file__).resolve().parents[1] / "fixtures" / "kueue-crds"
WEBHOOK_DOWN = (
    'Internal error occurred: failed calling webhook "vclusterqueue.kb.io": failed to call webhook: Post '
    '"https://kueue-webhook-service.kueue-system.svc:443/validate-kueue-x-k8s-io-v1beta2-clusterqueue?timeout=10s": '
    "dial tcp 10.96.112.7:443: connect: connection refused"
)


_VALID: dict[str, str] = {}
"""Object (its JSON) -> the schema's complaint ("" = valid), so each object is validated once per session."""


def kueue_crds() -> dict[str, dict]:
    """name -> CRD, Kueue's own files."""
    out = {}
    for p in sorted(CRDS.glob("*.yaml")):
        crd = yaml.safe_load(p.read_text())
        out[crd["metadata"]["name"]] = crd
    return out


def kueue_deployment(tag: str = "v0.20.0", available: int = 1, args: tuple[str, ...] = ()) -> dict:
    """Kueue's controller; args: its container's arguments (e.g. `--feature-gates=PriorityBoost=true`)."""
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "kueue-controller-manager", "namespace": "kueue-system"},
        "spec": {"replicas": 1, "template": {"spec": {"containers": [
            {"name": "manager", "image": f"registry.k8s.io/kueue/kueue:{tag}",
             "args": ["--config=/controller_manager_config.yaml", "--zap-log-level=2", *args]}]}}},
        "status": {"replicas": 1, "availableReplicas": available, "readyReplicas": available},
    }


def node(name: str, labels: dict[str, str]) -> dict:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", **labels}},
            "status": {"allocatable": {"cpu": "96", "memory": "1000Gi", "nvidia.com/gpu": "8"}}}


@dataclass
class Cluster:
    """What the double's cluster holds. objects: applied objects (RBAC decides from them);
    secrets: (namespace, name) -> data keys."""

    crds: dict[str, dict] = field(default_factory=dict)
    deployments: list[dict] = field(default_factory=list)
    webhooks: tuple[str, ...] = ()
    webhook_down: bool = False
    namespaces: set[str] = field(default_factory=set)
    nodes: list[dict] = field(default_factory=list)
    objects: list[dict] = field(default_factory=list)
    secrets: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    requests: list[str] = field(default_factory=list)

    def allowed(self, user: str, attrs: dict[str, Any]) -> bool:
        _, _, rest = user.partition("system:serviceaccount:")
        sa_ns, _, sa = rest.partition(":")
        resource = attrs["resource"] + (f"/{attrs['subresource']}" if attrs.get("subresource") else "")
        ns = attrs.get("namespace")
        roles = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in self.objects
                 if o["kind"] in ("Role", "ClusterRole")}
        for b in self.objects:
            if b["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
                continue
            bns = b["metadata"].get("namespace")
            if b["kind"] == "RoleBinding" and bns != ns:
                continue
            if {"kind": "ServiceAccount", "name": sa, "namespace": sa_ns} not in b["subjects"]:
                continue
            ref = b["roleRef"]
            role = roles.get((ref["kind"], bns if ref["kind"] == "Role" else None, ref["name"]))
            for rule in (role or {}).get("rules", []):
                if (attrs.get("group", "") in rule["apiGroups"] and resource in rule["resources"]
                        and attrs["verb"] in rule["verbs"]):
                    return True
        return False


def _status(code: int, reason: str, message: str) -> dict:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}


class _Handler(BaseHTTPRequestHandler):
    cluster: Cluster

    def log_message(self, *args) -> None:  # quiet
        pass

    def _send(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> dict:
        return json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        c, path = self.cluster, urlparse(self.path).path
        c.requests.append(f"GET {path}")
        parts = path.strip("/").split("/")
        if path.startswith("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"):
            crd = c.crds.get(parts[-1])
            return self._send(200, crd) if crd else self._send(404, _status(404, "NotFound", f'customresourcedefinitions.apiextensions.k8s.io "{parts[-1]}" not found'))
        if path.startswith("/apis/apps/v1/namespaces/"):
            for d in c.deployments:
                if (d["metadata"]["namespace"], d["metadata"]["name"]) == (parts[4], parts[6]):
                    return self._send(200, d)
            return self._send(404, _status(404, "NotFound", f'deployments.apps "{parts[6]}" not found'))
        if path.startswith("/apis/admissionregistration.k8s.io/v1/"):
            if parts[-1] in c.webhooks:
                kind = "ValidatingWebhookConfiguration" if "validating" in parts[-2] else "MutatingWebhookConfiguration"
                return self._send(200, {"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
                                        "metadata": {"name": parts[-1]}, "webhooks": [{"name": "vclusterqueue.kb.io"}]})
            return self._send(404, _status(404, "NotFound", f'{parts[-2]}.admissionregistration.k8s.io "{parts[-1]}" not found'))
        if path == "/api/v1/nodes":
            return self._send(200, {"apiVersion": "v1", "kind": "NodeList", "metadata": {"resourceVersion": "1"}, "items": c.nodes})
        if len(parts) == 6 and parts[:3] == ["api", "v1", "namespaces"] and parts[4] == "secrets":
            keys = c.secrets.get((parts[3], parts[5]))
            if keys is None:
                return self._send(404, _status(404, "NotFound", f'secrets "{parts[5]}" not found'))
            return self._send(200, {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                                    "metadata": {"name": parts[5], "namespace": parts[3]}, "data": dict.fromkeys(keys, "eA==")})
        if len(parts) == 4 and parts[:3] == ["api", "v1", "namespaces"]:
            if parts[3] in c.namespaces:
                return self._send(200, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": parts[3]},
                                        "status": {"phase": "Active"}})
            return self._send(404, _status(404, "NotFound", f'namespaces "{parts[3]}" not found'))
        return self._send(404, _status(404, "NotFound", "the server could not find the requested resource"))

    def do_PATCH(self) -> None:  # noqa: N802
        c, url = self.cluster, urlparse(self.path)
        c.requests.append(f"PATCH {url.path}")
        query = parse_qs(url.query)
        assert query.get("dryRun") == ["All"], "deploy check sends only dry runs"
        assert self.headers["Content-Type"] == "application/apply-patch+yaml"
        obj = self._body()
        ns = obj["metadata"].get("namespace")
        if ns and ns not in c.namespaces:
            return self._send(404, _status(404, "NotFound", f'namespaces "{ns}" not found'))
        if obj["apiVersion"].startswith("kueue.x-k8s.io/"):
            if not any(crd["spec"]["names"]["kind"] == obj["kind"] for crd in c.crds.values()):
                return self._send(404, _status(404, "NotFound", "the server could not find the requested resource"))
            if c.webhook_down:
                return self._send(500, _status(500, "InternalError", WEBHOOK_DOWN))
            validate = validate_kueue
        else:
            def validate(o: dict) -> None:
                kubernetes_validate.validate(o, "1.31.0", strict=True)
        key = json.dumps(obj, sort_keys=True)
        if key not in _VALID:
            try:
                validate(obj)
                _VALID[key] = ""
            except Exception as exc:  # noqa: BLE001 (any schema error is the API server's 422)
                _VALID[key] = str(exc)
        if _VALID[key]:
            return self._send(422, _status(422, "Invalid", f'{obj["kind"]} "{obj["metadata"]["name"]}" is invalid: {_VALID[key]}'))
        return self._send(200, obj)

    def do_POST(self) -> None:  # noqa: N802
        c, path = self.cluster, urlparse(self.path).path
        c.requests.append(f"POST {path}")
        if path != "/apis/authorization.k8s.io/v1/subjectaccessreviews":
            return self._send(404, _status(404, "NotFound", "the server could not find the requested resource"))
        review = self._body()
        spec = review["spec"]
        allowed = c.allowed(spec["user"], spec["resourceAttributes"])
        status = {"allowed": allowed}
        if allowed:
            status["reason"] = "RBAC: allowed by a binding of the tree"
        return self._send(201, {**review, "status": status})


@contextmanager
def serve(cluster: Cluster):
    """The base URL of a server answering from `cluster`."""
    handler = type("Handler", (_Handler,), {"cluster": cluster})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
