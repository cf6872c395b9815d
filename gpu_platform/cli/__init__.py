"""The `gpu-platform` command line: `app` holds the root group, each other module one command group.
The top of the import graph: may import every domain package; Dagster-layer code only lazily (`resources.k8s` for `k8s render`).
"""

from gpu_platform.cli.app import main

__all__ = ["main"]
