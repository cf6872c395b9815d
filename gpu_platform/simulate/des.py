"""The discrete-event loop: arrivals and completions drive admission cycles of the real engine.

Events are job arrivals (at `submit_ts`) and completions. Admission runs as the gate does:
`admit_until_stable` over the running and pending workloads; its preemption victims are evicted
at once (losing the work since their last checkpoint) and requeued at their original
submission time, and the engine runs again so the preemptor starts. Time never passes inside
a cycle.

The engine is only asked when its answer can change, and only about what can change:
- a completion or eviction while work is pending frees capacity: every queue is shown;
- an arrival (no capacity freed) is shown with the queues it joined, when it sorts ahead of its
  queue's blocked head; the workloads the engine last found inadmissible stay parked, since
  admissions only shrink free capacity (Kueue also retries inadmissible workloads only when
  capacity is freed). Queues with no arrival are left out of that call;
- all events at one instant are applied before the engine runs (with `tick`, all events up to
  the next tick boundary, as a gate that runs every `tick` seconds).
A waiting workload of a BestEffortFIFO queue that would take its own queue over nominal quota
plus borrowing limit on every flavor it may use, with nothing in its own queue it may preempt,
is not shown: Kueue's borrowing limit is a hard ceiling that no preemption elsewhere lifts, so
the engine would find it inadmissible; it is shown again once its own queue's usage drops.
(Like Kueue's inadmissible list, this lets the next workload of that queue be looked at in the
first cycle rather than the second; at one instant, that can change which of two queues gets
freed GPUs first. `skip_bound=False` shows them.)
Running workloads that no shown workload may preempt (by its queue's within-queue, reclaim
and borrow-within-cohort policies and priorities) are passed folded into one workload per
(queue, flavor, priority), marked never-a-victim: the quota the engine sees is the same, and
its per-call cost grows with what may actually be preempted rather than with all that runs.
Identical waiting workloads (same queue, requests, flavors, priority) are shown one at a time:
the engine finds the one behind inadmissible whenever the one ahead is (its own dominance
rule). When a shown workload with identical ones behind it is admitted or preempts, that answer
is discarded and the engine is asked again, unchanged state, with more of them shown, so the
outcome is the one a full queue gives. Each queue shows at most `window` distinct workloads,
doubled while the engine gets past all of them.

A job that cannot be admitted even into an empty pool (more GPUs than its queue can ever hold)
is rejected at submission, as request validation rejects it on the platform, and is reported
as never admitted.

With a node model (the scenario's `base.nodes`, `scenarios.with_nodes`) the engine also places
pods on nodes; the placement it returns (`Admission.placement`) is kept on the running workload
until the run ends, so later calls see those nodes held, and a folded group holds the sum of its
members' placements. After each instant's admissions the loop adds up the GPUs stranded by
fragmentation (`_Sim._stranded`) and integrates them until the next instant (`stranded_gpu_s`).
"""

from __future__ import annotations

import bisect
import gc
import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace

from gpu_platform.admission import ClusterState, Workload, admit_until_stable
from gpu_platform.admission.model import (
    ANY,
    BUDGET_EXHAUSTED,
    INADMISSIBLE,
    LOWER_OR_NEWER_EQUAL,
    LOWER_PRIORITY,
    NEVER,
    STRICT_FIFO,
    evolve,
)
from gpu_platform.admission.nodes import NodeBook
from gpu_platform.policy import GPU
from gpu_platform.simulate.scenario import Scenario
from gpu_platform.simulate.trace import TraceJob

_INF = math.inf
PROGRESS_JOBS = 100_000
"""Arrivals between two calls of `simulate`'s `progress`."""
# ClusterState's slot setters of the fields each engine call sets (see `_Sim._state`)
_CS_ADMITTED = ClusterState.__dict__["admitted"].__set__
_CS_PENDING = ClusterState.__dict__["pending"].__set__
_CS_NOW = ClusterState.__dict__["now"].__set__


