"""Quota accounting: Kueue's resource nodes, a tree of cohorts with cluster queues as leaves.

Source: kueue pkg/cache/scheduler/resource_node.go (`available`, `potentialAvailable`,
`addUsage`, `removeUsage`, `localQuota`, `QuantitiesFitInQuota`), clusterqueue_snapshot.go
(`Available`, `Fits`, `BorrowingWith`), cohort_snapshot.go and fair_sharing.go (dominant
resource share). Per (flavor, resource) a node has its own quota (nominal, borrowing limit,
lending limit) and a subtree quota: its nominal plus what its children lend. The part of a
node's subtree quota it does not lend (`subtree - lending_limit`) is its local quota; usage past
it is stored in the parent. A flavor's physical capacity, when known, is one more ceiling on top
(the platform's view of a real pool; Kueue has no such ceiling).
"""

from __future__ import annotations

import bisect
import operator
from collections.abc import Iterable, Iterator, Mapping

from gpu_platform.admission.model import ClusterQueueSpec, ClusterState, CohortSpec, ResourceQuota, Workload
from gpu_platform.admission.nodes import GPU as GPU_RESOURCE
from gpu_platform.admission.nodes import NodeBook

FR = tuple[str, str]
_first = operator.itemgetter(0)
INF = float("inf")
_ZERO_QUOTA = ResourceQuota("", "", 0.0)


class Node:
    """A cluster queue or a cohort: quotas, subtree quota and usage per (flavor, resource)."""

    __slots__ = ("name", "parent", "quotas", "subtree", "usage", "fair_weight", "is_cq", "_lendable", "lq")

    def __init__(self, name: str, quotas: Iterable[ResourceQuota], fair_weight: float, is_cq: bool):
        self.name = name
        self.parent: CohortNode | None = None
        self.quotas: dict[FR, ResourceQuota] = {(q.flavor, q.resource): q for q in quotas}
        self.subtree: dict[FR, float] = {fr: q.nominal for fr, q in self.quotas.items()}
        self.usage: dict[FR, float] = {}
        self.fair_weight = fair_weight
        self.is_cq = is_cq
        self._lendable: dict[str, float] | None = None
        # local quota per (flavor, resource) with a lending limit, once the subtree quotas are final
        self.lq: dict[FR, float] | None = None

    def quota(self, fr: FR) -> ResourceQuota:
        return self.quotas.get(fr, _ZERO_QUOTA)

    def local_quota(self, fr: FR) -> float:
        lq = self.lq
        if lq is not None:
            return lq.get(fr, 0.0)
        q = self.quotas.get(fr)
        if q is not None and q.lending_limit is not None:
            return max(0.0, self.subtree.get(fr, 0.0) - q.lending_limit)
        return 0.0

    def freeze_local_quota(self) -> None:
        self.lq = {
            fr: max(0.0, self.subtree.get(fr, 0.0) - q.lending_limit)
            for fr, q in self.quotas.items()
            if q.lending_limit is not None
        }

    def local_available(self, fr: FR) -> float:
        lq = self.lq
        x = (lq.get(fr, 0.0) if lq is not None else self.local_quota(fr)) - self.usage.get(fr, 0.0)
        return x if x > 0.0 else 0.0  # max(0.0, x), NaN and -0.0 included

    def borrowing_with(self, fr: FR, v: float) -> bool:
        return self.subtree.get(fr, 0.0) < self.usage.get(fr, 0.0) + v

    def within_nominal(self, frs: Iterable[FR]) -> bool:
        """Kueue's IsWithinNominalInResources: usage <= subtree quota for every fr."""
        for fr in frs:
            if self.usage.get(fr, 0.0) > self.subtree.get(fr, 0.0):
                return False
        return True

    def ancestors(self) -> Iterator[CohortNode]:
        a = self.parent
        while a is not None:
            yield a
            a = a.parent

    def root(self) -> Node:
        n: Node = self
        while n.parent is not None:
            n = n.parent
        return n


