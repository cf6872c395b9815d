"""Rows that name their instance: an Azure scale set's rows naming the VM they billed, and a GCP
boot disk named after its node.

- Azure (tests/fixtures/finops/clouds/azure/, 2026-11-28): the uniform scale set
  aks-gpu-37798712-vmss of two ND96isr H100 v5 instances, billed per scale set (`ResourceId`
  `.../virtualMachineScaleSets/S`) as Azure's cost details do, but one row per instance and hour
  naming the VM: instance 0 in `x_SkuDetails` (`{"VMName": "aks-gpu-37798712-vmss_0", ...}`, the
  cost details' AdditionalInfo), pay-as-you-go 98.32/h; instance 1 in `ResourceName`
  (`aks-gpu-37798712-vmss_1`), under the reservation at 65.00/h effective. Each row is its
  instance's, not split evenly over the set: 12.29 and 8.125 per GPU-hour, not 10.2075 each. The
  egress row carries an `x_SkuDetails` that is not JSON (read as naming nothing). A 10.00 row
  naming instance 7, which no node of the day is, stays that instance's: a GPU instance without a
  node (unreconciled), not a share of the set's nodes.
- GCP (clouds/gcp/): the committed a3-highgpu-8g node's boot disk, a pd-balanced disk named after its
  instance (`.../disks/gke-train-a3-pool-1a2b3c4d-x7k2`, ResourceName the node's name; 4.80 a
  day): the node's cost (docs/finops.md, "Prices").
- GCP as BigQuery's CSV export writes it (`2026-11-28 00:00:00 UTC`): the spot node
  gke-train-a3-spot-5e6f7a8b-q9w8 preempted at 11:30 and re-created by its managed instance group
  under the same name and self link (a new numeric id, `container.googleapis.com/instance_id`, and
  creationTimestamp 11:36): the 11:00 hour is two rows per SKU under one ResourceId, 0.5 h and
  0.4 h. Both instances price the node: 23.9 h at 4.4075 (842.714), not 0.4 h of that hour.
"""

from __future__ import annotations

import csv
import io
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
AKS_0, AKS_1, AKS_SPOT = "aks-gpu-37798712-vmss000000", "aks-gpu-37798712-vmss000001", "aks-spot-42850074-vmss000000"
GKE_A, GKE_B = "gke-train-a3-pool-1a2b3c4d-x7k2", "gke-train-a3-spot-5e6f7a8b-q9w8"
TRAIN = "dagster-step-7a8b9c0d1e2f-train"
SET = "aks-gpu-37798712-vmss"


def _write(path: Path, fields: list[str], rows: list[dict]) -> None:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    path.write_text(buf.getvalue())


def _read(path: Path) -> tuple[list[str], list[dict]]:
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def azure_bill(path: Path) -> None:
    fields, rows = _read(CLOUDS / "azure" / "focus-azure-2026-11-28.csv")
    out = []
    for row in rows:
        row = {**row, "x_SkuDetails": ""}
        if row["ResourceName"] == SET and row["ChargeCategory"] == "Usage":
            payg = {**row, "BilledCost": "98.32", "EffectiveCost": "98.32", "ListCost": "98.32",
                    "ContractedCost": "98.32", "ConsumedQuantity": "1", "PricingQuantity": "1",
                    "PricingCategory": "Standard", "CommitmentDiscountId": "", "CommitmentDiscountName": "",
                    "CommitmentDiscountStatus": "", "CommitmentDiscountType": "", "CommitmentDiscountCategory": "",
                    "ChargeDescription": "Virtual Machines NDisrH100v5 Series - ND96isr H100 v5 - US East",
                    "x_SkuDetails": json.dumps({"VMName": f"{SET}_0", "VCPUs": 96,
                                                "ServiceType": "Standard_ND96isr_H100_v5", "UsageType": "ComputeHR"})}
            reserved = {**row, "EffectiveCost": "65.00", "ListCost": "98.32", "ContractedCost": "98.32",
                        "ConsumedQuantity": "1", "PricingQuantity": "1", "ResourceName": f"{SET}_1"}
            out += [payg, reserved]
            if row["ChargePeriodStart"].startswith("2026-11-28T00:"):
                # an instance no node of the day is (deleted before the inventory saw it): its own
                # row, never split over the set's nodes
                gone = json.dumps({"VMName": f"{SET}_7", "VCPUs": 96, "ServiceType": "Standard_ND96isr_H100_v5"})
                out.append({**payg, "BilledCost": "10.00", "EffectiveCost": "10.00", "ListCost": "10.00",
                            "ContractedCost": "10.00", "ConsumedQuantity": "0.1", "x_SkuDetails": gone})
        else:
            if row["ConsumedUnit"] == "GB":
                row["x_SkuDetails"] = "{not json"
            out.append(row)
    _write(path, [*fields, "x_SkuDetails"], out)


