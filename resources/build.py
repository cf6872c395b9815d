"""The one place that reads the environment to choose resources, at call time."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import dagster as dg

from gpu_platform.lineage.evidence import default_evidence_root
from gpu_platform.requests.ledger import default_ledger_url
from resources.evidence import EvidenceStoreResource
from resources.ledger import LedgerResource
from resources.local_executor import LocalGpuExecutor
from resources.policy import PolicyResource
from resources.settings import PlatformSettings
from resources.warehouse import Warehouse

ENVIRONMENTS = ("local", "test", "prod")


SECRET_VARIABLES = ("GPU_PLATFORM_LEDGER_URL", "GPU_PLATFORM_DCGM_ENDPOINTS")
"""Variables whose values may carry credentials (a password in a URL): resources get them as
`dg.EnvVar`, resolved when a run or sensor starts, so the repository snapshot and run config
hold the variable's name only."""


def _config_value(env: Mapping[str, str], name: str, default: str) -> str:
    """`dg.EnvVar(name)` when `env` is the process environment's view of `name` (Dagster resolves
    EnvVars from the process environment), else the literal value (a test's own mapping)."""
    value = env.get(name)
    if not value:
        return default
    if name in SECRET_VARIABLES and os.environ.get(name) == value:
        return dg.EnvVar(name)
    return value


def platform_home(env: Mapping[str, str]) -> Path:
    return Path(env.get("GPU_PLATFORM_HOME", "var")).resolve()


def build_resources(name: str | None = None, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Resources for `local` (one machine: SQLite ledger, DuckDB warehouse, local GPU executor),
    `test` (the same parts; tests point GPU_PLATFORM_HOME at a temp dir) or `prod` (ledger on
    Postgres via GPU_PLATFORM_LEDGER_URL, workloads as Kubernetes Jobs).

    name=None: `GPU_PLATFORM_ENV`, default `local`.
    """
    env = os.environ if env is None else env
    name = name or env.get("GPU_PLATFORM_ENV", "local")
    if name not in ENVIRONMENTS:
        raise ValueError(f"GPU_PLATFORM_ENV={name!r}: expected one of {', '.join(ENVIRONMENTS)}")
    if name == "prod" and not env.get("GPU_PLATFORM_LEDGER_URL"):
        raise ValueError("GPU_PLATFORM_ENV=prod needs GPU_PLATFORM_LEDGER_URL (the ledger on PostgreSQL)")
    home = platform_home(env)
    work_root = env.get("GPU_PLATFORM_WORK_ROOT") or str(home / "work")
    return {
        "policy": PolicyResource(path=env.get("GPU_PLATFORM_POLICY", "")),
        "ledger": LedgerResource(url=_config_value(env, "GPU_PLATFORM_LEDGER_URL", default_ledger_url(env))),
        "settings": PlatformSettings(
            home=str(home),
            executor="k8s" if name == "prod" else "local",
            dcgm_endpoints=_config_value(env, "GPU_PLATFORM_DCGM_ENDPOINTS", ""),
            work_root=work_root,
            work_claim=env.get("GPU_PLATFORM_WORK_CLAIM", ""),
            kubeconfig=env.get("KUBECONFIG", "") if name == "prod" else "",
        ),
        "evidence": EvidenceStoreResource(root=default_evidence_root(dict(env)), work_root=work_root),
        "executor": LocalGpuExecutor(
            state_dir=str(home / "gpus"),
            local_gpus=env.get("GPU_PLATFORM_LOCAL_GPUS") or None,
            nvml_feeds_dir=str(home / "feeds"),
        ),
        "warehouse": Warehouse(path=env.get("GPU_PLATFORM_WAREHOUSE", str(home / "warehouse.duckdb")),
                               policy_path=env.get("GPU_PLATFORM_POLICY", "")),
    }