class CohortNode(Node):
    __slots__ = ("spec", "child_cohorts", "child_cqs", "_height")

    def __init__(self, spec: CohortSpec):
        super().__init__(spec.name, spec.quotas, spec.fair_weight, False)
        self.spec = spec
        self.child_cohorts: list[CohortNode] = []
        self.child_cqs: list[CQNode] = []
        self._height: int | None = None  # set once the tree is final (a Snapshot's copy)

    def subtree_cqs(self) -> list[CQNode]:
        out = list(self.child_cqs)
        for c in self.child_cohorts:
            out.extend(c.subtree_cqs())
        return out

    def height(self) -> int:
        """Kueue's getNodeHeight: distance to the furthest leaf (a cohort of queues only is 1)."""
        if self._height is not None:
            return self._height
        h = min(len(self.child_cohorts) + len(self.child_cqs), 1)
        for c in self.child_cohorts:
            h = max(h, c.height() + 1)
        return h


class ResourceGroup:
    __slots__ = ("covered", "flavors")

    def __init__(self) -> None:
        self.covered: set[str] = set()
        self.flavors: list[str] = []


class CQNode(Node):
    __slots__ = ("spec", "workloads", "groups", "by_resource", "covered", "_plist", "_listed", "_seq")

    def __init__(self, spec: ClusterQueueSpec):
        super().__init__(spec.name, spec.quotas, spec.fair_sharing_weight, True)
        self.spec = spec
        self.workloads: dict[str, Workload] = {}
        # Admitted workloads by priority (ascending), for victim searches that stop at the
        # preemptor's priority; removed entries are skipped lazily.
        self._plist: list[tuple[int, int, Workload]] = []
        self._listed: dict[str, Workload] = {}
        self._seq = 0
        self.groups: list[ResourceGroup] = _resource_groups(spec.quotas)
        self.by_resource: dict[str, ResourceGroup] = {r: g for g in self.groups for r in g.covered}
        self.covered = frozenset(self.by_resource)


    def put(self, wl: Workload) -> None:
        self.workloads[wl.name] = wl
        if self._listed.get(wl.name) is not wl:
            self._seq += 1
            bisect.insort(self._plist, (wl.priority, self._seq, wl), key=lambda t: (t[0], t[1]))
            self._listed[wl.name] = wl

    def by_priority(self) -> Iterator[Workload]:
        wls = self.workloads
        for _p, _s, w in self._plist:
            if wls.get(w.name) is w:
                yield w


def _resource_groups(quotas: Iterable[ResourceQuota]) -> list[ResourceGroup]:
    """Kueue's resourceGroups, read from flat quota rows: resources that share a flavor form one
    group (coveredResources), whose flavors are tried in the order they first appear."""
    parent: dict[str, str] = {}

    def find(r: str) -> str:
        while parent[r] != r:
            parent[r] = parent[parent[r]]
            r = parent[r]
        return r

    rows = list(quotas)
    by_flavor: dict[str, str] = {}
    for q in rows:
        parent.setdefault(q.resource, q.resource)
        if q.flavor in by_flavor:
            a, b = find(q.resource), find(by_flavor[q.flavor])
            if a != b:
                parent[a] = b
        else:
            by_flavor[q.flavor] = q.resource
    groups: dict[str, ResourceGroup] = {}
    for q in rows:
        g = groups.setdefault(find(q.resource), ResourceGroup())
        g.covered.add(q.resource)
        if q.flavor not in g.flavors:
            g.flavors.append(q.flavor)
    return list(groups.values())


def usage_of(wl: Workload, flavor: str | None = None) -> dict[FR, float]:
    if flavor is None and wl.resource_flavors:
        rf = wl.resource_flavors
        return {(rf.get(r, wl.flavor), r): v for r, v in wl.requests.items() if v > 0}
    f = flavor if flavor is not None else wl.flavor
    return {(f, r): v for r, v in wl.requests.items() if v > 0}


