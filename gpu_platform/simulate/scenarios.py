"""What the simulator schedules with: the policy, or one of two baselines, as an engine state.

- `policy`: the policy file as the gate sees it (`from_policy`): lanes are cluster queues with
  their quotas, cohort borrowing, preemption and lane rules.
- `fifo`: one strict FIFO queue over the whole pool's GPUs (all flavors as one set), no
  priorities, no preemption; a job starts when the job submitted before it has started and its
  GPUs are free; nobody overtakes. Replayed without the engine (`baselines.run_fifo`).
- `fifo-backfill`: the same queue with EASY backfilling (`baselines`): a later job may start
  ahead of a blocked head when that cannot delay the head's reserved start.
- `fifo-flavors`: FIFO in the engine: one cluster queue holding the pool's flavors, StrictFIFO,
  every job priority 0, no preemption; a job starts when the job submitted before it has started
  and its GPUs are free on one flavor (flavors tried in the policy's order, its gpu_type
  respected).
- `fifo-flavors-backfill`: the same queue with EASY backfilling over the flavors (and nodes):
  the like-for-like baseline of a policy split into flavors (`baselines.run_fifo_flavors`).
- `strict`: strict priority without borrowing: one cluster queue holding the policy's flavors
  (a job holds GPUs of one flavor, as every Kueue workload does),
  StrictFIFO ordered by lane priority then submission, a higher-priority job preempts
  lower-priority running jobs (`within_cluster_queue: LowerPriority`); no quotas per lane, so
  nothing is borrowed or lent, and no lane rules (`yields_to`, `protected`, evidence).

`--capacity N` resizes the pool to N GPUs: flavor capacities and every quota and limit are
multiplied by N / (the policy's GPUs) and rounded to the nearest whole GPU (halves up), and a
quota or limit that held at least one node of its flavor (the policy's
`autoscaling.node_pools.<pool>.node_gpus`) keeps at least one node (at most the flavor's new
capacity), so a lane that could run a node-sized job still can; capacities are rounded to the
nearest, the remainder going to the first flavor, so they add up to N.

`with_nodes` puts any of these on nodes (`--node-gpus N`, `--node-model policy`): each flavor's
GPUs (after resizing) become full nodes of its node size plus one smaller node for a remainder,
and a job larger than one node becomes a gang of pods, one per node (see `with_nodes`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from gpu_platform.admission import (
    ClusterQueueSpec,
    ClusterState,
    FlavorSpec,
    ResourceQuota,
    Workload,
    from_policy,
)
from gpu_platform.admission.model import LOWER_PRIORITY, NEVER, STRICT_FIFO, NodeSpec
from gpu_platform.policy import GPU, Policy
from gpu_platform.requests.model import matching_flavors
from gpu_platform.simulate.scenario import Scenario, pods_for, split_node_size
from gpu_platform.simulate.trace import TraceJob

POOL = "pool"


def _scaled(v: float | None, k: float, node: float, cap: float) -> float | None:
    """A quota or limit `v` times `k`, rounded to the nearest whole GPU (halves up), but never
    below one node (`node` GPUs, at most the flavor's new capacity `cap`) when `v` held at least
    one node before: a lane that could run a node-sized job still can."""
    if v is None:
        return None
    out = float(math.floor(v * k + 0.5 + 1e-9))
    floor = min(node, cap)
    if v + 1e-9 >= node and out < floor:
        out = floor
    return out


def node_gpus(policy: Policy) -> dict[str, float]:
    """GPUs on one node of each flavor's node pool (the policy's `autoscaling.node_pools`); 1 where
    the policy does not say."""
    pools = policy.autoscaling.node_pools if policy.autoscaling is not None else {}
    return {f.name: float(pools[f.node_pool].node_gpus) if f.node_pool in pools else 1.0 for f in policy.flavors}


def resize(state: ClusterState, gpus: float, nodes: dict[str, float] | None = None) -> ClusterState:
    """The state with its pool resized to `gpus` GPUs (see the module docstring). `nodes`: GPUs
    per node of each flavor (`node_gpus`), so no quota that held a node drops below one.

    A serving queue (`ClusterQueueSpec.serving`) keeps its quotas as declared: they are sized by
    its services' replicas, not by the batch load, so its GPUs are set aside first and the rest of
    the pool is scaled to the other `gpus` less those."""
    caps = [(f.capacity or {}).get(GPU, 0.0) for f in state.flavors]
    total = sum(caps)
    if total <= 0:
        raise ValueError("the policy's flavors declare no nvidia.com/gpu capacity to resize")
    kept: dict[str, float] = {}
    for c in state.cluster_queues:
        if c.serving:
            for q in c.quotas:
                if q.resource == GPU:
                    kept[q.flavor] = kept.get(q.flavor, 0.0) + q.nominal
    kept = {f.name: min(kept[f.name], cap) for f, cap in zip(state.flavors, caps, strict=True) if f.name in kept}
    fixed = sum(kept.values())
    if fixed and gpus <= fixed:
        raise ValueError(
            f"--capacity {gpus:g} leaves no GPUs for batch work: the serving lanes' quotas hold {fixed:g} GPUs "
            f"({', '.join(f'{f} {v:g}' for f, v in kept.items())}), kept as declared")
    k = (gpus - fixed) / (total - fixed) if total > fixed else 1.0
    new_caps = [float(round((c - kept.get(f.name, 0.0)) * k)) + kept.get(f.name, 0.0)
                for f, c in zip(state.flavors, caps, strict=True)]
    new_caps[0] += gpus - sum(new_caps)
    flavors = tuple(
        replace(f, capacity={**{r: v * k for r, v in (f.capacity or {}).items()}, GPU: c})
        for f, c in zip(state.flavors, new_caps, strict=True)
    )
    cap_of = {f.name: c for f, c in zip(state.flavors, new_caps, strict=True)}
    node_of = nodes or {}

    def quota(q: ResourceQuota) -> ResourceQuota:
        node, cap = node_of.get(q.flavor, 1.0), cap_of.get(q.flavor, gpus)
        return ResourceQuota(
            q.flavor, q.resource, _scaled(q.nominal, k, node, cap) or 0.0,
            _scaled(q.borrowing_limit, k, node, cap), _scaled(q.lending_limit, k, node, cap),
        )

    cqs = tuple(c if c.serving else replace(c, quotas=tuple(quota(q) for q in c.quotas)) for c in state.cluster_queues)
    cohorts = tuple(
        replace(co, quotas=tuple(quota(q) for q in co.quotas)) if getattr(co, "quotas", None) else co
        for co in state.cohorts
    )
    return replace(state, flavors=flavors, cluster_queues=cqs, cohorts=cohorts)


def policy_node_gpus(policy: Policy) -> dict[str, float]:
    """GPUs per node of each flavor with a node shape in the policy (`Policy.node_shapes`: its
    node pool's `node_gpus` or its own); flavors without one (shared, MIG) are not placed."""
    return {name: float(shape.gpus_per_node) for name, shape in policy.node_shapes.items()}


def uniform_node_gpus(state: ClusterState, gpus: float) -> dict[str, float]:
    """`gpus` per node on every flavor of the state that has GPUs."""
    return {f.name: float(gpus) for f in state.flavors if (f.capacity or {}).get(GPU, 0.0) > 0}


def with_nodes(scenario: Scenario, per_flavor_node_gpus: Mapping[str, float], gang_split: str = "smallest") -> Scenario:
    """The scenario with its flavors' GPUs on nodes, and its jobs as gangs.

    Each flavor named in `per_flavor_node_gpus` with GPU capacity gets floor(capacity / n) nodes
    of n GPUs (n capped at the capacity) plus one node of the remainder, named `<flavor>/node-<i>`;
    flavors left out stay quota only. A job of g GPUs becomes `pods_for(g, n)` pods of g / pods
    GPUs, one per node, with n the smallest node size among the flavors it may use (its allowed
    flavors, or its queue's): its pods then fit a node of any of them. gang_split "largest": n is
    the largest such size (whole nodes of the largest shape; `split_node_size`). A g that is not a
    multiple of n is split evenly (12 GPUs on 8-GPU nodes: 2 pods of 6).
    """
    split_node_size((), gang_split)  # refuses an unknown rule
    base = scenario.base
    node_of: dict[str, float] = {}
    nodes: list[NodeSpec] = []
    for f in base.flavors:
        cap = (f.capacity or {}).get(GPU, 0.0)
        n = per_flavor_node_gpus.get(f.name)
        if n is None or cap <= 0:
            continue
        if n <= 0:
            raise ValueError(f"node size of flavor {f.name!r} must be > 0, got {n:g}")
        n = min(float(n), cap)
        node_of[f.name] = n
        full = math.floor(cap / n + 1e-9)
        sizes = [n] * full
        rest = cap - full * n
        if rest > 1e-9:
            sizes.append(round(rest, 9))
        nodes += [NodeSpec(f"{f.name}/node-{i}", f.name, g) for i, g in enumerate(sizes)]
    queue_flavors = {c.name: c.flavors for c in base.cluster_queues}
    inner = scenario.workload
    smallest: dict[tuple, float | None] = {}

    def workload(job: TraceJob) -> Workload | None:
        wl = inner(job)
        if wl is None:
            return None
        flavors = (wl.flavor,) if wl.flavor else wl.allowed_flavors
        key = (wl.cq, flavors)
        if key not in smallest:
            usable = flavors if flavors is not None else queue_flavors.get(wl.cq, ())
            smallest[key] = split_node_size((node_of[f] for f in usable if f in node_of), gang_split)
        pods = pods_for(wl.requests.get(GPU, 0.0), smallest[key])
        return replace(wl, pods=pods) if pods > 1 else wl

    shown = ", ".join(f"{f} {n:g}" for f, n in node_of.items())
    return replace(
        scenario,
        base=replace(base, nodes=tuple(nodes)),
        workload=workload,
        description=f"{scenario.description}; on nodes (GPUs per node: {shown})"
        + ("; gangs of the largest node size" if gang_split == "largest" else ""),
        node_gpus=node_of,
        gang_split=gang_split,
    )


def _gpu_only(state: ClusterState) -> ClusterState:
    """Trace jobs ask for GPUs only: drop cpu/memory quotas so they neither bind nor report."""
    cqs = tuple(replace(c, quotas=tuple(q for q in c.quotas if q.resource == GPU)) for c in state.cluster_queues)
    flavors = tuple(replace(f, capacity={GPU: (f.capacity or {}).get(GPU, 0.0)}) for f in state.flavors)
    return replace(state, cluster_queues=cqs, flavors=flavors)


def _allowed(policy: Policy) -> Callable[[str, str | None, str | None], tuple[str, ...]]:
    cache: dict[tuple[str, str | None, str | None], tuple[str, ...]] = {}

    def allowed(lane: str, gpu_type: str | None, site: str | None = None) -> tuple[str, ...]:
        key = (lane, gpu_type, site)
        if key not in cache:
            # a job of a site runs on that site's flavors only (its capacity: `sites:`)
            cache[key] = tuple(matching_flavors(policy, lane, gpu_type, site=site))
        return cache[key]

    return allowed


def policy_scenario(policy: Policy, capacity: float | None = None) -> Scenario:
    base = _gpu_only(from_policy(policy, node_model=False))
    if capacity is not None:
        base = resize(base, capacity, node_gpus(policy))
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
            allowed_flavors=allowed(lane.name, job.gpu_type, job.site),
            evidence=lane.evidence,
            expected_duration_s=job.duration_s,
        )

    return Scenario(
        "policy", "the policy's lanes, quotas, borrowing, preemption and lane rules", base, workload,
        boosts=lane_boosts(policy) or None,
    )


