"""Victim selection after kueue pkg/scheduler/preemption, plus the platform's lane rules.

Classical preemption (preemption.go `classicalPreemptions`, classical_strategy.go
`ClassicalPreemptionPlan`, classical/hierarchical_preemption.go and candidate_generator.go):
candidates are classified per victim (same queue; hierarchical reclaim, where the preemptor's
subtree has the better claim on the quota; reclaim without borrowing; reclaim while borrowing
under borrowWithinCohort), ordered by common/ordering.go `CandidatesOrdering` (other queues
first, lower priority first, most recently admitted first), then taken greedily until the
preemptor fits and filled back in reverse (a minimal set). One or two runs are tried: with and
without the preemptor borrowing, in Kueue's order.

Fair sharing (fair_strategy.go, fairsharing/ordering.go, target.go, least_common_ancestor.go):
queues are visited from the root by highest dominant resource share of the nodes just below the
lowest common ancestor; rule S2-a (LessThanOrEqualToFinalShare) first, then S2-b
(LessThanInitialShare) on the candidates S2-a passed over; a preemptor that stays within its
nominal quota reclaims unconditionally (`InCohortReclamation`, feature FairSharingPreemptWithinNominal).

Lane rules filter candidates first: protected queues never, evidence jobs only when checkpointed,
a queue with yields_to only for preemptors from those queues or carrying a safety approval, and
workloads admitted earlier in the same gate tick never (`fresh`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Container, Iterator, Mapping
from dataclasses import dataclass, field

from gpu_platform.admission.model import (
    ANY,
    IN_CLUSTER_QUEUE,
    IN_COHORT_FAIR_SHARING,
    IN_COHORT_RECLAIM_WHILE_BORROWING,
    IN_COHORT_RECLAMATION,
    LOWER_OR_NEWER_EQUAL,
    LOWER_PRIORITY,
    NEVER,
    AdmissionFairSharing,
    Workload,
)
from gpu_platform.admission.quota import (
    DRS,
    FR,
    NEGATIVE_DRS,
    CohortNode,
    CQNode,
    Node,
    Snapshot,
    compare_drs,
    quantities_fit_in_quota,
    usage_of,
)

NEVER_V, WITHIN_CQ, HIER_RECLAIM, RECLAIM_NO_BORROW, RECLAIM_WHILE_BORROW = range(5)
_REASON = {
    WITHIN_CQ: IN_CLUSTER_QUEUE,
    HIER_RECLAIM: IN_COHORT_RECLAMATION,
    RECLAIM_NO_BORROW: IN_COHORT_RECLAMATION,
    RECLAIM_WHILE_BORROW: IN_COHORT_RECLAIM_WHILE_BORROWING,
}


@dataclass(slots=True)
class TargetSearch:
    """Outcome of one victim search: targets (victim, reason) or why there are none."""

    targets: list[tuple[Workload, str]]
    excluded: Counter[str] = field(default_factory=Counter)
    candidates: int = 0


def exclusion(
    victim: Workload, vcq: CQNode, preemptor: Workload, pcq: CQNode, now: float | None = None
) -> str | None:
    """The lane rule that keeps `victim` from being preempted by `preemptor` at `now`, or None.

    An evidence job is a victim only once checkpointed, except for a serving queue that lends to
    evidence runs with a bound on the wait (`ClusterQueueSpec.evidence_reclaim_after`): it may
    take back a run that has held its GPUs that long without a checkpoint."""
    if vcq.spec.protected:
        return f"{vcq.name} is protected"
    if victim.evidence and not victim.checkpointed:
        spec = pcq.spec
        bound = spec.evidence_reclaim_after if spec.serving and spec.lend_to_evidence else None
        if bound is None:
            return "evidence job not checkpointed"
        if now is None or now - victim.admitted_at < bound - 1e-9:
            return f"evidence job not checkpointed (taken back after {bound / 60:g} min without one)"
    yt = vcq.spec.yields_to
    if yt is not None and pcq.name not in yt and not preemptor.safety_approval:
        return f"{vcq.name} yields only to {', '.join(yt) or 'nobody'} or a safety approval"
    return None


def uses(wl: Workload, frs: Container[FR]) -> bool:
    if wl.resource_flavors:
        return any(fr in frs for fr in usage_of(wl))
    f = wl.flavor
    for r, v in wl.requests.items():
        if v > 0 and (f, r) in frs:
            return True
    return False


def satisfies_policy(preemptor: Workload, cand: Workload, policy: str) -> bool:
    """Kueue's SatisfiesPreemptionPolicy (common/preemption_policy.go)."""
    if policy == LOWER_PRIORITY:
        return cand.priority < preemptor.priority
    if policy == LOWER_OR_NEWER_EQUAL:
        return cand.priority < preemptor.priority or (
            cand.priority == preemptor.priority and preemptor.created_at < cand.created_at
        )
    return policy == ANY


