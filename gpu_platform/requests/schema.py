"""The ledger's tables (SQLAlchemy Core): requests, events, the folded state, artifact claims and
Kueue's Jobs the ledger could not match. Below `ledger` and `claims`, which both use them, so
neither imports the other back; imports SQLAlchemy only."""

from __future__ import annotations

import sqlalchemy as sa

from gpu_platform.requests.model import FIELD_MAX_CHARS, MONEY_PRECISION, MONEY_SCALE, NAME_MAX_CHARS

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


_ID_TYPE = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

state_table = sa.Table(
    "gp_request_state",
    metadata,
    sa.Column("request_id", sa.String(200), sa.ForeignKey("gp_requests.request_id"), primary_key=True),
    sa.Column("seq", _ID_TYPE, nullable=False, unique=True),
    sa.Column("lane", sa.String(FIELD_MAX_CHARS["lane"]), nullable=False),
    sa.Column("team", sa.String(FIELD_MAX_CHARS["team"]), nullable=False),
    sa.Column("owner", sa.String(FIELD_MAX_CHARS["owner"]), nullable=False),
    sa.Column("name", sa.String(NAME_MAX_CHARS)),
    sa.Column("gpu_type", sa.String(FIELD_MAX_CHARS["gpu_type"]), nullable=False),
    sa.Column("gpu_count", sa.Integer, nullable=False),
    sa.Column("max_cost", sa.Numeric(MONEY_PRECISION, MONEY_SCALE), nullable=False),
    sa.Column("expected_duration_s", sa.Float),
    sa.Column("submitted_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("reason", sa.Text, nullable=False, default=""),
    sa.Column("reason_code", sa.String(64), nullable=False, default=""),
    sa.Column("flavor", sa.String(64)),
    sa.Column("run_id", sa.String(64)),
    sa.Column("details", sa.Text),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("state_event_id", _ID_TYPE, nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False, default=0),
    sa.Column("preemptions", sa.Integer, nullable=False, default=0),
    sa.Column("rejections", sa.Integer, nullable=False, default=0),
    sa.Column("approvals", sa.Integer, nullable=False, default=0),
    sa.Column("cluster_event_id", _ID_TYPE),
    sa.Column("first_admitted_id", _ID_TYPE),
    sa.Column("first_admitted_at", sa.DateTime(timezone=True), index=True),
    sa.Column("last_admitted_at", sa.DateTime(timezone=True), index=True),
    sa.Column("last_event_id", _ID_TYPE, nullable=False),
    # what `/metrics` groups the queue by, readable from the index alone (no row lookups)
    sa.Index("ix_gp_request_state_queue", "state", "lane", "gpu_type", "reason_code", "gpu_count", "submitted_at"),
    # the few requests ever preempted or rejected, for the per-lane counters
    sa.Index(
        "ix_gp_request_state_counted",
        "lane", "preemptions", "rejections",
        sqlite_where=sa.text("preemptions > 0 or rejections > 0"),
        postgresql_where=sa.text("preemptions > 0 or rejections > 0"),
    ),
    # each row's version by state, for `Ledger.states`' first read: from the index alone
    sa.Index("ix_gp_request_state_versions", "state", "seq", "request_id", "last_event_id", "approvals"),
)
"""One row per request: its latest state event (`state` ... `updated_at`, `state_event_id`: that
event's id; `reason_code`: the Kueue-style code its reason begins with, `""` when none) and
what the views need without the event log: the request's own columns (and its
`name` and `expected_duration` in seconds, from the payload), counts of its `admitted`
(`attempts`), `preempted`, `rejected` and `approved` events, its latest `cluster` event's id, its
first admission (id and time) and latest admission time, and its newest event of any kind.
Written in the transaction of each event that touches it, never on its own: a failed event
insert changes no state. Derived data: `backfill_state` rebuilds missing rows from the events."""


artifact_claims_table = sa.Table(
    "gp_artifact_claims",
    metadata,
    sa.Column("artifact_id", sa.String(200), primary_key=True),
    sa.Column("team", sa.String(FIELD_MAX_CHARS["team"]), nullable=False),
    sa.Column("request_id", sa.String(FIELD_MAX_CHARS["request_id"]), nullable=False),
    sa.Column("owner", sa.String(FIELD_MAX_CHARS["owner"]), nullable=False),
    sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=False),
)
"""Who an output artifact id belongs to: the team of the first request that claimed it
(`gpu_platform.requests.claims`). One row per id; the row with artifact_id "" (never an id)
holds, in `request_id`, the last `gp_requests.seq` whose claims were read back from payloads."""


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
finished, failed or rejected), `superseded_attempt` (a Job of an attempt before the current
one), `ahead_attempt` (a Job of an attempt after the ledger's current one: the ledger records no
launch of it). The bypass scorecard counts them."""

UNMATCHED_KINDS = ("unknown_request", "ended_request", "superseded_attempt", "ahead_attempt")
UNMATCHED_COLUMNS = (
    "namespace", "job", "request_id", "attempt", "kind", "why", "condition", "status", "kueue_reason", "message",
    "flavor", "cluster_queue",
)
