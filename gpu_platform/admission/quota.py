"""Quota accounting for one admission cycle: Kueue's ClusterQueue/Cohort resource nodes, flat.

Per (flavor, resource) a cluster queue has nominal quota N, borrowing limit B (None = none) and
lending limit L (None = all of N lendable). Its guaranteed part is N - L when L is set, else 0.
A cohort pools what its members may lend; usage above a member's guaranteed part counts against
that pool. This mirrors kueue pkg/cache resource_node.go (`available`, `potentialAvailable`).
A flavor's physical capacity, when known, is one more ceiling on top (the platform's view).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from gpu_platform.admission.model import ClusterQueueSpec, ClusterState, ResourceQuota, Workload

FR = tuple[str, str]
INF = float("inf")


class CQNode:
    __slots__ = ("spec", "name", "cohort", "quota", "guaranteed", "usage", "workloads", "covered")

    def __init__(self, spec: ClusterQueueSpec, cohort: CohortNode | None):
        self.spec = spec
        self.name = spec.name
        self.cohort = cohort
        self.quota: dict[FR, ResourceQuota] = {}
        self.guaranteed: dict[FR, float] = {}
        for q in spec.quotas:
            fr = (q.flavor, q.resource)
            self.quota[fr] = q
            g = 0.0
            if q.lending_limit is not None and cohort is not None:
                g = max(0.0, q.nominal - q.lending_limit)
            self.guaranteed[fr] = g
        self.usage: dict[FR, float] = {}
        self.workloads: dict[str, Workload] = {}
        self.covered = frozenset(r for _f, r in self.quota)


class CohortNode:
    __slots__ = ("name", "members", "lendable", "usage")

    def __init__(self, name: str):
        self.name = name
        self.members: list[CQNode] = []
        self.lendable: dict[FR, float] = {}
        self.usage: dict[FR, float] = {}


def usage_of(wl: Workload, flavor: str | None = None) -> dict[FR, float]:
    f = flavor if flavor is not None else wl.flavor
    return {(f, r): v for r, v in wl.requests.items() if v > 0}


def request_of(cq: CQNode, wl: Workload, flavor: str | None) -> dict[FR, float]:
    """What `wl` asks of `cq` on `flavor`: resources the queue has no quota for on any flavor are
    not governed by it and are left out (see docs/admission.md, deviations)."""
    return {(flavor, r): v for r, v in wl.requests.items() if v > 0 and r in cq.covered}


class Snapshot:
    """Mutable usage counters indexed by cluster queue, cohort and (flavor, resource)."""

    def __init__(self, state: ClusterState):
        self.cohorts: dict[str, CohortNode] = {name: CohortNode(name) for name in state.cohorts}
        self.cqs: dict[str, CQNode] = {}
        for spec in state.cluster_queues:
            cohort = None
            if spec.cohort is not None:
                cohort = self.cohorts.get(spec.cohort)
                if cohort is None:
                    cohort = self.cohorts[spec.cohort] = CohortNode(spec.cohort)
            node = CQNode(spec, cohort)
            self.cqs[spec.name] = node
            if cohort is not None:
                cohort.members.append(node)
                for fr, q in node.quota.items():
                    cohort.lendable[fr] = cohort.lendable.get(fr, 0.0) + q.nominal - node.guaranteed[fr]
        self.flavors = {f.name: f for f in state.flavors}
        self.capacity: dict[FR, float] = {}
        for f in state.flavors:
            for r, v in (f.capacity or {}).items():
                self.capacity[(f.name, r)] = v
        self.total_usage: dict[FR, float] = {}
        for wl in state.admitted:
            self.add_workload(wl)

    # -- mutation -------------------------------------------------------------------------
    def _add_usage(self, cq: CQNode, usage: Mapping[FR, float], sign: float) -> None:
        cohort = cq.cohort
        for fr, v in usage.items():
            old = cq.usage.get(fr, 0.0)
            new = old + sign * v
            cq.usage[fr] = new
            self.total_usage[fr] = self.total_usage.get(fr, 0.0) + sign * v
            if cohort is not None:
                g = cq.guaranteed.get(fr, 0.0)
                delta = max(0.0, new - g) - max(0.0, old - g)
                if delta:
                    cohort.usage[fr] = cohort.usage.get(fr, 0.0) + delta

    def add_workload(self, wl: Workload, flavor: str | None = None) -> None:
        cq = self.cqs.get(wl.cq)
        if cq is None:
            return
        if flavor is not None and flavor != wl.flavor:
            wl = replace(wl, flavor=flavor)
        cq.workloads[wl.name] = wl
        self._add_usage(cq, usage_of(wl), 1.0)

    def remove_workload(self, wl: Workload) -> None:
        cq = self.cqs.get(wl.cq)
        if cq is None or cq.workloads.pop(wl.name, None) is None:
            return
        self._add_usage(cq, usage_of(wl), -1.0)

    def reserve(self, cq: CQNode, usage: Mapping[FR, float], sign: float = 1.0) -> None:
        """Count usage against a queue without a workload object (a preemptor waiting for victims)."""
        self._add_usage(cq, usage, sign)

    # -- queries ---------------------------------------------------------------------------
    def nominal(self, cq: CQNode, fr: FR) -> float:
        q = cq.quota.get(fr)
        return q.nominal if q is not None else 0.0

    def borrowing_with(self, cq: CQNode, fr: FR, v: float) -> bool:
        return cq.cohort is not None and cq.usage.get(fr, 0.0) + v > self.nominal(cq, fr)

    def is_borrowing(self, cq: CQNode, frs: Iterable[FR]) -> bool:
        return any(cq.usage.get(fr, 0.0) > self.nominal(cq, fr) for fr in frs)

    def cohort_free(self, cq: CQNode, fr: FR) -> float:
        c = cq.cohort
        if c is None:
            return self.nominal(cq, fr) - cq.usage.get(fr, 0.0)
        return c.lendable.get(fr, 0.0) - c.usage.get(fr, 0.0)

    def _ceiling(self, fr: FR) -> float:
        cap = self.capacity.get(fr)
        return INF if cap is None else cap - self.total_usage.get(fr, 0.0)

    def available(self, cq: CQNode, fr: FR) -> float:
        q = cq.quota.get(fr)
        if q is None:
            return 0.0
        u = cq.usage.get(fr, 0.0)
        c = cq.cohort
        if c is None:
            avail = q.nominal - u
        else:
            g = cq.guaranteed[fr]
            local = max(0.0, g - u)
            parent = c.lendable.get(fr, 0.0) - c.usage.get(fr, 0.0)
            if q.borrowing_limit is not None:
                stored = q.nominal - g
                used_in_parent = max(0.0, u - g)
                parent = min(stored - used_in_parent + q.borrowing_limit, parent)
            avail = local + parent
        return max(0.0, min(avail, self._ceiling(fr)))

    def potential(self, cq: CQNode, fr: FR) -> float:
        """The most this queue could ever hold of fr (everything else idle)."""
        q = cq.quota.get(fr)
        if q is None:
            return 0.0
        c = cq.cohort
        if c is None:
            pot = q.nominal
        else:
            pot = cq.guaranteed[fr] + c.lendable.get(fr, 0.0)
            if q.borrowing_limit is not None:
                pot = min(pot, q.nominal + q.borrowing_limit)
        cap = self.capacity.get(fr)
        return pot if cap is None else min(pot, cap)

    def fits(self, cq: CQNode, req: Mapping[FR, float], allow_borrowing: bool = True) -> bool:
        for fr, v in req.items():
            if not allow_borrowing and self.borrowing_with(cq, fr, v):
                return False
            if v > self.available(cq, fr) + 1e-9:
                return False
        return True

    def dominant_share(
        self, cq: CQNode, plus: Mapping[FR, float] | None = None, minus: Mapping[FR, float] | None = None
    ) -> float:
        """Kueue's dominant resource share: max over resources of borrowed*1000/cohort lendable, / weight."""
        c = cq.cohort
        if c is None:
            return 0.0
        borrowed: dict[str, float] = {}
        lendable: dict[str, float] = {}
        for fr in cq.quota:
            u = (
                cq.usage.get(fr, 0.0)
                + (plus.get(fr, 0.0) if plus else 0.0)
                - (minus.get(fr, 0.0) if minus else 0.0)
            )
            b = max(0.0, u - self.nominal(cq, fr))
            borrowed[fr[1]] = borrowed.get(fr[1], 0.0) + b
            lendable[fr[1]] = lendable.get(fr[1], 0.0) + c.lendable.get(fr, 0.0)
        share = 0.0
        for r, b in borrowed.items():
            lr = lendable[r]
            if lr > 0 and b > 0:
                share = max(share, b * 1000.0 / lr)
        w = cq.spec.fair_sharing_weight
        if w <= 0:
            return INF if share > 0 else 0.0
        return share / w