def lane_boosts(policy: Policy) -> dict[str, tuple[float, int, int]]:
    """Aging per lane: (step seconds, boost per step, cap). A waiting workload gains `targets.boost`
    each `targets.boost_after` x `targets.wait_p95` it waits, up to one below the next higher
    lane's priority (it ages toward its target, never past a lane above it). The rule is
    `gpu_platform.policy.aging`'s, which the gate applies too."""
    from gpu_platform.policy.aging import aging_rules

    return {name: rule.as_tuple() for name, rule in aging_rules(policy).items()}


def _pool_state(policy: Policy, capacity: float | None, preemption: str) -> ClusterState:
    base = _gpu_only(from_policy(policy, node_model=False))
    if capacity is not None:
        base = resize(base, capacity, node_gpus(policy))
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


def _one_queue(policy: Policy, capacity: float | None, backfill: bool) -> Scenario:
    from gpu_platform.simulate.baselines import run_fifo

    base = _pool_state(policy, capacity, NEVER)
    gpus = sum((f.capacity or {}).get(GPU, 0.0) for f in base.flavors)

    def fast(scenario: Scenario, jobs: list[TraceJob], tick: float, **kw: Any) -> Any:
        return run_fifo(scenario, jobs, gpus, backfill=backfill, tick=tick, **kw)

    if backfill:
        name, text = "fifo-backfill", "one queue over the whole pool's GPUs, EASY backfilling, no priorities, no preemption"
    else:
        name, text = "fifo", "one queue over the whole pool's GPUs, strict FIFO, no priorities, no preemption"
    return Scenario(name, text, base, lambda job: None, fast)


