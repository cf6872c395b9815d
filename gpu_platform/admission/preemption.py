"""Victim selection, after kueue pkg/scheduler/preemption (classical and fair-sharing), plus lane rules.

Candidate order (CandidatesOrdering): other queues before the preemptor's own, lower priority
first, most recently admitted first, name as the final tie-break. Victims are taken greedily until
the preemptor fits, then a reverse fill-back pass returns every victim that was not needed.
Lane rules filter candidates first: protected queues never, evidence jobs only when checkpointed,
a queue with yields_to only for preemptors from those queues or carrying a safety approval.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Container, Mapping
from dataclasses import dataclass, field

from gpu_platform.admission.model import (
    ANY,
    IN_CLUSTER_QUEUE,
    IN_COHORT_FAIR_SHARING,
    IN_COHORT_RECLAIM_WHILE_BORROWING,
    IN_COHORT_RECLAMATION,
    LOWER_OR_NEWER_EQUAL,
    NEVER,
    Workload,
)
from gpu_platform.admission.quota import FR, CQNode, Snapshot, request_of, usage_of


@dataclass(slots=True)
class TargetSearch:
    """Outcome of one victim search: targets (victim, reason) or why there are none."""

    targets: list[tuple[Workload, str]]
    excluded: Counter[str] = field(default_factory=Counter)
    candidates: int = 0


def exclusion(victim: Workload, vcq: CQNode, preemptor: Workload, pcq: CQNode) -> str | None:
    """The lane rule that keeps `victim` from being preempted by `preemptor`, or None."""
    if vcq.spec.protected:
        return f"{vcq.name} is protected"
    if victim.evidence and not victim.checkpointed:
        return "evidence job not checkpointed"
    yt = vcq.spec.yields_to
    if yt is not None and pcq.name not in yt and not preemptor.safety_approval:
        return f"{vcq.name} yields only to {', '.join(yt) or 'nobody'} or a safety approval"
    return None


def _uses(wl: Workload, frs: Mapping[FR, float]) -> bool:
    f = wl.flavor
    return any((f, r) in frs for r, v in wl.requests.items() if v > 0)


def find_candidates(
    snap: Snapshot,
    wl: Workload,
    cq: CQNode,
    need: Mapping[FR, float],
    excluded: Counter[str],
    fresh: Container[str] = (),
) -> list[Workload]:
    """Kueue's findCandidates plus lane rules; `fresh` names workloads admitted earlier in the same
    gate tick, which are never victims in that tick."""
    out: list[Workload] = []
    policy = cq.spec.within_cluster_queue
    if policy != NEVER:
        same_prio = policy == LOWER_OR_NEWER_EQUAL
        for cand in cq.workloads.values():
            if cand.priority > wl.priority:
                continue
            if cand.priority == wl.priority and not (same_prio and wl.created_at < cand.created_at):
                continue
            if not _uses(cand, need) or cand.name in fresh:
                continue
            why = exclusion(cand, cq, wl, cq)
            if why:
                excluded[why] += 1
                continue
            out.append(cand)
    reclaim = cq.spec.reclaim_within_cohort
    if cq.cohort is not None and reclaim != NEVER:
        only_lower = reclaim != ANY
        for other in cq.cohort.members:
            if other is cq or not snap.is_borrowing(other, need):
                continue
            for cand in other.workloads.values():
                if only_lower and cand.priority >= wl.priority:
                    continue
                if not _uses(cand, need) or cand.name in fresh:
                    continue
                why = exclusion(cand, other, wl, cq)
                if why:
                    excluded[why] += 1
                    continue
                out.append(cand)
    return out


def order_key(cq_name: str):
    def key(w: Workload):
        return (w.cq == cq_name, w.priority, -w.admitted_at, w.name)

    return key


def _threshold(cq: CQNode, wl: Workload) -> int | None:
    spec = cq.spec
    if spec.borrow_within_cohort == NEVER:
        return None
    t = wl.priority
    if spec.max_priority_threshold is not None and spec.max_priority_threshold < t:
        t = spec.max_priority_threshold + 1
    return t


def _fill_back(snap: Snapshot, targets: list[tuple[Workload, str]], req, cq: CQNode, allow_borrowing: bool):
    i = len(targets) - 2
    while i >= 0:
        w = targets[i][0]
        snap.add_workload(w)
        if snap.fits(cq, req, allow_borrowing):
            targets.pop(i)
        else:
            snap.remove_workload(w)
        i -= 1
    return targets


def _restore(snap: Snapshot, targets: list[tuple[Workload, str]]) -> None:
    for w, _ in targets:
        snap.add_workload(w)


def _settle(
    snap: Snapshot, targets: list[tuple[Workload, str]], fits: bool, req, cq: CQNode, allow_borrowing: bool
) -> list[tuple[Workload, str]]:
    """End of a victim search: none if the preemptor still does not fit, else the minimal set
    (fill-back); the snapshot is restored either way."""
    if not fits:
        _restore(snap, targets)
        return []
    targets = _fill_back(snap, targets, req, cq, allow_borrowing)
    _restore(snap, targets)
    return targets


def minimal_preemptions(
    snap: Snapshot,
    wl: Workload,
    cq: CQNode,
    req: Mapping[FR, float],
    need: Mapping[FR, float],
    candidates: list[Workload],
    allow_borrowing: bool,
    threshold: int | None,
) -> list[tuple[Workload, str]]:
    targets: list[tuple[Workload, str]] = []
    fits = False
    for cand in candidates:
        ccq = snap.cqs[cand.cq]
        reason = IN_CLUSTER_QUEUE
        if ccq is not cq:
            reason = IN_COHORT_RECLAMATION
            if not snap.is_borrowing(ccq, need):
                continue
            if threshold is not None:
                if cand.priority >= threshold:
                    allow_borrowing = False
                else:
                    reason = IN_COHORT_RECLAIM_WHILE_BORROWING
        snap.remove_workload(cand)
        targets.append((cand, reason))
        if snap.fits(cq, req, allow_borrowing):
            fits = True
            break
    return _settle(snap, targets, fits, req, cq, allow_borrowing)


def fair_preemptions(
    snap: Snapshot,
    wl: Workload,
    cq: CQNode,
    req: Mapping[FR, float],
    need: Mapping[FR, float],
    candidates: list[Workload],
    threshold: int | None,
) -> list[tuple[Workload, str]]:
    """Kueue's fairPreemptions: reclaim from the queue with the highest dominant share first.

    Strategies, in order: LessThanOrEqualToFinalShare, then LessThanInitialShare.
    """
    pool: dict[str, list] = {}
    for cand in candidates:
        pool.setdefault(cand.cq, [None, []])[1].append(cand)
    for name, entry in pool.items():
        entry[0] = snap.dominant_share(snap.cqs[name])
    targets: list[tuple[Workload, str]] = []
    fits = False
    nominated_share = snap.dominant_share(cq, plus=req)
    retry: list[Workload] = []
    while pool and not fits:
        name = max(pool, key=lambda n: (pool[n][0], n))
        share, wls = pool.pop(name)
        ccq = snap.cqs[name]
        if ccq is cq:
            cand = wls[0]
            snap.remove_workload(cand)
            targets.append((cand, IN_CLUSTER_QUEUE))
            if snap.fits(cq, req, True):
                fits = True
                break
            nominated_share = snap.dominant_share(cq, plus=req)
            if len(wls) > 1:
                pool[name] = [snap.dominant_share(ccq), wls[1:]]
            continue
        for i, cand in enumerate(wls):
            below = threshold is not None and cand.priority < threshold
            new_share = snap.dominant_share(ccq, minus=usage_of(cand))
            if below or nominated_share <= new_share:
                snap.remove_workload(cand)
                targets.append((cand, IN_COHORT_RECLAIM_WHILE_BORROWING if below else IN_COHORT_FAIR_SHARING))
                if snap.fits(cq, req, True):
                    fits = True
                    break
                rest = wls[i + 1 :]
                if rest and snap.is_borrowing(ccq, need):
                    pool[name] = [new_share, rest]
                break
            retry.append(cand)
    if not fits and retry:
        first: dict[str, Workload] = {}
        for cand in retry:
            first.setdefault(cand.cq, cand)
        order = sorted(first.values(), key=lambda c: (-snap.dominant_share(snap.cqs[c.cq]), c.cq))
        for cand in order:
            ccq = snap.cqs[cand.cq]
            old_share = snap.dominant_share(ccq)
            if nominated_share < old_share:
                snap.remove_workload(cand)
                targets.append((cand, IN_COHORT_FAIR_SHARING))
                if snap.fits(cq, req, True):
                    fits = True
                    break
    return _settle(snap, targets, fits, req, cq, True)


def get_targets(
    snap: Snapshot,
    wl: Workload,
    cq: CQNode,
    flavor: str,
    fair_sharing: bool = False,
    fresh: Container[str] = (),
) -> TargetSearch:
    """Victims that let `wl` fit on `flavor` in `cq` (kueue Preemptor.GetTargets), or none."""
    req = request_of(cq, wl, flavor)
    need = {fr: v for fr, v in req.items() if v > snap.available(cq, fr) + 1e-9}
    search = TargetSearch([])
    if not need:
        return search
    candidates = find_candidates(snap, wl, cq, need, search.excluded, fresh)
    search.candidates = len(candidates)
    if not candidates:
        return search
    candidates.sort(key=order_key(cq.name))
    same = [c for c in candidates if c.cq == cq.name]
    if len(same) == len(candidates):
        search.targets = minimal_preemptions(snap, wl, cq, req, need, candidates, True, None)
        return search
    threshold = _threshold(cq, wl)
    if fair_sharing:
        search.targets = fair_preemptions(snap, wl, cq, req, need, candidates, threshold)
        return search
    if threshold is not None:
        under_nominal = all(cq.usage.get(fr, 0.0) < snap.nominal(cq, fr) for fr in need)
        if not under_nominal:
            candidates = [c for c in candidates if c.cq == cq.name or c.priority < threshold]
        search.targets = minimal_preemptions(snap, wl, cq, req, need, candidates, True, threshold)
        return search
    if all(cq.usage.get(fr, 0.0) + v <= snap.nominal(cq, fr) for fr, v in req.items()):
        targets = minimal_preemptions(snap, wl, cq, req, need, candidates, False, None)
        if targets:
            search.targets = targets
            return search
    search.targets = minimal_preemptions(snap, wl, cq, req, need, same, True, None)
    return search
