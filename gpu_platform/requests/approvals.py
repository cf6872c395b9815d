"""Audited exceptions: safety approvals, cost exceptions and break-glass (incident) grants by
the policy's approver roster, bound to who grants them (docs/approvals.md).

`grant` checks a grant against the roster (the role exists, may approve that kind, and names the
approver among its `members`, or its `second_approvers` for break-glass; the request exists and
has not ended), against separation of duties (nobody approves a request they submitted or own)
and appends one `approved` event with details `{"kind", "role", "approver", "reason",
"identity_source", "verified"}`. The approver is the caller's verified `Identity`: `approve`
refuses a caller no identity source vouches for. The event changes no state.

The gate honours an approval (`honoured_kinds`) only while the current roster still lets that
role grant that kind, its approver is verified and not the request's owner, and its lifetime
(`approvals.ttl`; incident and safety 48h by default) has not run out. A request's own
`approver` field is a nomination: it grants nothing; the request waits (`ApprovalRequired`) until
that person, or another allowed member, runs `gpu-platform approve`.

Break-glass grants (`BREAK_GLASS_KINDS`: incident) once used (the request was admitted) or
expired open a retrospective item (`retrospectives`), listed by `approve --due`, in the
scorecards and on `/metrics`, until someone records it done (`approve REQUEST_ID --done`: an
`approved` event of kind `retrospective`, which grants nothing).

- `safety`: the request may preempt work in a lane whose `yields_to` does not list its lane.
- `cost`: the lane's budget does not hold the request back (neither `BudgetExhausted` nor
  `BudgetExceeded`); its max_cost is still drawn from the budget.
- `incident`: the request may be admitted to a lane with `requires_approval: incident`.

A `safety_approval` string on the request itself grants nothing (see docs/approvals.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gpu_platform.policy import APPROVAL_KINDS, BREAK_GLASS_KINDS, Policy
from gpu_platform.requests.identity import VERIFIED_SOURCES, Identity
from gpu_platform.requests.ledger import TERMINAL_STATES, Ledger, LedgerError
from gpu_platform.requests.model import JobRequest

APPROVED = "approved"
MAX_REASON_CHARS = 2000


class ApprovalError(ValueError):
    """A grant the roster does not allow, or for a request that cannot take it; `errors` lists why."""

    def __init__(self, errors: list[str]):
        self.errors = errors
        super().__init__("; ".join(errors))


RETROSPECTIVE = "retrospective"
"""The `kind` of an `approved` event that records a break-glass retrospective done (grants nothing)."""


def _at(a: Mapping[str, Any]) -> datetime | None:
    at = a.get("at")
    if isinstance(at, str):
        try:
            at = datetime.fromisoformat(at)
        except ValueError:
            return None
    if not isinstance(at, datetime):
        return None
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at


def roster_errors(
    policy: Policy, role: str, kind: str, approver: str, principals: Iterable[str] | None = None
) -> list[str]:
    """Why `approver` (with `principals`: their name and `group:<g>`), acting as `role`, may not
    grant a `kind` exception (empty: allowed). A role's `second_approvers` may grant break-glass."""
    if kind not in APPROVAL_KINDS:
        return [f"--kind: {kind!r} is not an approval kind (one of: {', '.join(APPROVAL_KINDS)})"]
    if role not in policy.approvers:
        allowed = ", ".join(sorted(policy.approvers)) or "none (the policy has no approvers: roster)"
        return [f"--role: unknown role {role!r} (allowed roles: {allowed})"]
    spec = policy.approvers[role]
    who = set(principals or ()) | {approver}
    errors = []
    if kind not in spec.may_approve:
        errors.append(f"--kind: role {role} may not approve {kind} (it may approve: {', '.join(spec.may_approve)})")
    allowed = set(spec.members) | (set(spec.second_approvers) if kind in BREAK_GLASS_KINDS else set())
    if not who & allowed:
        errors.append(f"--approver: {approver!r} is not a member of role {role} ({', '.join(spec.members)})")
    return errors


