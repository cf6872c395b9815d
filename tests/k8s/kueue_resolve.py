"""Resolve a rendered Job against exported Kueue objects the way Kueue does.

What Kueue's job reconciler and flavor assigner do before a Job can be admitted
(kubernetes-sigs/kueue `pkg/controller/jobframework` and `pkg/scheduler/flavorassigner`):
- the `kueue.x-k8s.io/queue-name` label names a LocalQueue in the Job's namespace, whose
  `spec.clusterQueue` names a ClusterQueue;
- the `kueue.x-k8s.io/priority-class` label names a WorkloadPriorityClass (cluster-scoped);
  a missing one is `WorkloadPriorityClassNotFound` and no Workload is created;
- a flavor of the ClusterQueue's resource group covering the pod's resources is a candidate if
  it passes Kueue's Topology Aware Scheduling check (`flavorassigner/tas_flavorassigner.go`
  `checkPodSetAndFlavorMatchForTAS`, the rule `gpu_platform/admission/tas.py` states: a pod
  template with a `podset-required-topology`, `podset-preferred-topology` or
  `podset-unconstrained-topology` annotation only on a flavor with `topologyName` whose Topology
  has the level; one without only on a flavor without `topologyName`, unless every flavor of the
  ClusterQueue has one), the pod tolerates the ResourceFlavor's `nodeTaints`
  (NoSchedule/NoExecute) and the pod's nodeSelector and required node affinity, restricted to the
  label keys the group's flavors define (`flavorSelector`), match the flavor's `nodeLabels`; a
  term left empty matches all.

Each flavor the ClusterQueue lists for the pod's resources and does not keep is in `refused`
with Kueue's reason, and `no_matching_flavor` words the Workload's `QuotaReserved=False`
message as Kueue does when none is left.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class KueueRefusal(AssertionError):
    """What Kueue would report instead of admitting (reason first, as Kueue words it)."""


TAS_REQUIRED = "kueue.x-k8s.io/podset-required-topology"
TAS_PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
TAS_UNCONSTRAINED = "kueue.x-k8s.io/podset-unconstrained-topology"


@dataclass(frozen=True)
class Resolution:
    local_queue: dict[str, Any]
    cluster_queue: dict[str, Any]
    priority_class: dict[str, Any]
    flavors: list[str]
    """ClusterQueue flavors (in its order) the pod template can be admitted on, with quota."""
    refused: dict[str, str] = field(default_factory=dict)
    """The ClusterQueue's other flavors for the pod's resources: flavor -> Kueue's reason."""
    topology_request: tuple[str, str | None] | None = None
    """The pod template's TAS request (mode, level); None: no annotation."""

    def no_matching_flavor(self) -> str:
        """Kueue's `QuotaReserved=False` message when no flavor is left (`NoMatchingFlavor`)."""
        return "couldn't assign flavors to pod set main: " + ", ".join(self.refused.values())

    def admits_on(self, flavor: str, amounts: dict[str, float] | None = None) -> str:
        """The flavor Kueue assigns on an empty cluster: the first candidate, in the ClusterQueue's
        order, whose quota could ever hold `amounts` (`capacity_bound`); raises KueueRefusal when
        none is left. `flavor` is only named in the message."""
        for name in self.flavors:
            if amounts is None or all(
                v <= capacity_bound(self.cluster_queue, name, r) for r, v in amounts.items()
            ):
                return name
        raise KueueRefusal(f"{self.no_matching_flavor()} (expected {flavor})")


def capacity_bound(cq: dict[str, Any], flavor: str, resource: str) -> float:
    """An upper bound of what the ClusterQueue may ever hold of `resource` on `flavor` (Kueue's
    potentialAvailable is at most this): its nominal quota plus its borrowing limit, unbounded when
    it is in a cohort without a limit."""
    for group in cq["spec"]["resourceGroups"]:
        for f in group["flavors"]:
            if f["name"] != flavor:
                continue
            for r in f["resources"]:
                if r["name"] != resource:
                    continue
                nominal = float(r.get("nominalQuota", 0))
                if not cq["spec"].get("cohortName"):
                    return nominal
                limit = r.get("borrowingLimit")
                return float("inf") if limit is None else nominal + float(limit)
    return 0.0


