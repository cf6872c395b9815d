"""Resolve a rendered Job against exported Kueue objects the way Kueue does.

What Kueue's job reconciler and flavor assigner do before a Job can be admitted
(kubernetes-sigs/kueue `pkg/controller/jobframework` and `pkg/scheduler/flavorassigner`):
- the `kueue.x-k8s.io/queue-name` label names a LocalQueue in the Job's namespace, whose
  `spec.clusterQueue` names a ClusterQueue;
- the `kueue.x-k8s.io/priority-class` label names a WorkloadPriorityClass (cluster-scoped);
  a missing one is `WorkloadPriorityClassNotFound` and no Workload is created;
- a flavor of the ClusterQueue's resource group covering the pod's resources is a candidate if
  the pod tolerates the ResourceFlavor's `nodeTaints` (NoSchedule/NoExecute) and the pod's
  nodeSelector and required node affinity, restricted to the label keys the group's flavors
  define (`flavorSelector`), match the flavor's `nodeLabels`; a term left empty matches all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class KueueRefusal(AssertionError):
    """What Kueue would report instead of admitting (reason first, as Kueue words it)."""


@dataclass(frozen=True)
class Resolution:
    local_queue: dict[str, Any]
    cluster_queue: dict[str, Any]
    priority_class: dict[str, Any]
    flavors: list[str]
    """ClusterQueue flavors (in its order) the pod template can be admitted on, with quota."""


def _index(objects: list[dict[str, Any]]) -> dict[tuple[str, str | None, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in objects}


def _requirement_matches(req: dict[str, Any], labels: dict[str, str]) -> bool:
    op, key, values = req["operator"], req["key"], req.get("values") or []
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    raise KueueRefusal(f"node affinity operator {op} not modelled")


def pod_matches_labels(pod_spec: dict[str, Any], labels: dict[str, str], allowed_keys: set[str] | None = None) -> bool:
    """Kueue's `flavorSelector` (allowed_keys = the flavors' label keys) or, with allowed_keys=None,
    kube-scheduler's NodeAffinity filter against a node with these labels."""
    def allowed(key: str) -> bool:
        return allowed_keys is None or key in allowed_keys

    for key, value in (pod_spec.get("nodeSelector") or {}).items():
        if allowed(key) and labels.get(key) != value:
            return False
    required = (
        ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
        or {}
    )
    terms = required.get("nodeSelectorTerms")
    if not terms:
        return True
    for term in terms:
        exprs = [e for e in term.get("matchExpressions") or [] if allowed(e["key"])]
        if all(_requirement_matches(e, labels) for e in exprs):
            return True
    return False


def tolerates(pod_spec: dict[str, Any], taints: list[dict[str, Any]]) -> bool:
    """Every NoSchedule/NoExecute taint has a matching toleration."""
    tols = pod_spec.get("tolerations") or []
    for taint in taints:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        ok = False
        for t in tols:
            if t.get("effect") and t["effect"] != taint["effect"]:
                continue
            if t.get("operator") == "Exists" and (not t.get("key") or t["key"] == taint["key"]):
                ok = True
            elif t.get("key") == taint["key"] and t.get("value") == taint.get("value"):
                ok = True
        if not ok:
            return False
    return True


def _has_quota(entry: dict[str, Any], cohort: bool) -> bool:
    nominal = float(entry.get("nominalQuota", 0))
    if nominal > 0:
        return True
    if not cohort:
        return False
    limit = entry.get("borrowingLimit")
    return limit is None or float(limit) > 0


def resolve(job: dict[str, Any], exported: list[dict[str, Any]]) -> Resolution:
    """The LocalQueue, ClusterQueue, WorkloadPriorityClass and candidate flavors of a Job."""
    index = _index(exported)
    meta = job["metadata"]
    labels = meta.get("labels") or {}
    ns = meta["namespace"]
    lq_name = labels.get("kueue.x-k8s.io/queue-name")
    if not lq_name:
        raise KueueRefusal("no kueue.x-k8s.io/queue-name label: Kueue does not manage the Job")
    lq = index.get(("LocalQueue", ns, lq_name))
    if lq is None:
        raise KueueRefusal(f"LocalQueueDoesNotExist: LocalQueue {ns}/{lq_name} doesn't exist")
    cq = index.get(("ClusterQueue", None, lq["spec"]["clusterQueue"]))
    if cq is None:
        raise KueueRefusal(f"ClusterQueueDoesNotExist: ClusterQueue {lq['spec']['clusterQueue']} doesn't exist")
    wpc_name = labels.get("kueue.x-k8s.io/priority-class")
    wpc = index.get(("WorkloadPriorityClass", None, wpc_name))
    if wpc is None:
        raise KueueRefusal(f'WorkloadPriorityClassNotFound: WorkloadPriorityClass "{wpc_name}" not found')

    pod = job["spec"]["template"]["spec"]
    requested: set[str] = set()
    for c in pod["containers"]:
        requested |= set((c.get("resources") or {}).get("requests") or {})
    cohort = bool(cq["spec"].get("cohortName"))
    candidates: list[str] = []
    for group in cq["spec"]["resourceGroups"]:
        covered = set(group["coveredResources"]) & requested
        if not covered:
            continue
        flavor_objs = {f["name"]: index.get(("ResourceFlavor", None, f["name"])) for f in group["flavors"]}
        missing = [n for n, o in flavor_objs.items() if o is None]
        if missing:
            raise KueueRefusal(f"ResourceFlavor {missing[0]} not found")
        keys = {k for o in flavor_objs.values() for k in (o["spec"].get("nodeLabels") or {})}
        for f in group["flavors"]:
            rf = flavor_objs[f["name"]]
            if not tolerates(pod, rf["spec"].get("nodeTaints") or []):
                continue
            if not pod_matches_labels(pod, rf["spec"].get("nodeLabels") or {}, keys):
                continue
            entries = {r["name"]: r for r in f["resources"]}
            if all(r in entries and _has_quota(entries[r], cohort) for r in covered):
                candidates.append(f["name"])
    return Resolution(lq, cq, wpc, candidates)


def admit_on(job: dict[str, Any], flavor: dict[str, Any]) -> dict[str, Any]:
    """The pod spec after Kueue admits the Job on `flavor` (a ResourceFlavor object): its node
    labels merged into nodeSelector, its tolerations appended."""
    pod = dict(job["spec"]["template"]["spec"])
    pod["nodeSelector"] = {**(pod.get("nodeSelector") or {}), **(flavor["spec"].get("nodeLabels") or {})}
    pod["tolerations"] = [*(pod.get("tolerations") or []), *(flavor["spec"].get("tolerations") or [])]
    return pod
