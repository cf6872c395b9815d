"""Admission engine data model: frozen dataclasses in Kueue's words.

Amounts are plain numbers in the resource's unit (`nvidia.com/gpu` in GPUs, `cpu` in cores,
`memory` in GiB). Times are seconds on one clock (`created_at`, `admitted_at`, `now`).
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace

NEVER = "Never"
LOWER_PRIORITY = "LowerPriority"
LOWER_OR_NEWER_EQUAL = "LowerOrNewerEqualPriority"
ANY = "Any"

STRICT_FIFO = "StrictFIFO"
BEST_EFFORT_FIFO = "BestEffortFIFO"

# Kueue condition types and reasons.
QUOTA_RESERVED = "QuotaReserved"
ADMITTED = "Admitted"
INADMISSIBLE = "Inadmissible"
PREEMPTED = "Preempted"
IN_CLUSTER_QUEUE = "InClusterQueue"
IN_COHORT_RECLAMATION = "InCohortReclamation"
IN_COHORT_RECLAIM_WHILE_BORROWING = "InCohortReclaimWhileBorrowing"
IN_COHORT_FAIR_SHARING = "InCohortFairSharing"

# A PodSet's topology request (Kueue's podset-*-topology annotations); see Workload.topology.
TAS_REQUIRED = "required"
TAS_PREFERRED = "preferred"
TAS_UNCONSTRAINED = "unconstrained"
TAS_FOLLOWS_FLAVOR = "follows-flavor"
TOPOLOGY_MODES = (TAS_REQUIRED, TAS_PREFERRED, TAS_UNCONSTRAINED, TAS_FOLLOWS_FLAVOR)

# Our reason codes for pending workloads (condition QuotaReserved=False).
PENDING = "Pending"
PENDING_PREEMPTION = "PendingPreemption"
BUDGET_EXHAUSTED = "BudgetExhausted"
BUDGET_EXCEEDED = "BudgetExceeded"
TEAM_LIMIT = "TeamLimit"


@dataclass(frozen=True, slots=True)
class TeamLimit:
    """Caps on what one team runs at once in one cluster queue (the platform's; Kueue has none).

    max_gpus: GPU devices held (every GPU resource counts one per unit: whole GPUs, MIG slices,
    shared replicas). max_share: a share (0, 1] of the most the queue can hold of them (the sum of
    Kueue's potentialAvailable over its GPU quota rows, capped by flavor capacity), floored, at
    least 1; with both set the smaller applies. max_running: admitted workloads. None: no cap.
    """

    max_gpus: float | None = None
    max_share: float | None = None
    max_running: int | None = None


@dataclass(frozen=True, slots=True)
class TeamLimits:
    """A queue's team limits: `teams` per named team; `default` for every other team.

    A team's entry overrides the default per cap: its GPU cap (max_gpus and max_share together:
    two ways to say one cap) when it sets either, its max_running when set; a cap it leaves out
    comes from the default. A workload without a team is not limited.
    """

    default: TeamLimit | None = None
    teams: Mapping[str, TeamLimit] = field(default_factory=dict)

    def for_team(self, team: str) -> TeamLimit | None:
        own = self.teams.get(team)
        base = self.default
        if own is None:
            return base
        if base is None:
            return own
        gpu_cap = own if own.max_gpus is not None or own.max_share is not None else base
        return TeamLimit(
            gpu_cap.max_gpus,
            gpu_cap.max_share,
            own.max_running if own.max_running is not None else base.max_running,
        )


@dataclass(frozen=True, slots=True)
class ResourceQuota:
    """Quota of one cluster queue for one (flavor, resource).

    borrowing_limit=None: no limit on borrowing from the cohort (ignored without a cohort).
    lending_limit=None: all of the nominal quota may be lent to the cohort.
    """

    flavor: str
    resource: str
    nominal: float
    borrowing_limit: float | None = None
    lending_limit: float | None = None


@dataclass(frozen=True, slots=True)
class CohortSpec:
    """A Kueue v1beta2 Cohort: a node of a cohort tree.

    parent=None: a root cohort. quotas: the cohort's own resources (nominal, borrowing and lending
    limits per flavor and resource; limits only on a cohort with a parent). fair_weight: Kueue's
    `spec.fairSharing.weight` (0 = borrows last, preempted first).
    """

    name: str
    parent: str | None = None
    quotas: tuple[ResourceQuota, ...] = ()
    fair_weight: float = 1.0


@dataclass(frozen=True, slots=True)
class FlavorSpec:
    """A ResourceFlavor. capacity=None: no physical ceiling beyond the quotas (Kueue's view).

    topology_levels: the levels (node labels, widest first) of the Topology its ResourceFlavor
    names in `spec.topologyName`, so the flavor is topology-aware (Kueue's Topology Aware
    Scheduling); (): not topology-aware (no `topologyName`).
    """

    name: str
    spot: bool = False
    capacity: Mapping[str, float] | None = None
    topology_levels: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class AdmissionFairSharing:
    """Kueue's Admission Fair Sharing on one cluster queue (`admissionScope:
    UsageBasedAdmissionFairSharing`): its LocalQueues, one per team here, are ordered by their
    usage, lowest first, before priority (cache/queue/cluster_queue.go `queueOrderingFunc`).

    A LocalQueue's usage (workload/info.go `CalcLocalQueueFSUsage`, admissionfairsharing
    `CalculateUsage`): the sum over resources of resource weight x (decayed consumed amount +
    entry penalty), divided by the LocalQueue's weight.
    consumed: team -> {resource: decayed consumed amount} (the LocalQueue's
    `status.fairSharing.admissionFairSharingStatus.consumedResources`); a team absent has none.
    weights: team -> LocalQueue weight (absent: 1). resource_weights: absent resources weigh 1.
    entry_penalty_rate: what each admission adds to its LocalQueue's consumed amounts, as a share
    of its requests (`CalculateEntryPenalty`: 1 - 0.5^(sampling interval / half-life)).
    """

    consumed: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    weights: Mapping[str, float] = field(default_factory=dict)
    resource_weights: Mapping[str, float] = field(default_factory=dict)
    entry_penalty_rate: float = 0.0

    def usage(self, team: str | None) -> float:
        rw = self.resource_weights
        total = sum(rw.get(r, 1.0) * v for r, v in self.consumed.get(team or "", {}).items())
        return total / self.weights.get(team or "", 1.0)

    def after_admission(self, team: str | None, requests: Mapping[str, float]) -> AdmissionFairSharing:
        """The same, with the entry penalty of one admission of `requests` for `team` added."""
        if self.entry_penalty_rate <= 0:
            return self
        key = team or ""
        mine = dict(self.consumed.get(key, {}))
        for r, v in requests.items():
            if v > 0:
                mine[r] = mine.get(r, 0.0) + v * self.entry_penalty_rate
        return replace(self, consumed={**self.consumed, key: mine})


@dataclass(frozen=True, slots=True)
class ClusterQueueSpec:
    """A Kueue ClusterQueue plus the platform's lane rules.

    Flavors are tried in the order of their first quota entry.
    max_priority_threshold=None: borrow_within_cohort may preempt any priority below the preemptor's.
    yields_to=None: plain Kueue rules decide who may preempt this queue's workloads; a tuple: only
    preemptors from those queues, or carrying a safety approval, may.
    protected: this queue's workloads are never preemption victims.
    budget_remaining=None: no budget cap; budget_total=None: no lifetime cap (nothing is rejected).
    team_limits=None: no team is limited in this queue.
    admission_fair_sharing=None: one priority/age order for every team (`AdmissionFairSharing`).
    flavor_fungibility=None: the state's (cluster-wide default) fungibility applies.
    """

    name: str
    quotas: tuple[ResourceQuota, ...]
    cohort: str | None = None
    queueing_strategy: str = BEST_EFFORT_FIFO
    within_cluster_queue: str = NEVER
    reclaim_within_cohort: str = NEVER
    borrow_within_cohort: str = NEVER
    max_priority_threshold: int | None = None
    yields_to: tuple[str, ...] | None = None
    protected: bool = False
    fair_sharing_weight: float = 1.0
    budget_remaining: float | None = None
    budget_total: float | None = None
    flavor_fungibility: FlavorFungibility | None = None
    team_limits: TeamLimits | None = None
    admission_fair_sharing: AdmissionFairSharing | None = None
    reserve_head: bool = False
    """Its waiting head reserves the GPUs it waits for against later work of its priority or lower
    (a lane with a wait target; `admission/reservation.py`, a gate rule)."""
    serving: bool = False
    """A serving lane's queue (`Lane.serving`): the idle part of its lendable quota may be borrowed
    only by workloads it can take back (`admission/serving_lending.py`)."""
    lend_to_evidence: bool = False
    """A serving queue that lends to evidence runs not yet checkpointed too (`Lane.lend_to_evidence`):
    its scale-up may wait for such a borrower's first checkpoint."""
    evidence_reclaim_after: float | None = None
    """Seconds (`Lane.evidence_reclaim_after`): a serving queue that lends to evidence runs may
    preempt one that has run this long (since `admitted_at`) without a checkpoint; None: only once
    it has checkpointed."""

    @property
    def flavors(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(q.flavor for q in self.quotas))

    def own_ceiling(self, q: ResourceQuota) -> float | None:
        """The most of q's flavor and resource the queue may hold, whatever its cohort lends:
        nominal without a cohort, nominal + borrowing_limit in one; None: no limit of its own."""
        if self.cohort is None:
            return q.nominal
        return None if q.borrowing_limit is None else q.nominal + q.borrowing_limit


@dataclass(frozen=True, slots=True)
class Workload:
    """One GPU job, pending or admitted.

    flavor: the flavor an admitted workload holds quota on; on a pending one, fixes its flavor.
    allowed_flavors=None: any flavor of its cluster queue.
    evidence/checkpointed: an evidence-producing job is a preemption candidate only when
    checkpointed (a resumable checkpoint and immutable logs exist).
    safety_approval: a recorded safety approval (lets it preempt a queue that yields only to others).
    cost_approval: a recorded cost exception (the queue's budget does not hold it back).
    team: the team it runs for (team limits); None: not limited.
    max_cost=None: no cost cap checked. expected_duration_s=None: unknown (no estimate from it).
    resource_flavors: an admitted workload whose resources got different flavors ({resource:
    flavor}); None: every resource is on `flavor`.
    pods: Kueue's PodSet count: the job's pods, all admitted together or none (a gang); requests
    are the whole job's, one pod asks for requests / pods; where nodes are known a node takes as many pods as its free
    GPUs hold (`admission/nodes.py`: one per node for the platform's whole-node gangs).
    placement: the nodes an admitted workload's pods hold ({node: GPUs}); None: placed by the
    engine (best fit) when the state has nodes.
    evicted: an admitted workload whose eviction is under way (Kueue's `Evicted` condition): it
    still holds its quota, and Kueue takes such workloads first when it picks victims.
    uid: Kueue's last tie-breaker between victims equal in everything else (`metadata.uid`);
    None: the name stands for it.
    evicted_finish: what happens to it once evicted between cycles of `schedule_until_stable`:
    True finishes it for good, False requeues it; None: the run's own setting.
    topology: its PodSet's topology request, as its pod template's annotations give it to Kueue
    (the rule: `admission/tas.py`). `TAS_FOLLOWS_FLAVOR` (the default): a Job the platform
    renders, annotated `podset-unconstrained-topology` exactly when the gate admits it on a
    topology-aware flavor (`gpu_platform.cluster.jobs.topology_annotations`), so every flavor of
    its queue passes Kueue's check; `TAS_REQUIRED` / `TAS_PREFERRED` (with `topology_level`) /
    `TAS_UNCONSTRAINED`: an explicit request, only topology-aware flavors (with that level);
    None: no annotation at all (a Job the platform did not render): a topology-aware flavor only
    in a queue whose flavors are all topology-aware.
    """

    name: str
    cq: str
    requests: Mapping[str, float]
    priority: int = 0
    created_at: float = 0.0
    admitted_at: float = 0.0
    flavor: str | None = None
    allowed_flavors: tuple[str, ...] | None = None
    evidence: bool = False
    checkpointed: bool = False
    safety_approval: bool = False
    max_cost: float | None = None
    expected_duration_s: float | None = None
    resource_flavors: Mapping[str, str] | None = None
    cost_approval: bool = False
    team: str | None = None
    pods: int = 1
    placement: Mapping[str, float] | None = None
    evicted: bool = False
    uid: str | None = None
    evicted_finish: bool | None = None
    topology: str | None = TAS_FOLLOWS_FLAVOR
    topology_level: str | None = None
    replicas: int = 0
    """A service's replicas (`workload: service`, docs/serving.md) this workload holds or asks for,
    admitted together: `requests` and `pods` are all of them (0: not a service). A waiting service
    asks for its `replicas.min`; an admitted one holds its current replicas."""



_WORKLOAD_FIELDS = tuple(f.name for f in fields(Workload))
_WORKLOAD_FIELDS_SET = frozenset(_WORKLOAD_FIELDS)
_WORKLOAD_INDEX = {name: i for i, name in enumerate(_WORKLOAD_FIELDS)}
_workload_values = operator.attrgetter(*_WORKLOAD_FIELDS)  # every field in one C call
# the slots' own setters (what object.__setattr__ ends in, without the lookup by name)
_WORKLOAD_SETTERS = tuple(Workload.__dict__[name].__set__ for name in _WORKLOAD_FIELDS)


def evolve(wl: Workload, **changes) -> Workload:
    """`dataclasses.replace(wl, **changes)` for a Workload at a fifth of the cost (no `__init__`
    call with every field by keyword; the fields read at once and set through their slots): the
    engine copies each workload it admits, the simulator each one it starts. Workload has no
    `__post_init__`, so nothing is skipped; an unknown field raises TypeError as replace does."""
    values = list(_workload_values(wl))
    index = _WORKLOAD_INDEX
    for name, v in changes.items():
        i = index.get(name)
        if i is None:
            raise TypeError(f"Workload has no field(s) {sorted(changes.keys() - _WORKLOAD_FIELDS_SET)}")
        values[i] = v
    new = object.__new__(Workload)
    for setter, v in zip(_WORKLOAD_SETTERS, values, strict=True):
        setter(new, v)
    return new

@dataclass(frozen=True, slots=True)
class NodeSpec:
    """One node of a flavor and the GPUs (`nvidia.com/gpu`) it has (see `admission/nodes.py`)."""

    name: str
    flavor: str
    gpus: float


@dataclass(frozen=True, slots=True)
class FlavorFungibility:
    """Kueue's flavorFungibility (v1beta2 words): MayStopSearch | TryNextFlavor.

    preference=None: Kueue's default (BorrowingOverPreemption); or PreemptionOverBorrowing.
    """

    when_can_borrow: str = "MayStopSearch"
    when_can_preempt: str = "TryNextFlavor"
    preference: str | None = None


@dataclass(frozen=True, slots=True)
class ClusterState:
    """Everything one admission cycle looks at.

    cohorts: the cohort tree; a bare name is a root without quota, and a cohort a cluster queue
    names but nobody lists is an implicit root. ignore_undeclared_resources: Kueue's
    QuotaCheckStrategy IgnoreUndeclared (a requested resource the queue has no quota for is not
    governed by it); False: such a workload is inadmissible, Kueue's default.
    nodes: the nodes of the flavors whose GPUs are placed per node (gang jobs need whole free
    nodes); empty: quota only, Kueue's view (a flavor with no node listed is never node-checked).
    """

    cluster_queues: tuple[ClusterQueueSpec, ...]
    flavors: tuple[FlavorSpec, ...]
    admitted: tuple[Workload, ...] = ()
    pending: tuple[Workload, ...] = ()
    cohorts: tuple[CohortSpec | str, ...] = ()
    fair_sharing: bool = False
    flavor_fungibility: FlavorFungibility = field(default_factory=FlavorFungibility)
    now: float = 0.0
    ignore_undeclared_resources: bool = False
    nodes: tuple[NodeSpec, ...] = ()
    reservations: tuple = ()
    """Head reservations in force this cycle (`admission/reservation.py` `Reservation`s, planned by
    the gate or the simulator from its running work); empty: none."""


@dataclass(frozen=True, slots=True)
class Admission:
    """A workload that got quota this cycle (conditions QuotaReserved and Admitted).

    placement: the nodes its pods were given ({node: GPUs}) when the state has nodes for its
    flavor; None: quota only (no nodes in the state, or none for that flavor).
    """

    name: str
    cq: str
    flavor: str
    borrowing: bool
    condition: str = ADMITTED
    message: str = ""
    flavors: Mapping[str, str] | None = None
    placement: Mapping[str, float] | None = None


@dataclass(frozen=True, slots=True)
class Preemption:
    """A running workload to evict. reason: InClusterQueue | InCohortReclamation |
    InCohortReclaimWhileBorrowing | InCohortFairSharing."""

    victim: str
    victim_cq: str
    preemptor: str
    preemptor_cq: str
    reason: str
    message: str
    condition: str = PREEMPTED


@dataclass(slots=True, unsafe_hash=True)
class PendingInfo:
    """Why a workload still waits. condition is Kueue's (QuotaReserved=False); reason_code one of
    Inadmissible, PendingPreemption, Pending, BudgetExhausted, TeamLimit. position is 1-based in its queue
    (priority desc, then created_at asc). estimated_start=None: no estimate possible.
    queue: where Kueue's queue manager keeps it: `active` (tried again next cycle) or
    `inadmissible` (a BestEffortFIFO head that could not be admitted, set aside until capacity
    changes). Never mutated (change one with `dataclasses.replace`); not declared frozen because
    a cycle builds one per waiting workload and a frozen dataclass's __init__ costs 10x more
    (40 ms of a 10k-pending cycle, docs/BENCHMARKS.md)."""

    name: str
    cq: str
    reason_code: str
    condition: str
    message: str
    position: int
    of: int
    estimated_start: float | None = None
    flavor: str | None = None
    queue: str = "active"


@dataclass(frozen=True, slots=True)
class Rejection:
    """A workload that can never be admitted as submitted (e.g. max_cost above the lane's budget)."""

    name: str
    cq: str
    reason_code: str
    message: str


@dataclass(frozen=True, slots=True)
class CycleResult:
    admitted: list[Admission]
    preempted: list[Preemption]
    pending: list[PendingInfo]
    rejected: list[Rejection]
    cycles: int = 1
    per_cycle: list[CycleLog] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class CycleLog:
    """What one cycle of `schedule_until_stable` did."""

    admitted: tuple[Admission, ...]
    preempted: tuple[Preemption, ...]
