"""Validated policy model. Field names follow Kueue's ClusterQueue API in snake_case."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from decimal import Decimal
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from gpu_platform.policy.capacity import CapacitySignals, capacity_signal_errors
from gpu_platform.policy.scale import DEFAULT_SCALE, Scale
from gpu_platform.safeload import POLICY_LIMITS, InputError, load_document
from gpu_platform.sharing import (
    SHARED,
    SHARING_MODES,
    SharingMode,
    is_gpu_resource,
    layout_errors,
    mig_resource,
    mode_of,
    parse_layout,
)
from gpu_platform.units import parse_duration

GPU = "nvidia.com/gpu"

PreemptWithin = Literal["Never", "LowerPriority", "LowerOrNewerEqualPriority"]
Reclaim = Literal["Never", "LowerPriority", "Any"]
BorrowPolicy = Literal["Never", "LowerPriority"]
NodePool = Literal["training", "inference", "spot"]
QueueingStrategy = Literal["StrictFIFO", "BestEffortFIFO"]
BudgetPeriod = Literal["day", "week", "month"]
WorkloadKind = Literal[
    "label_batch", "training_run", "replay", "map_segmentation", "evidence_pack", "released_model", "released_map"
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
    """How a flavor's GPUs are offered (see `gpu_platform.sharing`).

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


class TeamLimits(_Frozen):
    """`lanes.<lane>.team_limits`: `default` for every team not listed, `teams` per named team
    (overriding the default per cap: GPUs, running jobs). Enforced by the admission engine (`TeamLimit`)."""

    default: TeamCap | None = None
    teams: dict[str, TeamCap] = Field(default_factory=dict)


ApprovalKind = Literal["safety", "cost"]
APPROVAL_KINDS: tuple[str, ...] = ApprovalKind.__args__


class ApproverRole(_Frozen):
    """One role of the approver roster: who holds it and what it may approve.

    may_approve: `safety` (a preemption the victim lane's yields_to would refuse) and/or `cost`
    (running over the lane's budget). members: people or groups, as `gpu-platform approve
    --approver` names them.
    """

    description: str = ""
    may_approve: tuple[ApprovalKind, ...] = Field(min_length=1)
    members: tuple[str, ...] = Field(min_length=1)


class Lane(_Frozen):
    """One workload class: a Kueue ClusterQueue plus the platform's lane rules.

    yields_to=None: plain Kueue rules decide who may preempt this lane's jobs. A list: only
    preemptors from those lanes, or carrying a safety-owner approval, may.
    protected: this lane's running jobs are never preemption victims.
    evidence: the lane produces release/safety evidence; its jobs are preemption candidates only
    once checkpointed with immutable logs.
    sharing_modes: the ways the lane may use GPUs (exclusive, mig, shared); an evidence lane may not
    use shared GPUs (no memory isolation between tenants, so results are not reproducible).
    """

    name: str
    description: str
    default_workload: WorkloadKind
    priority: int
    protected: bool = False
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

    @field_validator("max_run_duration", "default_retention", mode="before")
    @classmethod
    def _duration(cls, v: Any) -> timedelta:
        return parse_duration(v)

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


class Team(_Frozen):
    name: str
    cost_center: str
    namespace: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    data_access_scopes: tuple[str, ...]
    site: str | None = None


class FairSharing(_Frozen):
    enabled: bool = False


# --- autoscaling: node pools and warm pools (read by `gpu-platform autoscale plan` and /metrics) ---


class NodePoolScaling(_Frozen):
    """How one node pool grows.

    node_gpus: GPUs on one node of the pool; startup_time: from scale-up to a node taking work
    (running jobs that end sooner free GPUs faster than a new node arrives);
    max_nodes=None: as many nodes as the capacity of the pool's flavors holds.
    """

    node_gpus: int = Field(gt=0)
    startup_time: timedelta
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


class Autoscaling(_Frozen):
    node_pools: dict[NodePool, NodePoolScaling]
    warm_pools: tuple[WarmPool, ...] = ()


