"""Validated policy model. Field names follow Kueue's ClusterQueue API in snake_case."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from functools import cached_property
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gpu_platform.devices.sharing import (
    SHARED,
    SHARING_MODES,
    SharingMode,
    is_gpu_resource,
    mig_resource,
    parse_layout,
)
from gpu_platform.policy.capacity import CapacitySignals
from gpu_platform.policy.scale import DEFAULT_SCALE, Scale
from gpu_platform.units import parse_duration

GPU = "nvidia.com/gpu"
SITE_LABEL = "gpu-platform.io/site"
"""Node label of a site's flavors (`sites:`), added to their `node_labels` when the policy is read."""

PreemptWithin = Literal["Never", "LowerPriority", "LowerOrNewerEqualPriority"]
Reclaim = Literal["Never", "LowerPriority", "Any"]
BorrowPolicy = Literal["Never", "LowerPriority"]
NodePool = Literal["training", "inference", "spot"]
QueueingStrategy = Literal["StrictFIFO", "BestEffortFIFO"]
BudgetPeriod = Literal["day", "week", "month"]
WorkloadKind = Literal[
    "label_batch", "training_run", "replay", "map_segmentation", "evidence_pack", "released_model", "released_map",
    "service",
]
WORKLOAD_KINDS: tuple[str, ...] = WorkloadKind.__args__


class PolicyError(ValueError):
    """A policy file that does not validate. `errors` lists every problem as `path: message`."""

    def __init__(self, errors: list[str], source: str = "policy"):
        self.errors = errors
        self.source = source
        super().__init__(f"{source}: {len(errors)} error(s)\n" + "\n".join(f"  {e}" for e in errors))


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Taint(_Frozen):
    """A node taint that pods on this flavor must tolerate."""

    key: str
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"


class Sharing(_Frozen):
    """How a flavor's GPUs are offered (see `gpu_platform.devices.sharing`).

    exclusive: whole GPUs (`nvidia.com/gpu`). mig: every GPU cut into `layout` (`"7 x 1g.10gb"` or
    `"3 x 2g.20gb + 1 x 1g.10gb"`), offered as `nvidia.com/mig-<profile>`; `profile_weights`
    (optional) price a profile as that share of a GPU instead of compute slices / 7. shared:
    `replicas` time-slicing / MPS replicas per GPU as `nvidia.com/gpu.shared`, each limited to
    `replica_memory_gib` that the workload must respect (device-plugin sharing does not enforce it).
    """

    mode: SharingMode = "exclusive"
    layout: dict[str, int] | None = None
    profile_weights: dict[str, float] | None = None
    replicas: int | None = Field(default=None, ge=2)
    replica_memory_gib: float | None = Field(default=None, gt=0)

    @field_validator("layout", mode="before")
    @classmethod
    def _layout(cls, v: Any) -> Any:
        return None if v is None else parse_layout(v)


class Flavor(_Frozen):
    """A Kueue ResourceFlavor: one GPU product in one node pool.

    capacity: total amount per resource in the pool (`nvidia.com/gpu` required: the physical GPUs;
    `cpu` in cores, `memory` in GiB when present). sharing: how those GPUs are offered; `offered`
    is the capacity per resource name the device plugin exposes.
    """

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    gpu_product: str
    node_pool: NodePool
    spot: bool = False
    capacity: dict[str, float]
    taints: tuple[Taint, ...] = ()
    node_labels: dict[str, str] = Field(default_factory=dict)
    sharing: Sharing = Sharing()
    node_gpus: int | None = Field(default=None, gt=0)
    """GPUs on one node of this flavor; None: its node pool's `autoscaling.node_pools.<pool>.node_gpus`
    (no node pool entry either: no node shape, the flavor is one pool of GPUs as Kueue's quota sees it)."""
    topology_levels: tuple[str, ...] | None = None
    """Node labels of the topology its nodes carry, widest first (`topology.kubernetes.io/zone`, a
    block/rack label, `kubernetes.io/hostname`); None: its node pool's; () : none."""

    @field_validator("capacity")
    @classmethod
    def _capacity(cls, v: dict[str, float]) -> dict[str, float]:
        if GPU not in v:
            raise ValueError(f"must declare {GPU}")
        bad = [k for k, amount in v.items() if amount < 0]
        if bad:
            raise ValueError(f"negative capacity for {', '.join(bad)}")
        return v

    @property
    def gpus(self) -> int:
        return int(self.capacity[GPU])

    @property
    def offered(self) -> dict[str, float]:
        """Capacity per resource as the device plugin exposes it (MIG slices, shared replicas)."""
        return offered_capacity(self.capacity, self.sharing)

    @property
    def gpu_resources(self) -> tuple[str, ...]:
        return tuple(r for r in self.offered if is_gpu_resource(r))


