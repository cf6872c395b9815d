"""End to end on feeds shaped like real exports (the acceptance test of FinOps on real bills).

Day 2026-11-28. Feeds go in through `gpu-platform feeds ingest` (the CLI contract):

- `kubectl get nodes -o json`: an EKS g5.4xlarge (providerID `aws:///us-east-1b/i-006flle71l19b488a`,
  the instance of the official FOCUS 1.0 sample's GPU line), an AKS A100 VM (4 GPUs; DCGM reports
  5 indexes), a GKE a3 node (8 H100, billed, no DCGM samples), an OKE bare-metal H100 node (no
  bill: priced from the price book), an on-prem DGX with no product label and no DCGM modelName
  (no price at all) and a CPU system node.
- `kubectl get pods -A -o json`: two dagster-k8s step pods labelled with admitted request ids, a
  notebook on the A10G node with no request id, a pod claiming a request that was never admitted.
- FOCUS 1.0 exports shaped like the official sample's rows: 24 hourly g5 rows (bare instance id),
  a g5 instance no node explains, the CPU node by ARN, the AKS VM by resource id with two charge
  periods crossing midnight, the GKE node by self link, shared rows; a second export repeating
  one hour.
- DCGM: dcgm-exporter text (A10G node) and Parquet history (the others), plus a file of five
  minutes of the next day: counted as the next day's rows, not loaded for this day.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from decimal import Decimal as D
from pathlib import Path

import dagster as dg
import duckdb
import polars as pl
import pytest
from click.testing import CliRunner

from assets.finops import finops_assets
from gpu_platform.cli import main
from gpu_platform.finops.feeds.k8s_inventory import parse_nodes, parse_pods, provider_key, read_cluster
from gpu_platform.finops.sqlmodels import (
    Project,
    default_project_path,
    ensure_raw_tables,
    load_ledger_snapshot,
)
from resources.warehouse import Warehouse

FIX = Path(__file__).parent.parent / "fixtures" / "finops"
DAY = "2026-11-28"
D0 = datetime(2026, 11, 28)
A10G = "ip-10-0-1-23.ec2.internal"
AKS = "aks-gpu-37798712-vmss000000"
GKE = "gke-train-a3-pool-1a2b3c4d-x7k2"
OKE = "oke-gpu-h100-0"
DGX = "dgx-01"
STEP_A10G = "dagster-step-5c3e0a91d2b4-7xk2p"
STEP_AKS = "dagster-step-8f1b2c3d4e5f-q9w8e"


def h(x: float) -> datetime:
    return D0 + timedelta(hours=x)


REQUESTS = [
    dict(request_id="req-k8s-train-1", team="perception", cost_center="CC-1010", lane="candidate_train", site="sf",
         workload="training_run", gpu_type="a10g", gpu_count=1, state="finished", attempts=1),
    dict(request_id="req-k8s-map-1", team="mapping", cost_center="CC-1030", lane="map_semantic_batch", site="muc",
         workload="map_segmentation", gpu_type="a100", gpu_count=4, state="finished", attempts=1),
    dict(request_id="req-k8s-train-2", team="perception", cost_center="CC-1010", lane="candidate_train", site="sf",
         workload="training_run", gpu_type="a10g", gpu_count=1, state="admitted", attempts=1),
]
# the ledger's view of the k8s runs: one placeholder per admitted attempt, no host (the gate does not know it)
LEDGER_PODS = [
    dict(namespace="team-perception", pod="req-k8s-train-1-a1", request_id="req-k8s-train-1", attempt=1,
         flavor_name="a10g-ondemand", started_at=h(1.95), ended_at=h(8.05), exit_status="Succeeded"),
    dict(namespace="team-mapping", pod="req-k8s-map-1-a1", request_id="req-k8s-map-1", attempt=1,
         flavor_name="a100-ondemand", started_at=h(5.9), ended_at=h(18.1), exit_status="Succeeded"),
    dict(namespace="team-perception", pod="req-k8s-train-2-a1", request_id="req-k8s-train-2", attempt=1,
         flavor_name="a10g-ondemand", started_at=h(23.5), ended_at=None, exit_status=None),
]

# (host, model or None, gpu indexes, [(gpus, namespace, pod, start h, end h, util %)])
HOSTS = [
    (AKS, "NVIDIA A100 80GB PCIe", range(5), [(range(4), "team-mapping", STEP_AKS, 6, 18, 80)]),
    (OKE, "NVIDIA H100 80GB HBM3", range(8), [(range(2), "team-safety", "replay-manual-7b9d", 20, 22, 95)]),
    (DGX, None, range(8), []),
]


def _dcgm_text(path: Path) -> None:
    """dcgm-exporter's text for the A10G node, every 15 s, with millisecond timestamps."""
    lines = ["# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).", "# TYPE DCGM_FI_DEV_GPU_UTIL gauge"]
    for k in range(5760):
        t = D0 + timedelta(seconds=15 * k)
        hour = k * 15 / 3600
        ns, pod, util = "", "", 0
        if 2 <= hour < 8:
            ns, pod, util = "team-perception", STEP_A10G, 70
        elif hour >= 12:
            ns, pod, util = "research", "notebook-alice-0", 30
        ms = int((t - datetime(1970, 1, 1)).total_seconds() * 1000)
        lines.append(
            f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-5f0e6b7a-1c2d-3e4f-8a9b-0c1d2e3f4a5b",pci_bus_id="00000000:00:1E.0",'
            f'device="nvidia0",modelName="NVIDIA A10G",Hostname="{A10G}",DCGM_FI_DRIVER_VERSION="535.183.01",'
            f'container="{"main" if pod else ""}",namespace="{ns}",pod="{pod}"}} {util} {ms}')
    path.write_text("\n".join(lines) + "\n")