def approver_for(claimed: str | None, identity: Identity) -> str:
    """Who grants: the verified identity (a different `--approver` is refused: ApprovalError);
    a caller no identity source vouches for may not grant at all."""
    if not identity.verified:
        raise ApprovalError([
            f"approver: no identity source is configured, so {claimed or identity.name!r} is only a claim; an "
            "approval is recorded with a verified identity (GPU_PLATFORM_IDENTITY: oidc, dagster, kubernetes or "
            "os_user; docs/approvals.md, Identity)"
        ])
    if claimed and claimed != identity.name:
        raise ApprovalError([
            f"--approver: {claimed!r} is not who you are: the verified identity is {identity.name!r} "
            f"(from {identity.source}); approve as yourself (omit --approver)"
        ])
    return identity.name


def separation_errors(request: JobRequest, submitted_by: str | None, approver: str) -> list[str]:
    """Why `approver` may not approve this request themselves (empty: they may)."""
    errors = []
    if approver == request.owner:
        errors.append(f"approver: {approver!r} owns this request; nobody approves their own (separation of duties)")
    if submitted_by and approver == submitted_by and approver != request.owner:
        errors.append(f"approver: {approver!r} submitted this request; nobody approves their own (separation of duties)")
    return errors


def grant(
    ledger: Ledger,
    policy: Policy,
    request_id: str,
    *,
    role: str,
    kind: str,
    reason: str,
    approver: str,
    identity_source: str = "os_user",
    principals: Iterable[str] | None = None,
    verified: bool = True,
) -> dict[str, Any]:
    """Record one approval; return its details. ApprovalError names every problem.
    identity_source: where the approver's name came from (`Identity.source`); principals: the
    approver's name and groups (`Identity.principals`)."""
    errors = roster_errors(policy, role, kind, approver, principals)
    text = (reason or "").strip()
    if not text:
        errors.append("--reason: required (say why the exception is granted)")
    elif len(text) > MAX_REASON_CHARS or "\x00" in text:
        errors.append(f"--reason: at most {MAX_REASON_CHARS} characters, no NUL")
    try:
        state = ledger.state(request_id)
    except LedgerError:
        errors.append(f"REQUEST_ID: unknown request id {request_id!r}")
        state = None
    if state is not None and state.state in TERMINAL_STATES:
        errors.append(f"REQUEST_ID: {request_id} is {state.state}; an approval cannot change a request that has ended")
    if state is not None:
        errors.extend(separation_errors(state.request, ledger.submitter(request_id).get("submitted_by"), approver))
    if errors:
        raise ApprovalError(errors)
    details = {"kind": kind, "role": role, "approver": approver, "reason": text, "identity_source": identity_source,
               "verified": verified}
    ledger.record(request_id, APPROVED, f"{kind} approval by {approver} ({role}): {text}", details=details)
    return details


def _verified(a: Mapping[str, Any]) -> bool:
    if "verified" in a:
        return a.get("verified") is True
    return str(a.get("identity_source", "")) in VERIFIED_SOURCES


def expires_at(policy: Policy, a: Mapping[str, Any]) -> datetime | None:
    """When a recorded approval stops admitting (its time plus `approvals.ttl` of its kind)."""
    at = _at(a)
    kind = str(a.get("kind", ""))
    return None if at is None or kind not in APPROVAL_KINDS else at + policy.approvals.lifetime(kind)


def honoured(
    policy: Policy, a: Mapping[str, Any], now: datetime | None = None, request: JobRequest | None = None
) -> bool:
    """Whether the gate admits on this recorded approval now: the roster still allows it, its
    approver was verified and does not own the request, and it has not expired."""
    role, kind, who = str(a.get("role", "")), str(a.get("kind", "")), str(a.get("approver", ""))
    if roster_errors(policy, role, kind, who) or not _verified(a):
        return False
    if request is not None and who == request.owner:
        return False
    end = expires_at(policy, a)
    return end is not None and (now is None or now < end)


def honoured_kinds(
    policy: Policy,
    approvals: Iterable[Mapping[str, Any]],
    now: datetime | None = None,
    request: JobRequest | None = None,
) -> frozenset[str]:
    """The kinds of the recorded approvals the gate honours at `now` (`honoured`; now=None:
    the present)."""
    now = now or datetime.now(UTC)
    return frozenset(str(a.get("kind")) for a in approvals if honoured(policy, a, now, request))


def roles_that_may_approve(policy: Policy, kind: str) -> list[str]:
    """The roster roles whose `may_approve` includes `kind`, sorted."""
    return sorted(role for role, spec in policy.approvers.items() if kind in spec.may_approve)


