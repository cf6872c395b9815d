"""A whole bill: one day of a FOCUS 1.2 export shaped like AWS's, with every row kind.

Day 2026-11-28 (`tests/fixtures/finops/whole-bill/`, through `gpu-platform feeds ingest`):

- three p5.48xlarge nodes (8 H100 each) billed per hour: on demand (98.32/h, 12.29 per GPU-hour),
  spot (`PricingCategory: Dynamic`, 39.33/h -> 4.91625), and one under a Compute Savings Plan
  (`BilledCost` 0, `EffectiveCost` 61.00/h -> 7.625);
- the plan's daily `Purchase` row (64.00/h committed: BilledCost 1,536.00, EffectiveCost 0) and its
  unused part (`CommitmentDiscountStatus: Unused`, EffectiveCost 72.00);
- a gp3 volume per node (3 x 5.46 + 0.27), a CPU node (m7i.4xlarge, 24 x 0.8064), data transfer
  out (46.80), a `Tax` row (310.25), a `Credit` row (-400.00), and a `Correction` (ChargeClass) of
  the previous day's data transfer (-12.00, charge period 2026-11-27);
- invoice: BilledCost 4,820.6536 = EffectiveCost 4,820.6536 (the plan's fee equals its covered and
  unused effective cost); 4,832.6536 on the 28th, -12.00 on the 27th.

Pods (`kubectl get pods -A -o json`): three dagster-k8s step pods of admitted requests (8 GPUs
00-12 on the on-demand node, 4 GPUs all day on the spot node, 8 GPUs 00-12 on the committed node),
the team's own pods in `team-perception` without a request id (4 GPUs 12-24 on each GPU node:
48 x (12.29 + 4.91625 + 7.625) = 1,191.90), and a notebook in `research`, a namespace no team owns
(1 GPU 00-06 on the spot node: 6 x 4.91625 = 29.4975).

PersistentVolumes (`kubectl get pv -o json`): three of the gp3 volumes back claims: `train-data`
(EBS CSI, mounted by req-train-1's GPU pod 00-12 and its CPU step 00-02, then by a team sweep pod
12-24), `label-cache` (in-tree `awsElasticBlockStore`, the label pod all day) and the replay pod's
generic ephemeral `scratch` volume (00-12; unmounted 12-24); the mapping team's NFS volume has no
bill. The fourth gp3 volume (the CPU node's root disk) is no PV and stays shared.
"""

from __future__ import annotations

import json
from datetime import date, datetime, timedelta
from decimal import Decimal as D
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from gpu_platform.cli import main
from gpu_platform.finops.sqlmodels import (
    Project,
    default_project_path,
    ensure_raw_tables,
    load_ledger_snapshot,
)
from gpu_platform.finops.sqlmodels.raw import load_scorecard_snapshot
from gpu_platform.observe.scorecards import model_vars
from gpu_platform.policy import load_policy

FIX = Path(__file__).parent.parent / "fixtures" / "finops" / "whole-bill"
BILL = FIX / "focus-aws-2026-11-28.csv"
DAY, PREV = "2026-11-28", "2026-11-27"
D0 = datetime(2026, 11, 28)
OD = "ip-10-1-0-11.us-west-2.compute.internal"
SPOT = "ip-10-1-0-12.us-west-2.compute.internal"
SP = "ip-10-1-0-13.us-west-2.compute.internal"
H100 = "NVIDIA H100 80GB HBM3"
INVOICE = D("4820.6536")
CPU_NODE = "ip-10-1-0-20.us-west-2.compute.internal"
GIB = 1 << 30


def cpu_node_cost(cores: float, gib: float, hours: float) -> D:
    """The m7i.4xlarge (16 cores, 65049908Ki, 24 x 0.8064) split by OpenCost's default CPU : RAM
    prices (0.031611 per core-hour, 0.004237 per GiB-hour) and priced per unit-hour of capacity."""
    node_gib = 65049908 * 1024 / GIB
    cpu_part = 16 * 0.031611 / (16 * 0.031611 + node_gib * 0.004237)
    cost = 19.3536 * cpu_part * cores * hours / (16 * 24) + 19.3536 * (1 - cpu_part) * gib * hours / (node_gib * 24)
    return D(str(round(cost, 6)))