class Quota(_Frozen):
    """Quota of one lane (or cohort) for one (flavor, resource).

    borrowing_limit=None: no limit on borrowing from the parent cohort; must be None without one.
    lending_limit=None: all of the nominal quota may be lent to the parent cohort.
    """

    flavor_name: str
    resource: str = GPU
    nominal_quota: float = Field(ge=0)
    borrowing_limit: float | None = Field(default=None, ge=0)
    lending_limit: float | None = Field(default=None, ge=0)


class Cohort(_Frozen):
    """A Kueue v1beta2 Cohort: a node of the cohort tree that lanes borrow through.

    parent_name=None: a root cohort. quotas: capacity the cohort itself holds for its subtree
    (a lending_limit keeps part of it for the subtree only; limits only on a cohort with a parent).
    fair_sharing_weight: the subtree's weight against its siblings under fair sharing.
    """

    name: str
    description: str = ""
    parent_name: str | None = None
    quotas: tuple[Quota, ...] = ()
    fair_sharing_weight: float = Field(default=1.0, gt=0)


class BorrowWithinCohort(_Frozen):
    """Kueue's borrowWithinCohort: may preempt lower-priority workloads while borrowing.

    max_priority_threshold=None: any priority below the preemptor's may be preempted.
    """

    policy: BorrowPolicy = "Never"
    max_priority_threshold: int | None = None


class Preemption(_Frozen):
    within_cluster_queue: PreemptWithin = "Never"
    reclaim_within_cohort: Reclaim = "Never"
    borrow_within_cohort: BorrowWithinCohort = BorrowWithinCohort()


class TeamCap(_Frozen):
    """What one team may run at once in a lane. max_gpus: GPU devices held (whole GPUs, MIG slices
    and shared replicas each count one); max_share: a share (0, 1] of the most the lane can hold
    (its GPU quota rows' nominal plus borrowing limits, capped by the pool), floored, at least 1 (with
    max_gpus too, the smaller applies); max_running: admitted jobs. A field left out: no cap of
    that kind (in a team's own entry: the lane default's; max_gpus and max_share are one GPU cap,
    so a team entry that sets either replaces the default's GPU cap)."""

    max_gpus: int | None = Field(default=None, ge=1)
    max_share: float | None = Field(default=None, gt=0, le=1)
    max_running: int | None = Field(default=None, ge=1)


class LaneTargets(_Frozen):
    """Service targets of a lane, judged by `gpu-platform simulate` (met / missed per lane) and,
    for `wait_p95`, by the capacity signal `lane_wait_target_missed` on live data.

    wait_p95: the lane's p95 wait from submission to admission is at most this long.
    wait_p95_vs_fifo: ... at most this share of the p95 wait the same jobs get under one FIFO
    queue with backfilling (`fifo-backfill`; simulate only: live data has no FIFO to compare).
    max_lost_gpu_hours_share: GPU-hours lost to preemption at most this share of the GPU-hours the
    lane's jobs held.
    boost_after: aging toward `wait_p95`: a workload of the lane gains `boost` priority for each
    `boost_after` x `wait_p95` it has waited, up to one below the next higher lane's priority
    (Kueue's `kueue.x-k8s.io/priority-boost` annotation, KEP-7990, which an external controller
    sets; `simulate` and the gate's engine apply it, the gate sets it on waiting Workloads on a
    cluster: `gpu_platform.policy.aging`, docs/admission.md, Aging): older work sorts ahead of younger
    work of its lane and may preempt the lane's younger running work where `within_cluster_queue`
    lets a higher priority preempt. None: no aging; without `wait_p95` it has no effect.
    boost: the priority gained per step (1). The default step is the target itself (1.0): on the
    tuning trace (ElasticFlow cluster04) a step of half the target cost candidate training 2 h of
    p95 against FIFO with backfill; docs/simulator.md.
    reserve_head: the lane's blocked head reserves the GPUs it waits for against lower-priority
    work that would delay it (EASY backfilling, a gate rule: `admission/reservation.py`, docs/
    admission.md, Head reservations); needs `wait_p95`. Off unless set; the packaged policy sets it
    on its evidence lanes. On a pool overloaded many times over it costs the simulator about three
    times the CPU (docs/simulator.md, Performance).
    """

    wait_p95: timedelta | None = None
    wait_p95_vs_fifo: float | None = Field(default=None, gt=0)
    max_lost_gpu_hours_share: float | None = Field(default=None, ge=0, le=1)
    boost_after: float | None = Field(default=1.0, gt=0, le=1)
    boost: int = Field(default=1, ge=1)
    reserve_head: bool = False

    @field_validator("wait_p95", mode="before")
    @classmethod
    def _wait(cls, v: Any) -> timedelta | None:
        return None if v is None else parse_duration(v)


