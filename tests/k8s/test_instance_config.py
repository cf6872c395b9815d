"""`gpu-platform dagster-config` writes a dagster.yaml that Dagster's own validation accepts."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
import yaml
from click.testing import CliRunner

# Private Dagster modules are allowed in tests: they are Dagster's own instance-config checks.
from dagster._config import validate_config
from dagster._core.instance.config import dagster_instance_config
from dagster._core.storage.dagster_run import DagsterRun
from dagster_k8s import K8sRunLauncher

from gpu_platform.cli.k8s import dagster_config
from gpu_platform.gate.instance_config import (
    RUN_TAG_LANE,
    WAREHOUSE_RUN_BUFFER,
    dagster_instance_yaml,
    pool_limit_commands,
    pool_limits,
)


@pytest.mark.parametrize("postgres", [False, True], ids=["sqlite", "postgres"])
@pytest.mark.parametrize("k8s", [False, True], ids=["local", "k8s"])
def test_written_yaml_passes_dagster_validation(
    tmp_path: Path, k8s_policy, postgres: bool, k8s: bool
) -> None:
    args = (
        ["--out", str(tmp_path / "dagster.yaml")]
        + (["--postgres"] if postgres else [])
        + (["--k8s"] if k8s else [])
    )
    result = CliRunner().invoke(dagster_config, args)
    if k8s and not postgres:
        # run pods on other nodes cannot share SQLite: refused in one line, nothing written
        assert result.exit_code == 2
        assert "--k8s needs --postgres" in result.output
        assert not (tmp_path / "dagster.yaml").exists()
        return
    assert result.exit_code == 0, result.output
    text = (tmp_path / "dagster.yaml").read_text()
    assert "dagster instance concurrency set duckdb_warehouse 1" in text
    config, _ = dagster_instance_config(str(tmp_path))
    assert set(config) >= {"run_coordinator", "concurrency", "storage"}
    assert ("run_launcher" in config) is k8s
    assert next(iter(config["storage"])) == ("postgres" if postgres else "sqlite")
    if postgres:
        db = config["storage"]["postgres"]["postgres_db"]
        assert db["hostname"] == {"env": "DAGSTER_PG_HOST"}
        assert db["scheme"] == "postgresql+psycopg2"
    if k8s:
        launcher = config["run_launcher"]
        assert (launcher["module"], launcher["class"]) == ("dagster_k8s", "K8sRunLauncher")
        checked = validate_config(K8sRunLauncher.config_type(), launcher["config"])
        assert checked.success, checked.errors


def test_lane_limits_reach_a_live_instance(k8s_policy) -> None:
    config = dagster_instance_yaml(k8s_policy, postgres=False, k8s=False)
    overrides = {k: config[k] for k in ("run_coordinator", "concurrency")}
    with dg.instance_for_test(overrides=overrides) as instance:
        assert type(instance.run_coordinator).__name__ == "QueuedRunCoordinator"
        queue = instance.get_concurrency_config().run_queue_config
        limits = {(t["key"], str(t["value"])): t["limit"] for t in queue.tag_concurrency_limits}
        for lane in k8s_policy.lanes.values():
            assert limits[(RUN_TAG_LANE, lane.name)] == lane.max_concurrent_runs
        # The default policy's research sweep limit: 12 running jobs per team.
        per_team = ("gpu-platform/team.research_best_effort", str({"applyLimitPerUniqueValue": True}))
        assert limits[per_team] == 12
        assert (
            queue.max_concurrent_runs
            == sum(lane.max_concurrent_runs for lane in k8s_policy.lanes.values()) + 10
        )
        # Pool limits live in the instance database: apply them as the header's commands would.
        for pool, limit in pool_limits(k8s_policy).items():
            instance.event_log_storage.set_concurrency_slots(pool, limit)
        assert instance.event_log_storage.get_concurrency_info("duckdb_warehouse").slot_count == 1
        # a run whose first step waits for the warehouse slot still starts (and waits at the slot,
        # where today's pricing outranks a backfill): the run queue does not hold it back
        pools = instance.get_concurrency_config().pool_config
        assert pools.pool_granularity.value == "op" and pools.op_granularity_run_buffer == WAREHOUSE_RUN_BUFFER > 0


def test_pool_commands_cover_exactly_the_pools_assets_declare(k8s_policy) -> None:
    """`dagster-config` and the assets agree: every pool a step claims has a limit, and no limit
    is written for a pool nothing claims (a lane pool no asset declares would never count)."""
    from assets.definitions import build_definitions

    defs = build_definitions("test")
    declared = set()
    for a in [*defs.assets, *(defs.asset_checks or [])]:
        op = getattr(a, "op", None)
        if op is not None and op.pool:
            declared.add(op.pool)
    for job in defs.resolve_all_job_defs():
        for node in job.graph.nodes:
            pool = getattr(node.definition, "pool", None)
            if pool:
                declared.add(pool)
    assert declared == set(pool_limits(k8s_policy)) == {"duckdb_warehouse"}
    commands = pool_limit_commands(k8s_policy)
    assert commands == ["dagster instance concurrency set duckdb_warehouse 1"]


def test_stdout_is_the_yaml(k8s_policy) -> None:
    result = CliRunner().invoke(dagster_config, [])
    assert result.exit_code == 0
    assert yaml.safe_load(result.stdout) == dagster_instance_yaml(k8s_policy, postgres=False, k8s=False)


def _team_policy():
    """The default policy with research's team limits: default 2 running, perception 3 of its own."""
    from gpu_platform.policy import default_policy_path, parse_policy

    raw = yaml.safe_load(default_policy_path().read_text())
    raw["lanes"]["research_best_effort"]["team_limits"] = {
        "default": {"max_share": 0.5, "max_running": 2},
        "teams": {"perception": {"max_running": 3}},
    }
    return parse_policy(raw)


