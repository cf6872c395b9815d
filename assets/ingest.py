"""Raw ingestion assets: DCGM samples, FOCUS billing and the ledger snapshot into the warehouse.

Thin by design: `gpu_platform.finops.feeds.ingest` (file discovery, parsing, idempotent loading per
file and day, forgetting removed files) and the ledger export (`gpu_platform.finops.snapshot`)
do the work; these assets pick the days of a run, call them, and report counts as Dagster
metadata. Saved feed files live under `$GPU_PLATFORM_HOME/feeds/` (layout: see
`gpu_platform.finops.feeds.ingest`); today's DCGM partition also scrapes every `dcgm_endpoints` URL.
"""

import socket
import warnings
from datetime import UTC, date, datetime
from pathlib import Path

import dagster as dg

from assets.finops import INGEST_GROUP, WAREHOUSE_POOL, finops_daily_partitions
from gpu_platform.devices.gpus import local_inventory
from gpu_platform.finops.feeds.ingest import (
    IngestCountMismatch,
    IngestReport,
    load_dcgm_day,
    load_focus_day,
    load_inventory_day,
    load_inventory_from_cluster,
    load_local_node,
    merge_reports,
)
from gpu_platform.finops.feeds.requests_prom import load_service_requests_day
from gpu_platform.finops.snapshot import (
    ledger_snapshot,
    lineage_edges,
    scorecard_snapshot,
    unmatched_snapshot,
)
from gpu_platform.finops.sqlmodels.raw import (
    load_ledger_snapshot,
    load_scorecard_snapshot,
    load_unmatched_snapshot,
)
from gpu_platform.lineage.graph import LineageStore
from resources.ledger import LedgerResource
from resources.policy import PolicyResource
from resources.settings import PlatformSettings
from resources.warehouse import Warehouse


def _days(context: dg.AssetExecutionContext) -> list[date]:
    keys = finops_daily_partitions.get_partition_keys_in_range(context.partition_key_range)
    return [date.fromisoformat(k) for k in keys]


def _day_metadata(context: dg.AssetExecutionContext, by_day: dict[date, list[IngestReport]]) -> dict[str, dg.MetadataValue]:
    """Each daily partition of the run gets its own day's counts and tables; the step's own
    metadata is how many days it loaded (the same on every partition of the run)."""
    for day, reports in by_day.items():
        context.add_asset_metadata(_metadata(merge_reports(reports)), partition_key=day.isoformat())
    return {"days_in_run": dg.MetadataValue.int(len(by_day))}


def _metadata(report: IngestReport) -> dict[str, dg.MetadataValue]:
    """The report's counts as ints and its tables as markdown; a run whose rows do not add up fails."""
    try:
        values = report.metadata()
    except IngestCountMismatch as exc:
        raise dg.Failure(description=str(exc)) from exc
    return {k: dg.MetadataValue.int(v) if isinstance(v, int) else dg.MetadataValue.md(v) for k, v in values.items()}


_COMMON = dict(group_name=INGEST_GROUP, kinds={"duckdb"}, pool=WAREHOUSE_POOL)


def _daily_asset(fn):
    """Daily-partitioned like the cost models, with their single-run backfills (a range of days
    is one step)."""
    with warnings.catch_warnings():
        # BackfillPolicy is beta in this Dagster; single-run backfills are what DuckDB wants
        warnings.simplefilter("ignore", dg.BetaWarning)
        return dg.asset(
            partitions_def=finops_daily_partitions, backfill_policy=dg.BackfillPolicy.single_run(), **_COMMON
        )(fn)


@_daily_asset
def raw_dcgm_samples(
    context: dg.AssetExecutionContext, warehouse: Warehouse, settings: PlatformSettings
) -> dg.MaterializeResult:
    """DCGM samples of the day: saved files under feeds/dcgm/<day>/, plus live scrapes of
    `settings.dcgm_endpoints` when the day is today (UTC). Unparseable lines, blanks and
    sentinels go to raw_dcgm_quarantine with a reason."""
    today = datetime.now(UTC).date()
    feeds = Path(settings.home) / "feeds"
    con = warehouse.connect()
    try:
        by_day = {
            day: [load_dcgm_day(con, feeds, day, settings.dcgm_endpoint_list() if day == today else [])]
            for day in _days(context)
        }
    finally:
        con.close()
    for error in merge_reports([r for rs in by_day.values() for r in rs]).errors:
        context.log.warning(error)
    return dg.MaterializeResult(metadata=_day_metadata(context, by_day))


@_daily_asset
def raw_focus_billing(
    context: dg.AssetExecutionContext, warehouse: Warehouse, settings: PlatformSettings
) -> dg.MaterializeResult:
    """FOCUS billing rows charged on the day (ChargePeriodStart, UTC) from every export under
    feeds/focus/; malformed rows go to raw_focus_quarantine with a reason."""
    con = warehouse.connect()
    try:
        by_day = {day: [load_focus_day(con, Path(settings.home) / "feeds", day)] for day in _days(context)}
    finally:
        con.close()
    return dg.MaterializeResult(metadata=_day_metadata(context, by_day))


