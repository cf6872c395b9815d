"""The admission sensor on the Kubernetes path: Kueue's word recorded each tick, one GPU step
per launched run, checkpoints on the work volume.

The cluster is the recorded-response API server of tests/k8s/fake_apiserver.py (no cluster where
the tests run), reached through a kubeconfig, as the sensor reaches a real one.
"""

from __future__ import annotations

import dagster as dg
import pytest

from gpu_platform.requests.ledger import Ledger
from resources.ledger import LedgerResource
from resources.policy import PolicyResource
from resources.settings import PlatformSettings
from tests.gate.helpers import tick
from tests.k8s.fake_apiserver import serve, server_tls, submit_recorded, tls_files, write_kubeconfig


@pytest.mark.parametrize("transport", ["http", "https-private-ca"])
def test_tick_records_kueue_states_and_launches_one_gpu_step(tmp_path, policy, transport) -> None:
    """Over HTTP, and over HTTPS with a private CA named in the kubeconfig (as kind and EKS
    write it): the sensor's read-back fills the cluster column either way."""
    ca, context = None, None
    if transport != "http":
        ca, cert, key = tls_files(tmp_path)
        context = server_tls(cert, key)
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    ledger = Ledger(url)
    submit_recorded(ledger, policy)
    (tmp_path / "dagster").mkdir()
    with serve(tls=context) as (server, seen), dg.instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:
        resources = {
            "ledger": LedgerResource(url=url),
            "policy": PolicyResource(),
            "settings": PlatformSettings(
                home=str(tmp_path / "home"),
                executor="k8s",
                work_root="/var/lib/gpu-platform/work",
                work_claim="gpu-platform-work",
                kubeconfig=str(write_kubeconfig(tmp_path / "kubeconfig", server, ca=ca)),
            ),
        }
        result = tick(instance, resources)
        assert any("/apis/kueue.x-k8s.io/v1beta2/namespaces/team-safety/workloads" in p for p in seen)
        states = {s.request_id: s for s in ledger.states()}
        assert states["req-20261201-77aa88bb99"].cluster["kueue_reason"] == "WorkloadPriorityClassNotFound"
        assert states["req-20261201-5a6b7c8d9e"].cluster["condition"] == "Preempted"
        assert states["req-20261201-3c4d5e6f70"].cluster_flavor == "a100-spot"
        # No runs exist yet: each admitted request is (re)launched under its run key.
        by_rid = {r.tags["gpu-platform/request-id"]: r for r in result.run_requests}
        release = by_rid["req-20261201-0c1d2e3f4a"].run_config["execution"]["config"]
        assert set(release["per_step_k8s_config"]) == {"released_model"}
        gpu_step = release["per_step_k8s_config"]["released_model"]
        assert gpu_step["container_config"]["resources"]["limits"]["nvidia.com/gpu"] == 1
        assert "resources" not in release["step_k8s_config"]["container_config"]
        volumes = gpu_step["pod_spec_config"]["volumes"]
        assert volumes == [{"name": "gpu-platform-work", "persistent_volume_claim": {"claim_name": "gpu-platform-work"}}]
        research = by_rid["req-20261201-5a6b7c8d9e"].run_config["execution"]["config"]
        assert research["per_step_k8s_config"]["training_run"]["job_metadata"]["labels"]["gpu-platform.io/attempt"] == "2"
        # A second tick with nothing new from the cluster records nothing more.
        tick(instance, resources)
        assert len([e for e in ledger.events() if e.event == "cluster"]) == 6


def test_tick_records_the_jobs_the_ledger_cannot_match(tmp_path, policy) -> None:
    """A Job still on the cluster for a request that has ended is recorded as such (for the
    bypass scorecard), once, by the sensor's own read-back."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    ledger = Ledger(url)
    submit_recorded(ledger, policy)
    ledger.record("req-20261201-9f8e7d6c5b", "failed", "ended by hand")
    (tmp_path / "dagster").mkdir()
    with serve() as (server, _seen), dg.instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:
        resources = {
            "ledger": LedgerResource(url=url),
            "policy": PolicyResource(),
            "settings": PlatformSettings(
                home=str(tmp_path / "home"),
                executor="k8s",
                kubeconfig=str(write_kubeconfig(tmp_path / "kubeconfig", server)),
            ),
        }
        tick(instance, resources)
        (row,) = ledger.unmatched()
        assert (row["request_id"], row["kind"]) == ("req-20261201-9f8e7d6c5b", "ended_request")
        assert row["why"] == "the request is failed in the ledger; its Job is still on the cluster"
        assert row["condition"] == "QuotaReserved" and row["kueue_reason"] == "Pending"
        tick(instance, resources)
        assert len(ledger.unmatched()) == 1
