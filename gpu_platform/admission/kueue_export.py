"""The policy as Kueue manifests (kueue.x-k8s.io/v1beta2), so cluster and platform agree.

One Topology per set of topology levels the flavors' node shapes declare (the ResourceFlavor names
it in `spec.topologyName`), one ResourceFlavor per flavor, one Cohort per cohort, one ClusterQueue per lane, one LocalQueue per
(team namespace, lane), one WorkloadPriorityClass per lane. Kubernetes names cannot hold `_`, so
lane `release_eval` becomes ClusterQueue `release-eval`. Lane rules Kueue cannot express
(protected, yields_to, evidence, budget) travel as `gpu-platform.io/*` annotations; the admission
gate enforces them.
"""

from __future__ import annotations

from decimal import ROUND_CEILING, Decimal
from pathlib import Path
from typing import Any

import yaml

from gpu_platform.admission.kueue_checks import check_manifests, cluster_queue_checks
from gpu_platform.admission.serving_lending import serving_annotations
from gpu_platform.cluster.jobs import node_selector_for, tolerations_for
from gpu_platform.cluster.names import (
    KUEUE_API_GROUP,
    KUEUE_API_VERSION,
    cluster_queue_name,
    k8s_name,
    local_queue_name,
    priority_class_name,
    resource_flavor_name,
    topology_name,
)
from gpu_platform.cluster.names import LABEL_GPU_PRODUCT as PRODUCT_LABEL
from gpu_platform.cluster.names import LABEL_NODE_POOL as POOL_LABEL
from gpu_platform.policy import GPU, Lane, Policy, Team
from gpu_platform.safeload.files import OutputDir

API = f"{KUEUE_API_GROUP}/{KUEUE_API_VERSION}"
_MANAGED = {"app.kubernetes.io/managed-by": "gpu-platform"}
__all__ = ["API", "POOL_LABEL", "PRODUCT_LABEL", "k8s_name", "kueue_manifests", "priority_class_name", "write_manifests"]


_DECIMAL_SUFFIXES = ((18, "E"), (15, "P"), (12, "T"), (9, "G"), (6, "M"), (3, "k"), (0, ""), (-3, "m"), (-6, "u"), (-9, "n"))
_BINARY_SUFFIXES = ((60, "Ei"), (50, "Pi"), (40, "Ti"), (30, "Gi"), (20, "Mi"), (10, "Ki"))


def quantity(resource: str, amount: float) -> str:
    """Quota amounts as Kubernetes quantities, written as Kueue stores them: the canonical string
    of Go's `resource.Quantity` (Kueue's webhook re-encodes every quantity it admits, so an
    integer `32` comes back as `"32"` and a second `kubectl apply` would patch it again).
    Memory (GiB in the policy) is binary (`256Gi`, `1Ti`, `1536Mi`); everything else decimal
    (`32`, `2500m`, `500m`, `2k`)."""
    value = Decimal(repr(float(amount)))
    if value == 0:
        return "0"
    if resource == "memory":
        octets = value * (1 << 30)
        if octets == octets.to_integral_value():
            for shift, suffix in _BINARY_SUFFIXES:
                if int(octets) % (1 << shift) == 0:
                    return f"{int(octets) >> shift}{suffix}"
        value = octets
    for exponent, suffix in _DECIMAL_SUFFIXES:
        scaled = value.scaleb(-exponent)
        if scaled == scaled.to_integral_value():
            return f"{int(scaled)}{suffix}"
    return f"{int((value * 10**9).to_integral_value(rounding=ROUND_CEILING))}n"


def _meta(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "labels": dict(_MANAGED), **extra}


def resource_flavor(policy: Policy, name: str) -> dict[str, Any]:
    f = policy.flavor(name)
    # The same node labels the Job's flavor affinity names, the same tolerations Kueue injects.
    spec: dict[str, Any] = {"nodeLabels": node_selector_for(f)}
    if f.taints:
        spec["tolerations"] = tolerations_for(f)
    topo = flavor_topology(policy, name)
    if topo is not None:
        spec["topologyName"] = topo[0]
    return {"apiVersion": API, "kind": "ResourceFlavor", "metadata": _meta(resource_flavor_name(f.name)), "spec": spec}


def flavor_topology(policy: Policy, name: str) -> tuple[str, tuple[str, ...]] | None:
    """(Topology name, levels) of a flavor whose node shape declares topology levels, else None.
    Flavors of a node pool with the pool's levels share the pool's Topology."""
    shape = policy.node_shape(name)
    if shape is None or not shape.topology_levels:
        return None
    f = policy.flavor(name)
    pools = policy.autoscaling.node_pools if policy.autoscaling is not None else {}
    pool = pools.get(f.node_pool)
    owner = f.node_pool if pool is not None and tuple(pool.topology_levels) == shape.topology_levels else f.name
    return topology_name(owner), shape.topology_levels


