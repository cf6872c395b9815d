"""One run of the cluster test (tests/k8s/test_cluster.py) as plain data: its names, its objects,
what it predicts and how it cleans up. No API calls here, so all of it is tested without a
cluster (tests/k8s/test_cluster_run.py).

A run never touches what the cluster already holds: every cluster-scoped object of the export
(Topology, ResourceFlavor, Cohort, ClusterQueue, WorkloadPriorityClass) gets the run's suffix
(`h100-ondemand-3f2a9c1e`), and every Job and LocalQueue lives in one namespace of the run's own
(`gpu-platform-test-3f2a9c1e`); each object carries the label `gpu-platform.io/test-run: <tag>`.

All ClusterQueues start taking work in one step: their namespaceSelector matches only a
namespace labelled `gpu-platform.io/test-release: <tag>`, which the run's namespace gets only
once every Job has its Workload. Until then Kueue's scheduler sets every head aside with
`Workload namespace doesn't match ClusterQueue selector` (pkg/scheduler/scheduler.go `nominate`,
`RequeueReasonNamespaceMismatch`: inadmissible even under StrictFIFO), and the one namespace
update moves them all back at once (pkg/controller/core/clusterqueue_controller.go
`cqNamespaceHandler.Update` requeues the inadmissible workloads of every ClusterQueue that now
matches, in one call). Un-holding ClusterQueues one PATCH at a time let a queue released early
admit its head before the others took work.
"""

from __future__ import annotations

import copy
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from gpu_platform.admission.engine import schedule_until_stable
from gpu_platform.admission.model import ClusterState
from gpu_platform.admission.policy_view import PendingRequest, from_policy
from gpu_platform.cluster.names import (
    ANNOTATION_GATE_FLAVOR,
    KUEUE_API_GROUP,
    KUEUE_API_VERSION,
    KUEUE_PRIORITY_CLASS,
    is_dns_label,
)
from gpu_platform.cluster.readback import Observation

RUN_LABEL = "gpu-platform.io/test-run"
RELEASE_LABEL = "gpu-platform.io/test-release"
KUEUE_API = f"{KUEUE_API_GROUP}/{KUEUE_API_VERSION}"
CLUSTER_SCOPED = ("Topology", "ResourceFlavor", "Cohort", "WorkloadPriorityClass", "ClusterQueue")

# The contended mix: more H100 demand than the pool holds, borrowing across the cohort tree.
MIX = [
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

# Cleanup order: what uses a thing goes before it. Jobs own their Workloads (Kueue keeps a
# finalizer on an admitted Workload, a ClusterQueue with workloads, a ResourceFlavor a
# ClusterQueue names), so each group is deleted and gone before the next.
DELETE_ORDER = ("Job", "LocalQueue", "ClusterQueue", "Cohort", "WorkloadPriorityClass", "ResourceFlavor", "Topology", "Namespace")


@dataclass(frozen=True, slots=True)
class Ref:
    """One object the run created: what deleting, waiting for and un-finalizing it needs."""

    api_version: str
    kind: str
    name: str
    namespace: str | None = None


@dataclass(frozen=True, slots=True)
class RunNames:
    """The names of one run: `tag` is 8 hex characters, fresh per run."""

    tag: str

    @classmethod
    def fresh(cls) -> RunNames:
        return cls(uuid.uuid4().hex[:8])

    @property
    def namespace(self) -> str:
        return f"gpu-platform-test-{self.tag}"

    def scoped(self, name: str) -> str:
        """A cluster-scoped name of the export, made the run's own."""
        out = f"{name}-{self.tag}"
        if not is_dns_label(out):
            raise ValueError(f"{out!r} is not a DNS label (at most 63 characters)")
        return out

    def unscoped(self, name: str | None) -> str | None:
        suffix = f"-{self.tag}"
        if name is not None and name.endswith(suffix):
            return name[: -len(suffix)]
        return name


def run_manifests(manifests: Iterable[Mapping[str, Any]], names: RunNames) -> list[dict[str, Any]]:
    """The export (`kueue_manifests`) renamed for one run, in apply order: the run's Namespace
    first, every LocalQueue moved into it (one per lane), ClusterQueues admitting only from a
    released namespace. References between objects follow the renames."""
    out: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": names.namespace, "labels": {RUN_LABEL: names.tag}},
        }
    ]
    local_queues: set[str] = set()
    for m in manifests:
        m = copy.deepcopy(dict(m))
        kind, meta, spec = m["kind"], m["metadata"], m.get("spec") or {}
        meta.setdefault("labels", {})[RUN_LABEL] = names.tag
        if kind in CLUSTER_SCOPED:
            meta["name"] = names.scoped(meta["name"])
        if kind == "ResourceFlavor" and spec.get("topologyName"):
            spec["topologyName"] = names.scoped(spec["topologyName"])
        if kind == "Cohort" and spec.get("parentName"):
            spec["parentName"] = names.scoped(spec["parentName"])
        if kind in ("Cohort", "ClusterQueue"):
            for group in spec.get("resourceGroups") or []:
                for flavor in group.get("flavors") or []:
                    flavor["name"] = names.scoped(flavor["name"])
        if kind == "ClusterQueue":
            if spec.get("cohortName"):
                spec["cohortName"] = names.scoped(spec["cohortName"])
            spec["namespaceSelector"] = {"matchLabels": {RELEASE_LABEL: names.tag}}
        if kind == "LocalQueue":
            if meta["name"] in local_queues:
                continue
            local_queues.add(meta["name"])
            meta["namespace"] = names.namespace
            spec["clusterQueue"] = names.scoped(spec["clusterQueue"])
        out.append(m)
    return out


