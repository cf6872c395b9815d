"""The queue's numbers straight from the ledger in a few aggregate queries (no request parsing).

This is what `/metrics` and `autoscale plan` read on every scrape or call, so it must stay cheap
at 100,000 pending requests: it groups the ledger's state table (`gp_request_state`, one row per
request) by lane, GPU type and state in SQL, and reads admitted requests one row each for their
expected end (admission time + `expected_duration`, a column of the table). Counts of
preemptions and rejections are the requests' own counts of those append-only events, so they
only ever grow (Prometheus counters). `DemandCache` keeps the figures and each request's part
of them, and brings them up to date from the events written since it last looked (only the
requests those touched are read again).
"""

from __future__ import annotations

import heapq
import threading
import time
from bisect import bisect_left, bisect_right
from collections import defaultdict
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import sqlalchemy as sa

from gpu_platform.policy import Policy
from gpu_platform.requests.ledger import ACTIVE_STATES, PENDING_STATES, Ledger, events_table, state_table
from gpu_platform.requests.model import matching_flavors


def demand_flavor(policy: Policy, lane: str, gpu_type: str | None) -> str | None:
    """The flavor a pending request is counted on: the first of its lane's flavors that matches its
    gpu_type (the one the engine tries first). None: no flavor matches (the request is invalid
    under the current policy)."""
    found = matching_flavors(policy, lane, gpu_type)
    return found[0] if found else None


@dataclass(slots=True)
class LaneDemand:
    """One lane's figures. oldest_submitted=None: nothing pending.

    gpus_waiting_for_upstream: the part of gpus_pending whose last recorded reason is
    WaitingForUpstream (their inputs do not exist yet, so more nodes would not start them).
    """

    lane: str
    pending: int = 0
    admitted: int = 0
    gpus_pending: dict[str, int] = field(default_factory=dict)
    gpus_in_use: dict[str, int] = field(default_factory=dict)
    gpus_waiting_for_upstream: dict[str, int] = field(default_factory=dict)
    oldest_submitted: datetime | None = None
    preemptions_total: int = 0
    rejections_total: int = 0
    budget_reserved: Decimal = Decimal(0)


@dataclass(slots=True)
class Demand:
    """The whole queue at `at`. admitted_ends: (flavor, GPUs, expected end) of each admitted request
    with an expected duration (expected end = admission time + expected_duration)."""

    at: datetime
    lanes: dict[str, LaneDemand]
    admitted_ends: list[tuple[str, int, datetime]] = field(default_factory=list)
    waits_s: dict[str, list[float]] = field(default_factory=dict)

    def gpus_pending_by_flavor(self) -> dict[str, int]:
        out: dict[str, int] = defaultdict(int)
        for ld in self.lanes.values():
            for f, n in ld.gpus_pending.items():
                out[f] += n
        return dict(out)

    def gpus_waiting_for_upstream_by_flavor(self) -> dict[str, int]:
        out: dict[str, int] = defaultdict(int)
        for ld in self.lanes.values():
            for f, n in ld.gpus_waiting_for_upstream.items():
                out[f] += n
        return dict(out)

    def gpus_in_use_by_flavor(self) -> dict[str, int]:
        out: dict[str, int] = defaultdict(int)
        for ld in self.lanes.values():
            for f, n in ld.gpus_in_use.items():
                out[f] += n
        return dict(out)


def _utc(dt: datetime) -> datetime:
    if dt.tzinfo is UTC:
        return dt
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)


@dataclass(frozen=True, slots=True)
class _Tally:
    """What `load_demand` reads from the ledger, before the clock is applied: the lanes' figures,
    admitted ends, and every first admission since `since` (lane, submitted, first admitted)."""

    lanes: dict[str, LaneDemand]
    admitted_ends: list[tuple[str, int, datetime]]
    first_admissions: list[tuple[str, datetime, datetime]]
    since: datetime
    budget_since: datetime | None


