"""CLI commands `gpu-platform lineage ID` and `gpu-platform retention sweep`.

`gpu_platform.cli.app` attaches them to `gpu-platform`.

Exit codes: 0 success (a lineage with gaps still prints; `--strict` makes gaps exit 1),
2 unknown id, 1 any other failure.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import click

from gpu_platform.cli.common import checked_id, fail

if TYPE_CHECKING:
    from rich.console import Console

_ledger_option = click.option(
    "--ledger",
    "ledger_url",
    default=None,
    help="Ledger SQLAlchemy URL (default: $GPU_PLATFORM_LEDGER_URL or sqlite under $GPU_PLATFORM_HOME).",
)
_evidence_option = click.option(
    "--evidence-root",
    default=None,
    help="Evidence store root (default: $GPU_PLATFORM_EVIDENCE_ROOT or evidence/ under $GPU_PLATFORM_HOME).",
)


def _console() -> Console:
    from gpu_platform.cli.common import SafeConsole

    return SafeConsole(width=None if sys.stdout.isatty() else 160)


@click.command("lineage")
@click.argument("ident", metavar="ID", callback=checked_id)
@_ledger_option
@click.option("--kind", default=None, help="Stage of the request to start from (default: its last stage).")
@click.option("--json", "as_json", is_flag=True, help="Print the tree as JSON.")
@click.option("--strict", is_flag=True, help="Exit 1 when a stage in the tree is missing or did not succeed.")
def lineage(ident: str, ledger_url: str | None, kind: str | None, as_json: bool, strict: bool) -> None:
    """Print the lineage tree back from ID: a request id or an output artifact id
    (a released model or map, a replay, a label batch...)."""
    from gpu_platform.lineage.graph import SUCCEEDED, LineageStore, render_tree
    from gpu_platform.requests.ledger import Ledger, LedgerError, default_ledger_url

    ledger = Ledger(ledger_url or default_ledger_url())
    store = LineageStore(ledger.engine)
    request_id = ident
    try:
        tree = store.tree(ident, kind)
    except KeyError:
        producer = store.producer_of(ident)
        if producer is None:
            hint = ""
            try:
                state = ledger.state(ident)
                hint = f" (request is {state.state}; nothing materialized yet)"
            except LedgerError:
                pass
            click.echo(f"lineage: no recorded request or artifact {ident!r}{hint}", err=True)
            sys.exit(2)
        request_id = producer.request_id
        tree = store.tree(producer.request_id, kind or producer.kind)
    if as_json:
        click.echo(json.dumps(tree.to_dict(), indent=2, default=str))
    else:
        console = _console()
        if request_id != ident:
            console.print(f"artifact {ident} was produced by request {request_id}")
        console.print(render_tree(tree))
    gaps = [n for n in tree.unique() if n.status != SUCCEEDED]
    if gaps:
        blocked = [n for n in gaps if n.blocked_by]
        click.echo(f"{len(gaps)} stage(s) missing, not succeeded or blocked", err=True)
        for n in blocked:
            checks = ", ".join(b.check_name for b in n.blocked_by)
            click.echo(f"{n.kind} {n.request_id} is blocked by {checks} (see 'to fix' above)", err=True)
        if strict:
            sys.exit(1)


@click.group("retention")
def retention() -> None:
    """Evidence retention: holds and sweeps."""


@retention.command("sweep")
@_evidence_option
@click.option("--dry-run", is_flag=True, help="Report what would be deleted; delete nothing.")
@click.option("--json", "as_json", is_flag=True)
def retention_sweep(evidence_root: str | None, dry_run: bool, as_json: bool) -> None:
    """Delete expired evidence not under hold; print what was kept and why."""
    from gpu_platform.lineage.evidence import EvidenceStore, default_evidence_root

    report = EvidenceStore(evidence_root or default_evidence_root()).sweep(datetime.now(UTC), dry_run=dry_run)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "dry_run": dry_run,
                    "deleted": report.deleted,
                    "kept": report.kept,
                    "repaired": report.repaired,
                    "missing": report.missing,
                    "partial_writes_removed": report.cleaned,
                    "skipped": report.skipped,
                },
                indent=2,
            )
        )
        return
    for digest in report.deleted:
        click.echo(f"{'would delete' if dry_run else 'deleted'} {digest}")
    for digest, why in report.kept:
        click.echo(f"kept {digest}: {why}")
    for name in report.repaired:
        click.echo(
            f"{'would remove' if dry_run else 'removed'} dangling reference {name} (its expired object was deleted)"
        )
    for digest, name in report.missing:
        click.echo(f"MISSING {digest}: reference {name} is held or unexpired but the object is gone")
    for where, why in report.skipped:
        click.echo(f"SKIPPED {where}: {why}")
    click.echo(report.summary())
    if report.missing:
        sys.exit(1)


def _kubernetes_user() -> str:
    from gpu_platform.cluster.client import whoami

    return whoami()


@retention.command("hold")
@click.argument("request_id", callback=checked_id)
@_evidence_option
@click.option("--holder", default="manual", show_default=True)
@click.option("--reason", default="", help="Why the hold is placed (or released); recorded with it.")
@click.option("--release", is_flag=True, help="Release this holder's hold instead of placing one.")
def retention_hold(
    request_id: str, evidence_root: str | None, holder: str, reason: str, release: bool
) -> None:
    """Place (or --release) an evidence hold on everything REQUEST_ID stored.

    Who placed or released it is recorded with the hold: the verified identity when the
    deployment provides one (GPU_PLATFORM_IDENTITY, docs/approvals.md), else $USER, with its
    source. A deployment that requires a verified identity refuses (exit 2) without one."""
    from gpu_platform.lineage.evidence import EvidenceStore, default_evidence_root
    from gpu_platform.requests.identity import IdentityError, current_identity

    try:
        identity = current_identity(kubernetes_user=_kubernetes_user)
    except IdentityError as exc:
        fail(f"retention hold {request_id}: not recorded", [str(exc)])
    from gpu_platform.safeload.text import char_problem, plain

    bad = [f"--{name}: {problem}" for name, value in (("holder", holder), ("reason", reason))
           if (problem := char_problem(value))]
    if bad:
        fail(f"retention hold {request_id}: not recorded", bad)
    store = EvidenceStore(evidence_root or default_evidence_root())
    if release:
        found = store.release_hold(
            request_id, holder, reason=reason, released_by=identity.name, identity_source=identity.source
        )
        click.echo(f"{'released' if found else 'no'} hold {plain(holder)} on {request_id}")
    else:
        store.set_hold(request_id, holder, reason, set_by=identity.name, identity_source=identity.source)
        click.echo(f"hold {plain(holder)} placed on {request_id} by {plain(identity.name)} ({identity.source})")
