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
with the same id and the same content is answered with the existing id instead of a duplicate.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from gpu_platform.requests.model import FIELD_MAX_CHARS, MONEY_PRECISION, MONEY_SCALE, JobRequest

Event = Literal[
    "submitted", "waiting", "admitted", "preempted", "requeued", "finished", "failed", "rejected", "cluster", "approved"
]
EVENTS: tuple[str, ...] = Event.__args__
INFO_EVENTS = ("cluster", "approved")
"""Events that record what was observed without changing the request's state."""
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


metadata = sa.MetaData()

requests_table = sa.Table(
    "gp_requests",
    metadata,
    sa.Column("seq", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("request_id", sa.String(FIELD_MAX_CHARS["request_id"]), nullable=False, unique=True),
    sa.Column("submitted_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("lane", sa.String(FIELD_MAX_CHARS["lane"]), nullable=False, index=True),
    sa.Column("team", sa.String(FIELD_MAX_CHARS["team"]), nullable=False),
    sa.Column("cost_center", sa.String(FIELD_MAX_CHARS["cost_center"]), nullable=False),
    sa.Column("owner", sa.String(FIELD_MAX_CHARS["owner"]), nullable=False),
    sa.Column("workload", sa.String(FIELD_MAX_CHARS["workload"]), nullable=False),
    sa.Column("gpu_type", sa.String(FIELD_MAX_CHARS["gpu_type"]), nullable=False),
    sa.Column("gpu_count", sa.Integer, nullable=False),
    sa.Column("max_cost", sa.Numeric(MONEY_PRECISION, MONEY_SCALE), nullable=False),
    sa.Column("payload", sa.Text, nullable=False),
)

events_table = sa.Table(
    "gp_request_events",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("request_id", sa.String(200), sa.ForeignKey("gp_requests.request_id"), nullable=False, index=True),
    sa.Column("event", sa.String(16), nullable=False),
    sa.Column("at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("reason", sa.Text, nullable=False, default=""),
    sa.Column("flavor", sa.String(64)),
    sa.Column("run_id", sa.String(64)),
    sa.Column("details", sa.Text),
)


unmatched_table = sa.Table(
    "gp_cluster_unmatched",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("observed_at", sa.DateTime(timezone=True), nullable=False, index=True),
    sa.Column("namespace", sa.String(253), nullable=False),
    sa.Column("job", sa.String(253), nullable=False),
    sa.Column("request_id", sa.String(200), nullable=False, index=True),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("kind", sa.String(32), nullable=False),
    sa.Column("why", sa.Text, nullable=False),
    sa.Column("condition", sa.String(32), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("kueue_reason", sa.String(200), nullable=False, default=""),
    sa.Column("message", sa.Text, nullable=False, default=""),
    sa.Column("flavor", sa.String(64)),
    sa.Column("cluster_queue", sa.String(253)),
)
"""Jobs on the cluster carrying a request id the ledger cannot match to a pending or running
request's current attempt (`cluster.readback.unmatched`), one row each time what the cluster
says about such a Job changes. No foreign key: the request id may be one the ledger never saw.
kind: `unknown_request` (never submitted through the gate), `ended_request` (the request is
finished, failed or rejected), `superseded_attempt` (a Job of an attempt other than the current
one). The bypass scorecard counts them."""

UNMATCHED_KINDS = ("unknown_request", "ended_request", "superseded_attempt")
UNMATCHED_COLUMNS = (
    "namespace", "job", "request_id", "attempt", "kind", "why", "condition", "status", "kueue_reason", "message",
    "flavor", "cluster_queue",
)


@dataclass(frozen=True, slots=True)
class RequestState:
    """A request with its latest state event. `attempts` counts admissions (1 for a first launch).

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
    for attempt in range(attempts):
        try:
            meta.create_all(engine, checkfirst=True)
            return
        except (sa.exc.OperationalError, sa.exc.ProgrammingError, sa.exc.IntegrityError) as exc:
            if attempt == attempts - 1 or not any(m in str(exc.orig) for m in _CREATE_RACE):
                raise
            time.sleep(min(0.5, 0.02 * (attempt + 1)))


class Ledger:
    """Append-only request ledger over one SQLAlchemy engine."""

    def __init__(self, url: str | None = None, engine: sa.Engine | None = None):
        self.url = url or default_ledger_url()
        self.engine = engine or _make_engine(self.url)
        self.metadata = metadata
        create_tables(metadata, self.engine)

    def _row(self, request: JobRequest, request_id: str, now: datetime) -> dict[str, Any]:
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

    def submit(self, request: JobRequest, at: datetime | None = None) -> str:
        """Append a validated request and its `submitted` event; return its id.

        A request that carries its own `request_id` is idempotent: submitting the same content
        again returns the same id; different content under an existing id raises LedgerError.
        """
        try:
            return self.submit_batch([request], at=at)[0]
        except BatchConflict as exc:
            raise LedgerError(exc.conflicts[0][1]) from exc

    def submit_many(self, requests: Iterable[JobRequest]) -> list[str]:
        return self.submit_batch(list(requests))

    def submit_batch(
        self,
        requests: list[JobRequest],
        sources: list[str] | None = None,
        at: datetime | None = None,
    ) -> list[str]:
        """Record every request in one transaction, or none; return their ids in order.

        Requests without `request_id` get a new random id. One whose id is already recorded
        with the same content (its `name` aside: a label, the first one recorded stays) is answered with that id (nothing new is written), so a batch
        interrupted before its commit, or committed, can be re-run without duplicates. One whose
        id exists with other content, or that appears twice in the batch with different
        content, makes the whole batch fail with BatchConflict naming its source (`sources[i]`,
        default `request i`); nothing of the batch is then recorded.
        """
        sources = sources or [f"request {i}" for i in range(len(requests))]
        now = _utc(at or datetime.now(UTC))
        ids: list[str] = []
        wanted: dict[str, tuple[JobRequest, str]] = {}
        conflicts: list[tuple[str, str]] = []
        for request, source in zip(requests, sources, strict=True):
            request_id = request.request_id or new_request_id()
            request = request.model_copy(update={"request_id": request_id})
            ids.append(request_id)
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
                    existing = self._payloads(conn, list(wanted))
                    for request_id, (request, source) in wanted.items():
                        if request_id in existing and not same_job(JobRequest.from_json(existing[request_id]), request):
                            conflicts.append((source, f"request_id {request_id!r} already exists with different content"))
                    if conflicts:
                        raise BatchConflict(conflicts)
                    new = [(rid, req) for rid, (req, _src) in wanted.items() if rid not in existing]
                    if new:
                        conn.execute(requests_table.insert(), [self._row(req, rid, now) for rid, req in new])
                        conn.execute(
                            events_table.insert(),
                            [{"request_id": rid, "event": "submitted", "at": now, "reason": "validated"} for rid, _ in new],
                        )
                return ids
            except IntegrityError:
                # A concurrent submitter recorded one of these ids between our read and insert:
                # the transaction rolled back as a whole; read again and decide again.
                if attempt == 2:
                    raise
        return ids

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
                conn.execute(events_table.insert(), values)
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

    def states(
        self, states: Iterable[str] | None = None, lane: str | None = None, request_id: str | None = None
    ) -> list[RequestState]:
        """Every request with its latest event, in submission order; optionally filtered."""
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
                info.c.info_id,
            )
            .join(latest, latest.c.request_id == r.c.request_id)
            .join(e, e.c.id == latest.c.last_id)
            .outerjoin(admits, admits.c.request_id == r.c.request_id)
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
        """max_cost reserved per lane by requests admitted at least once since `since` (each counted once)."""
        e, r = events_table, requests_table
        admitted = sa.select(e.c.request_id).where(e.c.event == "admitted", e.c.at >= _utc(since)).distinct().subquery()
        q = (
            sa.select(r.c.lane, sa.func.sum(r.c.max_cost))
            .join(admitted, admitted.c.request_id == r.c.request_id)
            .group_by(r.c.lane)
        )
        with self.engine.connect() as conn:
            return {lane: Decimal(str(total)) for lane, total in conn.execute(q)}

    def count(self) -> tuple[int, int]:
        """(requests, events) row counts."""
        with self.engine.connect() as conn:
            n_req = conn.execute(sa.select(sa.func.count()).select_from(requests_table)).scalar_one()
            n_ev = conn.execute(sa.select(sa.func.count()).select_from(events_table)).scalar_one()
        return n_req, n_ev