def run_job(job: Mapping[str, Any], names: RunNames) -> dict[str, Any]:
    """A rendered step Job moved into the run: its namespace, its priority class, the gate's
    flavor in the run's names. The queue-name label stays (LocalQueues are namespaced)."""
    job = copy.deepcopy(dict(job))
    meta = job["metadata"]
    meta["namespace"] = names.namespace
    labels = meta.setdefault("labels", {})
    labels[RUN_LABEL] = names.tag
    if KUEUE_PRIORITY_CLASS in labels:
        labels[KUEUE_PRIORITY_CLASS] = names.scoped(labels[KUEUE_PRIORITY_CLASS])
    ann = meta.get("annotations") or {}
    if ANNOTATION_GATE_FLAVOR in ann:
        ann[ANNOTATION_GATE_FLAVOR] = names.scoped(ann[ANNOTATION_GATE_FLAVOR])
    return job


def release_patch(names: RunNames) -> dict[str, Any]:
    """The one namespace update that lets every ClusterQueue of the run take work."""
    return {"metadata": {"labels": {RELEASE_LABEL: names.tag}}}


def ref_of(manifest: Mapping[str, Any]) -> Ref:
    meta = manifest["metadata"]
    return Ref(manifest["apiVersion"], manifest["kind"], meta["name"], meta.get("namespace"))


def cleanup_plan(created: Iterable[Ref]) -> list[list[Ref]]:
    """What the run created, in groups to delete one after another (DELETE_ORDER), each object once."""
    seen: dict[Ref, None] = dict.fromkeys(created)
    unknown = sorted({r.kind for r in seen} - set(DELETE_ORDER))
    if unknown:
        raise ValueError(f"no cleanup order for kind(s) {', '.join(unknown)}")
    return [[r for r in seen if r.kind == kind] for kind in DELETE_ORDER if any(r.kind == kind for r in seen)]


class ClusterOps(Protocol):
    """What cleaning up needs from the cluster (tests/k8s/test_cluster.py implements it with the
    dynamic client; tests/k8s/test_cluster_run.py with an in-memory cluster)."""

    def delete(self, ref: Ref) -> None:
        """Delete (background propagation); an object already gone is no error."""

    def exists(self, ref: Ref) -> bool: ...

    def clear_finalizers(self, ref: Ref) -> None:
        """Remove `metadata.finalizers` (an object already gone is no error)."""

    def workloads(self) -> list[Ref]:
        """Kueue's Workloads in the run's namespace (Kueue makes them; the run never lists them)."""

    def labelled(self, kind: str) -> list[Mapping[str, Any]]:
        """Every object of `kind`, in any namespace, carrying the run's label."""