def _autoscaling_errors(raw: dict[str, Any]) -> list[str]:
    """Cross-references of the autoscaling block (pools have flavors, warm lanes exist and may
    hold that many GPUs in the pool)."""
    block = raw.get("autoscaling")
    if not isinstance(block, dict):
        return []
    errors: list[str] = []
    flavors = [f for f in raw.get("flavors") or [] if isinstance(f, dict)]
    pool_of = {f.get("name"): f.get("node_pool") for f in flavors}
    pools = block.get("node_pools") or {}
    if isinstance(pools, dict):
        for name, cfg in pools.items():
            if name not in pool_of.values():
                errors.append(f"autoscaling.node_pools.{name}: no flavor is in node pool {name!r}")
            if isinstance(cfg, dict):
                lo, hi = cfg.get("min_nodes", 0), cfg.get("max_nodes")
                if isinstance(lo, int) and isinstance(hi, int) and lo > hi:
                    errors.append(f"autoscaling.node_pools.{name}.min_nodes: {lo} exceeds max_nodes {hi}")
    lanes = raw.get("lanes") if isinstance(raw.get("lanes"), dict) else {}
    for i, w in enumerate(block.get("warm_pools") or []):
        if not isinstance(w, dict):
            continue
        base = f"autoscaling.warm_pools[{i}]"
        lane, pool, gpus = w.get("lane"), w.get("node_pool"), w.get("gpus")
        if lane not in lanes:
            errors.append(f"{base}.lane: unknown lane {lane!r}")
            continue
        if isinstance(pools, dict) and pool not in pools:
            errors.append(f"{base}.node_pool: {pool!r} has no entry in autoscaling.node_pools")
        quotas = [q for q in (lanes[lane] or {}).get("quotas") or [] if isinstance(q, dict)]
        limit = 0.0
        for q in quotas:
            if pool_of.get(q.get("flavor_name")) == pool and q.get("resource", GPU) == GPU:
                nominal = q.get("nominal_quota") or 0
                borrow = q.get("borrowing_limit")
                limit += float(nominal) + (float(borrow) if isinstance(borrow, int | float) else float("inf"))
        if limit == 0:
            errors.append(f"{base}: lane {lane!r} has no GPU quota on a flavor in node pool {pool!r}")
        elif isinstance(gpus, int | float) and gpus > limit:
            errors.append(f"{base}.gpus: {gpus} exceeds the {limit:g} GPUs lane {lane!r} may hold in node pool {pool!r}")
    return errors

# --- end autoscaling ---


class Policy(_Frozen):
    version: int = 1
    currency: str = Field(default="USD", pattern=r"^[A-Z]{3}$")
    budget_period: BudgetPeriod = "month"
    fair_sharing: FairSharing = FairSharing()
    flavors: tuple[Flavor, ...]
    cohorts: tuple[Cohort, ...] = ()
    common_required_fields: tuple[str, ...] = ()
    lanes: dict[str, Lane]
    teams: dict[str, Team]
    autoscaling: Autoscaling | None = None  # None: `autoscale plan` has nothing to plan
    approvers: dict[str, ApproverRole] = Field(default_factory=dict)  # role -> who, what (docs/approvals.md)
    scale: Scale = DEFAULT_SCALE  # the scale ladder (policy/scale.py): metadata, scorecards, ERROR signals
    capacity_signals: CapacitySignals = CapacitySignals()  # thresholds of the capacity signals

    model_config = ConfigDict(frozen=True, extra="forbid", ignored_types=(cached_property,))

    @cached_property
    def flavor_by_name(self) -> dict[str, Flavor]:
        return {f.name: f for f in self.flavors}

    def flavor(self, name: str) -> Flavor:
        return self.flavor_by_name[name]

    def lane(self, name: str) -> Lane:
        return self.lanes[name]

    def team(self, name: str) -> Team:
        return self.teams[name]

    @property
    def largest_flavor_gpus(self) -> int:
        return max(f.gpus for f in self.flavors)

    def lanes_by_priority(self) -> list[Lane]:
        return sorted(self.lanes.values(), key=lambda lane: -lane.priority)