def reserved_second(w: Workload) -> int:
    """When `w`'s quota was reserved, as Kueue compares it: the QuotaReserved condition's
    LastTransitionTime (common/ordering.go `quotaReservationTime`), a metav1.Time, which the API
    server stores as RFC 3339 with whole seconds. Two workloads admitted within the same second
    are equally recent, and the UID decides between them."""
    return math.floor(w.admitted_at)


def order_key(cq_name: str, afs: AdmissionFairSharing | None = None):
    """Kueue's CandidatesOrdering (preemption/common/ordering.go): workloads whose eviction is
    already under way first, then other queues before the preemptor's own, (Admission Fair
    Sharing on the preemptor's queue) its LocalQueues with the higher usage first, lower priority
    first, most recently admitted (quota reserved, to the second: `reserved_second`) first, and
    the UID (here: `uid`, else the name) for equal times and priorities."""
    if afs is not None:
        shares: dict[str | None, float] = {}

        def afs_key(w: Workload):
            same = w.cq == cq_name
            share = 0.0
            if same:
                share = shares.get(w.team)
                if share is None:
                    share = shares[w.team] = afs.usage(w.team)
            return (not w.evicted, same, -share, w.priority, -math.floor(w.admitted_at), w.name if w.uid is None else w.uid)

        return afs_key

    key = _ORDER_KEYS.get(cq_name)
    if key is None:

        def key(w: Workload):
            return (not w.evicted, w.cq == cq_name, w.priority, -math.floor(w.admitted_at), w.name if w.uid is None else w.uid)

        if len(_ORDER_KEYS) > 4096:
            _ORDER_KEYS.clear()
        _ORDER_KEYS[cq_name] = key
    return key


# order_key's key per preemptor queue without Admission Fair Sharing (it depends on the name only)
_ORDER_KEYS: dict[str, object] = {}


def _evicted_first(*groups: list[_Cand]) -> list[_Cand]:
    """classical/candidate_generator.go NewCandidateIterator: each group sorted, then the evicted
    prefix of every group (hierarchical, priority, same queue) before the rest of any group."""
    head: list[_Cand] = []
    tail: list[_Cand] = []
    for g in groups:
        i = 0
        while i < len(g) and g[i].wl.evicted:
            i += 1
        head += g[:i]
        tail += g[i:]
    return head + tail


class _Ctx:
    """One victim search: the preemptor, its queue, what it asks for and what needs preemption."""

    __slots__ = ("snap", "wl", "cq", "usage", "need", "excluded", "fresh")

    def __init__(
        self,
        snap: Snapshot,
        wl: Workload,
        cq: CQNode,
        usage: Mapping[FR, float],
        need: Container[FR],
        fresh: Container[str],
    ):
        self.snap = snap
        self.wl = wl
        self.cq = cq
        self.usage = dict(usage)
        self.need = frozenset(need)
        self.excluded: Counter[str] = Counter()
        self.fresh = fresh

    def allowed(self, cand: Workload, ccq: CQNode) -> bool:
        if cand.name in self.fresh:
            return False
        why = exclusion(cand, ccq, self.wl, self.cq, self.snap.now)
        if why:
            self.excluded[why] += 1
            return False
        return True

    def fits(self, allow_borrowing: bool) -> bool:
        snap, cq = self.snap, self.cq
        for fr, v in self.usage.items():
            if not allow_borrowing and snap.borrowing_with(cq, fr, v):
                return False
            if v > snap.available(cq, fr) + 1e-9:
                return False
        # where nodes are known, the victims must also free nodes the preemptor's pods fit on
        return snap.node_fit(self.wl, self.usage)


# -- classical ------------------------------------------------------------------------------
def _bwc(cq: CQNode) -> tuple[bool, int | None]:
    if cq.spec.borrow_within_cohort == NEVER:
        return False, None
    return True, cq.spec.max_priority_threshold


