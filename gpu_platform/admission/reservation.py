"""Head reservations: EASY backfilling for the lanes that have a wait target (a gate rule).

Kueue's BestEffortFIFO lets any later workload take GPUs its queue's head cannot use yet, so a
large job can wait behind a stream of small ones until aging lifts it above them (docs/
admission.md, Aging). FIFO with EASY backfilling does not starve it: the blocked head reserves
the time at which running work frees enough GPUs (its shadow time) and a later job starts only
if it cannot delay that. This module gives a lane with a wait target that asks for it (policy
`targets: {wait_p95: ..., reserve_head: true}`, `ClusterQueueSpec.reserve_head`; on in the
packaged policy's evidence lanes) the same guarantee inside the policy:

- `plan_reservations`: the head of each such queue (its first waiting workload in queue order)
  gets a reservation on the flavor where it can start first: the earliest expected end of
  running work (admitted_at + expected_duration_s) after which the flavor has its GPUs free
  (`until`), and the GPUs the flavor will have beyond them then (`extra`). A head that a
  flavor's free GPUs hold now keeps them from now: Kueue may not admit it there this cycle (its
  cycle takes work that fits without borrowing first, so a lower lane within its nominal quota
  goes ahead of a borrowing head), and dropped at that moment the reservation would hand lower
  lanes the GPUs it waited for. A head its own queue's quota ceiling blocks, or whose start
  cannot be estimated (running work without an expected duration), reserves nothing.
- `reservation_refusal`: a workload of a lower priority than the head may take GPUs of a reserved
  flavor only when it is expected to end by `until`, or fits the `extra` GPUs. Work of the head's
  priority or higher is never held: within its lane BestEffortFIFO stays Kueue's (a later job of
  the lane that fits still goes first), and a head that aging has lifted above its lane
  (`policy/aging.py`) holds its lane's younger jobs too.
- `reservations_for`: the same plan from an engine state (the gate: running work from its
  admitted workloads' `admitted_at` and `expected_duration_s`).

Kueue has no reservations, so the gate applies this rule itself, as it does `protected` and
serving lending: it does not hand Kueue a workload a reservation holds until it no longer does.
The simulator computes the same reservations from its running jobs (`simulate/des_engine.py`).

May import `admission/model.py`, `admission/serving_lending.py` and `admission/workload_keys.py` only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpu_platform.admission.model import ClusterState, Workload
from gpu_platform.admission.serving_lending import queue_roots, withheld_gpus
from gpu_platform.admission.workload_keys import EPS, qty, queue_key

GPU = "nvidia.com/gpu"


@dataclass(frozen=True, slots=True)
class Reservation:
    """A waiting head's claim on `flavor`: from `until` (its expected start) it needs `gpus` of it;
    `extra` GPUs of the flavor are free beyond them then."""

    holder: str
    cq: str
    priority: int
    flavor: str
    gpus: float
    until: float
    extra: float


@dataclass(frozen=True, slots=True)
class Running:
    """Running work as a reservation sees it: `gpus` of `flavor` until `end` (None: unknown)."""

    flavor: str
    gpus: float
    end: float | None


def shadow(now: float, gpus: float, free: float, ends: Sequence[tuple[float | None, float]]) -> tuple[float, float] | None:
    """(shadow time, extra GPUs): the first end in `ends` ((end, gpus) of the flavor's running
    work, sorted by end) after which `free` plus what has ended holds `gpus`; None when it never
    does or an unknown end comes first."""
    if free + EPS >= gpus:
        return now, free - gpus
    have = free
    for end, g in ends:
        if end is None:
            return None
        have += g
        if have + EPS >= gpus:
            return max(now, end), have - gpus
    return None


def plan_reservations(
    now: float,
    heads: Iterable[Workload],
    running: Iterable[Running],
    capacity: Mapping[str, float],
    flavors_of,
    on_nodes=None,
    withheld=None,
) -> tuple[Reservation, ...]:
    """The reservations of `heads` (each the first waiting workload of a queue with
    `reserve_head`, its quota ceiling not in the way): on each flavor `flavors_of(head)` names, in
    order, the head's expected start; the flavor where it is earliest wins (the first on a tie).
    A head that the free GPUs of some flavor hold now reserves them from now (the first such
    flavor; `extra`: what is free beyond them): Kueue may still not admit it there this cycle
    (work that fits without borrowing goes first in Kueue's cycle, whatever its priority), and a
    reservation dropped at that moment would hand the GPUs it waited for to lower-priority work.
    on_nodes(head, flavor): for a flavor whose GPUs sit on nodes, (fits now, shadow) where its
    pods find nodes (whole free nodes for a gang), with no extra GPUs (which nodes a later job
    takes decides whether the head still fits); None: count GPUs. withheld(head, flavor): GPUs of
    the flavor the head may not take however many are free (a serving lane's idle quota it could
    not give back, `serving_lending.withheld_gpus`); they count as never free for it."""
    used: dict[str, float] = {}
    ends: dict[str, list[tuple[float | None, float]]] = {}
    for r in running:
        used[r.flavor] = used.get(r.flavor, 0.0) + r.gpus
        ends.setdefault(r.flavor, []).append((r.end, r.gpus))
    for lst in ends.values():
        lst.sort(key=lambda e: (e[0] is None, e[0] or 0.0))
    out: list[Reservation] = []
    for wl in heads:
        g = wl.requests.get(GPU, 0.0)
        if g <= EPS:
            continue
        best: tuple[float, float, str] | None = None
        for f in flavors_of(wl):
            placed = on_nodes(wl, f) if on_nodes is not None else None
            if placed is not None:
                fits_now, s = placed
                w = withheld(wl, f) if withheld is not None else 0.0
                if w > EPS:
                    # nodes alone are not enough: the GPUs it may take must also cover it
                    counted = shadow(now, g, capacity.get(f, 0.0) - used.get(f, 0.0) - w, ends.get(f, ()))
                    if counted is None or s is None and not fits_now:
                        fits_now, s = False, None
                    elif counted[0] > now + EPS:
                        fits_now, s = False, (max(counted[0], s[0] if s is not None else now), 0.0)
                if fits_now:
                    best = (now, 0.0, f)
                    break
            else:
                free = capacity.get(f, 0.0) - used.get(f, 0.0)
                if withheld is not None:
                    free -= withheld(wl, f)
                if free + EPS >= g:
                    best = (now, free - g, f)
                    break
                s = shadow(now, g, free, ends.get(f, ()))
            if s is not None and (best is None or s[0] < best[0] - EPS):
                best = (s[0], s[1], f)
        if best is None:
            continue
        out.append(Reservation(wl.name, wl.cq, wl.priority, best[2], g, best[0], best[1]))
    return tuple(out)


def reservation_refusal(state: ClusterState, wl: Workload, flavor: str, v: float) -> str | None:
    """Why `wl` may not take `v` GPUs of `flavor` now (a reservation of the same or a higher
    priority there, which it would delay), or None. Its expected end is now +
    expected_duration_s; it may also use the reservation's extra GPUs (each workload is judged on
    its own: the cycle admits few at once, and the next cycle plans again)."""
    reservations = state.reservations
    if not reservations:
        return None
    for r in reservations:
        if r.flavor != flavor or r.holder == wl.name or wl.priority >= r.priority:
            continue
        d = wl.expected_duration_s
        if d is not None and state.now + d <= r.until + EPS:
            continue
        if v <= r.extra + EPS:
            continue
        when = "its expected duration is unknown" if d is None else f"it would run {(state.now + d - r.until) / 3600:.1f} h past it"
        return (
            f"{flavor} is reserved for {r.holder} ({r.cq}, its queue's head) from its expected start in "
            f"{max(0.0, r.until - state.now) / 3600:.1f} h; {when}, and it needs {qty(v)} GPUs where "
            f"{qty(r.extra)} are spare then (head reservation, docs/admission.md)"
        )
    return None


def reservations_for(state: ClusterState) -> tuple[Reservation, ...]:
    """The head reservations of `state` (the gate's engine input): for each cluster queue with
    `reserve_head`, its first pending workload in queue order, against the admitted workloads'
    expected ends (admitted_at + expected_duration_s; unknown: that flavor is not reserved)."""
    reserving = {c.name: c for c in state.cluster_queues if c.reserve_head}
    if not reserving or not state.pending:
        return ()
    heads: dict[str, Workload] = {}
    for wl in state.pending:
        if wl.cq in reserving and (wl.cq not in heads or queue_key(wl) < queue_key(heads[wl.cq])):
            heads[wl.cq] = wl
    if not heads:
        return ()
    running = []
    usage: dict[tuple[str, str], float] = {}
    for wl in state.admitted:
        flavor = (wl.resource_flavors or {}).get(GPU, wl.flavor)
        g = wl.requests.get(GPU, 0.0)
        if flavor is None or g <= EPS:
            continue
        usage[(wl.cq, flavor)] = usage.get((wl.cq, flavor), 0.0) + g
        d = wl.expected_duration_s
        running.append(Running(flavor, g, None if d is None else wl.admitted_at + d))
    caps = {f.name: (f.capacity or {}).get(GPU, 0.0) for f in state.flavors}

    def flavors_of(wl: Workload) -> tuple[str, ...]:
        if wl.flavor is not None:
            return (wl.flavor,)
        own = reserving[wl.cq].flavors
        return own if wl.allowed_flavors is None else tuple(f for f in own if f in wl.allowed_flavors)

    def below_ceiling(wl: Workload) -> bool:
        """Whether the head's own queue may take its GPUs on some flavor it may use (nominal +
        borrowing_limit; no limit in a cohort: yes): a head its own ceiling blocks reserves nothing
        (it waits for its own lane's work to end, which no lower lane delays)."""
        spec = reserving[wl.cq]
        g = wl.requests.get(GPU, 0.0)
        for f in flavors_of(wl):
            for q in spec.quotas:
                if q.flavor != f or q.resource != GPU:
                    continue
                ceiling = spec.own_ceiling(q)
                if ceiling is None or usage.get((wl.cq, f), 0.0) + g <= ceiling + EPS:
                    return True
        return False

    heads_below = [wl for wl in heads.values() if below_ceiling(wl)]
    if not any(c.serving for c in state.cluster_queues):
        return plan_reservations(state.now, heads_below, running, caps, flavors_of)
    specs = {c.name: c for c in state.cluster_queues}
    root_of = queue_roots(state.cluster_queues, state.cohorts)

    def withheld(wl: Workload, flavor: str) -> float:
        return withheld_gpus(wl, flavor, specs, usage, root_of, GPU)

    return plan_reservations(state.now, heads_below, running, caps, flavors_of, withheld=withheld)