def _history(path: Path, hosts=HOSTS, start: datetime = D0, steps: int = 5760) -> None:
    rows = []
    for host, model, gpus, pods in hosts:
        for g in gpus:
            for k in range(steps):
                t = start + timedelta(seconds=15 * k)
                hour = (t - D0).total_seconds() / 3600
                ns = pod = None
                util = 0.0
                for pg, pns, ppod, s, e, u in pods:
                    if g in pg and s <= hour < e:
                        ns, pod, util = pns, ppod, float(u)
                rows.append((t, "DCGM_FI_DEV_GPU_UTIL", util, host, g, f"GPU-{host}-{g}", model, None, f"nvidia{g}",
                             None, None, ns, pod, "main" if pod else None))
    cols = ["ts", "metric", "value", "hostname", "gpu", "uuid", "model_name", "pci_bus_id", "device",
            "gpu_instance_profile", "gpu_instance_id", "namespace", "pod", "container"]
    schema = {"ts": pl.Datetime("us"), "metric": pl.String, "value": pl.Float64, "hostname": pl.String,
              "gpu": pl.Int32, **{c: pl.String for c in cols[5:]}}
    pl.DataFrame(rows, schema=schema, orient="row").write_parquet(path)


@pytest.fixture(scope="module")
def feeds(tmp_path_factory):
    d = tmp_path_factory.mktemp("feeds")
    _dcgm_text(d / "a10g.prom")
    _history(d / "history.parquet")
    # five minutes of the next day (a host that is nowhere else), given with --day of this day
    _history(d / "tail.parquet", hosts=[("dgx-02", "NVIDIA H100 80GB HBM3", range(8), [])],
             start=D0 + timedelta(days=1), steps=20)
    return d


def _ingest(runner: CliRunner, wh: Path, feeds: Path, env: dict) -> dict:
    res = runner.invoke(main, [
        "feeds", "ingest", "--day", DAY,
        "--dcgm", str(feeds / "a10g.prom"), "--dcgm", str(feeds / "history.parquet"), "--dcgm", str(feeds / "tail.parquet"),
        "--focus", str(FIX / "focus-export-2026-11.csv"), "--focus", str(FIX / "focus-export-2026-11-rerun.csv"),
        "--nodes", str(FIX / "kubectl-get-nodes.json"), "--pods", str(FIX / "kubectl-get-pods.json"),
        "--format", "json"], env=env)
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


@pytest.fixture(scope="module")
def built(tmp_path_factory, feeds):
    home = tmp_path_factory.mktemp("home")
    env = {"GPU_PLATFORM_HOME": str(home), "GPU_PLATFORM_WAREHOUSE": ""}
    runner = CliRunner()
    out = _ingest(runner, home / "warehouse.duckdb", feeds, env)
    wh = home / "warehouse.duckdb"
    con = duckdb.connect(str(wh))
    ensure_raw_tables(con)
    # the 25th hour of the AKS row is charged to the 29th: load that day's FOCUS rows as well
    con.close()
    res = runner.invoke(main, ["feeds", "ingest", "--day", "2026-11-27", "--focus", str(FIX / "focus-export-2026-11.csv")],
                        env=env)
    assert res.exit_code == 0, res.output
    con = duckdb.connect(str(wh))
    load_ledger_snapshot(con, REQUESTS, LEDGER_PODS)
    con.close()
    res = runner.invoke(main, ["cost", "build", "--day", DAY, "--until", "2026-11-29"], env=env)
    return {"home": home, "wh": wh, "env": env, "ingest": out, "build": res}


