"""Raw tables the cost models read, and the request-ledger snapshot loader.

`raw_requests` / `raw_pod_requests` are owned here: the request ledger exports into them with
`load_ledger_snapshot`. `raw_dcgm_samples` / `raw_focus_billing` / `raw_nodes` / `raw_pods` / `raw_volumes` belong to the feed loaders
(`gpu_platform.finops.feeds`); `ensure_raw_tables` creates them with the loader's DDL only when they are
missing, so the models can build on a fresh warehouse.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import duckdb
import pyarrow as pa

from gpu_platform.finops.feeds.k8s_inventory import RAW_NODES, RAW_PODS, RAW_VOLUMES
from gpu_platform.finops.feeds.load import rollup_dcgm_samples, table_ddl
from gpu_platform.finops.feeds.schemas import (
    DCGM_SAMPLE_SCHEMA,
    RAW_DCGM_HOURLY,
    RAW_DCGM_SAMPLES,
    RAW_FOCUS_BILLING,
    RAW_FOCUS_QUARANTINE,
    RAW_SERVICE_REQUESTS,
)

WORKLOADS = (
    "label_batch", "training_run", "replay", "map_segmentation", "evidence_pack", "released_model", "released_map",
)

RAW_REQUESTS_DDL = """
create table if not exists raw_requests (
    request_id varchar primary key,
    team varchar,
    cost_center varchar,
    lane varchar,
    site varchar,
    odd_cell varchar,
    workload varchar,
    gpu_type varchar,
    gpu_count integer,
    submitted_at timestamp,
    state varchar,
    attempts integer,
    release_packet_id varchar,
    candidate_id varchar,
    incident_id varchar,
    output_artifact_ids varchar[],
    accepted_labels bigint,
    rejected_labels bigint,
    replay_hours double,
    gpu_resource varchar,
    service_name varchar
)"""

RAW_POD_REQUESTS_DDL = """
create table if not exists raw_pod_requests (
    namespace varchar,
    pod varchar,
    request_id varchar,
    attempt integer,
    flavor_name varchar,
    hostname varchar,
    gpu_uuids varchar[],
    started_at timestamp,
    ended_at timestamp,
    exit_status varchar,
    gpu_resource varchar,
    gpu_share double
)"""

RAW_REQUEST_LINEAGE_DDL = """
create table if not exists raw_request_lineage (
    child_request_id varchar,
    parent_request_id varchar
)"""
"""One row per recorded lineage edge between two requests (`gpu_platform.lineage.graph` edges):
the parent's output is an input of the child. Unit costs sum over these trees."""

REQUEST_COLUMNS = (
    "request_id", "team", "cost_center", "lane", "site", "odd_cell", "workload", "gpu_type", "gpu_count",
    "submitted_at", "state", "attempts", "release_packet_id", "candidate_id", "incident_id",
    "output_artifact_ids", "accepted_labels", "rejected_labels", "replay_hours", "gpu_resource", "service_name",
)
POD_COLUMNS = (
    "namespace", "pod", "request_id", "attempt", "flavor_name", "hostname", "gpu_uuids",
    "started_at", "ended_at", "exit_status", "gpu_resource", "gpu_share",
)
ADDED_COLUMNS = {
    "raw_requests": (("gpu_resource", "varchar"), ("service_name", "varchar")),
    "raw_pod_requests": (("gpu_resource", "varchar"), ("gpu_share", "double")),
}
"""Columns added after the first release: a warehouse made before gets them (nullable) on open.
`gpu_resource`: what `gpu_count` counts (`nvidia.com/gpu`, `nvidia.com/mig-1g.10gb`,
`nvidia.com/gpu.shared`; NULL = whole GPUs); `gpu_share`: the share of one physical GPU a unit of
it is priced at (`gpu_platform.devices.sharing.gpu_share` of the admitted flavor; NULL = the profile's
compute slices / 7, or 1); `service_name`: a service request's service (the `service` label of its
request counts, `raw_service_requests`), NULL for other requests."""


