"""Lending a service's idle GPUs to batch and taking them back when it scales up (docs/serving.md,
Lending idle serving GPUs).

A serving lane's nominal quota holds its services' max replicas. Replicas below max leave GPUs the
lane lends to its cohort tree (its `lending_limit`: None lends all, 0 nothing); batch lanes that
may be preempted borrow them, and the lane reclaims them with `reclaim_within_cohort: Any` when a
service scales up. Work the lane could not preempt (protected lanes, evidence jobs, lanes that
yield only to others) is kept off them by the gate (`admission/serving_lending.py`).

- `scale_up_workloads`: the replicas a service wants beyond those admitted, one pending workload
  per replica (Kueue's pod integration admits each pod of a Deployment as its own Workload), so
  the engine admits each on free quota or reclaims a borrower for it (`InCohortReclamation`).
- `idle_lendable`: what a serving lane lends now.
- `with_lending`: the policy with its serving lanes lending all of their idle quota (what
  `simulate --service` compares against lending nothing).
"""

from __future__ import annotations

from gpu_platform.admission.model import Workload
from gpu_platform.policy import GPU, Policy


def per_replica(requests: dict[str, float] | object, replicas: int) -> dict[str, float]:
    """One replica's requests from a service workload holding `replicas` of them (0 or 1: as is)."""
    reqs = dict(requests)  # type: ignore[call-overload]
    n = max(1, replicas)
    return {r: v / n for r, v in reqs.items()}


def scale_up_workloads(
    service: Workload, wanted: int, admitted: int, now: float, held: int | None = None
) -> list[Workload]:
    """Pending workloads for replicas `admitted + 1 .. wanted` of `service`, an admitted workload
    holding `held` replicas (None: its `replicas` field where it has one, else 1). Each asks for
    one replica's requests, named `<service>/replica-<i>`, created now, in the service's queue at
    its priority, on its flavor; an empty list when `wanted <= admitted`."""
    if wanted <= admitted:
        return []
    if held is None:
        held = getattr(service, "replicas", 0) or 1
    one = per_replica(service.requests, held)
    pods = max(1, service.pods // max(1, held))
    out = []
    for i in range(admitted + 1, wanted + 1):
        out.append(
            Workload(
                name=f"{service.name}/replica-{i}",
                cq=service.cq,
                requests=one,
                priority=service.priority,
                created_at=now,
                flavor=service.flavor,
                allowed_flavors=service.allowed_flavors,
                team=service.team,
                pods=pods,
            )
        )
    return out


def idle_lendable(policy: Policy, lane_name: str, flavor_name: str, used: float, resource: str = GPU) -> float:
    """GPUs the serving lane lends now on the flavor: min(nominal, lending_limit) less what it
    uses beyond its unlent part, never below 0."""
    lane = policy.lane(lane_name)
    q = lane.quota(flavor_name, resource)
    if q is None:
        return 0.0
    lendable = q.nominal_quota if q.lending_limit is None else min(q.nominal_quota, q.lending_limit)
    return max(0.0, min(lendable, q.nominal_quota - used))


def with_lending(policy: Policy) -> Policy:
    """The policy with every serving lane lending all of its idle quota (lending_limit None),
    validated afresh (a copy would keep the original's derived caches)."""
    if not any(lane.serving for lane in policy.lanes.values()):
        return policy
    data = policy.model_dump()
    for name, lane in policy.lanes.items():
        if lane.serving:
            for q in data["lanes"][name]["quotas"]:
                q["lending_limit"] = None
    return type(policy).model_validate(data)


__all__ = ["idle_lendable", "per_replica", "scale_up_workloads", "with_lending"]
