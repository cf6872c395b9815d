"""The workload step of a multi-node request on a cluster: it creates the headless Service and the
Indexed Job, watches every pod, keeps every pod's log as evidence, fails naming the pod and exit
code, and deletes the Service.

The cluster is `tests/k8s/fake_cluster.py` (an API double that checks every object against the
Kubernetes schema and stands in for Kueue and the Job controller); the client is the real one:
dagster-k8s's `DagsterKubernetesClient` on `gpu_platform.cluster.client.api_client`, over HTTP.
The same launch on a real cluster: `test_gang_on_a_real_cluster` (`-m cluster`).
"""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg
import pytest

from assets.workloads import workload_assets
from gpu_platform.cluster.gang import GangFailed
from gpu_platform.cluster.jobs import KUEUE_QUEUE_NAME, rendezvous_service_for
from gpu_platform.cluster.names import gang_job_name
from gpu_platform.gate.tick import TAG_ATTEMPT, TAG_FLAVOR
from gpu_platform.lineage.graph import LineageStore
from gpu_platform.policy import load_policy
from gpu_platform.requests.ledger import Ledger
from gpu_platform.requests.model import validate_request_file
from resources.build import build_resources
from resources.k8s import kubernetes_client, launch_gang, render_gang_job
from resources.settings import PlatformSettings
from tests.k8s.fake_apiserver import write_kubeconfig
from tests.k8s.fake_cluster import FakeCluster, Script, serve

ROOT = Path(__file__).resolve().parents[2]
GANG = ROOT / "examples" / "distributed" / "candidate_train_2x8.yaml"
RID = "req-20261202-9a8b7c6d5e"


@pytest.fixture
def gang(k8s_policy):
    return validate_request_file(GANG, k8s_policy).model_copy(update={"request_id": RID})


def _launch(cluster: FakeCluster, tmp_path: Path, gang, policy, sleep=lambda _s: None):
    logs: dict[str, str] = {}
    with serve(cluster) as url:
        client = kubernetes_client(str(write_kubeconfig(tmp_path / "kubeconfig", url)))
        outcome = launch_gang(gang, "h100-ondemand", policy, attempt=1, client=client, poll_seconds=0,
                              on_pod_log=lambda end, text: logs.__setitem__(end.name, text), sleep=sleep)
    return outcome, logs


def test_a_gang_runs_to_completion_and_keeps_every_pods_log(tmp_path, gang, k8s_policy) -> None:
    cluster = FakeCluster(Script(ends={0: (0, "rank 0 aggregated 2 parts\n"), 1: (0, "rank 1 wrote its part\n")}))
    outcome, logs = _launch(cluster, tmp_path, gang, k8s_policy)
    name = gang_job_name(RID, 1)
    assert cluster.invalid == []
    assert [o["kind"] for o in cluster.created] == ["Service", "Job"]  # the Service first: rendezvous DNS
    service, job = cluster.created
    assert service["spec"]["clusterIP"] == "None" and job["metadata"]["name"] == name
    assert job["spec"]["completionMode"] == "Indexed" and job["spec"]["parallelism"] == 2
    assert job["metadata"]["labels"][KUEUE_QUEUE_NAME] == "candidate-train" and job["spec"]["suspend"] is True
    assert [p.index for p in outcome.pods] == [0, 1] and {p.phase for p in outcome.pods} == {"Succeeded"}
    assert sorted(logs.values()) == ["rank 0 aggregated 2 parts\n", "rank 1 wrote its part\n"]
    assert ("Service", "team-perception", name) in cluster.deleted  # cleaned up
    assert ("Job", "team-perception", name) not in cluster.deleted  # kept for the read-back


def test_a_failed_pod_fails_the_gang_naming_pod_and_exit_code(tmp_path, gang, k8s_policy) -> None:
    cluster = FakeCluster(Script(ends={1: (3, "CUDA error: out of memory\n")}))
    with pytest.raises(GangFailed) as err:
        _launch(cluster, tmp_path, gang, k8s_policy)
    name = gang_job_name(RID, 1)
    assert err.value.pod.startswith(f"{name}-1-") and err.value.index == 1 and err.value.exit_code == 3
    assert f"pod {err.value.pod} (index 1)" in str(err.value) and "exit code 3" in str(err.value)
    assert ("Service", "team-perception", name) in cluster.deleted


def test_a_terminated_run_stops_the_gang_and_keeps_the_logs(tmp_path, gang, k8s_policy) -> None:
    cluster = FakeCluster(Script(hold=True))
    calls = []

    def sleep(_s: float) -> None:
        calls.append(_s)
        if len(calls) == 3:  # admitted and running: now the run is terminated
            raise KeyboardInterrupt

    logs: dict[str, str] = {}
    with pytest.raises(KeyboardInterrupt), serve(cluster) as url:
        client = kubernetes_client(str(write_kubeconfig(tmp_path / "kubeconfig", url)))
        launch_gang(gang, "h100-ondemand", k8s_policy, attempt=1, client=client, poll_seconds=0,
                    on_pod_log=lambda end, text: logs.__setitem__(end.name, text), sleep=sleep)
    name = gang_job_name(RID, 1)
    kinds = [k for k, _, n in cluster.deleted if n.startswith(name)]
    assert kinds.count("Pod") == 2 and "Job" in kinds and "Service" in kinds
    assert len(logs) == 2 and set(logs.values()) == {"still running\n"}