def default_policy_path() -> Path:
    return Path(__file__).with_name("default.yaml")


def _path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "<root>"


def _semantic_errors(raw: dict[str, Any]) -> list[str]:
    """Cross-reference checks, run on the raw mapping so they report even when types are wrong."""
    errors: list[str] = []
    flavors = raw.get("flavors") or []
    flavor_names = [f.get("name") for f in flavors if isinstance(f, dict)]
    for name, n in Counter(flavor_names).items():
        if n > 1:
            errors.append(f"flavors: duplicate flavor name {name!r}")
    capacity: dict[Any, dict[str, Any]] = {}
    modes: dict[Any, str] = {}
    for i, f in enumerate(flavors):
        if not isinstance(f, dict):
            continue
        cap = f.get("capacity") or {}
        sharing = f.get("sharing") or {}
        errors.extend(_sharing_errors(f"flavors[{i}].sharing", f, sharing))
        try:
            capacity[f.get("name")] = offered_capacity(cap, Sharing.model_validate(sharing))
        except (ValidationError, ValueError, TypeError):
            capacity[f.get("name")] = dict(cap)
        modes[f.get("name")] = sharing.get("mode", "exclusive") if isinstance(sharing, dict) else "exclusive"
    raw_cohorts = [c for c in raw.get("cohorts") or [] if isinstance(c, dict)]
    cohorts = [c.get("name") for c in raw_cohorts]
    for name, n in Counter(cohorts).items():
        if n > 1:
            errors.append(f"cohorts: duplicate cohort name {name!r}")
    nominal_sum: Counter[tuple[str, str]] = Counter()
    errors.extend(_cohort_tree_errors(raw_cohorts, capacity, nominal_sum))
    lanes = raw.get("lanes") or {}
    if not isinstance(lanes, dict):
        return errors
    for lane_name, lane in lanes.items():
        if not isinstance(lane, dict):
            continue
        base = f"lanes.{lane_name}"
        cohort = lane.get("cohort_name")
        if cohort is not None and cohort not in cohorts:
            errors.append(f"{base}.cohort_name: unknown cohort {cohort!r} (known: {', '.join(map(str, cohorts)) or 'none'})")
        seen: set[tuple[Any, Any]] = set()
        for i, q in enumerate(lane.get("quotas") or []):
            if not isinstance(q, dict):
                continue
            qp = f"{base}.quotas[{i}]"
            errors.extend(_quota_errors(qp, q, capacity, seen, nominal_sum))
            if cohort is None:
                for key in ("borrowing_limit", "lending_limit"):
                    if q.get(key) is not None:
                        errors.append(f"{qp}.{key}: set but lane has no cohort_name")
        for i, other in enumerate(lane.get("yields_to") or []):
            if other not in lanes:
                errors.append(f"{base}.yields_to[{i}]: unknown lane {other!r}")
            elif other == lane_name:
                errors.append(f"{base}.yields_to[{i}]: a lane cannot yield to itself")
        allowed = lane.get("sharing_modes") or SHARING_MODES
        if lane.get("evidence") and "shared" in allowed and "sharing_modes" in lane:
            errors.append(
                f"{base}.sharing_modes: an evidence lane may not use shared GPUs (no memory isolation); use exclusive or mig"
            )
        for i, q in enumerate(lane.get("quotas") or []):
            if isinstance(q, dict) and is_gpu_resource(str(q.get("resource", GPU))):
                mode = mode_of(str(q.get("resource", GPU)))
                if mode not in allowed:
                    errors.append(
                        f"{base}.quotas[{i}].resource: {q.get('resource', GPU)} is {mode}, which the lane's "
                        f"sharing_modes ({', '.join(allowed)}) do not allow"
                    )
        if lane.get("protected") and lane.get("yields_to"):
            errors.append(f"{base}.yields_to: a protected lane is never preempted; remove yields_to or protected")
    for (flavor, resource), total in nominal_sum.items():
        cap = capacity.get(flavor, {}).get(resource)
        if isinstance(cap, int | float) and total > cap:
            errors.append(
                f"flavors.{flavor}.capacity.{resource}: lanes' and cohorts' nominal quotas sum to {total:g}, "
                f"more than the capacity {cap:g}"
            )
    priorities = [
        (name, lane.get("priority")) for name, lane in lanes.items() if isinstance(lane, dict)
    ]
    for prio, n in Counter(p for _, p in priorities if p is not None).items():
        if n > 1:
            names = sorted(name for name, p in priorities if p == prio)
            errors.append(f"lanes: priority {prio} is shared by {', '.join(names)}; lane priorities must be distinct")
    teams = raw.get("teams") or {}
    errors.extend(_team_limit_errors(lanes, teams))
    if isinstance(teams, dict):
        namespaces = Counter(t.get("namespace") for t in teams.values() if isinstance(t, dict))
        for ns, n in namespaces.items():
            if n > 1 and ns is not None:
                errors.append(f"teams: namespace {ns!r} used by {n} teams")
    return errors


