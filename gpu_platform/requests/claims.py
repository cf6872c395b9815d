"""Who may produce an output artifact id: its team, from the first request that claimed it.

An `output_artifact_ids` entry is a claim. The first request recorded with an id makes the id its
team's (`gp_artifact_claims`: id -> team, first request, its owner): later requests of the same
team may name it again (a re-run under a new id, `submit --again`), a request of any other team
is refused at submit, naming the team, the request and the owner that hold it. The claim is
taken in the transaction that records the request, so two teams racing for one id cannot both
win (the loser's insert fails on the primary key; the batch is decided again and refused).

Why the team and not the single request: a request that failed is run again under a new id and
must produce the same artifact; team membership is what a verified identity proves (issue 42,
parts 1-2). Within a team, lineage takes an artifact from the producer that finished
(`gpu_platform.lineage.graph.resolve_parents`).

Requests recorded without a claim (written before claims existed, or by the demo's history
writer straight into `gp_requests`) are read back first, in `seq` order, so their ids are claimed
by whoever recorded them first; the row with artifact_id "" remembers how far that got.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa

from gpu_platform.requests.model import JobRequest
from gpu_platform.requests.schema import artifact_claims_table, requests_table

_MARK = ""
_CHUNK = 500


def _catch_up(conn: sa.Connection, now: datetime) -> None:
    """Claim the ids of requests recorded since the last catch-up (first recorded wins)."""
    c, r = artifact_claims_table, requests_table
    mark_row = conn.execute(sa.select(c.c.request_id).where(c.c.artifact_id == _MARK)).first()
    mark = int(mark_row.request_id) if mark_row is not None else 0
    rows = conn.execute(
        sa.select(r.c.seq, r.c.request_id, r.c.team, r.c.owner, r.c.payload).where(r.c.seq > mark).order_by(r.c.seq)
    ).all()
    if not rows:
        return
    wanted: dict[str, dict[str, object]] = {}
    for row in rows:
        try:
            outputs = json.loads(row.payload).get("output_artifact_ids") or []
        except (ValueError, AttributeError):
            outputs = []
        for a in outputs:
            if isinstance(a, str) and a and a not in wanted:
                wanted[a] = {"artifact_id": a, "team": row.team, "request_id": row.request_id,
                             "owner": row.owner, "claimed_at": now}
    ids = list(wanted)
    for i in range(0, len(ids), _CHUNK):
        chunk = ids[i:i + _CHUNK]
        held = set(conn.execute(sa.select(c.c.artifact_id).where(c.c.artifact_id.in_(chunk))).scalars())
        new = [wanted[a] for a in chunk if a not in held]
        if new:
            conn.execute(c.insert(), new)
    top = str(rows[-1].seq)
    if mark_row is None:
        conn.execute(c.insert().values(artifact_id=_MARK, team="", request_id=top, owner="", claimed_at=now))
    else:
        conn.execute(c.update().where(c.c.artifact_id == _MARK).values(request_id=top, claimed_at=now))


def claim_artifacts(
    conn: sa.Connection, new: Sequence[tuple[str, str, JobRequest]], now: datetime
) -> list[tuple[str, str]]:
    """Claim each new request's output artifact ids for its team, in the caller's transaction.

    new: (source, request id to record, request). Returns (source, problem) for every id another
    team holds (or that an earlier request of the same batch, of another team, claims); nothing
    is claimed then, and the caller records nothing."""
    if not any(req.output_artifact_ids for _src, _rid, req in new):
        return []
    c = artifact_claims_table
    _catch_up(conn, now)
    ids = sorted({a for _src, _rid, req in new for a in req.output_artifact_ids})
    held: dict[str, sa.Row] = {}
    for i in range(0, len(ids), _CHUNK):
        for row in conn.execute(sa.select(c).where(c.c.artifact_id.in_(ids[i:i + _CHUNK]))):
            held[row.artifact_id] = row
    refused: list[tuple[str, str]] = []
    claims: dict[str, dict[str, object]] = {}
    for src, rid, req in new:
        team = req.team or ""
        for a in req.output_artifact_ids:
            row = held.get(a)
            if row is not None:
                if row.team != team:
                    refused.append((src, _held_line(a, row.team, row.request_id, row.owner)))
                continue
            first = claims.get(a)
            if first is None:
                claims[a] = {"artifact_id": a, "team": team, "request_id": rid, "owner": req.owner or "",
                             "claimed_at": now}
            elif first["team"] != team:
                refused.append((src, _held_line(a, str(first["team"]), str(first["request_id"]), str(first["owner"]))))
    if refused:
        return refused
    if claims:
        conn.execute(c.insert(), list(claims.values()))
    return []


def _held_line(artifact_id: str, team: str, request_id: str, owner: str) -> str:
    return (
        f"output_artifact_ids: {artifact_id!r} belongs to team {team} (first claimed by request {request_id}, "
        f"owner {owner}); another team may not produce it: choose another id, or ask {owner} to produce it"
    )


def claim_of(conn: sa.Connection, artifact_id: str) -> tuple[str, str, str] | None:
    """(team, first request id, owner) holding `artifact_id`, or None when unclaimed."""
    c = artifact_claims_table
    row = conn.execute(sa.select(c).where(c.c.artifact_id == artifact_id)).first()
    return None if row is None or artifact_id == _MARK else (row.team, row.request_id, row.owner)