def _inventory(context: dg.AssetExecutionContext, warehouse: Warehouse, settings: PlatformSettings,
               kind: str) -> dg.MaterializeResult:
    today = datetime.now(UTC).date()
    con = warehouse.connect()
    try:
        by_day: dict[date, list[IngestReport]] = {}
        for day in _days(context):
            reports = by_day.setdefault(day, [])
            reports.append(load_inventory_day(con, Path(settings.home) / "feeds", day, kind))
            if day == today and settings.executor == "k8s":
                # on a cluster, today's partition also reads the inventory through the API
                _, report = load_inventory_from_cluster(con, day, kind)
                reports.append(report)
            elif day == today and kind == "nodes":
                # the local executor's machine is a node too: its runs are priced the day they run
                reports.append(load_local_node(con, day, socket.gethostname(), local_inventory()))
    finally:
        con.close()
    return dg.MaterializeResult(metadata=_day_metadata(context, by_day))


@_daily_asset
def raw_nodes(
    context: dg.AssetExecutionContext, warehouse: Warehouse, settings: PlatformSettings
) -> dg.MaterializeResult:
    """Node inventory of the day: every `kubectl get nodes -o json` snapshot under
    feeds/nodes/<day>/ (and, on Kubernetes, today's nodes read through the API). GPU counts,
    providerID and pool labels for pricing; bad items go to raw_nodes_quarantine."""
    return _inventory(context, warehouse, settings, "nodes")


@_daily_asset
def raw_pods(
    context: dg.AssetExecutionContext, warehouse: Warehouse, settings: PlatformSettings
) -> dg.MaterializeResult:
    """Pod inventory of the day: every `kubectl get pods -A -o json` snapshot under
    feeds/pods/<day>/ (and, on Kubernetes, today's pods read through the API). Maps DCGM samples
    of step pods to requests by the gpu-platform.io/request-id label."""
    return _inventory(context, warehouse, settings, "pods")


@_daily_asset
def raw_volumes(
    context: dg.AssetExecutionContext, warehouse: Warehouse, settings: PlatformSettings
) -> dg.MaterializeResult:
    """PersistentVolumes of the day: every `kubectl get pv -o json` snapshot under
    feeds/volumes/<day>/ (and, on Kubernetes, today's PVs read through the API). Maps a pod's
    claims to the cloud volume a storage billing row names; bad items go to raw_volumes_quarantine."""
    return _inventory(context, warehouse, settings, "volumes")


@_daily_asset
def raw_service_requests(
    context: dg.AssetExecutionContext, warehouse: Warehouse, settings: PlatformSettings
) -> dg.MaterializeResult:
    """Requests per service and 5-minute step from saved Prometheus query_range answers under
    feeds/requests/<day>/ (docs/serving.md, Cost per request); bad points go to
    raw_service_requests_quarantine with their position and reason."""
    con = warehouse.connect()
    try:
        by_day = {day: [load_service_requests_day(con, Path(settings.home) / "feeds", day)] for day in _days(context)}
    finally:
        con.close()
    for error in merge_reports([r for rs in by_day.values() for r in rs]).errors:
        context.log.warning(error)
    return dg.MaterializeResult(metadata=_day_metadata(context, by_day))


@dg.asset(**_COMMON)
def raw_ledger_snapshot(
    warehouse: Warehouse, ledger: LedgerResource, policy: PolicyResource, settings: PlatformSettings
) -> dg.MaterializeResult:
    """The request ledger now (every request, one pod per admitted attempt, every event) with recorded
    workload results and the cluster Jobs it cannot match, replacing raw_requests, raw_pod_requests,
    the scorecard sources and raw_cluster_unmatched. Unpartitioned: a snapshot
    holds every day's pods, and each daily build reads the pods overlapping its day."""
    led = ledger.ledger()
    # local executor: pods without a recorded host ran on this machine (raw_nodes lists it)
    local_host = socket.gethostname() if settings.executor == "local" else None
    store = LineageStore(led.engine)
    requests, pods = ledger_snapshot(led, policy.load(), store, local_host=local_host)
    edges = lineage_edges(store)
    con = warehouse.connect()
    try:
        n_requests, n_pods = load_ledger_snapshot(con, requests, pods, edges)
        n_events, _, n_runs = load_scorecard_snapshot(con, *scorecard_snapshot(led, store))
        n_unmatched = load_unmatched_snapshot(con, unmatched_snapshot(led))
    finally:
        con.close()
    return dg.MaterializeResult(
        metadata={
            "requests": dg.MetadataValue.int(n_requests),
            "lineage_edges": dg.MetadataValue.int(len(edges)),
            "events": dg.MetadataValue.int(n_events),
            "workload_runs": dg.MetadataValue.int(n_runs),
            "unmatched_cluster_jobs": dg.MetadataValue.int(n_unmatched),
            "pods": dg.MetadataValue.int(n_pods),
            "pods_without_hostname": dg.MetadataValue.int(sum(p["hostname"] is None for p in pods)),
            "running_pods": dg.MetadataValue.int(sum(p["ended_at"] is None for p in pods)),
        }
    )


ingest_assets = [raw_dcgm_samples, raw_focus_billing, raw_nodes, raw_pods, raw_volumes, raw_service_requests,
                 raw_ledger_snapshot]
INGEST_ASSET_NAMES = tuple(a.key.to_user_string() for a in ingest_assets)