class TeamLimits(_Frozen):
    """`lanes.<lane>.team_limits`: `default` for every team not listed, `teams` per named team
    (overriding the default per cap: GPUs, running jobs). Enforced by the admission engine (`TeamLimit`)."""

    default: TeamCap | None = None
    teams: dict[str, TeamCap] = Field(default_factory=dict)


ApprovalKind = Literal["safety", "cost", "incident"]
APPROVAL_KINDS: tuple[str, ...] = ApprovalKind.__args__


class ApproverRole(_Frozen):
    """One role of the approver roster: who holds it and what it may approve.

    may_approve: `safety` (a preemption the victim lane's yields_to would refuse), `cost`
    (running over the lane's budget) and/or `incident` (opening work in a lane with
    `requires_approval: incident`, the incident lane). members: people or groups, as the
    verified identity (docs/approvals.md, Identity) or `gpu-platform approve --approver` names them.
    """

    description: str = ""
    may_approve: tuple[ApprovalKind, ...] = Field(min_length=1)
    members: tuple[str, ...] = Field(min_length=1)
    second_approvers: tuple[str, ...] = ()
    """Break-glass (`incident`) only: people or groups who may grant this role's incident approval
    when no member may (every member submitted or owns the request: nobody approves their own)."""
    submit_for_others: bool = False
    """Members may submit a request whose owner, team and cost center are not their own (it is
    recorded as submitted by them on behalf of the owner: docs/approvals.md, Identity)."""


BREAK_GLASS_KINDS: tuple[str, ...] = ("incident",)
"""Approval kinds that are break-glass: each grant, once used or expired, opens a retrospective."""
DEFAULT_APPROVAL_TTL: dict[str, timedelta] = {
    "incident": timedelta(hours=48), "safety": timedelta(hours=48), "cost": timedelta(days=31),
}


class Approvals(_Frozen):
    """`approvals`: how long a grant of each kind lets a request be admitted (`ttl`; a kind left
    out keeps its default: incident and safety 48h, cost 31d). After it the gate no longer admits
    on the grant, and an expired or used break-glass grant opens a retrospective item."""

    ttl: dict[ApprovalKind, timedelta] = Field(default_factory=lambda: dict(DEFAULT_APPROVAL_TTL))

    @field_validator("ttl", mode="before")
    @classmethod
    def _ttl(cls, v: Any) -> Any:
        if not isinstance(v, dict):
            return v
        out = dict(DEFAULT_APPROVAL_TTL)
        for k, d in v.items():
            out[k] = parse_duration(d)
            if out[k] <= timedelta(0):
                raise ValueError(f"{k}: an approval's lifetime must be positive")
        return out

    def lifetime(self, kind: str) -> timedelta:
        return self.ttl.get(kind, DEFAULT_APPROVAL_TTL.get(kind, timedelta(hours=48)))  # type: ignore[call-overload]


class LaneAdmissionFairSharing(_Frozen):
    """`lanes.<lane>.admission_fair_sharing`: the lane's ClusterQueue orders its teams' LocalQueues
    by their decayed historical usage (Kueue's Admission Fair Sharing, `admissionScope:
    UsageBasedAdmissionFairSharing`). team_weights: a team's LocalQueue weight (its usage counts
    divided by it); a team not listed weighs 1."""

    team_weights: dict[str, float] = Field(default_factory=dict)

    @field_validator("team_weights")
    @classmethod
    def _positive(cls, v: dict[str, float]) -> dict[str, float]:
        bad = [f"{t}={w}" for t, w in v.items() if not w > 0]
        if bad:
            raise ValueError(f"team weights must be > 0 (got {', '.join(bad)})")
        return v


