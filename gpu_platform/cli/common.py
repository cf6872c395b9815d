"""Options and error handling shared by every `gpu-platform` command.

Exit codes: 0 success, 2 invalid input (every problem printed, one per line), 1 anything else.
A command that writes the warehouse exits 2 with one line too when another process held it
for the whole bounded wait (`WarehouseBusyExit`).
"""

from __future__ import annotations

import sys
from typing import NoReturn

import click
from rich.console import Console

from gpu_platform.policy import Policy, PolicyError, load_policy

policy_option = click.option(
    "--policy",
    "policy_path",
    type=click.Path(dir_okay=False),
    envvar="GPU_PLATFORM_POLICY",
    default=None,
    help="Policy file (default: $GPU_PLATFORM_POLICY or the packaged default.yaml).",
)
ledger_option = click.option(
    "--ledger",
    "ledger_url",
    default=None,
    help="Ledger SQLAlchemy URL (default: $GPU_PLATFORM_LEDGER_URL or sqlite under $GPU_PLATFORM_HOME).",
)


class WarehouseBusyExit(click.ClickException):
    """A writer of the warehouse found it held by another process for the whole wait
    (`gpu_platform.finops.warehouse.WarehouseBusy`): one line naming the file and the holder, exit 2."""

    exit_code = 2


def fail(title: str, errors: list[str], code: int = 2) -> NoReturn:
    """Print a title and every problem on stderr, then exit (2: invalid input)."""
    click.echo(f"{title}: {len(errors)} problem(s)", err=True)
    for e in errors:
        click.echo(f"  {e}", err=True)
    sys.exit(code)


def policy_or_exit(path: str | None) -> Policy:
    """Load the policy or exit 2 listing every error with its path."""
    try:
        return load_policy(path)
    except PolicyError as exc:
        fail(f"policy invalid: {exc.source}", exc.errors)


console = Console(width=None if sys.stdout.isatty() else 200)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 200)
