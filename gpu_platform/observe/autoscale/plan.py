"""Desired nodes per node pool.

For each pool in `policy.autoscaling.node_pools`:

    unmet   = max(0, pending GPUs - waiting for upstream - GPUs that running jobs free within startup_time)
    desired = GPUs in use + unmet + warm-pool GPUs of the pool
    nodes   = clamp(ceil(desired / node_gpus), min_nodes, max_nodes)

Pending GPUs count on the first flavor their request may use (see `demand_flavor`); requests
waiting for their inputs (WaitingForUpstream) are left out: a node would not start them. Running
jobs whose expected end (admission + expected_duration) falls within the startup time are not
worth a node: their GPUs come free before a new node would. max_nodes defaults to what the
pool's flavors' capacity holds, so the plan never asks for more than the quotas can admit.

With `autoscaling.provisioning` (Kueue's ProvisioningRequest admission check), the pending GPUs
of lanes whose ClusterQueue lists the check on a flavor of the pool (less those waiting for
upstream) are asked of cluster-autoscaler by Kueue, one ProvisioningRequest per Workload:

    provisioned = min(unmet, pending GPUs under the check - their upstream waits)
    desired     = GPUs in use + unmet - provisioned + warm-pool GPUs

so a scaler driven by the plan does not ask twice (`provisioned_gpus`, `provisioned_lanes` and
the reason say which demand went that way). A `check-capacity` class scales nothing: its demand
stays in `desired`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from gpu_platform.admission.kueue_checks import PROVISIONING_CHECK, lane_provisioned_flavors
from gpu_platform.observe.queueview.demand import Demand
from gpu_platform.policy import GPU, Policy


@dataclass(frozen=True, slots=True)
class PoolPlan:
    node_pool: str
    flavors: tuple[str, ...]
    node_gpus: int
    startup_time_s: float
    gpus_in_use: int
    gpus_pending: int
    gpus_waiting_for_upstream: int
    gpus_freed_within_startup: int
    unmet_gpus: int
    warm_gpus: dict[str, int] = field(default_factory=dict)
    desired_gpus: int = 0
    desired_nodes: int = 0
    min_nodes: int = 0
    max_nodes: int = 0
    capped_at_max: bool = False
    reason: str = ""
    provisioning_check: str | None = None
    """The ProvisioningRequest AdmissionCheck on this pool's flavors (None: none, nodes come from the plan)."""
    provisioned_gpus: int = 0
    """Of unmet_gpus, those Kueue asks cluster-autoscaler for through the check (not in desired_gpus)."""
    provisioned_lanes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["flavors"] = list(self.flavors)
        out["provisioned_lanes"] = list(self.provisioned_lanes)
        return out


def plan_pools(policy: Policy, demand: Demand, now: datetime | None = None) -> list[PoolPlan]:
    """One plan per configured node pool (empty when the policy has no autoscaling block)."""
    cfg = policy.autoscaling
    if cfg is None:
        return []
    now = now or demand.at
    in_use = demand.gpus_in_use_by_flavor()
    pending = demand.gpus_pending_by_flavor()
    blocked = demand.gpus_waiting_for_upstream_by_flavor()
    prov = cfg.provisioning
    checked = policy.derived.get("plan_pools_checked")
    if checked is None:  # the policy's alone (it is frozen): computed once, not on every scrape
        checked = policy.derived["plan_pools_checked"] = {
            lane.name: frozenset(lane_provisioned_flavors(policy, lane)) for lane in policy.lanes.values()
        }
    plans = []
    for pool, scaling in cfg.node_pools.items():
        flavors = tuple(f.name for f in policy.flavors if f.node_pool == pool)
        capacity = sum(int(policy.flavor(f).capacity.get(GPU, 0)) for f in flavors)
        max_nodes = scaling.max_nodes if scaling.max_nodes is not None else math.ceil(capacity / scaling.node_gpus)
        used = sum(in_use.get(f, 0) for f in flavors)
        waiting = sum(pending.get(f, 0) for f in flavors)
        upstream = sum(blocked.get(f, 0) for f in flavors)
        horizon = now + timedelta(seconds=scaling.startup_time.total_seconds())
        freed = sum(g for f, g, end in demand.admitted_ends if f in flavors and end <= horizon)
        unmet = max(0, waiting - upstream - freed)
        via, lanes_via = 0, []
        for name, ld in demand.lanes.items():
            mine = [f for f in flavors if f in checked.get(name, ())]
            gpus = sum(ld.gpus_pending.get(f, 0) - ld.gpus_waiting_for_upstream.get(f, 0) for f in mine)
            if gpus > 0:
                via += gpus
                lanes_via.append(name)
        pool_checked = any(f in c for c in checked.values() for f in flavors)
        provisioned = min(unmet, via) if prov is not None and prov.scales_up else 0
        warm = {w.lane: w.gpus for w in cfg.warm_pools if w.node_pool == pool}
        desired = used + unmet - provisioned + sum(warm.values())
        raw_nodes = math.ceil(desired / scaling.node_gpus)
        nodes = min(max(raw_nodes, scaling.min_nodes), max_nodes)
        capped = raw_nodes > max_nodes
        if capped:
            reason = f"demand wants {raw_nodes} nodes; capped at max_nodes {max_nodes}"
        elif raw_nodes < scaling.min_nodes:
            reason = f"below min_nodes {scaling.min_nodes}"
        elif unmet:
            reason = f"{unmet} pending GPUs not freed by running jobs within {scaling.startup_time}"
        elif waiting and upstream == waiting:
            reason = "pending GPUs all wait for upstream outputs; no node for them yet"
        elif waiting:
            reason = f"pending GPUs are freed by running jobs within {scaling.startup_time}; no node for them"
        else:
            reason = "nothing pending; in use plus warm pool"
        if provisioned:
            reason += (
                f"; {provisioned} of the unmet GPUs ({', '.join(lanes_via)}) are asked of cluster-autoscaler by "
                f"Kueue's {PROVISIONING_CHECK} check, one ProvisioningRequest per Workload (not in desired)"
            )
        elif via and prov is not None and not prov.scales_up:
            reason += f"; {PROVISIONING_CHECK} only checks capacity ({prov.provisioning_class_name}): its demand stays in desired"
        plans.append(
            PoolPlan(
                node_pool=pool,
                flavors=flavors,
                node_gpus=scaling.node_gpus,
                startup_time_s=scaling.startup_time.total_seconds(),
                gpus_in_use=used,
                gpus_pending=waiting,
            gpus_waiting_for_upstream=upstream,
                gpus_freed_within_startup=freed,
                unmet_gpus=unmet,
                warm_gpus=warm,
                desired_gpus=desired,
                desired_nodes=nodes,
                min_nodes=scaling.min_nodes,
                max_nodes=max_nodes,
                capped_at_max=capped,
                reason=reason,
                provisioning_check=PROVISIONING_CHECK if pool_checked else None,
                provisioned_gpus=provisioned,
                provisioned_lanes=tuple(lanes_via) if pool_checked else (),
            )
        )
    return plans
