"""The request ledger: append-only tables of requests and their state changes (SQLAlchemy).

A request is written once; every change of state (submitted, waiting, admitted, preempted,
requeued, finished, failed, rejected) is a new row in `request_events` with its reason and time.
`cluster` rows record what the cluster (Kueue) said about the request's Job (quota reserved,
admitted, evicted, preempted, finished, or a failure such as `WorkloadPriorityClassNotFound`); they
inform, they do not change the request's state. `approved` rows record an audited exception
granted by a role of the policy's approver roster (`gpu-platform approve`; details
`{"kind", "role", "approver", "reason"}`); they do not change the state either. Jobs on the
cluster that carry a request id the ledger cannot match go to `gp_cluster_unmatched` instead
(no request to hang them on; the bypass scorecard counts them).
SQLite by default (`sqlite:///path/ledger.db`), PostgreSQL in production
(`postgresql+psycopg2://user:pass@host:port/db`). Many writers are expected (CLI, sensor, runs):
inserts are single transactions, request ids are unique by constraint, and a re-submitted request
with the same id and the same content is answered with the existing id instead of a duplicate
while that request is live; once it ended, the same content is refused unless it is asked for
again, then recorded under the next run's id (`decide_submission`, the one rule; docs/requests.md).

Each request's current state is also kept as one row of `gp_request_state`, written in the same
transaction as every event that changes it, so the gate's tick, the queue views and `/metrics`
read the state without regrouping the event log (`states`); `states_from_log` derives the same
answer from the events alone, and a ledger written before the table existed is filled from its
events once, when it is first opened (`backfill_state`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

import sqlalchemy as sa
from pydantic import TypeAdapter
from sqlalchemy.exc import IntegrityError

from gpu_platform.requests.model import (
    FIELD_MAX_CHARS,
    JobRequest,
)

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


class LedgerError(RuntimeError):
    """A ledger operation that cannot be carried out (unknown request, conflicting resubmission)."""


class BatchConflict(LedgerError):
    """A batch refused as a whole: `conflicts` lists (source, problem) for each conflicting request."""

    def __init__(self, conflicts: list[tuple[str, str]]):
        self.conflicts = conflicts
        super().__init__("; ".join(f"{src}: {msg}" for src, msg in conflicts))


class RequestEnded(BatchConflict):
    """A batch refused as a whole because a request's content is that of a request that already
    ended and `again` was not asked: `ended` lists (source, Submission) for each, the Submission
    naming the ended request, its state and when it ended (`ended_line` says it in words)."""

    def __init__(self, ended: list[tuple[str, Submission]]):
        self.ended = ended
        super().__init__([(src, ended_line(sub)) for src, sub in ended])


from gpu_platform.requests.schema import (  # noqa: E402  the tables live below the ledger and its helpers
    UNMATCHED_COLUMNS,
    UNMATCHED_KINDS,
    events_table,
    metadata,
    requests_table,
    state_table,
    unmatched_table,
)


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

PARSED_CACHE_SIZE = 200_000
"""Parsed requests kept per process (`request_from_payload`), least recently used dropped first."""
_parsed: OrderedDict[str, tuple[int, JobRequest]] = OrderedDict()
_parsed_lock = threading.Lock()


def request_from_payload(request_id: str, payload: str) -> JobRequest:
    """The stored request `payload` of `request_id` as a JobRequest, validated once per process.

    A payload never changes once written (the ledger is append-only), and re-validating every
    live request on each gate tick cost ~70 us each (3.5 s a tick at 50k requests), so the
    parsed request is kept by id with the payload's hash: a ledger holding the same id with
    other content (another database in the same process) is parsed again, never served another's.
    Callers share the instance: a JobRequest is frozen (its `env` mapping must not be changed)."""
    key = hash(payload)
    with _parsed_lock:
        hit = _parsed.get(request_id)
        if hit is not None and hit[0] == key:
            _parsed.move_to_end(request_id)
            return hit[1]
    req = JobRequest.from_json(payload)
    with _parsed_lock:
        _parsed[request_id] = (key, req)
        _parsed.move_to_end(request_id)
        while len(_parsed) > PARSED_CACHE_SIZE:
            _parsed.popitem(last=False)
    return req


def _chunks(items: Sequence[Any], size: int = 500) -> Iterable[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


_REASON_CODE = re.compile(r"^([A-Z][A-Za-z]{0,63})(?=[:\s(]|$)")


def reason_code(reason: str | None) -> str:
    """The Kueue-style code a recorded reason begins with (`Inadmissible: ...` -> `Inadmissible`,
    `QuotaReserved on h100-ondemand` -> `QuotaReserved`); "" when it begins with none (`validated`)."""
    m = _REASON_CODE.match(reason or "")
    return m.group(1) if m else ""


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


def _insert_events(conn: sa.Connection, values: list[dict[str, Any]]) -> None:
    """Insert events and bring their requests' state rows up to date, in the caller's transaction."""
    if not values:
        return
    ids = conn.execute(events_table.insert().returning(events_table.c.id, sort_by_parameter_order=True), values).scalars().all()
    conn.execute(_STATE_UPDATE, list(_fold({**v, "id": i} for v, i in zip(values, ids, strict=True)).values()))


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


def new_request_id() -> str:
    return f"req-{datetime.now(UTC):%Y%m%d}-{uuid.uuid4().hex[:10]}"


def content_request_id(request: JobRequest) -> str:
    """The idempotency key of a request without `request_id`: `req-` + 20 hex characters of the
    SHA-256 of its validated content (canonical JSON). The same file submitted again (a re-run
    batch) is the same request; any change of content is a new one. The `name` is left out: a
    renamed file is the same request (it keeps the name it was first recorded with)."""
    content = json.loads(request.to_json())
    content.pop("name", None)
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"))
    return "req-" + hashlib.sha256(canonical.encode()).hexdigest()[:20]


def same_job(a: JobRequest, b: JobRequest) -> bool:
    """Equal but for the `name` (a label, not part of what the job does)."""
    return a.model_copy(update={"name": None}) == b.model_copy(update={"name": None})


Outcome = Literal["recorded", "live", "ended", "conflict"]


@dataclass(frozen=True, slots=True)
class RecordedRun:
    """The latest recorded run of a request id (`run_request_id(base, run)`): its stored content,
    its current state (None: no state row yet, taken as live) and since when it is in it."""

    request_id: str
    run: int
    payload: str
    state: str | None
    since: datetime | None


@dataclass(frozen=True, slots=True)
class Submission:
    """What submitting one request does (`decide_submission`).

    outcome: `recorded`: a new request under `request_id` (`again_of`: the ended run it repeats,
    else None); `live`: the same content is recorded under `request_id` and has not ended
    (`state`, `since`): nothing is written; `ended`: the same content is recorded under
    `request_id` and ended (`state`: finished, failed or rejected; `since`: when), and `again`
    was not asked: nothing is written; `conflict`: `request_id` is recorded with other content
    (`problem` says so)."""

    request_id: str
    outcome: Outcome
    state: str | None = None
    since: datetime | None = None
    again_of: str | None = None
    problem: str = ""


def run_request_id(base: str, run: int) -> str:
    """The id the `run`-th recording of the same request gets: `base` for the first,
    `<base>-run<run>` after (cut to fit the id's 200 characters)."""
    if run <= 1:
        return base
    suffix = f"-run{run}"
    return base[: FIELD_MAX_CHARS["request_id"] - len(suffix)] + suffix


def decide_submission(request: JobRequest, latest: RecordedRun | None, again: bool = False) -> Submission:
    """The idempotency rule, in one place (the CLI, the Launchpad and the API all come through
    `Ledger.submissions`): `request` (its `request_id` set: given, or content-derived) against
    the latest recorded run of that id (None: never recorded).

    - never recorded: recorded under its id;
    - recorded with other content (its `name` aside): a conflict;
    - recorded and live (any state but finished, failed, rejected): the same request, whatever
      `again` says, so a retried batch never records a live request twice;
    - recorded and ended: not silently swallowed: `ended` (nothing recorded) unless `again`,
      then recorded as the next run (`run_request_id`), which a retry of the same `again`
      finds live and answers with the same id."""
    base = request.request_id or ""
    if latest is None:
        return Submission(base, "recorded")
    stored = JobRequest.from_json(latest.payload)
    if not same_job(stored, request.model_copy(update={"request_id": stored.request_id})):
        return Submission(
            latest.request_id, "conflict", problem=f"request_id {latest.request_id!r} already exists with different content"
        )
    if latest.state not in TERMINAL_STATES:
        return Submission(latest.request_id, "live", latest.state, latest.since)
    if not again:
        return Submission(latest.request_id, "ended", latest.state, latest.since)
    return Submission(run_request_id(base, latest.run + 1), "recorded", again_of=latest.request_id)


UNVERIFIED_MARK = "unverified"
"""How a request whose submitter no identity source vouched for is marked (queue, explain, ledger)."""


@dataclass(frozen=True, slots=True)
class Submitter:
    """Who records a request (`check_submitter`): `name` from `source` (`Identity.source`);
    `verified`: an identity source vouched for it; `on_behalf_of`: the owner, when a roster role
    with `submit_for_others` submits for someone else (else None)."""

    name: str
    source: str
    verified: bool
    on_behalf_of: str | None = None

    def details(self) -> dict[str, Any]:
        """The `submitted` event's details."""
        out: dict[str, Any] = {"submitted_by": self.name, "identity_source": self.source, "verified": self.verified}
        if self.on_behalf_of:
            out["on_behalf_of"] = self.on_behalf_of
        return out


def submitter_line(details: Mapping[str, Any] | None) -> str:
    """`submitted by ana@example.com (oidc)`, `... on behalf of ...`, or `... (unverified: ...)`;
    "" for a request recorded before submitters were (or by the platform itself)."""
    if not details or "submitted_by" not in details:
        return ""
    who = f"submitted by {details['submitted_by']}"
    if not details.get("verified"):
        who += f" ({UNVERIFIED_MARK}: no identity source is configured)"
    else:
        who += f" ({details.get('identity_source')})"
    if details.get("on_behalf_of"):
        who += f" on behalf of {details['on_behalf_of']}"
    return who


def check_submitter(request: JobRequest, identity: Any, policy: Any) -> tuple[Submitter | None, list[str]]:
    """Who may record `request`, beside the idempotency rule (`decide_submission`): the caller's
    `Identity` against the deployed policy (`teams.<t>.members`, the roster's
    `submit_for_others`, `scale`). Returns (the submitter, []) or (None, every problem).

    - no identity source configured (an unverified `$USER`): allowed below scale S4, recorded
      and shown as unverified; refused from S4 (the scale ladder fails closed there);
    - verified: the caller must be the request's `owner` and a member of its `team` (whose
      cost center the policy fixes), unless a roster role with `submit_for_others` lists them
      (recorded as on behalf of the owner)."""
    from gpu_platform.policy.scale import fails_closed

    if not identity.verified:
        if fails_closed(policy.scale):
            return None, [
                f"submitter: no identity source is configured (GPU_PLATFORM_IDENTITY: oidc, dagster, kubernetes or "
                f"os_user) and the policy's scale {policy.scale} fails closed; {identity.name!r} ($USER) vouches for "
                "nobody (docs/approvals.md, Identity)"
            ]
        return Submitter(identity.name, identity.source, False), []
    roles = [r for r, spec in policy.approvers.items() if spec.submit_for_others and identity.is_any_of(spec.members)]
    if roles:
        behalf = request.owner if request.owner != identity.name else None
        return Submitter(identity.name, identity.source, True, behalf), []
    errors = []
    if request.owner != identity.name:
        errors.append(
            f"owner: {request.owner!r} is not you ({identity.name!r}, from {identity.source}); submit as the owner, "
            "or ask a roster role with submit_for_others to submit on their behalf"
        )
    team = policy.teams.get(request.team or "")
    if team is not None and not identity.is_any_of(team.members):
        errors.append(
            f"team: {identity.name!r} is not a member of team {team.name} (teams.{team.name}.members), so may not "
            f"submit for it or bill its cost center {team.cost_center}"
        )
    if team is not None and request.cost_center != team.cost_center:
        errors.append(f"cost_center: {request.cost_center!r} is not team {team.name}'s ({team.cost_center})")
    if errors:
        return None, errors
    return Submitter(identity.name, identity.source, True), []


class SubmitterRefused(BatchConflict):
    """The caller may not record one of the batch's requests (`check_submitter`); nothing was recorded."""


def ended_line(sub: Submission) -> str:
    """`identical to req-..., which finished at 2026-05-01 12:00:03 UTC; nothing recorded`."""
    at = f" at {sub.since:%Y-%m-%d %H:%M:%S} UTC" if sub.since else ""
    return f"identical to {sub.request_id}, which {sub.state}{at}; nothing recorded"


RUN_PROBE = 8
"""Run ids looked up at once per request whose runs are being followed (`_latest_runs`)."""


def default_ledger_url(env: Mapping[str, str] | None = None) -> str:
    """`GPU_PLATFORM_LEDGER_URL`, else a SQLite file under `GPU_PLATFORM_HOME` (default `./var`)."""
    env = os.environ if env is None else env
    if env.get("GPU_PLATFORM_LEDGER_URL"):
        return env["GPU_PLATFORM_LEDGER_URL"]
    home = Path(env.get("GPU_PLATFORM_HOME", "var")).resolve()
    return f"sqlite:///{home / 'ledger.db'}"


def _utc(dt: datetime) -> datetime:
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)


