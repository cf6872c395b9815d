"""Lending a serving lane's idle GPUs only to work it can take back (docs/serving.md, Lending idle
serving GPUs).

A serving queue (`ClusterQueueSpec.serving`) lends the idle part of its quota to its cohort tree
like any Kueue ClusterQueue, and takes it back with `reclaim_within_cohort: Any` when its service
scales up: Kueue reclaims only from queues above their nominal quota (pkg/scheduler/preemption/
classical/hierarchical_preemption.go `collectCandidatesInSubtree`, `IsWithinNominalInResources`),
with `Any` whatever the borrower's priority (`priorityTooHighToPreempt`), and a serving queue that
fits within its nominal quota has the hierarchical advantage (reason `InCohortReclamation`).

The platform's lane rules add victims that refuse: a protected lane, an evidence job not yet
checkpointed, a lane that yields only to others (`preemption.exclusion`). Such a workload holding
the serving lane's GPUs would block its scale-up, so it may not borrow them: on a flavor where a
serving queue of its cohort tree lends, a workload the serving queue could not preempt may borrow
only while the GPUs left free after it still cover every such serving queue's idle lendable quota
(min(nominal, lending_limit) less what the serving queue uses). Within its own nominal quota it is
never held back (what is its own is no serving lane's). Kueue cannot tell lenders apart, so this is
a gate rule, like `protected`: the gate does not hand Kueue such a workload until it fits.
Batch work that may be preempted borrows freely and is reclaimed.
"""

from __future__ import annotations

from gpu_platform.admission.model import Workload
from gpu_platform.admission.preemption import exclusion
from gpu_platform.admission.quota import FR, CQNode, Snapshot
from gpu_platform.admission.workload_keys import EPS, qty


def _refuses(wl: Workload, cq: CQNode) -> bool:
    """Cheap first test: could any serving queue be refused this workload as a victim?"""
    spec = cq.spec
    return spec.protected or (wl.evidence and not wl.checkpointed) or spec.yields_to is not None


def lent_refusal(snap: Snapshot, wl: Workload, cq: CQNode, fr: FR, v: float) -> str | None:
    """Why `wl` may not take `v` of fr in `cq` (it would hold GPUs a serving lane lends and could
    not take back), or None."""
    if cq.spec.serving or cq.parent is None or not _refuses(wl, cq):
        return None
    q = cq.quotas.get(fr)
    if cq.usage.get(fr, 0.0) + v <= (q.nominal if q is not None else 0.0) + EPS:
        return None  # within its own nominal quota
    root = cq.root()
    idle = 0.0
    lenders: list[str] = []
    why: set[str] = set()
    for other in snap.cqs.values():
        if not other.spec.serving or fr not in other.quotas or other.root() is not root:
            continue
        replica = Workload(name="", cq=other.name, requests={})
        reason = exclusion(wl, cq, replica, other)
        if reason is None:
            continue
        sq = other.quotas[fr]
        lendable = sq.nominal if sq.lending_limit is None else min(sq.nominal, sq.lending_limit)
        spare = max(0.0, min(lendable, sq.nominal - other.usage.get(fr, 0.0)))
        if spare > EPS:
            idle += spare
            lenders.append(other.name)
            why.add(reason)
    if not lenders:
        return None
    quota = used = 0.0
    for node in snap.cqs.values():
        if node.root() is root:
            nq = node.quotas.get(fr)
            quota += nq.nominal if nq is not None else 0.0
            used += node.usage.get(fr, 0.0)
    for co in snap.cohorts.values():
        if co.root() is root:
            cqq = co.quotas.get(fr)
            quota += cqq.nominal if cqq is not None else 0.0
    free = quota - used
    if v <= free - idle + EPS:
        return None
    f, r = fr
    return (
        f"{cq.name} needs {qty(v)} {r} on {f} beyond its nominal quota, but only {qty(max(0.0, free - idle))} "
        f"of the {qty(max(0.0, free))} free is not the idle quota of serving lane(s) {', '.join(sorted(lenders))} "
        f"({qty(idle)}), which could not take it back ({'; '.join(sorted(why))})"
    )