def q(wh: Path, sql: str, params=None):
    with duckdb.connect(str(wh), read_only=True) as con:
        return con.execute(sql, params or {}).fetchall()


def test_ingest_counts_every_row_per_feed_and_file(built):
    by_source = {Path(r["source"]).name: r for r in built["ingest"]["feeds"]}
    assert by_source["kubectl-get-nodes.json"] == {**by_source["kubectl-get-nodes.json"], "feed": "nodes",
                                                   "rows_in": 6, "accepted": 6, "quarantined": 0}
    assert by_source["kubectl-get-pods.json"]["accepted"] == 6
    assert by_source["a10g.prom"]["accepted"] == 5760
    assert by_source["focus-export-2026-11.csv"]["accepted"] == 33  # the 23:00-01:00 row starts on the 27th
    assert all(r["rows_in"] == r["accepted"] + r["quarantined"] + r["other_days"] for r in built["ingest"]["feeds"])
    # a sample counts on its own day only: the next day's five minutes are counted, not loaded
    assert by_source["tail.parquet"] == {**by_source["tail.parquet"], "rows_in": 8 * 20, "accepted": 0,
                                         "other_days": 8 * 20, "other_days_by_day": {"2026-11-29": 8 * 20}}
    assert Path(built["ingest"]["warehouse"]) == built["home"] / "warehouse.duckdb"  # GPU_PLATFORM_HOME honoured


def test_bills_join_nodes_by_provider_identity(built):
    rules = dict(q(built["wh"], "select hostname, min(match_rule) from int_billing_nodes where day = $d group by 1",
                   {"d": DAY}))
    assert rules == {A10G: "provider_id", AKS: "provider_id", GKE: "provider_id"}
    prices = {r[0]: r[1:] for r in q(built["wh"], "select hostname, gpus, price_source, node_cost from "
                                                  "int_node_hour_prices where day = $d", {"d": DAY})}
    # the A10G node: 24 hours of $1.624 (the repeated hour is an exception, not a second price)
    assert prices[A10G] == (1, "billing", D("38.976000"))
    # AKS: half of 23:00-01:00 and 23/24 of 01:00-01:00 next day, on 4 GPUs (inventory), not 5 (DCGM)
    assert prices[AKS] == (4, "billing", D("29.38") / 2 + D("352.56") * 23 / 24)
    assert prices[OKE][1] == "price_book" and prices[OKE][0] == 8
    assert DGX not in prices  # no bill, no modelName, no product label: no price


def test_cross_midnight_charge_is_prorated(built):
    pieces = q(built["wh"], "select day, billed_cost from stg_focus_billing where resource_id like '%virtualmachines/0' "
                            "and charge_period_start = $s order by day", {"s": h(1)})
    assert [(str(d), c) for d, c in pieces] == [(DAY, D("337.870000")), ("2026-11-29", D("14.690000"))]


def test_k8s_pods_map_dcgm_samples_to_requests(built):
    rows = {r[0]: r[1:] for r in q(built["wh"], "select request_id, allocated_gpu_hours, used_gpu_hours, allocated_cost "
                                                 "from fct_gpu_cost_by_request where day = $d", {"d": DAY})}
    alloc, used, cost = rows["req-k8s-train-1"]
    assert alloc == pytest.approx(6.0) and used == pytest.approx(6 * 0.7)
    assert cost == D("9.744000")  # 6 of the node's 24 GPU-hours
    alloc, used, _ = rows["req-k8s-map-1"]
    assert alloc == pytest.approx(48.0) and used == pytest.approx(48 * 0.8)


