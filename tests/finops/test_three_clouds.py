"""The whole-bill invariants on one day of GCP's and Azure's FOCUS shapes (AWS's is
tests/finops/test_whole_bill.py): billed and effective totals equal the invoice, every part adds up
to the effective cost to the cent, a committed GPU is priced at its effective rate, every GPU node
is joined to its bill by its provider identity, volumes are charged to the pods that mounted them,
and nothing is unreconciled (every namespace here has an owner).

Fixtures: tests/fixtures/finops/clouds/<provider>/ (sources in clouds/README.md).
- GCP: two a3-highgpu-8g GKE nodes (`gce://P/Z/N`), billed per instance and SKU (GPU, cores, RAM)
  with `ResourceId` `//compute.googleapis.com/projects/P/zones/Z/instances/N`: one under a
  resource-based committed use discount (BilledCost 0, EffectiveCost 70.52/h; the day's fee
  1,692.48 as a `Purchase`), one a Spot VM (`PricingCategory: Dynamic`, 35.26/h); a balanced PD
  behind a PersistentVolume (CSI handle `projects/P/zones/Z/disks/D`), egress, a `Tax` row.
- Azure: an AKS uniform scale set of two ND96isr H100 v5 instances (`azure:///subscriptions/...
  /virtualMachineScaleSets/S/virtualMachines/N`) billed per scale set (lower-case ARM id) under a
  reservation (EffectiveCost 2 x 65.00/h, BilledCost 0; the day's fee 3,120.00), a spot instance
  billed per instance in mixed case, a premium managed disk behind a PV, egress.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from decimal import Decimal as D
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from gpu_platform.cli import main
from gpu_platform.finops.sqlmodels import load_ledger_snapshot
from gpu_platform.finops.sqlmodels.raw import load_scorecard_snapshot

CLOUDS = Path(__file__).parent.parent / "fixtures" / "finops" / "clouds"
DAY = "2026-11-28"
D0 = datetime(2026, 11, 28)
H100 = "NVIDIA H100 80GB HBM3"
GKE_A, GKE_B = "gke-train-a3-pool-1a2b3c4d-x7k2", "gke-train-a3-spot-5e6f7a8b-q9w8"
AKS_0, AKS_1, AKS_SPOT = "aks-gpu-37798712-vmss000000", "aks-gpu-37798712-vmss000001", "aks-spot-42850074-vmss000000"
TRAIN = "dagster-step-7a8b9c0d1e2f-train"

CASES = {
    "gcp": dict(
        bill="focus-gcp-2026-11-28.csv", invoice=D("2704.90"),
        nodes={GKE_A: ("provider_id", D("8.815")), GKE_B: ("provider_id", D("4.4075"))},
        # (node, pod, gpus, start h, end h)
        pods=[(GKE_A, TRAIN, 8, 0, 12), (GKE_B, "perception-sweep-0", 4, 0, 24)],
        train_cost=D("8.815") * 96, volume=D("6.72"),
    ),
    "azure": dict(
        bill="focus-azure-2026-11-28.csv", invoice=D("3863.72"),
        nodes={AKS_0: ("scale_set", D("8.125")), AKS_1: ("scale_set", D("8.125")),
               AKS_SPOT: ("provider_id", D("3.6875"))},
        pods=[(AKS_0, TRAIN, 8, 0, 12), (AKS_1, "perception-sweep-0", 8, 0, 24),
              (AKS_SPOT, "perception-sweep-1", 4, 0, 24)],
        train_cost=D("8.125") * 96, volume=D("7.88"),
    ),
}
REQUEST = dict(request_id="req-train-1", team="perception", cost_center="CC-1010", lane="candidate_train", site="sf",
               workload="training_run", gpu_type="h100", gpu_count=8, state="finished", attempts=1)


def dcgm_history(path: Path, nodes: list[str], pods: list[tuple]) -> None:
    """dcgm-exporter history as Parquet: every GPU of each node every 15 s, labelled with its pod."""
    con = duckdb.connect()
    con.execute("create table assign (hostname varchar, gpu integer, pod varchar, s double, e double)")
    con.executemany("insert into assign values (?, ?, ?, ?, ?)",
                    [(n, g, p, s, e) for n, p, gpus, s, e in pods for g in range(gpus)])
    con.execute("create table hosts (hostname varchar)")
    con.executemany("insert into hosts values (?)", [(n,) for n in nodes])
    con.execute(f"""
        copy (
            select $d::timestamp + to_seconds(k * 15) as ts, 'DCGM_FI_DEV_GPU_UTIL' as metric,
                   case when a.pod is not null then 70.0 else 0.0 end as value, h.hostname, g::integer as gpu,
                   'GPU-' || h.hostname || '-' || g as uuid, '{H100}' as model_name,
                   cast(null as varchar) as pci_bus_id, 'nvidia' || g as device,
                   cast(null as varchar) as gpu_instance_profile, cast(null as varchar) as gpu_instance_id,
                   case when a.pod is not null then 'team-perception' end as namespace, a.pod,
                   case when a.pod is not null then 'main' end as container
            from hosts as h, range(8) as t(g), range(5760) as r(k)
            left join assign as a on a.hostname = h.hostname and a.gpu = g and k * 15 >= a.s * 3600
                and k * 15 < a.e * 3600
        ) to '{path}' (format parquet)""", {"d": D0})


@pytest.fixture(scope="module", params=sorted(CASES))
def cloud(request, tmp_path_factory):
    name = request.param
    case = CASES[name]
    fix = CLOUDS / name
    home = tmp_path_factory.mktemp(name)
    env = {"GPU_PLATFORM_HOME": str(home), "GPU_PLATFORM_WAREHOUSE": ""}
    runner = CliRunner()
    dcgm = home / "dcgm.parquet"
    dcgm_history(dcgm, list(case["nodes"]), case["pods"])
    ingest = runner.invoke(main, ["feeds", "ingest", "--day", DAY, "--focus", str(fix / case["bill"]),
                                  "--dcgm", str(dcgm), "--nodes", str(fix / "kubectl-get-nodes.json"),
                                  "--pods", str(fix / "kubectl-get-pods.json"),
                                  "--volumes", str(fix / "kubectl-get-pv.json"), "--format", "json"], env=env)
    assert ingest.exit_code == 0, ingest.output
    wh = home / "warehouse.duckdb"
    with duckdb.connect(str(wh)) as con:
        node = case["pods"][0][0]
        load_ledger_snapshot(con, [REQUEST], [dict(
            namespace="team-perception", pod="req-train-1-a1", request_id="req-train-1", attempt=1,
            flavor_name="h100-ondemand", hostname=node, started_at=D0, ended_at=D0 + timedelta(hours=12),
            exit_status="Succeeded")])
        load_scorecard_snapshot(con, [], [dict(request_id="req-train-1", owner="perception-lead@example.com")], [])
    build = runner.invoke(main, ["cost", "build", "--day", DAY], env=env)
    report = runner.invoke(main, ["cost", "report", "--day", DAY, "--format", "json"], env=env)
    assert report.exit_code == 0, report.output
    return {"name": name, "case": case, "wh": wh, "build": build, "report": json.loads(report.output),
            "ingest": json.loads(ingest.output)}


def q(wh: Path, sql: str, params=None):
    with duckdb.connect(str(wh), read_only=True) as con:
        return con.execute(sql, params or {}).fetchall()


def test_every_row_is_loaded_and_the_build_passes_every_data_test(cloud):
    for line in cloud["ingest"]["feeds"]:
        assert line["rows_in"] == line["accepted"] and line["quarantined"] == 0, line
    assert cloud["build"].exit_code == 0, cloud["build"].output


def test_billed_and_effective_totals_equal_the_invoice_and_every_part_adds_up(cloud):
    (t,) = cloud["report"]["totals"]
    invoice = cloud["case"]["invoice"]
    assert D(t["billed"]) == invoice and D(t["effective"]) == invoice
    parts = sum(D(t[k]) for k in ("billed_allocated_cost", "billed_bypass_cost", "billed_idle_cost", "shared",
                                  "cpu_nodes", "storage", "tax", "credit", "unused_commitment", "unreconciled"))
    assert parts == D(t["effective"]) and D(t["difference"]) == 0
    assert D(t["chargeback_total"]) == invoice and D(t["price_book"]) == 0


def test_nothing_is_unreconciled_when_every_namespace_has_an_owner(cloud):
    (t,) = cloud["report"]["totals"]
    assert D(t["unreconciled"]) == 0
    assert [e for e in cloud["report"]["exceptions"] if e["treatment"] == "unreconciled"] == []


def test_each_gpu_node_is_joined_to_its_bill_by_provider_identity_at_its_effective_rate(cloud):
    rules = dict(q(cloud["wh"], "select distinct hostname, match_rule from int_billing_nodes"))
    prices = dict(q(cloud["wh"], "select hostname, price_per_gpu_hour from int_node_hour_prices where day = $d",
                    {"d": DAY}))
    assert {h: (rules.get(h), prices.get(h)) for h in cloud["case"]["nodes"]} == cloud["case"]["nodes"]
    ((cost,),) = q(cloud["wh"], "select allocated_cost from fct_gpu_cost_by_request where request_id = 'req-train-1'")
    assert cost == cloud["case"]["train_cost"]


def test_the_volume_is_charged_to_the_pod_that_mounted_it(cloud):
    rows = dict(q(cloud["wh"], "select pod, cost from int_volume_cost where day = $d", {"d": DAY}))
    half = cloud["case"]["volume"] / 2  # mounted 00-12
    assert rows == {TRAIN: half, "(unmounted)": half}
    ((storage,),) = q(cloud["wh"], "select storage_cost from unit_cost_training_run where request_id = 'req-train-1'")
    assert storage == half
