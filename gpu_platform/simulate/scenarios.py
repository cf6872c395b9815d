"""What the simulator schedules with: the policy, or one of two baselines, as an engine state.

- `policy`: the policy file as the gate sees it (`from_policy`): lanes are cluster queues with
  their quotas, cohort borrowing, preemption and lane rules.
- `fifo`: one cluster queue holding the whole pool, StrictFIFO, every job priority 0, no
  preemption. A job starts when the job submitted before it has started and its GPUs are free
  on a flavor (flavors tried in the policy's order); nobody overtakes.
- `strict`: strict priority without borrowing: one cluster queue holding the whole pool,
  StrictFIFO ordered by lane priority then submission, a higher-priority job preempts
  lower-priority running jobs (`within_cluster_queue: LowerPriority`); no quotas per lane, so
  nothing is borrowed or lent, and no lane rules (`yields_to`, `protected`, evidence).

`--capacity N` resizes the pool to N GPUs: flavor capacities and every quota and limit are
multiplied by N / (the policy's GPUs), rounded down to whole GPUs (capacities rounded to the
nearest, the remainder going to the first flavor, so they add up to N).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from gpu_platform.admission import (
    ClusterQueueSpec,
    ClusterState,
    FlavorSpec,
    ResourceQuota,
    Workload,
    from_policy,
)
from gpu_platform.admission.model import LOWER_PRIORITY, NEVER, STRICT_FIFO
from gpu_platform.policy import GPU, Policy
from gpu_platform.requests.model import matching_flavors
from gpu_platform.simulate.trace import TraceJob

POOL = "pool"


@dataclass(frozen=True, slots=True)
class Scenario:
    """An engine state without workloads, and how a job becomes a pending workload.

    workload returns None when the job has no cluster queue here (e.g. an unknown lane).
    """

    name: str
    description: str
    base: ClusterState
    workload: Callable[[TraceJob], Workload | None]

    @property
    def capacity(self) -> float:
        return sum((f.capacity or {}).get(GPU, 0.0) for f in self.base.flavors)

    def nominal(self) -> dict[str, float]:
        """GPU nominal quota per cluster queue (all flavors)."""
        return {
            c.name: sum(q.nominal for q in c.quotas if q.resource == GPU) for c in self.base.cluster_queues
        }


def _floor(v: float | None, k: float) -> float | None:
    return None if v is None else float(math.floor(v * k + 1e-9))


def resize(state: ClusterState, gpus: float) -> ClusterState:
    """The state with its pool resized to `gpus` GPUs (see the module docstring)."""
    caps = [(f.capacity or {}).get(GPU, 0.0) for f in state.flavors]
    total = sum(caps)
    if total <= 0:
        raise ValueError("the policy's flavors declare no nvidia.com/gpu capacity to resize")
    k = gpus / total
    new_caps = [float(round(c * k)) for c in caps]
    new_caps[0] += gpus - sum(new_caps)
    flavors = tuple(
        replace(f, capacity={**{r: v * k for r, v in (f.capacity or {}).items()}, GPU: c})
        for f, c in zip(state.flavors, new_caps, strict=True)
    )
    cqs = tuple(
        replace(
            c,
            quotas=tuple(
                ResourceQuota(q.flavor, q.resource, _floor(q.nominal, k) or 0.0, _floor(q.borrowing_limit, k), _floor(q.lending_limit, k))
                for q in c.quotas
            ),
        )
        for c in state.cluster_queues
    )
    return replace(state, flavors=flavors, cluster_queues=cqs)


def _gpu_only(state: ClusterState) -> ClusterState:
    """Trace jobs ask for GPUs only: drop cpu/memory quotas so they neither bind nor report."""
    cqs = tuple(replace(c, quotas=tuple(q for q in c.quotas if q.resource == GPU)) for c in state.cluster_queues)
    flavors = tuple(replace(f, capacity={GPU: (f.capacity or {}).get(GPU, 0.0)}) for f in state.flavors)
    return replace(state, cluster_queues=cqs, flavors=flavors)


def _allowed(policy: Policy) -> Callable[[str, str | None], tuple[str, ...]]:
    cache: dict[tuple[str, str | None], tuple[str, ...]] = {}

    def allowed(lane: str, gpu_type: str | None) -> tuple[str, ...]:
        key = (lane, gpu_type)
        if key not in cache:
            cache[key] = tuple(matching_flavors(policy, lane, gpu_type))
        return cache[key]

    return allowed


def policy_scenario(policy: Policy, capacity: float | None = None) -> Scenario:
    base = _gpu_only(from_policy(policy, node_model=False))
    if capacity is not None:
        base = resize(base, capacity)
    allowed = _allowed(policy)
    lanes = {lane.name: lane for lane in policy.lanes_by_priority()}

    def workload(job: TraceJob) -> Workload | None:
        lane = lanes.get(job.lane)
        if lane is None:
            return None
        return Workload(
            name=job.job_id,
            cq=lane.name,
            requests={GPU: job.gpus},
            priority=lane.priority,
            created_at=job.submit_ts,
            allowed_flavors=allowed(lane.name, job.gpu_type),
            evidence=lane.evidence,
            expected_duration_s=job.duration_s,
        )

    return Scenario("policy", "the policy's lanes, quotas, borrowing, preemption and lane rules", base, workload)


def _pool_state(policy: Policy, capacity: float | None, preemption: str) -> ClusterState:
    base = _gpu_only(from_policy(policy, node_model=False))
    if capacity is not None:
        base = resize(base, capacity)
    quotas = tuple(ResourceQuota(f.name, GPU, (f.capacity or {}).get(GPU, 0.0)) for f in base.flavors)
    cq = ClusterQueueSpec(
        name=POOL, quotas=quotas, queueing_strategy=STRICT_FIFO, within_cluster_queue=preemption
    )
    flavors = tuple(FlavorSpec(f.name, False, f.capacity) for f in base.flavors)
    return replace(base, cluster_queues=(cq,), flavors=flavors, cohorts=(), fair_sharing=False)


def _types(policy: Policy) -> Callable[[str | None], tuple[str, ...]]:
    def allowed(gpu_type: str | None) -> tuple[str, ...]:
        return tuple(f.name for f in policy.flavors if gpu_type in (None, "any", f.name, f.gpu_product))

    cache: dict[str | None, tuple[str, ...]] = {}

    def cached(gpu_type: str | None) -> tuple[str, ...]:
        if gpu_type not in cache:
            cache[gpu_type] = allowed(gpu_type)
        return cache[gpu_type]

    return cached


def fifo_scenario(policy: Policy, capacity: float | None = None) -> Scenario:
    base = _pool_state(policy, capacity, NEVER)
    allowed = _types(policy)

    def workload(job: TraceJob) -> Workload:
        return Workload(
            name=job.job_id,
            cq=POOL,
            requests={GPU: job.gpus},
            priority=0,
            created_at=job.submit_ts,
            allowed_flavors=allowed(job.gpu_type),
            expected_duration_s=job.duration_s,
        )

    return Scenario("fifo", "one FIFO queue over the whole pool, no priorities, no preemption", base, workload)


def strict_scenario(policy: Policy, capacity: float | None = None) -> Scenario:
    base = _pool_state(policy, capacity, LOWER_PRIORITY)
    allowed = _types(policy)
    prio = {lane.name: lane.priority for lane in policy.lanes_by_priority()}

    def workload(job: TraceJob) -> Workload | None:
        if job.lane not in prio:
            return None
        return Workload(
            name=job.job_id,
            cq=POOL,
            requests={GPU: job.gpus},
            priority=prio[job.lane],
            created_at=job.submit_ts,
            allowed_flavors=allowed(job.gpu_type),
            expected_duration_s=job.duration_s,
        )

    return Scenario(
        "strict",
        "one queue over the whole pool in strict lane-priority order, preempting lower priorities; no quotas, no borrowing",
        base,
        workload,
    )


SCENARIOS: dict[str, Callable[[Policy, float | None], Scenario]] = {
    "policy": policy_scenario,
    "fifo": fifo_scenario,
    "strict": strict_scenario,
}
