"""The simulator's engine calls: what each admission call is shown (per queue, its arrivals or
every queue, identical workloads one at a time, workloads bound by their own queue's ceiling
held back, running workloads no shown one may preempt folded per (queue, flavor, priority)),
the call itself until the instant settles (`schedule`), and the GPUs stranded by fragmentation.

May import `admission/`, `policy/`, `simulate/des_queues.py`, `des_types.py`.
"""

from __future__ import annotations

from gpu_platform.admission import ClusterState, Workload, admit_until_stable
from gpu_platform.admission.model import (
    ANY,
    BUDGET_EXHAUSTED,
    INADMISSIBLE,
    LOWER_OR_NEWER_EQUAL,
    LOWER_PRIORITY,
    NEVER,
    evolve,
)
from gpu_platform.admission.reservation import Reservation, Running, plan_reservations
from gpu_platform.admission.serving_lending import withheld_gpus
from gpu_platform.policy import GPU
from gpu_platform.simulate.des_queues import _Queues
from gpu_platform.simulate.des_types import JobRun

# ClusterState's slot setters of the fields each engine call sets (see `_Sim._state`)
_CS_ADMITTED = ClusterState.__dict__["admitted"].__set__
_CS_PENDING = ClusterState.__dict__["pending"].__set__
_CS_NOW = ClusterState.__dict__["now"].__set__
_CS_RESERVATIONS = ClusterState.__dict__["reservations"].__set__


