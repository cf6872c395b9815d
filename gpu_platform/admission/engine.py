"""Admission cycles after Kueue's scheduler, with the platform's lane rules and readable reasons.

One cycle (kueue pkg/scheduler/scheduler.go `schedule`): the head of each cluster queue is
nominated (flavor assignment and, when it must preempt, its victims, all on the cycle's starting
snapshot); entries are processed in order (classical: not borrowing first, then priority, then
age; fair sharing: a tournament of dominant resource shares down the cohort tree, recomputed
after every entry); an entry that still fits is admitted, or issues its preemptions and waits
with its usage reserved; an entry whose victims overlap another's, or that no longer fits, waits
in the active queue. A BestEffortFIFO head that cannot be admitted moves to the inadmissible
list; a StrictFIFO head stays at the front. A head that needs preemption but has no candidates
and cannot always reclaim keeps the quota it could use (`reserveCapacityForUnreclaimablePreempt`).

Flavor assignment (flavorassigner.go): per resource group, flavors in order (one that Kueue's
Topology Aware Scheduling check refuses for the workload's topology request is skipped; the rule
is in `admission/tas.py`), each resource's mode (fit, preempt, reclaim, no candidates, no fit) and
borrowing height; fungibility decides when to stop and which flavor is preferred; a preemption
oracle checks, per resource, whether preemption could make room.
"""

from __future__ import annotations

import bisect
import gc
import heapq
import itertools
import operator
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

from gpu_platform.admission.model import (
    ADMITTED,
    ANY,
    BUDGET_EXCEEDED,
    BUDGET_EXHAUSTED,
    INADMISSIBLE,
    NEVER,
    PENDING,
    PENDING_PREEMPTION,
    QUOTA_RESERVED,
    STRICT_FIFO,
    TAS_FOLLOWS_FLAVOR,
    TEAM_LIMIT,
    Admission,
    AdmissionFairSharing,
    ClusterState,
    CycleLog,
    CycleResult,
    FlavorFungibility,
    PendingInfo,
    Preemption,
    Rejection,
    TeamLimit,
    Workload,
    evolve,
)
from gpu_platform.admission.nodes import placement_of, pod_shape
from gpu_platform.admission.preemption import TargetSearch, get_targets
from gpu_platform.admission.quota import FR, CohortNode, CQNode, Node, Snapshot, usage_of
from gpu_platform.admission.tas import is_tas_only, topology_refusal
from gpu_platform.devices.sharing import is_gpu_resource

_EPS = 1e-9

# Kueue's preemptionMode (flavorassigner.go), lowest to highest preference.
NOFIT, NOCAND, PREEMPT, RECLAIM, FIT = range(5)
# FlavorAssignmentMode of a whole assignment.
M_NOFIT, M_PREEMPT, M_FIT = 0, 1, 2
_MODE_OF = {NOFIT: M_NOFIT, NOCAND: M_PREEMPT, PREEMPT: M_PREEMPT, RECLAIM: M_PREEMPT, FIT: M_FIT}
_BIG = 1 << 30


def _n(v: float) -> str:
    # messages format the same few quantities over and over: remembered by value (zero and NaN
    # aside: -0.0 equals 0.0 but prints "-0"); an int and its equal float print the same
    text = _N_TEXT.get(v)
    if text is None:
        text = f"{v:g}"
        if v != 0 and v == v:
            if len(_N_TEXT) >= 4096:
                _N_TEXT.clear()
            _N_TEXT[v] = text
    return text


_N_TEXT: dict[float, str] = {}


def gpu_units(w: Workload) -> float:
    """What a workload counts against a team's GPU limit: every GPU resource, one per unit."""
    return sum(v for r, v in w.requests.items() if v > 0 and is_gpu_resource(r))


def queue_key(w: Workload):
    """Kueue's queue order: priority desc, then creation time, then name."""
    return (-w.priority, w.created_at, w.name)


_ORDERS: dict[str, tuple[list[Workload], list[Workload]]] = {}
"""Per cluster queue name, the last pending list _in_queue_order sorted and its sorted order."""


def _in_queue_order(name: str, pending: list[Workload]) -> list[Workload]:
    """`pending` sorted by queue_key (a new list). The gate's engine is built anew every tick on
    mostly the same (frozen, kept) Workload objects in the same order: the same objects in the
    same order as the last list of this queue name sort to the same order (a stable sort of the
    same sequence), which is handed out again rather than sorting 50,000 keys."""
    hit = _ORDERS.get(name)
    if hit is not None and len(hit[0]) == len(pending) and all(map(operator.is_, hit[0], pending)):
        return list(hit[1])
    ordered = sorted(pending, key=queue_key)
    if len(_ORDERS) >= 256:
        _ORDERS.clear()
    _ORDERS[name] = (pending, ordered)
    return list(ordered)


def find_height(cq: CQNode, fr: FR, v: float) -> tuple[int, bool]:
    """Kueue's FindHeightOfLowestSubtreeThatFits: the height of the lowest subtree that can hold
    `v` more of fr (0: the queue itself), and whether that subtree is below the root."""
    parent = cq.parent
    if parent is None:
        return 0, False
    q = cq.quotas.get(fr)
    if not (q.nominal if q is not None else 0.0) < cq.usage.get(fr, 0.0) + v:
        return 0, True
    remaining = v - cq.local_available(fr)
    node: CohortNode = parent
    while True:
        if not node.subtree.get(fr, 0.0) < node.usage.get(fr, 0.0) + remaining:  # borrowing_with
            return node.height(), node.parent is not None
        remaining -= node.local_available(fr)
        if node.parent is None:
            return node.height(), False
        node = node.parent


