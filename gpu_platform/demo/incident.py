"""When the live demo's incident arrives: once it would preempt a research sweep trial that runs.

`demo run` submits `examples/demo/incident_sev1.yaml` (16 H100s) so that a watcher sees research
preempted: a Canceled run naming its preemptor and the checkpoint it resumes from. Whether the
incident preempts anyone depends on what holds the H100s at that moment (the live requests
finish at different times, and lanes with quota take back the H100s research borrowed, so a
trial may be requeued), so the demo does not guess: it asks the gate's own planning (`plan_tick`, a dry
run that records nothing) what the incident would do if it were submitted now, and submits it
when the answer preempts at least one sweep trial, every run it would stop has written a
checkpoint (it is under way and resumes from that checkpoint), and no sweep trial still waits.
The last condition keeps the answer true until the gate's next tick: Kueue's victim order takes
the newest admission of the lowest priority first, so a trial admitted in between (one that has
not started, with nothing to resume from) would be the victim instead.

The incident's `approver` is a nomination (docs/approvals.md): the demo plays the nominated
safety owner too, granting the break-glass approval as they would with `gpu-platform approve`,
recorded with identity source `demo` (`submit_incident`), so the gate admits it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from decimal import Decimal

from gpu_platform.gate.tick import plan_tick
from gpu_platform.policy import Policy
from gpu_platform.requests.ledger import ACTIVE_STATES, PENDING_STATES, Ledger, RequestState
from gpu_platform.requests.model import JobRequest


def would_preempt(
    policy: Policy,
    states: Iterable[RequestState],
    incident: JobRequest,
    targets: Iterable[str],
    checkpointed: Callable[[str], bool],
    now: datetime | None = None,
    spent: Mapping[str, Decimal] | None = None,
) -> list[str]:
    """The `targets` (request ids) that the gate would preempt for `incident` were it pending now,
    when every request it would preempt has a checkpoint and no target is pending; empty otherwise
    (it fits, or it would take GPUs only from others, a victim has not checkpointed yet, or a
    target still waits and could be admitted, and so become the newest victim, before the tick).

    states: the ledger's pending and admitted requests (`Ledger.states`); the incident must not be
    among them (it has not been submitted). checkpointed: whether a request has a confirmed
    checkpoint (`has_checkpoint` under the work root), as the gate's tick is told. spent: the
    budget reserved per lane this period (`Ledger.reserved_by_lane`), as the gate's tick is told,
    so a request that waits on its budget stays out of the dry run as it stays out of the gate's.
    """
    now = now or datetime.now(UTC)
    live = [s for s in states if s.state in (*PENDING_STATES, *ACTIVE_STATES)]
    rid = incident.request_id or "demo-incident"
    hypothetical = RequestState(
        seq=max((s.seq for s in live), default=0) + 1,
        request_id=rid,
        request=incident,
        state="submitted",
        reason="",
        flavor=None,
        run_id=None,
        submitted_at=now,
        updated_at=now,
        attempts=0,
        details={},
        approvals=({**demo_approval(incident), "at": now.isoformat()},),
    )
    wanted = set(targets)
    if any(s.request_id in wanted and s.state in PENDING_STATES for s in live):
        return []
    plan = plan_tick(policy, [*live, hypothetical], now, checkpointed=checkpointed, spent=spent)
    victims = {p.victim for p in plan.preemptions if p.preemptor == rid}
    if not victims & wanted or not all(checkpointed(v) for v in victims):
        return []
    return sorted(victims & wanted)


DEMO_IDENTITY_SOURCE = "demo"


def demo_approval(incident: JobRequest) -> dict[str, object]:
    """The break-glass grant the demo records for its incident: by the approver it nominates,
    as the roster role `safety-owner` (the `approved` event's details)."""
    return {
        "kind": "incident", "role": "safety-owner", "approver": incident.approver or "",
        "reason": f"demo: {incident.incident_id or 'incident'} opened by the nominated safety owner",
        "identity_source": DEMO_IDENTITY_SOURCE, "verified": True,
    }


def submit_incident(ledger: Ledger, incident: JobRequest) -> str:
    """Submit the demo's incident and record its nominated approver's grant; return its id."""
    rid = ledger.submit(incident)
    approve_nominated(ledger, [incident], [rid])
    return rid


def approve_nominated(ledger: Ledger, requests: list[JobRequest], ids: list[str]) -> None:
    """Record the nominated approver's grant for each incident request among `requests` (recorded
    under `ids`) that has none yet: the demo plays the safety owner."""
    for req, rid in zip(requests, ids, strict=True):
        if req.lane != "incident_response" or not req.approver:
            continue
        if any(a.get("kind") == "incident" for a in ledger.state(rid).approvals):
            continue
        details = demo_approval(req)
        ledger.record(rid, "approved", f"incident approval by {details['approver']} (safety-owner): {details['reason']}",
                      details=details)
