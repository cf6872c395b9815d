"""Run the admission engine: one cycle (`schedule_cycle`), the gate's cycles back to back until
nothing changes (`admit_until_stable`), Kueue's scheduler with its controllers acting between
cycles (`schedule_until_stable`), the victims Kueue would pick on a fixed flavor
(`preemption_targets`), and the state after a result is applied (`apply_result`).

The engine itself is split by job: one cycle in `cycle.py`, flavor assignment in
`flavor_assign.py`, the waiting workloads' reasons in `reasons.py`, the keys read off a workload
in `workload_keys.py`. This module keeps the public entry points (and re-exports `gpu_units`,
`queue_key`, `usage_of`).

May import `admission/model.py`, `cycle.py`, `nodes.py`, `preemption.py`, `quota.py`, `workload_keys.py`.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

from gpu_platform.admission.cycle import Engine
from gpu_platform.admission.model import Admission, ClusterState, CycleLog, CycleResult, Preemption, Workload
from gpu_platform.admission.nodes import placement_of
from gpu_platform.admission.preemption import get_targets
from gpu_platform.admission.quota import usage_of
from gpu_platform.admission.workload_keys import EPS, gpu_units, queue_key
from gpu_platform.admission.workload_keys import in_queue_order as _in_queue_order  # noqa: F401 (kept import path)


@contextmanager
def gc_paused() -> Iterator[None]:
    """The engine allocates only acyclic objects (one PendingInfo per waiting workload); pausing
    the cyclic GC keeps 100k-workload queues from paying for repeated full collections."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def schedule_cycle(state: ClusterState) -> CycleResult:
    """One admission cycle: each queue's head is admitted, preempts, or waits; every pending
    workload gets a reason, position, queue and estimated start."""
    with gc_paused():
        eng = Engine(state)
        eng.cycle()
        res = eng.result()
        eng.snap.release()
        return res


def admit_until_stable(state: ClusterState, max_cycles: int = 1000, *, estimates: bool = True) -> CycleResult:
    """The gate's loop: cycles back to back until one changes nothing. Admissions are applied
    between cycles; preemptions are not (the caller evicts victims), so a preemptor waits with its
    quota reserved and blocks its queue; a set-aside head stays set aside (capacity only shrinks).
    estimates=False: the waiting workloads get no estimated start (None; everything else the
    same), for callers that never read it (the simulator): it saves a pass over the running work."""
    with gc_paused():
        eng = Engine(state, dominance=True, estimates=estimates)
        for _ in range(max_cycles):
            if not eng.cycle():
                break
        res = eng.result()
        eng.snap.release()
        return res


def schedule_until_stable(state: ClusterState, *, evicted_finish: bool = False, max_cycles: int = 20) -> CycleResult:
    """Kueue's scheduler run cycle after cycle with its controllers acting in between: admitted
    workloads become admitted, each preempted workload finishes its eviction (releasing its
    quota) and is requeued as pending with its creation time, or finishes for good with
    `evicted_finish`; released quota moves the inadmissible workloads of that cohort tree back to
    the active queues (Kueue's QueueAssociatedInadmissibleWorkloadsAfter); the clock advances 1 s.
    Stops after a cycle that admits nothing, preempts nothing and leaves the queues as they were
    when it started (after the controllers' moves, not as the cycle before ended), or when nothing
    is left to try. `per_cycle` holds what each cycle did; the result's lists
    cover the whole run."""
    with gc_paused():
        carry = _Carry()
        admitted_all: list[Admission] = []
        preempted_all: list[Preemption] = []
        logs: list[CycleLog] = []
        prev_queues = frozenset((w.cq, w.name, "active") for w in state.pending)
        res: CycleResult | None = None
        cur = state
        stable = False
        for _ in range(max_cycles):
            eng = Engine(cur, last_tried=carry.last_tried, parked=carry.parked, sticky=carry.sticky)
            eng.cycle()
            res = eng.result()
            eng.snap.release()
            logs.append(CycleLog(tuple(res.admitted), tuple(res.preempted)))
            admitted_all.extend(res.admitted)
            preempted_all.extend(res.preempted)
            queues = frozenset((p.cq, p.name, p.queue) for p in res.pending)
            if not res.admitted and not res.preempted and queues == prev_queues:
                stable = True
                break
            carry.parked = set(eng.parked)
            carry.sticky = dict(eng.sticky)
            cur = _advance(cur, eng, res, evicted_finish, carry)
            # what the next cycle starts from: requeued victims and workloads moved back from the
            # inadmissible list are active (the run compares a cycle's queues before and after it)
            refused = {r.name for r in res.rejected}
            prev_queues = frozenset(
                (w.cq, w.name, "inadmissible" if w.name in carry.parked else "active")
                for w in cur.pending
                if w.name not in refused
            )
        if res is None:
            res = Engine(cur).result()
        elif not stable and res.preempted:
            # The run ran out of cycles right after one that preempted: its victims have finished
            # their eviction like any other cycle's, so the final queues are read after it (a
            # requeued victim is pending, not finished) and nothing is tried again.
            res = Engine(cur, last_tried=carry.last_tried, parked=carry.parked, sticky=carry.sticky).result()
        return CycleResult(admitted_all, preempted_all, res.pending, res.rejected, len(logs), logs)


