"""Inference services in Dagster: the service asset, the replicas sensor, the request-count feed.

Thin by design: `gpu_platform.observe.serving.replicas` keeps the ledger's view of each service's
replicas and summarises a service; `gpu_platform.finops.feeds.requests_prom` loads request counts.

- `inference_service`: one partition per service request (the `service_requests` set the gate
  adds each admitted service to), downstream of `released_model` (the release that produced the
  model it serves): its materialization shows the service, its release, its replicas now and its
  newest day's cost per 1,000 requests (the figures `cost report` prints).
- `service_replicas_sensor`: every 30 s, the replicas each running service has now (the cluster's
  Deployments, or with the local executor KEDA's rule over the saved request counts) recorded in
  the ledger when they changed; a changed or new service is materialized again.
The day's request counts are loaded by `raw_service_requests` (assets/ingest.py, with the other feeds).
"""


from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import duckdb

from assets.partitions import WORKLOAD_PARTITIONS
from assets.workloads import NO_PARTITION_DEPENDENCY, partition_url
from gpu_platform.finops.sqlmodels.report import service_markdown
from gpu_platform.finops.warehouse import WarehouseBusy
from gpu_platform.finops.warehouse import connect as warehouse_connect
from gpu_platform.observe.serving.replicas import (
    cluster_replicas,
    local_replicas,
    read_cluster_deployments,
    running_services,
    service_summary,
    sync_replicas,
)
from resources.ledger import LedgerResource
from resources.settings import PlatformSettings
from resources.warehouse import Warehouse

SERVING_GROUP = "serving"
SERVICE_PARTITIONS = WORKLOAD_PARTITIONS["service"]


@dg.asset(
    partitions_def=SERVICE_PARTITIONS,
    deps=[dg.AssetDep("released_model", partition_mapping=NO_PARTITION_DEPENDENCY)],
    group_name=SERVING_GROUP,
    kinds={"python"},
    description="An online inference service (partition: its service request): the released model it serves, "
    "its replicas now (kept by service_replicas_sensor) and its newest day's cost per 1,000 requests.",
)
def inference_service(
    context: dg.AssetExecutionContext, ledger: LedgerResource, warehouse: Warehouse
) -> dg.MaterializeResult:
    busy = False
    try:
        # never wait behind a pricing run (DuckDB: one writing process): its figures come next time
        con = warehouse_connect(warehouse.path, read_only=True, wait_s=0) if Path(warehouse.path).exists() else None
    except (WarehouseBusy, duckdb.Error):
        con, busy = None, True
    try:
        s = service_summary(ledger.ledger(), context.partition_key, con)
    finally:
        if con is not None:
            con.close()
    md: dict[str, dg.MetadataValue] = {
        k: dg.MetadataValue.int(v) if isinstance(v, int) else dg.MetadataValue.float(float(v))
        if isinstance(v, float) else dg.MetadataValue.text(str(v))
        for k, v in s.items() if k not in ("cost_rows", "released_model_request") and v is not None
    }
    if s["released_model_request"]:
        md["released_model"] = dg.MetadataValue.url(partition_url("released_model", s["released_model_request"]))
    if s["cost_rows"]:
        cost_md = service_markdown(s["cost_rows"])
    elif busy:
        cost_md = "_the warehouse is busy (a pricing run): the next materialization shows the cost_"
    else:
        cost_md = "_no priced day yet (cost build, then this service again)_"
    md["cost_md"] = dg.MetadataValue.md(cost_md)
    for r in s["cost_rows"]:
        if r["cost_per_1k_requests"] is not None:
            md[f"cost_per_1k_requests_{r['currency']}"] = dg.MetadataValue.float(float(r["cost_per_1k_requests"]))
            md[f"idle_cost_{r['currency']}"] = dg.MetadataValue.float(float(r["idle_cost"]))
    return dg.MaterializeResult(metadata=md)


service_job = dg.define_asset_job(
    "service_job", selection=dg.AssetSelection.assets(inference_service), partitions_def=SERVICE_PARTITIONS,
    description="Materialize one service (its replicas and cost now).",
)


@dg.sensor(
    name="service_replicas_sensor",
    job=service_job,
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Keeps the ledger's view of each running service's replicas current (the cluster's "
    "Deployments, or locally KEDA's rule over the request counts) and materializes a service that changed.",
)
def service_replicas_sensor(
    context: dg.SensorEvaluationContext, ledger: LedgerResource, settings: PlatformSettings
) -> dg.SensorResult | dg.SkipReason:
    led = ledger.ledger()
    states = led.states()
    running = running_services(states)
    if not running:
        return dg.SkipReason("no running service")
    now = datetime.now(UTC)
    if settings.executor == "k8s":
        try:
            observed, source = cluster_replicas(read_cluster_deployments()), "cluster"
        except Exception as exc:  # noqa: BLE001 - an unreachable API is a skipped tick, said why
            return dg.SkipReason(f"cannot read the services' Deployments: {type(exc).__name__}: {exc}"[:500])
    else:
        observed, source = local_replicas(states, Path(settings.home) / "feeds", now), "local"
    changes = sync_replicas(led, observed, source, at=now, states=states)
    ids = [s.request_id for s in running]
    new = [rid for rid in ids if not context.instance.has_dynamic_partition(SERVICE_PARTITIONS.name, rid)]
    stamp = now.strftime("%Y%m%dT%H%M%S")
    # a run key is used once: a new service is materialized once, then again at each change
    wanted = {rid: f"{rid}:first" for rid in new}
    wanted |= {v.request_id: f"{v.request_id}:replicas:{n}:{stamp}" for v, n in changes}
    return dg.SensorResult(
        run_requests=[dg.RunRequest(run_key=key, partition_key=rid) for rid, key in sorted(wanted.items())],
        dynamic_partitions_requests=[SERVICE_PARTITIONS.build_add_request(new)] if new else [],
    )


serving_assets = [inference_service]
serving_jobs = [service_job]
serving_sensors = [service_replicas_sensor]
