"""A hand-computable day on two nodes x 8 GPUs (shared by the scenario, runner and asset tests).

Day 2026-11-28 (UTC), samples every 15 s (5,760 per GPU).

gpu-a  8 x NVIDIA H100 80GB HBM3, billed: one 24 h instance row 768.00 USD + one 24 h disk row
       9.60 USD with the same charge period  -> node cost 777.60, price 777.60 / (8 x 24) = 4.05
gpu-b  8 x NVIDIA A100-SXM4-40GB, on-prem, no billing row -> price book A100-40GB 1.844 USD
       (AWS capacity block, verified: page) -> node cost 1.844 x 8 x 24 = 354.048
shared eks control plane 48.00 USD + support (no ResourceId) 12.00 USD = 60.00
billed total 777.60 + 60.00 = 837.60

request  workload          team        pods (node, GPUs, window, exit)                       GPU-h  cost
R1       training_run      perception  a1 gpu-a 4 GPUs 00-02 failed; a2 gpu-a 4 GPUs 02-08 ok  8+24  32 x 4.05  = 129.60
R2       label_batch       labeling    gpu-b 2 GPUs 00-12                                    24     24 x 1.844 = 44.256
R3       replay            safety      gpu-a 8 GPUs 12-18                                    48     48 x 4.05  = 194.40
R4       evidence_pack     safety      gpu-b 1 GPU 18-20                                     2      2 x 1.844  = 3.688
R5       released_model    perception  (no pods; candidate C1, packet P1)                    0      0
R6       map_segmentation  mapping     gpu-b 2 GPUs 06-10                                    8      8 x 1.844  = 14.752
R7       released_map      mapping     gpu-b 1 GPU 10-11                                     1      1 x 1.844  = 1.844
"""

from __future__ import annotations

from datetime import datetime, timedelta

import duckdb

from gpu_platform.finops.feeds.load import rollup_dcgm_samples
from gpu_platform.finops.sqlmodels import ensure_raw_tables, load_ledger_snapshot

DAY = "2026-11-28"
D0 = datetime(2026, 11, 28)
H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-40GB"


def h(hours: float) -> datetime:
    return D0 + timedelta(hours=hours)


REQUESTS = [
    dict(request_id="R1", team="perception", cost_center="CC-1010", lane="candidate_train", site="sf",
         workload="training_run", gpu_type="h100", gpu_count=4, state="finished", attempts=2, candidate_id="C1"),
    dict(request_id="R2", team="labeling", cost_center="CC-1040", lane="labeler_batch", site="sf",
         workload="label_batch", gpu_type="a100", gpu_count=2, state="finished", attempts=1,
         accepted_labels=10_000, rejected_labels=500),
    dict(request_id="R3", team="safety", cost_center="CC-1050", lane="release_eval", site="muc",
         odd_cell="muc-urban-day", workload="replay", gpu_type="h100", gpu_count=8, state="finished", attempts=1,
         release_packet_id="P1", candidate_id="C1", replay_hours=20.0),
    dict(request_id="R4", team="safety", cost_center="CC-1050", lane="release_eval", site="muc",
         odd_cell="muc-urban-day", workload="evidence_pack", gpu_type="a100", gpu_count=1, state="finished",
         attempts=1, release_packet_id="P1"),
    dict(request_id="R5", team="perception", cost_center="CC-1010", lane="release_eval", site="muc",
         workload="released_model", gpu_type="a100", gpu_count=1, state="finished", attempts=0,
         release_packet_id="P1", candidate_id="C1", output_artifact_ids=["model:perception-v7"]),
    dict(request_id="R6", team="mapping", cost_center="CC-1030", lane="map_semantic_batch", site="muc",
         workload="map_segmentation", gpu_type="a100", gpu_count=2, state="finished", attempts=1,
         release_packet_id="PM1"),
    dict(request_id="R7", team="mapping", cost_center="CC-1030", lane="map_semantic_batch", site="muc",
         workload="released_map", gpu_type="a100", gpu_count=1, state="finished", attempts=1,
         release_packet_id="PM1"),
]

# (namespace, pod, request, attempt, flavor, node, gpus, start h, end h, exit, engine-active busy, util %)
PODS = [
    ("team-perception", "r1-a1", "R1", 1, "h100-ondemand", "gpu-a", [0, 1, 2, 3], 0, 2, "Failed", 0.5, 90),
    ("team-perception", "r1-a2", "R1", 2, "h100-ondemand", "gpu-a", [0, 1, 2, 3], 2, 8, "Succeeded", 0.5, 90),
    ("team-labeling", "r2-a1", "R2", 1, "a100-spot", "gpu-b", [0, 1], 0, 12, "Succeeded", None, 40),
    ("team-safety", "r3-a1", "R3", 1, "h100-ondemand", "gpu-a", list(range(8)), 12, 18, "Succeeded", 0.75, 90),
    ("team-safety", "r4-a1", "R4", 1, "a100-spot", "gpu-b", [2], 18, 20, "Succeeded", None, 100),
    ("team-mapping", "r6-a1", "R6", 1, "a100-spot", "gpu-b", [3, 4], 6, 10, "Succeeded", None, 100),
    ("team-mapping", "r7-a1", "R7", 1, "a100-spot", "gpu-b", [5], 10, 11, "Succeeded", None, 100),
]

NODES = {"gpu-a": H100, "gpu-b": A100}
ENGINE_NODES = {"gpu-a"}  # gpu-b's DCGM has no profiling module: GPU_UTIL only