class _Cycles(_Queues):
    """The engine calls of one simulation (`des._Sim` adds the loop)."""

    def _admitted(self, pending: list[Workload], now: float) -> tuple[Workload, ...]:
        """The running workloads as the engine sees them. Groups (queue, flavor, priority) that no
        shown workload may preempt under its queue's policy are folded into one workload each,
        marked as an uncheckpointed evidence job (never a victim); quota usage is unchanged."""
        if not self.merge_held:
            return tuple(self.running.values())
        specs = self.specs
        # Reclaim and borrow-within-cohort reach across the whole cohort tree (hierarchical
        # cohorts: a lane of `assurance` reclaims from one of `batch` under the same root), so
        # two queues compete when their cohorts share a root, not only when they are the same.
        cohort = self.cohort_root
        rules = {}
        for p in pending:
            key = (p.cq, p.priority)
            if key in rules:
                continue
            spec = specs[p.cq]
            rules[key] = (spec.within_cluster_queue, spec.reclaim_within_cohort, spec.borrow_within_cohort, spec.cohort, cohort[p.cq])
        rule_items = tuple(rules.items())
        cq_usage, nominal = self.cq_usage, self.nominal
        out: list[Workload] = []
        for g, names in self.groups.items():
            cq, flavor, prio = g
            victim = False
            for (pcq, pprio), (within, reclaim, borrow, pco, proot) in rule_items:
                if pcq == cq:
                    # Kueue: LowerPriority takes lower priorities only; LowerOrNewerEqual also equal
                    # (newer) ones; anything else is taken as "any" to stay on the safe side.
                    if within == NEVER or (within == LOWER_PRIORITY and prio >= pprio):
                        continue
                    if within == LOWER_OR_NEWER_EQUAL and prio > pprio:
                        continue
                    victim = True
                    break
                if pco is not None and proot == cohort[cq]:
                    # Kueue takes another queue's workloads only from a queue above its nominal
                    # quota on the flavor (preemption.py `_collect_subtree` / `_valid`:
                    # `within_nominal`); a queue within its nominal there is never a victim.
                    if cq_usage.get((cq, flavor, GPU), 0.0) <= nominal.get((cq, flavor), 0.0) + 1e-9:
                        continue
                    if reclaim == ANY or (reclaim != NEVER and prio <= pprio) or (borrow != NEVER and prio < pprio):
                        victim = True
                        break
            if victim:
                out.extend(self.running[n] for n in names)
            else:
                # admitted_at is that of the group's last change: the engine reads it only to order
                # victims and to estimate starts of work with an expected duration (neither applies)
                ver = self.group_ver[g]
                hit = self.folded.get(g)
                if hit is not None and hit[0] != ver:
                    # the same group changed: only its sums and time differ (evolve: a cheaper copy)
                    hit = self.folded[g] = (
                        ver,
                        evolve(
                            hit[1],
                            requests=dict(self.group_sum[g]),
                            admitted_at=now,
                            placement=dict(self.group_place[g]) if g in self.group_place else None,
                        ),
                    )
                elif hit is None:
                    hit = self.folded[g] = (
                        ver,
                        Workload(
                            name=f"~running:{cq}:{flavor}:{prio}",
                            cq=cq,
                            requests=dict(self.group_sum[g]),
                            priority=prio,
                            admitted_at=now,
                            flavor=flavor,
                            evidence=True,
                            checkpointed=False,
                            placement=dict(self.group_place[g]) if g in self.group_place else None,
                        ),
                    )
                out.append(hit[1])
        return tuple(out)

    def _state(self, admitted: tuple[Workload, ...], pending: tuple[Workload, ...], now: float) -> ClusterState:
        """The scenario's state with these admitted and pending workloads at `now`: what
        `ClusterState(**{**base, ...})` builds (ClusterState has no __post_init__), its fields set
        through their slots rather than by keyword."""
        new = object.__new__(ClusterState)
        for setter, value in self.base_fields:
            setter(new, value)
        _CS_ADMITTED(new, admitted)
        _CS_PENDING(new, pending)
        _CS_NOW(new, now)
        return new

    def _bound(self, wl: Workload) -> bool:
        """True when wl cannot be admitted before its own queue's usage drops (see the module doc)."""
        spec = self.specs[wl.cq]
        prios = self.cq_prios.get(wl.cq)
        within = spec.within_cluster_queue
        if prios and within != NEVER:
            low = min(prios)
            if within == ANY or (within == LOWER_PRIORITY and low < wl.priority) or (
                within == LOWER_OR_NEWER_EQUAL and low <= wl.priority
            ):
                return False
        for q_flavor in spec.flavors:
            if wl.flavor is not None and q_flavor != wl.flavor:
                continue
            if wl.allowed_flavors is not None and q_flavor not in wl.allowed_flavors:
                continue
            over = False
            for r, v in wl.requests.items():
                cap = self.ceiling.get((wl.cq, q_flavor, r))
                if v > 0 and cap is not None and self.cq_usage.get((wl.cq, q_flavor, r), 0.0) + v > cap + 1e-9:
                    over = True
                    break
            if not over:
                return False
        return True

    # -- admission -------------------------------------------------------------------------
    def _refresh_checkpoints(self, now: float) -> None:
        if not self.uncheckpointed or self.ckpt <= 0:
            return
        done = []
        for name in self.uncheckpointed:
            r = self.run_of[name]
            if r.job.preemption_policy == "checkpoint_requeue" and now - r.start >= self.ckpt:
                self.running[name] = evolve(self.running[name], checkpointed=True)
                done.append(name)
        self.uncheckpointed.difference_update(done)

    def _shown(self, cq: str, full: bool, limit: int, expand: dict[tuple, int], parked: set[tuple]):
        """The workloads of `cq` shown to the engine, in queue order, and whether some were held back
        (beyond `limit` distinct ones). full=False: only this call's arrivals (the rest stay parked)."""
        if full or cq in self.strict:
            reps: list[tuple[tuple, JobRun, tuple, bool]] = []
            bound_ok = self.skip_bound and cq not in self.strict
            for sh, group in self.shapes[cq].items():
                if (cq, sh) in parked or (bound_ok and self._bound(group[0][1].wl)):  # type: ignore[arg-type]
                    continue
                k = expand.get((cq, sh), self.shown_per_shape)
                for j in range(min(k, len(group))):
                    reps.append((group[j][0], group[j][1], sh, j == min(k, len(group)) - 1 and len(group) > k))
        else:
            seen: dict[tuple, int] = {}
            last_of: dict[tuple, int] = {}
            reps = []
            for r in sorted(self.fresh[cq], key=lambda r: r.key):
                if r.state != "pending":
                    continue
                sh = r.shape
                if (cq, sh) in parked or (self.skip_bound and self._bound(r.wl)):  # type: ignore[arg-type]
                    continue
                n = seen.get(sh, 0)
                seen[sh] = n + 1
                k = expand.get((cq, sh), self.shown_per_shape)
                if n < k:
                    last_of[sh] = len(reps)
                    reps.append((r.key, r, sh, False))
                elif n == k:
                    e = reps[last_of[sh]]
                    reps[last_of[sh]] = (e[0], e[1], e[2], True)
        reps.sort(key=lambda e: e[0])
        return reps[:limit], len(reps) > limit

    def schedule(self, now: float, full: bool, settle: bool = True) -> None:
        limits = dict.fromkeys(self.shapes, self.window)
        expand: dict[tuple, int] = {}
        # Found inadmissible at this instant: not shown again after evictions here, since what
        # evictions free is the preemptors' (Kueue's inadmissible list; without it two queues
        # can trade the same GPUs back and forth at one instant).
        parked: set[tuple] = set()
        # Preempted at this instant: back in their queue only once the instant settles, as a
        # Kueue workload is requeued after its eviction completes. Requeued at once, a victim
        # could take the room its preemptor freed (it sorts first when it needs no borrowing)
        # and the two would trade the same GPUs at one instant without end.
        requeue: list[JobRun] = []
        for _ in range(10_000):
            self._refresh_checkpoints(now)
            pending: list[Workload] = []
            idx: dict[str, tuple[JobRun, tuple, bool]] = {}
            held: dict[str, bool] = {}
            asked: list[str] = []
            for cq in self.shapes:
                if not self.size[cq] or (not full and not self.fresh[cq]):
                    continue
                reps, more = self._shown(cq, full, limits[cq], expand, parked)
                held[cq] = more
                asked.append(cq)
                for _key, r, sh, followers in reps:
                    pending.append(r.wl)  # type: ignore[arg-type]
                    idx[r.job.job_id] = (r, sh, followers)
            if not pending:
                break
            state = self._state(self._admitted(pending, now), tuple(pending), now)
            if self.reserve_cqs:
                _CS_RESERVATIONS(state, self._reservations(now))
            res = admit_until_stable(state, estimates=False)  # it reads no estimated start
            self.calls += 1
            self.cycles += res.cycles
            # A shown workload with identical ones held back behind it moved: ask again showing more.
            moved = [a.name for a in res.admitted] + [p.preemptor for p in res.preempted]
            redo = False
            for name in moved:
                r, sh, followers = idx[name]
                if followers:
                    key = (r.wl.cq, sh)  # type: ignore[union-attr]
                    expand[key] = expand.get(key, self.shown_per_shape) * 2
                    redo = True
            if redo:
                continue
            for a in res.admitted:
                self._start(idx[a.name][0], a.flavor, now, a.placement)
            for rej in res.rejected:
                r = idx[rej.name][0]
                self._dequeue(r)
                r.state, r.reason = "rejected", rej.message
                self.finish(r)
            evicted = False
            for p in res.preempted:
                victim = self.run_of.get(p.victim)
                if victim is not None:
                    if self._evict(victim, now):
                        requeue.append(victim)
                    evicted = True
            # Per queue: the first pending workload that holds the queue (it waits, or it is an
            # inadmissible StrictFIFO head); nothing behind it can move until something changes.
            grow = False
            best: dict[str, int] = {}
            arrivals = {cq: self.fresh[cq] for cq in asked}
            for cq in asked:
                self.block[cq] = None
                self.fresh[cq] = []
            for info in res.pending:
                code = info.reason_code
                if info.name in idx:
                    idx[info.name][0].wait_reason = info.message
                if code == BUDGET_EXHAUSTED or (code == INADMISSIBLE and info.cq not in self.strict):
                    if info.name in idx:
                        parked.add((info.cq, idx[info.name][1]))
                    continue
                if info.position < best.get(info.cq, 1 << 62):
                    best[info.cq] = info.position
                    self.block[info.cq] = idx[info.name][0].key
            for cq in asked:
                if self.block[cq] is None and held[cq]:
                    limits[cq] *= 2
                    grow = True
                    if not full:  # an arrivals-only call: show the rest of this instant's arrivals
                        self.fresh[cq] = [r for r in arrivals[cq] if r.state == "pending"]
            if evicted:
                full = True
                expand.clear()
            elif not grow:
                break
        else:
            raise RuntimeError("admission did not settle after 10,000 engine calls at one instant")
        for cq in self.shapes:
            self.fresh[cq] = []
            if not self.size[cq]:
                self.block[cq] = None
        for r in requeue:
            if r.wl is not None and r.wl.cq in self.boosts:
                step = self.boosts[r.wl.cq][0]
                level = int((now - r.job.submit_ts) // step) if step > 0 else 0
                self._raise(r, level)
                self._age_next(r, max(level, self.level.get(r.job.job_id, 0)) + 1)
            self._enqueue(r, now)
        if requeue and settle:
            # Their preemptors are admitted: the victims may take what is still free at once
            # (once; victims of that pass wait for the next event).
            self.schedule(now, full=True, settle=False)

    # -- head reservations -------------------------------------------------------------------
    def _reservations(self, now: float) -> tuple[Reservation, ...]:
        """The head reservations at `now` (`admission/reservation.py`): the first waiting job in
        queue order of each queue with `reserve_head` (none its own quota ceiling holds), against
        the running jobs' ends (start + what is left of their duration) on each flavor."""
        heads = []
        for cq in self.reserve_cqs:
            groups = self.shapes.get(cq)
            if not groups:
                continue
            r = min(groups.values(), key=lambda g: g[0][0])[0][1]
            if r.wl is not None and not self._bound(r.wl):
                heads.append(r.wl)
        if not heads:
            return ()
        running = [
            Running(r.flavor, r.job.gpus, r.start + r.job.duration_s - r.saved_s)
            for r in self.run_of.values()
            if r.flavor is not None
        ]
        specs = self.specs
        flavors_of = self._flavors_of
        withheld = None
        if self.serving_cqs:
            usage = {(cq, f): v for (cq, f, res), v in self.cq_usage.items() if res == GPU}

            def withheld(wl: Workload, flavor: str) -> float:
                return withheld_gpus(wl, flavor, specs, usage, self.cohort_root, GPU)

        book = self.book
        if book is None:
            return plan_reservations(now, heads, running, self.flavor_gpus, flavors_of, withheld=withheld)
        ends = sorted(
            ((r.start + r.job.duration_s - r.saved_s, r.job.job_id) for r in self.run_of.values()), key=lambda e: e[0]
        )

        def on_nodes(wl: Workload, flavor: str) -> tuple[bool, tuple[float, float] | None] | None:
            """(fits now, shadow) on `flavor`'s nodes: release running jobs' nodes in end order on
            a copy of the free GPUs until the nodes hold the head's pods (a node as many as its
            free GPUs hold, as `NodeBook.find`)."""
            nodes = book.by_flavor.get(flavor)
            if not nodes:
                return None
            pods = max(1, wl.pods)
            per = wl.requests.get(GPU, 0.0) / pods
            if per <= 1e-9:
                return True, None

            def held(gpus: float) -> int:
                return int((max(0.0, gpus) + 1e-9) // per)

            count = sum(held(book.free[n]) for n in nodes)
            if count >= pods:
                return True, None
            free: dict[str, float] = {}
            for end, name in ends:
                for n, v in book.placed.get(name, ()):
                    if book.flavor_of.get(n) != flavor:
                        continue
                    old = free.get(n, book.free[n])
                    free[n] = old + v
                    count += held(old + v) - held(old)
                if count >= pods:
                    return False, (max(now, end), 0.0)
            return False, None

        return plan_reservations(now, heads, running, self.flavor_gpus, flavors_of, on_nodes, withheld)

    # -- fragmentation -----------------------------------------------------------------------
    def _usable(self, wl: Workload) -> tuple[str, ...]:
        """The node-modelled flavors a pending workload may be admitted on (its queue has quota
        rows for them and the workload allows them)."""
        key = (wl.cq, wl.flavor, wl.allowed_flavors)
        out = self.usable.get(key)
        if out is None:
            spec = self.specs[wl.cq].flavors
            out = self.usable[key] = tuple(
                f
                for f in self.node_flavors
                if f in spec
                and (wl.flavor is None or f == wl.flavor)
                and (wl.allowed_flavors is None or f in wl.allowed_flavors)
            )
        return out

    def _flavors_of(self, wl: Workload) -> tuple[str, ...]:
        """The flavors a workload may be admitted on: its pinned flavor, else its queue's that it
        allows."""
        if wl.flavor is not None:
            return (wl.flavor,)
        own = self.specs[wl.cq].flavors
        return own if wl.allowed_flavors is None else tuple(f for f in own if f in wl.allowed_flavors)

    def _heads(self) -> list[Workload]:
        """Each queue's waiting head: its first pending workload in queue order."""
        return [min(groups.values(), key=lambda g: g[0][0])[0][1].wl for groups in self.shapes.values() if groups]

    def _withheld_idle(self) -> float:
        """GPUs a serving lane's lending rule keeps idle now (after this instant's admissions):
        summed over the flavors serving lanes hold quota on, the GPUs of a flavor that are free
        and withheld (`serving_lending.withheld_gpus`: a serving lane's idle quota that a waiting
        head could not give back, an uncheckpointed evidence run or a protected one) when the waiting
        head of some queue may use the flavor, asks for no more GPUs than are free there, and more
        than are free less those withheld: the rule, not the pool, keeps it off. Quota ceilings
        are not checked, as for stranded GPUs."""
        if not self.pending:
            return 0.0
        heads = self._heads()
        specs = self.specs
        usage: dict[tuple[str, str], float] = {}
        held: dict[str, float] = {}
        for (cq, f, res), v in self.cq_usage.items():
            if res == GPU:
                usage[(cq, f)] = v
                held[f] = held.get(f, 0.0) + v
        total = 0.0
        for f in self.serving_flavors:
            free = self.flavor_gpus.get(f, 0.0) - held.get(f, 0.0)
            if free <= 1e-9:
                continue
            for wl in heads:
                need = wl.requests.get(GPU, 0.0)
                if need > free + 1e-9 or f not in self._flavors_of(wl):
                    continue
                w = min(free, withheld_gpus(wl, f, specs, usage, self.cohort_root, GPU))
                if w > 1e-9 and need > free - w + 1e-9:
                    total += w
                    break
        return total

    def _stranded(self) -> float:
        """GPUs stranded by fragmentation now (after this instant's admissions): summed over the
        node-modelled flavors, all of a flavor's free GPUs when the waiting head of some queue
        (its first pending workload in queue order) may use the flavor, asks for no more GPUs
        than the flavor has free in total, and yet finds no nodes there for its pods."""
        book = self.book
        if book is None or not self.pending:
            return 0.0
        heads = self._heads()
        total = 0.0
        for f in self.node_flavors:
            free = book.free_total(f)
            if free <= 1e-9:
                continue
            for wl in heads:
                if f in self._usable(wl) and wl.requests.get(GPU, 0.0) <= free + 1e-9 and not book.fits(wl, f):  # type: ignore[union-attr]
                    total += free
                    break
        return total
