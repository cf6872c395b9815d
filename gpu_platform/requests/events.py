"""The request ledger's events and what they make of a request's state.

The event vocabulary (`Event`; `INFO_EVENTS` inform without changing the state), the states the
gate reads (`ACTIVE_STATES`, `PENDING_STATES`, `TERMINAL_STATES`), a request's state as read
(`RequestState`) and one event (`EventRow`), the reason code of a reason text, and the fold of
new events into `gp_request_state` rows: `_fold` (per request, the newest state event and the
counts), `_STATE_UPDATE` (one UPDATE that applies a fold row, keeping the newer event when
writers commit out of order), `_state_row` (a state row built from the full log).

May import `requests/model.py`, `requests/schema.py`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import sqlalchemy as sa
from pydantic import TypeAdapter

from gpu_platform.requests.model import JobRequest
from gpu_platform.requests.schema import state_table

Event = Literal[
    "submitted", "waiting", "admitted", "preempted", "requeued", "finished", "failed", "rejected", "cluster", "approved",
    "replicas",
]


EVENTS: tuple[str, ...] = Event.__args__


INFO_EVENTS = ("cluster", "approved", "replicas")
"""Events that record what was observed without changing the request's state. `replicas`: a
service's replicas running now (details `replicas`, `source`), recorded when they change."""


ACTIVE_STATES = ("admitted",)


PENDING_STATES = ("submitted", "waiting", "requeued")


TERMINAL_STATES = ("finished", "failed", "rejected")


@dataclass(frozen=True, slots=True)
class RequestState:
    """A request with its latest state event. `attempts` counts admissions (1 for a first launch).

    `Ledger.states` hands out the same instance again while the request's state row is
    unchanged: treat it, its `details` and `cluster` as read-only.

    cluster: the latest `cluster` event (what Kueue said about the request's Job) as a mapping
    with `reason`, `at` and its details (`condition`, `kueue_reason`, `message`, `flavor`,
    `attempt`, ...); None when the cluster has said nothing (or the request runs locally).
    """

    seq: int
    request_id: str
    request: JobRequest
    state: str
    reason: str
    flavor: str | None
    run_id: str | None
    submitted_at: datetime
    updated_at: datetime
    attempts: int
    details: dict[str, Any]
    cluster: dict[str, Any] | None = None
    approvals: tuple[dict[str, Any], ...] = ()
    """Every `approved` event of the request, oldest first: its details plus `at`."""
    preemptions: int = 0
    """How many times it was preempted (its `preempted` events)."""

    @property
    def cluster_flavor(self) -> str | None:
        """The flavor Kueue assigned to the current attempt's Job, if the cluster said so."""
        if not self.cluster or self.cluster.get("attempt") != self.attempts:
            return None
        return self.cluster.get("flavor") or None


@dataclass(frozen=True, slots=True)
class EventRow:
    request_id: str
    event: str
    at: datetime
    reason: str
    flavor: str | None
    run_id: str | None
    details: dict[str, Any]


_DURATION = TypeAdapter(timedelta)


_REASON_CODE = re.compile(r"^([A-Z][A-Za-z]{0,63})(?=[:\s(]|$)")


def reason_code(reason: str | None) -> str:
    """The Kueue-style code a recorded reason begins with (`Inadmissible: ...` -> `Inadmissible`,
    `QuotaReserved on h100-ondemand` -> `QuotaReserved`); "" when it begins with none (`validated`)."""
    m = _REASON_CODE.match(reason or "")
    return m.group(1) if m else ""


def _utc(dt: datetime) -> datetime:
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)