def _make_engine(url: str) -> sa.Engine:
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = sa.create_engine(url, connect_args={"timeout": 30}, hide_parameters=True)

        @sa.event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn, _record):  # pragma: no cover - exercised by every sqlite test
            cur = dbapi_conn.cursor()
            cur.execute("pragma busy_timeout=30000")
            # switching a new file to WAL takes an exclusive lock, and SQLite answers "database is
            # locked" at once (no busy wait) while another process opens the same new file
            for attempt in range(50):
                try:
                    cur.execute("pragma journal_mode=wal")
                    break
                except sqlite3.OperationalError as exc:
                    if "locked" not in str(exc) or attempt == 49:
                        raise
                    time.sleep(0.05 + 0.01 * attempt)
            cur.execute("pragma foreign_keys=on")
            cur.close()

        return engine
    # hide_parameters: a failing statement's error never echoes request values (or anything else).
    return sa.create_engine(url, pool_pre_ping=True, hide_parameters=True)


_CREATE_RACE = ("already exists", "pg_type_typname_nsp_index", "pg_class_relname_nsp_index", "database is locked")
"""What a database says when another process created the table first: SQLite `table ... already
exists`, PostgreSQL `relation ... already exists` or, for two CREATEs in flight at once, a unique
violation on its catalog; SQLite also `database is locked` when it refuses a schema change at once
(no busy wait) while another connection changes the schema of the same new file."""