def topologies(policy: Policy) -> list[dict[str, Any]]:
    """One Kueue Topology per distinct set of levels the flavors use (Topology Aware Scheduling)."""
    seen: dict[str, tuple[str, ...]] = {}
    for f in policy.flavors:
        topo = flavor_topology(policy, f.name)
        if topo is not None:
            seen.setdefault(*topo)
    return [
        {
            "apiVersion": API,
            "kind": "Topology",
            "metadata": _meta(name),
            "spec": {"levels": [{"nodeLabel": level} for level in levels]},
        }
        for name, levels in seen.items()
    ]


def cluster_queue(policy: Policy, lane: Lane) -> dict[str, Any]:
    pre = lane.preemption
    preemption: dict[str, Any] = {
        "withinClusterQueue": pre.within_cluster_queue,
        "reclaimWithinCohort": pre.reclaim_within_cohort,
    }
    if pre.borrow_within_cohort.policy != "Never":
        bwc: dict[str, Any] = {"policy": pre.borrow_within_cohort.policy}
        if pre.borrow_within_cohort.max_priority_threshold is not None:
            bwc["maxPriorityThreshold"] = pre.borrow_within_cohort.max_priority_threshold
        preemption["borrowWithinCohort"] = bwc
    spec: dict[str, Any] = {
        "namespaceSelector": {},
        "queueingStrategy": lane.queueing_strategy,
        "resourceGroups": _resource_groups(lane.quotas),
        "preemption": preemption,
    }
    if lane.cohort_name is not None:
        spec["cohortName"] = lane.cohort_name
    if policy.fair_sharing.enabled:
        spec["fairSharing"] = {"weight": quantity("weight", lane.fair_sharing_weight)}
    if lane.admission_fair_sharing is not None:
        # Kueue orders the lane's LocalQueues (one per team) by their decayed usage.
        spec["admissionScope"] = {"admissionMode": "UsageBasedAdmissionFairSharing"}
    spec.update(cluster_queue_checks(policy, lane))  # ProvisioningRequest / MultiKueue (kueue_checks.py)
    annotations = {
        "gpu-platform.io/lane": lane.name,
        "gpu-platform.io/priority": str(lane.priority),
        "gpu-platform.io/protected": str(lane.protected).lower(),
        "gpu-platform.io/evidence": str(lane.evidence).lower(),
        "gpu-platform.io/budget": f"{lane.budget} {policy.currency}/{policy.budget_period}",
    }
    if lane.yields_to is not None:
        annotations["gpu-platform.io/yields-to"] = ",".join(lane.yields_to)
    if lane.serving:  # what it lends and to whom (admission/serving_lending.py)
        annotations.update(serving_annotations(policy, lane.name))
    return {
        "apiVersion": API,
        "kind": "ClusterQueue",
        "metadata": _meta(cluster_queue_name(lane.name), annotations=annotations),
        "spec": spec,
    }


def _resource_groups(quotas: Any) -> list[dict[str, Any]]:
    """Kueue resource groups from quota rows: resources that share a flavor form one group (a MIG
    or shared flavor's resources get groups of their own); each flavor of a group lists all of the
    group's resources (the CRD requires as many resources per flavor as coveredResources)."""
    quotas = list(quotas)
    if not quotas:
        return []
    groups: list[tuple[list[str], list[str]]] = []  # (resources, flavors)
    for q in quotas:
        hit = [g for g in groups if q.flavor_name in g[1] or q.resource in g[0]]
        if not hit:
            groups.append(([q.resource], [q.flavor_name]))
            continue
        g = hit[0]
        for other in hit[1:]:
            g[0].extend(r for r in other[0] if r not in g[0])
            g[1].extend(f for f in other[1] if f not in g[1])
            groups.remove(other)
        if q.resource not in g[0]:
            g[0].append(q.resource)
        if q.flavor_name not in g[1]:
            g[1].append(q.flavor_name)
    by = {(q.flavor_name, q.resource): q for q in quotas}
    out = []
    for resources, fnames in groups:
        resources = sorted(resources, key=lambda r: (r != GPU, resources.index(r)))
        flavors = []
        for fname in fnames:
            entries = []
            for r in resources:
                q = by.get((fname, r))
                entry: dict[str, Any] = {"name": r, "nominalQuota": quantity(r, q.nominal_quota if q else 0)}
                if q is not None and q.borrowing_limit is not None:
                    entry["borrowingLimit"] = quantity(r, q.borrowing_limit)
                if q is not None and q.lending_limit is not None:
                    entry["lendingLimit"] = quantity(r, q.lending_limit)
                entries.append(entry)
            flavors.append({"name": fname, "resources": entries})
        out.append({"coveredResources": resources, "flavors": flavors})
    return out


