"""Kueue's admission checks from the policy: autoscaling through ProvisioningRequests and sites
through MultiKueue (kueue.x-k8s.io/v1beta2), for the manager cluster.

- `autoscaling.provisioning` (opt in): one ProvisioningRequestConfig and its AdmissionCheck
  (controller `kueue.x-k8s.io/provisioning-request`). The ClusterQueue of each lane with quota on a
  flavor of a provisioned node pool (default: the pools with `min_nodes: 0`, which scale from zero)
  lists the check `onFlavors` those flavors only, so a Workload assigned there is admitted once
  cluster-autoscaler has the nodes, and one on an always-up pool is not held back.
- `sites:` (opt in): one MultiKueueCluster per site (its kubeconfig Secret), one MultiKueueConfig
  per set of sites some lane runs on (its clusters in `sites:` order: the dispatcher tries them in
  that order), and one AdmissionCheck (controller `kueue.x-k8s.io/multikueue`) per config. The
  ClusterQueue of a lane on sites lists that check for all its flavors (Kueue refuses a MultiKueue
  check per flavor, two on one ClusterQueue, or one beside a ProvisioningRequest check: a lane on
  sites leaves provisioning to its worker clusters). A site's flavors carry the node label
  `gpu-platform.io/site`, so a Job kept to one site's flavors fits only that site's worker.

Without either block nothing here is written and no ClusterQueue lists a check.
"""

from __future__ import annotations

import hashlib
from typing import Any

from gpu_platform.cluster.names import (
    KUEUE_API_GROUP,
    KUEUE_API_VERSION,
    PRIORITY_CLASS_PREFIX,
    multikueue_cluster_name,
)
from gpu_platform.devices.sharing import is_gpu_resource
from gpu_platform.policy import Lane, Policy

API = f"{KUEUE_API_GROUP}/{KUEUE_API_VERSION}"
PROVISIONING_CONTROLLER = "kueue.x-k8s.io/provisioning-request"
MULTIKUEUE_CONTROLLER = "kueue.x-k8s.io/multikueue"
PROVISIONING_CHECK = f"{PRIORITY_CLASS_PREFIX}provisioning"
"""The AdmissionCheck (and its ProvisioningRequestConfig) of `autoscaling.provisioning`."""
KUBECONFIG_KEY = "kubeconfig"
_MANAGED = {"app.kubernetes.io/managed-by": "gpu-platform"}


