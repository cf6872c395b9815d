"""One admission cycle, Kueue-style: each cluster queue's head is nominated a flavor (and victims
when it must preempt), heads are processed in order (not borrowing first, then priority, then
age), and every pending workload gets a reason, a queue position and an estimated start.

A preemptor is not admitted in the cycle it preempts: it waits for its victims to be evicted,
and its usage is reserved so no later workload in the cycle overcommits the cohort.
"""

from __future__ import annotations

import bisect
import gc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

from gpu_platform.admission.model import (
    ADMITTED,
    BUDGET_EXCEEDED,
    BUDGET_EXHAUSTED,
    INADMISSIBLE,
    NEVER,
    PENDING,
    PENDING_PREEMPTION,
    QUOTA_RESERVED,
    STRICT_FIFO,
    Admission,
    ClusterState,
    CycleResult,
    PendingInfo,
    Preemption,
    Rejection,
    Workload,
)
from gpu_platform.admission.preemption import TargetSearch, get_targets
from gpu_platform.admission.quota import CQNode, Snapshot, request_of

NOFIT, PREEMPT, FIT = 0, 1, 2
_EPS = 1e-9


def _n(v: float) -> str:
    return f"{v:g}"


def queue_key(w: Workload):
    """Kueue's queue order: priority desc, then creation time, then name."""
    return (-w.priority, w.created_at, w.name)


@dataclass(slots=True)
class _Nomination:
    wl: Workload
    cq: CQNode
    flavor: str | None
    mode: int
    borrow: bool
    targets: list
    notes: list[str]


