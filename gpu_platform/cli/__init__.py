"""The `gpu-platform` command line: `app` holds the root group, each other module one command group."""

from gpu_platform.cli.app import main

__all__ = ["main"]
