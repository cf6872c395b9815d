"""`gpu-platform approve REQUEST_ID`: grant an audited exception from the policy's approver roster."""

from __future__ import annotations

import json

import click

from gpu_platform.cli.common import checked_id, fail, ledger_option, policy_option, policy_or_exit

APPROVAL_KINDS = ("safety", "cost", "incident")
"""`gpu_platform.policy.APPROVAL_KINDS`, spelled here so `approve --help` does not load the policy
model (tests/cli checks that they agree)."""


def _kubernetes_user() -> str:
    from gpu_platform.cluster.client import whoami

    return whoami()


@click.command("approve")
@click.argument("request_id", callback=checked_id)
@click.option("--role", required=True, help="A role of the policy's approvers: roster.")
@click.option(
    "--kind",
    required=True,
    type=click.Choice(APPROVAL_KINDS),
    help="safety: preemption past yields_to; cost: over the lane budget; incident: open work in the incident lane.",
)
@click.option("--reason", required=True, help="Why the exception is granted (recorded in the ledger).")
@click.option(
    "--approver",
    default=None,
    help="Who grants it, a member of the role (default: the verified identity, else $USER; "
    "with a verified identity, any other name is refused).",
)
@policy_option
@ledger_option
def approve(
    request_id: str,
    role: str,
    kind: str,
    reason: str,
    approver: str | None,
    policy_path: str | None,
    ledger_url: str | None,
) -> None:
    """Record a safety approval or cost exception for REQUEST_ID, granted by ROLE.

    The role must be in the policy's `approvers:` roster, may approve KIND, and list the approver
    among its members; the request must exist and not have ended. The ledger gets one `approved`
    event (details: kind, role, approver, reason, identity_source); the gate honours it from its
    next tick. The approver is the verified identity when the deployment provides one
    (GPU_PLATFORM_IDENTITY, docs/approvals.md). Exit 2 naming every problem (an unknown role lists
    the allowed roles).
    """
    from gpu_platform.requests.approvals import ApprovalError, approver_for, grant
    from gpu_platform.requests.identity import IdentityError, current_identity
    from gpu_platform.requests.ledger import Ledger, default_ledger_url

    pol = policy_or_exit(policy_path)
    try:
        identity = current_identity(kubernetes_user=_kubernetes_user)
        who = approver_for(approver, identity)
    except IdentityError as exc:
        fail(f"approve {request_id}: not recorded", [str(exc)])
    except ApprovalError as exc:
        fail(f"approve {request_id}: not recorded", exc.errors)
    ledger = Ledger(ledger_url or default_ledger_url())
    try:
        details = grant(
            ledger, pol, request_id, role=role, kind=kind, reason=reason, approver=who, identity_source=identity.source
        )
    except ApprovalError as exc:
        fail(f"approve {request_id}: not recorded", exc.errors)
    click.echo(json.dumps({"request_id": request_id, "event": "approved", **details}, sort_keys=True))
