"""One way to build a Kubernetes API client, for the sensor, the CLI and the tests.

The configuration is loaded first and the `ApiClient` built from it afterwards: `ApiClient`
creates its connection pool (CA bundle, client certificate) when it is constructed, so a
configuration loaded into an existing client's `configuration` never reaches the pool and every
TLS connection to a cluster with a private CA (kind, EKS, an in-cluster service account) fails
certificate verification.

Where the configuration comes from: a kubeconfig file when one is named; otherwise the pod's
in-cluster service account (`KUBERNETES_SERVICE_HOST` / `_PORT` and the token and CA under
`/var/run/secrets/kubernetes.io/serviceaccount/`), else `KUBECONFIG` / `~/.kube/config`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class ClusterConfigError(RuntimeError):
    """No cluster configuration could be loaded (the message says what was tried)."""


def load_configuration(kubeconfig: str | Path = "", service_account_dir: str | Path = SERVICE_ACCOUNT_DIR) -> Any:
    """A `kubernetes.client.Configuration` loaded from a kubeconfig file, else in-cluster, else
    `KUBECONFIG` / `~/.kube/config`."""
    from kubernetes import client, config
    from kubernetes.config.incluster_config import InClusterConfigLoader

    configuration = client.Configuration()
    if kubeconfig:
        config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
        return configuration
    sa = Path(service_account_dir)
    tried: list[str] = []
    try:
        InClusterConfigLoader(token_filename=str(sa / "token"), cert_filename=str(sa / "ca.crt")).load_and_set(
            configuration
        )
        return configuration
    except config.ConfigException as exc:
        tried.append(f"in-cluster: {exc}")
    try:
        config.load_kube_config(client_configuration=configuration)
        return configuration
    except (config.ConfigException, OSError) as exc:
        tried.append(f"kubeconfig: {exc}")
    raise ClusterConfigError("no Kubernetes configuration: " + "; ".join(tried))


def api_client(kubeconfig: str | Path = "", service_account_dir: str | Path = SERVICE_ACCOUNT_DIR) -> Any:
    """A `kubernetes.client.ApiClient` whose connection pool has the loaded CA and credentials."""
    from kubernetes import client

    return client.ApiClient(configuration=load_configuration(kubeconfig, service_account_dir))


def whoami(kubeconfig: str | Path = "") -> str:
    """The user name the API server authenticates these credentials as: a SelfSubjectReview,
    what `kubectl auth whoami` prints (Kubernetes 1.28+). Raises when the server cannot be asked."""
    from kubernetes import client

    with api_client(kubeconfig) as api:
        review = client.AuthenticationV1Api(api).create_self_subject_review(
            client.V1SelfSubjectReview(api_version="authentication.k8s.io/v1", kind="SelfSubjectReview")
        )
    user = getattr(getattr(review, "status", None), "user_info", None)
    return str(getattr(user, "username", "") or "")
