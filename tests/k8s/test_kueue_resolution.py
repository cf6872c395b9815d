"""Every rendered Job resolves against the exported Kueue objects the way Kueue resolves it.

The export and the Job labels come from one naming module (`gpu_platform.cluster.names`); this
test builds both from the default policy, for every example request, and follows each Job's
labels as Kueue does (`kueue_resolve`): LocalQueue in the Job's namespace -> ClusterQueue,
WorkloadPriorityClass by name, and a flavor of the ClusterQueue with quota that passes Kueue's
Topology Aware Scheduling check for the pod template's annotation and whose node labels and taints
the pod template matches. `tests/k8s/test_examples_admitted.py` checks the engine's flavor.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpu_platform.admission.kueue_export import kueue_manifests
from gpu_platform.cluster.jobs import (
    KUEUE_PRIORITY_CLASS,
    TAS_PREFERRED,
    TAS_UNCONSTRAINED,
    accepted_flavors,
    resolve_flavor,
)
from gpu_platform.cluster.names import is_dns_label, priority_class_name
from resources.k8s import render_job_manifest, render_workload_manifests
from tests.k8s.kueue_resolve import KueueRefusal, admit_on, pod_matches_labels, resolve, tolerates

ROOT = Path(__file__).resolve().parents[2]
ALL_EXAMPLES = sorted((ROOT / "examples" / "requests").rglob("*.yaml"))
SERVICES = [p for p in ALL_EXAMPLES if "service" in (yaml.safe_load(p.read_text()) or {})]
EXAMPLES = [p for p in ALL_EXAMPLES if p not in SERVICES]
"""The examples that run as Jobs; a service runs as a Deployment (test_service_pods_resolve_against_the_export)."""


@pytest.fixture(scope="module")
def exported(k8s_policy):
    return kueue_manifests(k8s_policy)


def _by_kind(objects, kind):
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def test_all_fifteen_examples_are_covered() -> None:
    # One per lane (the serving lane's a service), four in the release chain, a MIG slice and a shared replica.
    assert len(ALL_EXAMPLES) == 15 and len(SERVICES) == 1


@pytest.mark.parametrize("path", SERVICES, ids=[p.stem for p in SERVICES])
def test_service_pods_resolve_against_the_export(path: Path, k8s_policy, example_request, exported) -> None:
    """Kueue's pod integration reads the Deployment's queue and its pods' priority class: both
    exist in the export, and the pods may land only on the serving lane's flavor."""
    from gpu_platform.cluster.services import service_manifests

    req = example_request(path)
    deployment = service_manifests(req, k8s_policy)[0]
    res = resolve(deployment, exported)
    assert res.cluster_queue["metadata"]["name"] == "online-serving"
    assert res.priority_class["value"] == k8s_policy.lane(req.lane).priority
    assert res.flavors == ["l4-inference"]
    pod_view = {**deployment, "metadata": {**deployment["metadata"], "labels": deployment["spec"]["template"]["metadata"]["labels"]}}
    assert resolve(pod_view, exported).flavors == ["l4-inference"]


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_job_resolves_against_the_export(path: Path, k8s_policy, example_request, exported) -> None:
    req = example_request(path)
    gate_flavor = resolve_flavor(req, k8s_policy).name
    job = render_job_manifest(req, gate_flavor, k8s_policy)
    res = resolve(job, exported)

    lane = k8s_policy.lane(req.lane)
    assert res.cluster_queue["metadata"]["annotations"]["gpu-platform.io/lane"] == req.lane
    assert res.priority_class["value"] == lane.priority
    # Kueue may use exactly the flavors the request accepts of the gate flavor's kind (its TAS
    # annotation's): the gate's among them, none pinned.
    assert res.flavors == [f.name for f in accepted_flavors(req, k8s_policy, gate_flavor)]
    assert gate_flavor in res.flavors
    flavors = _by_kind(exported, "ResourceFlavor")
    pod = job["spec"]["template"]["spec"]
    assert "nodeSelector" not in pod and not pod.get("tolerations"), "the flavor is Kueue's to inject"
    for name in res.flavors:
        # After admission Kueue injects the flavor's node labels and tolerations: the pod then
        # schedules on that flavor's nodes (their labels, their taints).
        admitted_pod = admit_on(job, flavors[name])
        assert pod_matches_labels(admitted_pod, flavors[name]["spec"]["nodeLabels"])
        node_taints = [t.model_dump(exclude_none=True) for t in k8s_policy.flavor(name).taints]
        assert tolerates(admitted_pod, node_taints)
        assert node_taints and not tolerates(pod, node_taints)
    # Flavors of the resource groups the Job asks from (a MIG or shared flavor sits in a group of
    # its own resources, which a whole-GPU Job never asks for).
    requested = {r for c in pod["containers"] for r in (c.get("resources") or {}).get("requests") or {}}
    lane_flavors = [
        f["name"]
        for g in res.cluster_queue["spec"]["resourceGroups"]
        if set(g["coveredResources"]) & requested
        for f in g["flavors"]
    ]
    keys = {k for f in flavors.values() for k in f["spec"]["nodeLabels"]}
    for name in set(lane_flavors) - set(res.flavors):
        tas_refused = "TopologyAwareScheduling" in res.refused[name]
        assert tas_refused or not pod_matches_labels(pod, flavors[name]["spec"]["nodeLabels"], keys), (
            f"{name} not ruled out"
        )