@dataclass(slots=True)
class JobRun:
    """What happened to one job. first_admit/last_admit/end=None: never."""

    job: TraceJob
    wl: Workload | None
    key: tuple = ()
    shape: tuple = ()
    state: str = "future"  # future | pending | running | done | failed | rejected
    reason: str = ""
    saved_s: float = 0.0  # work saved by checkpoints (resumed from)
    start: float = 0.0  # start of the current run
    flavor: str | None = None
    first_admit: float | None = None
    last_admit: float | None = None
    end: float | None = None
    queued_since: float = 0.0
    queued_s: float = 0.0
    preemptions: int = 0
    lost_gpu_s: float = 0.0
    used_gpu_s: float = 0.0
    seq: int = 0
    wait_reason: str = ""  # the engine's message the last time it was shown and still waited
    placement: dict | None = None  # the nodes of its current (or last) run ({node: GPUs})


@dataclass(slots=True)
class SimResult:
    scenario: Scenario
    runs: list[JobRun]
    start: float
    end: float
    engine_calls: int = 0
    cycles: int = 0
    # (time, lane, change in GPUs held) for plots
    usage_events: list[tuple[float, str, float]] = field(default_factory=list)
    checkpoint_interval_s: float = 0.0
    tick_s: float = 0.0
    # GPU-seconds stranded by fragmentation (see `_Sim._stranded`); None: no node model
    stranded_gpu_s: float | None = None


def _queue_key(w: Workload) -> tuple:
    return (-w.priority, w.created_at, w.name)