class _Engine:
    def __init__(self, state: ClusterState):
        self.state = state
        self.snap = Snapshot(state)
        self.queues: dict[str, list[Workload]] = {name: [] for name in self.snap.cqs}
        self.rejected: list[Rejection] = []
        self.budget: dict[str, float | None] = {n: c.spec.budget_remaining for n, c in self.snap.cqs.items()}
        unknown: list[Workload] = []
        for w in state.pending:
            cq = self.snap.cqs.get(w.cq)
            if cq is None:
                unknown.append(w)
                continue
            total = cq.spec.budget_total
            if total is not None and w.max_cost is not None and w.max_cost > total + _EPS:
                self.rejected.append(
                    Rejection(
                        w.name,
                        w.cq,
                        BUDGET_EXCEEDED,
                        f"max_cost {_n(w.max_cost)} exceeds lane {w.cq}'s whole budget {_n(total)}; it can never be admitted",
                    )
                )
                continue
            self.queues[w.cq].append(w)
        for w in unknown:
            self.rejected.append(Rejection(w.name, w.cq, INADMISSIBLE, f"unknown cluster queue {w.cq!r}"))
        for q in self.queues.values():
            q.sort(key=queue_key)
        self.cursor = dict.fromkeys(self.queues, 0)
        self.nofit: dict[str, list[Workload]] = {name: [] for name in self.queues}
        self.admitted: list[Admission] = []
        self.done: set[str] = set()  # admitted in this run
        self.parked: set[str] = set()  # inadmissible under BestEffortFIFO
        self.waiting: dict[str, int] = {}  # preemptor -> index into self.preempted
        self.preempted: list[Preemption] = []
        self.victims: dict[str, Workload] = {}
        self.status: dict[str, tuple[str, str, str | None]] = {}  # name -> (code, message, flavor)
        self.heads: dict[str, Workload | None] = {}
        self.cycles = 0

    # -- flavor assignment ------------------------------------------------------------------
    def _flavors(self, wl: Workload, cq: CQNode) -> list[str]:
        out = []
        for f in cq.spec.flavors:
            if wl.flavor is not None and f != wl.flavor:
                continue
            if wl.allowed_flavors is not None and f not in wl.allowed_flavors:
                continue
            spec = self.snap.flavors.get(f)
            if spec is not None and spec.spot and not self._has_spot_quota(cq, f):
                continue
            out.append(f)
        return out

    @staticmethod
    def _has_spot_quota(cq: CQNode, flavor: str) -> bool:
        """Spot only where the lane has quota on it: nominal > 0 or an explicit borrowing limit > 0."""
        for (f, _r), q in cq.quota.items():
            if f == flavor and (q.nominal > 0 or (q.borrowing_limit or 0) > 0):
                return True
        return False

    def _nominate(self, wl: Workload, cq: CQNode) -> _Nomination:
        snap = self.snap
        fung = self.state.flavor_fungibility
        can_preempt_borrowing = cq.spec.borrow_within_cohort != NEVER or self.state.fair_sharing
        best = _Nomination(wl, cq, None, NOFIT, False, [], [])
        flavors = self._flavors(wl, cq)
        if not flavors:
            allowed = wl.flavor or (", ".join(wl.allowed_flavors) if wl.allowed_flavors else "any")
            best.notes.append(f"{cq.name} has no usable flavor matching {allowed}")
            return best
        cohort = cq.cohort.name if cq.cohort is not None else None
        for f in flavors:
            mode, borrow, notes = FIT, False, []
            for r, v in wl.requests.items():
                if v <= 0 or r not in cq.covered:
                    continue
                fr = (f, r)
                q = cq.quota.get(fr)
                if q is None:
                    mode = NOFIT
                    notes.append(f"{cq.name} has no quota for {r} on {f}")
                    break
                if snap.borrowing_with(cq, fr, v):
                    borrow = True
                avail = snap.available(cq, fr)
                pot = snap.potential(cq, fr)
                if v > pot + _EPS:
                    mode = NOFIT
                    notes.append(
                        f"{cq.name} needs {_n(v)} {r} on {f}, more than it can ever hold ({_n(pot)})"
                    )
                    break
                if v <= avail + _EPS:
                    continue
                used = cq.usage.get(fr, 0.0)
                lim = f"/{_n(q.nominal)}" + (
                    f" (+{_n(q.borrowing_limit)} borrowable)" if cohort and q.borrowing_limit else ""
                )
                free = snap.cohort_free(cq, fr)
                where = f"cohort {cohort} has {_n(max(0.0, free))} free" if cohort else f"{_n(avail)} free"
                note = f"{cq.name} needs {_n(v)} {r} on {f}; lane uses {_n(used)}{lim}, {where}"
                if v <= q.nominal + _EPS or can_preempt_borrowing:
                    mode = min(mode, PREEMPT)
                    notes.append(note)
                else:
                    mode = NOFIT
                    notes.append(note + " and it may not preempt to borrow")
                    break
            targets: list = []
            if mode == PREEMPT:
                search: TargetSearch = get_targets(snap, wl, cq, f, self.state.fair_sharing, self.done)
                if search.targets:
                    targets = search.targets
                else:
                    mode = NOFIT
                    notes[-1] += " and " + self._nothing_to_preempt(cq, search)
            best.notes.extend(notes)
            stop = (mode == FIT and (not borrow or fung.when_can_borrow == "MayStopSearch")) or (
                mode == PREEMPT
                and fung.when_can_preempt == "MayStopSearch"
                and (not borrow or fung.when_can_borrow == "MayStopSearch")
            )
            # Kueue's shouldTryNextFlavor: a flavor that stops the search is taken as is.
            if stop or mode > best.mode:
                best.flavor, best.mode, best.borrow, best.targets = f, mode, borrow, targets
            if stop:
                break
        return best

    @staticmethod
    def _nothing_to_preempt(cq: CQNode, search: TargetSearch) -> str:
        spec = cq.spec
        if spec.within_cluster_queue == NEVER and (spec.reclaim_within_cohort == NEVER or cq.cohort is None):
            text = "its preemption policy is Never"
        elif search.candidates:
            text = f"preempting its {search.candidates} candidate(s) would not free enough"
        elif search.excluded:
            text = "nothing it may preempt"
        else:
            text = "nothing lower-priority to reclaim"
        if search.excluded:
            text += " (" + "; ".join(f"{k}: {n}" for k, n in sorted(search.excluded.items())) + ")"
        return text

    # -- one cycle --------------------------------------------------------------------------
    def _head(self, name: str) -> Workload | None:
        q = self.queues[name]
        i = self.cursor[name]
        budget = self.budget[name]
        while i < len(q):
            w = q[i]
            if w.name in self.done or w.name in self.parked:
                i += 1
                continue
            if budget is not None and w.max_cost is not None and w.max_cost > budget + _EPS:
                self.status[w.name] = (
                    BUDGET_EXHAUSTED,
                    f"max_cost {_n(w.max_cost)} exceeds lane {name}'s remaining budget {_n(max(0.0, budget))}",
                    None,
                )
                self.parked.add(w.name)
                i += 1
                continue
            dom = self._dominated(name, w)
            if dom is not None:
                self.status[w.name] = (
                    INADMISSIBLE,
                    f"needs at least what {dom.name} ahead of it needs, and that cannot be admitted: "
                    + self.status[dom.name][1],
                    None,
                )
                self.parked.add(w.name)
                i += 1
                continue
            break
        self.cursor[name] = i
        return q[i] if i < len(q) else None

    def _dominated(self, name: str, w: Workload) -> Workload | None:
        """A parked inadmissible workload of the lane that needs no more than `w`, on no fewer
        flavors, with no lower priority: within one gate tick capacity only shrinks, so `w` cannot
        be admitted either (keeps back-to-back cycles linear in the queue length)."""
        for p in self.nofit[name]:
            if (
                p.priority < w.priority
                or p.created_at > w.created_at
                or w.safety_approval > p.safety_approval
            ):
                continue
            if any(w.requests.get(r, 0.0) < v for r, v in p.requests.items()):
                continue
            pf, wf = self._flavor_set(p), self._flavor_set(w)
            if pf is not None and (wf is None or not wf <= pf):
                continue
            return p
        return None

    @staticmethod
    def _flavor_set(w: Workload) -> frozenset[str] | None:
        if w.flavor is not None:
            return frozenset((w.flavor,))
        return None if w.allowed_flavors is None else frozenset(w.allowed_flavors)

    def cycle(self) -> bool:
        """Run one cycle; True when it changed anything (admission, preemption, parking)."""
        self.cycles += 1
        changed = False
        noms: list[_Nomination] = []
        for name, cq in self.snap.cqs.items():
            head = self._head(name)
            self.heads[name] = head
            if head is None or head.name in self.waiting:
                continue
            noms.append(self._nominate(head, cq))
        if self.state.fair_sharing:
            snap = self.snap
            noms.sort(
                key=lambda e: (
                    snap.dominant_share(e.cq, plus=request_of(e.cq, e.wl, e.flavor)) if e.flavor else 0.0,
                    e.borrow,
                    queue_key(e.wl),
                )
            )
        else:
            noms.sort(key=lambda e: (e.borrow, queue_key(e.wl)))
        for e in noms:
            wl, cq = e.wl, e.cq
            if e.mode == NOFIT:
                msg = "; ".join(e.notes) or f"{cq.name}: no flavor fits"
                self.status[wl.name] = (INADMISSIBLE, msg, None)
                if cq.spec.queueing_strategy != STRICT_FIFO and wl.name not in self.parked:
                    self.parked.add(wl.name)
                    nofit = self.nofit[cq.name]
                    if len(nofit) < 16:
                        nofit.append(wl)
                    changed = True
                continue
            req = request_of(cq, wl, e.flavor)
            if e.mode == FIT:
                if not self.snap.fits(cq, req):
                    self.status[wl.name] = (
                        PENDING,
                        f"{cq.name} needs {self._req_text(wl)} on {e.flavor}; it no longer fits after another "
                        "workload in the cohort was admitted this cycle",
                        e.flavor,
                    )
                    continue
                self._admit(wl, cq, e.flavor, e.borrow)
                changed = True
                continue
            # PREEMPT
            if any(v.name in self.victims for v, _ in e.targets):
                self.status[wl.name] = (
                    PENDING,
                    f"{cq.name}: its preemption targets overlap with another workload's this cycle",
                    e.flavor,
                )
                continue
            removed = list(self.victims.values()) + [v for v, _ in e.targets]
            for v in removed:
                self.snap.remove_workload(v)
            ok = self.snap.fits(cq, req)
            for v in removed:
                self.snap.add_workload(v)
            if not ok:
                self.status[wl.name] = (
                    PENDING,
                    f"{cq.name} needs {self._req_text(wl)} on {e.flavor}; it no longer fits after another "
                    "workload in the cohort was processed this cycle",
                    e.flavor,
                )
                continue
            self._preempt(wl, cq, e)
            changed = True
        return changed

    @staticmethod
    def _req_text(wl: Workload) -> str:
        return ", ".join(f"{_n(v)} {r}" for r, v in wl.requests.items() if v > 0)

    def _admit(self, wl: Workload, cq: CQNode, flavor: str, borrowing: bool) -> None:
        msg = f"Quota reserved in {cq.name} on {flavor}" + (
            f", borrowing from cohort {cq.cohort.name}" if borrowing and cq.cohort else ""
        )
        self.admitted.append(Admission(wl.name, cq.name, flavor, borrowing, ADMITTED, msg))
        self.done.add(wl.name)
        self.status.pop(wl.name, None)
        self.snap.add_workload(replace(wl, flavor=flavor, admitted_at=self.state.now))
        b = self.budget[cq.name]
        if b is not None and wl.max_cost is not None:
            self.budget[cq.name] = b - wl.max_cost

    def _preempt(self, wl: Workload, cq: CQNode, e: _Nomination) -> None:
        names = []
        for victim, reason in e.targets:
            self.victims[victim.name] = victim
            names.append(victim.name)
            if reason == "InClusterQueue":
                why = f"to make room within {cq.name}"
            elif reason == "InCohortReclaimWhileBorrowing":
                why = (
                    f"under {cq.name}'s borrowWithinCohort (victim priority below its threshold) "
                    f"in cohort {cq.cohort.name if cq.cohort else '-'}"
                )
            elif reason == "InCohortFairSharing":
                why = f"to restore fair sharing in cohort {cq.cohort.name if cq.cohort else '-'}"
            else:
                why = f"to reclaim quota {victim.cq} borrowed from {cq.name}"
            self.preempted.append(
                Preemption(
                    victim.name,
                    victim.cq,
                    wl.name,
                    cq.name,
                    reason,
                    f"Preempted by {wl.name} ({cq.name}, priority {wl.priority}) {why} (victim priority {victim.priority})",
                )
            )
        self.waiting[wl.name] = len(self.preempted)
        self.snap.reserve(cq, request_of(cq, wl, e.flavor))
        self.status[wl.name] = (
            PENDING_PREEMPTION,
            f"{cq.name} needs {self._req_text(wl)} on {e.flavor}; waiting for {len(names)} preempted "
            f"workload(s) to be evicted: {', '.join(names)}",
            e.flavor,
        )

    # -- reasons ----------------------------------------------------------------------------
    def _free_events(
        self, cq: CQNode, resource: str, flavors: frozenset[str]
    ) -> tuple[list[float], list[float]]:
        """When running work on `flavors` in the queue's cohort ends, and how much it frees (cumulative)."""
        members = cq.cohort.members if cq.cohort is not None else [cq]
        events = []
        for m in members:
            for w in m.workloads.values():
                if w.flavor in flavors and w.expected_duration_s is not None and w.name not in self.victims:
                    amt = w.requests.get(resource, 0.0)
                    if amt > 0:
                        events.append((max(self.state.now, w.admitted_at + w.expected_duration_s), amt))
        events.sort()
        times = [t for t, _ in events]
        cum, acc = [], 0.0
        for _, a in events:
            acc += a
            cum.append(acc)
        return times, cum

    def pending_infos(self) -> list[PendingInfo]:
        """Reason, position and estimated start for every workload still waiting.

        The estimate assumes nothing else arrives: the workload starts once the running jobs
        (on its flavors, in its cohort) that end first have freed what it and everything ahead
        of it in its lane need. None: no estimate (over budget, or larger than the lane can hold).
        """
        out: list[PendingInfo] = []
        now = self.state.now
        for name, q in self.queues.items():
            cq = self.snap.cqs[name]
            rest = [w for w in q if w.name not in self.done]
            if not rest:
                continue
            n = len(rest)
            resource = "nvidia.com/gpu"
            if not any(resource in w.requests for w in rest[:8]):
                resource = next(iter(rest[0].requests), resource)
            cq_flavors = cq.spec.flavors
            avail = {f: self.snap.available(cq, (f, resource)) for f in cq_flavors}
            pot = {f: self.snap.potential(cq, (f, resource)) for f in cq_flavors}
            by_set: dict[tuple, tuple] = {}
            head = self.heads.get(name)
            head_code = self.status.get(head.name, (PENDING,))[0] if head is not None else PENDING
            head_text = (
                f"behind head {head.name} ({head_code})" if head is not None else "behind the queue head"
            )
            demand = 0.0
            status = self.status
            for pos, w in enumerate(rest, 1):
                raw_key = (w.flavor, w.allowed_flavors)
                info = by_set.get(raw_key)
                if info is None:
                    key = self._flavor_set(w)
                    fl = frozenset(f for f in cq_flavors if key is None or f in key)
                    info = by_set[raw_key] = (
                        max((avail[f] for f in fl), default=0.0),
                        max((pot[f] for f in fl), default=0.0),
                        *self._free_events(cq, resource, fl),
                    )
                supply, ceiling, times, cum = info
                amount = w.requests.get(resource, 0.0)
                demand += amount
                short = demand - supply
                if amount > ceiling + _EPS:
                    est = None
                elif short <= _EPS:
                    est = now
                else:
                    i = bisect.bisect_left(cum, short - _EPS)
                    est = times[i] if i < len(times) else None
                st = status.get(w.name)
                if st is None:
                    code, msg, flavor = PENDING, f"{name}: waiting {head_text}", None
                else:
                    code, msg, flavor = st
                    if code == BUDGET_EXHAUSTED:
                        est = None
                    elif code == PENDING_PREEMPTION:
                        est = now
                out.append(
                    PendingInfo(
                        w.name,
                        name,
                        code,
                        QUOTA_RESERVED,
                        f"{code}: {msg}; position {pos} of {n}",
                        pos,
                        n,
                        est,
                        flavor,
                    )
                )
        return out

    def result(self) -> CycleResult:
        return CycleResult(
            list(self.admitted), list(self.preempted), self.pending_infos(), list(self.rejected), self.cycles
        )