def gcp_bill(path: Path) -> None:
    fields, rows = _read(CLOUDS / "gcp" / "focus-gcp-2026-11-28.csv")
    (disk,) = [r for r in rows if r["ResourceType"] == "Disk"]
    boot = {**disk, "ResourceId": f"//compute.googleapis.com/projects/av-fleet-prod/zones/us-central1-a/disks/{GKE_A}",
            "ResourceName": GKE_A, "BilledCost": "4.80", "EffectiveCost": "4.80", "ListCost": "4.80",
            "ContractedCost": "4.80", "ConsumedQuantity": "200", "PricingQuantity": "200"}
    _write(path, fields, [*rows, boot])


SPOT_GKE_NEW_ID = "6693051496831405968"


def bigquery_time(value: str) -> str:
    return value.replace("T", " ").replace("Z", " UTC") if value else value


def gcp_replaced_bill(path: Path) -> None:
    fields, rows = _read(CLOUDS / "gcp" / "focus-gcp-2026-11-28.csv")
    out = []
    for row in rows:
        row = {k: bigquery_time(v) if k.endswith(("PeriodStart", "PeriodEnd")) else v for k, v in row.items()}
        if row["ResourceName"] == GKE_B and row["ChargePeriodStart"].startswith("2026-11-28 11:"):
            # the first instance ran 11:00-11:30, the re-created one 11:36-12:00
            for share in (D("0.5"), D("0.4")):
                cost = str(D(row["BilledCost"]) * share)
                out.append({**row, "BilledCost": cost, "EffectiveCost": cost, "ListCost": cost, "ContractedCost": cost,
                            "ConsumedQuantity": str(share), "PricingQuantity": str(share)})
        else:
            out.append(row)
    _write(path, fields, out)


def gcp_replaced_snapshots(home: Path) -> list[Path]:
    """06:00: the first instance; 18:00: the one its managed instance group re-created at 11:30."""
    import os

    doc = json.loads((CLOUDS / "gcp" / "kubectl-get-nodes.json").read_text())
    early = home / "nodes-0600.json"
    early.write_text(json.dumps(doc))
    for item in doc["items"]:
        if item["metadata"]["name"] == GKE_B:
            item["metadata"]["annotations"]["container.googleapis.com/instance_id"] = SPOT_GKE_NEW_ID
            item["metadata"]["creationTimestamp"] = "2026-11-28T11:36:00Z"
    late = home / "nodes-1800.json"
    late.write_text(json.dumps(doc))
    for f, h in ((early, 6), (late, 18)):
        t = (D0 + timedelta(hours=h)).timestamp() + 0.0
        os.utime(f, (t, t))
    return [early, late]


def dcgm_history(path: Path, pods: list[tuple]) -> None:
    con = duckdb.connect()
    con.execute("create table assign (hostname varchar, gpu integer, pod varchar, s double, e double)")
    con.executemany("insert into assign values (?, ?, ?, ?, ?)",
                    [(n, g, p, s, e) for n, p, gpus, s, e in pods for g in range(gpus)])
    con.execute("create table hosts (hostname varchar)")
    con.executemany("insert into hosts values (?)", [(n,) for n in dict.fromkeys(p[0] for p in pods)])
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