def ensure_raw_tables(con: duckdb.DuckDBPyConnection) -> None:
    """Create every raw table the models read that does not exist yet (never alters existing ones).

    The feed tables get the feed loader's own DDL (`gpu_platform.finops.feeds.load.table_ddl`), so a
    table made here is the one `load_batch` writes, except that its `day` (the load partition)
    is nullable: the models select rows by `ts` / `ChargePeriodStart`, never by `day`, and
    writers other than the loader (seeds of tests and benchmarks) have no load day.
    """
    con.execute(RAW_REQUESTS_DDL)
    con.execute(RAW_POD_REQUESTS_DDL)
    con.execute(RAW_REQUEST_LINEAGE_DDL)
    for table, columns in ADDED_COLUMNS.items():
        for name, sql_type in columns:
            con.execute(f"alter table {table} add column if not exists {name} {sql_type}")
    for ddl in SCORECARD_RAW_DDL:
        con.execute(ddl)
    present = {r[0] for r in con.execute(
        "select table_name from information_schema.tables where table_schema = 'main'").fetchall()}
    for table in (RAW_DCGM_SAMPLES, RAW_DCGM_HOURLY, RAW_FOCUS_BILLING, RAW_FOCUS_QUARANTINE, RAW_NODES, RAW_PODS,
                  RAW_VOLUMES, RAW_SERVICE_REQUESTS):
        if table not in present:
            con.execute(table_ddl(table))
            con.execute(f"alter table {table} alter column day drop not null")
    # a quarantine written before it kept the rows' money: those rows show no amount
    for name, sql_type in (("ChargePeriodStart", "timestamp"), ("BillingCurrency", "varchar"),
                           ("BilledCost", "decimal(38, 15)"), ("EffectiveCost", "decimal(38, 15)")):
        con.execute(f'alter table {RAW_FOCUS_QUARANTINE} add column if not exists "{name}" {sql_type}')
    # a pod table written before the inventory read volumes: no pod mounts a known claim
    con.execute(f"alter table {RAW_PODS} add column if not exists volume_claims varchar")
    # a node table written before the inventory kept creationTimestamp: no instance has a known start
    con.execute(f"alter table {RAW_NODES} add column if not exists created_at timestamp")
    if RAW_DCGM_HOURLY not in present and RAW_DCGM_SAMPLES in present:
        columns = {r[0] for r in con.execute(
            "select column_name from information_schema.columns where table_name = $t and table_schema = 'main'",
            {"t": RAW_DCGM_SAMPLES}).fetchall()}
        if set(DCGM_SAMPLE_SCHEMA) <= columns:
            rollup_dcgm_samples(con)  # samples loaded before the rollup existed


def _rows(records: Sequence[dict[str, Any]], columns: Sequence[str], what: str) -> list[tuple[Any, ...]]:
    out = []
    for i, rec in enumerate(records):
        unknown = set(rec) - set(columns)
        if unknown:
            raise ValueError(f"{what}[{i}]: unknown field(s) {sorted(unknown)}")
        out.append(tuple(rec.get(c) for c in columns))
    return out


def _arrow_type(sql_type: str) -> pa.DataType:
    """The Arrow type of one DuckDB column type (the raw tables' types only)."""
    t = sql_type.upper()
    if t.endswith("[]"):
        return pa.list_(_arrow_type(t[:-2]))
    if t.startswith("DECIMAL"):
        precision, scale = (int(x) for x in t[t.index("(") + 1 : t.index(")")].split(","))
        return pa.decimal128(precision, scale)
    simple = {"VARCHAR": pa.string(), "BIGINT": pa.int64(), "INTEGER": pa.int32(), "DOUBLE": pa.float64(),
              "TIMESTAMP": pa.timestamp("us"), "DATE": pa.date32(), "BOOLEAN": pa.bool_()}
    if t not in simple:
        raise TypeError(f"no Arrow type for {sql_type}")
    return simple[t]


def _insert_rows(con: duckdb.DuckDBPyConnection, table: str, columns: Sequence[str],
                 rows: list[tuple[Any, ...]]) -> None:
    """Insert `rows` into `table` as one Arrow batch typed from the table's own columns (DuckDB's
    `executemany` inserts row by row: 3 s for a month of demo events). `table` is one of this
    module's fixed names. Values Arrow cannot take as the column's type go row by row instead."""
    if not rows:
        return
    types = dict(con.execute(
        "select column_name, data_type from information_schema.columns where table_name = ? and table_schema = 'main'",
        [table]).fetchall())
    names = ", ".join(columns)
    try:
        batch = pa.table({c: pa.array([r[i] for r in rows], type=_arrow_type(types[c]))
                          for i, c in enumerate(columns)})
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        marks = ", ".join("?" for _ in columns)
        con.executemany(f"insert into {table} ({names}) values ({marks})", rows)
        return
    con.register("_incoming_snapshot", batch)
    try:
        con.execute(f"insert into {table} ({names}) select {names} from _incoming_snapshot")
    finally:
        con.unregister("_incoming_snapshot")


def load_ledger_snapshot(
    con: duckdb.DuckDBPyConnection, requests: list[dict[str, Any]], pods: list[dict[str, Any]],
    lineage: list[tuple[str, str]] | None = None,
) -> tuple[int, int]:
    """Replace `raw_requests`, `raw_pod_requests` and `raw_request_lineage` with one ledger
    snapshot, atomically.

    Each dict holds the table's columns by name (missing keys are NULL, unknown keys are an error);
    `lineage`: (child request id, parent request id) edges (None: no edges recorded).
    Returns (requests loaded, pods loaded).
    """
    req_rows = _rows(requests, REQUEST_COLUMNS, "requests")
    pod_rows = _rows(pods, POD_COLUMNS, "pods")
    edges = sorted({(c, p) for c, p in (lineage or []) if c and p and c != p})
    ensure_raw_tables(con)
    con.execute("begin transaction")
    try:
        con.execute("delete from raw_requests")
        con.execute("delete from raw_pod_requests")
        con.execute("delete from raw_request_lineage")
        if edges:
            con.executemany("insert into raw_request_lineage values (?, ?)", edges)
        _insert_rows(con, "raw_requests", REQUEST_COLUMNS, req_rows)
        _insert_rows(con, "raw_pod_requests", POD_COLUMNS, pod_rows)
        con.execute("commit")
    except BaseException:
        con.execute("rollback")
        raise
    return len(req_rows), len(pod_rows)