def _tally(ledger: Ledger, policy: Policy, since: datetime, budget_since: datetime | None) -> _Tally:
    """A handful of grouped queries over `gp_request_state` (one row per request): pending grouped
    by lane, GPU type, flavor and whether it waits for upstream; admitted one row each (for the
    expected end); the lanes' preemption and rejection counts; first admissions since `since`."""
    s = state_table
    lanes = {lane.name: LaneDemand(lane.name) for lane in policy.lanes_by_priority()}
    # grouped in the order of the covering index `ix_gp_request_state_queue`: read from the index
    # alone and grouped as it is read (no sort); the few groups per state are merged below
    pending_q = (
        sa.select(
            s.c.lane, s.c.gpu_type, s.c.reason_code, sa.func.count(), sa.func.sum(s.c.gpu_count),
            sa.func.min(s.c.submitted_at),
        )
        .where(s.c.state.in_(PENDING_STATES))
        .group_by(s.c.state, s.c.lane, s.c.gpu_type, s.c.reason_code)
    )
    admitted_q = sa.select(s.c.lane, s.c.flavor, s.c.gpu_count, s.c.updated_at, s.c.expected_duration_s).where(
        s.c.state.in_(ACTIVE_STATES)
    )
    totals_q = (
        sa.select(s.c.lane, sa.func.sum(s.c.preemptions), sa.func.sum(s.c.rejections))
        .where(sa.or_(s.c.preemptions > 0, s.c.rejections > 0))
        .group_by(s.c.lane)
    )
    waits_q = sa.select(s.c.lane, s.c.submitted_at, s.c.first_admitted_at).where(s.c.first_admitted_at >= since)
    first: dict[tuple[str, str | None], str | None] = {}
    ends: list[tuple[str, int, datetime]] = []
    with ledger.engine.connect() as conn:
        for lane, gpu_type, code, n, gpus, oldest in conn.execute(pending_q).all():
            ld = lanes.get(lane)
            if ld is None:
                continue
            gpus = int(gpus or 0)
            ld.pending += n
            if (lane, gpu_type) not in first:
                first[(lane, gpu_type)] = demand_flavor(policy, lane, gpu_type)
            key = first[(lane, gpu_type)] or "unknown"
            ld.gpus_pending[key] = ld.gpus_pending.get(key, 0) + gpus
            if code == "WaitingForUpstream":
                ld.gpus_waiting_for_upstream[key] = ld.gpus_waiting_for_upstream.get(key, 0) + gpus
            oldest = _utc(oldest)
            if ld.oldest_submitted is None or oldest < ld.oldest_submitted:
                ld.oldest_submitted = oldest
        for lane, flavor, gpus, at, expected_s in conn.execute(admitted_q).all():
            ld = lanes.get(lane)
            if ld is None:
                continue
            key, gpus = flavor or "unknown", int(gpus or 0)
            ld.admitted += 1
            ld.gpus_in_use[key] = ld.gpus_in_use.get(key, 0) + gpus
            if expected_s is not None:
                ends.append((key, gpus, _utc(at) + timedelta(seconds=expected_s)))
        for lane, preemptions, rejections in conn.execute(totals_q).all():
            ld = lanes.get(lane)
            if ld is not None:
                ld.preemptions_total, ld.rejections_total = int(preemptions or 0), int(rejections or 0)
        firsts = [(lane, _utc(submitted), _utc(first_at)) for lane, submitted, first_at in conn.execute(waits_q).all()]
    if budget_since is not None:
        for lane, amount in ledger.reserved_by_lane(budget_since).items():
            if lane in lanes:
                lanes[lane].budget_reserved = amount
    return _Tally(lanes, ends, firsts, since, budget_since)


def _demand(tally: _Tally, now: datetime, wait_window: timedelta) -> Demand:
    """The Demand at `now` from a tally (its lanes copied: a caller may change what it gets)."""
    lanes = {
        name: replace(
            ld,
            gpus_pending=dict(ld.gpus_pending),
            gpus_in_use=dict(ld.gpus_in_use),
            gpus_waiting_for_upstream=dict(ld.gpus_waiting_for_upstream),
        )
        for name, ld in tally.lanes.items()
    }
    demand = Demand(at=now, lanes=lanes, admitted_ends=list(tally.admitted_ends))
    start = now - wait_window
    for lane, submitted, first_at in tally.first_admissions:
        if first_at >= start:
            demand.waits_s.setdefault(lane, []).append(max(0.0, (first_at - submitted).total_seconds()))
    return demand


def load_demand(
    ledger: Ledger,
    policy: Policy,
    now: datetime | None = None,
    *,
    wait_window: timedelta = timedelta(hours=1),
    budget_since: datetime | None = None,
) -> Demand:
    """Aggregate the ledger into per-lane demand (from its state table: no regrouping of events).

    wait_window: waits (submission to first admission) of requests first admitted within this
    window before `now` are returned per lane in `waits_s` (for a p95).
    budget_since: start of the budget period for `budget_reserved` (None: not computed).
    """
    now = _utc(now or datetime.now(UTC))
    return _demand(_tally(ledger, policy, now - wait_window, budget_since), now, wait_window)