def available(node: Node, fr: FR) -> float:
    """Kueue's `available`: may be negative when over-admitted.

    (Hot: the min/max builtins and the helper calls are written out; each expression is the
    one `max(0.0, x)` / `min(a, b)` evaluates, so results are identical bit for bit.)"""
    parent = node.parent
    used = node.usage.get(fr, 0.0)
    if parent is None:
        return node.subtree.get(fr, 0.0) - used
    parent_avail = available(parent, fr)
    lqs = node.lq
    lq = lqs.get(fr, 0.0) if lqs is not None else node.local_quota(fr)
    q = node.quotas.get(fr)
    if q is not None and q.borrowing_limit is not None:
        stored = node.subtree.get(fr, 0.0) - lq
        used_in_parent = used - lq
        if not used_in_parent > 0.0:
            used_in_parent = 0.0
        own = stored - used_in_parent + q.borrowing_limit
        if not parent_avail < own:  # min(own, parent_avail)
            parent_avail = own
    local = lq - used
    return (local if local > 0.0 else 0.0) + parent_avail


def potential_available(node: Node, fr: FR) -> float:
    """Kueue's `potentialAvailable`: the most this node could hold with everything else idle."""
    parent = node.parent
    if parent is None:
        return node.subtree.get(fr, 0.0)
    lqs = node.lq
    avail = (lqs.get(fr, 0.0) if lqs is not None else node.local_quota(fr)) + potential_available(parent, fr)
    q = node.quotas.get(fr)
    if q is not None and q.borrowing_limit is not None:
        own = node.subtree.get(fr, 0.0) + q.borrowing_limit
        if not avail < own:  # min(own, avail)
            avail = own
    return avail


def add_usage(node: Node, fr: FR, v: float) -> None:
    usage = node.usage
    u = usage.get(fr, 0.0)
    usage[fr] = u + v
    parent = node.parent
    if parent is not None:
        lqs = node.lq
        la = (lqs.get(fr, 0.0) if lqs is not None else node.local_quota(fr)) - u
        if not la > 0.0:
            la = 0.0
        if v > la:
            add_usage(parent, fr, v - la)


def remove_usage(node: Node, fr: FR, v: float) -> None:
    usage = node.usage
    u = usage.get(fr, 0.0)
    lqs = node.lq
    stored = u - (lqs.get(fr, 0.0) if lqs is not None else node.local_quota(fr))
    usage[fr] = u - v
    if stored <= 0 or node.parent is None:
        return
    remove_usage(node.parent, fr, v if not stored < v else stored)  # min(v, stored)


def quantities_fit_in_quota(node: Node, requests: Mapping[FR, float]) -> tuple[bool, dict[FR, float]]:
    fits = True
    remaining: dict[FR, float] = {}
    usage, subtree, lqs = node.usage, node.subtree, node.lq
    for fr, v in requests.items():
        u = usage.get(fr, 0.0)
        if u + v > subtree.get(fr, 0.0):
            fits = False
        local = (lqs.get(fr, 0.0) if lqs is not None else node.local_quota(fr)) - u  # local_available
        x = v - (local if local > 0.0 else 0.0)
        remaining[fr] = x if x > 0.0 else 0.0  # max(0.0, x)
    return fits, remaining


def lendable(node: CohortNode) -> dict[str, float]:
    """Kueue's calculateLendable: per resource, what the node could hold, over all flavors."""
    if node._lendable is None:
        root = node.root()
        out: dict[str, float] = {}
        for fr in root.subtree:
            out[fr[1]] = out.get(fr[1], 0.0) + potential_available(node, fr)
        node._lendable = out
    return node._lendable


