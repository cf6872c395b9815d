"""Validated policy model. Field names follow Kueue's ClusterQueue API in snake_case."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from decimal import Decimal
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from gpu_platform.safeload import POLICY_LIMITS, InputError, load_document
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


class Flavor(_Frozen):
    """A Kueue ResourceFlavor: one GPU product in one node pool.

    capacity: total amount per resource in the pool (`nvidia.com/gpu` required; `cpu` in cores,
    `memory` in GiB when present).
    """

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    gpu_product: str
    node_pool: NodePool
    spot: bool = False
    capacity: dict[str, float]
    taints: tuple[Taint, ...] = ()
    node_labels: dict[str, str] = Field(default_factory=dict)

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


class Cohort(_Frozen):
    name: str
    description: str = ""


class Quota(_Frozen):
    """Quota of one lane for one (flavor, resource).

    borrowing_limit=None: no limit on borrowing from the cohort; must be None without a cohort.
    lending_limit=None: all of the nominal quota may be lent to the cohort.
    """

    flavor_name: str
    resource: str = GPU
    nominal_quota: float = Field(ge=0)
    borrowing_limit: float | None = Field(default=None, ge=0)
    lending_limit: float | None = Field(default=None, ge=0)


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


class Lane(_Frozen):
    """One workload class: a Kueue ClusterQueue plus the platform's lane rules.

    yields_to=None: plain Kueue rules decide who may preempt this lane's jobs. A list: only
    preemptors from those lanes, or carrying a safety-owner approval, may.
    protected: this lane's running jobs are never preemption victims.
    evidence: the lane produces release/safety evidence; its jobs are preemption candidates only
    once checkpointed with immutable logs.
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
    max_concurrent_runs: int = Field(ge=1)
    max_run_duration: timedelta
    budget: Decimal = Field(ge=0)
    default_retention: timedelta
    fair_sharing_weight: float = Field(default=1.0, gt=0)

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


class Team(_Frozen):
    name: str
    cost_center: str
    namespace: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    data_access_scopes: tuple[str, ...]
    site: str | None = None


class FairSharing(_Frozen):
    enabled: bool = False


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
    capacity = {
        f.get("name"): (f.get("capacity") or {}) for f in flavors if isinstance(f, dict)
    }
    cohorts = [c.get("name") for c in raw.get("cohorts") or [] if isinstance(c, dict)]
    for name, n in Counter(cohorts).items():
        if n > 1:
            errors.append(f"cohorts: duplicate cohort name {name!r}")
    lanes = raw.get("lanes") or {}
    if not isinstance(lanes, dict):
        return errors
    nominal_sum: Counter[tuple[str, str]] = Counter()
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
            flavor = q.get("flavor_name")
            resource = q.get("resource", "nvidia.com/gpu")
            if flavor not in capacity:
                errors.append(f"{qp}.flavor_name: unknown flavor {flavor!r} (known: {', '.join(map(str, capacity))})")
            elif resource not in capacity[flavor]:
                errors.append(f"{qp}.resource: flavor {flavor!r} declares no capacity for {resource!r}")
            if (flavor, resource) in seen:
                errors.append(f"{qp}: duplicate quota for ({flavor}, {resource})")
            seen.add((flavor, resource))
            if cohort is None:
                for key in ("borrowing_limit", "lending_limit"):
                    if q.get(key) is not None:
                        errors.append(f"{qp}.{key}: set but lane has no cohort_name")
            nominal = q.get("nominal_quota")
            lending = q.get("lending_limit")
            if isinstance(nominal, int | float) and isinstance(lending, int | float) and lending > nominal:
                errors.append(f"{qp}.lending_limit: {lending} exceeds nominal_quota {nominal}")
            if isinstance(nominal, int | float) and nominal >= 0:
                nominal_sum[(flavor, resource)] += nominal
        for i, other in enumerate(lane.get("yields_to") or []):
            if other not in lanes:
                errors.append(f"{base}.yields_to[{i}]: unknown lane {other!r}")
            elif other == lane_name:
                errors.append(f"{base}.yields_to[{i}]: a lane cannot yield to itself")
        if lane.get("protected") and lane.get("yields_to"):
            errors.append(f"{base}.yields_to: a protected lane is never preempted; remove yields_to or protected")
    for (flavor, resource), total in nominal_sum.items():
        cap = capacity.get(flavor, {}).get(resource)
        if isinstance(cap, int | float) and total > cap:
            errors.append(
                f"flavors.{flavor}.capacity.{resource}: lanes' nominal quotas sum to {total:g}, more than the capacity {cap:g}"
            )
    priorities = [
        (name, lane.get("priority")) for name, lane in lanes.items() if isinstance(lane, dict)
    ]
    for prio, n in Counter(p for _, p in priorities if p is not None).items():
        if n > 1:
            names = sorted(name for name, p in priorities if p == prio)
            errors.append(f"lanes: priority {prio} is shared by {', '.join(names)}; lane priorities must be distinct")
    teams = raw.get("teams") or {}
    if isinstance(teams, dict):
        namespaces = Counter(t.get("namespace") for t in teams.values() if isinstance(t, dict))
        for ns, n in namespaces.items():
            if n > 1 and ns is not None:
                errors.append(f"teams: namespace {ns!r} used by {n} teams")
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