def _team_limit_errors(lanes: dict[str, Any], teams: Any) -> list[str]:
    """`lanes.*.team_limits`: known teams, and every entry caps something."""
    errors: list[str] = []
    for lane_name, lane in lanes.items():
        tl = lane.get("team_limits") if isinstance(lane, dict) else None
        if not isinstance(tl, dict):
            continue
        entries = [("default", tl.get("default"))]
        if isinstance(tl.get("teams"), dict):
            entries += [(f"teams.{t}", cap) for t, cap in tl["teams"].items()]
        for where, cap in entries:
            path = f"lanes.{lane_name}.team_limits.{where}"
            team = where.removeprefix("teams.")
            if where != "default" and isinstance(teams, dict) and team not in teams:
                errors.append(f"{path}: unknown team {team!r} (known: {', '.join(sorted(teams))})")
            if isinstance(cap, dict) and all(cap.get(k) is None for k in ("max_gpus", "max_share", "max_running")):
                errors.append(f"{path}: set at least one of max_gpus, max_share, max_running")
    return errors


def _sharing_errors(path: str, flavor: dict[str, Any], sharing: Any) -> list[str]:
    """A flavor's sharing block against its GPU product's real MIG geometry."""
    if not isinstance(sharing, dict):
        return []
    errors: list[str] = []
    mode = sharing.get("mode", "exclusive")
    if mode == "mig":
        raw = sharing.get("layout")
        if raw is None:
            return [f"{path}.layout: required for mode mig (e.g. '7 x 1g.10gb')"]
        try:
            layout = parse_layout(raw)
        except ValueError as exc:
            return [f"{path}.layout: {exc}"]
        errors.extend(f"{path}.layout: {e}" for e in layout_errors(str(flavor.get("gpu_product")), layout))
    elif mode == "shared":
        for key in ("replicas", "replica_memory_gib"):
            if sharing.get(key) is None:
                errors.append(f"{path}.{key}: required for mode shared")
    for key in ("layout", "profile_weights"):
        if mode != "mig" and sharing.get(key) is not None:
            errors.append(f"{path}.{key}: only for mode mig")
    for key in ("replicas", "replica_memory_gib"):
        if mode != "shared" and sharing.get(key) is not None:
            errors.append(f"{path}.{key}: only for mode shared")
    return errors


def _quota_errors(
    qp: str,
    q: dict[str, Any],
    capacity: dict[Any, dict[str, Any]],
    seen: set[tuple[Any, Any]],
    nominal_sum: Counter[tuple[str, str]],
    lending_within_nominal: bool = True,
) -> list[str]:
    """One quota row. lending_within_nominal: a lane may not lend more than its nominal quota
    (Kueue's ClusterQueue webhook); a cohort may, since its lending limit counts its subtree."""
    errors: list[str] = []
    flavor = q.get("flavor_name")
    resource = q.get("resource", "nvidia.com/gpu")
    if flavor not in capacity:
        errors.append(f"{qp}.flavor_name: unknown flavor {flavor!r} (known: {', '.join(map(str, capacity))})")
    elif resource not in capacity[flavor]:
        offered = ", ".join(sorted(capacity[flavor]))
        errors.append(f"{qp}.resource: flavor {flavor!r} offers no {resource!r} (it offers: {offered})")
    if (flavor, resource) in seen:
        errors.append(f"{qp}: duplicate quota for ({flavor}, {resource})")
    seen.add((flavor, resource))
    nominal = q.get("nominal_quota")
    lending = q.get("lending_limit")
    if (
        lending_within_nominal
        and isinstance(nominal, int | float)
        and isinstance(lending, int | float)
        and lending > nominal
    ):
        errors.append(f"{qp}.lending_limit: {lending} exceeds nominal_quota {nominal}")
    if isinstance(nominal, int | float) and nominal >= 0:
        nominal_sum[(flavor, resource)] += nominal
    return errors


