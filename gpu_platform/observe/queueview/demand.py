"""The queue's numbers straight from the ledger in a few aggregate queries (no request parsing).

This is what `/metrics` and `autoscale plan` read on every scrape or call, so it must stay cheap
at 10,000+ pending requests: it groups the latest event of each request by lane, GPU type,
state and flavor in SQL, and parses only the admitted requests' payloads (for their expected
end). Counts of preemptions and rejections come from the append-only event table, so they only
ever grow (Prometheus counters).
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from functools import lru_cache

import sqlalchemy as sa

from gpu_platform.policy import Policy
from gpu_platform.requests.ledger import (
    ACTIVE_STATES,
    INFO_EVENTS,
    PENDING_STATES,
    Ledger,
    events_table,
    requests_table,
)
from gpu_platform.requests.model import matching_flavors
from gpu_platform.units import parse_duration


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


@lru_cache(maxsize=1024)
def _duration(text: str) -> timedelta | None:
    try:
        return parse_duration(text)
    except ValueError:
        return None


def _expected_duration(payload: str | None) -> timedelta | None:
    """A request's expected_duration from its stored payload (None: absent or unreadable)."""
    if not payload:
        return None
    value = json.loads(payload).get("expected_duration")
    return _duration(value) if isinstance(value, str) else None


def _utc(dt: datetime) -> datetime:
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)


def load_demand(
    ledger: Ledger,
    policy: Policy,
    now: datetime | None = None,
    *,
    wait_window: timedelta = timedelta(hours=1),
    budget_since: datetime | None = None,
) -> Demand:
    """Aggregate the ledger into per-lane demand.

    wait_window: waits (submission to first admission) of requests first admitted within this
    window before `now` are returned per lane in `waits_s` (for a p95).
    budget_since: start of the budget period for `budget_reserved` (None: not computed).
    """
    now = _utc(now or datetime.now(UTC))
    e, r = events_table, requests_table
    lanes = {lane.name: LaneDemand(lane.name) for lane in policy.lanes_by_priority()}
    # the latest *state* event: `cluster` and `approved` rows inform without changing the state
    latest = (
        sa.select(e.c.request_id, sa.func.max(e.c.id).label("last_id"))
        .where(e.c.event.not_in(INFO_EVENTS))
        .group_by(e.c.request_id)
        .subquery()
    )
    live = (*PENDING_STATES, *ACTIVE_STATES)
    # One pass over each request's latest event: pending requests are aggregated in SQL; admitted
    # ones stay one row each (grouped by their event id) to carry their admission time; their
    # payloads (for expected_duration) are read by primary key afterwards.
    one_row = sa.case((e.c.event.in_(ACTIVE_STATES), e.c.id), else_=None)
    upstream = sa.case((e.c.reason.like("WaitingForUpstream%"), 1), else_=0)
    grouped = (
        sa.select(
            r.c.lane,
            r.c.gpu_type,
            e.c.event,
            e.c.flavor,
            sa.func.count().label("n"),
            sa.func.sum(r.c.gpu_count).label("gpus"),
            sa.func.min(r.c.submitted_at).label("oldest"),
            sa.func.min(e.c.at).label("at"),
            sa.func.min(sa.case((e.c.event.in_(ACTIVE_STATES), r.c.seq), else_=None)).label("seq"),
            upstream.label("upstream"),
        )
        .join(latest, latest.c.request_id == r.c.request_id)
        .join(e, e.c.id == latest.c.last_id)
        .where(e.c.event.in_(live))
        .group_by(r.c.lane, r.c.gpu_type, e.c.event, e.c.flavor, one_row, upstream)
    )
    totals = (
        sa.select(r.c.lane, e.c.event, sa.func.count())
        .join(r, r.c.request_id == e.c.request_id)
        .where(e.c.event.in_(("preempted", "rejected")))
        .group_by(r.c.lane, e.c.event)
    )
    # first admissions within the window only: the cost follows the window, not the history
    earlier = e.alias("earlier")
    waits_q = (
        sa.select(r.c.lane, r.c.submitted_at, e.c.at)
        .join(r, r.c.request_id == e.c.request_id)
        .where(
            e.c.event == "admitted",
            e.c.at >= now - wait_window,
            ~sa.exists().where(
                earlier.c.request_id == e.c.request_id, earlier.c.event == "admitted", earlier.c.id < e.c.id
            ),
        )
    )
    demand = Demand(at=now, lanes=lanes)
    first: dict[tuple[str, str | None], str | None] = {}
    with ledger.engine.connect() as conn:
        admitted_rows: list[tuple[int, str, int, datetime]] = []
        for lane, gpu_type, event, flavor, n, gpus, oldest, at, seq, blocked in conn.execute(grouped):
            ld = lanes.get(lane)
            if ld is None:
                continue
            gpus = int(gpus or 0)
            if event in ACTIVE_STATES:
                ld.admitted += n
                key = flavor or "unknown"
                ld.gpus_in_use[key] = ld.gpus_in_use.get(key, 0) + gpus
                admitted_rows.append((seq, key, gpus, _utc(at)))
            else:
                ld.pending += n
                if (lane, gpu_type) not in first:
                    first[(lane, gpu_type)] = demand_flavor(policy, lane, gpu_type)
                key = first[(lane, gpu_type)] or "unknown"
                ld.gpus_pending[key] = ld.gpus_pending.get(key, 0) + gpus
                if blocked:
                    ld.gpus_waiting_for_upstream[key] = ld.gpus_waiting_for_upstream.get(key, 0) + gpus
                oldest = _utc(oldest)
                if ld.oldest_submitted is None or oldest < ld.oldest_submitted:
                    ld.oldest_submitted = oldest
        payloads: dict[int, str] = {}
        seqs = [row[0] for row in admitted_rows]
        for i in range(0, len(seqs), 500):
            q = sa.select(r.c.seq, r.c.payload).where(r.c.seq.in_(seqs[i : i + 500]))
            payloads.update((seq, payload) for seq, payload in conn.execute(q))
        for seq, key, gpus, at in admitted_rows:
            expected = _expected_duration(payloads.get(seq))
            if expected is not None:
                demand.admitted_ends.append((key, gpus, at + expected))
        for lane, event, n in conn.execute(totals):
            ld = lanes.get(lane)
            if ld is None:
                continue
            if event == "preempted":
                ld.preemptions_total = n
            else:
                ld.rejections_total = n
        for lane, submitted, first_at in conn.execute(waits_q):
            demand.waits_s.setdefault(lane, []).append(max(0.0, (_utc(first_at) - _utc(submitted)).total_seconds()))
    if budget_since is not None:
        for lane, amount in ledger.reserved_by_lane(budget_since).items():
            if lane in lanes:
                lanes[lane].budget_reserved = amount
    return demand


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, -(-len(ordered) * q // 100) - 1))
    return float(ordered[int(k)])
