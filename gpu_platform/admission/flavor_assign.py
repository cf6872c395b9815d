"""Flavor assignment after Kueue's FlavorAssigner (pkg/scheduler/flavorassigner/flavorassigner.go).

Per resource group, flavors in order (one that Kueue's Topology Aware Scheduling check refuses for
the workload's topology request is skipped; the rule is in `admission/tas.py`), each resource's
mode (fit, preempt, reclaim, no candidates, no fit) and borrowing height; fungibility decides
when to stop and which flavor is preferred; a preemption oracle checks, per resource, whether
preemption could make room (`admission/preemption.py`). The platform's flavor rules (requested
flavor or GPU type, spot only where the lane has spot quota) stand where Kueue checks node
affinity and taints. `FlavorAssigner` is a mixin of the cycle engine (`admission/cycle.py`): it
reads the engine's `state`, `snap`, `last_tried`, `done` and records `node_blocked` and
`reserved_out` (workloads a head reservation refused some flavor).

May import `admission/model.py`, `quota.py`, `preemption.py`, `tas.py`, `serving_lending.py`, `reservation.py`, `workload_keys.py`, `devices/`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpu_platform.admission.model import NEVER, TAS_FOLLOWS_FLAVOR, ClusterState, FlavorFungibility, Workload
from gpu_platform.admission.preemption import TargetSearch, get_targets
from gpu_platform.admission.quota import FR, CohortNode, CQNode, Snapshot
from gpu_platform.admission.reservation import GPU as GPU_RESOURCE
from gpu_platform.admission.reservation import reservation_refusal
from gpu_platform.admission.serving_lending import lent_refusal
from gpu_platform.admission.tas import is_tas_only, topology_refusal
from gpu_platform.admission.workload_keys import EPS, qty

# Kueue's preemptionMode (flavorassigner.go), lowest to highest preference.
NOFIT, NOCAND, PREEMPT, RECLAIM, FIT = range(5)
# FlavorAssignmentMode of a whole assignment.
M_NOFIT, M_PREEMPT, M_FIT = 0, 1, 2
_MODE_OF = {NOFIT: M_NOFIT, NOCAND: M_PREEMPT, PREEMPT: M_PREEMPT, RECLAIM: M_PREEMPT, FIT: M_FIT}
_BIG = 1 << 30


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
class Assignment:
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


class FlavorAssigner:
    """Kueue's flavor assignment for one workload in one cluster queue, on the engine's snapshot."""

    state: ClusterState
    snap: Snapshot
    last_tried: dict[str, dict[str, int]]
    done: set[str]
    node_blocked: set[str]
    reserved_out: set[str]

    def fungibility(self, cq: CQNode) -> FlavorFungibility:
        return cq.spec.flavor_fungibility or self.state.flavor_fungibility

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
        if v > pot + EPS:
            return NOFIT, 0, f"{cq.name} needs {qty(v)} {r} on {f}, more than it can ever hold ({qty(pot)})"
        lent = lent_refusal(snap, wl, cq, fr, v)  # a serving lane's idle GPUs it could not take back
        if lent is not None:
            return NOFIT, 0, lent
        if self.state.reservations and fr[1] == GPU_RESOURCE:
            held = reservation_refusal(self.state, wl, fr[0], v)  # a waiting head's reserved GPUs
            if held is not None:
                self.reserved_out.add(wl.name)
                return NOFIT, 0, held
        borrow, may_reclaim = find_height(cq, fr, v)
        if v <= avail + EPS:
            nodes = snap.node_refusal(wl, {fr: v}) if snap.nodes is not None else None
            if nodes is None:
                return FIT, borrow, None
            return self._fits_nodes(wl, cq, fr, v, borrow, may_reclaim, nodes)
        q = cq.quota(fr)
        used = cq.usage.get(fr, 0.0)
        lim = f"/{qty(q.nominal)}" + (
            f" (+{qty(q.borrowing_limit)} borrowable)" if cq.parent is not None and q.borrowing_limit else ""
        )
        where = (
            f"cohort {cq.parent.name} has {qty(max(0.0, snap.cohort_free(cq, fr)))} free"
            if cq.parent is not None
            else f"{qty(avail)} free"
        )
        note = f"{cq.name} needs {qty(v)} {r} on {f}; lane uses {qty(used)}{lim}, {where}"
        if q.nominal >= v - EPS or may_reclaim or self._can_preempt_while_borrowing(cq):
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
        shape = f"{pods} x {qty(v / pods)} {r}" if pods > 1 else f"{qty(v)} {r}"
        note = f"{cq.name} needs {shape} on {f}: {why}"
        q = cq.quota(fr)
        if q.nominal >= v - EPS or may_reclaim or self._can_preempt_while_borrowing(cq):
            search = get_targets(snap, wl, cq, {fr: v}, {fr}, self.state.fair_sharing, self.done)
            if search.targets:
                victims = [w for w, _ in search.targets]
                mode = PREEMPT if any(w.cq == cq.name for w in victims) else RECLAIM
                return mode, borrow, note
            return NOFIT, borrow, note + " and " + self._nothing_to_preempt(cq, search)
        return NOFIT, borrow, note

    def _assign(self, wl: Workload, cq: CQNode, pin: Mapping[str, str] | None = None) -> Assignment:
        """Kueue's FlavorAssigner.Assign. pin: the flavors of the first nomination, kept when the
        assignment is recomputed within the cycle (NominationMapping)."""
        a = Assignment()
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
