"""Opt-in: the Kubernetes path on a real cluster with Kueue (`make test-cluster`, KUBECONFIG).

Applies `gpu-platform kueue export`, creates the rendered GPU Jobs of a contended mix of example
requests, and checks that Kueue admits the set the engine predicts, on the flavors it predicts,
and that the gate's read-back records it in a ledger. No GPU nodes are needed: Kueue admits on
quota; the admitted pods then stay Pending. How to run it on kind: docs/execution.md.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest

from gpu_platform.admission.engine import admit_until_stable
from gpu_platform.admission.kueue_export import kueue_manifests
from gpu_platform.admission.policy_view import PendingRequest, from_policy
from gpu_platform.cluster.jobs import resolve_flavor
from gpu_platform.cluster.names import KUEUE_API_GROUP, KUEUE_API_VERSION
from gpu_platform.cluster.readback import ledger_rows, read_cluster
from gpu_platform.requests.ledger import Ledger
from gpu_platform.requests.model import validate_request_file
from resources.k8s import render_job_manifest

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parents[2]
EX = ROOT / "examples" / "requests"
PLURAL = {
    "ResourceFlavor": "resourceflavors",
    "Cohort": "cohorts",
    "WorkloadPriorityClass": "workloadpriorityclasses",
    "ClusterQueue": "clusterqueues",
    "LocalQueue": "localqueues",
}
MIX = [  # (file, overrides): more H100 demand than the pool holds, borrowing across the cohort
    ("incident_response.yaml", {}),
    ("release_eval.yaml", {}),
    ("candidate_train.yaml", {}),
    ("candidate_train.yaml", {"candidate_id": "cand-b", "output_artifact_ids": ["model-b"]}),
    ("baseline_rebuild.yaml", {}),
    ("research_best_effort.yaml", {"gpu_type": "any", "gpu_count": 8}),
    ("labeler_batch.yaml", {}),
    ("map_semantic_batch.yaml", {}),
    ("platform_maintenance.yaml", {"gpu_type": "any"}),
    ("release_chain/released_model.yaml", {}),
]


@pytest.fixture(scope="module")
def kube():
    if not os.environ.get("KUBECONFIG"):
        message = "needs a Kubernetes cluster with Kueue; set KUBECONFIG and run: make test-cluster"
        if os.environ.get("GPU_PLATFORM_REQUIRE_CLUSTER"):
            pytest.fail(message)
        pytest.skip(message)
    from kubernetes import client, config

    config.load_kube_config()
    return client


def _apply(client, manifest: dict) -> None:
    from kubernetes.client.rest import ApiException

    api = client.CustomObjectsApi()
    plural = PLURAL[manifest["kind"]]
    ns = manifest["metadata"].get("namespace")
    try:
        if ns:
            api.create_namespaced_custom_object(KUEUE_API_GROUP, KUEUE_API_VERSION, ns, plural, manifest)
        else:
            api.create_cluster_custom_object(KUEUE_API_GROUP, KUEUE_API_VERSION, plural, manifest)
    except ApiException as exc:
        if exc.status != 409:
            raise
        name = manifest["metadata"]["name"]
        if ns:
            api.patch_namespaced_custom_object(KUEUE_API_GROUP, KUEUE_API_VERSION, ns, plural, name, manifest)
        else:
            api.patch_cluster_custom_object(KUEUE_API_GROUP, KUEUE_API_VERSION, plural, name, manifest)


def test_rendered_jobs_pass_server_dry_run(kube, k8s_policy, example_request) -> None:
    batch = kube.BatchV1Api()
    for path in sorted(EX.rglob("*.yaml")):
        req = example_request(path)
        manifest = render_job_manifest(req, resolve_flavor(req, k8s_policy).name, k8s_policy)
        _ensure_namespace(kube, manifest["metadata"]["namespace"])
        created = batch.create_namespaced_job(manifest["metadata"]["namespace"], manifest, dry_run="All")
        assert created.spec.suspend is True


def _ensure_namespace(client, ns: str) -> None:
    from kubernetes.client.rest import ApiException

    try:
        client.CoreV1Api().create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    except ApiException as exc:
        if exc.status != 409:
            raise


def test_kueue_admits_what_the_engine_predicts_and_the_gate_reads_it_back(kube, k8s_policy, tmp_path) -> None:
    policy = k8s_policy
    for team in policy.teams.values():
        _ensure_namespace(kube, team.namespace)
    for manifest in kueue_manifests(policy):
        _apply(kube, manifest)

    tag = uuid.uuid4().hex[:8]
    requests = []
    for i, (name, update) in enumerate(MIX):
        req = validate_request_file(EX / name, policy)
        requests.append(req.model_copy(update={"request_id": f"req-cluster-{tag}-{i:02d}", **update}))
    predicted = admit_until_stable(
        from_policy(policy, pending=[PendingRequest(r, float(i), r.request_id) for i, r in enumerate(requests)])
    )
    expected = {a.name: a.flavor for a in predicted.admitted}
    assert expected and predicted.pending, "the mix must contend"

    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    batch = kube.BatchV1Api()
    created = []
    # Hold every ClusterQueue while the Jobs are created, so Kueue sees the whole mix at once, in
    # creation order (timestamps have whole seconds), as the engine does.
    _hold(kube, policy, "Hold")
    try:
        for req in requests:
            ledger.submit(req)
            gate_flavor = expected.get(req.request_id)
            if gate_flavor:
                ledger.record(req.request_id, "admitted", "gate", flavor=gate_flavor)
            job = render_job_manifest(req, gate_flavor or _first_flavor(req, policy), policy)
            batch.create_namespaced_job(job["metadata"]["namespace"], job)
            created.append((job["metadata"]["namespace"], job["metadata"]["name"]))
            time.sleep(1.1)  # creation order = the engine's queue order
        _hold(kube, policy, "None")
        namespaces = sorted({ns for ns, _ in created})
        deadline = time.monotonic() + 120
        observed: dict[str, object] = {}
        while time.monotonic() < deadline:
            observed = {o.request_id: o for o in read_cluster(namespaces) if o.request_id.startswith(f"req-cluster-{tag}")}
            if len(observed) == len(requests) and all(o.condition != "NoWorkload" for o in observed.values()):
                settled = {rid for rid, o in observed.items() if o.condition in ("Admitted", "QuotaReserved") and o.status == "True"}
                if settled == set(expected):
                    break
            time.sleep(3)
        admitted = {rid: o.flavor for rid, o in observed.items() if o.condition == "Admitted" and o.status == "True"}
        assert admitted == expected, {rid: o.summary for rid, o in observed.items()}
        ledger.record_many(ledger_rows(ledger.states(), list(observed.values())))
        for rid, flavor in expected.items():
            state = ledger.state(rid)
            assert state.cluster["condition"] == "Admitted" and state.cluster_flavor == flavor
    finally:
        _hold(kube, policy, "None")
        for ns, name in created:
            batch.delete_namespaced_job(name, ns, propagation_policy="Background")


def _hold(client, policy, stop_policy: str) -> None:
    api = client.CustomObjectsApi()
    for m in kueue_manifests(policy):
        if m["kind"] == "ClusterQueue":
            body = {"spec": {"stopPolicy": stop_policy}}
            api.patch_cluster_custom_object(KUEUE_API_GROUP, KUEUE_API_VERSION, "clusterqueues", m["metadata"]["name"], body)


def _first_flavor(req, policy) -> str:
    return resolve_flavor(req, policy).name
