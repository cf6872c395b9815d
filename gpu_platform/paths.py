"""Where local state lives, from the environment (as docs/configuration.md's table says).

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


DEFAULT_FIRST_DAY = "2026-01-01"
DEMO_MARKER = ".demo_seeded"


def first_data_day(env: Mapping[str, str] | None = None) -> str:
    """The first day of the daily FinOps partitions (YYYY-MM-DD): `GPU_PLATFORM_FIRST_DAY`, else
    the first seeded day of a demo under `GPU_PLATFORM_HOME` (its seed marker), else 2026-01-01."""
    import json
    from datetime import date

    env = os.environ if env is None else env
    value = env.get("GPU_PLATFORM_FIRST_DAY")
    if not value:
        try:
            value = json.loads((platform_home(env) / DEMO_MARKER).read_text())["days"][0]
        except (OSError, ValueError, KeyError, IndexError, TypeError):
            value = DEFAULT_FIRST_DAY
    try:
        return date.fromisoformat(value).isoformat()
    except ValueError as exc:
        raise ValueError(f"GPU_PLATFORM_FIRST_DAY: {value!r} is not a date (YYYY-MM-DD)") from exc