def _classify(ctx: _Ctx, cand: Workload, ccq: CQNode, advantage: bool) -> int:
    same = ccq is ctx.cq
    policy = ctx.cq.spec.within_cluster_queue if same else ctx.cq.spec.reclaim_within_cohort
    if not satisfies_policy(ctx.wl, cand, policy):
        return NEVER_V
    if not uses(cand, ctx.need):
        return NEVER_V
    if not ctx.allowed(cand, ccq):
        return NEVER_V
    if same:
        return WITHIN_CQ
    if advantage:
        return HIER_RECLAIM
    allowed, threshold = _bwc(ctx.cq)
    if not allowed:
        return RECLAIM_NO_BORROW
    if cand.priority >= ctx.wl.priority or (threshold is not None and cand.priority > threshold):
        return RECLAIM_NO_BORROW
    return RECLAIM_WHILE_BORROW


@dataclass(slots=True)
class _Cand:
    wl: Workload
    cq: CQNode
    lca: CohortNode | None
    variant: int


def _from_cq(ctx: _Ctx, ccq: CQNode, lca: CohortNode | None, advantage: bool, out: list[_Cand]) -> None:
    same = ccq is ctx.cq
    policy = ctx.cq.spec.within_cluster_queue if same else ctx.cq.spec.reclaim_within_cohort
    if policy == NEVER:
        return
    # by_priority ascends: past the preemptor's priority (LowerPriority: at it) nobody satisfies
    # the policy, so the walk stops there
    top = ctx.wl.priority
    strict = policy == LOWER_PRIORITY
    for w in ccq.by_priority():
        if policy != ANY and (w.priority > top or (strict and w.priority == top)):
            break
        v = _classify(ctx, w, ccq, advantage)
        if v != NEVER_V:
            out.append(_Cand(w, ccq, lca, v))


def _collect_subtree(
    ctx: _Ctx, current: CohortNode, root: CohortNode, skip: CohortNode | None, adv: bool, out: list[_Cand]
) -> None:
    for child in current.child_cohorts:
        if child is skip or child.within_nominal(ctx.need):
            continue
        _collect_subtree(ctx, child, root, skip, adv, out)
    for ccq in current.child_cqs:
        if ccq is ctx.cq:
            continue
        if not ccq.within_nominal(ctx.need):
            _from_cq(ctx, ccq, root, adv, out)


def _hierarchical(ctx: _Ctx) -> tuple[list[_Cand], list[_Cand]]:
    hier: list[_Cand] = []
    prio: list[_Cand] = []
    cq = ctx.cq
    if cq.parent is None or cq.spec.reclaim_within_cohort == NEVER:
        return hier, prio
    adv, remaining = quantities_fit_in_quota(cq, ctx.usage)
    prev: CohortNode | None = None
    for cur in cq.ancestors():
        _collect_subtree(ctx, cur, cur, prev, adv, hier if adv else prio)
        fits, remaining = quantities_fit_in_quota(cur, remaining)
        adv = adv or fits
        prev = cur
    return hier, prio


def _valid(ctx: _Ctx, c: _Cand, borrow: bool) -> bool:
    if c.cq is ctx.cq:
        return True
    if borrow and c.variant == RECLAIM_NO_BORROW:
        return False
    if c.cq.within_nominal(ctx.need):
        return False
    for node in c.cq.ancestors():
        if node is c.lca:
            break
        if node.within_nominal(ctx.need):
            return False
    return True


def _fill_back(ctx: _Ctx, targets: list[tuple[Workload, str]], allow_borrowing: bool) -> list[tuple[Workload, str]]:
    snap = ctx.snap
    i = len(targets) - 2
    while i >= 0:
        snap.add_workload(targets[i][0])
        if ctx.fits(allow_borrowing):
            targets[i] = targets[-1]
            targets.pop()
        else:
            snap.remove_workload(targets[i][0])
        i -= 1
    return targets


def _restore(snap: Snapshot, targets: list[tuple[Workload, str]]) -> None:
    for w, _ in targets:
        snap.add_workload(w)


def classical_targets(ctx: _Ctx) -> tuple[list[tuple[Workload, str]], int]:
    cq = ctx.cq
    same: list[_Cand] = []
    if cq.spec.within_cluster_queue != NEVER:
        _from_cq(ctx, cq, None, False, same)
    hier, prio = _hierarchical(ctx)
    key = order_key(cq.name, cq.spec.admission_fair_sharing)
    for lst in (same, prio, hier):
        lst.sort(key=lambda c: key(c.wl))
    cands = _evicted_first(hier, prio, same)
    n = len(cands)
    if not cands:
        return [], 0
    forbidden = cq.spec.borrow_within_cohort == NEVER
    if not hier and not prio:
        runs = [True]
    elif forbidden and not _under_nominal(ctx):
        runs = [True]
    elif forbidden and not hier:
        runs = [False, True]
    else:
        runs = [True, False]
    snap = ctx.snap
    for borrow in runs:
        targets: list[tuple[Workload, str]] = []
        for c in cands:
            if not _valid(ctx, c, borrow):
                continue
            snap.remove_workload(c.wl)
            targets.append((c.wl, _REASON[c.variant]))
            if ctx.fits(borrow):
                targets = _fill_back(ctx, targets, borrow)
                _restore(snap, targets)
                return targets, n
        _restore(snap, targets)
    return [], n