def _meta(name: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": dict(_MANAGED)}
    if annotations:
        meta["annotations"] = annotations
    return meta


def provisioned_flavors(policy: Policy) -> tuple[str, ...]:
    """The flavors of the provisioned node pools that the manager cluster itself runs (not on a site)."""
    pools = policy.autoscaling.provisioned_pools if policy.autoscaling is not None else ()
    return tuple(f.name for f in policy.flavors if f.node_pool in pools and f.name not in policy.site_of_flavor)


def lane_provisioned_flavors(policy: Policy, lane: Lane) -> tuple[str, ...]:
    """The lane's flavors (quota order) whose Workloads wait for a ProvisioningRequest; () for a lane on sites."""
    if policy.lane_sites(lane.name):
        return ()
    mine = set(provisioned_flavors(policy))
    return tuple(f for f in lane.flavor_names if f in mine)


def multikueue_check_name(sites: tuple[str, ...]) -> str:
    """The AdmissionCheck and MultiKueueConfig of one set of sites (`gpu-platform-sites-a-b`; a
    digest when the names would pass 63 characters)."""
    name = f"{PRIORITY_CLASS_PREFIX}sites-" + "-".join(sites)
    if len(name) <= 63:
        return name
    return f"{PRIORITY_CLASS_PREFIX}sites-" + hashlib.sha256(",".join(sites).encode()).hexdigest()[:12]


def lane_check_rules(policy: Policy, lane: Lane) -> list[dict[str, Any]]:
    """The lane's `admissionChecksStrategy.admissionChecks` rules (empty: none)."""
    sites = policy.lane_sites(lane.name)
    if sites:
        return [{"name": multikueue_check_name(sites)}]
    flavors = lane_provisioned_flavors(policy, lane)
    if flavors:
        return [{"name": PROVISIONING_CHECK, "onFlavors": list(flavors)}]
    return []


def cluster_queue_checks(policy: Policy, lane: Lane) -> dict[str, Any]:
    """What the lane's ClusterQueue spec gains: `admissionChecksStrategy`, or nothing."""
    rules = lane_check_rules(policy, lane)
    return {"admissionChecksStrategy": {"admissionChecks": rules}} if rules else {}


def _provisioning(policy: Policy) -> list[dict[str, Any]]:
    auto = policy.autoscaling
    prov = auto.provisioning if auto is not None else None
    if prov is None or not any(lane_provisioned_flavors(policy, lane) for lane in policy.lanes.values()):
        return []
    flavors = provisioned_flavors(policy)
    managed = prov.managed_resources
    if managed is None:
        managed = tuple(dict.fromkeys(r for f in flavors for r in policy.flavor(f).offered if is_gpu_resource(r)))
    spec: dict[str, Any] = {
        "provisioningClassName": prov.provisioning_class_name,
        "retryStrategy": {
            "backoffLimitCount": prov.retry.backoff_limit_count,
            "backoffBaseSeconds": prov.retry.backoff_base_seconds,
            "backoffMaxSeconds": prov.retry.backoff_max_seconds,
        },
    }
    if managed:
        spec["managedResources"] = sorted(managed)
    if prov.parameters:
        spec["parameters"] = dict(prov.parameters)
    pools = ",".join(auto.provisioned_pools)  # type: ignore[union-attr]
    ann = {"gpu-platform.io/node-pools": pools, "gpu-platform.io/flavors": ",".join(flavors)}
    return [
        {"apiVersion": API, "kind": "ProvisioningRequestConfig", "metadata": _meta(PROVISIONING_CHECK, ann), "spec": spec},
        {
            "apiVersion": API,
            "kind": "AdmissionCheck",
            "metadata": _meta(PROVISIONING_CHECK, ann),
            "spec": {
                "controllerName": PROVISIONING_CONTROLLER,
                "parameters": {"apiGroup": KUEUE_API_GROUP, "kind": "ProvisioningRequestConfig", "name": PROVISIONING_CHECK},
            },
        },
    ]


def _multikueue(policy: Policy) -> list[dict[str, Any]]:
    if not policy.sites:
        return []
    out: list[dict[str, Any]] = []
    for site in policy.sites.values():
        ann = {"gpu-platform.io/site": site.name, "gpu-platform.io/flavors": ",".join(policy.site_flavors(site.name))}
        if site.description:
            ann["gpu-platform.io/description"] = site.description
        out.append(
            {
                "apiVersion": API,
                "kind": "MultiKueueCluster",
                "metadata": _meta(multikueue_cluster_name(site.name), ann),
                "spec": {"clusterSource": {"kubeConfig": {"locationType": "Secret", "location": site.kubeconfig_secret}}},
            }
        )
    sets = dict.fromkeys(policy.lane_sites(lane.name) for lane in policy.lanes_by_priority())
    for sites in (s for s in sets if s):
        name = multikueue_check_name(sites)
        ann = {"gpu-platform.io/sites": ",".join(sites)}
        out.append(
            {
                "apiVersion": API,
                "kind": "MultiKueueConfig",
                "metadata": _meta(name, ann),
                "spec": {"clusters": [multikueue_cluster_name(s) for s in sites]},
            }
        )
        out.append(
            {
                "apiVersion": API,
                "kind": "AdmissionCheck",
                "metadata": _meta(name, ann),
                "spec": {
                    "controllerName": MULTIKUEUE_CONTROLLER,
                    "parameters": {"apiGroup": KUEUE_API_GROUP, "kind": "MultiKueueConfig", "name": name},
                },
            }
        )
    return out


def check_manifests(policy: Policy) -> list[dict[str, Any]]:
    """Every admission-check object of the manager cluster, in apply order (configs before the
    checks that name them; the ClusterQueues that list the checks come after)."""
    return _provisioning(policy) + _multikueue(policy)


def check_origin(policy: Policy, check: str) -> str:
    """The policy lines an AdmissionCheck comes from (for `explain`)."""
    if check == PROVISIONING_CHECK:
        auto = policy.autoscaling
        pools = ", ".join(auto.provisioned_pools) if auto is not None else ""
        return f"autoscaling.provisioning (node pools {pools or 'none'}: ProvisioningRequest to cluster-autoscaler)"
    for lane in policy.lanes.values():
        sites = policy.lane_sites(lane.name)
        if sites and multikueue_check_name(sites) == check:
            return f"sites.{'/'.join(sites)} (MultiKueue: the Workload runs on one site's worker cluster)"
    return f"AdmissionCheck {check}: not from the current policy"
