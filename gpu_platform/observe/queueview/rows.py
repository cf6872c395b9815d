"""`gpu-platform queue`: each request with its position, reason and estimated start.

Positions and reasons recorded by the gate can be a tick old, and the gate records a waiting
row only when the reason or position changes, so the recorded estimate drifts. The queue view
therefore asks the engine again: `dry_run` plans a tick on the ledger's current state without
recording anything, exactly as the next gate tick would (same budget reservations, same
checkpoints), and every pending request gets the engine's current position, reason and
estimated start. A request the dry run would admit shows "admissible at the next gate tick".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpu_platform.gate.blockers import latest_checkpoint, preemptions_of
from gpu_platform.gate.checkpoints import checkpoint_dir, has_checkpoint
from gpu_platform.gate.tick import TickPlan, budget_period_start, plan_tick
from gpu_platform.policy import Policy
from gpu_platform.requests.ledger import PENDING_STATES, Ledger, RequestState


@dataclass(frozen=True, slots=True)
class QueueRow:
    """One request in the queue view. position/of/estimated_start=None: not pending, or no
    estimate possible (over budget, larger than the lane can ever hold, nothing running ends)."""

    request_id: str
    lane: str
    team: str
    state: str
    gpus: int
    flavor: str | None
    position: int | None
    of: int | None
    reason: str
    reason_code: str | None
    estimated_start: datetime | None
    attempts: int
    updated_at: datetime
    cluster: dict[str, Any] | None = None
    """What Kueue last said about the request's Job on a cluster (reason, message, flavor)."""
    name: str = ""
    """The request's human name (`JobRequest.display_name`)."""
    owner: str = ""
    target: str = ""
    """What the request works on (`JobRequest.target`: a candidate, release packet, experiment...)."""
    aging: dict[str, Any] | None = None
    """A waiting request's priority boost from its lane's aging (`explain.aging_of`: boost,
    effective priority, next step); None when not computed or not waiting."""

    def to_json(self) -> dict[str, Any]:
        return {
            "request_id": self.request_id,
            "name": self.name,
            "owner": self.owner,
            "target": self.target,
            "lane": self.lane,
            "team": self.team,
            "state": self.state,
            "reason": self.reason,
            "reason_code": self.reason_code,
            "flavor": self.flavor,
            "gpus": self.gpus,
            "attempts": self.attempts,
            "position": self.position,
            "of": self.of,
            "estimated_start": self.estimated_start.isoformat() if self.estimated_start else None,
            "updated_at": self.updated_at.isoformat(),
            "cluster": self.cluster,
            "aging": self.aging,
        }


def dry_run(
    policy: Policy, ledger: Ledger, states: list[RequestState], now: datetime, home: Path, on_cluster: bool = False
) -> TickPlan:
    """The next gate tick's decisions on the current ledger, recorded nowhere. on_cluster: the
    gate runs with the k8s executor, so it places gangs on the policy's nodes (node model), as
    `assets/gate.py` does."""
    return plan_tick(
        policy,
        states,
        now,
        node_model=on_cluster,
        checkpointed=lambda rid: has_checkpoint(checkpoint_dir(home, rid)),
        spent=ledger.reserved_by_lane(budget_period_start(policy.budget_period, now)),
        preempted=preemptions_of(ledger, states),
        checkpoint_of=lambda rid: latest_checkpoint(checkpoint_dir(home, rid)),
    )


def queue_rows(
    states: Iterable[RequestState],
    plan: TickPlan | None,
    now: datetime,
    *,
    owner: str | None = None,
    team: str | None = None,
    policy: Policy | None = None,
) -> list[QueueRow]:
    """Rows by lane (admitted first, then queue position, then submission order).

    plan: a dry run on these states (None: the reasons and positions the gate last recorded); it
    must cover the whole queue even when `owner` / `team` keep only some rows, since a request's
    position depends on every request ahead of it.
    owner / team: keep only the requests of that owner / team (exact match).
    policy: with it, each waiting request carries its aging (`QueueRow.aging`): the priority boost
    it has earned by waiting, which moves it ahead of its lane's younger requests.
    """
    from gpu_platform.observe.queueview.explain import aging_of

    states = [
        s
        for s in states
        if (owner is None or s.request.owner == owner) and (team is None or s.request.team == team)
    ]
    waits = {w.name: w for w in plan.waits} if plan is not None else {}
    launches = {x.request_id: x for x in plan.launches} if plan is not None else {}
    rows = []
    for s in states:
        pos = of = est = code = None
        reason, flavor = s.reason, s.flavor
        if s.state in PENDING_STATES:
            if s.request_id in launches:
                launch = launches[s.request_id]
                reason = f"admissible at the next gate tick: {launch.message or 'QuotaReserved on ' + launch.flavor}"
                code, est, flavor = "Admissible", now, launch.flavor
            elif s.request_id in waits:
                w = waits[s.request_id]
                reason, code = w.message, w.reason_code
                pos, of = (w.position, w.of) if w.position else (None, None)
                est = datetime.fromtimestamp(w.estimated_start, UTC) if w.estimated_start is not None else None
                flavor = w.flavor
            else:
                pos, of = s.details.get("position"), s.details.get("of")
                code = s.details.get("reason_code")
                recorded = s.details.get("estimated_start")
                est = datetime.fromisoformat(recorded) if recorded else None
        rows.append(
            QueueRow(
                s.request_id,
                s.request.lane or "",
                s.request.team or "",
                s.state,
                int(s.request.gpu_count or 0),
                flavor,
                pos,
                of,
                reason,
                code,
                est,
                s.attempts,
                s.updated_at,
                getattr(s, "cluster", None),
                name=s.request.name or s.request_id,
                owner=s.request.owner or "",
                target=s.request.target,
                aging=aging_of(policy, s, now) if policy is not None and s.state in PENDING_STATES else None,
            )
        )
    rows.sort(key=lambda r: (r.lane, r.state not in ("admitted",), r.position or 1 << 30))
    return rows