@contextmanager
def _gc_paused() -> Iterator[None]:
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
    workload gets a reason, position and estimated start."""
    with _gc_paused():
        eng = _Engine(state)
        eng.cycle()
        return eng.result()


def admit_until_stable(state: ClusterState, max_cycles: int = 1000) -> CycleResult:
    """Cycles back to back until one changes nothing. Admissions are applied between cycles;
    preemptions are not (the caller evicts victims), so a preemptor waits and blocks its queue."""
    with _gc_paused():
        eng = _Engine(state)
        for _ in range(max_cycles):
            if not eng.cycle():
                break
        return eng.result()


def preemption_targets(state: ClusterState, preemptor: Workload, flavor: str) -> list[Preemption]:
    """Victims Kueue would pick for `preemptor` on a fixed flavor (none when it cannot fit)."""
    eng = _Engine(replace(state, pending=()))
    cq = eng.snap.cqs[preemptor.cq]
    search = get_targets(eng.snap, preemptor, cq, flavor, state.fair_sharing)
    out = []
    for victim, reason in search.targets:
        out.append(
            Preemption(
                victim.name,
                victim.cq,
                preemptor.name,
                cq.name,
                reason,
                f"Preempted by {preemptor.name} ({cq.name}, priority {preemptor.priority}) [{reason}]",
            )
        )
    return out


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
    return replace(state, admitted=tuple(admitted), pending=tuple(pending))