class DRS:
    """Kueue's DominantResourceShare for a node: max over resources of borrowed * 1000 / what the
    parent could lend, divided by the node's fair weight (weight 0 while borrowing = +inf)."""

    __slots__ = ("weight", "ratio", "borrowing", "borrowed")

    def __init__(self, weight: float, ratio: float, borrowing: bool, borrowed: tuple[FR, ...] = ()):
        self.weight = weight
        self.ratio = ratio
        self.borrowing = borrowing
        self.borrowed = borrowed

    @property
    def zero_weight_borrows(self) -> bool:
        return self.weight == 0 and self.borrowing

    @property
    def is_zero(self) -> bool:
        return self.ratio == 0

    @property
    def share(self) -> float:
        if self.zero_weight_borrows:
            return INF
        if self.ratio == 0:
            return 0.0
        return self.ratio / self.weight

    def key(self) -> tuple[int, float]:
        """Sort key matching Kueue's CompareDRS (lower = preferred for admission)."""
        return (1, self.ratio) if self.zero_weight_borrows else (0, self.share)

    def borrowing_on(self, requested: Mapping[FR, float]) -> bool:
        return any(requested.get(fr, 0.0) > 0 for fr in self.borrowed)


NEGATIVE_DRS = DRS(1.0, -1.0, False)


def compare_drs(a: DRS, b: DRS) -> int:
    ka, kb = a.key(), b.key()
    return (ka > kb) - (ka < kb)


class _Skeleton:
    """The static part of a Snapshot for one (cluster queues, cohorts, flavors): the cohort forest,
    each node's quotas, subtree quotas and resource groups. Built once per distinct policy state
    and copied (with empty usage) into every Snapshot of it, so a caller that asks the engine many
    times about one policy (the simulator, a drain) does not rebuild the tree each time."""

    __slots__ = (
        "cohorts", "cqs", "order", "flavors", "capacity", "keys", "potential", "spot_quota", "tas_only", "spare",
    )

    def __init__(self, state: ClusterState):
        self.keys = (state.cluster_queues, state.cohorts, state.flavors)
        cohorts: dict[str, CohortNode] = {}
        specs: dict[str, CohortSpec] = {}
        for c in state.cohorts:
            spec = CohortSpec(c) if isinstance(c, str) else c
            specs[spec.name] = spec
        for spec in state.cluster_queues:
            if spec.cohort is not None and spec.cohort not in specs:
                specs[spec.cohort] = CohortSpec(spec.cohort)
        for spec in list(specs.values()):
            if spec.parent is not None and spec.parent not in specs:
                specs[spec.parent] = CohortSpec(spec.parent)
        for name, spec in specs.items():
            cohorts[name] = CohortNode(spec)
        for node in cohorts.values():
            p = node.spec.parent
            if p is not None:
                node.parent = cohorts[p]
                node.parent.child_cohorts.append(node)
        cqs: dict[str, CQNode] = {}
        for spec in state.cluster_queues:
            cq = CQNode(spec)
            if spec.cohort is not None:
                cq.parent = cohorts[spec.cohort]
                cq.parent.child_cqs.append(cq)
            cqs[spec.name] = cq
        for node in cohorts.values():
            if node.parent is None:
                _accumulate(node)
        for node in [*cohorts.values(), *cqs.values()]:  # static: depends on quotas only
            node.freeze_local_quota()
        for node in cohorts.values():
            lendable(node)
        self.cohorts = cohorts
        self.cqs = cqs
        self.flavors = {f.name: f for f in state.flavors}
        self.capacity: dict[FR, float] = {}
        for f in state.flavors:
            for r, v in (f.capacity or {}).items():
                self.capacity[(f.name, r)] = v
        # Static answers, filled as asked: Snapshot.potential per (queue, fr) (quotas and
        # capacity only, no usage), and per (queue, flavor) whether the queue has quota of its
        # own there (the engine's spot rule), and per queue whether every flavor of it is
        # topology-aware (Kueue's isTASOnly, `admission/tas.py`).
        self.potential: dict[tuple[str, FR], float] = {}
        self.spot_quota: dict[tuple[str, str], bool] = {}
        self.tas_only: dict[str, bool] = {}
        # node sets of released Snapshots, emptied when taken again (see Snapshot.release)
        self.spare: list[tuple[dict[str, CohortNode], dict[str, CQNode]]] = []

    def matches(self, state: ClusterState) -> bool:
        k = self.keys
        return k[0] is state.cluster_queues and k[1] is state.cohorts and k[2] is state.flavors

    def take(self) -> tuple[dict[str, CohortNode], dict[str, CQNode]]:
        """Nodes for a new Snapshot: a released set emptied of usage and workloads (what `copy`
        leaves empty; the rest of a node never changes), else a fresh copy."""
        try:
            cohorts, cqs = self.spare.pop()
        except IndexError:
            return self.copy()
        for n in cohorts.values():
            n.usage = {}
        for c in cqs.values():
            c.usage, c.workloads, c._plist, c._listed, c._seq = {}, {}, [], {}, 0
        return cohorts, cqs

    def give_back(self, cohorts: dict[str, CohortNode], cqs: dict[str, CQNode]) -> bool:
        """Keep a released Snapshot's nodes for `take` (False: enough are kept already)."""
        if len(self.spare) >= 2:
            return False
        self.spare.append((cohorts, cqs))
        return True

    def copy(self) -> tuple[dict[str, CohortNode], dict[str, CQNode]]:
        """Fresh nodes sharing the static dicts (never mutated) with empty usage and workloads."""
        cohorts: dict[str, CohortNode] = {}
        for name, src in self.cohorts.items():
            n = CohortNode.__new__(CohortNode)
            n.name, n.quotas, n.subtree, n.usage = src.name, src.quotas, src.subtree, {}
            n.fair_weight, n.is_cq, n._lendable, n.spec = src.fair_weight, False, src._lendable, src.spec
            n.lq = src.lq
            n.child_cohorts, n.child_cqs, n.parent = [], [], None
            n._height = src.height()
            cohorts[name] = n
        for name, src in self.cohorts.items():
            if src.parent is not None:
                n = cohorts[name]
                n.parent = cohorts[src.parent.name]
                n.parent.child_cohorts.append(n)
        cqs: dict[str, CQNode] = {}
        for name, src in self.cqs.items():
            c = CQNode.__new__(CQNode)
            c.name, c.quotas, c.subtree, c.usage = src.name, src.quotas, src.subtree, {}
            c.fair_weight, c.is_cq, c._lendable, c.spec = src.fair_weight, True, None, src.spec
            c.lq = src.lq
            c.workloads, c._plist, c._listed, c._seq = {}, [], {}, 0
            c.groups, c.by_resource, c.covered = src.groups, src.by_resource, src.covered
            c.parent = None
            if src.parent is not None:
                c.parent = cohorts[src.parent.name]
                c.parent.child_cqs.append(c)
            cqs[name] = c
        return cohorts, cqs


