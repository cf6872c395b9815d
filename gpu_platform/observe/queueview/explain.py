"""`gpu-platform explain REQUEST_ID`: one request's whole decision history from the ledger.

Every event of the request in order, with its reason, queue position, flavor, who preempted it
(or whom it preempted), and the policy rule that applied, named by its path in the policy file
(`lanes.release_eval.preemption.reclaim_within_cohort = LowerPriority`), so a person can open
the policy and find the line that decided.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from gpu_platform.admission.kueue_checks import check_origin
from gpu_platform.cluster.names import site_of_cluster
from gpu_platform.finops.budgets import RULE as BUDGET_RULE
from gpu_platform.finops.budgets import cost_exception_command
from gpu_platform.policy import GPU, Policy
from gpu_platform.requests.approvals import honoured, roster_errors
from gpu_platform.requests.ledger import Ledger, RequestState, events_table, requests_table

_PREEMPTION_KNOB = {
    "InClusterQueue": "within_cluster_queue",
    "InCohortReclamation": "reclaim_within_cohort",
    "InCohortReclaimWhileBorrowing": "borrow_within_cohort",
}


@dataclass(frozen=True, slots=True)
class Step:
    """One decision. preempted_by: the preemptor of a `preempted` event; victims: requests this
    request preempted to make room (shown on its next admission or preemption wait)."""

    at: datetime
    event: str
    reason: str
    position: int | None
    of: int | None
    flavor: str | None
    run_id: str | None
    preempted_by: str | None
    victims: tuple[str, ...]
    rule: str
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "at": self.at.isoformat(),
            "event": self.event,
            "reason": self.reason,
            "position": self.position,
            "of": self.of,
            "flavor": self.flavor,
            "run_id": self.run_id,
            "preempted_by": self.preempted_by,
            "victims": list(self.victims),
            "rule": self.rule,
            "details": self.details,
        }


@dataclass(frozen=True, slots=True)
class Explanation:
    request_id: str
    lane: str
    team: str
    gpus: int
    gpu_type: str
    state: str
    steps: list[Step]
    approvals: list[dict[str, Any]] = field(default_factory=list)
    """Every approval recorded for the request (kind, role, approver, reason, at, honoured now)."""
    name: str = ""
    owner: str = ""
    target: str = ""
    admission_checks: list[dict[str, Any]] = field(default_factory=list)
    """Kueue's admission checks on the request's Workload as last read back (`cluster sync`):
    name, state (Pending, Ready, Retry, Rejected), message and the policy lines the check comes from."""
    budgets: list[dict[str, Any]] = field(default_factory=list)
    """The request's lane and team budgets, the gate's (reservations at admission, which admits)
    beside FinOps' (measured spend, `budget_burn`; None without a warehouse): `finops.budgets`."""
    cost_exception: str = ""
    """The command that grants this request a cost exception (empty: its lane has no budget)."""
    aging: dict[str, Any] | None = None
    """The request's priority boost (`aging_of`); None once it has ended."""

    def to_json(self) -> dict[str, Any]:
        return {
            "aging": self.aging,
            "admission_checks": self.admission_checks,
            "approvals": self.approvals,
            "request_id": self.request_id,
            "name": self.name,
            "owner": self.owner,
            "target": self.target,
            "lane": self.lane,
            "team": self.team,
            "gpus": self.gpus,
            "gpu_type": self.gpu_type,
            "state": self.state,
            "steps": [s.to_json() for s in self.steps],
            "budgets": self.budgets,
            "budget_rule": BUDGET_RULE if self.budgets else None,
            "cost_exception": self.cost_exception or None,
        }


def _quota_text(policy: Policy, lane_name: str, flavor: str | None) -> str:
    lane = policy.lanes.get(lane_name)
    if lane is None:
        return f"lanes.{lane_name}: not in the current policy"
    parts = []
    for i, q in enumerate(lane.quotas):
        if q.resource != GPU or (flavor is not None and q.flavor_name != flavor):
            continue
        borrow = "none (no limit)" if q.borrowing_limit is None else f"{q.borrowing_limit:g}"
        parts.append(f"lanes.{lane_name}.quotas[{i}] {q.flavor_name}: nominal_quota={q.nominal_quota:g}, borrowing_limit={borrow}")
    cohort = f" in cohort {lane.cohort_name}" if lane.cohort_name else ""
    return ("; ".join(parts) or f"lanes.{lane_name}.quotas: no GPU quota on {flavor}") + cohort


