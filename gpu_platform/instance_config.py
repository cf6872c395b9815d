"""The Dagster instance `dagster.yaml`, written from the policy (pure dict building, no Dagster import).

Lane-aware concurrency backs up the admission gate:
- run queue: `QueuedRunCoordinator` with one `tag_concurrency_limits` entry per lane (runs tagged
  `gpu-platform/lane=<lane>`, limit = the lane's `max_concurrent_runs`). Dagster 1.13 refuses
  `tag_concurrency_limits` under `run_coordinator.config` once a `concurrency` section exists, so
  they live in `concurrency.runs` (the current home of the same setting).
- pools: only pools that assets declare, with op granularity: `duckdb_warehouse` (limit 1) for
  every warehouse-writing step. There are no lane pools: an asset serves several lanes, a Dagster
  pool is fixed per asset, and each workload run has exactly one workload step, so the per-lane
  run limits above already bound a lane's concurrent workload steps; GPU counts are the gate's
  job (admission against quotas). Pool limits are stored in the instance database, not in
  `dagster.yaml`; apply them with the `dagster instance concurrency set` commands from
  `pool_limit_commands` (the header of the written file lists them).
- storage: SQLite under `DAGSTER_HOME`, or Postgres from `DAGSTER_PG_*` env vars (`--postgres`).
- run launcher: `K8sRunLauncher` only when asked (`--k8s`).
"""

from __future__ import annotations

from typing import Any

import yaml

from gpu_platform.policy import Policy

RUN_TAG_LANE = "gpu-platform/lane"
"""Run tag the gate sets on every workload run; the run queue limits runs per value."""

NON_LANE_RUNS = 10
"""Run slots beyond the lanes' sum, for runs without a lane (cost, scorecards, sensors' jobs)."""

POSTGRES_ENV = {
    "hostname": "DAGSTER_PG_HOST",
    "username": "DAGSTER_PG_USER",
    "password": "DAGSTER_PG_PASSWORD",
    "db_name": "DAGSTER_PG_DB",
    "port": "DAGSTER_PG_PORT",
}


WAREHOUSE_POOL = "duckdb_warehouse"
"""The pool of every warehouse-writing step (assets/finops.py, assets/ingest.py): DuckDB allows one
writing process per file, so its limit is 1."""


def pool_limits(policy: Policy) -> dict[str, int]:
    """Pool name -> slot limit, for every pool an asset declares: the warehouse pool at 1.

    (policy: kept so the limits can come from it; no pool is per lane.)
    """
    del policy
    return {WAREHOUSE_POOL: 1}


def pool_limit_commands(policy: Policy) -> list[str]:
    """The `dagster instance concurrency set` commands that apply `pool_limits` to an instance."""
    return [f"dagster instance concurrency set {pool} {limit}" for pool, limit in pool_limits(policy).items()]


def tag_concurrency_limits(policy: Policy) -> list[dict[str, Any]]:
    return [
        {"key": RUN_TAG_LANE, "value": lane.name, "limit": lane.max_concurrent_runs}
        for lane in policy.lanes_by_priority()
    ]


def dagster_instance_yaml(
    policy: Policy,
    postgres: bool = False,
    k8s: bool = False,
    *,
    job_namespace: str = "dagster",
    service_account_name: str = "dagster",
    instance_config_map: str = "dagster-instance",
    image_pull_policy: str = "IfNotPresent",
    postgres_password_secret: str | None = "dagster-postgresql-secret",
) -> dict[str, Any]:
    """The instance config as a mapping (what `dagster.yaml` holds).

    k8s launcher fields: `service_account_name` (runs' service account), `job_namespace` (where run
    Jobs are created; step Jobs go to each team's namespace via the executor config),
    `image_pull_policy`, `instance_config_map` (ConfigMap holding this `dagster.yaml`, mounted at
    DAGSTER_HOME in run pods), `postgres_password_secret` (Secret with key `postgresql-password`,
    exposed as DAGSTER_PG_PASSWORD; None: not mounted).
    """
    lanes_total = sum(lane.max_concurrent_runs for lane in policy.lanes.values())
    config: dict[str, Any] = {
        "run_coordinator": {"module": "dagster", "class": "QueuedRunCoordinator"},
        "concurrency": {
            "runs": {
                "max_concurrent_runs": lanes_total + NON_LANE_RUNS,
                "tag_concurrency_limits": tag_concurrency_limits(policy),
            },
            "pools": {"granularity": "op"},
        },
    }
    if postgres:
        config["storage"] = {
            "postgres": {
                "postgres_db": {
                    **{field: {"env": var} for field, var in POSTGRES_ENV.items()},
                    "scheme": "postgresql+psycopg2",
                }
            }
        }
    else:
        config["storage"] = {"sqlite": {"base_dir": {"env": "DAGSTER_HOME"}}}
    if k8s:
        launcher: dict[str, Any] = {
            "service_account_name": service_account_name,
            "job_namespace": job_namespace,
            "image_pull_policy": image_pull_policy,
            "instance_config_map": instance_config_map,
            "load_incluster_config": True,
        }
        if postgres_password_secret:
            launcher["postgres_password_secret"] = postgres_password_secret
        config["run_launcher"] = {"module": "dagster_k8s", "class": "K8sRunLauncher", "config": launcher}
    return config


def render_instance_yaml(config: dict[str, Any], policy: Policy) -> str:
    """`dagster.yaml` text: a header saying where it came from and how to apply pool limits."""
    header = [
        "# Dagster instance config written by `gpu-platform dagster-config` from the GPU pool policy.",
        f"# Runs tagged {RUN_TAG_LANE}=<lane> are limited per lane (lanes.*.max_concurrent_runs).",
        "# Per-lane workload concurrency is the run limits above (one workload step per run); GPU counts",
        "# are enforced by the admission gate. The only pool is the warehouse writers' (DuckDB: one writer).",
        "# Pool limits live in the instance database; apply them once per instance with:",
        *(f"#   {cmd}" for cmd in pool_limit_commands(policy)),
    ]
    return "\n".join(header) + "\n" + yaml.safe_dump(config, sort_keys=False)