def fifo_scenario(policy: Policy, capacity: float | None = None) -> Scenario:
    """One strict FIFO queue over the whole pool's GPUs (no engine; `baselines.run_fifo`)."""
    return _one_queue(policy, capacity, backfill=False)


def fifo_backfill_scenario(policy: Policy, capacity: float | None = None) -> Scenario:
    """One FIFO queue over the whole pool's GPUs with EASY backfilling (`baselines.run_fifo`)."""
    return _one_queue(policy, capacity, backfill=True)


def fifo_flavors_scenario(policy: Policy, capacity: float | None = None) -> Scenario:
    """FIFO in the engine, over the policy's flavors (first fit in file order)."""
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

    return Scenario(
        "fifo-flavors",
        "one FIFO queue over the policy's flavors (first fit in file order), no priorities, no preemption",
        base,
        workload,
    )


def _flavors_fast(policy: Policy, capacity: float | None, backfill: bool) -> Scenario:
    from gpu_platform.simulate.baselines import run_fifo_flavors

    base = _pool_state(policy, capacity, NEVER)
    types = _types(policy)

    def allowed(job: TraceJob) -> tuple[str, ...]:
        return types(job.gpu_type)

    def fast(scenario: Scenario, jobs: list[TraceJob], tick: float, **kw: Any) -> Any:
        return run_fifo_flavors(scenario, jobs, allowed, backfill=backfill, tick=tick, **kw)

    if backfill:
        name = "fifo-flavors-backfill"
        text = "one FIFO queue over the policy's flavors (a job on one flavor, first fit), EASY backfilling, no priorities, no preemption"
    else:
        name = "fifo-flavors"
        text = "one FIFO queue over the policy's flavors (first fit in file order), no priorities, no preemption"
    return Scenario(name, text, base, lambda job: None, fast)


def fifo_flavors_backfill_scenario(policy: Policy, capacity: float | None = None) -> Scenario:
    """FIFO with EASY backfilling over the policy's flavors and, with a node model, its nodes: the
    like-for-like baseline of the policy (`baselines.run_fifo_flavors`)."""
    return _flavors_fast(policy, capacity, backfill=True)


def fifo_flavors_fast_scenario(policy: Policy, capacity: float | None = None) -> Scenario:
    """`fifo-flavors` replayed without the engine (`baselines.run_fifo_flavors`): the same starts
    as the engine's (tested), for checking the backfill version against."""
    return _flavors_fast(policy, capacity, backfill=False)


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
    "fifo-backfill": fifo_backfill_scenario,
    "fifo-flavors": fifo_flavors_scenario,
    "fifo-flavors-backfill": fifo_flavors_backfill_scenario,
    "strict": strict_scenario,
}