def rule_for(
    policy: Policy,
    lane_name: str,
    event: str,
    details: dict[str, Any],
    preemptor_lane: str | None = None,
    flavor: str | None = None,
) -> str:
    """The policy rule behind one ledger event, as `path = value` text."""
    lane = policy.lanes.get(lane_name)
    if lane is None:
        return f"lanes.{lane_name}: not in the current policy"
    code = details.get("reason_code") or details.get("kueue_reason")
    if event == "cluster" and (details.get("admission_checks") or details.get("cluster_name")):
        return _cluster_rule(policy, details)
    if event == "submitted":
        return f"common_required_fields + lanes.{lane_name}.required_fields (validated, fail closed)"
    if event == "approved":
        return _approval_rule(policy, details)
    if code == "TeamLimit" or str(details.get("reason", "")).startswith("TeamLimit"):
        return _team_rule(lane)
    if event == "waiting":
        if code in ("BudgetExhausted", "BudgetExceeded"):
            return f"lanes.{lane_name}.budget = {lane.budget} {policy.currency} per {policy.budget_period}"
        if code == "WaitingForUpstream":
            return "inputs are output_artifact_ids of requests not yet finished (lineage)"
        if code == "ApprovalRequired":
            kind = lane.requires_approval or "?"
            roles = sorted(r for r, spec in policy.approvers.items() if kind in spec.may_approve)
            return (
                f"lanes.{lane_name}.requires_approval = {kind}: approver a member of "
                f"{', '.join(f'approvers.{r}' for r in roles) or 'no role'}, or an approved {kind} event"
            )
        if code == "PendingPreemption":
            p = lane.preemption
            return (
                f"lanes.{lane_name}.preemption: within_cluster_queue={p.within_cluster_queue}, "
                f"reclaim_within_cohort={p.reclaim_within_cohort}, borrow_within_cohort={p.borrow_within_cohort.policy}"
            )
        return _quota_text(policy, lane_name, None) + f"; queueing_strategy={lane.queueing_strategy}"
    if event == "admitted":
        return _quota_text(policy, lane_name, flavor)
    if event == "preempted":
        knob = _PREEMPTION_KNOB.get(code or "")
        by = policy.lanes.get(preemptor_lane or "")
        if code == "InCohortFairSharing":
            text = "fair_sharing.enabled = true"
        elif knob and by is not None:
            value = getattr(by.preemption, knob)
            text = f"lanes.{by.name}.preemption.{knob} = {getattr(value, 'policy', value)}"
            if getattr(value, "max_priority_threshold", None) is not None:
                text += f" (max_priority_threshold {value.max_priority_threshold})"
        else:
            text = f"preemption ({code or 'unknown reason'})"
        if lane.yields_to:
            text += f"; lanes.{lane_name}.yields_to = [{', '.join(lane.yields_to)}]"
        if lane.evidence:
            text += f"; lanes.{lane_name}.evidence = true (preempted only once checkpointed)"
        return text
    if event == "requeued":
        return "a preempted request is requeued at its original submission time (keeps its place)"
    if event == "rejected":
        if str(details.get("reason", "")).startswith(("BudgetExceeded", "BudgetExhausted")):
            return f"lanes.{lane_name}.budget = {lane.budget} {policy.currency} per {policy.budget_period}"
        return f"lanes.{lane_name} (rejected as submitted)"
    if event in ("finished", "failed"):
        return "run outcome, recorded by the gate from the Dagster run"
    return ""


def _cluster_rule(policy: Policy, details: dict[str, Any]) -> str:
    """The policy lines behind a read-back's admission checks and worker cluster."""
    parts = [f"{c.get('name')}: {check_origin(policy, str(c.get('name')))}" for c in details.get("admission_checks") or ()]
    site = site_of_cluster(details.get("cluster_name"))
    if site is not None:
        where = f"sites.{site}" if site in policy.sites else f"site {site}: not in the current policy's sites"
        parts.append(f"worker cluster {details.get('cluster_name')}: {where}")
    return "; ".join(parts)


def _team_rule(lane) -> str:
    tl = lane.team_limits
    if tl is None:
        return f"lanes.{lane.name}.team_limits: none in the current policy"

    def text(cap) -> str:
        parts = [f"{k}={getattr(cap, k):g}" for k in ("max_gpus", "max_share", "max_running") if getattr(cap, k) is not None]
        return ", ".join(parts)

    parts = []
    if tl.default is not None:
        parts.append(f"default: {text(tl.default)}")
    parts += [f"teams.{t}: {text(c)}" for t, c in sorted(tl.teams.items())]
    return f"lanes.{lane.name}.team_limits " + "; ".join(parts)


def _approval_rule(policy: Policy, details: dict[str, Any]) -> str:
    role, kind, who = str(details.get("role", "")), str(details.get("kind", "")), str(details.get("approver", ""))
    problems = roster_errors(policy, role, kind, who)
    if problems:
        return f"approvers.{role}: not honoured under the current policy ({'; '.join(problems)})"
    what = {
        "safety": "preemption past yields_to",
        "cost": "running over the lane budget",
        "incident": "admission to a lane with requires_approval: incident",
    }.get(kind, kind)
    return f"approvers.{role}.may_approve includes {kind} ({what}); {who} is a member"


def _victims_by_preemptor(ledger: Ledger, request_id: str) -> list[tuple[datetime, str]]:
    """(time, victim) of every preemption made for request_id, from the events' details."""
    e = events_table
    q = sa.select(e.c.at, e.c.request_id, e.c.details).where(
        e.c.event == "preempted", e.c.details.is_not(None), e.c.details.contains(request_id)
    )
    out = []
    with ledger.engine.connect() as conn:
        for at, victim, details in conn.execute(q):
            if json.loads(details).get("by") == request_id:
                out.append((at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC), victim))
    return out


