"""The queue's numbers straight from the ledger in a few aggregate queries (no request parsing).

This is what `/metrics` and `autoscale plan` read on every scrape or call, so it must stay cheap
at 100,000 pending requests: it groups the ledger's state table (`gp_request_state`, one row per
request) by lane, GPU type and state in SQL, and reads admitted requests one row each for their
expected end (admission time + `expected_duration`, a column of the table). Counts of
preemptions and rejections are the requests' own counts of those append-only events, so they
only ever grow (Prometheus counters). `DemandCache` serves the last figures again while the
ledger's newest event id stays the same.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import sqlalchemy as sa

from gpu_platform.policy import Policy
from gpu_platform.requests.ledger import ACTIVE_STATES, PENDING_STATES, Ledger, state_table
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


class DemandCache:
    """`load_demand` for a reader that asks again and again (`/metrics`): the ledger is read
    again only when its newest event id changed (every write to the requests' state adds an
    event), the budget period or the policy changed, or the wait window reaches back before
    what was read; otherwise the figures are the last ones, with the clock applied anew
    (oldest waits grow, first admissions leave the wait window). One cheap query per hit."""

    def __init__(self) -> None:
        self._key: tuple[int, int, datetime | None] | None = None
        self._tally: _Tally | None = None
        self._lock = threading.Lock()
        self.reads = 0
        """How many times the ledger was aggregated (tests and benchmarks read it)."""

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
        with self._lock:
            key = (ledger.newest_event_id(), id(policy), budget_since)
            tally = self._tally
            if tally is None or key != self._key or start < tally.since:
                tally = _tally(ledger, policy, start, budget_since)
                self._key, self._tally = key, tally
                self.reads += 1
        return _demand(tally, now, wait_window)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, -(-len(ordered) * q // 100) - 1))
    return float(ordered[int(k)])