MAPPING_CPU = cpu_node_cost(8, 32, 24)  # the mapping team's preprocessing pod, all day
TRAIN_CPU = cpu_node_cost(4, 8, 2)  # req-train-1's CPU step, 00-02
CPU_ALLOCATED = MAPPING_CPU + TRAIN_CPU
# gp3 5.46 a day each: train-data 00-02 shared by two pods, 02-12 the GPU pod, 12-24 the sweep pod
TRAIN_VOL, PREP_VOL, SWEEP_VOL = D("2.5025"), D("0.2275"), D("2.73")
LABEL_VOL, REPLAY_VOL, UNMOUNTED_VOL = D("5.46"), D("2.73"), D("2.73")
STORAGE_ALLOCATED = TRAIN_VOL + PREP_VOL + SWEEP_VOL + LABEL_VOL + REPLAY_VOL

REQUESTS = [
    dict(request_id="req-train-1", team="perception", cost_center="CC-1010", lane="candidate_train", site="sf",
         workload="training_run", gpu_type="h100", gpu_count=8, state="finished", attempts=1),
    dict(request_id="req-label-1", team="labeling", cost_center="CC-1040", lane="labeler_batch", site="sf",
         workload="label_batch", gpu_type="h100", gpu_count=4, state="finished", attempts=1),
    dict(request_id="req-replay-1", team="safety", cost_center="CC-1050", lane="release_eval", site="muc",
         workload="replay", gpu_type="h100", gpu_count=8, state="finished", attempts=1),
]
# the ledger's placeholders, one per admitted attempt (the cluster's pods of the request replace them)
LEDGER_PODS = [
    dict(namespace=ns, pod=f"{rid}-a1", request_id=rid, attempt=1, flavor_name="h100-ondemand", hostname=node,
         started_at=D0 + timedelta(hours=s), ended_at=D0 + timedelta(hours=e), exit_status="Succeeded")
    for ns, rid, node, s, e in (("team-perception", "req-train-1", OD, 0, 12),
                                ("team-labeling", "req-label-1", SPOT, 0, 24),
                                ("team-safety", "req-replay-1", SP, 0, 12))
]
OWNERS = [dict(request_id=r["request_id"], owner=f"{r['team']}-lead@example.com") for r in REQUESTS]
# DCGM samples: (namespace, pod, node, gpus, start h, end h, util %)
SAMPLED = [
    ("team-perception", "dagster-step-1a2b3c4d5e6f-train", OD, range(8), 0, 12, 90),
    ("team-labeling", "dagster-step-2b3c4d5e6f7a-label", SPOT, range(4), 0, 24, 60),
    ("team-safety", "dagster-step-3c4d5e6f7a8b-replay", SP, range(8), 0, 12, 80),
    *[("team-perception", f"perception-sweep-{i}", n, range(4, 8), 12, 24, 50) for i, n in enumerate((OD, SPOT, SP))],
    ("research", "notebook-bob-0", SPOT, [4], 0, 6, 20),
]


def dcgm_history(path: Path) -> None:
    """dcgm-exporter history of the three GPU nodes as Parquet: every GPU every 15 s, labelled with
    the pod holding it (idle GPUs too)."""
    con = duckdb.connect()
    con.execute("create table assign (hostname varchar, gpu integer, namespace varchar, pod varchar, s double, "
                "e double, util double)")
    con.executemany("insert into assign values (?, ?, ?, ?, ?, ?, ?)",
                    [(n, g, ns, pod, s, e, u) for ns, pod, n, gpus, s, e, u in SAMPLED for g in gpus])
    con.execute(f"""
        copy (
            select $d::timestamp + to_seconds(k * 15) as ts, 'DCGM_FI_DEV_GPU_UTIL' as metric,
                   coalesce(a.util, 0.0) as value, h.hostname, g::integer as gpu,
                   'GPU-' || h.hostname || '-' || g as uuid, '{H100}' as model_name,
                   cast(null as varchar) as pci_bus_id, 'nvidia' || g as device,
                   cast(null as varchar) as gpu_instance_profile, cast(null as varchar) as gpu_instance_id,
                   a.namespace, a.pod,
                   case when a.pod is not null then 'main' end as container
            from (values ('{OD}'), ('{SPOT}'), ('{SP}')) as h(hostname), range(8) as t(g), range(5760) as r(k)
            left join assign as a on a.hostname = h.hostname and a.gpu = g and k * 15 >= a.s * 3600
                and k * 15 < a.e * 3600
        ) to '{path}' (format parquet)""", {"d": D0})