# --- scorecard sources: the ledger's events, request metadata and workload runs ---------------

RAW_REQUEST_EVENTS_DDL = """
create table if not exists raw_request_events (
    request_id varchar,
    seq bigint,
    event varchar,
    event_at timestamp,
    reason varchar,
    flavor varchar,
    run_id varchar,
    details varchar
)"""
"""One row per ledger event (`gp_request_events`), in ledger order (`seq`); details as JSON text."""

RAW_REQUEST_METADATA_DDL = """
create table if not exists raw_request_metadata (
    request_id varchar,
    owner varchar,
    image varchar,
    container_digest varchar,
    dataset_ids varchar[],
    gpu_resource varchar,
    preemption_policy varchar,
    checkpoint_interval_s double,
    expected_duration_s double
)"""
"""Request fields the scorecards group or judge by that `raw_requests` does not carry."""

RAW_WORKLOAD_RUNS_DDL = """
create table if not exists raw_workload_runs (
    request_id varchar,
    seq bigint,
    kind varchar,
    status varchar,
    exit_status integer,
    attempts integer,
    container_digest varchar,
    dataset_ids varchar[],
    results varchar,
    recorded_at timestamp
)"""
"""One row per recorded workload run (`workload_runs`): outcome, exit code, reported results (JSON)."""

RAW_CLUSTER_UNMATCHED_DDL = """
create table if not exists raw_cluster_unmatched (
    observed_at timestamp,
    namespace varchar,
    job varchar,
    request_id varchar,
    attempt integer,
    kind varchar,
    why varchar,
    condition varchar,
    status varchar,
    kueue_reason varchar,
    flavor varchar
)"""
"""One row per recorded observation of a Job the ledger cannot match (`gp_cluster_unmatched`)."""

SCORECARD_RAW_DDL = (RAW_REQUEST_EVENTS_DDL, RAW_REQUEST_METADATA_DDL, RAW_WORKLOAD_RUNS_DDL, RAW_CLUSTER_UNMATCHED_DDL)
UNMATCHED_COLUMNS = (
    "observed_at", "namespace", "job", "request_id", "attempt", "kind", "why", "condition", "status", "kueue_reason",
    "flavor",
)
EVENT_COLUMNS = ("request_id", "seq", "event", "event_at", "reason", "flavor", "run_id", "details")
METADATA_COLUMNS = (
    "request_id", "owner", "image", "container_digest", "dataset_ids", "gpu_resource", "preemption_policy",
    "checkpoint_interval_s", "expected_duration_s",
)
RUN_COLUMNS = (
    "request_id", "seq", "kind", "status", "exit_status", "attempts", "container_digest", "dataset_ids", "results",
    "recorded_at",
)


def load_scorecard_snapshot(
    con: duckdb.DuckDBPyConnection, events: list[dict[str, Any]], metadata: list[dict[str, Any]],
    runs: list[dict[str, Any]],
) -> tuple[int, int, int]:
    """Replace `raw_request_events`, `raw_request_metadata` and `raw_workload_runs` atomically.
    Returns the rows loaded into each."""
    tables = (("raw_request_events", EVENT_COLUMNS, _rows(events, EVENT_COLUMNS, "events")),
              ("raw_request_metadata", METADATA_COLUMNS, _rows(metadata, METADATA_COLUMNS, "metadata")),
              ("raw_workload_runs", RUN_COLUMNS, _rows(runs, RUN_COLUMNS, "runs")))
    ensure_raw_tables(con)
    con.execute("begin transaction")
    try:
        for table, columns, rows in tables:
            con.execute(f"delete from {table}")
            _insert_rows(con, table, columns, rows)
        con.execute("commit")
    except BaseException:
        con.execute("rollback")
        raise
    return tuple(len(rows) for _, _, rows in tables)  # type: ignore[return-value]


def load_unmatched_snapshot(con: duckdb.DuckDBPyConnection, rows: list[dict[str, Any]]) -> int:
    """Replace `raw_cluster_unmatched` with the ledger's recorded unmatched Jobs, atomically.
    Returns the rows loaded."""
    values = _rows(rows, UNMATCHED_COLUMNS, "unmatched")
    ensure_raw_tables(con)
    con.execute("begin transaction")
    try:
        con.execute("delete from raw_cluster_unmatched")
        _insert_rows(con, "raw_cluster_unmatched", UNMATCHED_COLUMNS, values)
        con.execute("commit")
    except BaseException:
        con.execute("rollback")
        raise
    return len(values)