def admission_approval_problem(
    policy: Policy,
    request: JobRequest,
    approvals: Iterable[Mapping[str, Any]],
    request_id: str = "",
    now: datetime | None = None,
) -> str | None:
    """Why a request in a lane with `requires_approval` may not be admitted yet; None when it
    may (the lane requires nothing, or an approval of that kind is honoured at `now`). The
    request's own `approver` is a nomination: it names who is asked, it grants nothing."""
    lane = policy.lanes.get(request.lane or "")
    kind = lane.requires_approval if lane is not None else None
    approvals = list(approvals)
    if kind is None or kind in honoured_kinds(policy, approvals, now, request):
        return None
    now = now or datetime.now(UTC)
    roles = roles_that_may_approve(policy, kind)
    who = request.approver
    expired = [a for a in approvals if str(a.get("kind")) == kind and (expires_at(policy, a) or now) <= now]
    if expired:
        end = expires_at(policy, expired[-1])
        named = (
            f"the {kind} approval by {expired[-1].get('approver')!r} expired at {end:%Y-%m-%d %H:%M} UTC "
            f"(approvals.ttl {kind}: {policy.approvals.lifetime(kind)}); a new approval is needed"
        )
    elif who and any(who in policy.approvers[r].members for r in roles):
        named = f"waiting for {who!r} (nominated approver) or another allowed member to approve"
    elif who:
        named = f"approver {who!r} is not a member of a roster role that may approve {kind}"
    else:
        named = "no approver is named"
    return (
        f"lane {lane.name} requires approval ({kind}): {named} "
        f"(roles: {', '.join(roles) or 'none'}); a member grants it with "
        f"`gpu-platform approve {request_id or 'REQUEST_ID'} --kind {kind} --role ROLE --reason TEXT`"
    )


@dataclass(frozen=True, slots=True)
class Retrospective:
    """An open retrospective of a break-glass grant: `why` is `used` (the request was admitted
    on it) or `expired`; `due_since`: when it became due (the grant's time when used, else its
    expiry)."""

    request_id: str
    kind: str
    approver: str
    granted_at: datetime
    why: str
    due_since: datetime
    team: str
    lane: str


def retrospectives(policy: Policy, states: Iterable[Any], now: datetime | None = None) -> list[Retrospective]:
    """Open retrospective items: per request, its latest break-glass grant that was used
    (the request was admitted since) or expired, with no `retrospective` recorded after it."""
    now = now or datetime.now(UTC)
    out = []
    for s in states:
        approvals = list(getattr(s, "approvals", ()) or ())
        grants = [a for a in approvals if str(a.get("kind")) in BREAK_GLASS_KINDS and _at(a) is not None]
        if not grants:
            continue
        last = grants[-1]
        at = _at(last)
        assert at is not None
        done = [a for a in approvals if str(a.get("kind")) == RETROSPECTIVE and (_at(a) or at) >= at]
        if done:
            continue
        end = expires_at(policy, last) or at
        used = (s.attempts or 0) > 0
        if not used and now < end:
            continue
        out.append(Retrospective(
            s.request_id, str(last.get("kind")), str(last.get("approver", "")), at,
            "used" if used else "expired", at if used else end, s.request.team or "", s.request.lane or "",
        ))
    return sorted(out, key=lambda r: (r.due_since, r.request_id))


def record_retrospective(ledger: Ledger, request_id: str, *, by: str, identity_source: str, reason: str) -> dict[str, Any]:
    """Record the retrospective of a request's break-glass grant done (ApprovalError: nothing due)."""
    text = (reason or "").strip()
    if not text or len(text) > MAX_REASON_CHARS or "\x00" in text:
        raise ApprovalError([f"--reason: required, at most {MAX_REASON_CHARS} characters, no NUL (what the review found)"])
    try:
        state = ledger.state(request_id)
    except LedgerError:
        raise ApprovalError([f"REQUEST_ID: unknown request id {request_id!r}"]) from None
    if not any(str(a.get("kind")) in BREAK_GLASS_KINDS for a in state.approvals):
        raise ApprovalError([f"REQUEST_ID: {request_id} has no break-glass grant to review"])
    details = {"kind": RETROSPECTIVE, "role": "", "approver": by, "reason": text, "identity_source": identity_source}
    ledger.record(request_id, APPROVED, f"retrospective done by {by}: {text}", details=details)
    return details