def run(runner: CliRunner, env: dict, *args: str):
    return runner.invoke(main, list(args), env=env)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    home = tmp_path_factory.mktemp("home")
    env = {"GPU_PLATFORM_HOME": str(home), "GPU_PLATFORM_WAREHOUSE": ""}
    runner = CliRunner()
    dcgm = home / "dcgm.parquet"
    dcgm_history(dcgm)
    ingest = run(runner, env, "feeds", "ingest", "--day", DAY, "--focus", str(BILL), "--dcgm", str(dcgm),
                 "--nodes", str(FIX / "kubectl-get-nodes.json"), "--pods", str(FIX / "kubectl-get-pods.json"),
                 "--volumes", str(FIX / "kubectl-get-pv.json"), "--format", "json")
    assert ingest.exit_code == 0, ingest.output
    # the correction's charge period is the 27th: it is loaded (and priced) under its own day
    prev = run(runner, env, "feeds", "ingest", "--day", PREV, "--focus", str(BILL), "--format", "json")
    assert prev.exit_code == 0, prev.output
    wh = home / "warehouse.duckdb"
    con = duckdb.connect(str(wh))
    load_ledger_snapshot(con, REQUESTS, LEDGER_PODS)
    load_scorecard_snapshot(con, [], OWNERS, [])
    con.close()
    build = run(runner, env, "cost", "build", "--day", PREV, "--until", DAY)
    reports = {}
    for d in (PREV, DAY):
        res = run(runner, env, "cost", "report", "--day", d, "--format", "json")
        assert res.exit_code == 0, res.output
        reports[d] = json.loads(res.output)
    return {"wh": wh, "env": env, "build": build, "reports": reports, "ingest": json.loads(ingest.output),
            "prev": json.loads(prev.output)}


def q(wh: Path, sql: str, params=None):
    with duckdb.connect(str(wh), read_only=True) as con:
        return con.execute(sql, params or {}).fetchall()


def totals(built, day=DAY) -> dict:
    (usd,) = built["reports"][day]["totals"]
    return usd


def test_every_row_of_the_export_is_loaded_on_its_own_day(built):
    (line,) = [r for r in built["ingest"]["feeds"] if r["feed"] == "focus"]
    assert (line["rows_in"], line["accepted"], line["quarantined"], line["other_days"]) == (106, 105, 0, 1)
    (prev,) = [r for r in built["prev"]["feeds"] if r["feed"] == "focus"]
    assert (prev["accepted"], prev["other_days"]) == (1, 105)


def test_billed_and_effective_totals_equal_the_invoice(built):
    day, prev = totals(built), totals(built, PREV)
    assert D(day["billed"]) == D("4832.6536") and D(day["effective"]) == D("4832.6536")
    # the correction is priced on its own day: the two days' parts add up to the invoice to the cent
    assert D(prev["billed"]) == D("-12.000000") and prev["correction_rows"] == 1
    assert D(day["billed"]) + D(prev["billed"]) == INVOICE
    assert D(day["effective"]) + D(prev["effective"]) == INVOICE
    for t in (day, prev):
        parts = sum(D(t[k]) for k in ("billed_allocated_cost", "billed_bypass_cost", "billed_idle_cost", "shared",
                                      "cpu_nodes", "storage", "tax", "credit", "unused_commitment", "unreconciled"))
        assert parts == D(t["effective"]) and D(t["difference"]) == 0
        assert D(t["chargeback_total"]) == D(t["effective"]) + D(t["price_book"])


