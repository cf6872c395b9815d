"""The one place that reads the environment to choose resources, at call time."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpu_platform.ledger import default_ledger_url
from resources.ledger import LedgerResource
from resources.policy import PolicyResource
from resources.settings import PlatformSettings

ENVIRONMENTS = ("local", "test", "prod")


def platform_home(env: Mapping[str, str]) -> Path:
    return Path(env.get("GPU_PLATFORM_HOME", "var")).resolve()


def build_resources(name: str | None = None, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Resources for `local` (one machine: SQLite ledger, DuckDB, local GPU executor), `test`
    (same parts under a temporary GPU_PLATFORM_HOME) or `prod` (Postgres ledger, Kubernetes).

    name=None: `GPU_PLATFORM_ENV`, default `local`.
    """
    env = os.environ if env is None else env
    name = name or env.get("GPU_PLATFORM_ENV", "local")
    if name not in ENVIRONMENTS:
        raise ValueError(f"GPU_PLATFORM_ENV={name!r}: expected one of {', '.join(ENVIRONMENTS)}")
    home = platform_home(env)
    resources: dict[str, Any] = {
        "policy": PolicyResource(path=env.get("GPU_PLATFORM_POLICY", "")),
        "ledger": LedgerResource(url=default_ledger_url(env)),
        "settings": PlatformSettings(home=str(home)),
    }
    resources.update(_optional_resources(name, env, home))
    return resources


def _optional_resources(name: str, env: Mapping[str, str], home: Path) -> dict[str, Any]:
    return {}
