"""The `gpu-platform` command line: `app` holds the root group, each other module one command group.
The top of the import graph: may import every domain package; Dagster-layer code only lazily (`resources.k8s` for `k8s render`).
Start-up stays light (issue 40): `app` imports a command's module only when that command is
resolved, and each module imports its heavy dependencies (SQLAlchemy, DuckDB, polars, numpy,
Dagster, the finops runner, the admission cases) inside the functions that use them, so
`gpu-platform --help` and every `COMMAND --help` answer without them (tests/cli).
"""

from gpu_platform.cli.app import main

__all__ = ["main"]