def test_exceptions_name_every_problem(built):
    rows = q(built["wh"], "select kind, treatment, hostname, pod, amount from reconciliation_exceptions where day = $d",
             {"d": DAY})
    kinds = {(k, host or "", pod or "") for k, _, host, pod, _ in rows}
    assert ("bill_without_telemetry", GKE, "") in kinds
    assert ("bill_without_telemetry", "i-09ba12e1l5743720b", "") in kinds
    assert ("telemetry_without_bill", OKE, "") in kinds
    assert ("node_without_price", DGX, "") in kinds
    assert ("duplicated_billing_row", A10G, "") in kinds
    assert ("gpu_count_disagreement", AKS, "") in kinds
    assert ("unattributed_pod_time", A10G, "notebook-alice-0") in kinds
    # a pod in team-safety's namespace claiming a request never admitted: charged to safety as bypass
    assert ("bypass_pod_time", OKE, "replay-manual-7b9d") in kinds
    amount = {(k, host, pod): (t, a) for k, t, host, pod, a in rows}
    assert amount[("bill_without_telemetry", GKE, None)] == ("unreconciled", D("2111.280000"))
    assert amount[("unattributed_pod_time", A10G, "notebook-alice-0")] == ("unreconciled", D("19.488000"))
    assert amount[("duplicated_billing_row", A10G, None)] == ("unreconciled", D("1.624000"))
    assert amount[("bypass_pod_time", OKE, "replay-manual-7b9d")][0] == "charged"
    assert q(built["wh"], "select team, lane, bypass from chargeback where day = $d and bypass", {"d": DAY}) == [
        ("safety", "(bypass)", True)]
    assert q(built["wh"], "select count(*) from raw_dcgm_samples where hostname = 'dgx-02'") == [(0,)]
    assert q(built["wh"], "select count(*) from reconciliation_exceptions where kind = 'sample_outside_day'") == [(0,)]
    assert q(built["wh"], "select count(*) from int_node_hour_prices where hostname = 'dgx-02'") == [(0,)]


def test_every_dollar_is_charged_or_on_an_exception(built):
    ((billed, book, total, teams, unrec, diff),) = q(built["wh"], """
        select billed_cost, price_book_cost, chargeback_total, charged_to_teams, unreconciled_cost, difference
        from reconciliation where day = $d""", {"d": DAY})
    assert abs(diff) < D("0.005")
    assert abs(total - (billed + book)) < D("0.005")
    assert teams <= billed + book
    (held,) = q(built["wh"], "select sum(amount) from reconciliation_exceptions where day = $d and "
                             "treatment = 'unreconciled'", {"d": DAY})[0]
    ((row,),) = q(built["wh"], "select total_cost from chargeback where day = $d and team = '(unreconciled)'", {"d": DAY})
    assert row == held == unrec and teams + row == total
    # the FOCUS sample's unmatched g5 hours and the GKE node's whole bill are not shared cost
    ((shared,),) = q(built["wh"], "select shared_cost from int_shared_cost where day = $d", {"d": DAY})
    assert shared == D("4.608000") + D("0.400000") + D("1.200000")


def test_a_day_over_the_unreconciled_threshold_is_built_flagged_and_names_the_largest_exceptions(built):
    res = built["build"]
    # a flag, not a failure (docs/finops.md, "What blocks a day"); this day's exit status is set by
    # its unpriced pods (not_null currency), the same with the threshold raised below
    assert "WARN (day built, flagged) chargeback.expression_is_true_unreconciled_within_threshold" in res.output
    assert "FAIL (blocking)" not in res.output and "flagged" in res.output.splitlines()[-1]
    assert GKE in res.output  # the largest exception is named
    rep = CliRunner().invoke(main, ["cost", "report", "--day", DAY, "--format", "json"], env=built["env"])
    (flag,) = json.loads(rep.stdout)["flags"]
    assert flag["flag"] == "unreconciled_over_threshold" and D(flag["unreconciled"]) > D(flag["limit"])
    assert f"WARNING: {DAY} is flagged" in rep.stderr
    ok = CliRunner().invoke(main, ["cost", "build", "--day", DAY, "--unreconciled-threshold", "0.9"], env=built["env"])
    assert "unreconciled_within_threshold" not in ok.output, ok.output
    assert ok.exit_code == res.exit_code


