"""Audited exceptions: safety approvals and cost exceptions granted by the policy's approver roster.

`grant` checks a grant against the roster (the role exists, may approve that kind, and names the
approver among its members; the request exists and has not ended) and appends one `approved`
event to the ledger with details exactly `{"kind", "role", "approver", "reason",
"identity_source"}`. The event changes no state. The gate honours an approval (`honoured_kinds`)
only while the current roster still lets that role grant that kind, so removing a role from the
policy withdraws its grants. Who the approver is comes from `identity.current_identity`
(`approver_for`: a self-declared `--approver` that differs from a verified identity is refused).

- `safety`: the request may preempt work in a lane whose `yields_to` does not list its lane.
- `cost`: the lane's budget does not hold the request back (neither `BudgetExhausted` nor
  `BudgetExceeded`); its max_cost is still drawn from the budget.
- `incident`: the request may be admitted to a lane with `requires_approval: incident`
  (`admission_approval_problem`); so may one whose own `approver` field names a member of a
  role that may approve `incident`.

A `safety_approval` string on the request itself grants nothing (see docs/approvals.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpu_platform.policy import APPROVAL_KINDS, Policy
from gpu_platform.requests.identity import Identity
from gpu_platform.requests.ledger import TERMINAL_STATES, Ledger, LedgerError
from gpu_platform.requests.model import JobRequest

APPROVED = "approved"
MAX_REASON_CHARS = 2000


class ApprovalError(ValueError):
    """A grant the roster does not allow, or for a request that cannot take it; `errors` lists why."""

    def __init__(self, errors: list[str]):
        self.errors = errors
        super().__init__("; ".join(errors))


def roster_errors(policy: Policy, role: str, kind: str, approver: str) -> list[str]:
    """Why `approver`, acting as `role`, may not grant a `kind` exception (empty: allowed)."""
    if kind not in APPROVAL_KINDS:
        return [f"--kind: {kind!r} is not an approval kind (one of: {', '.join(APPROVAL_KINDS)})"]
    if role not in policy.approvers:
        allowed = ", ".join(sorted(policy.approvers)) or "none (the policy has no approvers: roster)"
        return [f"--role: unknown role {role!r} (allowed roles: {allowed})"]
    spec = policy.approvers[role]
    errors = []
    if kind not in spec.may_approve:
        errors.append(f"--kind: role {role} may not approve {kind} (it may approve: {', '.join(spec.may_approve)})")
    if approver not in spec.members:
        errors.append(f"--approver: {approver!r} is not a member of role {role} ({', '.join(spec.members)})")
    return errors


def approver_for(claimed: str | None, identity: Identity) -> str:
    """Who grants: the verified identity when there is one (a different `--approver` is refused:
    ApprovalError), else the self-declared `--approver`, else `$USER`."""
    if identity.verified:
        if claimed and claimed != identity.name:
            raise ApprovalError([
                f"--approver: {claimed!r} is not who you are: the verified identity is {identity.name!r} "
                f"(from {identity.source}); approve as yourself (omit --approver)"
            ])
        return identity.name
    return claimed or identity.name


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
) -> dict[str, str]:
    """Record one approval; return its details. ApprovalError names every problem.
    identity_source: where the approver's name came from (`Identity.source`)."""
    errors = roster_errors(policy, role, kind, approver)
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
    if errors:
        raise ApprovalError(errors)
    details = {"kind": kind, "role": role, "approver": approver, "reason": text, "identity_source": identity_source}
    ledger.record(request_id, APPROVED, f"{kind} approval by {approver} ({role}): {text}", details=details)
    return details


def honoured_kinds(policy: Policy, approvals: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """The kinds of the recorded approvals that the current roster still allows."""
    kinds = set()
    for a in approvals:
        role, kind, who = str(a.get("role", "")), str(a.get("kind", "")), str(a.get("approver", ""))
        if not roster_errors(policy, role, kind, who):
            kinds.add(kind)
    return frozenset(kinds)


def roles_that_may_approve(policy: Policy, kind: str) -> list[str]:
    """The roster roles whose `may_approve` includes `kind`, sorted."""
    return sorted(role for role, spec in policy.approvers.items() if kind in spec.may_approve)


def admission_approval_problem(
    policy: Policy, request: JobRequest, approvals: Iterable[Mapping[str, Any]], request_id: str = ""
) -> str | None:
    """Why a request in a lane with `requires_approval` may not be admitted yet; None when it
    may (the lane requires nothing, an approval of that kind is honoured, or the request's own
    `approver` is a member of a role that may approve that kind)."""
    lane = policy.lanes.get(request.lane or "")
    kind = lane.requires_approval if lane is not None else None
    if kind is None or kind in honoured_kinds(policy, approvals):
        return None
    roles = roles_that_may_approve(policy, kind)
    who = request.approver
    if who and any(who in policy.approvers[r].members for r in roles):
        return None
    named = (
        f"approver {who!r} is not a member of a roster role that may approve {kind}"
        if who
        else "no approver is named"
    )
    return (
        f"lane {lane.name} requires approval ({kind}): {named} "
        f"(roles: {', '.join(roles) or 'none'}); a member grants it with "
        f"`gpu-platform approve {request_id or 'REQUEST_ID'} --kind {kind} --role ROLE --reason TEXT`"
    )