CASES = {
    "azure": dict(bill=azure_bill, pods=[(AKS_0, TRAIN, 8, 0, 12), (AKS_1, "perception-sweep-0", 8, 0, 24),
                                         (AKS_SPOT, "perception-sweep-1", 4, 0, 24)]),
    "gcp": dict(bill=gcp_bill, pods=[(GKE_A, TRAIN, 8, 0, 12), (GKE_B, "perception-sweep-0", 4, 0, 24)]),
    "gcp-replaced": dict(bill=gcp_replaced_bill, snapshots=gcp_replaced_snapshots,
                         pods=[(GKE_A, TRAIN, 8, 0, 12), (GKE_B, "perception-sweep-0", 4, 0, 24)]),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def cloud(request, tmp_path_factory):
    name = request.param
    case, fix = CASES[name], CLOUDS / name.split("-")[0]
    home = tmp_path_factory.mktemp(name)
    env = {"GPU_PLATFORM_HOME": str(home), "GPU_PLATFORM_WAREHOUSE": ""}
    runner = CliRunner()
    bill, dcgm = home / "focus.csv", home / "dcgm.parquet"
    case["bill"](bill)
    dcgm_history(dcgm, case["pods"])
    snapshots = case["snapshots"](home) if "snapshots" in case else [fix / "kubectl-get-nodes.json"]
    ingest = runner.invoke(main, ["feeds", "ingest", "--day", DAY, "--focus", str(bill), "--dcgm", str(dcgm),
                                  "--nodes", str(snapshots[0]),
                                  "--pods", str(fix / "kubectl-get-pods.json"),
                                  "--volumes", str(fix / "kubectl-get-pv.json"), "--format", "json"], env=env)
    assert ingest.exit_code == 0, ingest.output
    for more in snapshots[1:]:
        again = runner.invoke(main, ["feeds", "ingest", "--day", DAY, "--nodes", str(more)], env=env)
        assert again.exit_code == 0, again.output
    lines = json.loads(ingest.output)["feeds"]
    assert all(line["rows_in"] == line["accepted"] for line in lines), [x for x in lines if x["feed"] == "focus"]
    wh = home / "warehouse.duckdb"
    with duckdb.connect(str(wh)) as con:
        load_ledger_snapshot(con, [dict(
            request_id="req-train-1", team="perception", cost_center="CC-1010", lane="candidate_train", site="sf",
            workload="training_run", gpu_type="h100", gpu_count=8, state="finished", attempts=1)], [dict(
            namespace="team-perception", pod="req-train-1-a1", request_id="req-train-1", attempt=1,
            flavor_name="h100-ondemand", hostname=case["pods"][0][0], started_at=D0,
            ended_at=D0 + timedelta(hours=12), exit_status="Succeeded")])
        load_scorecard_snapshot(con, [], [dict(request_id="req-train-1", owner="perception-lead@example.com")], [])
    build = runner.invoke(main, ["cost", "build", "--day", DAY], env=env)
    report = runner.invoke(main, ["cost", "report", "--day", DAY, "--format", "json"], env=env)
    assert report.exit_code == 0, report.output
    _, rows = _read(bill)
    return {"name": name, "wh": wh, "build": build, "report": json.loads(report.output),
            "billed": sum(D(r["BilledCost"]) for r in rows), "effective": sum(D(r["EffectiveCost"]) for r in rows)}


def q(wh: Path, sql: str, params=None):
    with duckdb.connect(str(wh), read_only=True) as con:
        return con.execute(sql, params or {}).fetchall()


def test_the_day_builds_and_reconciles_to_the_bill_to_the_cent(cloud):
    assert cloud["build"].exit_code == 0, cloud["build"].output
    (t,) = cloud["report"]["totals"]
    assert D(t["billed"]) == cloud["billed"] and D(t["effective"]) == cloud["effective"]
    unreconciled = D("10.00") if cloud["name"] == "azure" else D(0)
    assert D(t["unreconciled"]) == unreconciled and D(t["difference"]) == 0
    parts = sum(D(t[k]) for k in ("billed_allocated_cost", "billed_bypass_cost", "billed_idle_cost", "shared",
                                  "cpu_nodes", "storage", "tax", "credit", "unused_commitment", "unreconciled"))
    assert parts == D(t["effective"])


def test_each_named_instance_is_priced_from_its_own_rows(cloud):
    prices = {h: (r, c, p) for h, r, c, p in q(cloud["wh"], """
        select n.hostname, string_agg(distinct b.match_rule, ',' order by b.match_rule), n.node_cost,
               n.price_per_gpu_hour
        from int_node_hour_prices as n left join int_billing_nodes as b using (day, hostname)
        where n.day = $d group by n.hostname, n.node_cost, n.price_per_gpu_hour""", {"d": DAY})}
    if cloud["name"] == "azure":
        assert prices[AKS_0] == ("scale_set_instance", D("2359.680000"), D("12.290000"))
        assert prices[AKS_1] == ("scale_set_instance", D("1560.000000"), D("8.125000"))
        ((cost,),) = q(cloud["wh"], "select allocated_cost from fct_gpu_cost_by_request where request_id = 'req-train-1'")
        assert cost == D("12.29") * 96
        ((cls, host, amount),) = q(cloud["wh"], """
            select c.billing_class, c.hostname, c.effective_cost from int_billing_classes as c
            join stg_focus_billing as b using (day, source, source_row) where b.vm_name = $vm""",
            {"vm": f"{SET}_7"})
        assert (cls, host, amount) == ("gpu_instance_without_node", None, D("10.000000"))
    elif cloud["name"] == "gcp-replaced":
        # both instances (one ResourceId, two numeric ids) price the node: 842.714 / (8 x 23.9)
        assert prices[GKE_B] == ("provider_id", D("842.714000"), D("4.407500"))
        ((hours, instances),) = q(cloud["wh"], """
            select n.node_hours, len(g.instances) from int_node_hour_prices as n
            join int_gpu_nodes as g using (day, hostname) where n.day = $d and n.hostname = $h""",
            {"d": DAY, "h": GKE_B})
        assert (round(hours, 9), instances) == (23.9, 2)
    else:
        # the boot disk is the node's: 24 h x 70.52 + 4.80, over 8 GPUs x 24 h
        assert prices[GKE_A] == ("provider_id,resource_name", D("1697.280000"), D("8.840000"))
        (((cls, rule),)) = q(cloud["wh"], """
            select billing_class, match_rule from int_billing_classes where day = $d and resource_name = $n
              and resource_id like '%/disks/%'""", {"d": DAY, "n": GKE_A})
        assert (cls, rule) == ("gpu_node", "resource_name")
