"""On-prem GPU nodes priced from the price book (amortized hardware + power, or an explicit rate)
beside a cloud bill in one warehouse: the cloud's invariants still hold (every part adds up to
the invoice), on-prem money is its own `price_book` line and never unreconciled.

Fixture: tests/fixtures/finops/onprem/ (an on-prem cluster's `kubectl get nodes -o json` and
`kubectl get pods -A -o json`; sources in clouds/README.md) plus the GCP day of
tests/fixtures/finops/clouds/gcp/, saved as feed files of two clusters, as `feeds ingest` reads
them. The on-prem nodes:
- dgx-h100-r3-01: no providerID (kubeadm), label `gpu-platform.io/hardware-class: dgx-h100-2025`:
  the price book's amortized entry, 37,500 per GPU over 48 months plus 1,275 W x PUE 1.4 at
  0.12 per kWh: 37500 / (48 x 730) + 1.275 x 1.4 x 0.12 = 1.070205 + 0.2142 = 1.284405 per GPU-hour;
- l40s-bm-07: a providerID no cloud claims (`baremetalhost:///...`, OpenShift bare metal), label
  `l40s-lease-2026`: the entry's explicit 0.85 per GPU-hour;
- gpu-ws-12: on-prem H100 without a hardware-class label: the fallback list price (12.29).
"""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timedelta
from decimal import Decimal as D
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from gpu_platform.cli import main
from gpu_platform.finops.sqlmodels import load_ledger_snapshot
from gpu_platform.finops.sqlmodels.raw import load_scorecard_snapshot

FIX = Path(__file__).parent.parent / "fixtures" / "finops"
DAY = "2026-11-28"
D0 = datetime(2026, 11, 28)
GKE_A, GKE_B = "gke-train-a3-pool-1a2b3c4d-x7k2", "gke-train-a3-spot-5e6f7a8b-q9w8"
DGX, L40S, WS = "dgx-h100-r3-01", "l40s-bm-07", "gpu-ws-12"
H100, L40S_MODEL = "NVIDIA H100 80GB HBM3", "NVIDIA L40S"
GCP_INVOICE = D("2704.90")
DGX_RATE = D("1.284405")  # 37500 / 35040 = 1.0702054..., + 0.2142, rounded once to 1e-6
# (node, model, GPUs, pods as (pod, namespace, GPUs, start h, end h))
HOSTS = [
    (GKE_A, H100, 8, [("dagster-step-7a8b9c0d1e2f-train", "team-perception", 8, 0, 12)]),
    (GKE_B, H100, 8, [("perception-sweep-0", "team-perception", 4, 0, 24)]),
    (DGX, H100, 8, [("dagster-step-3c4d5e6f7a8b-train", "team-planning", 8, 0, 12)]),
    (L40S, L40S_MODEL, 4, [("planning-eval-0", "team-planning", 4, 0, 24)]),
    (WS, H100, 1, []),
]
REQUESTS = [
    dict(request_id="req-train-1", team="perception", cost_center="CC-1010", lane="candidate_train", site="sf",
         workload="training_run", gpu_type="h100", gpu_count=8, state="finished", attempts=1),
    dict(request_id="req-plan-1", team="planning", cost_center="CC-1020", lane="candidate_train", site="sf",
         workload="training_run", gpu_type="h100", gpu_count=8, state="finished", attempts=1),
]


def dcgm_history(path: Path) -> None:
    """dcgm-exporter history as Parquet: every GPU of each host every 15 s, labelled with its pod."""
    con = duckdb.connect()
    con.execute("create table assign (hostname varchar, gpu integer, namespace varchar, pod varchar, s double, e double)")
    con.executemany("insert into assign values (?, ?, ?, ?, ?, ?)",
                    [(h, g, ns, p, s, e) for h, _, _, pods in HOSTS for p, ns, n, s, e in pods for g in range(n)])
    con.execute("create table hosts (hostname varchar, model varchar, gpus integer)")
    con.executemany("insert into hosts values (?, ?, ?)", [(h, m, n) for h, m, n, _ in HOSTS])
    con.execute(f"""
        copy (
            select $d::timestamp + to_seconds(k * 15) as ts, 'DCGM_FI_DEV_GPU_UTIL' as metric,
                   case when a.pod is not null then 60.0 else 0.0 end as value, h.hostname, g::integer as gpu,
                   'GPU-' || h.hostname || '-' || g as uuid, h.model as model_name,
                   cast(null as varchar) as pci_bus_id, 'nvidia' || g as device,
                   cast(null as varchar) as gpu_instance_profile, cast(null as varchar) as gpu_instance_id,
                   a.namespace, a.pod, case when a.pod is not null then 'main' end as container
            from hosts as h, range(8) as t(g), range(5760) as r(k)
            left join assign as a on a.hostname = h.hostname and a.gpu = g and k * 15 >= a.s * 3600
                and k * 15 < a.e * 3600
            where g < h.gpus
        ) to '{path}' (format parquet)""", {"d": D0})


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    home = tmp_path_factory.mktemp("onprem")
    feeds = home / "feeds"
    for kind, d in (("nodes", feeds / "nodes" / DAY), ("pods", feeds / "pods" / DAY)):
        d.mkdir(parents=True)
        shutil.copy(FIX / "clouds" / "gcp" / f"kubectl-get-{kind}.json", d / "gke-train.json")
        shutil.copy(FIX / "onprem" / f"kubectl-get-{kind}.json", d / "dc1.json")
    (feeds / "volumes" / DAY).mkdir(parents=True)
    shutil.copy(FIX / "clouds" / "gcp" / "kubectl-get-pv.json", feeds / "volumes" / DAY / "gke-train.json")
    (feeds / "focus").mkdir(parents=True)
    shutil.copy(FIX / "clouds" / "gcp" / "focus-gcp-2026-11-28.csv", feeds / "focus")
    (feeds / "dcgm" / DAY).mkdir(parents=True)
    dcgm_history(feeds / "dcgm" / DAY / "history.parquet")
    env = {"GPU_PLATFORM_HOME": str(home), "GPU_PLATFORM_WAREHOUSE": ""}
    runner = CliRunner()
    ingest = runner.invoke(main, ["feeds", "ingest", "--day", DAY, "--format", "json"], env=env)
    assert ingest.exit_code == 0, ingest.output
    wh = home / "warehouse.duckdb"
    with duckdb.connect(str(wh)) as con:
        load_ledger_snapshot(con, REQUESTS, [
            dict(namespace="team-perception", pod="req-train-1-a1", request_id="req-train-1", attempt=1,
                 flavor_name="h100-ondemand", hostname=GKE_A, started_at=D0, ended_at=D0 + timedelta(hours=12),
                 exit_status="Succeeded"),
            dict(namespace="team-planning", pod="req-plan-1-a1", request_id="req-plan-1", attempt=1,
                 flavor_name="h100-ondemand", hostname=DGX, started_at=D0, ended_at=D0 + timedelta(hours=12),
                 exit_status="Succeeded")])
        load_scorecard_snapshot(con, [], [dict(request_id=r["request_id"], owner="lead@example.com")
                                          for r in REQUESTS], [])
    build = runner.invoke(main, ["cost", "build", "--day", DAY], env=env)
    report = runner.invoke(main, ["cost", "report", "--day", DAY, "--format", "json"], env=env)
    assert report.exit_code == 0, report.output
    text = runner.invoke(main, ["cost", "report", "--day", DAY], env={**env, "COLUMNS": "240"})
    return {"wh": wh, "build": build, "report": json.loads(report.output), "text": text.output,
            "ingest": json.loads(ingest.output)}


