"""The cluster test's run without a cluster: its names collide with nothing the cluster holds,
its objects validate against Kueue's CRDs, every ClusterQueue takes work only from the released
namespace, cleanup covers everything created in dependency order (and, on an in-memory cluster
holding Kueue's finalizers, waits for them, clears what stays, reports what it cannot remove),
and the prediction is what the real cluster did with the default policy's contested H100s."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_platform.admission.kueue_export import kueue_manifests
from gpu_platform.cluster.jobs import resolve_flavor
from gpu_platform.cluster.names import ANNOTATION_GATE_FLAVOR, KUEUE_PRIORITY_CLASS, KUEUE_QUEUE_NAME
from gpu_platform.cluster.readback import Observation
from gpu_platform.requests.model import validate_request_file
from resources.k8s import render_job_manifest
from tests.admission.test_export import _validate as validate_kueue
from tests.k8s.cluster_run import (
    CLUSTER_SCOPED,
    DELETE_ORDER,
    MIX,
    RELEASE_LABEL,
    RUN_LABEL,
    Ref,
    RunNames,
    cleanup_plan,
    in_policy_names,
    kueue_prediction,
    leftovers,
    ref_of,
    release_patch,
    run_job,
    run_manifests,
)

EX = Path(__file__).resolve().parents[2] / "examples" / "requests"
NAMES = RunNames("3f2a9c1e")


def _mix(policy, tag: str = "t"):
    out = []
    for i, (name, update) in enumerate(MIX):
        req = validate_request_file(EX / name, policy)
        out.append(req.model_copy(update={"request_id": f"req-cluster-{tag}-{i:02d}", **update}))
    return out


def test_every_run_has_fresh_names() -> None:
    a, b = RunNames.fresh(), RunNames.fresh()
    assert a.tag != b.tag and len(a.tag) == 8
    assert NAMES.namespace == "gpu-platform-test-3f2a9c1e"
    assert NAMES.scoped("release-eval") == "release-eval-3f2a9c1e"
    assert NAMES.unscoped("release-eval-3f2a9c1e") == "release-eval"
    assert NAMES.unscoped("release-eval") == "release-eval"
    with pytest.raises(ValueError, match="DNS label"):
        NAMES.scoped("x" * 60)


def test_no_cluster_scoped_name_of_the_export_is_reused(k8s_policy) -> None:
    plain = kueue_manifests(k8s_policy)
    taken = {(m["kind"], m["metadata"]["name"]) for m in plain if "namespace" not in m["metadata"]}
    run = run_manifests(plain, NAMES)
    assert run[0]["kind"] == "Namespace" and run[0]["metadata"]["name"] == NAMES.namespace
    for m in run:
        meta = m["metadata"]
        assert meta["labels"][RUN_LABEL] == NAMES.tag
        assert (m["kind"], meta["name"]) not in taken
        if m["kind"] in CLUSTER_SCOPED:
            assert meta["name"].endswith("-3f2a9c1e")
        else:
            assert meta.get("namespace", NAMES.namespace) == NAMES.namespace or m["kind"] == "Namespace"
    # the export itself is left as it was
    assert kueue_manifests(k8s_policy) == plain


def test_run_objects_refer_to_each_other_and_validate(k8s_policy) -> None:
    run = run_manifests(kueue_manifests(k8s_policy), NAMES)
    by_kind: dict[str, dict[str, dict]] = {}
    for m in run:
        by_kind.setdefault(m["kind"], {})[m["metadata"]["name"]] = m
    lanes = set(k8s_policy.lanes)
    assert len(by_kind["ClusterQueue"]) == len(lanes)
    assert len(by_kind["LocalQueue"]) == len(lanes), "one LocalQueue per lane in the run's namespace"
    for cq in by_kind["ClusterQueue"].values():
        spec = cq["spec"]
        assert spec["namespaceSelector"] == {"matchLabels": {RELEASE_LABEL: NAMES.tag}}
        assert spec["cohortName"] in by_kind["Cohort"]
        for group in spec["resourceGroups"]:
            for f in group["flavors"]:
                assert f["name"] in by_kind["ResourceFlavor"]
    for co in by_kind["Cohort"].values():
        parent = co["spec"].get("parentName")
        assert parent is None or parent in by_kind["Cohort"]
        for group in co["spec"].get("resourceGroups") or []:
            for f in group["flavors"]:
                assert f["name"] in by_kind["ResourceFlavor"]
    for lq in by_kind["LocalQueue"].values():
        assert lq["spec"]["clusterQueue"] in by_kind["ClusterQueue"]
    for m in run[1:]:
        validate_kueue(m)


def test_a_jobs_kueue_labels_name_the_runs_objects(k8s_policy) -> None:
    run = run_manifests(kueue_manifests(k8s_policy), NAMES)
    local_queues = {m["metadata"]["name"] for m in run if m["kind"] == "LocalQueue"}
    classes = {m["metadata"]["name"] for m in run if m["kind"] == "WorkloadPriorityClass"}
    flavors = {m["metadata"]["name"] for m in run if m["kind"] == "ResourceFlavor"}
    for req in _mix(k8s_policy):
        plain = render_job_manifest(req, resolve_flavor(req, k8s_policy).name, k8s_policy)
        job = run_job(plain, NAMES)
        meta = job["metadata"]
        assert meta["namespace"] == NAMES.namespace and meta["labels"][RUN_LABEL] == NAMES.tag
        assert meta["labels"][KUEUE_QUEUE_NAME] in local_queues
        assert meta["labels"][KUEUE_PRIORITY_CLASS] in classes
        assert meta["annotations"][ANNOTATION_GATE_FLAVOR] in flavors
        assert plain["metadata"]["namespace"] != NAMES.namespace, "the rendered Job is not changed"


def test_release_is_one_namespace_update_that_every_queue_matches(k8s_policy) -> None:
    run = run_manifests(kueue_manifests(k8s_policy), NAMES)
    ns_labels = dict(run[0]["metadata"]["labels"])
    selectors = [m["spec"]["namespaceSelector"]["matchLabels"] for m in run if m["kind"] == "ClusterQueue"]

    def matches(labels: dict) -> list[bool]:
        return [all(labels.get(k) == v for k, v in sel.items()) for sel in selectors]

    assert not any(matches(ns_labels)), "no queue takes work before the release"
    released = {**ns_labels, **release_patch(NAMES)["metadata"]["labels"]}
    assert all(matches(released))
    assert not any(matches({**ns_labels, RELEASE_LABEL: "another-run"}))


def test_cleanup_deletes_everything_created_once_in_dependency_order(k8s_policy) -> None:
    run = run_manifests(kueue_manifests(k8s_policy), NAMES)
    jobs = [run_job(render_job_manifest(r, resolve_flavor(r, k8s_policy).name, k8s_policy), NAMES) for r in _mix(k8s_policy)]
    created = [ref_of(m) for m in run + jobs]
    plan = cleanup_plan(created + created[:3])  # a create retried is listed twice
    flat = [r for group in plan for r in group]
    assert sorted(flat, key=repr) == sorted(set(created), key=repr)
    kinds = [group[0].kind for group in plan]
    assert kinds == [k for k in DELETE_ORDER if k in kinds]
    assert all(len({r.kind for r in group}) == 1 for group in plan)
    assert kinds.index("Job") < kinds.index("LocalQueue") < kinds.index("ClusterQueue") < kinds.index("ResourceFlavor")
    assert kinds[-1] == "Namespace"
    with pytest.raises(ValueError, match="Secret"):
        cleanup_plan([Ref("v1", "Secret", "x", "ns")])


def test_leftovers_name_only_this_runs_objects() -> None:
    objs = [
        {"kind": "ClusterQueue", "metadata": {"name": "a-3f2a9c1e", "labels": {RUN_LABEL: NAMES.tag}}},
        {"kind": "ClusterQueue", "metadata": {"name": "release-eval", "labels": {}}},
        {"kind": "Job", "metadata": {"name": "j", "namespace": "n", "labels": {RUN_LABEL: "other"}}},
        {"kind": "LocalQueue", "metadata": {"name": "q", "namespace": NAMES.namespace, "labels": {RUN_LABEL: NAMES.tag}}},
    ]
    assert leftovers(objs, NAMES) == ["ClusterQueue/a-3f2a9c1e", f"LocalQueue/{NAMES.namespace}/q"]


def test_observations_are_read_in_the_policys_names() -> None:
    obs = Observation(
        "r", 1, NAMES.namespace, "j", "w", "Admitted", "True", "Admitted", "",
        flavor="h100-ondemand-3f2a9c1e", gate_flavor="h100-ondemand-3f2a9c1e", cluster_queue="candidate-train-3f2a9c1e",
    )  # fmt: skip
    got = in_policy_names(obs, NAMES)
    assert (got.flavor, got.gate_flavor, got.cluster_queue) == ("h100-ondemand", "h100-ondemand", "candidate-train")


def test_the_prediction_is_what_the_cluster_did_with_the_contested_h100s(k8s_policy) -> None:
    """Issue 25's run on a real Kueue: the second candidate_train job admitted, baseline_rebuild
    pending. The gate's single tick (admit_until_stable) had predicted the opposite, and the
    cluster test compared against it; tests/fixtures/admission/cluster-observed.yaml says why."""
    reqs = _mix(k8s_policy)
    by_file = {}
    for (name, _update), r in zip(MIX, reqs, strict=True):
        by_file.setdefault(name, []).append(r.request_id)
    admitted, pending = kueue_prediction(k8s_policy, reqs)
    cand_a, cand_b = by_file["candidate_train.yaml"]
    (baseline,) = by_file["baseline_rebuild.yaml"]
    assert admitted[cand_a] == admitted[cand_b] == "h100-ondemand"
    assert baseline not in admitted and baseline in pending
    assert set(admitted) | pending == {r.request_id for r in reqs}


class MemoryCluster:
    """The cluster as the cleanup sees it, in memory (no cluster where these tests run): objects by
    Ref with finalizers as Kueue sets them. A Job's deletion takes its Workload with it (garbage
    collection of owned objects); a ClusterQueue keeps Kueue's finalizer while a Workload exists, a
    ResourceFlavor while a ClusterQueue exists; `stuck` objects keep a finalizer nothing removes
    but `clear_finalizers`."""

    FINALIZER = "kueue.x-k8s.io/resource-in-use"

    def __init__(self, refs, workloads, names: RunNames, stuck=(), unkillable=(), foreign=()):
        self.objects = {r: {"deleting": False, "finalizers": set()} for r in [*refs, *workloads]}
        for r in stuck:
            self.objects[r]["finalizers"].add("example.com/stuck")
        self.unkillable = set(unkillable)
        self.wl = list(workloads)
        self.names = names
        self.foreign = list(foreign)  # someone else's objects: never touched
        self.deleted: list[Ref] = []
        self.now = 0.0

    def _settle(self) -> None:
        kinds = {r.kind for r in self.objects}
        for ref, o in list(self.objects.items()):
            if not o["deleting"]:
                continue
            blocked = set(o["finalizers"])
            if ref.kind == "ClusterQueue" and "Workload" in kinds:
                blocked.add(self.FINALIZER)
            if ref.kind == "ResourceFlavor" and "ClusterQueue" in kinds:
                blocked.add(self.FINALIZER)
            if ref in self.unkillable:
                blocked.add("kubernetes")
            if not blocked:
                del self.objects[ref]
                if ref.kind == "Job":
                    for w in self.wl:
                        if w in self.objects:
                            self.objects[w]["deleting"] = True

    def delete(self, ref):
        if ref in self.objects:
            self.objects[ref]["deleting"] = True
            self.deleted.append(ref)
        self._settle()

    def exists(self, ref):
        self._settle()
        return ref in self.objects

    def clear_finalizers(self, ref):
        if ref in self.objects:
            self.objects[ref]["finalizers"].clear()
        self._settle()

    def workloads(self):
        return [w for w in self.wl if w in self.objects]

    def labelled(self, kind):
        return [{"kind": r.kind, "metadata": {"name": r.name, "namespace": r.namespace, "labels": {RUN_LABEL: self.names.tag}}}
                for r in self.objects if r.kind == kind and r.kind != "Workload"]

    def sleep(self, s):
        self.now += s


def _run_refs(k8s_policy):
    run = run_manifests(kueue_manifests(k8s_policy), NAMES)
    jobs = [run_job(render_job_manifest(r, resolve_flavor(r, k8s_policy).name, k8s_policy), NAMES)
            for r in _mix(k8s_policy)]
    created = [ref_of(m) for m in run + jobs]
    workloads = [Ref("kueue.x-k8s.io/v1beta2", "Workload", f"job-{j['metadata']['name']}", NAMES.namespace) for j in jobs]
    return created, workloads


def test_cleanup_waits_for_kueues_finalizers_in_order_and_leaves_nothing(k8s_policy) -> None:
    from tests.k8s.cluster_run import cleanup

    created, workloads = _run_refs(k8s_policy)
    flavor = next(r for r in created if r.kind == "ResourceFlavor")
    cluster = MemoryCluster(created, workloads, NAMES, stuck=[flavor])
    problems = cleanup(cluster, created, NAMES, clock=lambda: cluster.now, sleep=cluster.sleep)
    assert problems == []
    assert cluster.objects == {}
    kinds = [r.kind for r in cluster.deleted]
    first = {k: kinds.index(k) for k in set(kinds)}
    assert first["Job"] < first["LocalQueue"] < first["ClusterQueue"] < first["ResourceFlavor"]
    assert first["ResourceFlavor"] < first["Namespace"]
    assert cluster.now >= 60, "the stuck flavor was waited for before its finalizer was cleared"


def test_cleanup_reports_what_stays_and_goes_on_with_the_rest(k8s_policy) -> None:
    from tests.k8s.cluster_run import cleanup

    created, workloads = _run_refs(k8s_policy)
    namespace = next(r for r in created if r.kind == "Namespace")
    cq = next(r for r in created if r.kind == "ClusterQueue")

    class Refusing(MemoryCluster):
        def delete(self, ref):
            if ref == cq:
                raise RuntimeError("403 Forbidden")
            super().delete(ref)

    cluster = Refusing(created, workloads, NAMES, unkillable=[namespace])
    problems = cleanup(cluster, created, NAMES, clock=lambda: cluster.now, sleep=cluster.sleep)
    assert f"deleting ClusterQueue/{cq.name}: RuntimeError: 403 Forbidden" in problems
    assert f"Namespace/{namespace.name} still there after its finalizers were cleared" in problems
    assert f"left behind: ClusterQueue/{cq.name}" in problems
    assert f"left behind: Namespace/{namespace.name}" in problems
    assert all(r.kind in ("Namespace", "ClusterQueue", "ResourceFlavor") for r in cluster.objects), cluster.objects
