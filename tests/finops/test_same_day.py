"""Same-day cost: today's partition exists, a finished workload run triggers "today so far", the
daily schedule finalises yesterday, and local runs are priced on this machine's node."""

from __future__ import annotations

from datetime import UTC, date, datetime

import dagster as dg

from assets.finops import finops_assets, finops_daily_partitions, finops_jobs, finops_schedules
from assets.finops_today import finops_today_sensor
from gpu_platform.devices.gpus import ConfiguredInventory
from gpu_platform.finops.feeds.k8s_inventory import local_node_list, parse_nodes
from gpu_platform.gate.tick import TAG_WORKLOAD
from resources.warehouse import Warehouse


def _repo():
    return dg.Definitions(assets=finops_assets, jobs=[*finops_jobs, _workload_job], schedules=finops_schedules,
                          sensors=[finops_today_sensor],
                          resources={"warehouse": Warehouse(path=":memory:")}).get_repository_def()


def test_today_is_a_partition_and_the_schedule_finalises_yesterday():
    today = datetime.now(UTC).date().isoformat()
    assert finops_daily_partitions.get_last_partition_key() == today
    (schedule,) = finops_schedules
    assert schedule.default_status == dg.DefaultScheduleStatus.RUNNING
    ctx = dg.build_schedule_context(scheduled_execution_time=datetime(2026, 11, 29, 2, 0, tzinfo=UTC),
                                    repository_def=_repo())
    (request,) = schedule.evaluate_tick(ctx).run_requests
    assert request.partition_key == "2026-11-28"


@dg.op
def _noop():
    return 1


@dg.job(name="training_run_job")
def _workload_job():
    _noop()


def test_sensor_prices_today_after_a_finished_workload_run():
    with dg.instance_for_test() as instance:
        ctx = dg.build_sensor_context(instance=instance, repository_def=_repo())
        assert finops_today_sensor.evaluate_tick(ctx).run_requests == []  # nothing finished yet
        # a run the gate did not launch (no workload tag) does not count
        assert _workload_job.execute_in_process(instance=instance).success
        ctx = dg.build_sensor_context(instance=instance, repository_def=_repo())
        assert finops_today_sensor.evaluate_tick(ctx).run_requests == []
        assert _workload_job.execute_in_process(instance=instance, tags={TAG_WORKLOAD: "training_run"}).success
        ctx = dg.build_sensor_context(instance=instance, repository_def=_repo())
        result = finops_today_sensor.evaluate_tick(ctx)
        (request,) = result.run_requests
        assert request.partition_key == datetime.now(UTC).date().isoformat()
        # the cursor moved past that run: the next tick requests nothing
        again = finops_today_sensor.evaluate_tick(dg.build_sensor_context(instance=instance, cursor=result.cursor,
                                                                             repository_def=_repo()))
        assert again.run_requests == []
    assert finops_today_sensor.default_status == dg.DefaultSensorStatus.RUNNING


def test_local_machine_is_a_node_of_the_inventory():
    devices = ConfiguredInventory.parse("4").devices
    batch = parse_nodes(local_node_list("Demo-Host", list(devices), "configured"), source="local:nodes")
    row = batch.rows.row(0, named=True)
    assert (row["node"], row["gpu_capacity"], row["gpu_product"], row["provider_id"]) == (
        "demo-host", 4, "configured GPU", None)
    assert date.today()  # (the asset loads it for today's partition only)