def _platform(tmp_path: Path, url: str) -> tuple[Ledger, dict]:
    env = {"GPU_PLATFORM_HOME": str(tmp_path / "home")}
    resources = build_resources("test", env)
    resources["settings"] = PlatformSettings(
        home=str(tmp_path / "home"), executor="k8s", gang_poll_seconds=0.0,
        kubeconfig=str(write_kubeconfig(tmp_path / "kubeconfig", url)),
    )
    return Ledger(resources["ledger"].url), resources


@pytest.mark.parametrize("fail", [False, True], ids=["completes", "pod-fails"])
def test_the_training_run_step_launches_the_gang_on_the_cluster(tmp_path, fail) -> None:
    """The real asset in a real Dagster instance: the k8s settings send a 2 x 8 request to the
    gang launcher; pod logs land in the evidence store; a failed pod fails the step by name."""
    policy = load_policy()
    cluster = FakeCluster(Script(ends={1: (137, "killed\n")} if fail else {}))
    with serve(cluster) as url, dg.instance_for_test() as instance:
        ledger, resources = _platform(tmp_path, url)
        rid = ledger.submit(validate_request_file(GANG, policy))
        instance.add_dynamic_partitions("training_run_requests", [rid])
        result = dg.materialize(
            workload_assets, selection=dg.AssetSelection.assets("training_run"), partition_key=rid,
            instance=instance, resources=resources, raise_on_error=False,
            tags={TAG_ATTEMPT: "2", TAG_FLAVOR: "h100-ondemand"},
        )
    name = gang_job_name(rid, 2)
    job = next(o for o in cluster.created if o["kind"] == "Job")
    assert job["metadata"]["name"] == name
    env = {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["GPU_PLATFORM_CHECKPOINT_DIR"].endswith("/checkpoints/training_run")  # the step's env reaches the pods
    assert env["GPU_PLATFORM_OUTPUT_DIR"] and env["NNODES"] == "2"
    store = resources["evidence"].store()
    kept = [r for r in store.refs(rid) if r.kind == "log"]
    assert len(kept) == 2  # every pod's log, as evidence
    assert ("Service", "team-perception", name) in cluster.deleted
    (run,) = LineageStore(ledger.engine).runs(rid, "training_run")
    assert run.status == ("failed" if fail else "succeeded") and run.log_digest in {r.digest for r in kept}
    if fail:
        assert not result.success
        failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
        message = failure.event_specific_data.error.message
        assert f"pod {name}-1-" in message and "exit code 137" in message
    else:
        assert result.success
        md = result.asset_materializations_for_node("training_run")[0].metadata
        assert md["gang_job"].value == name and md["pods"].value == 2
        assert len(md["pod_logs"].value) == 2


@pytest.mark.cluster
def test_gang_on_a_real_cluster(tmp_path, gang, k8s_policy) -> None:
    """Opt-in: the launch and watch on a real API server and Job controller (not Kueue's
    admission, which tests/k8s/test_cluster.py covers): the gang's Job without its Kueue label,
    GPUs and flavor affinity, running `GPU_PLATFORM_TEST_GANG_IMAGE` (an image with `sh`, pinned
    by digest) in `GPU_PLATFORM_TEST_NAMESPACE` (default `default`)."""
    kubeconfig, image = os.environ.get("KUBECONFIG", ""), os.environ.get("GPU_PLATFORM_TEST_GANG_IMAGE", "")
    if not kubeconfig or not image:
        message = ("needs a Kubernetes cluster: set KUBECONFIG and GPU_PLATFORM_TEST_GANG_IMAGE "
                   "(e.g. busybox@sha256:...) and run: make test-cluster")
        if os.environ.get("GPU_PLATFORM_REQUIRE_CLUSTER"):
            pytest.fail(message)
        pytest.skip(message)
    from gpu_platform.cluster.gang import run_gang

    namespace = os.environ.get("GPU_PLATFORM_TEST_NAMESPACE", "default")
    req = gang.model_copy(update={"command": ["sh", "-c", "echo rank $NODE_RANK of $NNODES via $MASTER_ADDR"]})
    job = render_gang_job(req, "h100-ondemand", k8s_policy, attempt=1)
    job.metadata.namespace = namespace
    job.metadata.labels.pop(KUEUE_QUEUE_NAME, None)
    job.spec.suspend = False
    spec = job.spec.template.spec
    spec.affinity = None
    spec.containers[0].image = image
    spec.containers[0].resources = None
    service = rendezvous_service_for(req, k8s_policy, 1)
    service["metadata"]["namespace"] = namespace
    logs: dict[str, str] = {}
    outcome = run_gang(kubernetes_client(kubeconfig), service, job, poll_seconds=2,
                       on_pod_log=lambda end, text: logs.__setitem__(end.name, text))
    try:
        assert [p.index for p in outcome.pods] == [0, 1]
        assert sorted(t.split(" of ")[0] for t in logs.values()) == ["rank 0", "rank 1"]
    finally:
        kubernetes_client(kubeconfig).delete_job(job.metadata.name, namespace)
