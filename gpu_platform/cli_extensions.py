"""Command groups defined beside their domain modules, attached to `gpu-platform`."""

from __future__ import annotations

import click


def commands() -> list[click.Command]:
    return []