def cleanup(
    ops: ClusterOps,
    created: Iterable[Ref],
    names: RunNames,
    *,
    wait_s: float = 60.0,
    poll_s: float = 2.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> list[str]:
    """Delete what the run created, group by group (`cleanup_plan`; Kueue's Workloads with the
    Jobs), wait up to `wait_s` for each group to go, clear the finalizers of what stays (the run's
    own objects only) and wait again; then list everything with the run's label. Returns every
    problem (an error deleting, an object that stayed, an object left behind); [] = clean. Never
    raises on one object: cleanup goes on with the rest."""
    problems: list[str] = []

    def gone_after(refs: list[Ref]) -> list[Ref]:
        deadline = clock() + wait_s
        left = list(refs)
        while left:
            left = [r for r in left if ops.exists(r)]
            if not left or clock() >= deadline:
                break
            sleep(poll_s)
        return left

    for group in cleanup_plan(created):
        if group[0].kind == "Job":
            group = group + ops.workloads()
        for ref in group:
            try:
                ops.delete(ref)
            except Exception as exc:  # noqa: BLE001 - report it and go on with the rest
                problems.append(f"deleting {ref.kind}/{ref.name}: {type(exc).__name__}: {exc}")
        stuck = gone_after(group)
        for ref in stuck:
            try:
                ops.clear_finalizers(ref)
            except Exception as exc:  # noqa: BLE001
                problems.append(f"clearing the finalizers of {ref.kind}/{ref.name}: {type(exc).__name__}: {exc}")
        for ref in gone_after(stuck):
            problems.append(f"{ref.kind}/{ref.name} still there after its finalizers were cleared")
    for kind in DELETE_ORDER:
        problems += [f"left behind: {x}" for x in leftovers(ops.labelled(kind), names)]
    return problems


def leftovers(objects: Iterable[Mapping[str, Any]], names: RunNames) -> list[str]:
    """`kind/namespace/name` of every listed object that still carries this run's label."""
    out = []
    for o in objects:
        meta = o.get("metadata") or {}
        if (meta.get("labels") or {}).get(RUN_LABEL) == names.tag:
            out.append("/".join(p for p in (o.get("kind", "?"), meta.get("namespace"), meta.get("name", "?")) if p))
    return sorted(out)


def in_policy_names(obs: Observation, names: RunNames) -> Observation:
    """An observation of the run's objects in the policy's names (flavor, gate flavor, queue)."""
    return replace(
        obs,
        flavor=names.unscoped(obs.flavor),
        gate_flavor=names.unscoped(obs.gate_flavor),
        cluster_queue=names.unscoped(obs.cluster_queue),
    )


def is_set_aside(obs: Observation) -> bool:
    """Kueue has the Workload and set it aside because the namespace is not released yet."""
    return obs.condition == "QuotaReserved" and obs.status == "False" and "namespace" in obs.message.lower()


def as_kueue(state: ClusterState) -> ClusterState:
    """What Kueue knows from the export: quotas, cohorts, priorities, preemption policies (the lane
    rules `yields_to`, `protected`, evidence checkpoints, budgets and team limits are the gate's,
    not Kueue's)."""
    return replace(
        state,
        cluster_queues=tuple(
            replace(cq, yields_to=None, protected=False, budget_remaining=None, budget_total=None, team_limits=None)
            for cq in state.cluster_queues
        ),
        admitted=tuple(replace(w, evidence=False, checkpointed=False, safety_approval=False) for w in state.admitted),
        pending=tuple(replace(w, evidence=False, checkpointed=False, safety_approval=False) for w in state.pending),
    )


def kueue_prediction(policy: Any, requests: list[Any]) -> tuple[dict[str, str], set[str]]:
    """What Kueue ends with when every request's Job is there at once, in creation order:
    ({request id: flavor} admitted, request ids left pending). `schedule_until_stable`, not the
    gate's single tick (`admit_until_stable`): Kueue admits a head, then may reclaim its quota a
    cycle later for a job that was behind another head (tests/fixtures/admission/cluster-observed.yaml)."""
    state = from_policy(policy, pending=[PendingRequest(r, float(i), r.request_id) for i, r in enumerate(requests)])
    res = schedule_until_stable(as_kueue(state))
    final: dict[str, str] = {}
    for cycle in res.per_cycle:
        for p in cycle.preempted:
            final.pop(p.victim, None)
        for a in cycle.admitted:
            final[a.name] = a.flavor
    return final, {p.name for p in res.pending}