def topology_request(template_meta: dict[str, Any]) -> tuple[str, str | None] | None:
    """The PodSet's TAS request from its pod template annotations (jobframework
    `NewPodSetTopologyRequest(...).Build()`: required, else preferred, else unconstrained, which
    must parse as a bool); None: none (Kueue then treats the PodSet as not asking for TAS)."""
    ann = template_meta.get("annotations") or {}
    given = [k for k in (TAS_REQUIRED, TAS_PREFERRED, TAS_UNCONSTRAINED) if k in ann]
    if len(given) > 1:
        raise KueueRefusal(f"pod template sets {', '.join(given)}: one topology annotation per PodSet")
    if TAS_REQUIRED in ann:
        return "required", ann[TAS_REQUIRED]
    if TAS_PREFERRED in ann:
        return "preferred", ann[TAS_PREFERRED]
    if TAS_UNCONSTRAINED in ann:
        value = str(ann[TAS_UNCONSTRAINED]).lower()
        if value not in ("true", "false", "1", "0", "t", "f"):
            raise KueueRefusal(f"{TAS_UNCONSTRAINED}: {ann[TAS_UNCONSTRAINED]!r} is not a bool")
        return "unconstrained", None if value in ("true", "1", "t") else ""
    return None


def _topology_levels(index: dict, rf: dict[str, Any]) -> tuple[str, ...] | None:
    """The levels of the Topology the ResourceFlavor names; None: no topologyName or no such
    Topology (not in Kueue's TAS cache)."""
    name = rf["spec"].get("topologyName")
    if not name:
        return None
    topo = index.get(("Topology", None, name))
    if topo is None:
        return None
    return tuple(lv["nodeLabel"] for lv in topo["spec"]["levels"])


def tas_refusal(
    flavor: str, rf: dict[str, Any], levels: tuple[str, ...] | None, request: tuple[str, str | None] | None, tas_only: bool
) -> str | None:
    """`checkPodSetAndFlavorMatchForTAS` for one flavor: Kueue's reason to skip it, or None."""
    if request is None:
        if tas_only:
            return None  # TAS implied: every flavor of the queue is topology-aware
        if rf["spec"].get("topologyName"):
            return f'Flavor "{flavor}" supports only TopologyAwareScheduling'
        return None
    if not rf["spec"].get("topologyName"):
        return f'Flavor "{flavor}" does not support TopologyAwareScheduling'
    if levels is None:
        return f'Flavor "{flavor}" information missing in TAS cache'
    mode, level = request
    if mode == "unconstrained":
        level = levels[-1] if level is None and levels else None  # `false` asks for no level
    if level not in levels:
        return f'Flavor "{flavor}" does not contain the requested level'
    return None


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

    template = job["spec"]["template"]
    pod = template["spec"]
    tas = topology_request(template.get("metadata") or {})
    requested: set[str] = set()
    for c in pod["containers"]:
        requested |= set((c.get("resources") or {}).get("requests") or {})
    cohort = bool(cq["spec"].get("cohortName"))
    every_flavor = [f["name"] for g in cq["spec"]["resourceGroups"] for f in g["flavors"]]
    tas_only = all(
        (rf := index.get(("ResourceFlavor", None, n))) is not None and _topology_levels(index, rf) is not None
        for n in every_flavor
    )
    candidates: list[str] = []
    refused: dict[str, str] = {}
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
            name = f["name"]
            rf = flavor_objs[name]
            why = tas_refusal(name, rf, _topology_levels(index, rf), tas, tas_only)
            if why is not None:
                refused[name] = why
                continue
            if not tolerates(pod, rf["spec"].get("nodeTaints") or []):
                refused[name] = f"untolerated taint in flavor {name}"
                continue
            if not pod_matches_labels(pod, rf["spec"].get("nodeLabels") or {}, keys):
                refused[name] = f"flavor {name} doesn't match node affinity"
                continue
            entries = {r["name"]: r for r in f["resources"]}
            if all(r in entries and _has_quota(entries[r], cohort) for r in covered):
                candidates.append(name)
            else:
                refused[name] = f"insufficient quota for {', '.join(sorted(covered))} in flavor {name}"
    return Resolution(lq, cq, wpc, candidates, refused, tas)


def admit_on(job: dict[str, Any], flavor: dict[str, Any]) -> dict[str, Any]:
    """The pod spec after Kueue admits the Job on `flavor` (a ResourceFlavor object): its node
    labels merged into nodeSelector, its tolerations appended."""
    pod = dict(job["spec"]["template"]["spec"])
    pod["nodeSelector"] = {**(pod.get("nodeSelector") or {}), **(flavor["spec"].get("nodeLabels") or {})}
    pod["tolerations"] = [*(pod.get("tolerations") or []), *(flavor["spec"].get("tolerations") or [])]
    return pod
