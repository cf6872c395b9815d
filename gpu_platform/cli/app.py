"""`gpu-platform`: the platform's command line, one module per command group in this package.

Exit codes: 0 success, 2 invalid input (every problem is printed), 1 any other failure.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from gpu_platform.cli.project import Resolution

COMMANDS: dict[str, tuple[str, str]] = {
    "policy": ("policy:policy", "Inspect and validate the GPU pool policy."),
    "request": ("requests:request", "Validate job requests."),
    "submit": ("requests:submit", "Validate and record requests in the ledger; print each request id."),
    "queue": (
        "queue:queue",
        "Show requests by lane: name, owner, target, position, the reason each one waits, and its estimated start.",
    ),
    "explain": (
        "explain:explain",
        "Print every decision on REQUEST_ID: reason, position, flavor, preemptor or victims, policy rule.",
    ),
    "admit": ("admission:admit", "Run admission cases and check their expectations."),
    "kueue": ("admission:kueue", "Kueue manifests generated from the policy."),
    "k8s": ("k8s:k8s", "Kubernetes: the Job a request's workload step becomes."),
    "cluster": ("cluster:cluster", "The Kubernetes cluster with Kueue, read back on demand."),
    "deploy": ("deploy:deploy", "Deploy the platform on a Kubernetes cluster with Kueue (docs/deploy.md)."),
    "dagster-config": (
        "k8s:dagster_config",
        "Write the Dagster instance dagster.yaml from the policy: per-lane run limits, lane pools, storage "
        "(SQLite or Postgres) and, with --k8s, the K8sRunLauncher.",
    ),
    "lineage": (
        "lineage:lineage",
        "Print the lineage tree back from ID: a request id or an output artifact id (a released model or map, "
        "a replay, a label batch...).",
    ),
    "retention": ("lineage:retention", "Evidence retention: holds and sweeps."),
    "cost": ("cost:cost", "GPU cost models: build a day, report unit costs and chargeback, export it as FOCUS."),
    "feeds": ("feeds:feeds", "Feed ingestion: DCGM, FOCUS billing, node and pod inventory, requests per service."),
    "metrics": ("metrics:metrics", "Prometheus metrics of the queue."),
    "autoscale": ("autoscale:autoscale", "Autoscaling demand from the queue."),
    "report": (
        "report:report",
        "Write index.html and PNG plots: queue wait by lane, utilization, cost by team, unit costs, signals.",
    ),
    "simulate": (
        "simulate:simulate_cmd",
        "Replay a job trace through the admission engine: per-lane waits, utilization, lost work.",
    ),
    "approve": ("approve:approve", "Record a safety approval or cost exception for REQUEST_ID, granted by ROLE."),
    "scorecard": (
        "scorecard:scorecard",
        "Print DAY's scorecards (queue wait, utilization, failures, preemption, cache, coverage, bypass) and the "
        "capacity signals that fired, with their actions.",
    ),
    "demo": ("demo:demo", "The living demo: seed history and feeds, then run the Dagster UI (see README, The demo)."),
}
"""Command name -> ("module:attribute" under gpu_platform.cli, its short help). A command's module
is imported when the command is resolved (run, or asked for its own --help), never for the root's
--help, which lists these short helps (tests/cli checks each against the command's docstring)."""


class LazyGroup(click.Group):
    """A group whose commands live in `COMMANDS` and are imported one module at a time, on use:
    `gpu-platform --help` imports click and nothing of the domain."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMANDS, *self.commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands or cmd_name not in COMMANDS:
            return self.commands.get(cmd_name)
        module, _, attr = COMMANDS[cmd_name][0].partition(":")
        cmd = getattr(importlib.import_module(f"gpu_platform.cli.{module}"), attr)
        self.commands[cmd_name] = cmd
        return cmd

    def invoke(self, ctx: click.Context) -> object:
        """A command's output that cannot be written (`WriteRefused`: ENOSPC, EACCES, EROFS, a
        planted directory link) is one line naming the path, exit 1, not a traceback."""
        try:
            return super().invoke(ctx)
        except OSError as exc:
            from gpu_platform.safeload.files import WriteRefused

            if isinstance(exc, WriteRefused):
                raise click.ClickException(str(exc)) from None
            raise

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """click's own listing, from the short helps in `COMMANDS` (shortened to the width as
        click shortens a docstring) instead of importing every command."""
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(n) for n in names)
        rows = []
        for name in names:
            cmd = self.commands.get(name) or click.Command(name, help=COMMANDS[name][1])
            if not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.pass_context
def main(ctx: click.Context) -> None:
    """Govern a shared GPU pool: lanes, admission, lineage and cost.

    State (ledger, warehouse, evidence) lives under the home: $GPU_PLATFORM_HOME, else the
    project config (./gpu-platform.yaml, $XDG_CONFIG_HOME/gpu-platform/config.yaml), else ./var.
    """
    from gpu_platform.cli.project import ConfigError, apply_config

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
    from gpu_platform.cli.project import CONFIG_NAME

    if "GPU_PLATFORM_HOME" in found.applied:
        return f"home from {found.config}"
    if os.environ.get("GPU_PLATFORM_HOME"):
        return "from GPU_PLATFORM_HOME"
    return (
        f"the default: GPU_PLATFORM_HOME is unset and no {CONFIG_NAME} names a home; "
        "the demo's state is under .demo"
    )