_ROW_COLS = (
    state_table.c.request_id, state_table.c.lane, state_table.c.gpu_type, state_table.c.reason_code,
    state_table.c.gpu_count, state_table.c.submitted_at, state_table.c.state, state_table.c.flavor,
    state_table.c.updated_at, state_table.c.expected_duration_s, state_table.c.preemptions,
    state_table.c.rejections, state_table.c.max_cost, state_table.c.first_admitted_at, state_table.c.last_admitted_at,
)
_CHANGED_ROWS = sa.select(*_ROW_COLS).where(state_table.c.request_id.in_(sa.bindparam("rids", expanding=True)))
_PENDING_ROWS = sa.select(
    state_table.c.request_id, state_table.c.lane, state_table.c.gpu_type, state_table.c.reason_code,
    state_table.c.gpu_count, state_table.c.submitted_at,
).where(state_table.c.state.in_(PENDING_STATES))
_PENDING_SET, _ACTIVE_SET = frozenset(PENDING_STATES), frozenset(ACTIVE_STATES)
_MAX_GAPS = 32
"""Id ranges not seen yet below the newest seen event id that a scrape asks for again (more are merged)."""
_UPSTREAM = "WaitingForUpstream"


class DemandCache:
    """`load_demand` for a reader that asks again and again (`/metrics`), kept up to date by the
    changes alone.

    The first call reads every state row that adds to the figures (pending, admitted, ever
    preempted or rejected, admitted in the budget period, first admitted in the wait window) and
    keeps each one's part of them beside the sums: per request its pending part (lane, flavor
    key, waits for upstream, GPUs, submitted), active part (lane, flavor, GPUs, expected end),
    counted part (lane, preemptions, rejections), reserved part (lane, max_cost) and first
    admission; the sums are counts and GPUs per lane and flavor, per-lane counters and budget,
    and a heap of pending submission times per lane for the oldest wait. Every later call asks
    the event log for the events after the newest id it has seen (one indexed range: nothing new,
    nothing else is read), reads the state rows of the requests those events touched, and
    replaces their parts in the sums: O(changes), not O(queue). The clock is applied anew on
    every call (oldest waits grow, first admissions leave the wait window). Everything is read
    again when the policy or the budget period changed, the wait window reaches back before what
    was read, more events arrived than applying them one by one would be worth, or
    `refresh_every` passed (a backstop).

    Event ids come from a sequence that PostgreSQL hands out before commit, so a transaction may
    commit after one with a higher id: ids missing below the newest seen are asked for again on
    every call for `gap_ttl` (a rolled-back insert leaves a gap for good), so a late commit is
    applied when it lands. The figures equal `load_demand` at the same moment (the tests compare
    them after random sequences of changes)."""

    def __init__(
        self,
        *,
        refresh_every: timedelta | None = timedelta(minutes=10),
        gap_ttl: timedelta = timedelta(minutes=2),
        changes_limit: int | None = None,
        slack: int = 64,
    ) -> None:
        """refresh_every: read everything again after this long (None: only when needed).
        gap_ttl: how long ids missing below the newest seen are asked for again.
        changes_limit: more new events than this in one call are not applied one by one but read
        in full (None: 2,000 or a quarter of the requests kept, whichever is more).
        slack: stale entries (heap entries of requests no longer pending, first admissions out of
        the window) kept beyond twice the live ones before they are dropped."""
        self._lock = threading.Lock()
        self._changes_limit = changes_limit
        self._slack = slack
        self._key: tuple[int, datetime | None] | None = None
        self._ledger: Ledger | None = None
        self._since = datetime.max.replace(tzinfo=UTC)
        self._refresh_every = refresh_every.total_seconds() if refresh_every is not None else None
        self._gap_ttl = gap_ttl.total_seconds()
        self.reads = 0
        """How many times the ledger was aggregated in full (tests and benchmarks read it)."""
        self.updates = 0
        """How many times changes were applied to the kept figures."""

    # --- kept state -------------------------------------------------------------------------

    def _reset(self, policy: Policy, since: datetime, budget_since: datetime | None) -> None:
        self._policy = policy
        self._lane_names = [lane.name for lane in policy.lanes_by_priority()]
        self._known = set(self._lane_names)
        self._since, self._budget_since = since, budget_since
        self._flavor: dict[tuple[str, str | None], str] = {}
        # each request's parts
        self._p: dict[str, tuple[str, str, bool, int, datetime]] = {}
        self._a: dict[str, tuple[str, str, int, datetime | None]] = {}
        self._c: dict[str, tuple[str, int, int]] = {}
        self._b: dict[str, tuple[str, Decimal]] = {}
        self._firsts: dict[str, tuple[str, datetime, float]] = {}
        """request id -> (lane, first admitted, its wait in seconds)"""
        # the sums
        self._pend: dict[tuple[str, str, bool], list[int]] = {}
        self._act: dict[tuple[str, str], list[int]] = {}
        self._counted: dict[str, list[int]] = {}
        self._reserved: dict[str, Decimal] = {}
        self._oldest: dict[str, list[tuple[datetime, str]]] = {}
        self._pending_n: dict[str, int] = {}
        self._high = 0
        self._gaps: list[tuple[int, int, float]] = []
        """(first id, last id, monotonic time noticed) of ids not seen below `_high`"""
        self._read_at = time.monotonic()

    def _key_of(self, lane: str, gpu_type: str | None) -> str:
        key = self._flavor.get((lane, gpu_type))
        if key is None:
            key = self._flavor[(lane, gpu_type)] = demand_flavor(self._policy, lane, gpu_type) or "unknown"
        return key

    def _parts(self, r: sa.Row) -> tuple:
        """A state row's parts: (pending, active, counted, reserved, first), each None when it
        adds nothing there. The pending part keeps the submission time as the database returns
        it (naive on SQLite, aware on PostgreSQL: one kind per database, so they order; made UTC
        only for the oldest)."""
        _, lane, gpu_type, code, gpus, submitted, state, flavor, updated, expected_s, pre, rej, cost, first_at, last_at = r
        gpus = int(gpus or 0)
        pending = active = counted = reserved = first = None
        if state in _PENDING_SET:
            pending = (lane, self._key_of(lane, gpu_type), code == _UPSTREAM, gpus, submitted)
        elif state in _ACTIVE_SET:
            end = _utc(updated) + timedelta(seconds=expected_s) if expected_s is not None else None
            active = (lane, flavor or "unknown", gpus, end)
        if pre or rej:
            counted = (lane, int(pre or 0), int(rej or 0))
        if self._budget_since is not None and last_at is not None and _utc(last_at) >= self._budget_since:
            reserved = (lane, Decimal(cost))
        if first_at is not None:
            first_at = _utc(first_at)
            if first_at >= self._since:
                first = (lane, first_at, max(0.0, (first_at - _utc(submitted)).total_seconds()))
        return pending, active, counted, reserved, first

    def _set_pending(self, rid: str, new: tuple | None) -> None:
        old = self._p.get(rid)
        if old == new:
            return
        if old is not None:
            lane, key, up, gpus, _ = old
            g = self._pend[(lane, key, up)]
            g[0] -= 1
            g[1] -= gpus
            if not g[0]:
                del self._pend[(lane, key, up)]
            self._pending_n[lane] -= 1
            del self._p[rid]
        if new is not None:
            lane, key, up, gpus, submitted = new
            g = self._pend.get((lane, key, up))
            if g is None:
                g = self._pend[(lane, key, up)] = [0, 0]
            g[0] += 1
            g[1] += gpus
            self._pending_n[lane] = self._pending_n.get(lane, 0) + 1
            self._p[rid] = new
            if old is None or old[0] != lane or old[4] != submitted:
                heapq.heappush(self._oldest.setdefault(lane, []), (submitted, rid))

    def _apply(self, rid: str, parts: tuple | None) -> None:
        """Replace request `rid`'s parts of the figures with `parts` (None: it adds nothing now)."""
        pending, active, counted, reserved, first = parts if parts is not None else (None, None, None, None, None)
        self._set_pending(rid, pending)
        self._set_rest(rid, active, counted, reserved, first)

    def _set_rest(self, rid: str, active: tuple | None, counted: tuple | None, reserved: tuple | None, first: tuple | None) -> None:
        old = self._a.get(rid)
        if old != active:
            if old is not None:
                g = self._act[(old[0], old[1])]
                g[0] -= 1
                g[1] -= old[2]
                if not g[0]:
                    del self._act[(old[0], old[1])]
                del self._a[rid]
            if active is not None:
                g = self._act.setdefault((active[0], active[1]), [0, 0])
                g[0] += 1
                g[1] += active[2]
                self._a[rid] = active
        old = self._c.get(rid)
        if old != counted:
            if old is not None:
                c = self._counted[old[0]]
                c[0] -= old[1]
                c[1] -= old[2]
                del self._c[rid]
            if counted is not None:
                c = self._counted.setdefault(counted[0], [0, 0])
                c[0] += counted[1]
                c[1] += counted[2]
                self._c[rid] = counted
        old = self._b.get(rid)
        if old != reserved:
            if old is not None:
                self._reserved[old[0]] -= old[1]
                del self._b[rid]
            if reserved is not None:
                self._reserved[reserved[0]] = self._reserved.get(reserved[0], Decimal(0)) + reserved[1]
                self._b[rid] = reserved
        if first is None:
            self._firsts.pop(rid, None)
        else:
            self._firsts[rid] = first

    # --- reading the ledger -----------------------------------------------------------------

    def _read_all(self, ledger: Ledger, policy: Policy, since: datetime, budget_since: datetime | None) -> None:
        """Every state row that adds to the figures, with the newest event id read first (a row
        changed while this reads has a newer event, applied by the next call). Pending requests,
        most of the rows, are read with the few columns their part needs and summed in one pass."""
        self._reset(policy, since, budget_since)
        s = state_table
        others = [
            s.c.state.in_(ACTIVE_STATES),
            sa.or_(s.c.preemptions > 0, s.c.rejections > 0),
            s.c.first_admitted_at >= since,
        ]
        if budget_since is not None:
            others.append(s.c.last_admitted_at >= budget_since)
        with ledger.engine.connect() as conn:
            self._high = int(conn.execute(sa.select(sa.func.max(events_table.c.id))).scalar() or 0)
            pending = conn.execute(_PENDING_ROWS).all()
            rows: dict[str, sa.Row] = {}
            for where in others:
                for r in conn.execute(sa.select(*_ROW_COLS).where(where)):
                    rows[r[0]] = r
        p, pend, heaps, counts, flavor = self._p, self._pend, self._oldest, self._pending_n, self._flavor
        for rid, lane, gpu_type, code, gpus, submitted in pending:
            gpus, up = int(gpus or 0), code == _UPSTREAM
            key = flavor.get((lane, gpu_type)) or self._key_of(lane, gpu_type)
            p[rid] = (lane, key, up, gpus, submitted)
            g = pend.get((lane, key, up))
            if g is None:
                g = pend[(lane, key, up)] = [0, 0]
            g[0] += 1
            g[1] += gpus
            heap = heaps.get(lane)
            if heap is None:
                heap = heaps[lane] = []
                counts[lane] = 0
            heap.append((submitted, rid))
            counts[lane] += 1
        for heap in heaps.values():
            heapq.heapify(heap)
        for rid, r in rows.items():
            _, active, counted, reserved, first = self._parts(r)
            self._set_rest(rid, active, counted, reserved, first)
        self.reads += 1

    def _read_changes(self, ledger: Ledger) -> bool:
        """Apply the events after the newest seen id (and any that landed in a gap below it);
        False: more arrived than applying them one by one is worth (nothing applied)."""
        e = events_table
        now_m = time.monotonic()
        self._gaps = [g for g in self._gaps if now_m - g[2] < self._gap_ttl]
        newer = e.c.id > self._high
        where = sa.or_(newer, *(e.c.id.between(lo, hi) for lo, hi, _ in self._gaps)) if self._gaps else newer
        kept = len(self._p) + len(self._a)
        limit = self._changes_limit if self._changes_limit is not None else max(2000, kept // 4)
        with ledger.engine.connect() as conn:
            found = conn.execute(sa.select(e.c.id, e.c.request_id).where(where).order_by(e.c.id).limit(limit + 1)).all()
            if not found:
                return True
            if len(found) > limit:
                return False
            touched = list(dict.fromkeys(rid for _, rid in found))
            rows: dict[str, sa.Row] = {}
            for i in range(0, len(touched), 500):
                for r in conn.execute(_CHANGED_ROWS, {"rids": touched[i : i + 500]}):
                    rows[r[0]] = r
        self._note_ids([i for i, _ in found], now_m)
        for rid in touched:
            r = rows.get(rid)
            self._apply(rid, self._parts(r) if r is not None else None)
        self.updates += 1
        return True

    def _note_ids(self, ids: list[int], now_m: float) -> None:
        """Mark `ids` (ascending) seen: fill gaps they land in, open gaps for ids they skip."""
        gaps = []
        for lo, hi, at in self._gaps:
            for i in ids[bisect_left(ids, lo) : bisect_right(ids, hi)]:
                if lo < i:
                    gaps.append((lo, i - 1, at))
                lo = i + 1
            if lo <= hi:
                gaps.append((lo, hi, at))
        high = self._high
        for i in ids:
            if i > high:
                if i > high + 1:
                    gaps.append((high + 1, i - 1, now_m))
                high = i
        self._high = high
        gaps.sort()
        while len(gaps) > _MAX_GAPS:  # merge the two closest neighbours (ids seen in between are read again: harmless)
            j = min(range(len(gaps) - 1), key=lambda k: gaps[k + 1][0] - gaps[k][1])
            gaps[j : j + 2] = [(gaps[j][0], gaps[j + 1][1], max(gaps[j][2], gaps[j + 1][2]))]
        self._gaps = gaps

    # --- the figures ------------------------------------------------------------------------

    def _oldest_of(self, lane: str) -> datetime | None:
        heap = self._oldest.get(lane)
        if not heap:
            return None
        n = self._pending_n.get(lane, 0)
        if len(heap) > 2 * n + self._slack:  # mostly entries of requests no longer pending: build it again
            heap[:] = [(p[4], rid) for rid, p in self._p.items() if p[0] == lane]
            heapq.heapify(heap)
        while heap:
            submitted, rid = heap[0]
            p = self._p.get(rid)
            if p is not None and p[0] == lane and p[4] == submitted:
                return _utc(submitted)
            heapq.heappop(heap)
        return None

    def _figures(self, now: datetime, start: datetime) -> Demand:
        lanes = {name: LaneDemand(name) for name in self._lane_names}
        for (lane, key, up), (n, gpus) in self._pend.items():
            ld = lanes.get(lane)
            if ld is None:
                continue
            ld.pending += n
            ld.gpus_pending[key] = ld.gpus_pending.get(key, 0) + gpus
            if up:
                ld.gpus_waiting_for_upstream[key] = ld.gpus_waiting_for_upstream.get(key, 0) + gpus
        for (lane, key), (n, gpus) in self._act.items():
            ld = lanes.get(lane)
            if ld is not None:
                ld.admitted += n
                ld.gpus_in_use[key] = ld.gpus_in_use.get(key, 0) + gpus
        for name, ld in lanes.items():
            if ld.pending:
                ld.oldest_submitted = self._oldest_of(name)
            c = self._counted.get(name)
            if c is not None:
                ld.preemptions_total, ld.rejections_total = c
            if name in self._reserved:
                ld.budget_reserved = self._reserved[name]
        known = self._known
        ends = [(key, gpus, end) for lane, key, gpus, end in self._a.values() if end is not None and lane in known]
        demand = Demand(at=now, lanes=lanes, admitted_ends=ends)
        waits = demand.waits_s
        kept = 0
        for lane, first_at, wait_s in self._firsts.values():
            if first_at >= start:
                kept += 1
                w = waits.get(lane)
                if w is None:
                    w = waits[lane] = []
                w.append(wait_s)
        if len(self._firsts) > 2 * kept + self._slack:  # most have left the window: forget them, and read again before it
            self._firsts = {rid: f for rid, f in self._firsts.items() if f[1] >= start}
            self._since = start
        return demand

    def load(
        self,
        ledger: Ledger,
        policy: Policy,
        now: datetime | None = None,
        *,
        wait_window: timedelta = timedelta(hours=1),
        budget_since: datetime | None = None,
    ) -> Demand:
        now = _utc(now or datetime.now(UTC))
        start = now - wait_window
        budget_since = _utc(budget_since) if budget_since is not None else None
        with self._lock:
            key = (id(policy), budget_since)
            stale = (
                key != self._key
                or ledger is not self._ledger
                or start < self._since
                or (self._refresh_every is not None and time.monotonic() - self._read_at >= self._refresh_every)
            )
            if stale or not self._read_changes(ledger):
                self._read_all(ledger, policy, start, budget_since)
                self._key, self._ledger = key, ledger
            return self._figures(now, start)



def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, -(-len(ordered) * q // 100) - 1))
    return float(ordered[int(k)])