# The few policy states asked about lately (a simulator run, a gate tick's drain); entries hold
# their key tuples, so an id is never reused while its entry lives.
_SKELETONS: list[_Skeleton] = []
_SKELETON_CACHE = 4


def _skeleton(state: ClusterState) -> _Skeleton:
    for i, sk in enumerate(_SKELETONS):
        if sk.matches(state):
            if i:
                _SKELETONS.insert(0, _SKELETONS.pop(i))
            return sk
    sk = _Skeleton(state)
    _SKELETONS.insert(0, sk)
    del _SKELETONS[_SKELETON_CACHE:]
    return sk


class Snapshot:
    """The cohort forest, cluster queues and their admitted workloads, mutable within a cycle."""

    def __init__(self, state: ClusterState):
        sk = _skeleton(state)
        self._skeleton: _Skeleton | None = sk
        self.cohorts, self.cqs = sk.take()
        self.flavors = sk.flavors
        self.capacity = sk.capacity
        self._potential = sk.potential
        self.spot_quota = sk.spot_quota
        self.tas_only = sk.tas_only
        self.total_usage: dict[FR, float] = {}
        self.now = state.now
        self.nodes: NodeBook | None = NodeBook(state.nodes) if state.nodes else None
        self._add_admitted(state.admitted)
        if self.nodes is not None:
            for wl in sorted(state.admitted, key=lambda w: w.placement is None):
                self.nodes.place(wl)

    def release(self) -> None:
        """Once the snapshot is done with: its nodes go back to the policy's skeleton, which hands
        them (emptied) to the next Snapshot of that policy state, or, the skeleton holding enough,
        the tree's parent/child reference cycles are broken so it is freed at once rather than by
        the cyclic GC (a simulator makes one per engine call). The snapshot is not to be read
        after a later Snapshot of the same policy state is built. A second release does nothing."""
        sk = self._skeleton
        if sk is None:
            return
        self._skeleton = None
        if not sk.give_back(self.cohorts, self.cqs):
            for node in self.cohorts.values():
                node.child_cohorts = []
                node.child_cqs = []

    def _add_admitted(self, admitted: Iterable[Workload]) -> None:
        """add_workload for each, in bulk: usage is summed per queue and added once per
        (flavor, resource). Equivalent, since what a node passes to its parent,
        max(0, usage - local quota) growth, telescopes over successive additions."""
        cqs = self.cqs
        sums: dict[str, dict[FR, float]] = {}
        entries: dict[str, list[tuple[int, int, Workload]]] = {}
        for wl in admitted:
            qn = wl.cq
            cq = cqs.get(qn)
            if cq is None:
                continue
            name = wl.name
            cq.workloads[name] = wl
            listed = cq._listed
            if listed.get(name) is not wl:
                cq._seq += 1
                es = entries.get(qn)
                if es is None:
                    es = entries[qn] = []
                es.append((wl.priority, cq._seq, wl))
                listed[name] = wl
            acc = sums.get(qn)
            if acc is None:
                acc = sums[qn] = {}
            rf = wl.resource_flavors
            flavor = wl.flavor
            for r, v in wl.requests.items():
                if v > 0:
                    fr = ((rf.get(r, flavor) if rf else flavor), r)
                    acc[fr] = acc.get(fr, 0.0) + v
        for name, es in entries.items():
            es.sort(key=_first)  # stable: (priority, insertion order), as put() keeps it
            cqs[name]._plist = es
        total = self.total_usage
        for name, acc in sums.items():
            cq = cqs[name]
            for fr, v in acc.items():
                add_usage(cq, fr, v)
                total[fr] = total.get(fr, 0.0) + v

    # -- mutation -------------------------------------------------------------------------
    def add_usage(self, cq: CQNode, usage: Mapping[FR, float]) -> None:
        for fr, v in usage.items():
            add_usage(cq, fr, v)
            self.total_usage[fr] = self.total_usage.get(fr, 0.0) + v

    def remove_usage(self, cq: CQNode, usage: Mapping[FR, float]) -> None:
        for fr, v in usage.items():
            remove_usage(cq, fr, v)
            self.total_usage[fr] = self.total_usage.get(fr, 0.0) - v

    def add_workload(self, wl: Workload, place: bool = True) -> None:
        cq = self.cqs.get(wl.cq)
        if cq is None:
            return
        cq.put(wl)
        self.add_usage(cq, usage_of(wl))
        if place and self.nodes is not None:
            self.nodes.place(wl)

    def remove_workload(self, wl: Workload) -> None:
        cq = self.cqs.get(wl.cq)
        if cq is None or cq.workloads.pop(wl.name, None) is None:
            return
        self.remove_usage(cq, usage_of(wl))
        if self.nodes is not None:
            self.nodes.release(wl)

    def node_fit(self, wl: Workload, usage: Mapping[FR, float]) -> bool:
        """Whether the workload's pods find nodes on the flavor `usage` gives its GPUs (True where
        the state has no nodes for that flavor: quota only)."""
        book = self.nodes
        if book is None:
            return True
        for (f, r), v in usage.items():
            if r == GPU_RESOURCE and v > 0 and book.has(f):
                return book.fits(wl, f)
        return True

    def node_refusal(self, wl: Workload, usage: Mapping[FR, float]) -> str | None:
        book = self.nodes
        if book is None:
            return None
        for (f, r), v in usage.items():
            if r == GPU_RESOURCE and v > 0 and book.has(f):
                return book.refusal(wl, f)
        return None

    # -- queries ---------------------------------------------------------------------------
    def nominal(self, cq: CQNode, fr: FR) -> float:
        return cq.quota(fr).nominal

    def borrowing_with(self, cq: CQNode, fr: FR, v: float) -> bool:
        """Kueue's ClusterQueueSnapshot.BorrowingWith: nominal < usage + v."""
        return cq.quota(fr).nominal < cq.usage.get(fr, 0.0) + v

    def is_borrowing(self, cq: CQNode, frs: Iterable[FR]) -> bool:
        """Kueue's cqIsBorrowing: a queue in a cohort whose usage is above nominal on any fr."""
        if cq.parent is None:
            return False
        return any(cq.usage.get(fr, 0.0) > cq.quota(fr).nominal for fr in frs)

    def available(self, cq: CQNode, fr: FR) -> float:
        avail = available(cq, fr)
        if not avail > 0.0:  # max(0.0, avail)
            avail = 0.0
        cap = self.capacity.get(fr)
        if cap is not None:
            left = cap - self.total_usage.get(fr, 0.0)
            if left < avail:  # min(avail, left)
                avail = left
            if not avail > 0.0:
                avail = 0.0
        return avail

    def potential(self, cq: CQNode, fr: FR) -> float:
        key = (cq.name, fr)
        pot = self._potential.get(key)
        if pot is None:
            pot = potential_available(cq, fr)
            cap = self.capacity.get(fr)
            if cap is not None and cap < pot:  # min(pot, cap)
                pot = cap
            self._potential[key] = pot
        return pot

    def cohort_free(self, cq: CQNode, fr: FR) -> float:
        """Unused quota this queue could still get from its cohort tree (for messages)."""
        return self.available(cq, fr) - max(0.0, self.nominal(cq, fr) - cq.usage.get(fr, 0.0))

    def fits(self, cq: CQNode, req: Mapping[FR, float], allow_borrowing: bool = True) -> bool:
        for fr, v in req.items():
            if not allow_borrowing and self.borrowing_with(cq, fr, v):
                return False
            if v > self.available(cq, fr) + 1e-9:
                return False
        return True

    def lendable(self, node: CohortNode) -> dict[str, float]:
        return lendable(node)

    def drs(self, node: Node, plus: Mapping[FR, float] | None = None) -> DRS:
        if node.parent is None:
            return DRS(node.fair_weight, 0.0, False)
        borrowing: dict[str, float] = {}
        borrowed: list[FR] = []
        for fr, quota in node.subtree.items():
            b = (plus.get(fr, 0.0) if plus else 0.0) + node.usage.get(fr, 0.0) - quota
            if b > 1e-12:
                borrowing[fr[1]] = borrowing.get(fr[1], 0.0) + b
                borrowed.append(fr)
        if not borrowing:
            return DRS(node.fair_weight, 0.0, False)
        lendable = self.lendable(node.parent)
        ratio, dominant = 0.0, ""
        for r, b in borrowing.items():
            lr = lendable.get(r, 0.0)
            if lr > 0:
                x = b * 1000.0 / lr
                if x > ratio or (x == ratio and r < dominant):
                    ratio, dominant = x, r
        return DRS(node.fair_weight, ratio, True, tuple(borrowed))


def _accumulate(cohort: CohortNode) -> None:
    """Kueue's updateCohortResourceNode: subtree quota = own nominal + what children lend."""
    cohort.subtree = {fr: q.nominal for fr, q in cohort.quotas.items()}
    children: list[Node] = []
    for child in cohort.child_cohorts:
        _accumulate(child)
        children.append(child)
    children.extend(cohort.child_cqs)
    for child in children:
        for fr, q in child.subtree.items():
            cohort.subtree[fr] = cohort.subtree.get(fr, 0.0) + q - child.local_quota(fr)