def _fold(events: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """What events (each with its `id`) change in their requests' state rows: per request the
    latest state event (`p_sid` its id, 0: none), counts to add, the latest `cluster` event, the
    first and latest admission, the newest event. The one definition of a request's state that
    both the incremental update (`_apply`) and the backfill use."""
    out: dict[str, dict[str, Any]] = {}
    for v in events:
        rid, ev, i, at = v["request_id"], v["event"], v["id"], v["at"]
        d = out.get(rid)
        if d is None:
            d = out[rid] = {
                "p_rid": rid, "p_sid": 0, "p_state": None, "p_reason": None, "p_code": None, "p_flavor": None, "p_run_id": None,
                "p_details": None, "p_at": None, "p_admits": 0, "p_preempts": 0, "p_rejects": 0, "p_approvals": 0,
                "p_cid": 0, "p_fa_id": 0, "p_fa_at": None, "p_la_at": None, "p_last": 0,
            }
        if i > d["p_last"]:
            d["p_last"] = i
        if ev == "cluster":
            d["p_cid"] = max(d["p_cid"], i)
            continue
        if ev == "approved":
            d["p_approvals"] += 1
            continue
        if ev in INFO_EVENTS:
            continue
        if i > d["p_sid"]:
            d.update(p_sid=i, p_state=ev, p_reason=v["reason"] or "", p_code=reason_code(v["reason"]),
                     p_flavor=v["flavor"], p_run_id=v["run_id"], p_details=v["details"], p_at=at)
        if ev == "admitted":
            d["p_admits"] += 1
            if d["p_fa_id"] == 0 or i < d["p_fa_id"]:
                d["p_fa_id"], d["p_fa_at"] = i, at
            if d["p_la_at"] is None or _utc(at) > _utc(d["p_la_at"]):
                d["p_la_at"] = at
        elif ev == "preempted":
            d["p_preempts"] += 1
        elif ev == "rejected":
            d["p_rejects"] += 1
    return out


def _state_update() -> sa.Update:
    """One request's state row brought up to date with a batch's `_fold`, whatever the order in
    which concurrent transactions commit: the state event is taken only if its id is newer than
    the row's (the latest event by id, as `states_from_log` reads it), counts are added, and the
    first/latest admission and newest event compare before they replace. Every expression reads
    the row as it was before this update (SQL's rule for SET)."""
    s = state_table

    def p(name: str, col: sa.Column) -> sa.BindParameter:
        return sa.bindparam(name, type_=col.type)

    sid = p("p_sid", s.c.state_event_id)
    newer = s.c.state_event_id < sid
    cid, fa_id, last = p("p_cid", s.c.state_event_id), p("p_fa_id", s.c.state_event_id), p("p_last", s.c.state_event_id)
    la = p("p_la_at", s.c.last_admitted_at)
    first = sa.and_(fa_id > 0, sa.or_(s.c.first_admitted_id.is_(None), s.c.first_admitted_id > fa_id))

    def pick(col: sa.Column, name: str) -> sa.Case:
        return sa.case((newer, p(name, col)), else_=col)

    return (
        s.update()
        .where(s.c.request_id == sa.bindparam("p_rid", type_=s.c.request_id.type))
        .values(
            state=pick(s.c.state, "p_state"),
            reason=pick(s.c.reason, "p_reason"),
            reason_code=pick(s.c.reason_code, "p_code"),
            flavor=pick(s.c.flavor, "p_flavor"),
            run_id=pick(s.c.run_id, "p_run_id"),
            details=pick(s.c.details, "p_details"),
            updated_at=pick(s.c.updated_at, "p_at"),
            state_event_id=sa.case((newer, sid), else_=s.c.state_event_id),
            attempts=s.c.attempts + p("p_admits", s.c.attempts),
            preemptions=s.c.preemptions + p("p_preempts", s.c.preemptions),
            rejections=s.c.rejections + p("p_rejects", s.c.rejections),
            approvals=s.c.approvals + p("p_approvals", s.c.approvals),
            cluster_event_id=sa.case((cid > sa.func.coalesce(s.c.cluster_event_id, 0), cid), else_=s.c.cluster_event_id),
            first_admitted_id=sa.case((first, fa_id), else_=s.c.first_admitted_id),
            first_admitted_at=sa.case((first, p("p_fa_at", s.c.first_admitted_at)), else_=s.c.first_admitted_at),
            last_admitted_at=sa.case(
                (sa.and_(la.is_not(None), sa.or_(s.c.last_admitted_at.is_(None), s.c.last_admitted_at < la)), la),
                else_=s.c.last_admitted_at,
            ),
            last_event_id=sa.case((last > s.c.last_event_id, last), else_=s.c.last_event_id),
        )
    )


_STATE_UPDATE = _state_update()


def _state_row(base: Mapping[str, Any], payload: Mapping[str, Any], folded: Mapping[str, Any]) -> dict[str, Any]:
    """A new state row: the request's columns (`base`), its payload's name and expected duration,
    and the `_fold` of all its events."""
    expected = payload.get("expected_duration")
    return {
        "request_id": base["request_id"],
        "seq": base["seq"],
        "lane": base["lane"],
        "team": base["team"],
        "owner": base["owner"],
        "name": payload.get("name"),
        "gpu_type": base["gpu_type"],
        "gpu_count": base["gpu_count"],
        "max_cost": base["max_cost"],
        "expected_duration_s": _seconds(expected),
        "submitted_at": base["submitted_at"],
        "state": folded["p_state"],
        "reason": folded["p_reason"] or "",
        "reason_code": folded["p_code"] or "",
        "flavor": folded["p_flavor"],
        "run_id": folded["p_run_id"],
        "details": folded["p_details"],
        "updated_at": folded["p_at"],
        "state_event_id": folded["p_sid"],
        "attempts": folded["p_admits"],
        "preemptions": folded["p_preempts"],
        "rejections": folded["p_rejects"],
        "approvals": folded["p_approvals"],
        "cluster_event_id": folded["p_cid"] or None,
        "first_admitted_id": folded["p_fa_id"] or None,
        "first_admitted_at": folded["p_fa_at"],
        "last_admitted_at": folded["p_la_at"],
        "last_event_id": folded["p_last"],
    }


def _seconds(value: Any) -> float | None:
    """Seconds of a stored duration: a timedelta, or the ISO 8601 text a payload holds."""
    if value is None:
        return None
    if isinstance(value, timedelta):
        return value.total_seconds()
    return _DURATION.validate_python(value).total_seconds()
