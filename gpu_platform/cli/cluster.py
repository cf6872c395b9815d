"""`gpu-platform cluster sync`: read Kueue's word on the gate's Jobs back now, as the sensor does each tick."""

from __future__ import annotations

import json

import click

from gpu_platform.cli.common import ledger_option, policy_option, policy_or_exit


@click.group("cluster")
def cluster() -> None:
    """The Kubernetes cluster with Kueue, read back on demand."""


@cluster.command("sync")
@policy_option
@ledger_option
@click.option(
    "--kubeconfig",
    default="",
    help="kubeconfig file (default: the in-cluster service account, else $KUBECONFIG / ~/.kube/config).",
)
@click.option("--dry-run", is_flag=True, help="Print what changed without recording it in the ledger.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def sync(policy_path: str | None, ledger_url: str | None, kubeconfig: str, dry_run: bool, fmt: str) -> None:
    """List the gate's Jobs, Kueue's Workloads and their events in every team namespace, record
    each change as a ledger `cluster` event (what the admission sensor does every tick), record
    each Job the ledger cannot match (`gp_cluster_unmatched`, counted by the bypass scorecard),
    set the priority boost of the Workloads Kueue holds pending (aging, `cluster.aging`), and
    print what changed, every unmatched Job, with why, and each boost set.

    Exit 1 with one line when the cluster cannot be reached.
    """
    from datetime import UTC, datetime

    from gpu_platform.cluster.aging import boost_patches, sync_boosts
    from gpu_platform.cluster.client import ClusterConfigError
    from gpu_platform.cluster.readback import read_back, read_kueue, record_read_back
    from gpu_platform.requests.ledger import ACTIVE_STATES, PENDING_STATES, Ledger, default_ledger_url

    pol = policy_or_exit(policy_path)
    ledger = Ledger(ledger_url or default_ledger_url())
    namespaces = sorted({team.namespace for team in pol.teams.values()})
    try:
        observations = read_kueue(namespaces, kubeconfig)
    except ClusterConfigError as exc:
        raise click.ClickException(str(exc)) from None
    except Exception as exc:  # the API unreachable, refused or TLS-rejected: one line, no traceback
        reason = str(getattr(exc, "reason", "") or exc).splitlines()[0][:300]
        raise click.ClickException(f"could not read the cluster back: {type(exc).__name__}: {reason}") from None
    rb = read_back(ledger, observations)
    if not dry_run:
        record_read_back(ledger, rb)
    # aging: the priority boost of the Workloads Kueue holds pending, as the sensor sets it each tick
    live = ledger.states((*PENDING_STATES, *ACTIVE_STATES))
    now = datetime.now(UTC)
    if dry_run:
        boosts, boost_problems = boost_patches(pol, live, observations, now), []
    else:
        boosts, boost_problems = sync_boosts(pol, live, observations, now, kubeconfig)
    changed = [{"request_id": r[0], "summary": r[2], "flavor": r[3], **(r[5] or {})} for r in rb.changed]
    skipped = [
        {"request_id": o.request_id, "attempt": o.attempt, "namespace": o.namespace, "job": o.job, "kind": kind,
         "why": why, "summary": o.summary}
        for o, kind, why in rb.unmatched
    ]
    if fmt == "json":
        click.echo(json.dumps({"namespaces": namespaces, "observed": len(observations), "recorded": not dry_run,
                               "changed": changed, "unmatched": skipped,
                               "unmatched_recorded": 0 if dry_run else len(rb.unmatched_new),
                               "priority_boosts": [{"namespace": b.namespace, "workload": b.workload,
                                                    "request_id": b.request_id, "boost": b.boost, "was": b.was}
                                                   for b in boosts],
                               "priority_boost_problems": boost_problems}, indent=2))
        return
    verb = "would record" if dry_run else "recorded"
    click.echo(f"{len(observations)} Job(s) observed in {len(namespaces)} namespace(s); {verb} {len(changed)} change(s)")
    for c in changed:
        click.echo(f"  {c['request_id']}  {c['summary']}")
    if skipped:
        click.echo(
            f"{len(skipped)} Job(s) not matched to a request of the ledger ({verb} {len(rb.unmatched_new)} new "
            "observation(s) of them, for the bypass scorecard):"
        )
        for s in skipped:
            click.echo(f"  {s['namespace']}/{s['job']} (request {s['request_id']}, {s['kind']}): {s['why']}")
    if boosts:
        click.echo(f"{'would set' if dry_run else 'set'} the priority boost of {len(boosts)} waiting Workload(s) (aging):")
        for b in boosts:
            click.echo(f"  {b.text()}")
    for problem in boost_problems:
        click.echo(f"  could not set the priority boost of {problem}")
