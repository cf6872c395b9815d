"""`gpu-platform`: the platform's command line, one module per command group in this package.

Exit codes: 0 success, 2 invalid input (every problem is printed), 1 any other failure.
"""

from __future__ import annotations

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
from gpu_platform.cli.queue import queue
from gpu_platform.cli.report import report
from gpu_platform.cli.requests import request, submit
from gpu_platform.cli.scorecard import scorecard
from gpu_platform.cli.simulate import simulate_cmd


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Govern a shared GPU pool: lanes, admission, lineage and cost."""


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
