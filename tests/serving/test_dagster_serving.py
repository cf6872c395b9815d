"""The Dagster layer of serving: the service asset (a partition per service request, downstream of
released_model), the replicas sensor and the request-count feed in the daily pricing job."""

import json
from datetime import UTC, datetime, timedelta

import dagster as dg

from assets.definitions import build_definitions
from assets.serving import inference_service, service_replicas_sensor
from gpu_platform.requests.ledger import Ledger
from gpu_platform.requests.model import validate_request_file
from resources.ledger import LedgerResource
from resources.settings import PlatformSettings
from resources.warehouse import Warehouse
from tests.serving.test_cost_per_request import build_day


def test_definitions_hold_the_service_asset_sensor_and_feed():
    defs = build_definitions("test")
    graph = defs.get_repository_def().asset_graph
    key = dg.AssetKey("inference_service")
    assert dg.AssetKey("released_model") in graph.get(key).parent_keys
    assert graph.get(key).partitions_def.name == "service_requests"
    assert dg.AssetKey("raw_service_requests") in graph.get(dg.AssetKey("stg_service_requests")).parent_keys
    checks = {c.name for c in graph.get(dg.AssetKey("unit_cost_inference_request")).check_keys}
    assert {"expression_is_true_missing_figure_explained", "expression_is_true_idle_within_cost",
            "unique_day__service__currency"} <= checks
    sensor = defs.get_sensor_def("service_replicas_sensor")
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING
    # the daily pricing job loads the request counts with the other feeds, then prices them
    daily = defs.get_job_def("finops_daily").asset_layer.executable_asset_keys
    assert {dg.AssetKey("raw_service_requests"), dg.AssetKey("unit_cost_inference_request")} <= set(daily)


def _today_counts(feeds, now: datetime, requests: str) -> None:
    """A saved query_range answer of today: `perception-serving`, one point every 5 minutes."""
    day = now.date()
    t0 = int(datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp())
    folder = feeds / "requests" / day.isoformat()
    folder.mkdir(parents=True, exist_ok=True)
    doc = {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"service": "perception-serving"}, "values": [[t0 + 300 * k, requests] for k in range(289)]}]}}
    (folder / "prom.json").write_text(json.dumps(doc))


def _service(ledger: Ledger, policy, rid: str, target_qps: float) -> None:
    from tests.conftest import EXAMPLES

    req = validate_request_file(EXAMPLES / "online_serving.yaml", policy)
    spec = req.service.model_copy(update={"slo": req.service.slo.model_copy(update={"target_qps_per_replica": target_qps})})
    ledger.submit(req.model_copy(update={"request_id": rid, "service": spec}))
    ledger.record(rid, "admitted", flavor="l4-inference")


def test_the_sensor_records_replica_changes_and_materializes_the_service(tmp_path, sqlite_url, policy):
    ledger = Ledger(sqlite_url)
    _service(ledger, policy, "S-1", target_qps=1.5)
    # 3,000 requests per 5 minutes = 10 QPS / 1.5 per replica -> 7, within [2, 6] -> 6
    _today_counts(tmp_path / "feeds", datetime.now(UTC), "3000")
    resources = {"ledger": LedgerResource(url=sqlite_url), "settings": PlatformSettings(home=str(tmp_path))}
    with dg.instance_for_test() as instance:
        result = service_replicas_sensor(dg.build_sensor_context(instance=instance, resources=resources))
        assert [r.partition_key for r in result.run_requests] == ["S-1"]
        assert result.dynamic_partitions_requests[0].partition_keys == ["S-1"]
        events = [e for e in ledger.events("S-1") if e.event == "replicas"]
        assert [(e.details["replicas"], e.details["previous"], e.details["source"]) for e in events] == [(6, 2, "local")]
        instance.add_dynamic_partitions("service_requests", ["S-1"])
        # nothing changed: no event, no run
        again = service_replicas_sensor(dg.build_sensor_context(instance=instance, resources=resources))
        assert again.run_requests == [] and len([e for e in ledger.events("S-1") if e.event == "replicas"]) == 1
        # traffic falls to 300 per 5 minutes (1 QPS): back to min 2, recorded and materialized again
        _today_counts(tmp_path / "feeds", datetime.now(UTC), "300")
        third = service_replicas_sensor(dg.build_sensor_context(instance=instance, resources=resources))
        assert [r.partition_key for r in third.run_requests] == ["S-1"]
        assert ledger.state("S-1").state == "admitted"


def test_no_running_service_is_a_skip(sqlite_url, tmp_path):
    resources = {"ledger": LedgerResource(url=sqlite_url), "settings": PlatformSettings(home=str(tmp_path))}
    with dg.instance_for_test() as instance:
        out = service_replicas_sensor(dg.build_sensor_context(instance=instance, resources=resources))
    assert isinstance(out, dg.SkipReason) and "no running service" in out.skip_message


