"""Command groups defined beside their domain modules, attached to `gpu-platform`."""

from __future__ import annotations

import click


def commands() -> list[click.Command]:
    from gpu_platform.admission.cli import admit, kueue
    from gpu_platform.autoscale.cli import autoscale
    from gpu_platform.feeds.cli import feeds
    from gpu_platform.k8s_cli import dagster_config, k8s
    from gpu_platform.lineage_cli import lineage, retention
    from gpu_platform.metrics.cli import metrics
    from gpu_platform.queueview.cli import explain
    from gpu_platform.report.cli import report
    from gpu_platform.simulate.cli import simulate_cmd
    from gpu_platform.sqlmodels.cli import cost

    return [admit, kueue, k8s, dagster_config, lineage, retention, cost, explain, metrics, autoscale, report, feeds, simulate_cmd]