def cohort(policy: Policy, c: Any) -> dict[str, Any]:
    """A v1beta2 Cohort: parentName, its own resourceGroups, and its fair-sharing weight."""
    meta = _meta(c.name)
    if c.description:
        meta["annotations"] = {"gpu-platform.io/description": c.description}
    spec: dict[str, Any] = {}
    if c.parent_name is not None:
        spec["parentName"] = c.parent_name
    groups = _resource_groups(c.quotas)
    if groups:
        spec["resourceGroups"] = groups
    if policy.fair_sharing.enabled:
        spec["fairSharing"] = {"weight": quantity("weight", c.fair_sharing_weight)}
    return {"apiVersion": API, "kind": "Cohort", "metadata": meta, "spec": spec}


def kueue_manifests(policy: Policy) -> list[dict[str, Any]]:
    """Every manifest, in apply order: topologies, flavors, cohorts, priority classes, admission
    checks with their configs (`kueue_checks.py`, when the policy opts in), cluster queues, local queues."""
    out: list[dict[str, Any]] = topologies(policy)
    out += [resource_flavor(policy, f.name) for f in policy.flavors]
    for c in policy.cohorts:
        out.append(cohort(policy, c))
    lanes = policy.lanes_by_priority()
    for lane in lanes:
        out.append(
            {
                "apiVersion": API,
                "kind": "WorkloadPriorityClass",
                "metadata": _meta(priority_class_name(lane.name)),
                "value": lane.priority,
                "description": f"gpu-platform lane {lane.name}",
            }
        )
    out += check_manifests(policy)
    out += [cluster_queue(policy, lane) for lane in lanes]
    for team in policy.teams.values():
        for lane in lanes:
            out.append(local_queue(lane, team))
    return out


def local_queue(lane: Lane, team: Team) -> dict[str, Any]:
    """The team's LocalQueue for the lane, in the team's namespace. Under the lane's Admission
    Fair Sharing it carries the team's weight (`spec.fairSharing.weight`; 1 unless the policy
    says otherwise), and the team's own usage decides its place against the other teams."""
    spec: dict[str, Any] = {"clusterQueue": cluster_queue_name(lane.name)}
    afs = lane.admission_fair_sharing
    if afs is not None:
        spec["fairSharing"] = {"weight": quantity("weight", afs.team_weights.get(team.name, 1.0))}
    meta = _meta(local_queue_name(lane.name), namespace=team.namespace)
    return {"apiVersion": API, "kind": "LocalQueue", "metadata": meta, "spec": spec}


def kueue_configuration(policy: Policy) -> dict[str, Any] | None:
    """The part of Kueue's manager Configuration (config.kueue.x-k8s.io, the `kueue-manager-config`
    ConfigMap) that Admission Fair Sharing needs: how LocalQueue usage is sampled and decays and
    what each resource weighs. None: no lane uses Admission Fair Sharing."""
    if not any(lane.admission_fair_sharing is not None for lane in policy.lanes.values()):
        return None
    cfg = policy.admission_fair_sharing
    block: dict[str, Any] = {
        "usageHalfLifeTime": _duration(cfg.usage_half_life.total_seconds()),
        "usageSamplingInterval": _duration(cfg.usage_sampling_interval.total_seconds()),
    }
    if cfg.resource_weights:
        block["resourceWeights"] = {r: w for r, w in sorted(cfg.resource_weights.items())}
    return {"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration", "admissionFairSharing": block}


def _duration(seconds: float) -> str:
    """A Go duration (`168h`, `5m`, `90s`) as Kueue's Configuration parses it."""
    s = int(round(seconds))
    if s % 3600 == 0:
        return f"{s // 3600}h"
    if s % 60 == 0:
        return f"{s // 60}m"
    return f"{s}s"


def manifest_filename(m: dict[str, Any]) -> str:
    meta = m["metadata"]
    ns = f"{meta['namespace']}-" if "namespace" in meta else ""
    return f"{m['kind'].lower()}-{ns}{meta['name']}.yaml"


def write_manifests(policy: Policy, out_dir: str | Path) -> list[Path]:
    """Write one YAML file per manifest, so `kubectl apply -f DIR` sends each object once (the
    whole deployment, namespaces included, is `gpu-platform deploy render`'s kustomize tree)."""
    manifests = kueue_manifests(policy)
    with OutputDir(out_dir) as out:
        return [out.write(manifest_filename(m), yaml.safe_dump(m, sort_keys=False)) for m in manifests]
