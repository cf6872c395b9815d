"""The gate's last view of each lane, kept in the ledger database for readers without Dagster.

Only the admission sensor knows which admitted requests have a live Dagster run; it writes its
per-lane counts here at the end of every tick (one row per lane, replaced in one transaction),
so `/metrics` can report `running` and how old the gate's view is. The table lives beside the
ledger's tables (same SQLite file or PostgreSQL database) but is not part of the ledger: it
holds no history and may be dropped at any time.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

import sqlalchemy as sa

from gpu_platform.observe.queueview.snapshot import LaneSnapshot
from gpu_platform.requests.ledger import create_tables

_metadata = sa.MetaData()
gate_lanes_table = sa.Table(
    "gp_gate_lanes",
    _metadata,
    sa.Column("lane", sa.String(64), primary_key=True),
    sa.Column("at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("pending", sa.Integer, nullable=False),
    sa.Column("admitted", sa.Integer, nullable=False),
    sa.Column("running", sa.Integer, nullable=False),
)


@dataclass(frozen=True, slots=True)
class GateLane:
    lane: str
    at: datetime
    pending: int
    admitted: int
    running: int


def write_gate_snapshot(engine: sa.Engine, snapshots: Iterable[LaneSnapshot], at: datetime) -> None:
    """Replace the stored per-lane view with this tick's (lanes without `running` store 0)."""
    create_tables(_metadata, engine)
    rows = [
        {"lane": s.lane, "at": at, "pending": s.pending, "admitted": s.admitted, "running": s.running or 0}
        for s in snapshots
    ]
    with engine.begin() as conn:
        conn.execute(gate_lanes_table.delete())
        if rows:
            conn.execute(gate_lanes_table.insert(), rows)


def read_gate_snapshot(engine: sa.Engine) -> dict[str, GateLane]:
    """The last tick's view per lane; empty when the gate has not run against this database (the
    table is missing: read and told so by the database, not inspected first, on every scrape)."""
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.select(gate_lanes_table)).all()
    except (sa.exc.OperationalError, sa.exc.ProgrammingError) as exc:
        if not sa.inspect(engine).has_table(gate_lanes_table.name):
            return {}
        raise exc
    out = {}
    for row in rows:
        at = row.at if row.at.tzinfo else row.at.replace(tzinfo=UTC)
        out[row.lane] = GateLane(row.lane, at, row.pending, row.admitted, row.running)
    return out
