"""Lending a service's idle GPUs to batch and taking them back when it scales up (docs/serving.md,
Lending idle serving GPUs).

A serving lane's nominal quota holds its services' max replicas. Replicas below max leave GPUs the
lane lends to its cohort tree (its `lending_limit`: None lends all, 0 nothing); batch lanes that
may be preempted borrow them, and the lane reclaims them with `reclaim_within_cohort: Any` when a
service scales up. Work the lane could not preempt (protected lanes, evidence jobs, lanes that
yield only to others) is kept off them by the gate (`admission/serving_lending.py`).

- `admission/serving_lending.py` `scale_up_workloads`: the replicas a service wants beyond those
  admitted, one pending workload per replica (Kueue's pod integration admits each pod of a
  Deployment as its own Workload), so the engine admits each on free quota or reclaims a borrower
  for it (`InCohortReclamation`). It lives with the engine (this package stays below it: the
  request model imports `serving.model`).
- `idle_lendable`: what a serving lane lends now.
- `with_lending`: the policy with its serving lanes lending all of their idle quota (what
  `simulate --service` compares against lending nothing).
"""

from __future__ import annotations

from gpu_platform.policy import GPU, Policy


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


__all__ = ["idle_lendable", "with_lending"]