class _Sim:
    def __init__(
        self,
        scenario: Scenario,
        jobs: list[TraceJob],
        tick: float,
        checkpoint_s: float,
        window: int,
        per_shape: int,
        skip_bound: bool,
        merge_held: bool,
    ):
        self.scn = scenario
        self.shown_per_shape = per_shape
        self.tick = tick
        self.ckpt = checkpoint_s
        self.window = window
        self.runs = [JobRun(j, scenario.workload(j)) for j in sorted(jobs, key=lambda j: j.submit_ts)]
        names = [c.name for c in scenario.base.cluster_queues]
        # per queue: shape -> pending JobRuns of that shape, in queue order
        self.shapes: dict[str, dict[tuple, list[tuple[tuple, JobRun]]]] = {n: {} for n in names}
        self.size: dict[str, int] = dict.fromkeys(names, 0)
        self.strict = {c.name for c in scenario.base.cluster_queues if c.queueing_strategy == STRICT_FIFO}
        self.block: dict[str, tuple | None] = dict.fromkeys(names)
        self.fresh: dict[str, list[JobRun]] = {n: [] for n in names}  # arrivals since the last call
        self.running: dict[str, Workload] = {}
        self.running_wl: dict[str, Workload] = {}  # as admitted (flavor, priority) for accounting
        # running workloads by (cq, flavor, priority): names, and summed requests
        self.groups: dict[tuple[str, str, int], set[str]] = {}
        self.group_sum: dict[tuple[str, str, int], dict[str, float]] = {}
        self.merge_held = merge_held and not scenario.base.fair_sharing
        self.run_of: dict[str, JobRun] = {}
        self.uncheckpointed: set[str] = set()  # running evidence workloads not yet checkpointed
        self.heap: list[tuple[float, int, int, JobRun]] = []
        self.counter = 0
        self.pending = 0
        self.calls = 0
        self.cycles = 0
        self.usage: list[tuple[float, str, float]] = []
        self.skip_bound = skip_bound
        self.specs = {c.name: c for c in scenario.base.cluster_queues}
        parent: dict[str, str | None] = {}
        for co in scenario.base.cohorts:
            if isinstance(co, str):
                parent.setdefault(co, None)
            else:
                parent[co.name] = co.parent
        self.root: dict[str, str] = {}
        for name in parent:
            seen, at = set(), name
            while parent.get(at) is not None and at not in seen:
                seen.add(at)
                at = parent[at]  # type: ignore[assignment]
            self.root[name] = at
        # per queue: the root of its cohort tree (its cohort's name where not in a tree)
        self.cohort_root: dict[str, str | None] = {
            c.name: self.root.get(c.cohort, c.cohort) for c in scenario.base.cluster_queues  # type: ignore[arg-type]
        }
        # own-queue ceiling per (cq, flavor, resource): nominal + borrowing limit (nominal alone
        # without a cohort); absent: no ceiling of its own
        self.ceiling: dict[tuple[str, str, str], float] = {}
        for c in scenario.base.cluster_queues:
            for q in c.quotas:
                if c.cohort is None:
                    self.ceiling[(c.name, q.flavor, q.resource)] = q.nominal
                elif q.borrowing_limit is not None:
                    self.ceiling[(c.name, q.flavor, q.resource)] = q.nominal + q.borrowing_limit
        self.cq_usage: dict[tuple[str, str, str], float] = {}
        self.nominal: dict[tuple[str, str], float] = {
            (c.name, q.flavor): q.nominal for c in scenario.base.cluster_queues for q in c.quotas if q.resource == GPU
        }
        self.cq_prios: dict[str, dict[int, int]] = {}
        self.fits_cache: dict[tuple, str | None] = {}
        # the scenario's state as constructor arguments (dataclasses.replace costs twice as much)
        self.base_kw = {f.name: getattr(scenario.base, f.name) for f in fields(scenario.base)}
        self.base_fields = tuple(
            (ClusterState.__dict__[name].__set__, v) for name, v in self.base_kw.items() if name not in ("admitted", "pending", "now")
        )
        # folded running workloads per (queue, flavor, priority), reused while the group is unchanged
        self.group_ver: dict[tuple[str, str, int], int] = {}
        self.folded: dict[tuple[str, str, int], tuple[int, Workload]] = {}
        # the node model: where running work sits, and the folded groups' summed placements
        self.book: NodeBook | None = NodeBook(scenario.base.nodes) if scenario.base.nodes else None
        self.group_place: dict[tuple[str, str, int], dict[str, float]] = {}
        self.node_flavors = tuple(self.book.by_flavor) if self.book is not None else ()
        self.usable: dict[tuple, tuple[str, ...]] = {}
        self.stranded_gpu_s = 0.0
        # aging (`Scenario.boosts`): (due, seq, run) of waiting work whose priority boost is due
        self.boosts = dict(scenario.boosts or {})
        self.aging: list[tuple[float, int, JobRun, int]] = []
        self.level: dict[str, int] = {}  # aging level a job's workload carries
        self.base_prio: dict[str, int] = {}
        self.seq_age = 0
        # more events beside the trace (`simulate(events=...)`: a service's autoscaler)
        self.events = None
        # `simulate(progress=...)`: called with (jobs arrived, jobs) every `progress_every` arrivals
        self.progress: Callable[[int, int], None] | None = None
        self.progress_every = PROGRESS_JOBS

    @staticmethod
    def _shape(wl: Workload) -> tuple:
        return (tuple(sorted(wl.requests.items())), wl.allowed_flavors, wl.flavor, wl.priority, wl.evidence, wl.safety_approval)

    # -- admissibility in an empty pool ---------------------------------------------------
    def _never_fits(self, wl: Workload) -> str | None:
        key = (wl.cq, self._shape(wl))
        if key not in self.fits_cache:
            res = admit_until_stable(replace(self.scn.base, admitted=(), pending=(wl,), now=0.0))
            if res.admitted:
                self.fits_cache[key] = None
            elif res.rejected:
                self.fits_cache[key] = res.rejected[0].message
            else:
                self.fits_cache[key] = res.pending[0].message if res.pending else "not admissible"
        return self.fits_cache[key]

    # -- queue handling --------------------------------------------------------------------
    def _enqueue(self, r: JobRun, now: float) -> bool:
        """Put a job in its queue; True when the engine must look again."""
        wl = r.wl
        assert wl is not None
        r.state = "pending"
        r.queued_since = now
        r.key = _queue_key(wl)
        if not r.shape:
            r.shape = self._shape(wl)
        group = self.shapes[wl.cq].setdefault(r.shape, [])
        if not group or group[-1][0] < r.key:
            group.append((r.key, r))
        else:
            bisect.insort(group, (r.key, r), key=lambda e: e[0])
        self.size[wl.cq] += 1
        self.pending += 1
        b = self.block.get(wl.cq)
        if b is None or r.key < b:
            self.fresh[wl.cq].append(r)
            return True
        return False

    def _dequeue(self, r: JobRun) -> None:
        wl = r.wl
        assert wl is not None
        groups = self.shapes[wl.cq]
        sh = r.shape
        group = groups[sh]
        i = bisect.bisect_left(group, r.key, key=lambda e: e[0])
        assert group[i][1] is r
        del group[i]
        if not group:
            del groups[sh]
        self.size[wl.cq] -= 1
        self.pending -= 1

    def arrive(self, r: JobRun, now: float) -> bool:
        if r.wl is None:
            r.state, r.reason = "rejected", f"lane {r.job.lane!r} has no queue in this scenario"
            return False
        if r.wl.cq not in self.shapes:
            r.state, r.reason = "rejected", f"unknown cluster queue {r.wl.cq!r}"
            return False
        why = self._never_fits(r.wl)
        if why is not None:
            r.state, r.reason = "rejected", why
            return False
        if r.wl.cq in self.boosts:
            self.base_prio[r.job.job_id] = r.wl.priority
            self._age_next(r, 1)
        return self._enqueue(r, now)

    def _age_next(self, r: JobRun, level: int) -> None:
        """Schedule the job's next aging step (level `level`) unless its boost is at its cap."""
        assert r.wl is not None
        step, per, cap = self.boosts[r.wl.cq]
        if step > 0 and (level - 1) * per < cap:
            self.seq_age += 1
            heapq.heappush(self.aging, (r.job.submit_ts + level * step, self.seq_age, r, level))

    def _raise(self, r: JobRun, level: int) -> bool:
        """Give a job the priority of aging level `level` (base + min(level x boost, cap): Kueue's
        `kueue.x-k8s.io/priority-boost`, KEP-7990); True if it changed."""
        assert r.wl is not None
        name = r.job.job_id
        if level <= self.level.get(name, 0):
            return False
        _step, per, cap = self.boosts[r.wl.cq]
        self.level[name] = level
        prio = self.base_prio[name] + min(level * per, cap)
        if prio == r.wl.priority:
            return False
        r.wl = replace(r.wl, priority=prio)
        r.shape = self._shape(r.wl)
        return True

    def _age(self, r: JobRun, level: int) -> bool:
        """An aging step of a waiting job: it sorts ahead in its queue and may preempt what its
        queue's rules let a higher priority preempt. True when the engine must look again."""
        since = r.queued_since
        self._dequeue(r)
        self._raise(r, level)
        self._age_next(r, level + 1)
        return self._enqueue(r, since)

    def _stop(self, r: JobRun, now: float) -> float:
        """End the current run of r at now; returns its run time."""
        name = r.job.job_id
        del self.running[name]
        del self.run_of[name]
        self.uncheckpointed.discard(name)
        held = self.running_wl.pop(name)
        self._account(held, -1)
        if self.book is not None:
            self.book.release(held, remember=False)
        ran = now - r.start
        r.used_gpu_s += r.job.gpus * ran
        self.usage.append((now, r.job.lane, -r.job.gpus))
        return ran

    def complete(self, r: JobRun, now: float) -> None:
        self._stop(r, now)
        r.state, r.end = "done", now

    def _start(self, r: JobRun, flavor: str, now: float, placement=None) -> None:
        self._dequeue(r)
        r.state, r.flavor, r.start = "running", flavor, now
        r.queued_s += now - r.queued_since
        if r.first_admit is None:
            r.first_admit = now
        r.last_admit = now
        wl = r.wl
        assert wl is not None
        # Resuming from a checkpoint counts as checkpointed (the lane rule for evidence jobs).
        # The nodes the engine chose stay the run's: later calls see them held.
        held = evolve(wl, flavor=flavor, admitted_at=now, checkpointed=r.saved_s > 0, placement=placement)
        r.placement = placement  # type: ignore[assignment]
        self.running[r.job.job_id] = held
        self.running_wl[r.job.job_id] = held
        self._account(held, 1)
        if self.book is not None and placement:
            self.book.place(held)
        self.run_of[r.job.job_id] = r
        if wl.evidence and r.saved_s <= 0:
            self.uncheckpointed.add(r.job.job_id)
        r.seq += 1
        self.counter += 1
        heapq.heappush(self.heap, (now + r.job.duration_s - r.saved_s, self.counter, r.seq, r))
        self.usage.append((now, r.job.lane, r.job.gpus))

    def _evict(self, r: JobRun, now: float) -> bool:
        """Stop a preempted run and account its lost work; True when it goes back to its queue
        (the caller requeues it: `schedule` does so after the instant settles)."""
        ran = self._stop(r, now)
        r.seq += 1  # invalidates its completion event
        r.preemptions += 1
        policy = r.job.preemption_policy
        if policy == "checkpoint_requeue" and self.ckpt > 0:
            kept = math.floor(ran / self.ckpt + 1e-9) * self.ckpt
        else:
            kept = 0.0
        if policy == "requeue":
            lost = ran + r.saved_s
            r.saved_s = 0.0
        else:
            lost = ran - kept
            r.saved_s += kept
        r.lost_gpu_s += r.job.gpus * lost
        if policy == "fail":
            r.state, r.end, r.reason = "failed", now, "preempted with preemption_policy fail"
            return False
        r.state = "evicted"
        return True

    def _account(self, w: Workload, sign: int) -> None:
        g = (w.cq, w.flavor or "", w.priority)
        self.group_ver[g] = self.group_ver.get(g, 0) + 1
        names = self.groups.setdefault(g, set())
        sums = self.group_sum.setdefault(g, {})
        if sign > 0:
            names.add(w.name)
        else:
            names.discard(w.name)
        for r, v in w.requests.items():
            k = (w.cq, w.flavor or "", r)
            self.cq_usage[k] = self.cq_usage.get(k, 0.0) + sign * v
            sums[r] = sums.get(r, 0.0) + sign * v
        if w.placement:
            spots = self.group_place.setdefault(g, {})
            for n, v in w.placement.items():
                left = round(spots.get(n, 0.0) + sign * v, 9)
                if abs(left) > 1e-9:
                    spots[n] = left
                else:
                    spots.pop(n, None)
        if not names:
            del self.groups[g], self.group_sum[g]
            self.group_place.pop(g, None)
        prios = self.cq_prios.setdefault(w.cq, {})
        prios[w.priority] = prios.get(w.priority, 0) + sign
        if not prios[w.priority]:
            del prios[w.priority]

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

    def _stranded(self) -> float:
        """GPUs stranded by fragmentation now (after this instant's admissions): summed over the
        node-modelled flavors, all of a flavor's free GPUs when the waiting head of some queue
        (its first pending workload in queue order) may use the flavor, asks for no more GPUs
        than the flavor has free in total, and yet finds no nodes there for its pods."""
        book = self.book
        if book is None or not self.pending:
            return 0.0
        heads = [
            min(groups.values(), key=lambda g: g[0][0])[0][1].wl for groups in self.shapes.values() if groups
        ]
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

    # -- the loop ----------------------------------------------------------------------------
    def run(self) -> tuple[float, float]:
        runs = self.runs
        n = len(runs)
        ai = 0
        heap = self.heap
        start = runs[0].job.submit_ts if runs else 0.0
        last = start
        nodes = self.book is not None
        stranded, since = 0.0, start
        while True:
            while heap and heap[0][3].seq != heap[0][2]:
                heapq.heappop(heap)
            t_arr = runs[ai].job.submit_ts if ai < n else _INF
            t_end = heap[0][0] if heap else _INF
            aging = self.aging
            while aging and aging[0][2].state != "pending":
                heapq.heappop(aging)  # a job that runs again is put back by its requeue
            events = self.events
            t = min(t_arr, t_end, aging[0][0] if aging else _INF, events.next_time() if events is not None else _INF)
            if t == _INF:
                break
            t_run = t if self.tick <= 0 else math.ceil(t / self.tick - 1e-12) * self.tick
            if nodes:
                self.stranded_gpu_s += stranded * (t_run - since)
            freed = False
            arrived = False
            while True:
                while heap and heap[0][3].seq != heap[0][2]:
                    heapq.heappop(heap)
                if not heap or heap[0][0] > t_run:
                    break
                end, _c, _s, r = heapq.heappop(heap)
                self.complete(r, end)
                last = max(last, end)
                freed = True
            while ai < n and runs[ai].job.submit_ts <= t_run:
                arrived |= self.arrive(runs[ai], runs[ai].job.submit_ts)
                ai += 1
                if ai % self.progress_every == 0 and self.progress is not None:
                    self.progress(ai, n)
            while aging and aging[0][0] <= t_run:
                _due, _i, r, level = heapq.heappop(aging)
                if r.state == "pending" and level > self.level.get(r.job.job_id, 0):
                    self._age(r, level)
                    # a raised priority changes what the queue may preempt: look at every queue
                    # again, as after a completion (what the engine answers must not depend on
                    # the shortcuts: tests/simulate/test_cli_and_scale.py)
                    freed = True
            if events is not None:
                freed |= events.fire(self, t_run)
            if self.pending and (freed or arrived):
                self.schedule(t_run, full=freed)
            if events is not None:
                events.observe(self, t_run)
            if nodes:
                stranded, since = self._stranded(), t_run
        return start, last


