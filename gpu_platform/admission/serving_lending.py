"""Lending a serving lane's idle GPUs only to work it can take back (docs/serving.md, Lending idle
serving GPUs).

A serving queue (`ClusterQueueSpec.serving`) lends the idle part of its quota to its cohort tree
like any Kueue ClusterQueue, and takes it back with `reclaim_within_cohort: Any` when its service
scales up: Kueue reclaims only from queues above their nominal quota (pkg/scheduler/preemption/
classical/hierarchical_preemption.go `collectCandidatesInSubtree`, `IsWithinNominalInResources`),
with `Any` whatever the borrower's priority (`priorityTooHighToPreempt`), and a serving queue that
fits within its nominal quota has the hierarchical advantage (reason `InCohortReclamation`).

The platform's lane rules add victims that refuse: a protected lane, an evidence job not yet
checkpointed (unless the serving lane says `lend_to_evidence`: it waits for their checkpoint, at
most `evidence_reclaim_after` when set, then takes the GPUs back all the same), a lane that yields
only to others (`preemption.exclusion`). Such a workload holding
the serving lane's GPUs would block its scale-up, so it may not borrow them: on a flavor where a
serving queue of its cohort tree lends, a workload the serving queue could not preempt may borrow
only while the GPUs left free after it still cover every such serving queue's idle lendable quota
(min(nominal, lending_limit) less what the serving queue uses). Within its own nominal quota it is
never held back (what is its own is no serving lane's). Kueue cannot tell lenders apart, so this is
a gate rule, like `protected`: the gate does not hand Kueue such a workload until it fits.
Batch work that may be preempted borrows freely and is reclaimed.

`withheld_gpus` is the same rule for planning a waiting head's start: the GPUs of a flavor it may
not take however many are free (`admission/reservation.py`).

Also here: `lending_view` (who borrows a serving lane's idle quota and who is kept off it, from the
policy), `serving_annotations` (the same on the exported ClusterQueue) and `scale_up_workloads`
(a service's replicas beyond those admitted, one pending workload each).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from gpu_platform.admission.model import ClusterQueueSpec, ResourceQuota, Workload
from gpu_platform.admission.preemption import exclusion
from gpu_platform.admission.quota import FR, CQNode, Snapshot
from gpu_platform.admission.workload_keys import EPS, qty


@dataclass(frozen=True, slots=True)
class _Queue:
    """A queue as `preemption.exclusion` reads it (name and spec), without a snapshot."""

    name: str
    spec: ClusterQueueSpec


def _refuses(wl: Workload, cq: CQNode | _Queue) -> bool:
    """Cheap first test: could any serving queue be refused this workload as a victim?"""
    spec = cq.spec
    return spec.protected or (wl.evidence and not wl.checkpointed) or spec.yields_to is not None


def _as_seen_by(wl: Workload, lender: ClusterQueueSpec) -> Workload:
    """The workload as a serving lender judges it: a lender that lends to evidence runs
    (`lend_to_evidence`) waits for their checkpoint, so their evidence rule does not hold it off."""
    return replace(wl, evidence=False) if lender.lend_to_evidence and wl.evidence else wl


def _idle_lendable(q: ResourceQuota, used: float) -> float:
    """What a serving queue's quota row lends now: min(nominal, lending_limit) less its use."""
    lendable = q.nominal if q.lending_limit is None else min(q.nominal, q.lending_limit)
    return max(0.0, min(lendable, q.nominal - used))


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
        if not other.spec.serving or fr not in other.quotas:
            continue
        spare = _idle_lendable(other.quotas[fr], other.usage.get(fr, 0.0))
        if spare <= EPS or other.root() is not root:
            continue
        reason = exclusion(_as_seen_by(wl, other.spec), cq, Workload(name="", cq=other.name, requests={}), other)
        if reason is not None:
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


def root_cohort(parent: Mapping[str, str | None], name: str | None) -> str | None:
    """The root of cohort `name`'s tree (`parent`: cohort -> its parent; a cycle stops the walk)."""
    seen: set[str] = set()
    while name is not None and parent.get(name) is not None and name not in seen:
        seen.add(name)
        name = parent[name]
    return name


def queue_roots(cluster_queues: Iterable[ClusterQueueSpec], cohorts: Iterable[Any]) -> dict[str, str | None]:
    """Per queue, the root of its cohort tree (`ClusterState.cohorts`: names, or cohorts with a
    `parent`); a cohort in no tree is its own root, a queue without a cohort has None."""
    parent: dict[str, str | None] = {}
    for co in cohorts:
        if isinstance(co, str):
            parent.setdefault(co, None)
        else:
            parent[co.name] = co.parent
    return {c.name: root_cohort(parent, c.cohort) for c in cluster_queues}


def withheld_gpus(
    wl: Workload,
    flavor: str,
    specs: Mapping[str, ClusterQueueSpec],
    usage: Mapping[tuple[str, str], float],
    root_of: Mapping[str, str | None],
    resource: str,
) -> float:
    """GPUs (`resource`) of `flavor` that waiting `wl` may not take however many are free: the
    idle lendable quota of the serving queues of its cohort tree that could not take it back, the
    rule of `lent_refusal` read from queue specs and usage ((queue, flavor) -> in use) rather than
    a snapshot, for planning a head's start (`admission/reservation.py`). 0 when `wl` would stay
    within its own nominal quota there, or no serving queue withholds anything."""
    spec = specs.get(wl.cq)
    if spec is None or spec.serving or spec.cohort is None:
        return 0.0
    me = _Queue(wl.cq, spec)
    if not _refuses(wl, me):
        return 0.0
    v = wl.requests.get(resource, 0.0)
    own = next((q for q in spec.quotas if q.flavor == flavor and q.resource == resource), None)
    if usage.get((wl.cq, flavor), 0.0) + v <= (own.nominal if own is not None else 0.0) + EPS:
        return 0.0
    root = root_of.get(wl.cq)
    idle = 0.0
    for other in specs.values():
        if not other.serving or root_of.get(other.name) != root:
            continue
        for q in other.quotas:
            if q.flavor != flavor or q.resource != resource:
                continue
            spare = _idle_lendable(q, usage.get((other.name, flavor), 0.0))
            stub = Workload(name="", cq=other.name, requests={})
            if spare > EPS and exclusion(_as_seen_by(wl, other), me, stub, _Queue(other.name, other)):
                idle += spare
    return idle