@dataclass(slots=True)
class _Carry:
    """What Kueue's queue manager remembers between cycles."""

    last_tried: dict[str, dict[str, int]] = field(default_factory=dict)
    parked: set[str] = field(default_factory=set)
    sticky: dict[str, str] = field(default_factory=dict)


def _advance(state: ClusterState, eng: Engine, res: CycleResult, evicted_finish: bool, carry: _Carry) -> ClusterState:
    victims = {p.victim for p in res.preempted}
    by_name = {a.name: a for a in res.admitted}
    admitted = [w for w in state.admitted if w.name not in victims]
    requeued = [
        replace(w, flavor=None, admitted_at=0.0, resource_flavors=None, evicted=False)
        for w in state.admitted
        if w.name in victims and not (evicted_finish if w.evicted_finish is None else w.evicted_finish)
    ]
    pending = []
    book = eng.snap.nodes
    for w in state.pending:
        a = by_name.get(w.name)
        if a is not None:
            multi = a.flavors if a.flavors and len(set(a.flavors.values())) > 1 else None
            admitted.append(
                replace(
                    w,
                    flavor=a.flavor,
                    admitted_at=state.now,
                    resource_flavors=multi,
                    placement=placement_of(book, w.name),
                )
            )
        else:
            pending.append(w)
    if victims:
        trees = set()
        for w in state.admitted:
            if w.name in victims:
                cq = eng.snap.cqs.get(w.cq)
                if cq is not None:
                    trees.add(cq.root().name if cq.parent is not None else "cq:" + cq.name)
        released = {
            name
            for name, cq in eng.snap.cqs.items()
            if (cq.root().name if cq.parent is not None else "cq:" + cq.name) in trees
        }
        for w in pending:
            if w.cq in released:
                carry.parked.discard(w.name)
    cqs = state.cluster_queues
    if eng.afs:
        cqs = tuple(replace(c, admission_fair_sharing=eng.afs[c.name]) if c.name in eng.afs else c for c in cqs)
    return replace(
        state, cluster_queues=cqs, admitted=tuple(admitted), pending=tuple(pending + requeued), now=state.now + 1.0
    )


def preemption_targets(state: ClusterState, preemptor: Workload, flavor: str) -> list[Preemption]:
    """Victims Kueue would pick for `preemptor` on a fixed flavor (none when it fits or cannot)."""
    eng = Engine(replace(state, pending=()))
    snap = eng.snap
    cq = snap.cqs[preemptor.cq]
    usage = usage_of(preemptor, flavor)
    need = {fr for fr, v in usage.items() if v > snap.available(cq, fr) + EPS}
    if not need and not snap.node_fit(preemptor, usage):
        need = {fr for fr in usage if fr[1] == "nvidia.com/gpu"}
    search = get_targets(snap, preemptor, cq, usage, need, state.fair_sharing)
    return [
        Preemption(
            victim.name,
            victim.cq,
            preemptor.name,
            cq.name,
            reason,
            f"Preempted by {preemptor.name} ({cq.name}, priority {preemptor.priority}) [{reason}]",
        )
        for victim, reason in search.targets
    ]


def apply_result(state: ClusterState, result: CycleResult) -> ClusterState:
    """The state after the caller evicts victims and starts admitted workloads."""
    victims = {p.victim for p in result.preempted}
    flavors = {a.name: a.flavor for a in result.admitted}
    admitted = [w for w in state.admitted if w.name not in victims]
    pending = []
    for w in state.pending:
        if w.name in flavors:
            admitted.append(replace(w, flavor=flavors[w.name], admitted_at=state.now))
        else:
            pending.append(w)
    return replace(state, admitted=tuple(admitted), pending=tuple(pending), now=state.now)


__all__ = [
    "admit_until_stable",
    "gpu_units",
    "apply_result",
    "preemption_targets",
    "queue_key",
    "schedule_cycle",
    "schedule_until_stable",
    "usage_of",
]
