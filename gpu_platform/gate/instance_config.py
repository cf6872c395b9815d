"""The Dagster instance `dagster.yaml`, written from the policy (pure dict building, no Dagster import).

Lane-aware concurrency backs up the admission gate:
- run queue: `QueuedRunCoordinator` with one `tag_concurrency_limits` entry per lane (runs tagged
  `gpu-platform/lane=<lane>`, limit = the lane's `max_concurrent_runs`). Dagster 1.13 refuses
  `tag_concurrency_limits` under `run_coordinator.config` once a `concurrency` section exists, so
  they live in `concurrency.runs` (the current home of the same setting).
- team limits: a lane's `team_limits.*.max_running` as run limits too. Dagster matches one tag
  per limit and applies every limit that matches, so the gate tags each run of a lane with team
  limits with one lane-scoped team tag (`team_limit_tags`): a team under the lane default gets
  `gpu-platform/team.<lane>=<team>`, limited with `applyLimitPerUniqueValue: true` (each team its
  own count); a team with its own entry gets `gpu-platform/lane-team=<lane>.<team>`, limited by
  that value alone (so an override above the default is not also held to it). GPU caps
  (`max_gpus`, `max_share`) have no run-queue form; the admission gate enforces them.
- pools: only pools that assets declare, with op granularity (and a run buffer, so a run whose
  first step waits for a slot still starts and waits at the slot, where priority counts): `duckdb_warehouse` (limit 1) for
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

RUN_TAG_TEAM_IN_LANE = "gpu-platform/team.{lane}"
"""Run tag (per lane) naming the team of a run that falls under the lane's default team limit."""

RUN_TAG_LANE_TEAM = "gpu-platform/lane-team"
"""Run tag `<lane>.<team>` on a run whose team has its own entry in the lane's team limits."""

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


WAREHOUSE_RUN_BUFFER = 10
"""`op_granularity_run_buffer`: how far the run queue looks past steps already waiting for the
warehouse slot. Dagster holds a run in the queue while (slot limit - steps waiting) + buffer <= 0,
and an in-process run makes every ready step wait at once (a backfill: up to 7), so with 10 a
pricing run is never held in the queue by another's steps; it waits at the slot instead, where
its priority counts."""

PRIORITY_TAG = "dagster/priority"
"""Dagster's run tag: orders the run queue and, added to each step's own, the claims on a pool slot."""

TODAY_PRIORITY = {PRIORITY_TAG: "10"}
"""Pricing of today and of the day that just ended (finops_daily): ahead of every backfill step."""

RELEASE_CHECK_PRIORITY = {PRIORITY_TAG: "20"}
"""A release's `cost_attributed` check (a short warehouse read): its claim on the slot outranks a
pricing run's next step, so a release waits one pricing step at most, not a whole run."""

BACKFILL_PRIORITY = {PRIORITY_TAG: "-10"}
"""Backfills of older days: they yield the warehouse slot to anything else that waits for it."""


def pool_limits(policy: Policy) -> dict[str, int]:
    """Pool name -> slot limit, for every pool an asset declares: the warehouse pool at 1.

    (policy: kept so the limits can come from it; no pool is per lane.)
    """
    del policy
    return {WAREHOUSE_POOL: 1}


def pool_limit_commands(policy: Policy) -> list[str]:
    """The `dagster instance concurrency set` commands that apply `pool_limits` to an instance."""
    return [f"dagster instance concurrency set {pool} {limit}" for pool, limit in pool_limits(policy).items()]


def _team_running(policy: Policy, lane_name: str, team: str) -> tuple[int | None, bool]:
    """(running-job cap of `team` in the lane, whether it comes from the team's own entry)."""
    tl = policy.lanes[lane_name].team_limits
    if tl is None:
        return None, False
    base = tl.default.max_running if tl.default is not None else None
    own = tl.teams.get(team)
    if own is None:
        return base, False
    return (own.max_running if own.max_running is not None else base), True


def team_limit_tags(policy: Policy, lane: str, team: str | None) -> dict[str, str]:
    """The run tags that put a run of `team` in `lane` under the lane's team run limits."""
    if not team or lane not in policy.lanes:
        return {}
    cap, own = _team_running(policy, lane, team)
    if cap is None:
        return {}
    if own:
        return {RUN_TAG_LANE_TEAM: f"{lane}.{team}"}
    return {RUN_TAG_TEAM_IN_LANE.format(lane=lane): team}


def tag_concurrency_limits(policy: Policy) -> list[dict[str, Any]]:
    """One limit per lane (max_concurrent_runs), then each lane's team run limits."""
    out: list[dict[str, Any]] = [
        {"key": RUN_TAG_LANE, "value": lane.name, "limit": lane.max_concurrent_runs}
        for lane in policy.lanes_by_priority()
    ]
    for lane in policy.lanes_by_priority():
        tl = lane.team_limits
        if tl is None:
            continue
        if tl.default is not None and tl.default.max_running is not None:
            out.append(
                {
                    "key": RUN_TAG_TEAM_IN_LANE.format(lane=lane.name),
                    "value": {"applyLimitPerUniqueValue": True},
                    "limit": tl.default.max_running,
                }
            )
        for team in sorted(tl.teams):
            cap, _own = _team_running(policy, lane.name, team)
            if cap is not None:
                out.append({"key": RUN_TAG_LANE_TEAM, "value": f"{lane.name}.{team}", "limit": cap})
    return out


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
            # a run whose first step waits for the warehouse slot is still started (up to
            # WAREHOUSE_RUN_BUFFER such runs), so today's pricing (higher dagster/priority) is
            # waiting at the slot when a backfill's step ends, not behind the backfill in the queue
            "pools": {"granularity": "op", "op_granularity_run_buffer": WAREHOUSE_RUN_BUFFER},
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
        "# Runs of a lane with team_limits are also limited per team (lanes.*.team_limits.*.max_running):",
        f"#   {RUN_TAG_TEAM_IN_LANE.format(lane='<lane>')}=<team> per unique value, {RUN_TAG_LANE_TEAM}=<lane>.<team> per team entry.",
        "# Per-lane workload concurrency is the run limits above (one workload step per run); GPU counts",
        "# are enforced by the admission gate. The only pool is the warehouse writers' (DuckDB: one writer).",
        "# Pool limits live in the instance database; apply them once per instance with:",
        *(f"#   {cmd}" for cmd in pool_limit_commands(policy)),
    ]
    return "\n".join(header) + "\n" + yaml.safe_dump(config, sort_keys=False)