def lending_view(policy: Any) -> list[dict[str, Any]]:
    """Per serving lane and GPU quota row: what it lends and to whom (the policy's view of the rule
    above). lendable: min(nominal, lending_limit) (lending_limit None: all of it; 0: nothing).
    borrowers: lanes of the same cohort tree with a quota row on that flavor and resource whose
    borrowing_limit is not 0, split into `reclaimed` (it takes its GPUs back from them) and
    `held_off` ({lane: reason}: the gate keeps them off its idle GPUs: protected, evidence, or
    yields_to without the serving lane); evidence_reclaim_after: how long it waits for an evidence
    borrower's checkpoint before it takes the GPUs back all the same (None: until the checkpoint)."""
    parent = {c.name: c.parent_name for c in policy.cohorts}

    def root(name: str | None) -> str | None:
        return root_cohort(parent, name)

    out: list[dict[str, Any]] = []
    lanes = policy.lanes_by_priority()
    for lane in lanes:
        if not getattr(lane, "serving", False) or lane.cohort_name is None:
            continue
        tree = root(lane.cohort_name)
        for q in lane.quotas:
            lendable = q.nominal_quota if q.lending_limit is None else min(q.nominal_quota, q.lending_limit)
            reclaimed: list[str] = []
            held: dict[str, str] = {}
            for other in lanes:
                if other.name == lane.name or getattr(other, "serving", False) or root(other.cohort_name) != tree:
                    continue
                oq = next((x for x in other.quotas if x.flavor_name == q.flavor_name and x.resource == q.resource), None)
                if other.cohort_name is None or oq is None or oq.borrowing_limit == 0:
                    continue
                if other.protected:
                    held[other.name] = "protected"
                elif other.evidence and not getattr(lane, "lend_to_evidence", False):
                    held[other.name] = "evidence jobs refuse preemption until checkpointed"
                elif other.yields_to is not None and lane.name not in other.yields_to:
                    held[other.name] = f"yields only to {', '.join(other.yields_to) or 'nobody'}"
                else:
                    reclaimed.append(other.name)
            out.append(
                {
                    "lane": lane.name,
                    "flavor_name": q.flavor_name,
                    "resource": q.resource,
                    "nominal_quota": q.nominal_quota,
                    "lendable": lendable,
                    "reclaim_within_cohort": lane.preemption.reclaim_within_cohort,
                    "evidence_reclaim_after": getattr(lane, "evidence_reclaim_after", None),
                    "reclaimed": reclaimed if lendable > 0 else [],
                    "held_off": held if lendable > 0 else {},
                }
            )
    return out


def serving_annotations(policy: Any, lane_name: str) -> dict[str, str]:
    """The serving lane's ClusterQueue annotations (`kueue export`): Kueue lends its idle quota
    (no `lendingLimit`, or the one set) and reclaims it (`reclaimWithinCohort: Any`) by itself;
    which lanes the gate keeps off those GPUs Kueue cannot express, so it travels as annotations
    like `protected`: `gpu-platform.io/serving-lends-to` (ClusterQueues it takes GPUs back from)
    and `gpu-platform.io/serving-held-off` (ClusterQueues kept off its idle GPUs by the gate),
    each comma-separated, empty when it lends nothing."""
    from gpu_platform.cluster.names import cluster_queue_name

    rows = [r for r in lending_view(policy) if r["lane"] == lane_name]
    lends = sorted({cluster_queue_name(x) for r in rows for x in r["reclaimed"]})
    held = sorted({cluster_queue_name(x) for r in rows for x in r["held_off"]})
    return {
        "gpu-platform.io/serving": "true",
        "gpu-platform.io/serving-lends-to": ",".join(lends),
        "gpu-platform.io/serving-held-off": ",".join(held),
    }


def per_replica(requests: dict[str, float] | object, replicas: int) -> dict[str, float]:
    """One replica's requests from a service workload holding `replicas` of them (0 or 1: as is)."""
    reqs = dict(requests)  # type: ignore[call-overload]
    n = max(1, replicas)
    return {r: v / n for r, v in reqs.items()}


def scale_up_workloads(
    service: Workload, wanted: int, admitted: int, now: float, held: int | None = None
) -> list[Workload]:
    """Pending workloads for replicas `admitted + 1 .. wanted` of `service`, an admitted workload
    holding `held` replicas (None: its `replicas` field where it has one, else 1). Each asks for
    one replica's requests, named `<service>/replica-<i>`, created now, in the service's queue at
    its priority, on its flavor; an empty list when `wanted <= admitted`."""
    if wanted <= admitted:
        return []
    if held is None:
        held = getattr(service, "replicas", 0) or 1
    one = per_replica(service.requests, held)
    pods = max(1, service.pods // max(1, held))
    out = []
    for i in range(admitted + 1, wanted + 1):
        out.append(
            Workload(
                name=f"{service.name}/replica-{i}",
                cq=service.cq,
                requests=one,
                priority=service.priority,
                created_at=now,
                flavor=service.flavor,
                allowed_flavors=service.allowed_flavors,
                team=service.team,
                pods=pods,
            )
        )
    return out