def _lane_of(ledger: Ledger, request_id: str) -> str | None:
    with ledger.engine.connect() as conn:
        return conn.execute(
            sa.select(requests_table.c.lane).where(requests_table.c.request_id == request_id)
        ).scalar_one_or_none()


def _budgets(ledger: Ledger, policy: Policy, state: RequestState, warehouse, now: datetime | None) -> list:
    from gpu_platform.finops.budgets import budget_rows
    from gpu_platform.gate.tick import budget_period_start

    now = now or datetime.now(UTC)
    since = budget_period_start(policy.budget_period, now)
    team = state.request.team
    return budget_rows(policy, ledger.reserved_by_lane(since), since, warehouse, now.date(),
                       lanes=[state.request.lane or ""], teams=[team] if team else [])


def aging_of(policy: Policy, state: RequestState, now: datetime) -> dict[str, Any] | None:
    """Where the request stands on its lane's aging (`gpu_platform.policy.aging`): its boost, its
    effective priority, and for a waiting request when the next step comes; an admitted one keeps
    the boost of its wait until admission. `ages` False: its lane has no wait target to age
    toward. None for a request that has ended or a lane not in the policy."""
    from gpu_platform.policy.aging import PRIORITY_BOOST_ANNOTATION, boost_now
    from gpu_platform.requests.ledger import ACTIVE_STATES, PENDING_STATES

    lane = policy.lanes.get(state.request.lane or "")
    if lane is None or state.state not in (*PENDING_STATES, *ACTIVE_STATES):
        return None
    waiting = state.state in PENDING_STATES
    at = boost_now(policy, lane.name, state.submitted_at, now if waiting else state.updated_at)
    if at is None:
        return {"ages": False, "boost": 0, "priority": lane.priority, "effective_priority": lane.priority,
                "text": f"no priority boost: lanes.{lane.name} has no targets.wait_p95 / targets.boost_after to age toward"}
    text = at.text(admitted=not waiting)
    return {
        "ages": True,
        "boost": at.boost,
        "priority": lane.priority,
        "effective_priority": lane.priority + at.boost,
        "next_boost": at.next_boost if waiting else None,
        "next_at": at.next_at.isoformat() if waiting and at.next_at is not None else None,
        "step_s": at.rule.step_s,
        "per_step": at.rule.per_step,
        "cap": at.rule.cap,
        "annotation": PRIORITY_BOOST_ANNOTATION,
        "rule": f"lanes.{lane.name}.targets.boost_after x lanes.{lane.name}.targets.wait_p95",
        "text": text,
    }


def explain(
    ledger: Ledger, policy: Policy, request_id: str, warehouse: Any = None, now: datetime | None = None
) -> Explanation:
    """The request's decision history; LedgerError for an unknown request id. `warehouse`: a
    read-only DuckDB connection for FinOps' side of the budgets (None: the gate's side only)."""
    state: RequestState = ledger.state(request_id)
    lane = state.request.lane or ""
    events = ledger.events(request_id)
    victims = sorted(_victims_by_preemptor(ledger, request_id))
    steps: list[Step] = []
    vi = 0
    for ev in events:
        mine: list[str] = []
        while vi < len(victims) and victims[vi][0] <= ev.at:
            mine.append(victims[vi][1])
            vi += 1
        by = ev.details.get("by") if ev.event == "preempted" else None
        rule = rule_for(
            policy,
            lane,
            ev.event,
            {**ev.details, "reason": ev.reason},
            preemptor_lane=_lane_of(ledger, by) if by else None,
            flavor=ev.flavor,
        )
        steps.append(
            Step(
                at=ev.at,
                event=ev.event,
                reason=ev.reason,
                position=ev.details.get("position"),
                of=ev.details.get("of"),
                flavor=ev.flavor,
                run_id=ev.run_id,
                preempted_by=by,
                victims=tuple(mine),
                rule=rule,
                details=ev.details,
            )
        )
    if vi < len(victims) and steps:
        last = steps[-1]
        steps[-1] = replace(last, victims=last.victims + tuple(v for _, v in victims[vi:]))
    approvals = [
        {
            **a,
            "honoured": honoured(policy, a, None, state.request),
        }
        for a in state.approvals
    ]
    checks: list[dict[str, Any]] = []
    for ev in reversed(events):
        if ev.event == "cluster":
            checks = [
                {**c, "rule": check_origin(policy, str(c.get("name")))} for c in ev.details.get("admission_checks") or ()
            ]
            break
    return Explanation(
        request_id,
        lane,
        state.request.team or "",
        int(state.request.gpu_count or 0),
        state.request.gpu_type or "",
        state.state,
        steps,
        approvals,
        name=state.request.name or request_id,
        owner=state.request.owner or "",
        target=state.request.target,
        admission_checks=checks,
        budgets=(budgets := _budgets(ledger, policy, state, warehouse, now)),
        cost_exception=cost_exception_command(policy, request_id)
        if any(b["scope"] == "lane" for b in budgets) else "",
        aging=aging_of(policy, state, now or datetime.now(UTC)),
    )
