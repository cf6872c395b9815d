"""Where local state lives, from the environment (as the README's configuration table says).

`GPU_PLATFORM_HOME` (default `./var`) holds the ledger, the warehouse, evidence and saved feeds;
`GPU_PLATFORM_WAREHOUSE` (default `$GPU_PLATFORM_HOME/warehouse.duckdb`) is the DuckDB file every
command and the Dagster resources use.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


def platform_home(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    return Path(env.get("GPU_PLATFORM_HOME") or "var").resolve()


def default_warehouse(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    if env.get("GPU_PLATFORM_WAREHOUSE"):
        return Path(env["GPU_PLATFORM_WAREHOUSE"])
    return platform_home(env) / "warehouse.duckdb"