def simulate(
    scenario: Scenario,
    jobs: list[TraceJob],
    *,
    tick: float = 0.0,
    checkpoint_interval_s: float = 1800.0,
    window: int = 16,
    per_shape: int = 1,
    skip_bound: bool = True,
    merge_held: bool = True,
    events=None,
    progress: Callable[[int, int], None] | None = None,
) -> SimResult:
    """Replay `jobs` under `scenario`. tick=0: the engine runs at every instant something
    changes; tick>0: at multiples of `tick` seconds (a gate on a sensor interval).
    checkpoint_interval_s: how often a `checkpoint_requeue` job saves its work (0: never).
    window / per_shape / skip_bound / merge_held: distinct / identical pending workloads shown
    per queue at first, whether workloads over their own queue's ceiling are held back, whether
    running workloads nobody shown may preempt are folded per (queue, flavor, priority) (the
    outcome does not depend on them, only the time it takes; see the module doc).
    events: more events beside the trace, asked at each instant (`simulate/serving.py`: a service's
    autoscaler): `next_time()`, `fire(sim, now)` before the engine runs (True: look at every
    queue), `observe(sim, now)` after it; None: the trace only.
    progress: called with (jobs arrived so far, jobs) every `PROGRESS_JOBS` arrivals, so a long run
    can say how far it is (the engine's baselines with their own loop do not call it)."""
    if scenario.fast is not None:  # a baseline with its own event loop (no engine)
        return scenario.fast(scenario, jobs, tick)
    sim = _Sim(scenario, jobs, tick, checkpoint_interval_s, window, per_shape, skip_bound, merge_held)
    sim.events = events
    sim.progress = progress
    # The trace's jobs and workloads live for the whole run: frozen out of the cyclic GC, the
    # collections the engine's allocations trigger do not walk them again and again (that grew
    # with the trace's length). The engine frees its snapshots by reference counting (it breaks
    # their cycles), so young collections can be rare too.
    thresholds = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 50, 1_000)
    try:
        start, end = sim.run()
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()
    for r in sim.runs:
        if r.state == "pending":
            r.reason = r.reason or "still pending when the trace ended"
    return SimResult(
        scenario,
        sim.runs,
        start,
        end,
        sim.calls,
        sim.cycles,
        sim.usage,
        checkpoint_interval_s,
        tick,
        sim.stranded_gpu_s if sim.book is not None else None,
    )


def gpus_of(w: Workload) -> float:
    return w.requests.get(GPU, 0.0)
