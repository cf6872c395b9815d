"""Why each workload still waits: its reason, position in its lane, queue (active or inadmissible)
and estimated start, after a cycle of the admission engine. `PendingReasons` is a mixin of the
cycle engine (`admission/cycle.py`): it reads what the cycle left (`queues`, `done`, `heads`,
`status`, `parked`, `node_blocked`, `victims`) and asks the flavor assigner which flavors a
workload's topology request may use (`_tas_ok`).

May import `admission/model.py`, `quota.py`, `workload_keys.py`.
"""

from __future__ import annotations

import bisect
import itertools

from gpu_platform.admission.model import (
    BUDGET_EXHAUSTED,
    INADMISSIBLE,
    PENDING,
    PENDING_PREEMPTION,
    QUOTA_RESERVED,
    TEAM_LIMIT,
    ClusterState,
    PendingInfo,
    Workload,
)
from gpu_platform.admission.quota import CohortNode, CQNode, Node, Snapshot
from gpu_platform.admission.workload_keys import EPS, flavor_set, qty


class PendingReasons:
    """Reasons, positions and estimated starts of the waiting workloads."""

    state: ClusterState
    snap: Snapshot
    estimates: bool
    queues: dict[str, list[Workload]]
    done: set[str]
    parked: set[str]
    heads: dict[str, Workload | None]
    status: dict[str, tuple[str, str, str | None]]
    node_blocked: set[str]
    victims: dict[str, Workload]
    _events_cache: dict[tuple, tuple[list[float], list[float]]]
    _ends_cache: dict[tuple, dict[str, list[tuple[float, float]]]]

    def _tas_ok(self, wl: Workload, cq: CQNode, f: str) -> bool:  # the flavor assigner's
        raise NotImplementedError

    def _free_events(self, cq: CQNode, resource: str, flavors: frozenset[str]) -> tuple[list[float], list[float]]:
        """When running work on `flavors` in the queue's cohort tree ends, and how much it frees
        (ascending times, cumulative amounts)."""
        root = cq.root()
        key = (id(root), resource, flavors)
        hit = self._events_cache.get(key)
        if hit is None:
            per = self._ends_by_flavor(root, cq, resource)
            runs = [per[f] for f in flavors if f in per]
            events = runs[0] if len(runs) == 1 else sorted(itertools.chain.from_iterable(runs))
            hit = self._events_cache[key] = (
                [t for t, _ in events],
                list(itertools.accumulate(amount for _, amount in events)),
            )
        return hit

    def _ends_by_flavor(self, root: Node, cq: CQNode, resource: str) -> dict[str, list[tuple[float, float]]]:
        """Per flavor, the (end, amount) of the running work in the cohort tree, sorted: one pass
        over the running workloads per tree, shared by every flavor set asked about."""
        key = (id(root), resource, None)
        hit = self._ends_cache.get(key)
        if hit is None:
            members = root.subtree_cqs() if isinstance(root, CohortNode) else [cq]
            now, victims = self.state.now, self.victims
            hit = {}
            for m in members:
                for w in m.workloads.values():
                    if w.expected_duration_s is not None and w.name not in victims:
                        amt = w.requests.get(resource, 0.0)
                        if amt > 0:
                            hit.setdefault(w.flavor, []).append((max(now, w.admitted_at + w.expected_duration_s), amt))
            for events in hit.values():
                events.sort()
            self._ends_cache[key] = hit
        return hit

    def _service_shortfall(self, w: Workload, cq: CQNode) -> str:
        """What a waiting service lacks: its min replicas need their GPUs together, and the
        flavor that could take most of them now (quota, borrowing and the cohort's free GPUs)
        falls short by so many (docs/serving.md, Admission)."""
        resource = next((r for r in w.requests if r not in ("cpu", "memory")), "nvidia.com/gpu")
        total = w.requests.get(resource, 0.0)
        per = total / w.replicas
        flavors = [f for g in cq.groups for f in g.flavors if w.allowed_flavors is None or f in w.allowed_flavors]
        free = max((self.snap.available(cq, (f, resource)) for f in flavors), default=0.0)
        short = total - max(0.0, free)
        text = f"service needs its min {w.replicas} replicas x {qty(per)} {resource} = {qty(total)} together"
        if short > EPS:
            return f"{text}, {qty(short)} short ({qty(max(0.0, free))} free to it now); "
        return f"{text}; "

    def pending_infos(self) -> list[PendingInfo]:
        """Reason, position, queue and estimated start for every workload still waiting.

        The estimate assumes nothing else arrives: the workload starts once the running jobs
        (on its flavors, in its cohort tree) that end first have freed what it and everything
        ahead of it in its lane need. None: no estimate (over budget, or larger than the lane can hold).
        Without `estimates` (the simulator never reads them) every estimated start is None and the
        rest is built the same way.
        """
        out: list[PendingInfo] = []
        now = self.state.now
        estimating = self.estimates
        est = None
        for name, q in self.queues.items():
            cq = self.snap.cqs[name]
            rest = [w for w in q if w.name not in self.done]
            if not rest:
                continue
            n = len(rest)
            if estimating:
                resource = "nvidia.com/gpu"
                if not any(resource in w.requests for w in rest[:8]):
                    resource = next(iter(rest[0].requests), resource)
                cq_flavors = [f for g in cq.groups for f in g.flavors]
                avail = {f: self.snap.available(cq, (f, resource)) for f in cq_flavors}
                pot = {f: self.snap.potential(cq, (f, resource)) for f in cq_flavors}
            by_set: dict[tuple, tuple] = {}
            head = self.heads.get(name)
            head_code = self.status.get(head.name, (PENDING,))[0] if head is not None else PENDING
            head_text = f"behind head {head.name} ({head_code})" if head is not None else "behind the queue head"
            demand = 0.0
            status = self.status
            node_blocked = self.node_blocked
            prefixes: dict[tuple[str, str], str] = {}
            for pos, w in enumerate(rest, 1):
                if estimating:
                    raw_key = (w.flavor, w.allowed_flavors, w.topology, w.topology_level)
                    info = by_set.get(raw_key)
                    if info is None:
                        key = flavor_set(w)
                        fl = frozenset(
                            f for f in cq_flavors if (key is None or f in key) and self._tas_ok(w, cq, f)
                        )
                        info = by_set[raw_key] = (
                            max((avail[f] for f in fl), default=0.0),
                            max((pot[f] for f in fl), default=0.0),
                            *self._free_events(cq, resource, fl),
                        )
                    supply, ceiling, times, cum = info
                    amount = w.requests.get(resource, 0.0)
                    demand += amount
                    short = demand - supply
                    if amount > ceiling + EPS:
                        est = None
                    elif short <= EPS:
                        est = now
                    else:
                        i = bisect.bisect_left(cum, short - EPS)
                        est = times[i] if i < len(times) else None
                st = status.get(w.name)
                if st is None:
                    code, msg, flavor = PENDING, f"{name}: waiting {head_text}", None
                else:
                    code, msg, flavor = st
                    if not estimating:
                        pass  # est stays None
                    elif code in (BUDGET_EXHAUSTED, TEAM_LIMIT) or (code == INADMISSIBLE and w.name in node_blocked):
                        est = None
                    elif code == PENDING_PREEMPTION:
                        est = now
                if w.replicas and code != PENDING:
                    msg = self._service_shortfall(w, cq) + msg
                prefix = prefixes.get((code, msg))
                if prefix is None:
                    prefix = prefixes[(code, msg)] = f"{code}: {msg}; position "
                out.append(
                    PendingInfo(
                        w.name,
                        name,
                        code,
                        QUOTA_RESERVED,
                        f"{prefix}{pos} of {n}",
                        pos,
                        n,
                        est,
                        flavor,
                        "inadmissible" if w.name in self.parked else "active",
                    )
                )
        return out