def _cohort_tree_errors(
    cohorts: list[dict[str, Any]], capacity: dict[Any, dict[str, Any]], nominal_sum: Counter[tuple[str, str]]
) -> list[str]:
    """The cohort tree: known parents, no cycle, limits only below a root, valid quotas."""
    errors: list[str] = []
    names = {c.get("name") for c in cohorts}
    parent = {c.get("name"): c.get("parent_name") for c in cohorts}
    for i, c in enumerate(cohorts):
        base = f"cohorts[{i}]"
        p = c.get("parent_name")
        if p is not None and p not in names:
            errors.append(f"{base}.parent_name: unknown cohort {p!r} (known: {', '.join(sorted(map(str, names)))})")
        seen_chain = {c.get("name")}
        while p is not None and p in parent:
            if p in seen_chain:
                errors.append(f"{base}.parent_name: the cohort tree has a cycle through {c.get('name')!r}")
                break
            seen_chain.add(p)
            p = parent[p]
        seen: set[tuple[Any, Any]] = set()
        for j, q in enumerate(c.get("quotas") or []):
            if not isinstance(q, dict):
                continue
            qp = f"{base}.quotas[{j}]"
            errors.extend(_quota_errors(qp, q, capacity, seen, nominal_sum, lending_within_nominal=False))
            if c.get("parent_name") is None:
                for key in ("borrowing_limit", "lending_limit"):
                    if q.get(key) is not None:
                        errors.append(f"{qp}.{key}: set on root cohort {c.get('name')!r}; limits need a parent_name")
    return errors


def parse_policy(raw: Any, source: str = "policy") -> Policy:
    """Validate a policy mapping; raise PolicyError naming every problem with its path."""
    if not isinstance(raw, dict):
        raise PolicyError([f"<root>: expected a mapping, got {type(raw).__name__}"], source)
    data = dict(raw)
    errors: list[str] = []
    lanes = data.get("lanes")
    if isinstance(lanes, dict):
        data["lanes"] = {k: {**v, "name": k} if isinstance(v, dict) else v for k, v in lanes.items()}
    teams = data.get("teams")
    if isinstance(teams, dict):
        data["teams"] = {k: {**v, "name": k} if isinstance(v, dict) else v for k, v in teams.items()}
    policy: Policy | None = None
    try:
        policy = Policy.model_validate(data)
    except ValidationError as exc:
        for err in exc.errors():
            loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
            errors.append(f"{_path(loc)}: {err['msg'].removeprefix('Value error, ')}")
    errors.extend(_semantic_errors(data))
    errors.extend(_autoscaling_errors(data))
    errors.extend(capacity_signal_errors(data))
    if errors:
        raise PolicyError(sorted(dict.fromkeys(errors)), source)
    assert policy is not None
    return policy


def load_policy(path: str | Path | None = None) -> Policy:
    """Load and validate a policy file (default: the packaged `default.yaml`), read within
    `POLICY_LIMITS` (see `gpu_platform.safeload`)."""
    p = Path(path) if path is not None else default_policy_path()
    try:
        raw = load_document(p, POLICY_LIMITS)
    except InputError as exc:
        raise PolicyError(exc.errors, str(p)) from None
    from gpu_platform.policy.loading import parse_policy_document

    return parse_policy_document(raw, str(p))