def test_any_gpu_type_may_use_every_borrowing_flavor_of_its_kind(k8s_policy, example_request, exported) -> None:
    """Two observed failures: a pinned nodeSelector ruled out a lane's borrowing flavors; and, with
    every flavor accepted and no topology annotation, Kueue v0.20 refused the topology-aware H100s
    (`supports only TopologyAwareScheduling`) and put the Job on an L4 while the gate chose an H100.
    The Job now accepts the lane's flavors of the gate flavor's kind, annotated for that kind."""
    req = example_request(ROOT / "examples" / "requests" / "platform_maintenance.yaml").model_copy(
        update={"gpu_type": "any"}
    )
    on_h100 = render_job_manifest(req, "h100-ondemand", k8s_policy)
    assert "nodeSelector" not in on_h100["spec"]["template"]["spec"]
    res = resolve(on_h100, exported)
    assert res.topology_request == ("unconstrained", None)
    assert res.flavors == ["h100-ondemand"]
    assert res.refused == {
        "l4-inference": 'Flavor "l4-inference" does not support TopologyAwareScheduling',
        "a100-spot": 'Flavor "a100-spot" does not support TopologyAwareScheduling',
    }
    on_l4 = render_job_manifest(req, "l4-inference", k8s_policy)
    res = resolve(on_l4, exported)
    assert res.topology_request is None
    assert res.flavors == ["l4-inference", "a100-spot"]
    assert res.refused == {"h100-ondemand": 'Flavor "h100-ondemand" supports only TopologyAwareScheduling'}


def test_a_job_without_topology_annotation_is_refused_the_h100s_as_kueue_v020_refused_it(
    k8s_policy, example_request, exported
) -> None:
    """What the cluster said about the Jobs rendered before (no annotation, every flavor accepted):
    `QuotaReserved=False NoMatchingFlavor` for an H100 Job of a lane that also holds L4 quota."""
    req = example_request(ROOT / "examples" / "requests" / "release_eval.yaml")
    job = render_job_manifest(req, "h100-ondemand", k8s_policy)
    del job["spec"]["template"]["metadata"]["annotations"][TAS_UNCONSTRAINED]
    res = resolve(job, exported)
    assert res.flavors == []
    assert res.no_matching_flavor() == (
        "couldn't assign flavors to pod set main: "
        'Flavor "h100-ondemand" supports only TopologyAwareScheduling, '
        "flavor l4-inference doesn't match node affinity"
    )
    with pytest.raises(KueueRefusal, match="supports only TopologyAwareScheduling"):
        res.admits_on("h100-ondemand")
    # incident_response holds only H100s: a TAS-only ClusterQueue, where TAS is implied
    inc = example_request(ROOT / "examples" / "requests" / "incident_response.yaml")
    job = render_job_manifest(inc, "h100-ondemand", k8s_policy)
    del job["spec"]["template"]["metadata"]["annotations"][TAS_UNCONSTRAINED]
    assert resolve(job, exported).flavors == ["h100-ondemand"]


def test_a_topology_level_the_flavor_lacks_is_refused(k8s_policy, example_request, exported) -> None:
    req = example_request(ROOT / "examples" / "distributed" / "candidate_train_2x8.yaml")
    (_svc, job) = render_workload_manifests(req, "h100-ondemand", k8s_policy)
    annotations = job["spec"]["template"]["metadata"]["annotations"]
    assert annotations[TAS_PREFERRED] == "topology.kubernetes.io/zone"
    assert resolve(job, exported).flavors == ["h100-ondemand"]
    annotations[TAS_PREFERRED] = "cloud.provider.com/rack"
    res = resolve(job, exported)
    assert res.flavors == [] and res.refused["h100-ondemand"] == 'Flavor "h100-ondemand" does not contain the requested level'
    annotations[TAS_UNCONSTRAINED] = "true"
    with pytest.raises(KueueRefusal, match="one topology annotation per PodSet"):
        resolve(job, exported)


def test_the_old_label_names_would_be_refused(k8s_policy, example_request, exported) -> None:
    """What the cluster did before the names were shared: no Workload, `WorkloadPriorityClassNotFound`."""
    req = example_request(ROOT / "examples" / "requests" / "candidate_train.yaml")
    job = render_job_manifest(req, "h100-ondemand", k8s_policy)
    assert job["metadata"]["labels"][KUEUE_PRIORITY_CLASS] == priority_class_name("candidate_train")
    job["metadata"]["labels"][KUEUE_PRIORITY_CLASS] = "candidate-train"
    with pytest.raises(KueueRefusal, match='WorkloadPriorityClassNotFound: WorkloadPriorityClass "candidate-train"'):
        resolve(job, exported)
    job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "candidate_train"
    with pytest.raises(KueueRefusal, match="LocalQueueDoesNotExist"):
        resolve(job, exported)


def test_job_names_are_unique_dns_labels_per_request_attempt_and_step(k8s_policy, example_request) -> None:
    names = {}
    for path in EXAMPLES:
        req = example_request(path)
        flavor = resolve_flavor(req, k8s_policy).name
        for attempt in (1, 2):
            for step in (req.workload, "evidence_pack_lineage_complete"):
                name = render_job_manifest(req, flavor, k8s_policy, step, attempt=attempt)["metadata"]["name"]
                assert is_dns_label(name), name
                assert name not in names, f"{name} for {req.request_id}#{attempt}/{step} and {names[name]}"
                names[name] = f"{req.request_id}#{attempt}/{step}"
    assert len(names) == len(EXAMPLES) * 4


def test_every_exported_local_queue_and_class_is_reachable_from_some_lane(k8s_policy, exported) -> None:
    wpcs = _by_kind(exported, "WorkloadPriorityClass")
    assert set(wpcs) == {priority_class_name(lane) for lane in k8s_policy.lanes}
    lqs = [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in exported if o["kind"] == "LocalQueue"]
    assert len(lqs) == len(k8s_policy.lanes) * len(k8s_policy.teams)