@dataclass(slots=True)
class _Assignment:
    """A flavor for each requested resource (flavor, FlavorAssignmentMode, borrow height)."""

    flavors: dict[str, tuple[str, int, int]] = field(default_factory=dict)
    borrowing: int = 0
    mode: int = M_NOFIT
    notes: list[str] = field(default_factory=list)
    last_tried: dict[str, int] = field(default_factory=dict)

    def usage(self, wl: Workload) -> dict[FR, float]:
        return {(f, r): wl.requests[r] for r, (f, _m, _b) in self.flavors.items()}

    def need(self) -> set[FR]:
        return {(f, r) for r, (f, m, _b) in self.flavors.items() if m == M_PREEMPT}

    @property
    def flavor(self) -> str | None:
        fl = {f for f, _m, _b in self.flavors.values()}
        return next(iter(fl)) if len(fl) == 1 else (min(fl) if fl else None)


@dataclass(slots=True)
class _Entry:
    wl: Workload
    cq: CQNode
    a: _Assignment
    targets: list[tuple[Workload, str]]
    search: TargetSearch | None = None
    outcome: str = ""  # admitted | preempting | skipped | nofit | nocand
    recomputed: bool = False


def _equivalence(w: Workload) -> tuple:
    """What Kueue's scheduling hash covers (priority, pod shape, requests) plus the platform's
    per-request admission inputs."""
    return (
        w.priority,
        tuple(sorted((r, v) for r, v in w.requests.items() if v > 0)),
        w.flavor,
        w.allowed_flavors,
        w.safety_approval,
        w.evidence,
        w.max_cost,
        w.cost_approval,
        w.team,
        w.pods,
        w.topology,
        w.topology_level,
    )


def _is_preferred(a: tuple[int, int], b: tuple[int, int], fung: FlavorFungibility) -> bool:
    """Kueue's isPreferred over (preemptionMode, borrowingLevel)."""
    if a[0] == NOFIT:
        return False
    if b[0] == NOFIT:
        return True
    anc, bnc = a[0] == NOCAND, b[0] == NOCAND
    if anc != bnc:
        return not anc
    if fung.preference == "PreemptionOverBorrowing":
        if a[1] != b[1]:
            return a[1] < b[1]
        return a[0] > b[0]
    if a[0] != b[0]:
        return a[0] > b[0]
    return a[1] < b[1]


def _should_try_next(mode: tuple[int, int], fung: FlavorFungibility) -> bool:
    if mode[0] in (NOFIT, NOCAND):
        return True
    if mode[0] in (PREEMPT, RECLAIM) and fung.when_can_preempt == "TryNextFlavor":
        return True
    return mode[1] != 0 and fung.when_can_borrow == "TryNextFlavor"


