"""Build the engine's ClusterState from the policy file and job requests.

Lanes become cluster queues (quotas, cohort, preemption, yields_to, protected, budget); flavors
keep their capacity as a physical ceiling on top of the quotas and their Topology's levels (Kueue's
TAS); requests become workloads whose flavors are restricted by `matching_flavors`, whose topology
request is their Job's (`topology_of`) and whose lane rules come from the lane.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal

from gpu_platform.admission.model import (
    TAS_FOLLOWS_FLAVOR,
    TAS_PREFERRED,
    TAS_REQUIRED,
    AdmissionFairSharing,
    ClusterQueueSpec,
    ClusterState,
    CohortSpec,
    FlavorSpec,
    NodeSpec,
    ResourceQuota,
    TeamLimit,
    TeamLimits,
    Workload,
)
from gpu_platform.cluster.names import flavor_topology_levels
from gpu_platform.policy import Lane, Policy
from gpu_platform.requests.model import JobRequest, matching_flavors, shaped_flavors


@dataclass(frozen=True, slots=True)
class AdmittedRequest:
    """A running request: the flavor it holds, when it was admitted, and whether it is checkpointed
    with immutable logs (only then may an evidence job be preempted). name=None: request_id."""

    request: JobRequest
    flavor: str
    admitted_at: float = 0.0
    checkpointed: bool = False
    name: str | None = None
    approvals: frozenset[str] = frozenset()
    replicas: int | None = None
    """A service: the replicas it holds now (the ledger's `current_replicas`); None: its min."""


@dataclass(frozen=True, slots=True)
class PendingRequest:
    """A waiting request and when it was submitted. name=None: request_id.

    approvals: the kinds of exception granted to it and recorded in the ledger (`safety`,
    `cost`; see `gpu_platform.requests.approvals`). The request's own `safety_approval` field grants nothing.
    """

    request: JobRequest
    created_at: float = 0.0
    name: str | None = None
    approvals: frozenset[str] = frozenset()


def team_limits_for(lane: Lane) -> TeamLimits | None:
    """The lane's `team_limits` in the engine's words (None: no team limited)."""
    tl = lane.team_limits
    if tl is None:
        return None

    def cap(c) -> TeamLimit | None:
        if c is None:
            return None
        return TeamLimit(None if c.max_gpus is None else float(c.max_gpus), c.max_share, c.max_running)

    return TeamLimits(cap(tl.default), {t: c for t, c in ((t, cap(v)) for t, v in tl.teams.items()) if c is not None})


def admission_fair_sharing_for(
    policy: Policy, lane: Lane, consumed: Mapping[str, Mapping[str, float]] | None = None
) -> AdmissionFairSharing | None:
    """The lane's Admission Fair Sharing in the engine's words (None: the lane has none).
    consumed: team -> {resource: decayed usage} as Kueue reports it on the team's LocalQueue."""
    afs = lane.admission_fair_sharing
    if afs is None:
        return None
    cfg = policy.admission_fair_sharing
    rate = 1.0 - 0.5 ** (cfg.usage_sampling_interval.total_seconds() / cfg.usage_half_life.total_seconds())
    return AdmissionFairSharing(
        consumed={t: dict(v) for t, v in (consumed or {}).items()},
        weights=dict(afs.team_weights),
        resource_weights=dict(cfg.resource_weights),
        entry_penalty_rate=rate,
    )


def cluster_queue_for(
    lane: Lane, spent: float = 0.0, admission_fair_sharing: AdmissionFairSharing | None = None
) -> ClusterQueueSpec:
    pre = lane.preemption
    return ClusterQueueSpec(
        name=lane.name,
        quotas=tuple(
            ResourceQuota(q.flavor_name, q.resource, q.nominal_quota, q.borrowing_limit, q.lending_limit)
            for q in lane.quotas
        ),
        cohort=lane.cohort_name,
        queueing_strategy=lane.queueing_strategy,
        within_cluster_queue=pre.within_cluster_queue,
        reclaim_within_cohort=pre.reclaim_within_cohort,
        borrow_within_cohort=pre.borrow_within_cohort.policy,
        max_priority_threshold=pre.borrow_within_cohort.max_priority_threshold,
        yields_to=lane.yields_to,
        protected=lane.protected,
        fair_sharing_weight=lane.fair_sharing_weight,
        budget_remaining=float(lane.budget) - spent,
        budget_total=float(lane.budget),
        team_limits=team_limits_for(lane),
        admission_fair_sharing=admission_fair_sharing,
        serving=lane.serving,
        lend_to_evidence=lane.lend_to_evidence,
        evidence_reclaim_after=(
            None if lane.evidence_reclaim_after is None else lane.evidence_reclaim_after.total_seconds()
        ),
        reserve_head=lane.targets is not None and lane.targets.wait_p95 is not None and lane.targets.reserve_head,
    )


def _lane_fit(policy: Policy, lane: Lane, req: JobRequest) -> tuple[frozenset[str], tuple[str, ...]]:
    """The resources the lane has quota for, and the flavors the request may use: those matching
    its gpu_type (and site), kept to the ones whose nodes fit its recorded shape for a gang. Asked
    once per distinct request shape for the policy's life (`Policy.derived`), not per request."""
    required = req.topology.required if req.topology is not None else None
    key = ("lane_fit", lane.name, req.gpu_type, req.gpu_resource, req.site, req.gpu_count, req.nodes, req.gpus_per_pod, required)
    found = policy.derived.get(key)
    if found is None:
        allowed = tuple(matching_flavors(policy, lane.name, req.gpu_type, req.gpu_resource, req.site))
        if req.gpu_resource == "nvidia.com/gpu" and req.gpu_count:
            # a gang keeps to the flavors whose nodes fit its recorded shape
            allowed = tuple(shaped_flavors(policy, req, list(allowed)))
        found = policy.derived[key] = (frozenset(q.resource for q in lane.quotas), allowed)
    return found


def workload_for(
    policy: Policy,
    req: JobRequest,
    name: str,
    *,
    created_at: float = 0.0,
    admitted_at: float = 0.0,
    flavor: str | None = None,
    checkpointed: bool = False,
    approvals: frozenset[str] = frozenset(),
    replicas: int | None = None,
) -> Workload:
    """One request as a workload: lane priority, GPU count (plus cpu/memory where the lane has quota).

    approvals: exceptions recorded in the ledger for it (`safety`, `cost`); the request's own
    `safety_approval` string is not one.
    A service (`service:`) is `replicas` of its replicas at once (None: its `replicas.min`), each
    `gpu_count` GPUs on `pods` pods: one Workload holding them all, so its min replicas are
    admitted together or it waits (docs/serving.md, Admission).
    """
    lane = policy.lane(req.lane or "")
    resources, allowed = _lane_fit(policy, lane, req)
    topology, level = topology_of(req)
    n = 0 if req.service is None else (replicas if replicas is not None else req.service.replicas.min)
    times = n or 1
    requests: dict[str, float] = {req.gpu_resource: float(req.gpu_count or 0) * times}
    if req.cpu is not None and "cpu" in resources:
        requests["cpu"] = float(req.cpu) * times
    if req.memory_gib is not None and "memory" in resources:
        requests["memory"] = float(req.memory_gib) * times
    return Workload(
        name=name,
        cq=lane.name,
        requests=requests,
        priority=lane.priority,
        created_at=created_at,
        admitted_at=admitted_at,
        flavor=flavor,
        allowed_flavors=allowed,
        evidence=lane.evidence,
        checkpointed=checkpointed,
        safety_approval="safety" in approvals,
        cost_approval="cost" in approvals,
        team=req.team,
        max_cost=None if req.max_cost is None else float(req.max_cost),
        expected_duration_s=None if req.expected_duration is None else req.expected_duration.total_seconds(),
        pods=req.pods * times,
        topology=topology,
        topology_level=level,
        replicas=n,
    )


def topology_of(req: JobRequest) -> tuple[str, str | None]:
    """The topology request of the request's Job as Kueue reads it (`Workload.topology`): its
    `topology:` level, required or preferred (Kueue then allows only topology-aware flavors that
    have the level); without one, the Job is annotated unconstrained exactly when the gate admits it
    on a topology-aware flavor (`gpu_platform.cluster.jobs.topology_annotations`), so any flavor
    of its lane may be chosen."""
    topo = req.topology
    if topo is None:
        return TAS_FOLLOWS_FLAVOR, None
    if topo.required:
        return TAS_REQUIRED, topo.required
    return TAS_PREFERRED, topo.preferred


def nodes_for(policy: Policy) -> tuple[NodeSpec, ...]:
    """The nodes the policy's node shapes describe: per flavor, `full_nodes` of `gpus_per_node`
    (plus one smaller node for a remainder), named `<flavor>/node-<i>`. The cluster's scheduler
    decides the real nodes; the engine places admitted work on these by best fit."""
    out: list[NodeSpec] = []
    for name, shape in policy.node_shapes.items():
        out += [NodeSpec(f"{name}/node-{i}", name, float(g)) for i, g in enumerate(shape.node_sizes)]
    return tuple(out)


def from_policy(
    policy: Policy,
    admitted: Iterable[AdmittedRequest | Workload] = (),
    pending: Iterable[PendingRequest | JobRequest | Workload] = (),
    budget_spent: Mapping[str, Decimal | float] | None = None,
    now: float = 0.0,
    node_model: bool = True,
    team_usage: Mapping[str, Mapping[str, Mapping[str, float]]] | None = None,
) -> ClusterState:
    """The engine's view of the policy plus running and waiting requests.

    team_usage: lane -> team -> {resource: decayed usage}, for lanes with Admission Fair Sharing
    (what Kueue reports on each team's LocalQueue); absent: every team has used nothing yet.

    budget_spent: spend so far this budget period per lane (absent lane = 0). A bare JobRequest in
    `pending` is created at its index (submission order); names default to request_id.
    node_model: place GPUs on the nodes of the policy's node shapes (`nodes_for`); False: quota only.
    """
    spent = {k: float(v) for k, v in (budget_spent or {}).items()}
    usage = team_usage or {}
    cqs = tuple(
        cluster_queue_for(
            lane, spent.get(lane.name, 0.0), admission_fair_sharing_for(policy, lane, usage.get(lane.name))
        )
        for lane in policy.lanes_by_priority()
    )
    flavors = tuple(
        FlavorSpec(f.name, f.spot, dict(f.offered), flavor_topology_levels(policy, f.name)) for f in policy.flavors
    )
    adm: list[Workload] = []
    for i, a in enumerate(admitted):
        if isinstance(a, Workload):
            adm.append(a)
            continue
        name = a.name or a.request.request_id or f"admitted-{i}"
        adm.append(
            workload_for(
                policy,
                a.request,
                name,
                admitted_at=a.admitted_at,
                flavor=a.flavor,
                checkpointed=a.checkpointed,
                approvals=a.approvals,
                replicas=a.replicas,
            )
        )
    pend: list[Workload] = []
    for i, p in enumerate(pending):
        if isinstance(p, Workload):
            pend.append(p)
        elif isinstance(p, PendingRequest):
            pend.append(
                workload_for(
                    policy,
                    p.request,
                    p.name or p.request.request_id or f"pending-{i}",
                    created_at=p.created_at,
                    approvals=p.approvals,
                )
            )
        else:
            pend.append(workload_for(policy, p, p.request_id or f"pending-{i}", created_at=float(i)))
    return ClusterState(
        cluster_queues=cqs,
        flavors=flavors,
        admitted=tuple(adm),
        pending=tuple(pend),
        cohorts=tuple(
            CohortSpec(
                c.name,
                c.parent_name,
                tuple(
                    ResourceQuota(q.flavor_name, q.resource, q.nominal_quota, q.borrowing_limit, q.lending_limit)
                    for q in c.quotas
                ),
                c.fair_sharing_weight,
            )
            for c in policy.cohorts
        ),
        fair_sharing=policy.fair_sharing.enabled,
        now=now,
        # A lane governs only the resources it has quota for (Kueue's QuotaCheckStrategy
        # IgnoreUndeclared): a GPU lane does not refuse a job for asking for CPUs.
        ignore_undeclared_resources=True,
        nodes=nodes_for(policy) if node_model else (),
    )
