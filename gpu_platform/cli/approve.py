"""`gpu-platform approve REQUEST_ID`: grant an audited exception from the policy's approver roster."""

from __future__ import annotations

import getpass
import json
import os

import click

from gpu_platform.cli.common import fail, ledger_option, policy_option, policy_or_exit
from gpu_platform.policy import APPROVAL_KINDS
from gpu_platform.requests.approvals import ApprovalError, grant
from gpu_platform.requests.ledger import Ledger, default_ledger_url


def _default_approver() -> str:
    return os.environ.get("USER") or getpass.getuser()


@click.command("approve")
@click.argument("request_id")
@click.option("--role", required=True, help="A role of the policy's approvers: roster.")
@click.option("--kind", required=True, type=click.Choice(APPROVAL_KINDS), help="safety: preemption past yields_to; cost: over the lane budget.")
@click.option("--reason", required=True, help="Why the exception is granted (recorded in the ledger).")
@click.option("--approver", default=None, help="Who grants it, a member of the role (default: $USER).")
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
    event (details: kind, role, approver, reason); the gate honours it from its next tick.
    Exit 2 naming every problem (an unknown role lists the allowed roles).
    """
    pol = policy_or_exit(policy_path)
    who = approver or _default_approver()
    ledger = Ledger(ledger_url or default_ledger_url())
    try:
        details = grant(ledger, pol, request_id, role=role, kind=kind, reason=reason, approver=who)
    except ApprovalError as exc:
        fail(f"approve {request_id}: not recorded", exc.errors)
    click.echo(json.dumps({"request_id": request_id, "event": "approved", **details}, sort_keys=True))
