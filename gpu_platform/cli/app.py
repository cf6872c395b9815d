"""`gpu-platform`: the platform's command line, one module per command group in this package.

Exit codes: 0 success, 2 invalid input (every problem is printed), 1 any other failure.
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from gpu_platform.cli.admission import admit, kueue
from gpu_platform.cli.approve import approve
from gpu_platform.cli.autoscale import autoscale
from gpu_platform.cli.cluster import cluster
from gpu_platform.cli.cost import cost
from gpu_platform.cli.demo import demo
from gpu_platform.cli.deploy import deploy
from gpu_platform.cli.explain import explain
from gpu_platform.cli.feeds import feeds
from gpu_platform.cli.k8s import dagster_config, k8s
from gpu_platform.cli.lineage import lineage, retention
from gpu_platform.cli.metrics import metrics
from gpu_platform.cli.policy import policy
from gpu_platform.cli.project import CONFIG_NAME, ConfigError, Resolution, apply_config
from gpu_platform.cli.queue import queue
from gpu_platform.cli.report import report
from gpu_platform.cli.requests import request, submit
from gpu_platform.cli.scorecard import scorecard
from gpu_platform.cli.simulate import simulate_cmd


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.pass_context
def main(ctx: click.Context) -> None:
    """Govern a shared GPU pool: lanes, admission, lineage and cost.

    State (ledger, warehouse, evidence) lives under the home: $GPU_PLATFORM_HOME, else the
    project config (./gpu-platform.yaml, $XDG_CONFIG_HOME/gpu-platform/config.yaml), else ./var.
    """
    try:
        found = apply_config()
    except ConfigError as exc:
        click.echo(f"project config invalid: {exc.source}: {len(exc.errors)} problem(s)", err=True)
        for e in exc.errors:
            click.echo(f"  {e}", err=True)
        ctx.exit(2)
    home = Path(os.environ.get("GPU_PLATFORM_HOME") or "var").resolve()
    existed = home.exists()

    def close() -> None:
        if not existed and home.exists():
            click.echo(f"gpu-platform: created a new home {home} ({_home_source(found)})", err=True)
        for var in found.applied:  # the config speaks for one command, not for the caller's process
            os.environ.pop(var, None)

    ctx.call_on_close(close)


def _home_source(found: Resolution) -> str:
    if "GPU_PLATFORM_HOME" in found.applied:
        return f"home from {found.config}"
    if os.environ.get("GPU_PLATFORM_HOME"):
        return "from GPU_PLATFORM_HOME"
    return (
        f"the default: GPU_PLATFORM_HOME is unset and no {CONFIG_NAME} names a home; "
        "the demo's state is under .demo"
    )


for _cmd in (
    policy,
    request,
    submit,
    queue,
    explain,
    admit,
    kueue,
    k8s,
    cluster,
    deploy,
    dagster_config,
    lineage,
    retention,
    cost,
    feeds,
    metrics,
    autoscale,
    report,
    simulate_cmd,
    approve,
    scorecard,
    demo,
):
    main.add_command(_cmd)
