"""`gpu-platform autoscale plan`: desired node counts per node pool, as JSON."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime

import click

from gpu_platform.cli.common import ledger_option, policy_option, policy_or_exit


@click.group("autoscale")
def autoscale() -> None:
    """Autoscaling demand from the queue."""


@autoscale.command("plan")
@policy_option
@ledger_option
def plan(policy_path: str | None, ledger_url: str | None) -> None:
    """Print desired nodes per node pool (JSON); exit 2 when the policy has no `autoscaling` block."""
    from gpu_platform.observe.autoscale.plan import plan_pools
    from gpu_platform.observe.queueview.demand import load_demand
    from gpu_platform.requests.ledger import Ledger, default_ledger_url

    pol = policy_or_exit(policy_path)
    if pol.autoscaling is None:
        click.echo("autoscale plan: the policy has no `autoscaling` block (node_pools, warm_pools)", err=True)
        sys.exit(2)
    now = datetime.now(UTC)
    demand = load_demand(Ledger(ledger_url or default_ledger_url()), pol, now)
    out = {"generated_at": now.isoformat(), "node_pools": [p.to_json() for p in plan_pools(pol, demand, now)]}
    click.echo(json.dumps(out, indent=2))