class _Engine:
    def __init__(
        self,
        state: ClusterState,
        *,
        dominance: bool = False,
        last_tried: dict[str, dict[str, int]] | None = None,
        parked: set[str] | None = None,
        sticky: dict[str, str] | None = None,
        estimates: bool = True,
    ):
        self.state = state
        self.estimates = estimates
        self.snap = Snapshot(state)
        self.dominance = dominance
        self.last_tried = last_tried if last_tried is not None else {}
        self.queues: dict[str, list[Workload]] = {name: [] for name in self.snap.cqs}
        self.rejected: list[Rejection] = []
        self.budget: dict[str, float | None] = {n: c.spec.budget_remaining for n, c in self.snap.cqs.items()}
        # Team limits (the platform's lane rule): cluster queue -> team -> its cap in GPUs and
        # jobs, and what the team holds in the queue now (admissions of this run included).
        self.team_caps: dict[str, dict[str, tuple[float | None, int | None]]] = {}
        self.team_use: dict[tuple[str, str], list[float]] = {}
        for n, c in self.snap.cqs.items():
            if c.spec.team_limits is not None:
                self.team_caps[n] = {}
                for w in c.workloads.values():
                    if w.team is not None:
                        use = self.team_use.setdefault((n, w.team), [0.0, 0.0])
                        use[0] += gpu_units(w)
                        use[1] += 1
        unknown: list[Workload] = []
        for w in state.pending:
            cq = self.snap.cqs.get(w.cq)
            if cq is None:
                unknown.append(w)
                continue
            cap = self._team_cap(cq, w.team)
            if cap is not None and cap[0] is not None and gpu_units(w) > cap[0] + _EPS:
                self.rejected.append(
                    Rejection(
                        w.name,
                        w.cq,
                        TEAM_LIMIT,
                        f"team {w.team} in lane {w.cq} may hold at most {_n(cap[0])} GPUs and this job needs "
                        f"{_n(gpu_units(w))}; it can never be admitted",
                    )
                )
                continue
            total = cq.spec.budget_total
            if total is not None and w.max_cost is not None and w.max_cost > total + _EPS and not w.cost_approval:
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
        # Admission Fair Sharing: cluster queue -> its LocalQueues' usage, entry penalties of this
        # run's admissions included.
        self.afs: dict[str, AdmissionFairSharing] = {
            n: c.spec.admission_fair_sharing for n, c in self.snap.cqs.items() if c.spec.admission_fair_sharing
        }
        for name, q in self.queues.items():
            if len(q) < 2:
                continue
            if name in self.afs:
                q.sort(key=self._afs_key(name))
            else:
                self.queues[name] = _in_queue_order(name, q)
        self.cursor = dict.fromkeys(self.queues, 0)
        self.nofit: dict[str, list[Workload]] = {name: [] for name in self.queues}
        self.admitted: list[Admission] = []
        self.done: set[str] = set()  # admitted in this run
        self.parked: set[str] = set(parked or ())  # in the inadmissible list (or over budget)
        # Kueue's stickyWorkload: a BestEffortFIFO preemptor stays at the head while its
        # preemptions are in progress (cluster queue -> workload).
        self.sticky: dict[str, str] = dict(sticky or {})
        self.waiting: dict[str, int] = {}  # preemptor -> index into self.preempted
        self.preempted: list[Preemption] = []
        self.victims: dict[str, Workload] = {}
        self.status: dict[str, tuple[str, str, str | None]] = {}  # name -> (code, message, flavor)
        self.heads: dict[str, Workload | None] = {}
        self.cycles = 0
        # waited on nodes, not quota: the quota-based estimated start does not apply
        self.node_blocked: set[str] = set()
        # (cohort root, resource, flavors) -> when running work frees what (for estimated starts)
        self._events_cache: dict[tuple, tuple[list[float], list[float]]] = {}
        self._ends_cache: dict[tuple, dict[str, list[tuple[float, float]]]] = {}

    def _afs_key(self, name: str):
        """Kueue's queue order under Admission Fair Sharing: the LocalQueue's usage, then priority,
        creation time and name."""
        afs = self.afs[name]
        shares: dict[str | None, float] = {}

        def key(w: Workload):
            share = shares.get(w.team)
            if share is None:
                share = shares[w.team] = afs.usage(w.team)
            return (share, -w.priority, w.created_at, w.name)

        return key

    def _team_cap(self, cq: CQNode, team: str | None) -> tuple[float | None, int | None] | None:
        """(max GPUs, max running) for `team` in `cq`, the share resolved; None: not limited."""
        limits = cq.spec.team_limits
        if limits is None or team is None:
            return None
        caps = self.team_caps[cq.name]
        hit = caps.get(team)
        if hit is None:
            lim = limits.for_team(team)
            if lim is None:
                return None
            hit = caps[team] = (self._team_gpus(cq, lim), lim.max_running)
        return hit

    def _team_gpus(self, cq: CQNode, lim: TeamLimit) -> float | None:
        gpus = lim.max_gpus
        if lim.max_share is not None:
            ceiling = sum(self.snap.potential(cq, fr) for fr in cq.quotas if is_gpu_resource(fr[1]))
            share = max(1.0, float(int(lim.max_share * ceiling + _EPS)))
            gpus = share if gpus is None else min(gpus, share)
        return gpus

    def _team_refusal(self, cq: CQNode, w: Workload) -> str | None:
        """Why `w`'s team may not start it now in `cq` (its GPU or job limit), else None."""
        cap = self._team_cap(cq, w.team)
        if cap is None:
            return None
        used = self.team_use.get((cq.name, w.team or ""), (0.0, 0.0))
        gpus, running = cap
        need = gpu_units(w)
        if gpus is not None and used[0] + need > gpus + _EPS:
            return f"team {w.team} in lane {cq.name} uses {_n(used[0])} of {_n(gpus)} GPUs (this job needs {_n(need)})"
        if running is not None and used[1] + 1 > running:
            return f"team {w.team} in lane {cq.name} uses {_n(used[1])} of {running} running jobs"
        return None

    def fungibility(self, cq: CQNode) -> FlavorFungibility:
        return cq.spec.flavor_fungibility or self.state.flavor_fungibility

    # -- flavor assignment ------------------------------------------------------------------
    def _flavor_refusal(self, wl: Workload, cq: CQNode, f: str) -> str | None:
        """Kueue's Topology Aware Scheduling check (`admission/tas.py`), then the platform's
        flavor rules (Kueue's node-affinity / taint check stands here)."""
        if wl.flavor is not None and f != wl.flavor:
            return f"flavor {f} is not the requested {wl.flavor}"
        if wl.allowed_flavors is not None and f not in wl.allowed_flavors:
            return f"flavor {f} doesn't match the requested GPU type"
        spec = self.snap.flavors.get(f)
        if wl.topology != TAS_FOLLOWS_FLAVOR:
            why = topology_refusal(
                f, spec.topology_levels if spec is not None else (), wl.topology, wl.topology_level, self._tas_only(cq)
            )
            if why is not None:
                return why
        if spec is not None and spec.spot:
            memo = self.snap.spot_quota
            key = (cq.name, f)
            own = memo.get(key)
            if own is None:
                own = memo[key] = self._has_spot_quota(cq, f)
            if not own:
                return f"{cq.name} has no quota of its own on spot flavor {f}"
        return None

    def _tas_ok(self, wl: Workload, cq: CQNode, f: str) -> bool:
        if wl.topology == TAS_FOLLOWS_FLAVOR:
            return True
        spec = self.snap.flavors.get(f)
        levels = spec.topology_levels if spec is not None else ()
        return topology_refusal(f, levels, wl.topology, wl.topology_level, self._tas_only(cq)) is None

    def _tas_only(self, cq: CQNode) -> bool:
        memo = self.snap.tas_only
        found = memo.get(cq.name)
        if found is None:
            flavors = self.snap.flavors
            levels = {f: flavors[f].topology_levels for g in cq.groups for f in g.flavors if f in flavors}
            found = memo[cq.name] = is_tas_only((f for g in cq.groups for f in g.flavors), levels)
        return found

    @staticmethod
    def _has_spot_quota(cq: CQNode, flavor: str) -> bool:
        """Spot only where the lane has quota on it: nominal > 0 or an explicit borrowing limit > 0."""
        for (f, _r), q in cq.quotas.items():
            if f == flavor and (q.nominal > 0 or (q.borrowing_limit or 0) > 0):
                return True
        return False

    def _can_preempt_while_borrowing(self, cq: CQNode) -> bool:
        spec = cq.spec
        return spec.borrow_within_cohort != NEVER or (self.state.fair_sharing and spec.reclaim_within_cohort != NEVER)

    def _fits_quota(self, wl: Workload, cq: CQNode, fr: FR, v: float) -> tuple[int, int, str | None]:
        snap = self.snap
        avail = snap.available(cq, fr)
        pot = snap.potential(cq, fr)
        f, r = fr
        if v > pot + _EPS:
            return NOFIT, 0, f"{cq.name} needs {_n(v)} {r} on {f}, more than it can ever hold ({_n(pot)})"
        borrow, may_reclaim = find_height(cq, fr, v)
        if v <= avail + _EPS:
            nodes = snap.node_refusal(wl, {fr: v}) if snap.nodes is not None else None
            if nodes is None:
                return FIT, borrow, None
            return self._fits_nodes(wl, cq, fr, v, borrow, may_reclaim, nodes)
        q = cq.quota(fr)
        used = cq.usage.get(fr, 0.0)
        lim = f"/{_n(q.nominal)}" + (
            f" (+{_n(q.borrowing_limit)} borrowable)" if cq.parent is not None and q.borrowing_limit else ""
        )
        where = (
            f"cohort {cq.parent.name} has {_n(max(0.0, snap.cohort_free(cq, fr)))} free"
            if cq.parent is not None
            else f"{_n(avail)} free"
        )
        note = f"{cq.name} needs {_n(v)} {r} on {f}; lane uses {_n(used)}{lim}, {where}"
        if q.nominal >= v - _EPS or may_reclaim or self._can_preempt_while_borrowing(cq):
            search = get_targets(snap, wl, cq, {fr: v}, {fr}, self.state.fair_sharing, self.done)
            if not search.targets:
                return NOCAND, borrow, note + " and " + self._nothing_to_preempt(cq, search)
            victims = [w for w, _ in search.targets]
            for w in victims:
                snap.remove_workload(w)
            after, _ = find_height(cq, fr, v)
            for w in victims:
                snap.add_workload(w)
            mode = PREEMPT if any(w.cq == cq.name for w in victims) else RECLAIM
            return mode, after, note
        return NOFIT, borrow, note + " and it may not preempt to borrow"

    def _fits_nodes(
        self, wl: Workload, cq: CQNode, fr: FR, v: float, borrow: int, may_reclaim: bool, why: str
    ) -> tuple[int, int, str | None]:
        """Quota fits but no nodes do (the platform's node model): preempt workloads whose removal
        frees nodes the pods fit on, where the queue may preempt; else no fit on this flavor."""
        snap = self.snap
        f, r = fr
        self.node_blocked.add(wl.name)
        pods = max(1, wl.pods)
        shape = f"{pods} x {_n(v / pods)} {r}" if pods > 1 else f"{_n(v)} {r}"
        note = f"{cq.name} needs {shape} on {f}: {why}"
        q = cq.quota(fr)
        if q.nominal >= v - _EPS or may_reclaim or self._can_preempt_while_borrowing(cq):
            search = get_targets(snap, wl, cq, {fr: v}, {fr}, self.state.fair_sharing, self.done)
            if search.targets:
                victims = [w for w, _ in search.targets]
                mode = PREEMPT if any(w.cq == cq.name for w in victims) else RECLAIM
                return mode, borrow, note
            return NOFIT, borrow, note + " and " + self._nothing_to_preempt(cq, search)
        return NOFIT, borrow, note

    def _assign(self, wl: Workload, cq: CQNode, pin: Mapping[str, str] | None = None) -> _Assignment:
        """Kueue's FlavorAssigner.Assign. pin: the flavors of the first nomination, kept when the
        assignment is recomputed within the cycle (NominationMapping)."""
        a = _Assignment()
        fung = self.fungibility(cq)
        last = {} if pin is not None else self.last_tried.get(wl.name, {})
        done: set[str] = set()
        requests = wl.requests
        notes = a.notes
        fits_quota, refusal = self._fits_quota, self._flavor_refusal
        for r in sorted(requests):
            v = requests[r]
            if v <= 0 or r in done:
                continue
            group = cq.by_resource.get(r)
            if group is None:
                if self.state.ignore_undeclared_resources:
                    continue
                notes.append(f"resource {r} unavailable in ClusterQueue {cq.name}")
                a.flavors.clear()
                a.mode = M_NOFIT
                return a
            covered = group.covered
            reqs = {rr: requests[rr] for rr in (sorted(covered) if len(covered) > 1 else covered) if requests.get(rr, 0) > 0}
            done.update(reqs)
            best: dict[str, tuple[str, int, int]] | None = None
            best_mode = (NOFIT, _BIG)
            attempted = -1
            start = last.get(r, -1) + 1
            flavors = group.flavors
            for idx in range(start, len(flavors)):
                attempted = idx
                f = flavors[idx]
                if pin is not None and all(pin.get(rr) != f for rr in reqs):
                    continue
                why = refusal(wl, cq, f)
                if why:
                    notes.append(why)
                    continue
                rep = (FIT, 0)
                assigns: dict[str, tuple[str, int, int]] = {}
                for rr, vv in reqs.items():
                    pm, borrow, note = fits_quota(wl, cq, (f, rr), vv)
                    if note:
                        notes.append(note)
                    mode = (pm, borrow)
                    if _is_preferred(rep, mode, fung):
                        rep = mode
                    if rep[0] == NOFIT:
                        break
                    assigns[rr] = (f, _MODE_OF[pm], borrow)
                if not _should_try_next(rep, fung):
                    best, best_mode = assigns, rep
                    break
                if _is_preferred(rep, best_mode, fung):
                    best, best_mode = assigns, rep
            if best is None:
                usable = [f for f in group.flavors if self._flavor_refusal(wl, cq, f) is None]
                if not usable:
                    allowed = wl.flavor or (", ".join(wl.allowed_flavors) if wl.allowed_flavors else "any")
                    a.notes.insert(0, f"{cq.name} has no usable flavor matching {allowed}")
                a.flavors.clear()
                a.mode = M_NOFIT
                a.last_tried = {}
                return a
            tried = -1 if attempted == len(group.flavors) - 1 else attempted
            for rr, fa in best.items():
                a.flavors[rr] = fa
                a.last_tried[rr] = tried
        if not a.flavors:
            if any(v > 0 for v in wl.requests.values()) and not self.state.ignore_undeclared_resources:
                a.mode = M_NOFIT
                return a
            a.mode = M_FIT
            return a
        a.borrowing = max(b for _f, _m, b in a.flavors.values())
        a.mode = min(m for _f, m, _b in a.flavors.values())
        return a

    def _nominate(self, wl: Workload, cq: CQNode, pin: Mapping[str, str] | None = None) -> _Entry:
        a = self._assign(wl, cq, pin)
        e = _Entry(wl, cq, a, [])
        if a.mode == M_PREEMPT:
            search = get_targets(self.snap, wl, cq, a.usage(wl), a.need(), self.state.fair_sharing, self.done)
            e.search = search
            e.targets = search.targets
        return e

    @staticmethod
    def _nothing_to_preempt(cq: CQNode, search: TargetSearch) -> str:
        spec = cq.spec
        if spec.within_cluster_queue == NEVER and (spec.reclaim_within_cohort == NEVER or cq.parent is None):
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

    # -- heads ------------------------------------------------------------------------------
    def _head(self, name: str) -> Workload | None:
        q = self.queues[name]
        stick = self.sticky.get(name)
        if stick is not None:
            for w in q:
                if w.name == stick and w.name not in self.done and w.name not in self.parked:
                    return w
            self.sticky.pop(name, None)
        i = self.cursor[name]
        budget = self.budget[name]
        cq = self.snap.cqs[name]
        team_limited = name in self.team_caps
        # a long queue over its lane's budget sets aside every workload in one call, most of them
        # at a handful of max_cost values: one status per value (zero aside, see _n)
        over_budget: dict[float, tuple[str, str, None]] = {}
        while i < len(q):
            w = q[i]
            if w.name in self.done or w.name in self.parked:
                i += 1
                continue
            if budget is not None and w.max_cost is not None and w.max_cost > budget + _EPS and not w.cost_approval:
                st = over_budget.get(w.max_cost)
                if st is None:
                    st = (
                        BUDGET_EXHAUSTED,
                        f"max_cost {_n(w.max_cost)} exceeds lane {name}'s remaining budget {_n(max(0.0, budget))}",
                        None,
                    )
                    if w.max_cost != 0:
                        over_budget[w.max_cost] = st
                self.status[w.name] = st
                self.parked.add(w.name)
                i += 1
                continue
            if team_limited:
                why = self._team_refusal(cq, w)
                if why is not None:
                    # Like a budget, a team limit lifts only when the team's own jobs end: the head
                    # is set aside (even under StrictFIFO) so other teams' jobs go on.
                    self.status[w.name] = (TEAM_LIMIT, why, None)
                    self.parked.add(w.name)
                    i += 1
                    continue
            if self.dominance:
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
            if self.snap.nodes is not None and (w.pods < p.pods or pod_shape(w)[1] < pod_shape(p)[1]):
                continue  # with nodes, needing more GPUs does not mean needing more of any one node
            pf, wf = self._flavor_set(p), self._flavor_set(w)
            if pf is not None and (wf is None or not wf <= pf):
                continue
            if p.topology != TAS_FOLLOWS_FLAVOR and (p.topology, p.topology_level) != (w.topology, w.topology_level):
                continue  # Kueue's TAS check may leave `w` flavors it left `p` none of
            return p
        return None

    @staticmethod
    def _flavor_set(w: Workload) -> frozenset[str] | None:
        if w.flavor is not None:
            return frozenset((w.flavor,))
        return None if w.allowed_flavors is None else frozenset(w.allowed_flavors)

    # -- one cycle --------------------------------------------------------------------------
    def _order(self, entries: list[_Entry]) -> Iterator[_Entry]:
        if not self.state.fair_sharing:
            yield from entries if len(entries) < 2 else sorted(entries, key=lambda e: (e.a.borrowing, queue_key(e.wl)))
            return
        by_root: dict[int, list[_Entry]] = {}
        roots: dict[int, CohortNode] = {}
        for e in entries:
            if e.cq.parent is None:
                yield e
                continue
            root = e.cq.root()
            assert isinstance(root, CohortNode)
            by_root.setdefault(id(root), []).append(e)
            roots[id(root)] = root
        for rid, group in by_root.items():
            root = roots[rid]
            left = {e.cq.name: e for e in group}
            while left:
                winner = self._tournament(root, left)
                assert winner is not None
                del left[winner.cq.name]
                yield winner

    def _tournament(self, root: CohortNode, left: Mapping[str, _Entry]) -> _Entry | None:
        """Kueue's fair-sharing iterator: lowest DRS (after admitting its entry) wins at each level;
        a subtree not borrowing on the entry's flavors first (FairSharingPrioritizeNonBorrowing)."""
        snap = self.snap
        values: dict[tuple[str, str], tuple] = {}
        requested: dict[str, dict[FR, float]] = {}
        for cq in root.subtree_cqs():
            e = left.get(cq.name)
            if e is None:
                continue
            u = e.a.usage(e.wl) if e.a.mode != M_NOFIT else {}
            requested[e.wl.name] = u
            snap.add_usage(cq, u)
            d = snap.drs(cq)
            for anc in cq.ancestors():
                values[(anc.name, e.wl.name)] = d
                d = snap.drs(anc)
            snap.remove_usage(cq, u)

        def less(a: _Entry, b: _Entry, parent: str) -> bool:
            da, db = values[(parent, a.wl.name)], values[(parent, b.wl.name)]
            ba, bb = da.borrowing_on(requested[a.wl.name]), db.borrowing_on(requested[b.wl.name])
            if ba != bb:
                return not ba
            ka, kb = da.key(), db.key()
            if ka != kb:
                return ka < kb
            if a.wl.priority != b.wl.priority:
                return a.wl.priority > b.wl.priority
            return (a.wl.created_at, a.wl.name) < (b.wl.created_at, b.wl.name)

        def run(cohort: CohortNode) -> _Entry | None:
            cands = []
            for child in cohort.child_cohorts:
                c = run(child)
                if c is not None:
                    cands.append(c)
            for cq in cohort.child_cqs:
                if cq.name in left:
                    cands.append(left[cq.name])
            if not cands:
                return None
            best = cands[0]
            for cur in cands[1:]:
                if less(cur, best, cohort.name):
                    best = cur
            return best

        return run(root)

    def cycle(self) -> bool:
        """Run one cycle; True when it changed anything (admission, preemption, parking)."""
        self.cycles += 1
        changed = False
        entries: list[_Entry] = []
        queues, heads = self.queues, self.heads
        for name, cq in self.snap.cqs.items():
            if not queues[name]:  # what _head finds in an empty queue (its sticky entry dropped)
                self.sticky.pop(name, None)
                heads[name] = None
                continue
            head = self._head(name)
            heads[name] = head
            if head is None or head.name in self.waiting:
                continue
            entries.append(self._nominate(head, cq))
        reserved: list[tuple[CQNode, dict[FR, float]]] = []
        for e in self._order(entries):
            changed |= self._process(e, reserved)
        for cq, u in reserved:
            self.snap.remove_usage(cq, u)
        for e in entries:
            self._requeue(e)
            if e.outcome in ("nofit", "nocand") and e.wl.name in self.parked:
                changed = True
        return changed

    def _process(self, e: _Entry, reserved: list) -> bool:
        wl, cq, a = e.wl, e.cq, e.a
        if a.mode == M_NOFIT:
            e.outcome = "nofit"
            msg = "; ".join(dict.fromkeys(a.notes)) or f"{cq.name}: no flavor fits"
            self.status[wl.name] = (INADMISSIBLE, msg, None)
            return False
        usage = a.usage(wl)
        if a.mode == M_PREEMPT and not e.targets:
            # Held back only by a lane rule (yields_to, protected, evidence not yet checkpointed):
            # the rule can lift without any quota change, so the head stays in the active queue.
            e.outcome = "held" if e.search is not None and e.search.excluded else "nocand"
            msg = "; ".join(dict.fromkeys(n for n in a.notes if " and " in n)) or "; ".join(
                dict.fromkeys(a.notes)
            )
            self.status[wl.name] = (INADMISSIBLE, msg or f"{cq.name}: nothing to preempt", None)
            if cq.spec.reclaim_within_cohort != ANY:
                res = self._to_reserve(a, cq, usage)
                self.snap.add_usage(cq, res)
                reserved.append((cq, res))
            return False
        if not e.recomputed and any(v.name in self.victims for v, _ in e.targets):
            return self._recompute(e, reserved)
        removed = list(self.victims.values()) + [v for v, _ in e.targets]
        for v in removed:
            self.snap.remove_workload(v)
        ok = self.snap.fits(cq, usage)
        nodes_why = None
        if ok and self.snap.nodes is not None:
            nodes_why = self.snap.node_refusal(wl, usage)
            ok = nodes_why is None
        for v in removed:
            self.snap.add_workload(v)
        if not ok:
            e.outcome = "skipped"
            self.status[wl.name] = (
                PENDING,
                f"{cq.name} needs {self._req_text(wl)} on {a.flavor}; it no longer fits after another "
                "workload in the cohort was processed this cycle" + (f" ({nodes_why})" if nodes_why else ""),
                a.flavor,
            )
            return False
        if a.mode == M_PREEMPT:
            e.outcome = "preempting"
            self._preempt(wl, cq, e, usage)
            return True
        if e.recomputed:
            e.outcome = "preempting"
            self.waiting[wl.name] = len(self.preempted)
            self.snap.add_usage(cq, usage)
            self.status[wl.name] = (
                PENDING_PREEMPTION,
                f"{cq.name} needs {self._req_text(wl)} on {a.flavor}; it fits once the workloads preempted "
                "by others this cycle are evicted",
                a.flavor,
            )
            return True
        e.outcome = "admitted"
        self._admit(wl, cq, a, usage)
        return True

    def _recompute(self, e: _Entry, reserved: list) -> bool:
        """Kueue's RecomputeAssignmentUponPreemptionTargetsOverlap: targets overlap another
        entry's, so the assignment is computed again as if this cycle's preemptions had completed
        (flavors pinned to the first nomination)."""
        victims = list(self.victims.values())
        for v in victims:
            self.snap.remove_workload(v)
        try:
            pin = {r: f for r, (f, _m, _b) in e.a.flavors.items()}
            fresh = self._nominate(e.wl, e.cq, pin)
        finally:
            for v in victims:
                self.snap.add_workload(v)
        e.a, e.targets, e.search, e.recomputed = fresh.a, fresh.targets, fresh.search, True
        return self._process(e, reserved)

    @staticmethod
    def _to_reserve(a: _Assignment, cq: CQNode, usage: Mapping[FR, float]) -> dict[FR, float]:
        """Kueue's quotaResourcesToReserve for a preemptor without candidates."""
        out: dict[FR, float] = {}
        for fr, v in usage.items():
            q = cq.quota(fr)
            used = cq.usage.get(fr, 0.0)
            if a.borrowing > 0:
                out[fr] = v if q.borrowing_limit is None else min(v, q.nominal + q.borrowing_limit - used)
            else:
                out[fr] = max(0.0, min(v, q.nominal - used))
        return out

    def _requeue(self, e: _Entry) -> None:
        """Kueue's requeueAndUpdate / ClusterQueue.requeueIfNotPresent: where a head goes next."""
        name = e.wl.name
        cqn = e.cq.name
        if e.outcome == "preempting" and e.cq.spec.queueing_strategy != STRICT_FIFO:
            self.sticky[cqn] = name
        elif self.sticky.get(cqn) == name:
            del self.sticky[cqn]
        if e.outcome == "preempting":
            self.last_tried.pop(name, None)
            return
        if e.outcome == "skipped":
            # The flavor scan resumes after the flavor just tried (the entry keeps its
            # LastAssignment); only issued preemptions restart the scan.
            if e.a.last_tried:
                self.last_tried[name] = dict(e.a.last_tried)
            return
        if e.outcome in ("nofit", "nocand"):
            pending_flavors = any(i != -1 for i in e.a.last_tried.values())
            if e.a.last_tried:
                self.last_tried[name] = dict(e.a.last_tried)
            else:
                self.last_tried.pop(name, None)
            if e.cq.spec.queueing_strategy != STRICT_FIFO and not pending_flavors:
                if name not in self.parked:
                    self.parked.add(name)
                    nofit = self.nofit[e.cq.name]
                    if len(nofit) < 16:
                        nofit.append(e.wl)
                    self._park_equivalent(e)

    def _park_equivalent(self, e: _Entry) -> None:
        """Kueue's SchedulingEquivalenceHashing: in a BestEffortFIFO queue, the workloads that
        look exactly like a head that could not be admitted (same priority, requests and flavor
        constraints) move to the inadmissible list with it."""
        h = _equivalence(e.wl)
        code, msg, _f = self.status.get(e.wl.name, (INADMISSIBLE, "", None))
        q = self.queues[e.cq.name]
        for w in q[self.cursor[e.cq.name] :]:
            n = w.name
            if n == e.wl.name or n in self.done or n in self.parked or n in self.waiting:
                continue
            if _equivalence(w) == h:
                self.parked.add(n)
                self.status[n] = (code, f"equivalent to {e.wl.name}, which cannot be admitted: {msg}", None)

    @staticmethod
    def _req_text(wl: Workload) -> str:
        return ", ".join(f"{_n(v)} {r}" for r, v in wl.requests.items() if v > 0)

    def _admit(self, wl: Workload, cq: CQNode, a: _Assignment, usage: Mapping[FR, float]) -> None:
        flavor = a.flavor or ""
        borrowing = a.borrowing > 0
        msg = f"Quota reserved in {cq.name} on {flavor}" + (
            f", borrowing from cohort {cq.parent.name}" if borrowing and cq.parent else ""
        )
        flavors = {r: f for r, (f, _m, _b) in a.flavors.items()}
        self.done.add(wl.name)
        self.status.pop(wl.name, None)
        self.last_tried.pop(wl.name, None)
        # Counted in the snapshot but never a victim in this run (like Kueue's assumed workloads,
        # which the cycle's snapshot holds as usage only), so kept off the victim index.
        held = cq.workloads[wl.name] = evolve(
            wl,
            flavor=flavor,
            admitted_at=self.state.now,
            resource_flavors=flavors if len(set(flavors.values())) > 1 else None,
        )
        self.snap.add_usage(cq, usage)
        placement = None
        if self.snap.nodes is not None:
            self.snap.nodes.place(held)
            placement = placement_of(self.snap.nodes, wl.name)
        self.admitted.append(Admission(wl.name, cq.name, flavor, borrowing, ADMITTED, msg, flavors, placement))
        afs = self.afs.get(cq.name)
        if afs is not None and afs.entry_penalty_rate > 0:
            # The entry penalty reorders the rest of the queue for the cycles that follow.
            self.afs[cq.name] = afs.after_admission(wl.team, wl.requests)
            # Only the admitted team's usage moved, by the same amount for all of its workloads:
            # its run and everyone else's stay sorted, so one merge restores the order.
            q, i = self.queues[cq.name], self.cursor[cq.name]
            mine = [w for w in q[i:] if w.team == wl.team]
            if mine:
                rest = [w for w in q[i:] if w.team != wl.team]
                q[i:] = heapq.merge(rest, mine, key=self._afs_key(cq.name))
        if cq.name in self.team_caps and wl.team is not None:
            use = self.team_use.setdefault((cq.name, wl.team), [0.0, 0.0])
            use[0] += gpu_units(wl)
            use[1] += 1
        b = self.budget[cq.name]
        if b is not None and wl.max_cost is not None:
            self.budget[cq.name] = b - wl.max_cost

    def _preempt(self, wl: Workload, cq: CQNode, e: _Entry, usage: Mapping[FR, float]) -> None:
        names = []
        parent = cq.parent.name if cq.parent else "-"
        for victim, reason in e.targets:
            self.victims[victim.name] = victim
            names.append(victim.name)
            if reason == "InClusterQueue":
                why = f"to make room within {cq.name}"
            elif reason == "InCohortReclaimWhileBorrowing":
                why = f"under {cq.name}'s borrowWithinCohort (victim priority below its threshold) in cohort {parent}"
            elif reason == "InCohortFairSharing":
                why = f"to restore fair sharing in cohort {parent}"
            else:
                why = f"to reclaim quota {victim.cq} borrowed from {cq.name}'s cohort"
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
        self.snap.add_usage(cq, usage)
        self.status[wl.name] = (
            PENDING_PREEMPTION,
            f"{cq.name} needs {self._req_text(wl)} on {e.a.flavor}; waiting for {len(names)} preempted "
            f"workload(s) to be evicted: {', '.join(names)}",
            e.a.flavor,
        )

    # -- reasons ----------------------------------------------------------------------------
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
                        key = self._flavor_set(w)
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
                    if not estimating:
                        pass  # est stays None
                    elif code in (BUDGET_EXHAUSTED, TEAM_LIMIT) or (code == INADMISSIBLE and w.name in node_blocked):
                        est = None
                    elif code == PENDING_PREEMPTION:
                        est = now
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

    def result(self) -> CycleResult:
        return CycleResult(
            list(self.admitted), list(self.preempted), self.pending_infos(), list(self.rejected), self.cycles
        )


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
        eng = _Engine(state)
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
        eng = _Engine(state, dominance=True, estimates=estimates)
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
    Stops after a cycle that admits nothing, preempts nothing and leaves the queues as they were,
    or when nothing is left to try. `per_cycle` holds what each cycle did; the result's lists
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
            eng = _Engine(cur, last_tried=carry.last_tried, parked=carry.parked, sticky=carry.sticky)
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
            prev_queues = queues
            carry.parked = set(eng.parked)
            carry.sticky = dict(eng.sticky)
            cur = _advance(cur, eng, res, evicted_finish, carry)
        if res is None:
            res = _Engine(cur).result()
        elif not stable and res.preempted:
            # The run ran out of cycles right after one that preempted: its victims have finished
            # their eviction like any other cycle's, so the final queues are read after it (a
            # requeued victim is pending, not finished) and nothing is tried again.
            res = _Engine(cur, last_tried=carry.last_tried, parked=carry.parked, sticky=carry.sticky).result()
        return CycleResult(admitted_all, preempted_all, res.pending, res.rejected, len(logs), logs)


@dataclass(slots=True)
class _Carry:
    """What Kueue's queue manager remembers between cycles."""

    last_tried: dict[str, dict[str, int]] = field(default_factory=dict)
    parked: set[str] = field(default_factory=set)
    sticky: dict[str, str] = field(default_factory=dict)


def _advance(state: ClusterState, eng: _Engine, res: CycleResult, evicted_finish: bool, carry: _Carry) -> ClusterState:
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
    eng = _Engine(replace(state, pending=()))
    snap = eng.snap
    cq = snap.cqs[preemptor.cq]
    usage = usage_of(preemptor, flavor)
    need = {fr for fr, v in usage.items() if v > snap.available(cq, fr) + _EPS}
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