class AdmissionFairSharingConfig(_Frozen):
    """`admission_fair_sharing`: how Kueue keeps each LocalQueue's usage (its manager
    Configuration's `admissionFairSharing`). usage_half_life: after this long, past usage counts
    half; usage_sampling_interval: how often usage is sampled; resource_weights: what one unit of
    a resource counts (absent resources count 1)."""

    usage_half_life: timedelta = timedelta(hours=168)
    usage_sampling_interval: timedelta = timedelta(minutes=5)
    resource_weights: dict[str, float] = Field(default_factory=dict)

    @field_validator("usage_half_life", "usage_sampling_interval", mode="before")
    @classmethod
    def _duration(cls, v: Any) -> timedelta:
        return parse_duration(v)

    @field_validator("usage_half_life", "usage_sampling_interval")
    @classmethod
    def _positive_duration(cls, v: timedelta) -> timedelta:
        if v <= timedelta(0):
            raise ValueError("must be longer than 0")
        return v

    @field_validator("resource_weights")
    @classmethod
    def _weights(cls, v: dict[str, float]) -> dict[str, float]:
        bad = [f"{r}={w}" for r, w in v.items() if w < 0]
        if bad:
            raise ValueError(f"resource weights must be >= 0 (got {', '.join(bad)})")
        return v


