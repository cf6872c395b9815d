"""One admission cycle after Kueue's scheduler (pkg/scheduler/scheduler.go `schedule`), with the
platform's lane rules (team limits, lane budgets) and readable reasons.

The head of each cluster queue is nominated (flavor assignment, `flavor_assign.py`, and, when it
must preempt, its victims, `preemption.py`, all on the cycle's starting snapshot); entries are
processed in order (classical: not borrowing first, then priority, then age; fair sharing: a
tournament of dominant resource shares down the cohort tree, recomputed after every entry); an
entry that still fits is admitted, or issues its preemptions and waits with its usage reserved;
an entry whose victims overlap another's, or that no longer fits, waits in the active queue. A
BestEffortFIFO head that cannot be admitted moves to the inadmissible list; a StrictFIFO head
stays at the front. A head that needs preemption but has no candidates and cannot always reclaim
keeps the quota it could use (`reserveCapacityForUnreclaimablePreempt`). What each waiting
workload is told comes from `reasons.py`. The loops that run cycles are in `engine.py`. A
workload the cycle's head reservations hold on every flavor it may use takes no head turn
(`reservation.py`: the gate does not hand it to Kueue).

May import `admission/model.py`, `nodes.py`, `preemption.py`, `quota.py`, `flavor_assign.py`,
`reasons.py`, `reservation.py`, `workload_keys.py`, `devices/`.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from gpu_platform.admission.flavor_assign import M_NOFIT, M_PREEMPT, Assignment, FlavorAssigner
from gpu_platform.admission.model import (
    ADMITTED,
    ANY,
    BUDGET_EXCEEDED,
    BUDGET_EXHAUSTED,
    INADMISSIBLE,
    PENDING,
    PENDING_PREEMPTION,
    STRICT_FIFO,
    TAS_FOLLOWS_FLAVOR,
    TEAM_LIMIT,
    Admission,
    AdmissionFairSharing,
    ClusterState,
    CycleResult,
    Preemption,
    Rejection,
    TeamLimit,
    Workload,
    evolve,
)
from gpu_platform.admission.nodes import placement_of, pod_shape
from gpu_platform.admission.preemption import TargetSearch, get_targets
from gpu_platform.admission.quota import FR, CohortNode, CQNode, Snapshot
from gpu_platform.admission.reasons import PendingReasons
from gpu_platform.admission.reservation import GPU as GPU_RESOURCE
from gpu_platform.admission.reservation import reservation_refusal
from gpu_platform.admission.workload_keys import (
    EPS,
    equivalence,
    flavor_set,
    gpu_units,
    in_queue_order,
    qty,
    queue_key,
)
from gpu_platform.devices.sharing import is_gpu_resource


@dataclass(slots=True)
class _Entry:
    wl: Workload
    cq: CQNode
    a: Assignment
    targets: list[tuple[Workload, str]]
    search: TargetSearch | None = None
    outcome: str = ""  # admitted | preempting | skipped | nofit | nocand
    recomputed: bool = False


class Engine(FlavorAssigner, PendingReasons):
    """The state of one engine run: its snapshot, queues, and what its cycles did so far."""

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
            if cap is not None and cap[0] is not None and gpu_units(w) > cap[0] + EPS:
                self.rejected.append(
                    Rejection(
                        w.name,
                        w.cq,
                        TEAM_LIMIT,
                        f"team {w.team} in lane {w.cq} may hold at most {qty(cap[0])} GPUs and this job needs "
                        f"{qty(gpu_units(w))}; it can never be admitted",
                    )
                )
                continue
            total = cq.spec.budget_total
            if total is not None and w.max_cost is not None and w.max_cost > total + EPS and not w.cost_approval:
                self.rejected.append(
                    Rejection(
                        w.name,
                        w.cq,
                        BUDGET_EXCEEDED,
                        f"max_cost {qty(w.max_cost)} exceeds lane {w.cq}'s whole budget {qty(total)}; it can never be admitted",
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
                self.queues[name] = in_queue_order(name, q)
        self.cursor = dict.fromkeys(self.queues, 0)
        self.nofit: dict[str, list[Workload]] = {name: [] for name in self.queues}
        self.equivalents: dict[str, dict[tuple, list[tuple[int, Workload]]]] = {}  # see _park_equivalent
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
        self.reserved_out: set[str] = set()  # a head reservation refused them a flavor (`_fits_quota`)
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
            share = max(1.0, float(int(lim.max_share * ceiling + EPS)))
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
        if gpus is not None and used[0] + need > gpus + EPS:
            return f"team {w.team} in lane {cq.name} uses {qty(used[0])} of {qty(gpus)} GPUs (this job needs {qty(need)})"
        if running is not None and used[1] + 1 > running:
            return f"team {w.team} in lane {cq.name} uses {qty(used[1])} of {running} running jobs"
        return None

    def _nominate(self, wl: Workload, cq: CQNode, pin: Mapping[str, str] | None = None) -> _Entry:
        a = self._assign(wl, cq, pin)
        e = _Entry(wl, cq, a, [])
        if a.mode == M_PREEMPT:
            search = get_targets(self.snap, wl, cq, a.usage(wl), a.need(), self.state.fair_sharing, self.done)
            e.search = search
            e.targets = search.targets
        return e

    # -- heads ------------------------------------------------------------------------------
    def _head(self, name: str) -> Workload | None:
        q = self.queues[name]
        stick = self.sticky.get(name)
        if stick is not None:
            # Kueue's stickyWorkload stays set until the workload leaves the queue (admitted or
            # deleted: cluster_queue.go `delete`); a sticky workload in the inadmissible list
            # lets the heap's head go first and is the head again once it is moved back.
            w = next((w for w in q if w.name == stick), None)
            if w is None or w.name in self.done:
                self.sticky.pop(name, None)
            elif w.name not in self.parked:
                return w
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
            if budget is not None and w.max_cost is not None and w.max_cost > budget + EPS and not w.cost_approval:
                st = over_budget.get(w.max_cost)
                if st is None:
                    # the gate's budget admits: the lane's budget less the max_cost reserved by the
                    # requests admitted this period (measured spend: `cost report`'s budgets,
                    # docs/finops.md "Which budget admits"); the way past it is a cost exception
                    st = (
                        BUDGET_EXHAUSTED,
                        f"max_cost {qty(w.max_cost)} exceeds lane {name}'s remaining budget {qty(max(0.0, budget))}; "
                        "the gate reserves each admitted request's max_cost against the lane budget for the "
                        "period; a cost exception lets it start: gpu-platform approve ",
                        None,
                    )
                    if w.max_cost != 0:
                        over_budget[w.max_cost] = st
                self.status[w.name] = (st[0], f"{st[1]}{w.name} --kind cost --role ROLE --reason TEXT", None)
                self.parked.add(w.name)
                i += 1
                continue
            aside = self._set_aside(name, cq, w, team_limited)
            if aside is not None:
                self.status[w.name] = (aside[0], aside[1], None)
                self.parked.add(w.name)
                i += 1
                continue
            break
        self.cursor[name] = i
        return q[i] if i < len(q) else None

    def _set_aside(self, name: str, cq: CQNode, w: Workload, team_limited: bool) -> tuple[str, str] | None:
        """(reason code, message) when the head walk sets `w` aside without a head turn, or None."""
        if team_limited:
            why = self._team_refusal(cq, w)
            if why is not None:
                # Like a budget, a team limit lifts only when the team's own jobs end: the head
                # is set aside (even under StrictFIFO) so other teams' jobs go on.
                return TEAM_LIMIT, why
        if self.dominance:
            dom = self._dominated(name, w)
            if dom is not None:
                return (
                    INADMISSIBLE,
                    f"needs at least what {dom.name} ahead of it needs, and that cannot be admitted: "
                    + self.status[dom.name][1],
                )
        if self.state.reservations and cq.spec.queueing_strategy != STRICT_FIFO:
            held = self._held(cq, w)
            if held is not None:
                return INADMISSIBLE, held
        return None

    def _held(self, cq: CQNode, w: Workload) -> str | None:
        """Why head reservations hold `w` on every flavor it may use this run (`reservation.py`),
        or None. Reservations are fixed for a run and refuse a flavor outright (fit or preempt), so
        such a workload cannot be admitted in any of its cycles; the gate does not hand it to Kueue
        at all, so it takes no head turn here either (BestEffortFIFO queues; a StrictFIFO head
        still holds its queue)."""
        v = w.requests.get(GPU_RESOURCE, 0.0)
        group = cq.by_resource.get(GPU_RESOURCE)
        if v <= EPS or group is None:
            return None
        why = None
        for f in group.flavors:
            if self._flavor_refusal(w, cq, f) is not None:
                continue
            refusal = reservation_refusal(self.state, w, f, v)
            if refusal is None:
                return None
            why = why or refusal
        return why

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
            if p.name in self.reserved_out and not (
                p.expected_duration_s is not None
                and (w.expected_duration_s is None or w.expected_duration_s >= p.expected_duration_s)
            ):
                continue  # a shorter job may end before a reserved head starts (`reservation.py`)
            if self.snap.nodes is not None and (w.pods < p.pods or pod_shape(w)[1] < pod_shape(p)[1]):
                continue  # with nodes, needing more GPUs does not mean needing more of any one node
            pf, wf = flavor_set(p), flavor_set(w)
            if pf is not None and (wf is None or not wf <= pf):
                continue
            if p.topology != TAS_FOLLOWS_FLAVOR and (p.topology, p.topology_level) != (w.topology, w.topology_level):
                continue  # Kueue's TAS check may leave `w` flavors it left `p` none of
            return p
        return None

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
    def _to_reserve(a: Assignment, cq: CQNode, usage: Mapping[FR, float]) -> dict[FR, float]:
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
            # RequeueIfNotPresent with RequeueReasonPendingPreemption sets it; nothing but the
            # workload leaving the queue clears it (a skip or a move to the inadmissible list
            # keeps it)
            self.sticky[cqn] = name
        elif e.outcome == "admitted" and self.sticky.get(cqn) == name:
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
        name = e.cq.name
        groups = self.equivalents.get(name)
        if groups is None:
            # the queue's workloads by equivalence class, in queue order (a queue's list is fixed
            # for the run): a parked head finds its look-alikes without hashing the whole queue
            groups = self.equivalents[name] = {}
            for i, w in enumerate(self.queues[name]):
                groups.setdefault(equivalence(w), []).append((i, w))
        # A head a reservation refused some flavor (`reservation.py`) fails there by its expected
        # duration: a look-alike expected to end sooner might backfill, so only those expected to
        # run at least as long (or for an unknown time) are set aside with it. A head no
        # reservation refused failed on capacity, which a look-alike's duration does not change.
        timed = e.wl.name in self.reserved_out
        d = e.wl.expected_duration_s
        code, msg, _f = self.status.get(e.wl.name, (INADMISSIBLE, "", None))
        start = self.cursor[name]
        for i, w in groups.get(equivalence(e.wl), ()):
            n = w.name
            if i < start or n == e.wl.name or n in self.done or n in self.parked or n in self.waiting:
                continue
            if timed and w.expected_duration_s is not None and (d is None or w.expected_duration_s < d):
                continue
            self.parked.add(n)
            self.status[n] = (code, f"equivalent to {e.wl.name}, which cannot be admitted: {msg}", None)

    @staticmethod
    def _req_text(wl: Workload) -> str:
        return ", ".join(f"{qty(v)} {r}" for r, v in wl.requests.items() if v > 0)

    def _admit(self, wl: Workload, cq: CQNode, a: Assignment, usage: Mapping[FR, float]) -> None:
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

    # -- the run's result ----------------------------------------------------------------
    def result(self) -> CycleResult:
        return CycleResult(
            list(self.admitted), list(self.preempted), self.pending_infos(), list(self.rejected), self.cycles
        )