def pod_dicts() -> list[dict]:
    return [
        dict(namespace=ns, pod=pod, request_id=req, attempt=att, flavor_name=flv, hostname=node,
             gpu_uuids=[f"GPU-{node}-{g}" for g in gpus], started_at=h(s), ended_at=h(e), exit_status=ex)
        for ns, pod, req, att, flv, node, gpus, s, e, ex, _, _ in PODS
    ]


def billing_rows(currency: str = "USD") -> list[tuple]:
    day_end = D0 + timedelta(days=1)
    return [
        # BilledCost, currency, start, end, ResourceId, ServiceName, source_row
        (768.00, currency, D0, day_end, "gpu-a", "Amazon EC2", 1),
        (9.60, currency, D0, day_end, "gpu-a", "Amazon EBS", 2),
        (48.00, currency, D0, day_end, "eks-cluster", "Amazon EKS", 3),
        (12.00, currency, D0, day_end, None, "AWS Support", 4),
    ]


def insert_billing(con: duckdb.DuckDBPyConnection, rows: list[tuple], source: str = "billing.csv") -> None:
    con.executemany(
        "insert into raw_focus_billing (BilledCost, EffectiveCost, BillingCurrency, ChargePeriodStart, "
        "ChargePeriodEnd, ResourceId, ServiceName, ChargeCategory, source, source_row, focus_version) "
        "values (?, ?, ?, ?, ?, ?, ?, 'Usage', ?, ?, '1.2')",
        [(c, c, cur, s, e, rid, svc, source, n) for c, cur, s, e, rid, svc, n in rows],
    )


def insert_samples(con: duckdb.DuckDBPyConnection, nodes: dict[str, str] = NODES, pods=PODS,
                   engine_nodes=ENGINE_NODES, day: datetime = D0) -> None:
    """Every GPU of every node, every 15 s: busy while a pod holds it, 0 (no pod) otherwise.

    Written straight into raw_dcgm_samples (not through the loader), then rolled up into
    raw_dcgm_hourly as a load would."""
    con.execute("create temp table if not exists _assign (hostname varchar, gpu integer, namespace varchar, "
                "pod varchar, s timestamp, e timestamp, engine double, util double)")
    con.execute("delete from _assign")
    assign = [(node, g, ns, pod, day + timedelta(hours=s), day + timedelta(hours=e), eng, util)
              for ns, pod, _, _, _, node, gpus, s, e, _, eng, util in pods if node in nodes for g in gpus]
    if assign:
        con.executemany("insert into _assign values (?, ?, ?, ?, ?, ?, ?, ?)", assign)
    con.execute("create temp table if not exists _nodes (hostname varchar, model varchar, engine boolean)")
    con.execute("delete from _nodes")
    con.executemany("insert into _nodes values (?, ?, ?)", [(n, m, n in engine_nodes) for n, m in nodes.items()])
    con.execute(
        """
        insert into raw_dcgm_samples (ts, metric, value, hostname, gpu, uuid, model_name, namespace, pod,
                                      container, source, source_line)
        with grid as (
            select n.hostname, n.model, n.engine, g.gpu, $d::timestamp + to_seconds(k.k * 15) as ts
            from _nodes n, range(8) g(gpu), range(5760) k(k)
        ), tagged as (
            select grid.*, a.namespace, a.pod, a.engine as busy_engine, a.util
            from grid left join _assign a
              on a.hostname = grid.hostname and a.gpu = grid.gpu and grid.ts >= a.s and grid.ts < a.e
        ), metrics as (
            select *, 'DCGM_FI_DEV_GPU_UTIL' as metric, coalesce(util, 0) as value from tagged
            union all
            select *, 'DCGM_FI_PROF_GR_ENGINE_ACTIVE', coalesce(busy_engine, 0) from tagged where engine
        )
        select ts, metric, value, hostname, gpu, 'GPU-' || hostname || '-' || gpu, model,
               coalesce(namespace, ''), coalesce(pod, ''), case when pod is null then '' else 'main' end,
               'scrape', cast(row_number() over () as integer)
        from metrics
        """,
        {"d": day},
    )
    rollup_dcgm_samples(con)


def load_scenario(con: duckdb.DuckDBPyConnection, currency: str = "USD") -> None:
    ensure_raw_tables(con)
    load_ledger_snapshot(con, REQUESTS, pod_dicts())
    insert_billing(con, billing_rows(currency))
    insert_samples(con)
    # the history file repeats R3's engine-active samples: dedupe must drop them
    con.execute(
        "insert into raw_dcgm_samples select * replace ('history.txt' as source) from raw_dcgm_samples "
        "where pod = 'r3-a1' and metric = 'DCGM_FI_PROF_GR_ENGINE_ACTIVE'"
    )
    # a DCGM blank sentinel must not count as busy time
    con.execute(
        "insert into raw_dcgm_samples (ts, metric, value, hostname, gpu, uuid, model_name, namespace, pod, source, "
        "source_line) values ($ts, 'DCGM_FI_PROF_GR_ENGINE_ACTIVE', 9223372036854775794, 'gpu-a', 0, 'GPU-gpu-a-0', "
        "$m, 'team-perception', 'r1-a2', 'scrape', -1)",
        {"ts": h(3) + timedelta(seconds=7), "m": H100},
    )
    rollup_dcgm_samples(con)