class Lane(_Frozen):
    """One workload class: a Kueue ClusterQueue plus the platform's lane rules.

    yields_to=None: plain Kueue rules decide who may preempt this lane's jobs. A list: only
    preemptors from those lanes, or carrying a safety-owner approval, may.
    protected: this lane's running jobs are never preemption victims.
    evidence: the lane produces release/safety evidence; its jobs are preemption candidates only
    once checkpointed with immutable logs.
    sharing_modes: the ways the lane may use GPUs (exclusive, mig, shared); an evidence lane may not
    use shared GPUs (no memory isolation between tenants, so results are not reproducible).
    serving: the lane's requests are long-running services (`workload: service` with a `service:`
    block; docs/serving.md); a serving lane is protected and no other lane may reclaim its replicas
    (`policy check` refuses a policy that would let one).
    lend_to_evidence (serving lanes only): its idle quota is lent to evidence runs not yet
    checkpointed too. Such a run refuses preemption until its first checkpoint, so a scale-up may
    wait that long for its GPUs; False (the default): the gate keeps those runs off them.
    evidence_reclaim_after (serving lanes with lend_to_evidence only): the bound on that wait. An
    evidence run that has run this long without a checkpoint may be reclaimed by the serving lane
    all the same (its work since it started is lost, and counted as lost); None: the serving lane
    waits for the checkpoint however long it takes (up to the borrower's max_run_duration).
    """

    name: str
    description: str
    default_workload: WorkloadKind
    priority: int
    protected: bool = False
    serving: bool = False
    lend_to_evidence: bool = False
    evidence_reclaim_after: timedelta | None = None
    cohort_name: str | None = None
    queueing_strategy: QueueingStrategy = "BestEffortFIFO"
    required_fields: tuple[str, ...] = ()
    quotas: tuple[Quota, ...]
    preemption: Preemption = Preemption()
    yields_to: tuple[str, ...] | None = None
    evidence: bool = False
    sharing_modes: tuple[SharingMode, ...] = SHARING_MODES
    max_concurrent_runs: int = Field(ge=1)
    max_run_duration: timedelta
    budget: Decimal = Field(ge=0)
    default_retention: timedelta
    fair_sharing_weight: float = Field(default=1.0, gt=0)
    team_limits: TeamLimits | None = None
    admission_fair_sharing: LaneAdmissionFairSharing | None = None
    """Set: Kueue itself orders the lane's teams by decayed usage (`LaneAdmissionFairSharing`);
    None: the lane's queue is one priority/age order for every team."""
    targets: LaneTargets | None = None
    """Service targets (`LaneTargets`): what `simulate` and the scorecards judge the lane by."""
    requires_approval: ApprovalKind | None = None
    """Set (`incident` for incident_response): a request is admitted only when its `approver`
    is a member of a roster role that may approve this kind, or a roster member granted it with
    `gpu-platform approve --kind <kind>`; until then it waits (`ApprovalRequired`)."""

    @field_validator("max_run_duration", "default_retention", mode="before")
    @classmethod
    def _duration(cls, v: Any) -> timedelta:
        return parse_duration(v)

    @field_validator("evidence_reclaim_after", mode="before")
    @classmethod
    def _reclaim_after(cls, v: Any) -> timedelta | None:
        return None if v is None else parse_duration(v)

    @field_validator("evidence_reclaim_after")
    @classmethod
    def _reclaim_after_positive(cls, v: timedelta | None) -> timedelta | None:
        if v is not None and v <= timedelta(0):
            raise ValueError("must be longer than 0")
        return v

    def quota(self, flavor_name: str, resource: str = GPU) -> Quota | None:
        for q in self.quotas:
            if q.flavor_name == flavor_name and q.resource == resource:
                return q
        return None

    @property
    def flavor_names(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for q in self.quotas:
            seen.setdefault(q.flavor_name)
        return tuple(seen)


def offered_capacity(capacity: dict[str, float], sharing: Sharing) -> dict[str, float]:
    gpus = capacity.get(GPU, 0)
    out = {k: v for k, v in capacity.items() if k != GPU}
    if sharing.mode == "mig":
        for profile, n in (sharing.layout or {}).items():
            out[mig_resource(profile)] = gpus * n
    elif sharing.mode == "shared":
        out[SHARED] = gpus * (sharing.replicas or 1)
    else:
        out[GPU] = gpus
    return out


class NodeShape(_Frozen):
    """How a flavor's GPUs sit on nodes. gpus_per_node: GPUs on one node (capped by the flavor's
    capacity); total_gpus: the flavor's capacity; full_nodes: nodes holding gpus_per_node each (a
    capacity that is not a multiple of the node size leaves one smaller node, which only jobs of
    one node use); topology_levels: node labels widest first (empty: none declared)."""

    flavor_name: str
    gpus_per_node: int
    total_gpus: int
    topology_levels: tuple[str, ...] = ()

    @property
    def full_nodes(self) -> int:
        return self.total_gpus // self.gpus_per_node if self.gpus_per_node else 0

    @property
    def node_sizes(self) -> tuple[int, ...]:
        """GPUs of each node, full nodes first."""
        rest = self.total_gpus - self.full_nodes * self.gpus_per_node
        return (self.gpus_per_node,) * self.full_nodes + ((rest,) if rest > 0 else ())

    def placeable(self, gpus: int) -> bool:
        """One pod on one node (at most a node), or whole nodes of this flavor."""
        if gpus <= self.gpus_per_node:
            return True
        return gpus % self.gpus_per_node == 0 and gpus // self.gpus_per_node <= self.full_nodes

    def shape_of(self, gpus: int) -> tuple[int, int]:
        """(nodes, gpus per node) of a placeable count: (1, gpus) up to one node."""
        if gpus <= self.gpus_per_node:
            return 1, gpus
        return gpus // self.gpus_per_node, self.gpus_per_node


class Team(_Frozen):
    """budget=None: the team has no budget of its own (its lanes' budgets still apply); set: its
    spend over all lanes per `budget_period`, which the cost forecast's budget burn judges (the
    admission engine reserves against lane budgets only)."""

    name: str
    cost_center: str
    namespace: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    data_access_scopes: tuple[str, ...]
    site: str | None = None
    budget: Decimal | None = Field(default=None, ge=0)
    aliases: tuple[Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$")], ...] = ()
    """Names the team had before (a renamed team's former name, a namespace it moved out of): the
    cost models charge history recorded under an alias (requests of the ledger, pods in that
    namespace) to this team (docs/finops.md, "A fleet that changes"). An alias may not be another
    team's name, namespace or alias (checked when the policy loads)."""
    members: tuple[str, ...] = ()
    """People (as the identity source names them) and groups (`group:<name>`, as it reports
    them) who may submit for this team and its cost center (docs/approvals.md, Identity).
    Empty: nobody but a roster role with `submit_for_others` may, once a verified identity is
    required."""


class FairSharing(_Frozen):
    enabled: bool = False


# --- autoscaling: node pools and warm pools (read by `gpu-platform autoscale plan` and /metrics) ---


class NodePoolScaling(_Frozen):
    """How one node pool grows, and the shape of its nodes.

    node_gpus: GPUs on one node of the pool (every flavor in the pool has nodes of this size unless
    it sets its own `node_gpus`); topology_levels: the node labels of the pool's topology, widest
    first, ending at `kubernetes.io/hostname` when it is listed (Kueue's Topology levels); startup_time: from scale-up to a node taking work
    (running jobs that end sooner free GPUs faster than a new node arrives);
    max_nodes=None: as many nodes as the capacity of the pool's flavors holds.
    """

    node_gpus: int = Field(gt=0)
    startup_time: timedelta
    topology_levels: tuple[str, ...] = ()
    min_nodes: int = Field(default=0, ge=0)
    max_nodes: int | None = Field(default=None, ge=0)

    @field_validator("startup_time", mode="before")
    @classmethod
    def _startup(cls, v: Any) -> timedelta:
        return parse_duration(v)


class WarmPool(_Frozen):
    """GPUs kept free (nodes kept up) in a node pool for one lane, so its jobs never wait for a node."""

    lane: str
    node_pool: NodePool
    gpus: int = Field(gt=0)


CHECK_CAPACITY_CLASS = "check-capacity.autoscaling.x-k8s.io"


class ProvisioningRetry(_Frozen):
    """Kueue's ProvisioningRequestConfig `retryStrategy`: how often a failed or expired
    ProvisioningRequest is retried (backoff_limit_count=0: never), base and cap of the exponential
    backoff in seconds."""

    backoff_limit_count: int = Field(default=3, ge=0)
    backoff_base_seconds: int = Field(default=60, ge=1)
    backoff_max_seconds: int = Field(default=1800, ge=1)


class Provisioning(_Frozen):
    """`autoscaling.provisioning`: ask cluster-autoscaler for nodes per Workload through Kueue's
    ProvisioningRequest admission check (exported as one AdmissionCheck and its
    ProvisioningRequestConfig; the ClusterQueues of the lanes with quota in these pools list the
    check on those pools' flavors only). Left out: no check, the plan's nodes are advisory.

    provisioning_class_name: cluster-autoscaler's class (`best-effort-atomic-scale-up.autoscaling.x-k8s.io`,
    the default: scales up all of a Workload's nodes or none; `check-capacity.autoscaling.x-k8s.io`
    only checks that the nodes exist, scaling nothing, so the plan keeps that demand;
    `queued-provisioning.gke.io` on GKE). node_pools=None: every pool of `node_pools` with
    `min_nodes: 0` (the pools that scale from zero). managed_resources=None: the GPU resources of
    those pools' flavors (a pod set asking for none of them is ready without a request).
    parameters: the class's own parameters, passed through.
    """

    provisioning_class_name: str = Field(
        default="best-effort-atomic-scale-up.autoscaling.x-k8s.io",
        max_length=253,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
    )
    node_pools: tuple[NodePool, ...] | None = None
    managed_resources: tuple[str, ...] | None = None
    parameters: dict[str, str] = Field(default_factory=dict)
    retry: ProvisioningRetry = ProvisioningRetry()

    @property
    def scales_up(self) -> bool:
        """Whether cluster-autoscaler adds nodes for these requests (every class but check-capacity)."""
        return self.provisioning_class_name != CHECK_CAPACITY_CLASS


class Autoscaling(_Frozen):
    node_pools: dict[NodePool, NodePoolScaling]
    warm_pools: tuple[WarmPool, ...] = ()
    provisioning: Provisioning | None = None
    """None: no ProvisioningRequest admission check (the default); see `Provisioning`."""

    @property
    def provisioned_pools(self) -> tuple[str, ...]:
        """The node pools whose flavors the ProvisioningRequest check covers (none without `provisioning`)."""
        if self.provisioning is None:
            return ()
        if self.provisioning.node_pools is not None:
            return tuple(self.provisioning.node_pools)
        return tuple(name for name, pool in self.node_pools.items() if pool.min_nodes == 0)


class Site(_Frozen):
    """`sites.<name>`: a worker cluster of MultiKueue (one per site), which holds the listed flavors
    and every flavor of the listed node pools. The manager cluster reaches it through the kubeconfig
    in Secret `kubeconfig_secret` (key `kubeconfig`) in Kueue's own namespace. A request whose
    `site` names it is admitted only on its flavors and runs only in its cluster."""

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)
    description: str = ""
    kubeconfig_secret: str = Field(
        max_length=253, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
    )
    flavors: tuple[str, ...] = ()
    node_pools: tuple[NodePool, ...] = ()


class Policy(_Frozen):
    version: int = 1
    currency: str = Field(default="USD", pattern=r"^[A-Z]{3}$")
    budget_period: BudgetPeriod = "month"
    fair_sharing: FairSharing = FairSharing()
    admission_fair_sharing: AdmissionFairSharingConfig = AdmissionFairSharingConfig()
    flavors: tuple[Flavor, ...]
    cohorts: tuple[Cohort, ...] = ()
    common_required_fields: tuple[str, ...] = ()
    lanes: dict[str, Lane]
    teams: dict[str, Team]
    autoscaling: Autoscaling | None = None  # None: `autoscale plan` has nothing to plan
    approvers: dict[str, ApproverRole] = Field(default_factory=dict)  # role -> who, what (docs/approvals.md)
    approvals: Approvals = Approvals()  # lifetimes of grants (docs/approvals.md)
    scale: Scale = DEFAULT_SCALE  # the scale ladder (policy/scale.py): metadata, scorecards, ERROR signals
    capacity_signals: CapacitySignals = CapacitySignals()  # thresholds of the capacity signals
    sites: dict[str, Site] = Field(default_factory=dict)
    """Worker clusters of MultiKueue by site name (`Site`); empty: one cluster, `site` is a label."""

    model_config = ConfigDict(frozen=True, extra="forbid", ignored_types=(cached_property,))

    @property
    def derived(self) -> dict[Any, Any]:
        """Answers derived from this policy alone, kept for its life (the policy is frozen):
        `matching_flavors` and the like are asked once per (lane, gpu_type, ...) instead of once
        per request on every gate tick. Tagged with the policy's id, since `model_copy` copies the
        instance dict (and so any cached value) into a copy that may differ."""
        memo = self.__dict__.get("_derived")
        if memo is None or memo[0] != id(self):
            memo = (id(self), {})
            self.__dict__["_derived"] = memo
        return memo[1]

    @cached_property
    def flavor_by_name(self) -> dict[str, Flavor]:
        return {f.name: f for f in self.flavors}

    def flavor(self, name: str) -> Flavor:
        return self.flavor_by_name[name]

    def lane(self, name: str) -> Lane:
        return self.lanes[name]

    @cached_property
    def site_of_flavor(self) -> dict[str, str]:
        """flavor name -> the site that holds it (flavors on no site are left out)."""
        out: dict[str, str] = {}
        for site in self.sites.values():
            for f in self.flavors:
                if f.name in site.flavors or f.node_pool in site.node_pools:
                    out.setdefault(f.name, site.name)
        return out

    def site_flavors(self, site: str) -> tuple[str, ...]:
        """The flavors of one site, in the policy's order (its capacity)."""
        return tuple(f.name for f in self.flavors if self.site_of_flavor.get(f.name) == site)

    def lane_sites(self, lane: str) -> tuple[str, ...]:
        """The sites a lane's flavors live on, in `sites:` order (empty: the lane runs on the manager)."""
        held = {self.site_of_flavor.get(q.flavor_name) for q in self.lanes[lane].quotas}
        return tuple(s for s in self.sites if s in held)

    def team(self, name: str) -> Team:
        return self.teams[name]

    def node_shape(self, flavor_name: str) -> NodeShape | None:
        """The node shape of a flavor (from its node pool, or its own `node_gpus`); None: no shape
        (no node size declared, or a fractional flavor, whose slices are not placed per node here)."""
        return self.node_shapes.get(flavor_name)

    @cached_property
    def node_shapes(self) -> dict[str, NodeShape]:
        out: dict[str, NodeShape] = {}
        pools = self.autoscaling.node_pools if self.autoscaling is not None else {}
        for f in self.flavors:
            pool = pools.get(f.node_pool)
            gpus = f.node_gpus if f.node_gpus is not None else (pool.node_gpus if pool is not None else None)
            if gpus is None or f.sharing.mode != "exclusive":
                continue
            levels = f.topology_levels if f.topology_levels is not None else (pool.topology_levels if pool else ())
            out[f.name] = NodeShape(
                flavor_name=f.name,
                gpus_per_node=min(gpus, f.gpus) if f.gpus else gpus,
                total_gpus=f.gpus,
                topology_levels=tuple(levels),
            )
        return out

    @property
    def largest_flavor_gpus(self) -> int:
        return max(f.gpus for f in self.flavors)

    def lanes_by_priority(self) -> list[Lane]:
        return sorted(self.lanes.values(), key=lambda lane: -lane.priority)
