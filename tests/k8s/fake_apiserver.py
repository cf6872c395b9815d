"""A recorded-response Kubernetes API server for the read-back tests.

Test double: there is no cluster where the tests run. It serves the objects recorded in
`tests/fixtures/kueue-workloads/` at the paths the real API server uses, so the real
`kubernetes` client (and `kubernetes.config.load_kube_config`) talk HTTP to it unchanged. It
honours the two selectors the read-back sends (`labelSelector=<key>` exists, and
`fieldSelector=involvedObject.uid=<uid>`) and nothing else; it takes a JSON merge patch of a
Workload (the gate's priority boost) and answers the patched Workload from then on.
"""

from __future__ import annotations

import base64
import json
import re
import ssl
import threading
from contextlib import contextmanager
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

from gpu_platform.requests.ledger import Ledger
from gpu_platform.requests.model import validate_request_file

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "kueue-workloads"
FILES: dict[str, tuple] = {
    "req-20261201-a1b2c3d4e5": ("release_eval.yaml", 1, "h100-ondemand"),
    "req-20261201-9f8e7d6c5b": ("incident_response.yaml", 1, "h100-ondemand"),
    "req-20261201-0c1d2e3f4a": ("release_chain/released_model.yaml", 1, "l4-inference"),
    "req-20261201-5a6b7c8d9e": ("research_best_effort.yaml", 2, "h100-ondemand", {"gpu_type": "any"}),
    "req-20261201-77aa88bb99": ("candidate_train.yaml", 1, "h100-ondemand"),
    "req-20261201-3c4d5e6f70": ("platform_maintenance.yaml", 1, "h100-ondemand", {"gpu_type": "any"}),
}
"""Request id -> (example file, admissions, gate flavor, request overrides) of the recorded Jobs."""
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "requests"


def submit_recorded(led: Ledger, policy, at: datetime | None = None) -> None:
    """The recorded requests in the ledger, admitted as often as their Jobs' attempt says;
    `at`: when they were submitted (and admitted), default now."""
    for rid, (name, attempts, flavor, *update) in FILES.items():
        req = validate_request_file(EXAMPLES / name, policy).model_copy(update={"request_id": rid, **(update or [{}])[0]})
        led.submit(req, at=at)
        for attempt in range(1, attempts + 1):
            led.record(rid, "admitted", f"QuotaReserved on {flavor}", flavor=flavor, details={"attempt": attempt}, at=at)


_ROUTES = {
    re.compile(r"^/apis/batch/v1/namespaces/([^/]+)/jobs$"): ("jobs", "batch/v1", "JobList"),
    re.compile(r"^/apis/kueue\.x-k8s\.io/v1beta2/namespaces/([^/]+)/workloads$"): (
        "workloads",
        "kueue.x-k8s.io/v1beta2",
        "WorkloadList",
    ),
    re.compile(r"^/api/v1/namespaces/([^/]+)/events$"): ("events", "v1", "EventList"),
}


def recorded(kind: str, namespace: str, root: Path = FIXTURES) -> list[dict]:
    path = root / f"{kind}-{namespace}.json"
    return json.loads(path.read_text())["items"] if path.exists() else []


_WORKLOAD = re.compile(r"^/apis/kueue\.x-k8s\.io/v1beta2/namespaces/([^/]+)/workloads/([^/]+)$")


def _merge(target: dict, patch: dict) -> dict:
    """RFC 7386 JSON merge patch: `null` deletes a key, an object merges, anything else replaces."""
    out = dict(target)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


class _Handler(BaseHTTPRequestHandler):
    root: Path = FIXTURES
    requests: list[str]
    patched: dict[tuple[str, str], dict]
    """Workloads as patched since the server started ((namespace, name) -> object): a GET
    answers these in place of the recorded ones, as the API server would."""

    def log_message(self, *args) -> None:  # quiet
        pass

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        url = urlparse(self.path)
        self.requests.append(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        for pattern, (kind, api, list_kind) in _ROUTES.items():
            m = pattern.match(url.path)
            if not m:
                continue
            items = recorded(kind, m.group(1), self.root)
            if kind == "workloads":
                items = [self.patched.get((m.group(1), i["metadata"]["name"]), i) for i in items]
            if "labelSelector" in query:
                items = [i for i in items if query["labelSelector"] in (i["metadata"].get("labels") or {})]
            if query.get("fieldSelector", "").startswith("involvedObject.uid="):
                uid = query["fieldSelector"].split("=", 1)[1]
                items = [i for i in items if i["involvedObject"]["uid"] == uid]
            body = {"apiVersion": api, "kind": list_kind, "metadata": {"resourceVersion": "50000"}, "items": items}
            self._send(200, body)
            return
        self._send(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404})

    def do_PATCH(self) -> None:  # noqa: N802 (http.server's name)
        """A JSON merge patch of one recorded Workload (the only patch the gate sends: its
        priority boost annotation); another patch type is refused as the API server refuses a
        strategic merge patch of a custom resource (415)."""
        url = urlparse(self.path)
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        self.requests.append(f"PATCH {url.path} {json.dumps(body, sort_keys=True)}")
        if self.headers.get("Content-Type") != "application/merge-patch+json":
            self._send(415, {"kind": "Status", "status": "Failure", "reason": "UnsupportedMediaType", "code": 415})
            return
        m = _WORKLOAD.match(url.path)
        current = None
        if m:
            ns, name = m.groups()
            current = self.patched.get((ns, name)) or next(
                (i for i in recorded("workloads", ns, self.root) if i["metadata"]["name"] == name), None
            )
        if current is None:
            self._send(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404})
            return
        self.patched[m.groups()] = updated = _merge(current, body)
        self._send(200, updated)

    def _send(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@contextmanager
def serve(root: Path = FIXTURES, tls: ssl.SSLContext | None = None):
    """(base URL, list of request paths seen; a PATCH as `PATCH <path> <body>`) of a server
    answering from `root`; over HTTPS
    when `tls` (a server-side SSL context, see `tls_files`) is given."""
    seen: list[str] = []
    handler = type("Handler", (_Handler,), {"root": root, "requests": seen, "patched": {}})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"{'https' if tls else 'http'}://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def write_kubeconfig(path: Path, server: str, ca: Path | None = None) -> Path:
    """A kubeconfig for `server`; with `ca`, its `certificate-authority-data` (base64 PEM), as
    `kind` and EKS write it."""
    cluster: dict = {"server": server}
    if ca is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca.read_bytes()).decode()
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "recorded", "cluster": cluster}],
                "users": [{"name": "reader", "user": {"token": "recorded"}}],
                "contexts": [{"name": "recorded", "context": {"cluster": "recorded", "user": "reader"}}],
                "current-context": "recorded",
            }
        )
    )
    return path


def tls_files(directory: Path) -> tuple[Path, Path, Path]:
    """(CA certificate, server certificate, server key) as PEM files: a private CA, as kind, EKS
    and every in-cluster service account have, that signs a certificate for 127.0.0.1."""
    from datetime import UTC, datetime, timedelta
    from ipaddress import ip_address

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.now(UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "recorded-apiserver-ca")])
    ca = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                     crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5)).not_valid_after(now + timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = directory / "ca.crt", directory / "server.crt", directory / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return paths


def server_tls(cert: Path, key: Path) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return context
