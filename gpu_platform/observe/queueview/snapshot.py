"""Per-lane state of the queue after one gate tick: what the `gpu_queue` asset's materializations carry.

A snapshot counts the ledger's requests as they stand once the tick's decisions are applied:
requests admitted this tick count as admitted (not pending), preemption victims as pending again,
rejected requests not at all.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import NamedTuple

from gpu_platform.admission.model import PendingInfo
from gpu_platform.observe.queueview.demand import demand_flavor
from gpu_platform.policy import Policy
from gpu_platform.requests.ledger import ACTIVE_STATES, PENDING_STATES, RequestState
from gpu_platform.requests.model import JobRequest
from gpu_platform.units import format_duration


class WaitingRow(NamedTuple):
    """One waiting request of a lane as people read it: who, what, how long, why, and when.

    position: 1-based queue position (None for a request the gate holds before admission, e.g.
    `WaitingForUpstream`); eta: the estimated start (None: no estimate possible); eta_note: ""
    when eta is the engine's estimate; with an eta, why it is only a lower bound (`after its
    upstream`: the request waits for its inputs, then for quota); without one, why none is possible
    (`unknown: over budget`, `soon: ...`). `eta_text` writes the two as one phrase.
    A named tuple (immutable, and built in a fraction of a frozen dataclass's time: a snapshot
    holds one per pending request, 50,000 of them on a long queue, every tick)."""

    position: int | None
    request_id: str
    name: str
    owner: str
    team: str
    target: str
    gpus: int
    waited_s: float
    reason: str
    eta: datetime | None
    eta_note: str = ""

    def to_json(self) -> dict[str, object]:
        return {
            "position": self.position,
            "request_id": self.request_id,
            "name": self.name,
            "owner": self.owner,
            "team": self.team,
            "target": self.target,
            "gpus": self.gpus,
            "waited_s": round(self.waited_s, 1),
            "reason": self.reason,
            "eta": self.eta.isoformat() if self.eta else None,
            "eta_note": self.eta_note,
        }


def eta_text(row: WaitingRow) -> str:
    """The estimated start as one phrase, never empty: `2026-12-06 06:15 UTC` (the engine's
    estimate), `not before 2026-12-06 07:15 UTC (after its upstream)` (a lower bound) or the
    reason there is none (`unknown: over budget`). Short words only (the reason names the
    upstream requests): it wraps in a narrow column."""
    if row.eta is None:
        return row.eta_note or _NOT_ESTIMATED
    at = row.eta.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"not before {at} ({row.eta_note})" if row.eta_note else at


def waiting_request_text(row: WaitingRow, lane: str) -> str:
    """Who, what and where in one cell: `NAME — OWNER (TEAM), N GPUs for TARGET — LANE #POSITION
    (or `LANE, held`), waited 1h5m — REQUEST_ID` (the id left out when it is the name; empty
    parts left out). Plain text: it wraps at its spaces in a narrow column."""
    who = row.owner + (f" ({row.team})" if row.team else "") if row.owner else row.team
    what = f"{row.gpus} GPU{'s' if row.gpus != 1 else ''}" + (f" for {row.target}" if row.target else "")
    where = f"{lane} #{row.position}" if row.position else f"{lane}, held"
    waited = format_duration(timedelta(seconds=round(row.waited_s)))
    parts = [row.name, ", ".join(x for x in (who, what) if x), f"{where}, waited {waited}"]
    if row.name != row.request_id:
        parts.append(row.request_id)
    return " — ".join(x for x in parts if x)


UPSTREAM = "WaitingForUpstream"
_NOT_ESTIMATED = "unknown: the gate has not placed it yet"
_NO_ESTIMATE = {
    UPSTREAM: "unknown: it waits for its inputs",
    "ApprovalRequired": "unknown: it waits for an approval first (gpu-platform approve)",
    "WaitingForPreemptedVictims": "soon: once the runs it preempted have stopped",
    "BudgetExhausted": "unknown: over budget (max_cost or the lane's budget)",
    "TeamLimit": "unknown: its team is at its limit in the lane",
}
"""Why the engine gave a waiting request no estimated start, by reason code."""
_TOO_FEW_FREED = "unknown: running work's expected ends free too few GPUs for it and the requests ahead"
"""No estimate for any other code: more than the lane can hold, or running work without an
expected_duration (what it frees, and when, is not known)."""
_STOPPING = "unknown: its preempted run is still stopping"
_PREEMPTED_NOW = "Preempted this tick: requeued in its original place once its run has stopped"


@dataclass(slots=True)
class LaneSnapshot:
    """One lane after a tick.

    admitted: requests holding quota (Kueue's QuotaReserved + Admitted), running or not;
    running: those whose Dagster run is live (None: the caller does not know the runs).
    gpus_pending: pending GPUs by the flavor they would be tried on first (`demand_flavor`).
    oldest_wait_s: how long the oldest pending request has waited since submission (0 if none).
    head_request / head_reason: the request at position 1 and why it waits ("" if nothing waits);
    head_name / head_owner: its name and owner.
    waiting: every pending request of the lane, in queue order (held requests last).
    """

    lane: str
    pending: int = 0
    admitted: int = 0
    running: int | None = None
    gpus_in_use: dict[str, int] = field(default_factory=dict)
    gpus_pending: dict[str, int] = field(default_factory=dict)
    oldest_wait_s: float = 0.0
    head_request: str | None = None
    head_reason: str = ""
    head_name: str = ""
    head_owner: str = ""
    waiting: list[WaitingRow] = field(default_factory=list)


_KEPT_MAX = 200_000
"""Entries an identity cache below holds before it starts afresh (more than a fleet's live requests)."""


def _kept(cache: dict[int, tuple], obj: object, value: tuple) -> tuple:
    """Store `value` for the frozen `obj` in `cache` (keyed by its id, the object kept beside the
    value so the id is not reused while it is there) and return it."""
    if len(cache) >= _KEPT_MAX:
        cache.clear()
    cache[id(obj)] = (obj, value)
    return value


_STATICS: dict[int, tuple[JobRequest, tuple[str | None, str, str, str, int]]] = {}


def _static(req: JobRequest) -> tuple[str | None, str, str, str, int]:
    """A waiting row's part that is the request's own (name, owner, team, target, GPUs), kept per
    (frozen) request object: asked for every waiting request on every gate tick."""
    hit = _STATICS.get(id(req))
    if hit is not None and hit[0] is req:
        return hit[1]
    return _kept(_STATICS, req, (req.name, req.owner or "", req.team or "", req.target, int(req.gpu_count or 0)))


_ENTRIES: dict[int, tuple] = {}
"""Per state object what lane_snapshots reads of it on every tick: its request, id, lane, the
waiting row's static part (name, owner, team, target, GPUs) and its submission time in whole
microseconds. `Ledger.states` hands out the same RequestState while its row is unchanged (a frozen
object: what it gives never changes)."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICRO = timedelta(microseconds=1)


def _micros(dt: datetime) -> int:
    """`dt` in whole microseconds since the epoch: differences of two are exact, as timedelta's."""
    return (dt - _EPOCH) // _MICRO


def _entry(s: RequestState) -> tuple:
    req = s.request
    name, owner, team, target, gpus = _static(req)
    return _kept(_ENTRIES, s, (req, s.request_id, req.lane or "", name or s.request_id, owner, team, target, gpus,
                               _micros(s.submitted_at)))


def lane_snapshots(
    policy: Policy,
    states: Iterable[RequestState],
    now: datetime,
    *,
    admitted_now: Mapping[str, str] | None = None,
    requeued_now: Iterable[str] = (),
    rejected_now: Iterable[str] = (),
    waits: Iterable[PendingInfo] = (),
    running_ids: set[str] | None = None,
) -> list[LaneSnapshot]:
    """Snapshots of every lane in the policy (priority order), empty lanes included.

    admitted_now: request id -> flavor admitted this tick; requeued_now: this tick's preemption
    victims; rejected_now: this tick's rejections; waits: the tick's PendingInfo (reason and
    position; without them the ledger's last recorded waiting reason is used).
    """
    admitted_now = dict(admitted_now or {})
    requeued = set(requeued_now)
    rejected = set(rejected_now)
    snaps = {lane.name: LaneSnapshot(lane.name, running=0 if running_ids is not None else None)
             for lane in policy.lanes_by_priority()}
    heads: dict[str, tuple[int, str, str]] = {}
    waits = list(waits)
    wait_by_id = {w.name: w for w in waits}
    for w in waits:
        rank = w.position if w.position >= 1 else 1 << 30  # WaitingForUpstream has no queue position
        cur = heads.get(w.cq)
        if cur is None or rank < cur[0]:
            heads[w.cq] = (rank, w.name, w.message)
    fallback_heads: dict[str, tuple[int, str, str, JobRequest]] = {}
    first_flavor: dict[tuple[str, str | None], str] = {}
    head_ids = {h[1] for h in heads.values()}
    names: dict[str, JobRequest] = {}
    fromtimestamp = datetime.fromtimestamp
    etas: dict[float, datetime] = {}  # many waits share an estimated start (now, or one end of running work)
    row_new, row_type = tuple.__new__, WaitingRow  # a WaitingRow from one tuple, without its __new__
    now_us = _micros(now)
    entries = _ENTRIES
    held_upstream: list[tuple[LaneSnapshot, int, RequestState]] = []
    states = states if isinstance(states, list) else list(states)
    for s in states:
        hit = entries.get(id(s))
        req, rid, lane, name, owner, team, target, gpus, submitted_us = (
            hit[1] if hit is not None and hit[0] is s else _entry(s))
        if rid in head_ids:
            names[rid] = req
        snap = snaps.get(lane)
        if snap is None or rid in rejected:
            continue
        state = s.state
        if rid in admitted_now or (state in ACTIVE_STATES and rid not in requeued):
            flavor = admitted_now.get(rid) or s.flavor or "unknown"
            snap.admitted += 1
            snap.gpus_in_use[flavor] = snap.gpus_in_use.get(flavor, 0) + gpus
            if running_ids is not None and rid in running_ids:
                snap.running = (snap.running or 0) + 1
        elif state in PENDING_STATES or rid in requeued:
            snap.pending += 1
            key = (lane, req.gpu_type)
            flavor = first_flavor.get(key)
            if flavor is None:
                flavor = first_flavor[key] = demand_flavor(policy, lane, req.gpu_type) or "unknown"
            pending_gpus = snap.gpus_pending
            pending_gpus[flavor] = pending_gpus.get(flavor, 0) + gpus
            # (now - submitted_at).total_seconds(), from whole microseconds as timedelta does it
            waited = (now_us - submitted_us) / 1_000_000
            if waited > snap.oldest_wait_s:
                snap.oldest_wait_s = waited
            prev = fallback_heads.get(lane)
            if prev is None or submitted_us < prev[0]:
                fallback_heads[lane] = (submitted_us, rid, s.reason, req)
            w = wait_by_id.get(rid)
            note = ""
            if w is not None:
                position = w.position or None
                reason = w.message
                start = w.estimated_start
                if start is None:
                    eta = None
                    code = w.reason_code
                    if code == UPSTREAM:
                        held_upstream.append((snap, len(snap.waiting), s))
                    note = _NO_ESTIMATE.get(code, _TOO_FEW_FREED)
                else:
                    eta = etas.get(start)
                    if eta is None:
                        eta = etas[start] = fromtimestamp(start, UTC)
            elif rid in requeued:  # preempted this tick: the ledger's reason is its admission's
                position, reason, eta, note = None, _PREEMPTED_NOW, None, _STOPPING
            else:
                position, reason, eta = s.details.get("position"), s.reason, None
                note = _STOPPING if state == "requeued" else _NOT_ESTIMATED
            snap.waiting.append(
                row_new(
                    row_type,
                    (position, rid, name, owner, team, target, gpus, waited if waited > 0.0 else 0.0, reason, eta,
                     note),
                )
            )
    if held_upstream:
        _after_upstream(held_upstream, states, snaps.values(), now, admitted_now)
    for lane, snap in snaps.items():
        snap.waiting.sort(key=_queue_order)
        if not snap.pending:
            continue
        if lane in heads:
            _, snap.head_request, snap.head_reason = heads[lane]
            head = names.get(snap.head_request or "")
        elif lane in fallback_heads:
            _, snap.head_request, snap.head_reason, head = fallback_heads[lane]
        else:
            head = None
        if head is not None:
            snap.head_name = head.name or snap.head_request or ""
            snap.head_owner = head.owner or ""
    return list(snaps.values())


def _after_upstream(
    held: list[tuple[LaneSnapshot, int, RequestState]],
    states: list[RequestState],
    snaps: Iterable[LaneSnapshot],
    now: datetime,
    admitted_now: Mapping[str, str],
) -> None:
    """The estimated start of requests held for their inputs (`WaitingForUpstream`): not before
    the latest expected end of the live requests that produce them, each one's end its start
    (admission, the engine's estimate, or its own upstream's end) plus its expected_duration.
    A lower bound: the request then waits for quota like any other. Rows in `held` are replaced."""
    producer: dict[str, RequestState] = {}
    live = (*PENDING_STATES, *ACTIVE_STATES)
    for s in states:
        if s.state in live or s.request_id in admitted_now:
            for out in s.request.output_artifact_ids:
                producer[out] = s
    engine_eta = {w[1]: w[9] for snap in snaps for w in snap.waiting}
    held_ids = {s.request_id for _, _, s in held}
    ends: dict[str, tuple[datetime | None, str]] = {}

    def start_after_inputs(s: RequestState, path: frozenset[str]) -> tuple[datetime | None, str]:
        bound: tuple[datetime | None, str] = (None, "")
        for i in s.request.input_ids:
            p = producer.get(i)
            if p is None or p.request_id == s.request_id:
                continue
            end, why = end_of(p, path | {s.request_id})
            if end is None:
                return None, why
            if bound[0] is None or end > bound[0]:
                bound = (end, "after its upstream")
        return bound

    def end_of(p: RequestState, path: frozenset[str]) -> tuple[datetime | None, str]:
        rid = p.request_id
        if rid in ends:
            return ends[rid]
        if rid in path:  # a cycle of inputs: nothing in it can start first
            return None, "unknown: its upstream waits for its own downstream"
        if rid in admitted_now:
            start: datetime | None = now
        elif p.state in ACTIVE_STATES:
            start = p.updated_at if p.updated_at.tzinfo else p.updated_at.replace(tzinfo=UTC)
        elif rid in held_ids:
            start, why = start_after_inputs(p, path)
            if start is None and why:
                ends[rid] = (None, why)
                return ends[rid]
        else:
            start = engine_eta.get(rid)
        duration = p.request.expected_duration
        if start is None:
            out: tuple[datetime | None, str] = (None, "unknown: its upstream has no estimated start")
        elif duration is None:
            out = (None, "unknown: its upstream has no expected duration")
        else:
            out = (max(start + duration, now), "")
        ends[rid] = out
        return out

    for snap, index, s in held:
        eta, note = start_after_inputs(s, frozenset())
        if eta is None and not note:
            continue  # its producers are gone: the engine's reason stands
        snap.waiting[index] = snap.waiting[index]._replace(eta=eta, eta_note=note)


def _queue_order(r: WaitingRow) -> tuple[bool, int, float]:
    """Queue position first (held requests, without one, last), then the longest wait."""
    position = r[0]
    return (position is None, position or 0, -r[7])


PLOTTED = ("gpus_pending", "oldest_wait_s")
"""The measures plotted per lane (one plot each on the asset's Plots tab, `<lane>/<measure>`): the
GPUs a lane waits for and how long its oldest request has waited. Everything else is a table."""


def lane_row(snap: LaneSnapshot) -> dict[str, int | float | str]:
    """One lane's line of the `gpu_queue` lanes table: counts, the oldest wait and the head of
    the queue (`nothing waits` when the lane is empty). running is empty when the caller does
    not know the runs."""
    return {
        "lane": snap.lane,
        "pending": snap.pending,
        "gpus_pending": sum(snap.gpus_pending.values()),
        "gpus_in_use": sum(snap.gpus_in_use.values()),
        "admitted": snap.admitted,
        "running": "" if snap.running is None else snap.running,
        "oldest_wait_s": round(snap.oldest_wait_s, 1),
        "head_name": snap.head_name,
        "head_owner": snap.head_owner,
        "head_reason": snap.head_reason or ("nothing waits" if not snap.pending else ""),
    }


def lane_summary(snap: LaneSnapshot) -> dict[str, str]:
    """One lane's line of the `gpu_queue` lanes table as three cells of text that wraps: the lane;
    its queue (`3 waiting (24 GPUs), oldest 1h5m; 2 admitted, 1 running (16 GPUs)`); its head
    (`NAME (OWNER): why it waits`, or `nothing waits`). The same numbers as `lane_row`."""
    row = lane_row(snap)
    if snap.pending:
        waiting = (f"{snap.pending} waiting ({row['gpus_pending']} GPUs), oldest "
                   f"{format_duration(timedelta(seconds=round(snap.oldest_wait_s)))}")
        who = f"{snap.head_name} ({snap.head_owner})" if snap.head_owner else snap.head_name
        head = f"{who}: {snap.head_reason}" if who else str(row["head_reason"])
    else:
        waiting = head = "nothing waits"
    running = "" if snap.running is None else f", {snap.running} running"
    return {"lane": snap.lane, "queue": f"{waiting}; {snap.admitted} admitted{running} ({row['gpus_in_use']} GPUs)",
            "head": head}


def plotted_metadata(snaps: Iterable[LaneSnapshot]) -> dict[str, int | float]:
    """The numbers the asset's Plots tab draws: PLOTTED per lane, zeros included (each plot a line)."""
    out: dict[str, int | float] = {}
    for snap in snaps:
        row = lane_row(snap)
        for measure in PLOTTED:
            out[f"{snap.lane}/{measure}"] = row[measure]
    return out


def queue_digest(snaps: Iterable[LaneSnapshot]) -> str:
    """A digest of what a person reads in the queue, without the clock: per lane the counts and
    GPUs per flavor, and each waiting request's position and reason. Equal digests: nothing
    changed but the waits growing."""
    doc = [
        [
            snap.lane,
            snap.pending,
            snap.admitted,
            snap.running,
            sorted(snap.gpus_in_use.items()),
            sorted(snap.gpus_pending.items()),
            [(w[1], w[0], w[8]) for w in snap.waiting],  # request_id, position, reason
        ]
        for snap in snaps
    ]
    last = _LAST_DIGEST
    if last and last[0] == doc:  # a steady queue: the same document as last tick (50k rows: 0.1 s to encode)
        return last[1]
    digest = hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()
    _LAST_DIGEST[:] = [doc, digest]
    return digest


_LAST_DIGEST: list = []
"""queue_digest's last document and its digest."""


def flavor_rows(policy: Policy, snap: LaneSnapshot) -> list[dict[str, int | str]]:
    """GPUs in use and pending per flavor: every flavor the lane has quota on (zeros included),
    then any other flavor its requests hold."""
    lane = policy.lanes.get(snap.lane)
    flavors = list(lane.flavor_names) if lane is not None else []
    for f in sorted(set(snap.gpus_in_use) | set(snap.gpus_pending)):
        if f not in flavors:
            flavors.append(f)
    return [
        {"flavor": f, "gpus_in_use": snap.gpus_in_use.get(f, 0), "gpus_pending": snap.gpus_pending.get(f, 0)}
        for f in flavors
    ]
