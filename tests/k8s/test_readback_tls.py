"""Read-back over TLS with a private CA, as on kind, EKS or any in-cluster service account.

The recorded-response API server (`fake_apiserver`) serves HTTPS with a certificate signed by a
CA made for the test. The client must trust that CA from the kubeconfig's
`certificate-authority-data` or the service account's `ca.crt`: built before its configuration
was loaded, a `kubernetes` client keeps a connection pool without the CA and every call fails
certificate verification.
"""

from __future__ import annotations

import pytest
import urllib3
from kubernetes import client

from gpu_platform.cluster.client import ClusterConfigError, api_client
from gpu_platform.cluster.readback import read_kueue
from tests.k8s.fake_apiserver import FILES, serve, server_tls, tls_files, write_kubeconfig

NAMESPACES = ("team-perception", "team-platform", "team-safety")


@pytest.fixture
def tls(tmp_path):
    ca, cert, key = tls_files(tmp_path)
    return ca, server_tls(cert, key)


def test_read_kueue_trusts_the_kubeconfigs_private_ca(tmp_path, tls) -> None:
    ca, context = tls
    with serve(tls=context) as (url, seen):
        assert url.startswith("https://")
        found = read_kueue(NAMESPACES, str(write_kubeconfig(tmp_path / "kubeconfig", url, ca=ca)))
    assert {o.request_id for o in found} == set(FILES)
    assert any("/namespaces/team-safety/workloads" in p for p in seen)


def test_read_kueue_in_cluster_uses_the_service_accounts_ca_and_token(tmp_path, tls, monkeypatch) -> None:
    ca, context = tls
    sa = tmp_path / "serviceaccount"
    sa.mkdir()
    (sa / "ca.crt").write_bytes(ca.read_bytes())
    (sa / "token").write_text("recorded-token")
    with serve(tls=context) as (url, _seen):
        monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
        monkeypatch.setenv("KUBERNETES_SERVICE_PORT", url.rsplit(":", 1)[1])
        api = api_client("", service_account_dir=sa)
        assert api.configuration.get_api_key_with_prefix("BearerToken") == "bearer recorded-token"
        found = read_kueue(NAMESPACES, "", service_account_dir=sa)
    assert {o.request_id for o in found} == set(FILES)


def test_a_server_outside_the_trusted_ca_is_refused(tmp_path, tls) -> None:
    """No CA in the kubeconfig: verification fails (never falls back to an unverified connection)."""
    _ca, context = tls
    with serve(tls=context) as (url, _seen):
        with pytest.raises(urllib3.exceptions.MaxRetryError, match="CERTIFICATE_VERIFY_FAILED"):
            read_kueue(NAMESPACES, str(write_kubeconfig(tmp_path / "kubeconfig", url)))


def test_a_client_built_before_its_configuration_is_loaded_lacks_the_ca(tmp_path, tls) -> None:
    """Why `api_client` loads first: the same kubeconfig loaded into an existing client's
    configuration does not reach its connection pool."""
    from kubernetes import config

    ca, context = tls
    with serve(tls=context) as (url, _seen):
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", url, ca=ca)
        late = client.ApiClient(configuration=client.Configuration())
        config.load_kube_config(config_file=str(kubeconfig), client_configuration=late.configuration)
        with pytest.raises(urllib3.exceptions.MaxRetryError, match="CERTIFICATE_VERIFY_FAILED"):
            client.BatchV1Api(late).list_namespaced_job("team-safety")
        assert client.BatchV1Api(api_client(kubeconfig)).list_namespaced_job("team-safety").items


def test_no_configuration_at_all_says_what_was_tried(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(ClusterConfigError, match="in-cluster: .*kubeconfig: "):
        api_client("", service_account_dir=tmp_path / "no-sa")