def test_the_service_asset_shows_its_release_replicas_and_cost_per_request(tmp_path, sqlite_url, policy):
    from tests.conftest import EXAMPLES

    build_day(tmp_path).close()  # perception-serving priced on 2026-11-28: 0.11525 USD per 1,000 requests
    ledger = Ledger(sqlite_url)
    release = validate_request_file(EXAMPLES / "release_chain" / "released_model.yaml", policy)
    ledger.submit(release.model_copy(update={"request_id": "REL-1"}), at=datetime.now(UTC) - timedelta(days=2))
    _service(ledger, policy, "S-1", target_qps=40)
    ledger.record("S-1", "replicas", details={"replicas": 3, "source": "cluster", "previous": 2})
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("service_requests", ["S-1"])
        result = dg.materialize(
            [inference_service], partition_key="S-1", instance=instance,
            resources={"ledger": LedgerResource(url=sqlite_url), "warehouse": Warehouse(path=str(tmp_path / "w.duckdb"))},
        )
        assert result.success
        md = result.asset_materializations_for_node("inference_service")[0].metadata
    assert md["service"].value == "perception-serving" and md["model_id"].value == "model-perception-2026.12-rc1"
    assert md["released_model"].value.endswith("partition=REL-1")
    assert (md["replicas"].value, md["replicas_min"].value, md["replicas_max"].value) == (3, 2, 6)
    assert md["lendable_gpus"].value == 3  # 6 - 3 replicas x 1 GPU
    assert md["replicas_source"].value == "cluster" and md["cost_day"].value == "2026-11-28"
    assert md["cost_per_1k_requests_USD"].value == 0.11525
    assert md["idle_cost_USD"].value == 38.724
    assert "perception-serving" in md["cost_md"].value


def test_on_kubernetes_the_sensor_reads_the_deployments(sqlite_url, policy, tmp_path, monkeypatch):
    """The Deployments as the API returns them (kubernetes client models, serialized as kubectl prints them)."""
    from kubernetes import client

    import gpu_platform.observe.serving.replicas as replicas_mod

    deployment = client.V1Deployment(
        metadata=client.V1ObjectMeta(name="perception-serving", namespace="team-perception",
                                     labels={"gpu-platform.io/service": "perception-serving",
                                             "gpu-platform.io/request-id": "S-1"},
                                     annotations={"gpu-platform.io/request-id": "S-1"}),
        status=client.V1DeploymentStatus(replicas=4, ready_replicas=3))
    monkeypatch.setattr(client.AppsV1Api, "list_deployment_for_all_namespaces",
                        lambda self, label_selector: client.V1DeploymentList(items=[deployment]))
    assert replicas_mod.read_cluster_deployments(api=client.ApiClient())[0]["status"]["replicas"] == 4
    monkeypatch.setattr(replicas_mod, "read_cluster_deployments", lambda api=None: [
        client.ApiClient().sanitize_for_serialization(deployment)])
    monkeypatch.setattr("assets.serving.read_cluster_deployments", replicas_mod.read_cluster_deployments)
    ledger = Ledger(sqlite_url)
    _service(ledger, policy, "S-1", target_qps=40)
    resources = {"ledger": LedgerResource(url=sqlite_url),
                 "settings": PlatformSettings(home=str(tmp_path), executor="k8s")}
    with dg.instance_for_test() as instance:
        result = service_replicas_sensor(dg.build_sensor_context(instance=instance, resources=resources))
    assert [r.partition_key for r in result.run_requests] == ["S-1"]
    (event,) = [e for e in ledger.events("S-1") if e.event == "replicas"]
    assert (event.details["replicas"], event.details["source"]) == (4, "cluster")


def test_the_service_asset_never_waits_for_a_busy_warehouse(tmp_path, sqlite_url, policy):
    """A pricing run holds the warehouse (another process): the service is materialized without
    its cost figures, at once."""
    import subprocess
    import sys
    import time

    build_day(tmp_path).close()
    holder = subprocess.Popen([sys.executable, "-c", "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); "
                               "print('held', flush=True); time.sleep(60)", str(tmp_path / "w.duckdb")],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        ledger = Ledger(sqlite_url)
        _service(ledger, policy, "S-1", target_qps=40)
        with dg.instance_for_test() as instance:
            instance.add_dynamic_partitions("service_requests", ["S-1"])
            t0 = time.monotonic()
            result = dg.materialize(
                [inference_service], partition_key="S-1", instance=instance,
                resources={"ledger": LedgerResource(url=sqlite_url),
                           "warehouse": Warehouse(path=str(tmp_path / "w.duckdb"), lock_wait_s=300)})
            assert result.success and time.monotonic() - t0 < 60
            md = result.asset_materializations_for_node("inference_service")[0].metadata
        assert md["replicas"].value == 2 and "cost_per_1k_requests_USD" not in md
        assert "the warehouse is busy" in md["cost_md"].value
    finally:
        holder.kill()
        holder.wait()