def _under_nominal(ctx: _Ctx) -> bool:
    """queueUnderNominalInResourcesNeedingPreemption: usage < nominal on every fr needing preemption."""
    cq = ctx.cq
    return all(cq.quota(fr).nominal > cq.usage.get(fr, 0.0) for fr in ctx.need)


# -- fair sharing ---------------------------------------------------------------------------
class _Ordering:
    """fairsharing.TargetClusterQueueOrdering (fairsharing/ordering.go): from the root, the child
    with the highest dominant resource share; a cohort wins a tie with a queue and, among cohorts,
    the later one; among queues with equal shares, `nextTarget` compares their next candidates with
    `CandidatesOrdering` (AFS off: evicted first, another queue before the preemptor's own, lower
    priority, more recent reservation, smaller UID) and visits the queue whose candidate is first."""

    def __init__(self, ctx: _Ctx, candidates: list[Workload]):
        self.ctx = ctx
        self.pcq = ctx.cq
        self.ancestors = set(map(id, ctx.cq.ancestors()))
        self.by_cq: dict[str, list[Workload]] = {}
        for c in candidates:
            self.by_cq.setdefault(c.cq, []).append(c)
        self.pruned_cqs: set[str] = set()
        self.pruned_cohorts: set[int] = set()
        self.tie_key = order_key(ctx.cq.name)

    def has(self, cq: CQNode) -> bool:
        return bool(self.by_cq.get(cq.name))

    def pop(self, cq: CQNode) -> Workload:
        return self.by_cq[cq.name].pop(0)

    def drop(self, cq: CQNode) -> None:
        self.pruned_cqs.add(cq.name)

    def __iter__(self) -> Iterator[CQNode]:
        if self.pcq.parent is None:
            while self.has(self.pcq):
                yield self.pcq
            return
        root = self.pcq.root()
        assert isinstance(root, CohortNode)
        while id(root) not in self.pruned_cohorts:
            t = self._next(root)
            if t is not None:
                yield t

    def _next(self, cohort: CohortNode) -> CQNode | None:
        snap = self.ctx.snap
        best_cq: CQNode | None = None
        best_cq_drs = NEGATIVE_DRS
        for cq in cohort.child_cqs:
            if cq.name in self.pruned_cqs:
                continue
            d = snap.drs(cq)
            if (d.is_zero and cq is not self.pcq) or not self.has(cq):
                self.pruned_cqs.add(cq.name)
                continue
            c = compare_drs(d, best_cq_drs)
            if c > 0:
                best_cq, best_cq_drs = cq, d
            elif c == 0 and best_cq is not None:
                # equal shares: the queue whose next candidate comes first in CandidatesOrdering
                # (Admission Fair Sharing left out) is visited first
                if self.tie_key(self.by_cq[cq.name][0]) < self.tie_key(self.by_cq[best_cq.name][0]):
                    best_cq = cq
        best_co: CohortNode | None = None
        best_co_drs = NEGATIVE_DRS
        for child in cohort.child_cohorts:
            if id(child) in self.pruned_cohorts:
                continue
            d = snap.drs(child)
            if d.is_zero and id(child) not in self.ancestors:
                self.pruned_cohorts.add(id(child))
            elif compare_drs(d, best_co_drs) >= 0:
                best_co, best_co_drs = child, d
        if best_co is None and best_cq is None:
            self.pruned_cohorts.add(id(cohort))
            return None
        if best_co is not None and compare_drs(best_co_drs, best_cq_drs) >= 0:
            return self._next(best_co)
        return best_cq

    def _almost_lca(self, node: CQNode, lca: CohortNode | None) -> Node:
        a: Node = node
        for anc in node.ancestors():
            if anc is lca:
                return a
            a = anc
        return a

    def shares(self, target: CQNode) -> tuple[DRS, DRS]:
        lca = None
        for anc in target.ancestors():
            if id(anc) in self.ancestors:
                lca = anc
                break
        snap = self.ctx.snap
        return snap.drs(self._almost_lca(self.pcq, lca)), snap.drs(self._almost_lca(target, lca))

    def target_share_after(self, target: CQNode, wl: Workload) -> DRS:
        snap = self.ctx.snap
        u = usage_of(wl)
        snap.remove_usage(target, u)
        try:
            lca = None
            for anc in target.ancestors():
                if id(anc) in self.ancestors:
                    lca = anc
                    break
            return snap.drs(self._almost_lca(target, lca))
        finally:
            snap.add_usage(target, u)


