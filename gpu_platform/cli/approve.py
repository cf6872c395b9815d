"""`gpu-platform approve REQUEST_ID`: grant an audited exception from the deployed policy's approver roster;
`approve --due`: the open break-glass retrospectives; `approve REQUEST_ID --done`: record one done."""

from __future__ import annotations

import json

import click

from gpu_platform.cli.common import checked_id, fail, ledger_option

APPROVAL_KINDS = ("safety", "cost", "incident")
"""`gpu_platform.policy.APPROVAL_KINDS`, spelled here so `approve --help` does not load the policy
model (tests/cli checks that they agree)."""


def _kubernetes_user() -> str:
    from gpu_platform.cluster.client import whoami

    return whoami()


def caller_identity(claimed: str | None = None):
    """Who runs `approve` (`identity.current_identity`); `claimed` (`--approver`) is not used to
    decide it: `approver_for` compares it with the answer."""
    from gpu_platform.requests.identity import current_identity

    return current_identity(kubernetes_user=_kubernetes_user)


def deployed_policy(ledger_url: str | None):
    """The deployed policy (`project.deployed_policy_path`: never `--policy`, nor a planted
    project config's), or exit 2 listing its errors."""
    from gpu_platform.cli.common import policy_or_exit
    from gpu_platform.cli.project import deployed_policy_path

    return policy_or_exit(deployed_policy_path(ledger_url))


@click.command("approve")
@click.argument("request_id", required=False, callback=checked_id)
@click.option("--role", default=None, help="A role of the deployed policy's approvers: roster.")
@click.option(
    "--kind",
    default=None,
    type=click.Choice(APPROVAL_KINDS),
    help="safety: preemption past yields_to; cost: over the lane budget; incident: open work in the incident lane "
    "(break-glass).",
)
@click.option("--reason", default=None, help="Why the exception is granted, or what the retrospective found.")
@click.option(
    "--approver",
    default=None,
    help="Who grants it: must be the verified identity (default: it); a caller no identity source vouches for "
    "may not approve.",
)
@click.option("--due", is_flag=True, help="List the open retrospectives of break-glass grants (used or expired).")
@click.option("--done", is_flag=True, help="Record REQUEST_ID's break-glass retrospective done (with --reason).")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@ledger_option
def approve(
    request_id: str | None,
    role: str | None,
    kind: str | None,
    reason: str | None,
    approver: str | None,
    due: bool,
    done: bool,
    fmt: str,
    ledger_url: str | None,
) -> None:
    """Record a safety approval or cost exception for REQUEST_ID, granted by ROLE.

    Incident grants (break-glass) too.

    The roster is the deployed policy's ($GPU_PLATFORM_POLICY, else the packaged default; a
    project config's policy only for the ledger that config names): never a `--policy`. The role
    must may approve KIND and list the approver (the caller's verified identity,
    GPU_PLATFORM_IDENTITY) among its members; nobody approves a request they submitted or own;
    the request must exist and not have ended. The ledger gets one `approved` event; the gate
    honours it from its next tick until its lifetime (approvals.ttl) runs out. Exit 2 naming
    every problem. `--due` lists open retrospectives; `--done` records one done.
    """
    from gpu_platform.requests.approvals import (
        ApprovalError,
        approver_for,
        grant,
        record_retrospective,
        retrospectives,
    )
    from gpu_platform.requests.identity import IdentityError
    from gpu_platform.requests.ledger import Ledger, default_ledger_url

    pol = deployed_policy(ledger_url)
    ledger = Ledger(ledger_url or default_ledger_url())
    if due:
        items = retrospectives(pol, ledger.approved_states())
        if fmt == "json":
            click.echo(json.dumps([
                {"request_id": r.request_id, "kind": r.kind, "approver": r.approver, "why": r.why, "team": r.team,
                 "lane": r.lane, "granted_at": r.granted_at.isoformat(), "due_since": r.due_since.isoformat()}
                for r in items
            ], indent=2))
        else:
            for r in items:
                click.echo(f"{r.request_id}  {r.kind} grant by {r.approver} {r.why}, due since "
                           f"{r.due_since:%Y-%m-%d %H:%M} UTC  (team {r.team}, lane {r.lane})")
            click.echo(f"{len(items)} retrospective(s) due; record one with "
                       "`gpu-platform approve REQUEST_ID --done --reason TEXT`", err=True)
        return
    if not request_id:
        fail("approve: not recorded", ["REQUEST_ID: required (or --due)"])
    try:
        identity = caller_identity(approver)
        who = approver_for(approver, identity)
    except IdentityError as exc:
        fail(f"approve {request_id}: not recorded", [str(exc)])
    except ApprovalError as exc:
        fail(f"approve {request_id}: not recorded", exc.errors)
    try:
        if done:
            details = record_retrospective(ledger, request_id, by=who, identity_source=identity.source,
                                           reason=reason or "")
        else:
            missing = [f"--{n}: required" for n, v in (("role", role), ("kind", kind), ("reason", reason)) if not v]
            if missing:
                raise ApprovalError(missing)
            details = grant(
                ledger, pol, request_id, role=role or "", kind=kind or "", reason=reason or "", approver=who,
                identity_source=identity.source, principals=identity.principals(), verified=identity.verified,
            )
    except ApprovalError as exc:
        fail(f"approve {request_id}: not recorded", exc.errors)
    click.echo(json.dumps({"request_id": request_id, "event": "approved", **details}, sort_keys=True))