def test_committed_gpus_cost_their_effective_rate_and_the_purchase_is_not_counted_again(built):
    prices = {h: (c, b, p) for h, c, b, p in q(built["wh"], """
        select hostname, node_cost, billed_node_cost, price_per_gpu_hour from int_node_hour_prices where day = $d""",
        {"d": DAY})}
    assert prices[SP] == (D("1464.000000"), D("0.000000"), D("7.625000"))
    assert prices[SPOT] == (D("943.920000"), D("943.920000"), D("4.916250"))
    assert prices[OD] == (D("2359.680000"), D("2359.680000"), D("12.290000"))
    cost = dict(q(built["wh"], "select request_id, allocated_cost from fct_gpu_cost_by_request where day = $d",
                  {"d": DAY}))
    assert cost == {"req-replay-1": D("732.000000"), "req-label-1": D("471.960000"), "req-train-1": D("1179.840000")}
    t = totals(built)
    # the plan's fee is in the billed total, never in shared cost: storage, egress and the CPU node's
    # part its pods did not request are
    assert D(t["commitment_purchases"]) == D("1536.00") and D(t["billed_minus_effective"]) == 0
    assert D(t["shared"]) == D("16.65") + D("19.3536") + D("46.80") - CPU_ALLOCATED - STORAGE_ALLOCATED
    classes = dict(q(built["wh"], "select billing_class, sum(effective_cost) from int_billing_classes where day = $d "
                                  "group by 1", {"d": DAY}))
    assert classes["commitment_purchase"] == 0 and classes["unused_commitment"] == D("72.000000")


def test_unused_commitment_is_its_own_line(built):
    rows = q(built["wh"], "select team, unused_commitment_cost, total_cost from chargeback where day = $d "
                          "and unused_commitment_cost <> 0", {"d": DAY})
    assert rows == [("(unused commitment)", D("72.000000"), D("72.000000"))]
    assert D(totals(built)["unused_commitment"]) == D("72.00")


def test_tax_and_credits_are_distributed_like_shared_cost_in_their_own_columns(built):
    t = totals(built)
    assert D(t["tax"]) == D("310.25") and D(t["credit"]) == D("-400.00")
    ((tax, credit, shared),) = q(built["wh"], """
        select sum(tax_cost), sum(credit_cost), sum(shared_cost) from chargeback
        where day = $d and team not like '(%'""", {"d": DAY})
    assert (tax, credit, shared) == (D("310.250000"), D("-400.000000"), D("82.803600") - CPU_ALLOCATED - STORAGE_ALLOCATED)
    # proportional to allocated cost, like shared cost
    by_team = {team: (a, s, x) for team, a, s, x in q(built["wh"], """
        select team, sum(allocated_cost), sum(shared_cost), sum(tax_cost) from chargeback
        where day = $d and team not like '(%' group by team""", {"d": DAY})}
    alloc = sum(a for a, _, _ in by_team.values())
    for a, s, x in by_team.values():
        assert abs(x - D("310.25") * a / alloc) < D("0.00001")
        assert abs(s - (D("82.8036") - CPU_ALLOCATED - STORAGE_ALLOCATED) * a / alloc) < D("0.00001")


def test_the_correction_reprices_its_own_day(built):
    rows = q(built["wh"], "select day, billing_class, charge_class, effective_cost from int_billing_classes "
                          "where charge_class = 'Correction'")
    assert rows == [(date(2026, 11, 27), "shared", "Correction", D("-12.000000"))]
    cb = q(built["wh"], "select team, shared_cost, total_cost from chargeback where day = $d", {"d": PREV})
    assert cb == [("(unallocated)", D("-12.000000"), D("-12.000000"))]


def test_the_build_passes_every_data_test(built):
    assert built["build"].exit_code == 0, built["build"].output