def create_tables(meta: sa.MetaData, engine: sa.Engine, attempts: int = 20) -> None:
    """`meta.create_all(engine, checkfirst=True)`, safe under a concurrent first use.

    Two processes opening a new database at once both see no table and both create it; the
    second's CREATE fails with "already exists". That error is caught and the check made again
    (the other process's tables are then there, and any still missing is created), up to
    `attempts` times; every other error propagates. Used for the ledger's tables and for those
    that live beside them (lineage, the gate's lane view)."""
    _retry_create_race(lambda: meta.create_all(engine, checkfirst=True), attempts)


def _retry_create_race(create: Callable[[], None], attempts: int) -> None:
    """`create()`, tried again (up to `attempts` times) while it fails on another process having
    created the same object first (`_CREATE_RACE`); every other error propagates at once."""
    for attempt in range(attempts):
        try:
            create()
            return
        except (sa.exc.OperationalError, sa.exc.ProgrammingError, sa.exc.IntegrityError) as exc:
            if attempt == attempts - 1 or not any(m in str(exc.orig) for m in _CREATE_RACE):
                raise
            time.sleep(min(0.5, 0.02 * (attempt + 1)))


_VERSIONS_INDEX = next(ix for ix in state_table.indexes if ix.name == "ix_gp_request_state_versions")


def _create_index(index: sa.Index, engine: sa.Engine, attempts: int = 20) -> None:
    """An index added after its table: `create_all` makes only missing tables, so a ledger whose
    state table predates the index gets it here (once; a concurrent first use that made it first
    is an "already exists", as for `create_tables`)."""
    _retry_create_race(lambda: index.create(engine, checkfirst=True), attempts)


