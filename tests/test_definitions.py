"""The code location loads, and a Dagster instance on the real PostgreSQL materializes an asset."""

import dagster as dg

from assets.definitions import build_definitions, defs
from gpu_platform.policy.loading import load_policy
from resources.build import build_resources


def test_definitions_load_and_resolve():
    d = build_definitions("test")
    repo = d.get_repository_def()
    assert repo is not None
    assert {"ledger", "policy"} <= set(d.resources)
    assert defs is not None


def test_build_resources_rejects_unknown_environment():
    import pytest

    with pytest.raises(ValueError, match="GPU_PLATFORM_ENV='staging'"):
        build_resources("staging", env={})


def test_build_resources_reads_ledger_url_at_call_time(tmp_path):
    url = f"sqlite:///{tmp_path / 'x.db'}"
    res = build_resources("local", env={"GPU_PLATFORM_LEDGER_URL": url})
    assert res["ledger"].url == url
    res = build_resources("local", env={"GPU_PLATFORM_HOME": str(tmp_path)})
    assert res["ledger"].url == f"sqlite:///{tmp_path / 'ledger.db'}"


def test_postgres_instance_materializes_an_asset(pg_url, tmp_path):
    from sqlalchemy.engine import make_url

    u = make_url(pg_url)
    storage = {
        "postgres": {
            "postgres_db": {
                "hostname": u.host,
                "port": u.port,
                "username": u.username,
                "password": u.password or "",
                "db_name": u.database,
                "scheme": "postgresql+psycopg2",
            }
        }
    }

    from resources.policy import PolicyResource

    @dg.asset
    def policy_lane_count(policy: PolicyResource) -> dg.MaterializeResult:
        return dg.MaterializeResult(metadata={"lanes": len(policy.load().lanes)})

    with dg.instance_for_test(overrides={"storage": storage}, temp_dir=str(tmp_path)) as instance:
        assert "Postgres" in type(instance.run_storage).__name__
        result = dg.materialize(
            [policy_lane_count], instance=instance, resources={"policy": build_resources("test", env={})["policy"]}
        )
        assert result.success
        event = instance.get_latest_materialization_event(dg.AssetKey("policy_lane_count"))
        assert event.asset_materialization.metadata["lanes"].value == len(load_policy().lanes) == 9


def test_the_retention_schedule_is_stopped_unless_the_demo_turns_it_on(monkeypatch):
    import pytest

    def status():
        return build_definitions("test").get_schedule_def("retention_sweep_daily").default_status

    monkeypatch.delenv("GPU_PLATFORM_RETENTION_SCHEDULE", raising=False)
    assert status() == dg.DefaultScheduleStatus.STOPPED
    monkeypatch.setenv("GPU_PLATFORM_RETENTION_SCHEDULE", "on")  # what `gpu-platform demo run` sets
    assert status() == dg.DefaultScheduleStatus.RUNNING
    monkeypatch.setenv("GPU_PLATFORM_RETENTION_SCHEDULE", "yes")
    with pytest.raises(ValueError, match="GPU_PLATFORM_RETENTION_SCHEDULE='yes'"):
        build_definitions("test")


def test_under_the_demo_every_schedule_and_sensor_starts_running(monkeypatch):
    """The README says the demo's schedules and sensors are on: each one, none forgotten."""
    monkeypatch.setenv("GPU_PLATFORM_RETENTION_SCHEDULE", "on")  # what `gpu-platform demo run` sets
    defs = build_definitions("test")
    schedules = {s.name: s.default_status for s in defs.schedules or []}
    sensors = {s.name: s.default_status for s in defs.sensors or []}
    assert {"retention_sweep_daily", "finops_daily_schedule"} <= set(schedules)
    assert {"admission_sensor", "finops_today_sensor", "service_replicas_sensor"} <= set(sensors)
    assert {n: st.value for n, st in {**schedules, **sensors}.items() if st.value != "RUNNING"} == {}
