"""Opt-in: the Kubernetes path on a real cluster with Kueue (`make test-cluster`, KUBECONFIG).

Applies `gpu-platform kueue export` under the run's own names, creates the rendered GPU Jobs of a
contended mix of example requests, lets every ClusterQueue take work in one step, and checks that
Kueue ends with the set the engine's model of Kueue predicts (`schedule_until_stable`), on the
flavors it predicts, and that the gate's read-back records it in a ledger. Flavors without a
Topology need no GPU nodes (Kueue admits on quota; the admitted pods then stay Pending); the
topology-aware `h100-ondemand` needs nodes Kueue's TAS can place its Jobs on (its node labels,
its Topology's levels, allocatable `nvidia.com/gpu`). How to run it on kind: docs/execution.md.

The run touches nothing the cluster already holds: its names, objects and cleanup are
tests/k8s/cluster_run.py (tested without a cluster in tests/k8s/test_cluster_run.py). Everything
it created is deleted in the fixture's teardown, in dependency order, waiting for Kueue's
finalizers and clearing them on the run's own objects if they stay; the teardown fails the test
if anything carrying the run's label is left.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpu_platform.admission.kueue_export import kueue_manifests
from gpu_platform.cluster.jobs import resolve_flavor
from gpu_platform.cluster.names import KUEUE_API_GROUP, KUEUE_API_VERSION
from gpu_platform.cluster.readback import Observation, ledger_rows, read_cluster
from gpu_platform.requests.ledger import Ledger
from gpu_platform.requests.model import validate_request_file
from resources.k8s import render_job_manifest
from tests.k8s.cluster_run import (
    KUEUE_API,
    MIX,
    RUN_LABEL,
    Ref,
    RunNames,
    cleanup,
    in_policy_names,
    is_set_aside,
    kueue_prediction,
    ref_of,
    release_patch,
    run_job,
    run_manifests,
)

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parents[2]
EX = ROOT / "examples" / "requests"
WAIT_S = 120
GONE_S = 60


class Kube:
    """The run's view of the cluster: one ApiClient (cluster.client, the platform's one way to
    build it), the dynamic client over it, and what the run created."""

    def __init__(self, api: Any, names: RunNames):
        from kubernetes import client
        from kubernetes.dynamic import DynamicClient

        self.api = api
        self.dyn = DynamicClient(api)
        self.core = client.CoreV1Api(api)
        self.batch = client.BatchV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.names = names
        self.created: list[Ref] = []

    def resource(self, ref: Ref) -> Any:
        return self.dyn.resources.get(api_version=ref.api_version, kind=ref.kind)

    def create(self, manifest: dict[str, Any]) -> None:
        ref = ref_of(manifest)
        self.created.append(ref)  # before the call: a create that timed out may still have happened
        self.resource(ref).create(body=manifest, namespace=ref.namespace)

    def exists(self, ref: Ref) -> bool:
        from kubernetes.dynamic.exceptions import NotFoundError

        try:
            self.resource(ref).get(name=ref.name, namespace=ref.namespace)
            return True
        except NotFoundError:
            return False

    def delete(self, ref: Ref) -> None:
        from kubernetes.dynamic.exceptions import NotFoundError

        try:
            self.resource(ref).delete(name=ref.name, namespace=ref.namespace, body={"propagationPolicy": "Background"})
        except NotFoundError:
            pass

    def clear_finalizers(self, ref: Ref) -> None:
        from kubernetes.dynamic.exceptions import NotFoundError

        try:
            self.resource(ref).patch(
                name=ref.name,
                namespace=ref.namespace,
                body={"metadata": {"finalizers": None}},
                content_type="application/merge-patch+json",
            )
        except NotFoundError:
            pass

    def workloads(self) -> list[Ref]:
        from kubernetes.client.rest import ApiException

        try:
            items = self.custom.list_namespaced_custom_object(
                KUEUE_API_GROUP, KUEUE_API_VERSION, self.names.namespace, "workloads"
            )["items"]
        except ApiException as exc:
            if exc.status == 404:
                return []
            raise
        return [Ref(KUEUE_API, "Workload", w["metadata"]["name"], self.names.namespace) for w in items]

    def labelled(self, kind: str) -> list[dict[str, Any]]:
        api_version = {"Job": "batch/v1", "Namespace": "v1"}.get(kind, KUEUE_API)
        listed = self.resource(Ref(api_version, kind, "")).get(label_selector=f"{RUN_LABEL}={self.names.tag}")
        return [o.to_dict() for o in listed.items]

    def observe(self) -> list[Observation]:
        return read_cluster([self.names.namespace], self.batch, self.custom, self.core)


@pytest.fixture(scope="module")
def kube() -> Iterator[Kube]:
    kubeconfig = os.environ.get("KUBECONFIG", "")
    if not kubeconfig:
        message = "needs a Kubernetes cluster with Kueue; set KUBECONFIG and run: make test-cluster"
        if os.environ.get("GPU_PLATFORM_REQUIRE_CLUSTER"):
            pytest.fail(message)
        pytest.skip(message)
    from gpu_platform.cluster.client import api_client

    # One kubeconfig file is loaded as named; a KUBECONFIG list is left to the client's own merge.
    k = Kube(api_client(kubeconfig if os.pathsep not in kubeconfig else ""), RunNames.fresh())
    try:
        k.create(run_manifests([], k.names)[0])  # the run's Namespace (not released)
        yield k
    finally:
        _cleanup(k)


def _cleanup(k: Kube) -> None:
    """Everything the run created goes (`cluster_run.cleanup`); fail on any problem."""
    problems = cleanup(k, k.created, k.names, wait_s=GONE_S)
    assert not problems, problems


def test_rendered_jobs_pass_server_dry_run(kube: Kube, k8s_policy, example_request) -> None:
    for path in sorted(EX.rglob("*.yaml")):
        req = example_request(path)
        job = run_job(render_job_manifest(req, resolve_flavor(req, k8s_policy).name, k8s_policy), kube.names)
        created = kube.batch.create_namespaced_job(kube.names.namespace, job, dry_run="All")
        assert created.spec.suspend is True


def test_kueue_admits_what_the_engine_predicts_and_the_gate_reads_it_back(kube: Kube, k8s_policy, tmp_path) -> None:
    policy, names = k8s_policy, kube.names
    for manifest in run_manifests(kueue_manifests(policy), names)[1:]:
        kube.create(manifest)
    _wait_active(kube)

    requests = []
    for i, (name, update) in enumerate(MIX):
        req = validate_request_file(EX / name, policy)
        requests.append(req.model_copy(update={"request_id": f"req-cluster-{names.tag}-{i:02d}", **update}))
    expected, pending = kueue_prediction(policy, requests)
    assert expected and pending, "the mix must contend"

    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    for req in requests:
        ledger.submit(req)
        flavor = expected.get(req.request_id)
        if flavor:
            ledger.record(req.request_id, "admitted", "gate", flavor=flavor)
        job = run_job(render_job_manifest(req, flavor or resolve_flavor(req, policy).name, policy), names)
        kube.create(job)
        time.sleep(1.1)  # creation order = the engine's queue order (timestamps have whole seconds)

    # Every Job has its Workload, set aside by Kueue while the namespace is not released.
    _wait_for(kube, lambda obs: len(obs) == len(requests) and all(is_set_aside(o) for o in obs), "every Workload set aside")
    kube.core.patch_namespace(names.namespace, release_patch(names))

    def settled(obs: list[Observation]) -> bool:
        return _admitted(obs) == expected

    observed = _wait_for(kube, settled, "Kueue's admissions to match the prediction", twice=True)
    ledger.record_many(ledger_rows(ledger.states(), observed))
    for rid, flavor in expected.items():
        state = ledger.state(rid)
        assert state.cluster["condition"] == "Admitted" and state.cluster_flavor == flavor


def _admitted(obs: list[Observation]) -> dict[str, str | None]:
    return {o.request_id: o.flavor for o in obs if o.condition == "Admitted" and o.status == "True"}


def _wait_for(kube: Kube, ok, what: str, twice: bool = False) -> list[Observation]:
    """Poll the read-back (in the policy's names) until `ok` holds (on two polls in a row with
    `twice`: Kueue may admit a job and reclaim its quota a cycle later)."""
    deadline = time.monotonic() + WAIT_S
    obs: list[Observation] = []
    held = 0
    while time.monotonic() < deadline:
        obs = [in_policy_names(o, kube.names) for o in kube.observe()]
        held = held + 1 if ok(obs) else 0
        if held >= (2 if twice else 1):
            return obs
        time.sleep(3)
    pytest.fail(f"waited {WAIT_S} s for {what}: " + repr({o.request_id: o.summary for o in obs}))


def _wait_active(kube: Kube) -> None:
    deadline = time.monotonic() + WAIT_S
    cqs = [r for r in kube.created if r.kind == "ClusterQueue"]
    inactive: list[str] = []
    while time.monotonic() < deadline:
        inactive = []
        for ref in cqs:
            cq = kube.custom.get_cluster_custom_object(KUEUE_API_GROUP, KUEUE_API_VERSION, "clusterqueues", ref.name)
            conds = {c.get("type"): c.get("status") for c in (cq.get("status") or {}).get("conditions") or []}
            if conds.get("Active") != "True":
                inactive.append(ref.name)
        if not inactive:
            return
        time.sleep(2)
    pytest.fail(f"ClusterQueues not Active after {WAIT_S} s: {inactive}")