class Ledger:
    """Append-only request ledger over one SQLAlchemy engine."""

    def __init__(self, url: str | None = None, engine: sa.Engine | None = None):
        self.url = url or default_ledger_url()
        self.engine = engine or _make_engine(self.url)
        self.metadata = metadata
        self._states: dict[str, tuple[tuple[int, int], RequestState]] = {}
        """request id -> ((seq, last_event_id) of its state row, the RequestState built from it)"""
        create_tables(metadata, self.engine)
        _create_index(_VERSIONS_INDEX, self.engine)
        with self.engine.connect() as conn:
            n_req = conn.execute(sa.select(sa.func.count()).select_from(requests_table)).scalar_one()
            n_state = conn.execute(sa.select(sa.func.count()).select_from(state_table)).scalar_one()
        if n_state < n_req:
            self.backfill_state()

    @staticmethod
    def _row(request: JobRequest, request_id: str, now: datetime) -> dict[str, Any]:
        return {
            "request_id": request_id,
            "submitted_at": now,
            "lane": request.lane,
            "team": request.team,
            "cost_center": request.cost_center,
            "owner": request.owner,
            "workload": request.workload,
            "gpu_type": request.gpu_type,
            "gpu_count": request.gpu_count,
            "max_cost": request.max_cost,
            "payload": request.to_json(),
        }

    def submit(
        self, request: JobRequest, at: datetime | None = None, again: bool = False,
        identity: Any = None, policy: Any = None,
    ) -> str:
        """Append a validated request and its `submitted` event; return its id.

        A request that carries its own `request_id` is idempotent while that request is live:
        submitting the same content again returns the same id; different content under an
        existing id raises LedgerError, and so does the same content once that request ended,
        unless `again` (`decide_submission`).
        """
        try:
            return self.submissions([request], None, at, again, identity=identity, policy=policy)[0].request_id
        except SubmitterRefused as exc:
            raise LedgerError("; ".join(message for _, message in exc.conflicts)) from exc
        except RequestEnded as exc:
            raise LedgerError(
                f"request_id {request.request_id!r}: {exc.conflicts[0][1]}; to run it again, submit it without "
                "request_id (the Launchpad: leave it empty) or with `gpu-platform submit FILE --again`"
            ) from exc
        except BatchConflict as exc:
            raise LedgerError(exc.conflicts[0][1]) from exc

    def submit_many(self, requests: Iterable[JobRequest]) -> list[str]:
        return self.submit_batch(list(requests))

    def submit_batch(
        self,
        requests: list[JobRequest],
        sources: list[str] | None = None,
        at: datetime | None = None,
        again: bool = False,
    ) -> list[str]:
        """`submissions`, their ids only: the id each request is recorded (or already was) under."""
        return [s.request_id for s in self.submissions(requests, sources, at, again)]

    def submissions(
        self,
        requests: list[JobRequest],
        sources: list[str] | None = None,
        at: datetime | None = None,
        again: bool = False,
        identity: Any = None,
        policy: Any = None,
    ) -> list[Submission]:
        """Record every request in one transaction, or none; say what became of each, in order.

        Requests without `request_id` get a new random id. Each is decided by
        `decide_submission` against the latest recorded run of its id: one whose content is
        recorded and live (its `name` aside: a label, the first one recorded stays) is answered
        with that id and nothing new is written, so a batch interrupted before its commit, or
        committed, can be re-run without duplicates. One whose content is recorded and ended
        makes the whole batch fail with RequestEnded unless `again` (then it is recorded as the
        next run, `<id>-run<n>`). One whose id exists with other content, or that appears twice
        in the batch with different content, makes the whole batch fail with BatchConflict
        naming its source (`sources[i]`, default `request i`). Nothing of a failed batch is
        recorded.

        identity, policy: the caller's `Identity` and the deployed policy: each request is
        checked by `check_submitter` first (SubmitterRefused names every refused one; nothing
        is recorded) and its `submitted` event records who submitted it (`Submitter.details`).
        None: the platform itself records (the demo's seed, tests), with no submitter.
        """
        sources = sources or [f"request {i}" for i in range(len(requests))]
        now = _utc(at or datetime.now(UTC))
        submitters: dict[int, Submitter] = {}
        if identity is not None:
            refused: list[tuple[str, str]] = []
            for request, source in zip(requests, sources, strict=True):
                who, problems = check_submitter(request, identity, policy)
                refused.extend((source, p) for p in problems)
                if who is not None:
                    submitters[id(request)] = who
            if refused:
                raise SubmitterRefused(refused)
        keys: list[str] = []
        wanted: dict[str, tuple[JobRequest, str]] = {}
        conflicts: list[tuple[str, str]] = []
        by_id: dict[str, Submitter] = {}
        for request, source in zip(requests, sources, strict=True):
            request_id = request.request_id or new_request_id()
            if id(request) in submitters:
                by_id.setdefault(request_id, submitters[id(request)])
            request = request.model_copy(update={"request_id": request_id})
            keys.append(request_id)
            if request_id in wanted:
                if not same_job(wanted[request_id][0], request):
                    conflicts.append(
                        (source, f"request_id {request_id!r} is also in {wanted[request_id][1]} with different content")
                    )
                continue
            wanted[request_id] = (request, source)
        if conflicts:
            raise BatchConflict(conflicts)
        for attempt in range(3):
            try:
                with self.engine.begin() as conn:
                    latest = self._latest_runs(conn, list(wanted))
                    decided = {rid: decide_submission(req, latest[rid], again) for rid, (req, _src) in wanted.items()}
                    conflicts = [(wanted[rid][1], d.problem) for rid, d in decided.items() if d.outcome == "conflict"]
                    if conflicts:
                        raise BatchConflict(conflicts)
                    ended = [(wanted[rid][1], d) for rid, d in decided.items() if d.outcome == "ended"]
                    if ended:
                        raise RequestEnded(ended)
                    new = [
                        (d.request_id, wanted[rid][0].model_copy(update={"request_id": d.request_id}))
                        for rid, d in decided.items()
                        if d.outcome == "recorded"
                    ]
                    from gpu_platform.requests.claims import claim_artifacts

                    refused = claim_artifacts(conn, [(wanted[rid][1], d.request_id, wanted[rid][0])
                                                     for rid, d in decided.items() if d.outcome == "recorded"], now)
                    if refused:
                        raise BatchConflict(refused)
                    if new:
                        self._insert_requests(conn, new, now, {d.request_id: by_id[rid] for rid, d in decided.items()
                                                               if d.outcome == "recorded" and rid in by_id})
                return [decided[rid] for rid in keys]
            except IntegrityError:
                # A concurrent submitter recorded one of these ids between our read and insert:
                # the transaction rolled back as a whole; read again and decide again.
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    @staticmethod
    def _latest_runs(conn: sa.Connection, bases: list[str]) -> dict[str, RecordedRun | None]:
        """The latest recorded run of each id of `bases` (`run_request_id(base, n)` for n = 1, 2,
        ... while recorded), None for an id never recorded. Runs are recorded one after the other
        (the next only once the last ended), so the first unrecorded run ends the walk. One
        query for ids never recorded again (the common case), then `RUN_PROBE` runs at a time."""
        r, s = requests_table, state_table
        out: dict[str, RecordedRun | None] = dict.fromkeys(bases)
        todo, start, width = list(bases), 1, 1
        while todo:
            probe = {run_request_id(b, n): (b, n) for b in todo for n in range(start, start + width)}
            found: dict[str, sa.Row] = {}
            for chunk in _chunks(list(probe)):
                q = (
                    sa.select(r.c.request_id, r.c.payload, s.c.state, s.c.updated_at)
                    .outerjoin(s, s.c.request_id == r.c.request_id)
                    .where(r.c.request_id.in_(chunk))
                )
                found.update({row.request_id: row for row in conn.execute(q)})
            more = []
            for b in todo:
                for n in range(start, start + width):
                    row = found.get(run_request_id(b, n))
                    if row is None:
                        break
                    since = _utc(row.updated_at) if row.updated_at is not None else None
                    out[b] = RecordedRun(row.request_id, n, row.payload, row.state, since)
                else:
                    more.append(b)
            todo, start, width = more, start + width, RUN_PROBE
        return out

    @staticmethod
    def _insert_requests(
        conn: sa.Connection, new: list[tuple[str, JobRequest]], now: datetime,
        submitters: Mapping[str, Submitter] | None = None,
    ) -> None:
        """Requests, their `submitted` events (with who submitted them, `submitters`) and their
        state rows, in the caller's transaction."""
        rows = [Ledger._row(req, rid, now) for rid, req in new]
        seqs = conn.execute(
            requests_table.insert().returning(requests_table.c.seq, sort_by_parameter_order=True), rows
        ).scalars().all()
        submitters = submitters or {}

        def submitted(rid: str) -> dict[str, Any]:
            who = submitters.get(rid)
            if who is None:
                return {"request_id": rid, "event": "submitted", "at": now, "reason": "validated", "details": None}
            details = who.details()
            return {"request_id": rid, "event": "submitted", "at": now,
                    "reason": f"validated; {submitter_line(details)}", "details": json.dumps(details, sort_keys=True)}

        events = [submitted(rid) for rid, _ in new]
        ids = conn.execute(
            events_table.insert().returning(events_table.c.id, sort_by_parameter_order=True), events
        ).scalars().all()
        folded = _fold({**e, "flavor": None, "run_id": None, "id": i} for e, i in zip(events, ids, strict=True))
        conn.execute(
            state_table.insert(),
            [
                _state_row(
                    {**row, "seq": seq},
                    {"name": req.name, "expected_duration": req.expected_duration},
                    folded[rid],
                )
                for (rid, req), row, seq in zip(new, rows, seqs, strict=True)
            ],
        )

    def backfill_state(self) -> int:
        """Write the state row of every request that has none, derived from its events (a ledger
        from before `gp_request_state`, or rows written around the ledger's methods, as the demo
        history does); return how many were written. Safe to run while others do: a concurrent
        backfill that wrote the same rows first makes this one read again."""
        for attempt in range(5):
            try:
                with self.engine.begin() as conn:
                    return self.backfill_state_in(conn)
            except IntegrityError:
                if attempt == 4:
                    raise
                time.sleep(0.05 * (attempt + 1))
        return 0

    @staticmethod
    def backfill_state_in(conn: sa.Connection) -> int:
        """`backfill_state` inside the caller's transaction."""
        r, s, e = requests_table, state_table, events_table
        missing = conn.execute(
            sa.select(
                r.c.request_id, r.c.seq, r.c.lane, r.c.team, r.c.owner, r.c.gpu_type, r.c.gpu_count, r.c.max_cost,
                r.c.submitted_at, r.c.payload,
            )
            .where(~sa.exists().where(s.c.request_id == r.c.request_id))
            .order_by(r.c.seq)
        ).mappings().all()
        written = 0
        for chunk in _chunks(missing):
            ids = [row["request_id"] for row in chunk]
            events = conn.execute(
                sa.select(e.c.id, e.c.request_id, e.c.event, e.c.at, e.c.reason, e.c.flavor, e.c.run_id, e.c.details)
                .where(e.c.request_id.in_(ids))
                .order_by(e.c.id)
            ).mappings().all()
            folded = _fold(events)
            rows = [
                _state_row(row, json.loads(row["payload"]), folded[row["request_id"]])
                for row in chunk
                if row["request_id"] in folded and folded[row["request_id"]]["p_sid"]
            ]
            if rows:
                conn.execute(s.insert(), rows)
                written += len(rows)
        return written

    def known_ids(self, request_ids: list[str]) -> set[str]:
        """Which of `request_ids` are recorded."""
        with self.engine.connect() as conn:
            return set(self._payloads(conn, request_ids))

    @staticmethod
    def _payloads(conn: sa.Connection, request_ids: list[str]) -> dict[str, str]:
        out: dict[str, str] = {}
        for i in range(0, len(request_ids), 500):
            chunk = request_ids[i : i + 500]
            q = sa.select(requests_table.c.request_id, requests_table.c.payload).where(
                requests_table.c.request_id.in_(chunk)
            )
            out.update({rid: payload for rid, payload in conn.execute(q)})
        return out

    def record(
        self,
        request_id: str,
        event: str,
        reason: str = "",
        *,
        flavor: str | None = None,
        run_id: str | None = None,
        details: Mapping[str, Any] | None = None,
        at: datetime | None = None,
    ) -> None:
        """Append one state change. Unknown events and unknown requests raise LedgerError."""
        self.record_many([(request_id, event, reason, flavor, run_id, details)], at=at)

    def record_many(
        self,
        rows: Iterable[tuple[str, str, str, str | None, str | None, Mapping[str, Any] | None]],
        at: datetime | None = None,
    ) -> int:
        """Append many state changes in one transaction: (request_id, event, reason, flavor, run_id, details)."""
        now = _utc(at or datetime.now(UTC))
        values = []
        for request_id, event, reason, flavor, run_id, details in rows:
            if event not in EVENTS:
                raise LedgerError(f"unknown event {event!r} for {request_id} (one of: {', '.join(EVENTS)})")
            values.append(
                {
                    "request_id": request_id,
                    "event": event,
                    "at": now,
                    "reason": reason or "",
                    "flavor": flavor,
                    "run_id": run_id,
                    "details": json.dumps(dict(details), sort_keys=True, default=str) if details else None,
                }
            )
        if not values:
            return 0
        try:
            with self.engine.begin() as conn:
                _insert_events(conn, values)
        except IntegrityError as exc:
            raise LedgerError(f"cannot record events: unknown request id among {[v['request_id'] for v in values][:5]}") from exc
        return len(values)

    def record_unmatched(self, rows: Iterable[Mapping[str, Any]], at: datetime | None = None) -> int:
        """Append observations of Jobs the ledger cannot match (`UNMATCHED_COLUMNS` each) in one
        transaction; an unknown `kind` or a missing column raises LedgerError naming it."""
        now = _utc(at or datetime.now(UTC))
        values = []
        for i, row in enumerate(rows):
            missing = [c for c in ("namespace", "job", "request_id", "attempt", "kind", "why", "condition", "status")
                       if row.get(c) is None]
            if missing:
                raise LedgerError(f"unmatched observation {i}: missing {', '.join(missing)}")
            if row["kind"] not in UNMATCHED_KINDS:
                raise LedgerError(f"unmatched observation {i}: kind {row['kind']!r} is not one of {', '.join(UNMATCHED_KINDS)}")
            values.append({"observed_at": now, **{c: row.get(c) for c in UNMATCHED_COLUMNS}})
            values[-1]["kueue_reason"] = values[-1]["kueue_reason"] or ""
            values[-1]["message"] = values[-1]["message"] or ""
        if values:
            with self.engine.begin() as conn:
                conn.execute(unmatched_table.insert(), values)
        return len(values)

    def unmatched(self) -> list[dict[str, Any]]:
        """Every recorded observation of an unmatched Job, oldest first (`observed_at` in UTC)."""
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(unmatched_table).order_by(unmatched_table.c.id)).mappings().all()
        return [{**dict(r), "observed_at": _utc(r["observed_at"])} for r in rows]

    def last_unmatched(self) -> dict[tuple[str, str], dict[str, Any]]:
        """The latest recorded observation of each unmatched Job, by (namespace, job)."""
        t = unmatched_table
        last = sa.select(sa.func.max(t.c.id)).group_by(t.c.namespace, t.c.job).scalar_subquery()
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(t).where(t.c.id.in_(last))).mappings().all()
        return {(r["namespace"], r["job"]): dict(r) for r in rows}

    def get(self, request_id: str) -> JobRequest:
        with self.engine.connect() as conn:
            payload = conn.execute(
                sa.select(requests_table.c.payload).where(requests_table.c.request_id == request_id)
            ).scalar_one_or_none()
        if payload is None:
            raise LedgerError(f"unknown request id {request_id!r}")
        return JobRequest.from_json(payload)

    def events(self, request_id: str | None = None) -> list[EventRow]:
        q = sa.select(events_table).order_by(events_table.c.id)
        if request_id is not None:
            q = q.where(events_table.c.request_id == request_id)
        with self.engine.connect() as conn:
            return [
                EventRow(
                    r.request_id, r.event, _utc(r.at), r.reason, r.flavor, r.run_id, json.loads(r.details) if r.details else {}
                )
                for r in conn.execute(q)
            ]

    def submitters(self, request_ids: list[str]) -> dict[str, dict[str, Any]]:
        """Who submitted each request (its `submitted` event's details: `submitted_by`,
        `identity_source`, `verified`, `on_behalf_of`); a request recorded without a submitter
        (before submitters were, or by the platform itself) is left out."""
        e = events_table
        out: dict[str, dict[str, Any]] = {}
        with self.engine.connect() as conn:
            for chunk in _chunks(request_ids):
                q = sa.select(e.c.request_id, e.c.details).where(
                    e.c.event == "submitted", e.c.request_id.in_(chunk), e.c.details.is_not(None)
                )
                for row in conn.execute(q):
                    try:
                        details = json.loads(row.details)
                    except ValueError:
                        continue
                    if isinstance(details, dict) and "submitted_by" in details:
                        out[row.request_id] = details
        return out

    def approved_states(self) -> list[RequestState]:
        """The states of the requests with at least one `approved` event (what retrospectives
        and approval views read), from the state table's counter: no scan of other requests."""
        s = state_table
        with self.engine.connect() as conn:
            ids = [r for (r,) in conn.execute(sa.select(s.c.request_id).where(s.c.approvals > 0).order_by(s.c.seq))]
        return [st for rid in ids for st in self.states(request_id=rid)]

    def submitter(self, request_id: str) -> dict[str, Any]:
        """`submitters` of one request ({} when none is recorded)."""
        return self.submitters([request_id]).get(request_id, {})

    def states(
        self, states: Iterable[str] | None = None, lane: str | None = None, request_id: str | None = None
    ) -> list[RequestState]:
        """Every request with its latest state event, in submission order; optionally filtered by
        state, lane or id. Read from `gp_request_state` (one row per request, no regrouping of
        the event log); `states_from_log` is the same answer derived from the events.

        Two reads: first each matching row's version (its request's `seq` and its newest event's
        id, `last_event_id`: every event that touches a request moves it), then the whole row,
        and the payload, only for the rows not seen at that version before; the others are the
        RequestState built last time. A request with approvals is always read again (its
        approvals live in the event log)."""
        s = state_table
        filters = []
        if states is not None:
            filters.append(s.c.state.in_(tuple(states)))
        if lane is not None:
            filters.append(s.c.lane == lane)
        if request_id is not None:
            filters.append(s.c.request_id == request_id)
        versions = sa.select(s.c.request_id, s.c.seq, s.c.last_event_id, s.c.approvals).where(*filters).order_by(s.c.seq)
        cache = self._states
        if len(cache) > PARSED_CACHE_SIZE:
            cache.clear()
        with self.engine.connect() as conn:
            out: list[RequestState | None] = []
            todo: dict[str, int] = {}
            for rid, seq, last, approvals in conn.execute(versions).all():
                hit = cache.get(rid) if not approvals else None
                if hit is not None and hit[0] == (seq, last):
                    out.append(hit[1])
                else:
                    todo[rid] = len(out)
                    out.append(None)
            if todo:
                if len(todo) * 4 > len(out):
                    rows = conn.execute(self._full_rows().where(*filters)).all()
                else:
                    rows = [
                        row
                        for chunk in _chunks(list(todo))
                        for row in conn.execute(self._full_rows().where(*filters, s.c.request_id.in_(chunk)))
                    ]
                self._build_states(conn, [row for row in rows if row.request_id in todo], todo, out)
        # a row that left the filter between the two reads (another writer) is left out
        return [x for x in out if x is not None] if None in out else out  # type: ignore[return-value]

    @staticmethod
    def _full_rows() -> sa.Select:
        s, e = state_table, events_table
        c = e.alias("cluster_event")
        return sa.select(
            s.c.seq, s.c.request_id, s.c.submitted_at, s.c.state, s.c.reason, s.c.flavor, s.c.run_id,
            s.c.updated_at, s.c.details, s.c.attempts, s.c.approvals, s.c.preemptions, s.c.cluster_event_id,
            c.c.reason.label("c_reason"), c.c.at.label("c_at"), c.c.flavor.label("c_flavor"),
            c.c.details.label("c_details"), s.c.last_event_id,
        ).outerjoin(c, c.c.id == s.c.cluster_event_id)

    def _build_states(
        self, conn: sa.Connection, rows: list[sa.Row], todo: Mapping[str, int], out: list[RequestState | None]
    ) -> None:
        """The RequestStates of full state `rows` into `out` (at `todo[request_id]`), kept by version."""
        e = events_table
        cache = self._states
        # a request row never changes once written: a state row seen before under the same seq
        # (its request's row) keeps the request parsed then, and its payload is not read again
        known: dict[str, JobRequest] = {}
        for row in rows:
            hit = cache.get(row.request_id)
            if hit is not None and hit[0][0] == row.seq:
                known[row.request_id] = hit[1].request
        payloads = self._payloads(conn, [row.request_id for row in rows if row.request_id not in known])
        approvals: dict[str, list[dict[str, Any]]] = {}
        for chunk in _chunks([row.request_id for row in rows if row.approvals]):
            aq = sa.select(e.c.request_id, e.c.at, e.c.details).where(
                e.c.event == "approved", e.c.request_id.in_(chunk)
            ).order_by(e.c.id)
            for a in conn.execute(aq):
                approvals.setdefault(a.request_id, []).append(
                    {**(json.loads(a.details) if a.details else {}), "at": _utc(a.at).isoformat()}
                )
        for row in rows:
            req = known.get(row.request_id)
            if req is None:
                req = request_from_payload(row.request_id, payloads[row.request_id])
            state = self._state_of(row, req, approvals.get(row.request_id, ()))
            if not row.approvals:
                cache[row.request_id] = ((row.seq, row.last_event_id), state)
            out[todo[row.request_id]] = state

    @staticmethod
    def _state_of(row: sa.Row, request: JobRequest, approvals: Iterable[dict[str, Any]]) -> RequestState:
        return RequestState(
            seq=row.seq,
            request_id=row.request_id,
            request=request,
            state=row.state,
            reason=row.reason,
            flavor=row.flavor,
            run_id=row.run_id,
            submitted_at=_utc(row.submitted_at),
            updated_at=_utc(row.updated_at),
            attempts=row.attempts,
            details=json.loads(row.details) if row.details else {},
            cluster=None
            if row.cluster_event_id is None
            else {
                **(json.loads(row.c_details) if row.c_details else {}),
                "reason": row.c_reason,
                "at": _utc(row.c_at).isoformat(),
                "flavor": row.c_flavor,
            },
            approvals=tuple(approvals),
            preemptions=row.preemptions,
        )

    def states_from_log(
        self, states: Iterable[str] | None = None, lane: str | None = None, request_id: str | None = None
    ) -> list[RequestState]:
        """`states`, derived from the event log alone (each request's latest state event, its
        admissions counted, its latest `cluster` event and its approvals): what the state table
        must always equal. Regroups every event, so it costs what the state table saves; for
        checks, not for hot paths."""
        e = events_table
        latest = (
            sa.select(e.c.request_id, sa.func.max(e.c.id).label("last_id"))
            .where(e.c.event.not_in(INFO_EVENTS))
            .group_by(e.c.request_id)
            .subquery()
        )
        info = (
            sa.select(e.c.request_id, sa.func.max(e.c.id).label("info_id"))
            .where(e.c.event == "cluster")
            .group_by(e.c.request_id)
            .subquery()
        )
        admits = (
            sa.select(e.c.request_id, sa.func.count().label("n"))
            .where(e.c.event == "admitted")
            .group_by(e.c.request_id)
            .subquery()
        )
        preempts = (
            sa.select(e.c.request_id, sa.func.count().label("n"))
            .where(e.c.event == "preempted")
            .group_by(e.c.request_id)
            .subquery()
        )
        r = requests_table
        q = (
            sa.select(
                r.c.seq,
                r.c.request_id,
                r.c.payload,
                r.c.submitted_at,
                e.c.event,
                e.c.reason,
                e.c.flavor,
                e.c.run_id,
                e.c.at,
                e.c.details,
                sa.func.coalesce(admits.c.n, 0).label("attempts"),
                sa.func.coalesce(preempts.c.n, 0).label("preemptions"),
                info.c.info_id,
            )
            .join(latest, latest.c.request_id == r.c.request_id)
            .join(e, e.c.id == latest.c.last_id)
            .outerjoin(admits, admits.c.request_id == r.c.request_id)
            .outerjoin(preempts, preempts.c.request_id == r.c.request_id)
            .outerjoin(info, info.c.request_id == r.c.request_id)
            .order_by(r.c.seq)
        )
        wanted = tuple(states) if states is not None else None
        if wanted is not None:
            q = q.where(e.c.event.in_(wanted))
        if lane is not None:
            q = q.where(r.c.lane == lane)
        if request_id is not None:
            q = q.where(r.c.request_id == request_id)
        with self.engine.connect() as conn:
            rows = conn.execute(q).all()
            info_ids = [row.info_id for row in rows if row.info_id is not None]
            clusters = {}
            if info_ids:
                for c in conn.execute(
                    sa.select(e.c.id, e.c.reason, e.c.at, e.c.flavor, e.c.details).where(e.c.id.in_(info_ids))
                ):
                    clusters[c.id] = {
                        **(json.loads(c.details) if c.details else {}),
                        "reason": c.reason,
                        "at": _utc(c.at).isoformat(),
                        "flavor": c.flavor,
                    }
            approvals: dict[str, list[dict[str, Any]]] = {}
            wanted_ids = {row.request_id for row in rows}
            if wanted_ids:
                aq = sa.select(e.c.request_id, e.c.at, e.c.details).where(e.c.event == "approved").order_by(e.c.id)
                if request_id is not None:
                    aq = aq.where(e.c.request_id == request_id)
                for a in conn.execute(aq):
                    if a.request_id in wanted_ids:
                        approvals.setdefault(a.request_id, []).append(
                            {**(json.loads(a.details) if a.details else {}), "at": _utc(a.at).isoformat()}
                        )
        return [
            RequestState(
                seq=row.seq,
                request_id=row.request_id,
                request=JobRequest.from_json(row.payload),
                state=row.event,
                reason=row.reason,
                flavor=row.flavor,
                run_id=row.run_id,
                submitted_at=_utc(row.submitted_at),
                updated_at=_utc(row.at),
                attempts=row.attempts,
                details=json.loads(row.details) if row.details else {},
                cluster=clusters.get(row.info_id),
                approvals=tuple(approvals.get(row.request_id, ())),
                preemptions=row.preemptions,
            )
            for row in rows
        ]

    def requests(self, request_ids: list[str]) -> dict[str, JobRequest]:
        """The recorded requests among `request_ids` (unknown ids are left out)."""
        with self.engine.connect() as conn:
            return {rid: JobRequest.from_json(p) for rid, p in self._payloads(conn, request_ids).items()}

    def last_preemptions(self, request_ids: list[str]) -> dict[str, tuple[str, datetime]]:
        """victim -> (preemptor, at) of its latest `preempted` event, for those of `request_ids`
        that were ever preempted."""
        e = events_table
        out: dict[str, tuple[str, datetime]] = {}
        with self.engine.connect() as conn:
            for i in range(0, len(request_ids), 500):
                q = (
                    sa.select(e.c.request_id, e.c.at, e.c.details)
                    .where(e.c.event == "preempted", e.c.request_id.in_(request_ids[i : i + 500]))
                    .order_by(e.c.id)
                )
                for rid, at, details in conn.execute(q):
                    by = (json.loads(details) if details else {}).get("by")
                    if by:
                        out[rid] = (str(by), _utc(at))
        return out

    def state(self, request_id: str) -> RequestState:
        found = self.states(request_id=request_id)
        if found:
            return found[0]
        raise LedgerError(f"unknown request id {request_id!r}")

    def reserved_by_lane(self, since: datetime) -> dict[str, Decimal]:
        """max_cost reserved per lane by requests admitted at least once since `since` (each counted
        once): those whose latest admission is at or after `since`."""
        s = state_table
        q = (
            sa.select(s.c.lane, sa.func.sum(s.c.max_cost))
            .where(s.c.last_admitted_at >= _utc(since))
            .group_by(s.c.lane)
        )
        with self.engine.connect() as conn:
            return {lane: Decimal(str(total)) for lane, total in conn.execute(q)}

    def newest_event_id(self) -> int:
        """The id of the newest event (0: none): any write to the ledger's requests changes it."""
        with self.engine.connect() as conn:
            return int(conn.execute(sa.select(sa.func.max(events_table.c.id))).scalar() or 0)

    def count(self) -> tuple[int, int]:
        """(requests, events) row counts."""
        with self.engine.connect() as conn:
            n_req = conn.execute(sa.select(sa.func.count()).select_from(requests_table)).scalar_one()
            n_ev = conn.execute(sa.select(sa.func.count()).select_from(events_table)).scalar_one()
        return n_req, n_ev