def test_a_teams_bypass_pods_are_charged_to_it_and_flagged(built):
    rows = q(built["wh"], """
        select team, cost_center, lane, bypass, allocated_gpu_hours, allocated_cost from chargeback
        where day = $d and bypass""", {"d": DAY})
    assert rows == [("perception", "CC-1010", "(bypass)", True, pytest.approx(144.0), D("1191.900000"))]
    ((bypass, hours),) = q(built["wh"], "select bypass_cost, bypass_gpu_hours from platform_cost_per_tenant "
                                         "where day = $d and team = 'perception'", {"d": DAY})
    assert bypass == D("1191.900000") and hours == pytest.approx(144.0)
    t = totals(built)
    assert D(t["bypass"]) == D("1191.900000") and t["bypass_gpu_hours"] == pytest.approx(144.0)
    flagged = {(e["kind"], e["treatment"], e["pod"]): D(e["amount"]) for e in built["reports"][DAY]["exceptions"]
               if e["namespace"] == "team-perception"}
    assert flagged == {("bypass_pod_time", "charged", f"perception-sweep-{i}"): c
                       for i, c in enumerate((D("589.92"), D("235.98"), D("366.00")))}
    ((charged, unowned, teams, pods),) = q(built["wh"], """
        select charged_bypass_gpu_hours, unowned_gpu_hours, bypass_teams, unattributed_pods from scorecard_bypass
        where day = $d""", {"d": DAY})
    assert (charged, unowned, teams, pods) == (pytest.approx(144.0), pytest.approx(6.0), "perception", 4)


def test_only_money_no_owner_can_be_found_for_is_unreconciled(built):
    unrec = [(e["kind"], e["namespace"], e["pod"], D(e["amount"])) for e in built["reports"][DAY]["exceptions"]
             if e["treatment"] == "unreconciled"]
    assert unrec == [("unattributed_pod_time", "research", "notebook-bob-0", D("29.4975"))]
    assert D(totals(built)["unreconciled"]) == D("29.4975")
    ((row,),) = q(built["wh"], "select total_cost from chargeback where day = $d and team = '(unreconciled)'",
                  {"d": DAY})
    assert row == D("29.497500")


def test_allocation_coverage_reaches_100_percent_when_every_namespace_has_an_owner(built, tmp_path):
    import shutil

    (share,) = q(built["wh"], "select owner_share from scorecard_allocation_coverage where day = $d "
                              "and dimension = 'all'", {"d": DAY})[0]
    assert share < 1.0  # the research notebook has no owner
    wh = tmp_path / "warehouse.duckdb"
    shutil.copy(built["wh"], wh)
    variables = model_vars(load_policy(None))
    variables["team_namespaces"] = [*variables["team_namespaces"], "research|research|CC-9000|sf"]
    with duckdb.connect(str(wh)) as con:
        Project.load(default_project_path()).build(con, days=(DAY, DAY), variables=variables)
        (share,) = con.execute("select owner_share from scorecard_allocation_coverage where day = $d "
                               "and dimension = 'all'", {"d": DAY}).fetchone()
        assert share == pytest.approx(1.0)
        ((unrec,),) = con.execute("select count(*) from reconciliation_exceptions where day = $d "
                                  "and treatment = 'unreconciled'", {"d": DAY}).fetchall()
        assert unrec == 0


def test_the_daily_load_reprices_an_earlier_day_a_new_export_corrects(tmp_path):
    """The saved-files path (the Dagster asset): the 27th is loaded and built before the export
    carrying its correction arrives; loading the 28th loads the correction under the 27th, which
    is then stale until rebuilt, and a second load of the 28th changes nothing more."""
    from gpu_platform.finops.feeds.ingest import load_focus_day
    from gpu_platform.finops.sqlmodels.report import staleness

    feeds = tmp_path / "feeds"
    (feeds / "focus").mkdir(parents=True)
    wh = tmp_path / "warehouse.duckdb"
    with duckdb.connect(str(wh)) as con:
        ensure_raw_tables(con)
        first = load_focus_day(con, feeds, date(2026, 11, 27))
        assert (first.accepted, first.repriced) == (0, [])
        Project.load(default_project_path()).build(con, days=(PREV, PREV), variables=model_vars(load_policy(None)))
        assert staleness(con, PREV) is None
        (feeds / "focus" / BILL.name).write_bytes(BILL.read_bytes())
        report = load_focus_day(con, feeds, date(2026, 11, 28))
        assert report.accepted == 105 and report.rows_in == 105  # the 28th's own rows
        assert report.repriced == [(f"focus/{BILL.name}", date(2026, 11, 27), 1)]
        assert "repriced_days" in report.metadata()
        rows = con.execute("select day, ChargeClass, BilledCost from raw_focus_billing where day = $d",
                           {"d": date(2026, 11, 27)}).fetchall()
        assert rows == [(date(2026, 11, 27), "Correction", D("-12"))]
        stale = staleness(con, PREV)
        assert stale is not None and any("ingested" in r for r in stale["reasons"])
        again = load_focus_day(con, feeds, date(2026, 11, 28))
        assert again.repriced == []  # unchanged: not loaded twice
        (n,) = con.execute("select count(*) from raw_focus_billing").fetchone()
        assert n == 106


