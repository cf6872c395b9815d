"""Which flavors Kueue lets a PodSet use under Topology Aware Scheduling (TAS).

Kueue's rule, read in kubernetes-sigs/kueue (main, the v0.20 line):
`pkg/scheduler/flavorassigner/tas_flavorassigner.go` `checkPodSetAndFlavorMatchForTAS`, which
`FlavorAssigner` calls for every flavor of a resource group before taints and node affinity, with
`isTASRequested` / `isTASImplied` beside it:

- a PodSet with an explicit topology request (`workload.IsExplicitlyRequestingTAS`: the
  `kueue.x-k8s.io/podset-required-topology`, `podset-preferred-topology` or
  `podset-unconstrained-topology: "true"` annotation, or the slice annotations) may use only
  topology-aware flavors (a ResourceFlavor with `spec.topologyName`): another is skipped with
  `Flavor "X" does not support TopologyAwareScheduling`, and one whose Topology lacks the required
  or preferred level with `Flavor "X" does not contain the requested level`
  (`TASFlavorSnapshot.HasLevel`; unconstrained asks for the lowest level, always there);
- a PodSet without one may use a topology-aware flavor only when its ClusterQueue is TAS-only
  (`ClusterQueueSnapshot.IsTASOnly`, from `pkg/cache/scheduler/clusterqueue.go` `isTASOnly`:
  every flavor of every resource group of the queue is topology-aware). There TAS is implied:
  the PodSet is placed as if unconstrained (KEP-2724, "Implicit defaulting of TAS annotations").
  Otherwise a topology-aware flavor is skipped with
  `Flavor "X" supports only TopologyAwareScheduling`; this is the `NoMatchingFlavor` a v0.20
  cluster reported for single-pod H100 Jobs of lanes that also hold L4 or A100 quota.

Kueue also accepts a non-topology-aware flavor for an explicit request when the PodSet asks for
none of the resources its resource group covers (quota-only resources); the engine asks each
group only for resources the workload requests, so that case never arises here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gpu_platform.admission.model import (
    TAS_FOLLOWS_FLAVOR,
    TAS_PREFERRED,
    TAS_REQUIRED,
)

SUPPORTS_ONLY_TAS = 'Flavor "{flavor}" supports only TopologyAwareScheduling'
NO_TAS_SUPPORT = 'Flavor "{flavor}" does not support TopologyAwareScheduling'
NO_LEVEL = 'Flavor "{flavor}" does not contain the requested level'


def is_tas_only(flavors: Iterable[str], levels_of: Mapping[str, tuple[str, ...]]) -> bool:
    """Kueue's `isTASOnly`: every flavor of the queue (all its resource groups) is topology-aware.
    levels_of: flavor -> its Topology's levels (absent or (): not topology-aware)."""
    return all(levels_of.get(f) for f in flavors)


def topology_refusal(
    flavor: str,
    flavor_levels: tuple[str, ...],
    topology: str | None,
    level: str | None,
    tas_only: bool,
) -> str | None:
    """Why Kueue skips `flavor` for a PodSet, in Kueue's words; None: the TAS check passes.

    flavor_levels: the levels of the flavor's Topology (): not topology-aware. topology / level:
    the PodSet's request (`Workload.topology`, `Workload.topology_level`). tas_only: every flavor
    of the PodSet's ClusterQueue is topology-aware (`is_tas_only`)."""
    if topology == TAS_FOLLOWS_FLAVOR:
        return None  # the platform annotates the Job for the flavor it is admitted on
    if topology is None:
        if flavor_levels and not tas_only:
            return SUPPORTS_ONLY_TAS.format(flavor=flavor)
        return None
    if not flavor_levels:
        return NO_TAS_SUPPORT.format(flavor=flavor)
    if topology in (TAS_REQUIRED, TAS_PREFERRED) and level not in flavor_levels:
        return NO_LEVEL.format(flavor=flavor)
    return None
