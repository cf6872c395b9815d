"""Synthetic cluster states from a policy, for the benchmark and tests (deterministic per seed)."""

from __future__ import annotations

import random
from dataclasses import replace

from gpu_platform.admission.model import ClusterState, NodeSpec, ResourceQuota, Workload
from gpu_platform.admission.policy_view import from_policy
from gpu_platform.admission.quota import Snapshot
from gpu_platform.policy import GPU, Policy, load_policy

_SIZES = (1, 1, 2, 2, 4, 8)


def scaled(state: ClusterState, factor: float) -> ClusterState:
    """The same policy with every quota, limit and flavor capacity multiplied by `factor`."""

    def s(v: float | None) -> float | None:
        return None if v is None else v * factor

    cqs = tuple(
        replace(
            c,
            quotas=tuple(
                ResourceQuota(
                    q.flavor, q.resource, q.nominal * factor, s(q.borrowing_limit), s(q.lending_limit)
                )
                for q in c.quotas
            ),
        )
        for c in state.cluster_queues
    )
    flavors = tuple(
        replace(f, capacity={k: v * factor for k, v in (f.capacity or {}).items()}) for f in state.flavors
    )
    return replace(state, cluster_queues=cqs, flavors=flavors)


def synthetic_state(
    n_pending: int,
    n_admitted: int = 2000,
    seed: int = 0,
    policy: Policy | None = None,
    scale: float | None = None,
    fill: float = 0.97,
    node_model: bool = False,
) -> ClusterState:
    """A state over the policy's lanes and flavors with `n_admitted` running and `n_pending` waiting.

    scale=None: quotas and capacity are scaled so the admitted workloads fill about `fill` of the pool
    (a nearly full pool, so heads must preempt and reasons are non-trivial).
    node_model: also list the nodes of the scaled flavors, sized by the policy's node shapes (the
    admitted workloads are then placed by best fit in order); False: quota only.
    """
    policy = policy or load_policy()
    rng = random.Random(seed)
    base = from_policy(policy, node_model=False)
    if scale is None:
        total = sum(f.capacity.get(GPU, 0) for f in base.flavors if f.capacity)
        scale = max(1.0, round(n_admitted * 3.4 / (fill * total)))
    state = scaled(base, scale)
    if node_model:
        state = replace(state, nodes=scaled_nodes(policy, state))
    lanes = [c for c in state.cluster_queues]
    snap = Snapshot(state)
    admitted: list[Workload] = []
    i = 0
    attempts = 0
    while len(admitted) < n_admitted and attempts < n_admitted * 20:
        attempts += 1
        cq = rng.choice(lanes)
        flavor = rng.choice(cq.flavors)
        lane = policy.lane(cq.name)
        gpus = float(rng.choice(_SIZES))
        node = snap.cqs[cq.name]
        if gpus > snap.available(node, (flavor, GPU)):
            continue
        w = Workload(
            name=f"run-{i}",
            cq=cq.name,
            requests={GPU: gpus},
            priority=lane.priority,
            created_at=float(i),
            admitted_at=float(rng.randint(0, 10_000)),
            flavor=flavor,
            evidence=lane.evidence,
            checkpointed=rng.random() < 0.5,
            max_cost=50.0,
            expected_duration_s=float(rng.randint(600, 86_400)),
        )
        snap.add_workload(w)
        admitted.append(w)
        i += 1
    pending = []
    for j in range(n_pending):
        cq = rng.choice(lanes)
        lane = policy.lane(cq.name)
        pending.append(
            Workload(
                name=f"req-{j}",
                cq=cq.name,
                requests={GPU: float(rng.choice(_SIZES))},
                priority=lane.priority,
                created_at=10_000.0 + rng.randint(0, 100_000),
                allowed_flavors=cq.flavors if rng.random() < 0.8 else (rng.choice(cq.flavors),),
                evidence=lane.evidence,
                safety_approval=rng.random() < 0.01,
                max_cost=float(rng.randint(10, 500)),
                expected_duration_s=float(rng.randint(600, 86_400)),
            )
        )
    return replace(state, admitted=tuple(admitted), pending=tuple(pending), now=110_000.0)


def scaled_nodes(policy: Policy, state: ClusterState) -> tuple[NodeSpec, ...]:
    """Nodes for the state's (scaled) flavor capacities, each of its policy node shape's size."""
    out: list[NodeSpec] = []
    for f in state.flavors:
        shape = policy.node_shape(f.name)
        gpus = (f.capacity or {}).get(GPU, 0)
        if shape is None or not gpus:
            continue
        full, rest = divmod(int(gpus), shape.gpus_per_node)
        sizes = [shape.gpus_per_node] * full + ([rest] if rest else [])
        out += [NodeSpec(f"{f.name}/node-{i}", f.name, float(g)) for i, g in enumerate(sizes)]
    return tuple(out)