def _find_candidates_flat(ctx: _Ctx) -> list[Workload]:
    cq = ctx.cq
    out: list[Workload] = []
    if cq.spec.within_cluster_queue != NEVER:
        for w in cq.by_priority():
            if satisfies_policy(ctx.wl, w, cq.spec.within_cluster_queue) and uses(w, ctx.need) and ctx.allowed(w, cq):
                out.append(w)
    if cq.parent is not None and cq.spec.reclaim_within_cohort != NEVER:
        root = cq.root()
        assert isinstance(root, CohortNode)
        for other in root.subtree_cqs():
            if other is cq or not ctx.snap.is_borrowing(other, ctx.need):
                continue
            for w in other.by_priority():
                if (
                    satisfies_policy(ctx.wl, w, cq.spec.reclaim_within_cohort)
                    and uses(w, ctx.need)
                    and ctx.allowed(w, other)
                ):
                    out.append(w)
    return out


def fair_targets(ctx: _Ctx) -> tuple[list[tuple[Workload, str]], int]:
    cands = _find_candidates_flat(ctx)
    if not cands:
        return [], 0
    cands.sort(key=order_key(ctx.cq.name, ctx.cq.spec.admission_fair_sharing))
    snap, cq = ctx.snap, ctx.cq
    snap.add_usage(cq, ctx.usage)
    targets: list[tuple[Workload, str]] = []
    fits = False

    def take(w: Workload, reason: str) -> bool:
        nonlocal fits
        snap.remove_workload(w)
        targets.append((w, reason))
        snap.remove_usage(cq, ctx.usage)
        ok = ctx.fits(True)
        snap.add_usage(cq, ctx.usage)
        if ok:
            fits = True
        return ok

    try:
        within_nominal = all(cq.usage.get(fr, 0.0) <= cq.quota(fr).nominal for fr in ctx.need)
        ordering = _Ordering(ctx, cands)
        retry: list[Workload] = []
        for tcq in ordering:
            if tcq is cq:
                if take(ordering.pop(tcq), IN_CLUSTER_QUEUE):
                    break
                continue
            if within_nominal:
                if take(ordering.pop(tcq), IN_COHORT_RECLAMATION):
                    break
                continue
            p_new, t_old = ordering.shares(tcq)
            if p_new.zero_weight_borrows and not t_old.zero_weight_borrows:
                while ordering.has(tcq):
                    retry.append(ordering.pop(tcq))
                continue
            done = False
            while ordering.has(tcq):
                w = ordering.pop(tcq)
                t_new = ordering.target_share_after(tcq, w)
                if compare_drs(p_new, t_new) <= 0:
                    done = take(w, IN_COHORT_FAIR_SHARING)
                    break
                retry.append(w)
            if done:
                break
        if not fits and retry:
            second = _Ordering(ctx, retry)
            for tcq in second:
                p_new, t_old = second.shares(tcq)
                w = second.pop(tcq)
                if compare_drs(p_new, t_old) < 0 and take(w, IN_COHORT_FAIR_SHARING):
                    break
                second.drop(tcq)
    finally:
        snap.remove_usage(cq, ctx.usage)
    if not fits:
        _restore(snap, targets)
        return [], len(cands)
    targets = _fill_back(ctx, targets, True)
    _restore(snap, targets)
    return targets, len(cands)


def get_targets(
    snap: Snapshot,
    wl: Workload,
    cq: CQNode,
    usage: Mapping[FR, float],
    need: Container[FR],
    fair_sharing: bool = False,
    fresh: Container[str] = (),
) -> TargetSearch:
    """Victims that let `wl` (asking `usage`) fit in `cq` when the frs in `need` need preemption
    (kueue Preemptor.GetTargets), or none."""
    ctx = _Ctx(snap, wl, cq, usage, need, fresh)
    if not ctx.need:
        return TargetSearch([])
    targets, n = fair_targets(ctx) if fair_sharing else classical_targets(ctx)
    return TargetSearch(targets, ctx.excluded, n)