def test_cost_report_json_has_billed_allocated_idle_shared_unreconciled_and_exceptions(built):
    res = CliRunner().invoke(main, ["cost", "report", "--day", DAY, "--format", "json"], env=built["env"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    (usd,) = data["totals"]
    assert {"billed", "allocated", "idle", "shared", "unreconciled"} <= set(usd)
    assert D(usd["unreconciled"]) > D("2111")
    assert data["exceptions"][0]["hostname"] == GKE


def test_report_without_warehouse_names_the_path(tmp_path):
    res = CliRunner().invoke(main, ["cost", "report", "--day", DAY], env={"GPU_PLATFORM_HOME": str(tmp_path),
                                                                          "GPU_PLATFORM_WAREHOUSE": ""})
    assert res.exit_code == 1 and str(tmp_path / "warehouse.duckdb") in res.output
    assert not (tmp_path / "warehouse.duckdb").exists()


def test_a_flagged_day_does_not_stop_downstream_assets_in_dagster(built, tmp_path):
    import shutil

    path = tmp_path / "wh.duckdb"
    shutil.copy(built["wh"], path)
    result = dg.materialize(finops_assets, partition_key=DAY, resources={"warehouse": Warehouse(path=str(path))},
                            raise_on_error=False)
    failed = [e for e in result.get_asset_check_evaluations() if not e.passed]
    flagged = [e for e in failed if e.check_name == "expression_is_true_unreconciled_within_threshold"]
    assert flagged and flagged[0].severity == dg.AssetCheckSeverity.WARN
    assert GKE in (flagged[0].description or "")
    done = {m.asset_key.to_user_string() for m in result.get_asset_materialization_events()
            for m in [m.event_specific_data.materialization]}
    # the day over the threshold is still built and shown downstream
    assert {"chargeback", "reconciliation", "platform_cost_per_tenant"} <= done


PROVIDER_FORMS = [
    ("aws:///us-east-1b/i-006flle71l19b488a", "aws:i-006flle71l19b488a"),
    ("i-006flle71l19b488a", "aws:i-006flle71l19b488a"),
    ("arn:aws:ec2:us-east-1:11353890204:instance/i-006flle71l19b488a", "aws:i-006flle71l19b488a"),
    ("azure:///subscriptions/S/resourceGroups/G/providers/Microsoft.Compute/virtualMachines/vm1",
     "azure:/subscriptions/s/resourcegroups/g/providers/microsoft.compute/virtualmachines/vm1"),
    ("/subscriptions/s/resourcegroups/g/providers/microsoft.compute/virtualmachines/vm1",
     "azure:/subscriptions/s/resourcegroups/g/providers/microsoft.compute/virtualmachines/vm1"),
    ("gce://proj/us-central1-a/node-1", "gce:proj/us-central1-a/node-1"),
    ("//compute.googleapis.com/projects/proj/zones/us-central1-a/instances/node-1", "gce:proj/us-central1-a/node-1"),
    ("https://www.googleapis.com/compute/v1/projects/proj/zones/us-central1-a/instances/node-1",
     "gce:proj/us-central1-a/node-1"),
    ("4471839274619283746", "gce-id:4471839274619283746"),
    ("oci://ocid1.instance.oc1.iad.abc123", "oci:ocid1.instance.oc1.iad.abc123"),
    ("ocid1.instance.oc1.iad.abc123", "oci:ocid1.instance.oc1.iad.abc123"),
    ("gpu-node-01", None),
    ("ocid1.volume.oc1.iad.abc", None),
    # volumes (PersistentVolumes' cloud disks, billed as storage)
    ("vol-00a1b2c3d4e5f60011", "aws:vol-00a1b2c3d4e5f60011"),
    ("arn:aws:ec2:us-west-2:444455556666:volume/vol-00a1b2c3d4e5f60011", "aws:vol-00a1b2c3d4e5f60011"),
    ("aws://us-west-2a/vol-00a1b2c3d4e5f60011", "aws:vol-00a1b2c3d4e5f60011"),
    ("//compute.googleapis.com/projects/proj/zones/us-central1-a/disks/pvc-1234", "gce-disk:proj/us-central1-a/pvc-1234"),
    ("//compute.googleapis.com/projects/proj/regions/us-central1/disks/pvc-5678", "gce-disk:proj/us-central1/pvc-5678"),
    ("/subscriptions/S/resourceGroups/MC_rg/providers/Microsoft.Compute/disks/pvc-9abc",
     "azure:/subscriptions/s/resourcegroups/mc_rg/providers/microsoft.compute/disks/pvc-9abc"),
]


def test_provider_identity_rules_agree_in_python_and_sql():
    project = Project.load(default_project_path())
    sql = project.models["stg_focus_billing"].sql
    expr = sql[sql.index("case\n            when regexp_matches(lower(ResourceId)"):sql.index("end as resource_key") + 3]
    con = duckdb.connect()
    for form, key in PROVIDER_FORMS:
        assert provider_key(form)[1] == key, form
        if not form.startswith(("aws://", "gce://", "oci://", "azure://")):  # providerID forms never appear in bills
            assert con.execute(f"select {expr} from (select ?::varchar as ResourceId)", [form]).fetchall()[0][0] == key, form


def test_inventory_parsers_quarantine_bad_items_with_field_and_item():
    doc = json.loads((FIX / "kubectl-get-nodes.json").read_text())
    doc["items"][1]["status"]["capacity"]["nvidia.com/gpu"] = "4x"
    del doc["items"][2]["metadata"]["name"]
    batch = parse_nodes(doc, source="nodes.json")
    assert (batch.rows_in, batch.accepted, batch.quarantined) == (6, 4, 2)
    reasons = batch.quarantine["reason"].to_list()
    assert reasons == ["item 2: status.capacity.nvidia.com/gpu: '4x' is not a whole number", "item 3: metadata.name: missing"]
    dgx = batch.rows.filter(pl.col("node") == DGX).row(0, named=True)
    assert (dgx["gpu_capacity"], dgx["gpu_count_label"], dgx["mig_devices"]) == (0, 8, 7)
    pods = json.loads((FIX / "kubectl-get-pods.json").read_text())
    pods["items"][0]["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"] = "yesterday"
    batch = parse_pods(pods, source="pods.json")
    assert batch.quarantined == 1 and "item 1: status.containerStatuses[0].state.terminated.finishedAt" in \
        batch.quarantine["reason"][0]
    with pytest.raises(ValueError, match="kind: expected 'List' or 'PodList'"):
        parse_pods({"apiVersion": "v1", "kind": "Pod"}, source="pod.json")


def test_from_cluster_reads_the_api_through_the_kubernetes_client():
    """The kubernetes client's own models and serialiser, paged by `continue` (no cluster needed)."""
    from kubernetes import client

    doc = json.loads((FIX / "kubectl-get-nodes.json").read_text())
    api_client = client.ApiClient()

    class Resp:
        def __init__(self, body):
            self.data = json.dumps(body)

    pages = [
        {"apiVersion": "v1", "kind": "NodeList", "metadata": {"continue": "tok"}, "items": doc["items"][:3]},
        {"apiVersion": "v1", "kind": "NodeList", "metadata": {}, "items": doc["items"][3:]},
    ]
    calls = []

    class FakeCoreV1:
        def __init__(self):
            self.api_client = api_client

        def list_node(self, **kwargs):
            calls.append(kwargs)
            return api_client.deserialize(Resp(pages[len(calls) - 1]), "V1NodeList")

    listed = read_cluster("Node", api=FakeCoreV1())
    assert [c.get("_continue") for c in calls] == [None, "tok"]
    batch = parse_nodes(listed, source="cluster:nodes")
    assert batch.accepted == 6
    aws = batch.rows.filter(pl.col("node") == A10G).row(0, named=True)
    assert (aws["provider_key"], aws["instance_type"], aws["gpu_capacity"]) == ("aws:i-006flle71l19b488a", "g5.4xlarge", 1)


def test_a_pod_whose_whole_second_start_precedes_its_admission_keeps_its_attempt(built, tmp_path):
    """The API's startTime has whole seconds: a pod admitted at 02:00:00.97 shows 02:00:00. It still
    takes its attempt and flavor (so its node pool is named, never 'unknown'); a pod starting a
    minute before any attempt of its request does not."""
    import shutil

    wh = tmp_path / "warehouse.duckdb"
    shutil.copy(built["wh"], wh)
    pods = [dict(p) for p in LEDGER_PODS]
    pods[0]["started_at"] = h(2) + timedelta(seconds=0.97)  # the pod's startTime is 02:00:00
    pods[1]["started_at"] = h(6) + timedelta(minutes=1)  # the AKS pod started 06:00:00: a minute early
    con = duckdb.connect(str(wh))
    load_ledger_snapshot(con, REQUESTS, pods)
    con.close()
    env = {**built["env"], "GPU_PLATFORM_WAREHOUSE": str(wh)}
    res = CliRunner().invoke(main, ["cost", "build", "--day", DAY], env=env)
    assert "built" in res.output, res.output  # whether the data tests pass is not this test's concern
    rows = dict(q(wh, "select request_id, flavor_name from int_pods where origin = 'kubernetes'"))
    assert rows["req-k8s-train-1"] == "a10g-ondemand"
    assert rows["req-k8s-map-1"] is None