def q(wh: Path, sql: str, params=None):
    with duckdb.connect(str(wh), read_only=True) as con:
        return con.execute(sql, params or {}).fetchall()


def test_every_row_loads_and_the_build_passes_every_data_test(built):
    for line in built["ingest"]["feeds"]:
        assert line["accepted"] == line["rows_in"] and line["quarantined"] == 0, line
    assert built["build"].exit_code == 0, built["build"].output


def test_on_prem_nodes_are_priced_from_the_price_book_at_the_derived_rate(built):
    rows = {r[0]: r[1:] for r in q(built["wh"], """
        select hostname, price_source, price_book_basis, price_per_gpu_hour, node_cost
        from int_node_hour_prices where day = $d""", {"d": DAY})}
    assert rows[DGX] == ("price_book", "on_prem_amortized", DGX_RATE, DGX_RATE * 8 * 24)
    assert rows[L40S] == ("price_book", "on_prem_explicit", D("0.85"), D("0.85") * 4 * 24)
    assert rows[WS] == ("price_book", "list", D("12.29"), D("12.29") * 24)  # no hardware-class label
    assert rows[GKE_A][:2] == ("billing", None) and rows[GKE_B][:2] == ("billing", None)
    # the report shows the same rates, marked price_book
    listed = {n["hostname"]: n for n in built["report"]["price_book_nodes"]}
    assert set(listed) == {DGX, L40S, WS}
    assert (listed[DGX]["price_source"], listed[DGX]["basis"], D(listed[DGX]["price_per_gpu_hour"])) == (
        "price_book", "on_prem_amortized", DGX_RATE)
    assert D(listed[L40S]["node_cost"]) == D("81.6")
    assert "on_prem_amortized" in built["text"] and DGX in built["text"]


def test_the_cloud_invoice_still_adds_up_and_on_prem_is_its_own_price_book_line(built):
    (t,) = built["report"]["totals"]
    assert D(t["billed"]) == GCP_INVOICE and D(t["effective"]) == GCP_INVOICE
    parts = sum(D(t[k]) for k in ("billed_allocated_cost", "billed_bypass_cost", "billed_idle_cost", "shared",
                                  "cpu_nodes", "storage", "tax", "credit", "unused_commitment", "unreconciled"))
    assert parts == GCP_INVOICE and D(t["difference"]) == 0
    on_prem = DGX_RATE * 8 * 24 + D("81.6") + D("12.29") * 24
    assert D(t["price_book"]) == on_prem
    assert D(t["chargeback_total"]) == GCP_INVOICE + on_prem
    assert D(t["unreconciled"]) == 0
    # no exception for the on-prem nodes: a missing bill is only news for a cloud node
    assert [e for e in built["report"]["exceptions"] if e["hostname"] in (DGX, L40S, WS)
            and e["kind"] != "bypass_pod_time"] == []


def test_on_prem_gpu_time_is_charged_at_the_derived_rate(built):
    ((cost,),) = q(built["wh"], "select allocated_cost from fct_gpu_cost_by_request where request_id = 'req-plan-1'")
    assert cost == DGX_RATE * 96
    # the bypass pod on the leased node is its namespace's team's, at the lease rate
    (bypass,) = q(built["wh"], "select team, cost, bypass from int_unattributed_gpu_hours where pod = 'planning-eval-0'")
    assert bypass == ("planning", D("81.6"), True)
    teams = {r["team"]: r for r in built["report"]["chargeback_by_team"]}
    assert D(teams["planning"]["allocated_cost"]) == DGX_RATE * 96 + D("81.6")