def test_an_earlier_days_row_delivered_twice_is_loaded_once(tmp_path):
    from gpu_platform.finops.feeds.ingest import load_focus_day

    feeds = tmp_path / "feeds"
    (feeds / "focus").mkdir(parents=True)
    for name in ("a.csv", "b.csv"):  # the same export saved twice
        (feeds / "focus" / name).write_bytes(BILL.read_bytes())
    with duckdb.connect(str(tmp_path / "warehouse.duckdb")) as con:
        ensure_raw_tables(con)
        report = load_focus_day(con, feeds, date(2026, 11, 28))
        assert (report.accepted, report.quarantined) == (105, 105)
        assert report.repriced == [("focus/a.csv", date(2026, 11, 27), 1)]
        rows = con.execute("select source, ChargeClass from raw_focus_billing where day = $d",
                           {"d": date(2026, 11, 27)}).fetchall()
        assert rows == [("focus/a.csv", "Correction")]


def test_cpu_node_cost_is_allocated_by_the_pods_cpu_and_memory_requests(built):
    rows = q(built["wh"], """
        select namespace, pod, team, lane, owner_rule, cpu_core_hours, memory_gib_hours, cost
        from int_cpu_node_cost where day = $d order by pod""", {"d": DAY})
    assert [r[:5] for r in rows] == [
        ("kube-system", "coredns-7db6d8ff4d-9xk2w", None, None, None),
        ("team-perception", "dagster-step-1a2b3c4d5e6f-prep", "perception", "candidate_train", "request"),
        ("team-mapping", "map-tiles-preprocess-0", "mapping", "(namespace)", "namespace")]
    coredns, prep, mapping = rows
    assert prep[5:] == (pytest.approx(4 * 2), pytest.approx(8 * 2), TRAIN_CPU)
    assert mapping[5:] == (pytest.approx(8 * 24), pytest.approx(32 * 24), MAPPING_CPU)
    assert coredns[7] == cpu_node_cost(0.1, 70 / 1024, 24)  # nobody owns kube-system: stays shared
    ((cpu,),) = q(built["wh"], "select sum(cpu_cost) from chargeback where day = $d and team = 'mapping'", {"d": DAY})
    assert cpu == MAPPING_CPU
    assert D(totals(built)["cpu_nodes"]) == CPU_ALLOCATED


def test_a_training_runs_cpu_step_is_in_its_unit_cost_and_holds_no_gpu(built):
    # the CPU pod of req-train-1 is not one of its GPU pods: its GPU cost is the GPU pod's alone
    pods = q(built["wh"], "select pod from int_pods where request_id = 'req-train-1'")
    assert pods == [("dagster-step-1a2b3c4d5e6f-train",)]
    ((gpu, cpu, storage, cost, parts),) = q(built["wh"], """
        select gpu_cost, cpu_cost, storage_cost, cost_per_training_run, cost_parts from unit_cost_training_run
        where request_id = 'req-train-1'""")
    assert (gpu, cpu, storage) == (D("1179.840000"), TRAIN_CPU, TRAIN_VOL + PREP_VOL)
    assert cost == gpu + cpu + storage and parts.startswith("measured: gpu_cost, cpu_cost, storage_cost")
    ((row,),) = q(built["wh"], "select cpu_cost from chargeback where day = $d and team = 'perception' "
                               "and lane = 'candidate_train'", {"d": DAY})
    assert row == TRAIN_CPU