def test_team_run_limits_hold_each_team_in_a_live_instance(tmp_path: Path) -> None:
    """The per-team run limit reaches Dagster's run queue: with the tags the gate puts on runs,
    a team under the lane default is held at its limit per unique team, another team still
    starts, and a team with its own (higher) entry is held at that one, not the default."""
    from dagster._utils.tags import TagConcurrencyLimitsCounter

    from gpu_platform.gate.tick import TAG_TEAM, launch_for
    from gpu_platform.requests.ledger import Ledger
    from gpu_platform.requests.model import validate_request
    from tests.gate.helpers import raw_request

    pol = _team_policy()
    limits = [t for t in dagster_instance_yaml(pol)["concurrency"]["runs"]["tag_concurrency_limits"]]
    assert {"key": "gpu-platform/team.research_best_effort", "value": {"applyLimitPerUniqueValue": True}, "limit": 2} in limits
    assert {"key": "gpu-platform/lane-team", "value": "research_best_effort.perception", "limit": 3} in limits
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.db'}")

    def run_for(team: str, i: int) -> DagsterRun:
        raw = raw_request("research_best_effort", team=team, experiment_id=f"exp-{team}-{i}", output_artifact_ids=[f"o-{team}-{i}"])
        raw["cost_center"] = pol.teams[team].cost_center
        raw["data_access_scope"] = pol.teams[team].data_access_scopes[0]
        rid = ledger.submit(validate_request(raw, pol))
        launch = launch_for(pol, ledger.state(rid), 1, "h100-ondemand")
        assert launch.tags[TAG_TEAM] == team
        return DagsterRun(job_name="workload", run_id=f"run-{team}-{i}", tags=dict(launch.tags))

    overrides = {k: dagster_instance_yaml(pol)[k] for k in ("run_coordinator", "concurrency")}
    with dg.instance_for_test(overrides=overrides) as instance:
        queue = instance.get_concurrency_config().run_queue_config
        planning = [run_for("planning", i) for i in range(3)]
        perception = [run_for("perception", i) for i in range(4)]
        mapping = run_for("mapping", 0)
        counter = TagConcurrencyLimitsCounter(queue.tag_concurrency_limits, planning[:2] + perception[:2])
        assert counter.is_blocked(planning[2])  # planning holds 2 of 2 in research
        assert not counter.is_blocked(mapping)  # another team still starts
        assert not counter.is_blocked(perception[2])  # its own limit is 3, above the default
        counter.update_counters_with_launched_item(perception[2])
        assert counter.is_blocked(perception[3])


def test_lanes_without_team_limits_get_no_team_run_limit() -> None:
    from gpu_platform.gate.instance_config import team_limit_tags

    pol = _team_policy()
    assert team_limit_tags(pol, "release_eval", "safety") == {}
    assert team_limit_tags(pol, "research_best_effort", "planning") == {"gpu-platform/team.research_best_effort": "planning"}
    assert team_limit_tags(pol, "research_best_effort", "perception") == {"gpu-platform/lane-team": "research_best_effort.perception"}
