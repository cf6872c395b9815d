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

The event fold lives in `events.py`, ids and the resubmission rule in `submission.py`, the
database in `ledger_db.py` (all re-exported here). This module is the `Ledger` class alone, about
800 lines, kept whole: each method is one read or one write over the same four tables.
May import `requests/events.py`, `submission.py`, `ledger_db.py`, `model.py`, `schema.py`, `claims.py`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from gpu_platform.requests.events import (  # noqa: F401 (kept import paths)
    _STATE_UPDATE,
    ACTIVE_STATES,
    EVENTS,
    INFO_EVENTS,
    PENDING_STATES,
    TERMINAL_STATES,
    Event,
    EventRow,
    RequestState,
    _fold,
    _state_row,
    _utc,
    reason_code,
)
from gpu_platform.requests.ledger_db import (  # noqa: F401 (kept import paths)
    _VERSIONS_INDEX,
    PARSED_CACHE_SIZE,
    _chunks,
    _create_index,
    _make_engine,
    create_tables,
    default_ledger_url,
    request_from_payload,
)
from gpu_platform.requests.model import JobRequest
from gpu_platform.requests.schema import (  # noqa: F401 (kept import paths)
    UNMATCHED_COLUMNS,
    UNMATCHED_KINDS,
    events_table,
    metadata,
    requests_table,
    state_table,
    unmatched_table,
)
from gpu_platform.requests.submission import (  # noqa: F401 (kept import paths)
    UNVERIFIED_MARK,
    BatchConflict,
    LedgerError,
    Outcome,
    RecordedRun,
    RequestEnded,
    Submission,
    Submitter,
    SubmitterRefused,
    check_submitter,
    content_request_id,
    decide_submission,
    ended_line,
    new_request_id,
    run_request_id,
    same_job,
    submitter_line,
)


def _insert_events(conn: sa.Connection, values: list[dict[str, Any]]) -> None:
    """Insert events and bring their requests' state rows up to date, in the caller's transaction."""
    if not values:
        return
    ids = conn.execute(events_table.insert().returning(events_table.c.id, sort_by_parameter_order=True), values).scalars().all()
    conn.execute(_STATE_UPDATE, list(_fold({**v, "id": i} for v, i in zip(values, ids, strict=True)).values()))


RUN_PROBE = 8
"""Run ids looked up at once per request whose runs are being followed (`_latest_runs`)."""


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