def test_the_table_report_shows_every_home(built):
    res = CliRunner().invoke(main, ["cost", "report", "--day", DAY], env={**built["env"], "COLUMNS": "300"})
    assert res.exit_code == 0, res.output
    for column in ("effective", "bypass", "cpu_nodes", "storage", "unmounted_volumes", "tax", "credit",
                   "unused_commitment", "bypass_cost", "cpu_cost", "storage_cost"):
        assert column in res.output, column


def test_a_raw_table_without_effective_cost_is_priced_at_billed_cost():
    """A raw table another writer filled with the agreed columns only (no EffectiveCost) is priced
    at BilledCost, never at 0."""
    from tests.sqlmodels.finops_scenario import load_scenario

    con = duckdb.connect()
    load_scenario(con)
    con.execute("update raw_focus_billing set EffectiveCost = null")
    Project.load(default_project_path()).build(con, days=("2026-11-28", "2026-11-28"))
    ((cost, billed, effective),) = con.execute("""
        select p.node_cost, r.billed_cost, r.effective_cost from int_node_hour_prices as p, reconciliation as r
        where p.hostname = 'gpu-a'""").fetchall()
    assert cost == D("777.600000") and billed == effective == D("837.600000")


def test_volume_cost_is_allocated_to_the_pods_that_mounted_each_claim(built):
    rows = q(built["wh"], """
        select volume, namespace, pod, team, lane, owner_rule, mounted_hours, hours_share, cost
        from int_volume_cost where day = $d order by volume, pod""", {"d": DAY})
    got = {(r[2]): (r[3], r[4], r[5], r[6], r[7], r[8]) for r in rows}
    assert got == {
        # train-data: 00-02 two pods share each hour, then one pod at a time
        "dagster-step-1a2b3c4d5e6f-train": ("perception", "candidate_train", "request", 12.0, 11.0, TRAIN_VOL),
        "dagster-step-1a2b3c4d5e6f-prep": ("perception", "candidate_train", "request", 2.0, 1.0, PREP_VOL),
        "perception-sweep-0": ("perception", "(namespace)", "namespace", 12.0, 12.0, SWEEP_VOL),
        # label-cache, an in-tree awsElasticBlockStore volume (aws://ZONE/vol-...)
        "dagster-step-2b3c4d5e6f7a-label": ("labeling", "labeler_batch", "request", 24.0, 24.0, LABEL_VOL),
        # the replay pod's generic ephemeral volume: claim <pod>-scratch, unmounted after 12:00
        "dagster-step-3c4d5e6f7a8b-replay": ("safety", "release_eval", "request", 12.0, 12.0, REPLAY_VOL),
        "(unmounted)": (None, None, "unmounted", 0.0, 0.0, UNMOUNTED_VOL),
    }
    # a volume's parts add up to its bill; the NFS volume has none, the CPU node's root disk is no PV
    per_volume = dict(q(built["wh"], "select resource_id, sum(cost) from int_volume_cost where day = $d group by 1",
                        {"d": DAY}))
    assert per_volume == {f"vol-00a1b2c3d4e5f600{n}": D("5.460000") for n in (11, 12, 13)}
    t = totals(built)
    assert D(t["storage"]) == STORAGE_ALLOCATED and D(t["unmounted_volumes"]) == UNMOUNTED_VOL
    by_lane = dict(((team, lane), c) for team, lane, c in q(built["wh"], """
        select team, lane, storage_cost from chargeback where day = $d and storage_cost <> 0""", {"d": DAY}))
    assert by_lane == {("perception", "candidate_train"): TRAIN_VOL + PREP_VOL,
                       ("perception", "(namespace)"): SWEEP_VOL, ("labeling", "labeler_batch"): LABEL_VOL,
                       ("safety", "release_eval"): REPLAY_VOL}
    ((tenant,),) = q(built["wh"], "select storage_cost from platform_cost_per_tenant where day = $d "
                                  "and team = 'perception'", {"d": DAY})
    assert tenant == TRAIN_VOL + PREP_VOL + SWEEP_VOL


def test_the_volumes_feed_counts_every_item(built):
    (line,) = [r for r in built["ingest"]["feeds"] if r["feed"] == "volumes"]
    assert (line["rows_in"], line["accepted"], line["quarantined"]) == (4, 4, 0)
