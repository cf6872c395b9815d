"""A fleet that changes during the day: a node replaced under the same name, a renamed team and a
namespace move, a node-day without telemetry. Routine events: the day builds (exit 0) and its
money reconciles to the invoice to the cent.

The AWS whole-bill day (tests/fixtures/finops/whole-bill/, 2026-11-28), changed as a fleet changes:
- the on-demand p5.48xlarge ip-10-1-0-11 (i-0a1b2c3d4e5f60011, 98.32/h) is replaced at 09:30 by
  i-0a1b2c3d4e5f60099 under the same name: AWS bills the old instance 00:00-09:30 (the 09:00 hour
  as ConsumedQuantity 0.5, 49.16) and the new one 09:30-24:00 (the 09:00 hour 0.5, 49.16, then
  hourly); two `kubectl get nodes` snapshots (06:00: the old providerID; 18:00: the new one with
  creationTimestamp 09:30). Its DCGM samples carry the node name all day. The bill's total is
  unchanged (4,820.6536 invoice);
- the team `perception` was called `vision` and ran in namespace `team-vision`: the ledger still
  records req-train-1 under `vision` and the team's own pods run in `team-vision`; the policy names
  both as `teams.perception.aliases`.
"""

from __future__ import annotations

import csv
import io
import json
import os
from datetime import UTC, datetime, timedelta
from decimal import Decimal as D
from pathlib import Path

import duckdb
import pytest
import yaml
from click.testing import CliRunner

from gpu_platform.cli import main
from gpu_platform.finops.sqlmodels import load_ledger_snapshot
from gpu_platform.finops.sqlmodels.raw import load_scorecard_snapshot

FIX = Path(__file__).parent.parent / "fixtures" / "finops" / "whole-bill"
DAY = "2026-11-28"
D0 = datetime(2026, 11, 28)
OD = "ip-10-1-0-11.us-west-2.compute.internal"
SPOT = "ip-10-1-0-12.us-west-2.compute.internal"
SP = "ip-10-1-0-13.us-west-2.compute.internal"
OLD, NEW = "i-0a1b2c3d4e5f60011", "i-0a1b2c3d4e5f60099"
H100 = "NVIDIA H100 80GB HBM3"
DAY_BILLED = D("4832.6536")  # the 28th's share of the 4,820.6536 invoice (a -12.00 correction is the 27th's)


def replaced_node_bill(path: Path) -> None:
    """The whole-bill export with the on-demand node's instance replaced at 09:30."""
    with (FIX / "focus-aws-2026-11-28.csv").open(newline="") as f:
        reader = csv.DictReader(f)
        fields, rows = list(reader.fieldnames or []), list(reader)
    out_rows = []
    for row in rows:
        if row["ResourceId"] != OLD:
            out_rows.append(row)
            continue
        start = row["ChargePeriodStart"]
        hour = int(start[11:13])
        if hour < 9:
            out_rows.append(row)
        elif hour == 9:
            half = str(D(row["BilledCost"]) / 2)
            for rid in (OLD, NEW):
                out_rows.append({**row, "ResourceId": rid, "BilledCost": half, "EffectiveCost": half, "ListCost": half,
                                 "ContractedCost": half, "ConsumedQuantity": "0.5", "PricingQuantity": "0.5"})
        else:
            out_rows.append({**row, "ResourceId": NEW})
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    w.writeheader()
    w.writerows(out_rows)
    path.write_text(buf.getvalue())


def node_snapshots(home: Path) -> list[Path]:
    """06:00: the old instance; 18:00: the new one (created 09:30) under the same name."""
    doc = json.loads((FIX / "kubectl-get-nodes.json").read_text())
    early = home / "nodes-0600.json"
    early.write_text(json.dumps(doc))
    for item in doc["items"]:
        if item["metadata"]["name"] == OD:
            item["spec"]["providerID"] = f"aws:///us-west-2a/{NEW}"
            item["metadata"]["creationTimestamp"] = "2026-11-28T09:30:00Z"
    late = home / "nodes-1800.json"
    late.write_text(json.dumps(doc))
    for p, h in ((early, 6), (late, 18)):
        t = (D0 + timedelta(hours=h)).replace(tzinfo=UTC).timestamp()
        os.utime(p, (t, t))
    return [early, late]


def renamed_pods(path: Path) -> None:
    """The team's own (bypass) pods still run in its former namespace `team-vision`."""
    doc = json.loads((FIX / "kubectl-get-pods.json").read_text())
    for item in doc["items"]:
        if item["metadata"]["name"].startswith("perception-sweep-"):
            item["metadata"]["namespace"] = "team-vision"
    path.write_text(json.dumps(doc))


REQUESTS = [
    # recorded before the rename: the ledger keeps the team's former name
    dict(request_id="req-train-1", team="vision", cost_center="CC-1010", lane="candidate_train", site="sf",
         workload="training_run", gpu_type="h100", gpu_count=8, state="finished", attempts=1),
    dict(request_id="req-label-1", team="labeling", cost_center="CC-1040", lane="labeler_batch", site="sf",
         workload="label_batch", gpu_type="h100", gpu_count=4, state="finished", attempts=1),
    dict(request_id="req-replay-1", team="safety", cost_center="CC-1050", lane="release_eval", site="muc",
         workload="replay", gpu_type="h100", gpu_count=8, state="finished", attempts=1),
]
LEDGER_PODS = [
    dict(namespace=ns, pod=f"{rid}-a1", request_id=rid, attempt=1, flavor_name="h100-ondemand", hostname=node,
         started_at=D0 + timedelta(hours=s), ended_at=D0 + timedelta(hours=e), exit_status="Succeeded")
    for ns, rid, node, s, e in (("team-perception", "req-train-1", OD, 0, 12),
                                ("team-labeling", "req-label-1", SPOT, 0, 24),
                                ("team-safety", "req-replay-1", SP, 0, 12))
]
OWNERS = [dict(request_id=r["request_id"], owner=f"{r['team']}-lead@example.com") for r in REQUESTS]
# (namespace, pod, node, gpus, start h, end h, util %): the on-demand node reports all day under its
# name, before and after the replacement
SAMPLED = [
    ("team-perception", "dagster-step-1a2b3c4d5e6f-train", OD, range(8), 0, 12, 90),
    ("team-labeling", "dagster-step-2b3c4d5e6f7a-label", SPOT, range(4), 0, 24, 60),
    ("team-safety", "dagster-step-3c4d5e6f7a8b-replay", SP, range(8), 0, 12, 80),
    *[("team-vision", f"perception-sweep-{i}", n, range(4, 8), 12, 24, 50) for i, n in enumerate((OD, SPOT, SP))],
    ("research", "notebook-bob-0", SPOT, [4], 0, 6, 20),
]


def dcgm_history(path: Path, hosts: tuple[str, ...]) -> None:
    con = duckdb.connect()
    con.execute("create table assign (hostname varchar, gpu integer, namespace varchar, pod varchar, s double, "
                "e double, util double)")
    con.executemany("insert into assign values (?, ?, ?, ?, ?, ?, ?)",
                    [(n, g, ns, pod, s, e, u) for ns, pod, n, gpus, s, e, u in SAMPLED for g in gpus])
    con.execute("create table hosts (hostname varchar)")
    con.executemany("insert into hosts values (?)", [(h,) for h in hosts])
    con.execute(f"""
        copy (
            select $d::timestamp + to_seconds(k * 15) as ts, 'DCGM_FI_DEV_GPU_UTIL' as metric,
                   coalesce(a.util, 0.0) as value, h.hostname, g::integer as gpu,
                   'GPU-' || h.hostname || '-' || g as uuid, '{H100}' as model_name,
                   cast(null as varchar) as pci_bus_id, 'nvidia' || g as device,
                   cast(null as varchar) as gpu_instance_profile, cast(null as varchar) as gpu_instance_id,
                   a.namespace, a.pod,
                   case when a.pod is not null then 'main' end as container
            from hosts as h, range(8) as t(g), range(5760) as r(k)
            left join assign as a on a.hostname = h.hostname and a.gpu = g and k * 15 >= a.s * 3600
                and k * 15 < a.e * 3600
        ) to '{path}' (format parquet)""", {"d": D0})


def aliased_policy(path: Path) -> None:
    from gpu_platform.policy import default_policy_path

    doc = yaml.safe_load(Path(default_policy_path()).read_text())
    doc["teams"]["perception"]["aliases"] = ["vision", "team-vision"]
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def daily_snapshots_copied_at_once(home: Path, bill: Path) -> tuple[Path, Path]:
    """A month of saved daily snapshots copied at once (every file's time a week later): the 27th's
    shows the old instance, the 28th's the new one, without creationTimestamp; the bill names the
    instances by id only (ResourceName empty), so only provider identity can join them."""
    early, late = node_snapshots(home)
    doc = json.loads(late.read_text())
    for item in doc["items"]:
        item["metadata"].pop("creationTimestamp", None)
    late.write_text(json.dumps(doc))
    t = datetime(2026, 12, 5, 9, tzinfo=UTC).timestamp()
    for f in (early, late):
        os.utime(f, (t, t))
    with bill.open(newline="") as f:
        reader = csv.DictReader(f)
        fields, rows = list(reader.fieldnames or []), list(reader)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    w.writeheader()
    w.writerows({**r, "ResourceName": ""} if r["ResourceId"] in (OLD, NEW) else r for r in rows)
    bill.write_text(buf.getvalue())
    return early, late


def build_day(home: Path, hosts: tuple[str, ...], copied: bool = False) -> dict:
    policy = home / "policy.yaml"
    aliased_policy(policy)
    env = {"GPU_PLATFORM_HOME": str(home), "GPU_PLATFORM_WAREHOUSE": "", "GPU_PLATFORM_POLICY": str(policy)}
    runner = CliRunner()
    bill, pods, dcgm = home / "focus.csv", home / "pods.json", home / "dcgm.parquet"
    replaced_node_bill(bill)
    renamed_pods(pods)
    dcgm_history(dcgm, hosts)
    early, late = daily_snapshots_copied_at_once(home, bill) if copied else node_snapshots(home)
    ingest = runner.invoke(main, ["feeds", "ingest", "--day", DAY, "--focus", str(bill), "--dcgm", str(dcgm),
                                  "--nodes", str(late if copied else early), "--pods", str(pods),
                                  "--volumes", str(FIX / "kubectl-get-pv.json")], env=env)
    assert ingest.exit_code == 0, ingest.output
    if copied:
        second = runner.invoke(main, ["feeds", "ingest", "--day", "2026-11-27", "--nodes", str(early)], env=env)
    else:
        second = runner.invoke(main, ["feeds", "ingest", "--day", DAY, "--nodes", str(late)], env=env)
    assert second.exit_code == 0, second.output
    wh = home / "warehouse.duckdb"
    with duckdb.connect(str(wh)) as con:
        load_ledger_snapshot(con, REQUESTS, LEDGER_PODS)
        load_scorecard_snapshot(con, [], OWNERS, [])
    build = runner.invoke(main, ["cost", "build", "--day", DAY], env=env)
    report = runner.invoke(main, ["cost", "report", "--day", DAY, "--format", "json"], env=env)
    assert report.exit_code == 0, report.output
    return {"wh": wh, "env": env, "build": build, "report": json.loads(report.stdout), "stderr": report.stderr}


def q(wh: Path, sql: str, params=None):
    with duckdb.connect(str(wh), read_only=True) as con:
        return con.execute(sql, params or {}).fetchall()


@pytest.fixture(scope="module")
def changed(tmp_path_factory):
    return build_day(tmp_path_factory.mktemp("home"), (OD, SPOT, SP))


def test_a_replaced_node_prices_both_instances_and_the_day_builds(changed):
    assert changed["build"].exit_code == 0, changed["build"].output
    by_key = dict(q(changed["wh"], """
        select resource_key, sum(effective_cost) from int_billing_nodes
        where day = $d and hostname = $h group by 1""", {"d": DAY, "h": OD}))
    # the old instance's 9.5 hours and the new one's 14.5 hours, both on the node
    assert by_key == {f"aws:{OLD}": D("934.040000"), f"aws:{NEW}": D("1425.640000")}
    ((hours, cost, price),) = q(changed["wh"], """
        select node_hours, node_cost, price_per_gpu_hour from int_node_hour_prices
        where day = $d and hostname = $h""", {"d": DAY, "h": OD})
    assert (hours, cost, price) == (24.0, D("2359.680000"), D("12.290000"))
    # the samples of both instances (they carry the node's name) attach to the node's 24 h: the
    # training pod's 8 GPUs x 12 h across the replacement and the sweep pod's 4 x 12 h
    ((capacity, allocated, unattributed, idle, idle_cost),) = q(changed["wh"], """
        select capacity_gpu_hours, allocated_gpu_hours, unattributed_gpu_hours, idle_gpu_hours, idle_cost
        from int_idle_capacity where day = $d and hostname = $h""", {"d": DAY, "h": OD})
    assert (capacity, allocated, unattributed, idle) == (192.0, 96.0, 48.0, 48.0)
    assert idle_cost == D("589.92")  # 48 idle GPU-hours at 12.29
    # no instance is left over as a bill without a node
    assert q(changed["wh"], """
        select kind, amount from reconciliation_exceptions
        where day = $d and kind in ('bill_without_telemetry', 'gpu_instance_without_node')""", {"d": DAY}) == []


def test_the_changed_day_reconciles_to_the_invoice_to_the_cent(changed):
    (usd,) = changed["report"]["totals"]
    assert D(usd["billed"]) == DAY_BILLED and D(usd["effective"]) == DAY_BILLED
    # only the notebook in `research`, a namespace no team owns (1 GPU x 6 h x 4.91625), is unreconciled
    assert D(usd["unreconciled"]) == D("29.4975") and D(usd["difference"]) == 0
    parts = sum(D(usd[k]) for k in ("billed_allocated_cost", "billed_bypass_cost", "billed_idle_cost", "shared",
                                    "cpu_nodes", "storage", "tax", "credit", "unused_commitment", "unreconciled"))
    assert parts == D(usd["effective"])
    assert not changed["report"].get("flags")


def test_the_renamed_teams_history_stays_with_the_team(changed):
    teams = dict(q(changed["wh"], """
        select team, sum(allocated_cost) from platform_cost_per_tenant
        where day = $d group by team""", {"d": DAY}))
    assert "vision" not in teams and "team-vision" not in teams
    # req-train-1 (recorded under `vision`): 8 GPUs x 12 h on the on-demand node at 12.29; the sweep
    # pods in `team-vision` (bypass): 4 GPUs x 12 h on each GPU node (12.29, 4.91625, 7.625)
    assert teams["perception"] == D("1179.84") + D(48) * (D("12.29") + D("4.91625") + D("7.625"))
    (bypass,) = q(changed["wh"], """
        select sum(bypass_gpu_hours) from platform_cost_per_tenant where day = $d and team = 'perception'""",
        {"d": DAY})[0]
    assert bypass == 144.0


@pytest.mark.parametrize(("alias", "message"), [
    ("planning", "'planning' is team planning's name"),
    ("team-planning", "'team-planning' is team planning's namespace"),
    ("roads", "'roads' is already an alias of team perception"),
])
def test_an_alias_names_one_team_only(tmp_path, alias, message):
    from gpu_platform.policy import load_policy
    from gpu_platform.policy.loading import default_policy_path

    doc = yaml.safe_load(Path(default_policy_path()).read_text())
    doc["teams"]["perception"]["aliases"] = ["vision", "roads"]
    doc["teams"]["mapping"]["aliases"] = [alias]
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(Exception) as err:
        load_policy(path)
    assert message in str(err.value)
    doc["teams"]["mapping"]["aliases"] = ["maps-old", "maps-old"]  # listed twice: one namespace row
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    from gpu_platform.observe.scorecards import model_vars

    variables = model_vars(load_policy(path))
    assert sorted(variables["team_aliases"]) == ["maps-old|mapping", "roads|perception", "vision|perception"]
    assert "perception|vision|CC-1010|" in variables["team_namespaces"]
    assert variables["team_namespaces"].count("mapping|maps-old|CC-1030|") == 1


@pytest.fixture(scope="module")
def without_telemetry(tmp_path_factory):
    """The same day with one node-day without telemetry: the committed node reported no samples."""
    return build_day(tmp_path_factory.mktemp("home"), (OD, SPOT))


def test_a_node_day_without_telemetry_builds_the_day_flagged_everywhere(without_telemetry):
    built = without_telemetry
    assert built["build"].exit_code == 0, built["build"].output
    assert "WARN" in built["build"].output
    (usd,) = built["report"]["totals"]
    assert D(usd["billed"]) == DAY_BILLED and D(usd["difference"]) == 0
    # the committed node's unallocated 12 h x 4 GPUs x 7.625 is unreconciled, plus the notebook
    assert D(usd["unreconciled"]) == D("366.000000") + D("29.4975")
    (flag,) = built["report"]["flags"]
    assert flag["flag"] == "unreconciled_over_threshold" and "the day is built" in flag["message"]
    assert "unreconciled is over the limit" in built["stderr"]
    # partition metadata (what the reconciliation / chargeback materializations carry)
    from gpu_platform.finops.sqlmodels.report import model_metrics

    with duckdb.connect(str(built["wh"]), read_only=True) as con:
        meta = model_metrics(con, "reconciliation", DAY)
        signals = con.execute("""
            select subject, value, threshold, fired, severity, action from capacity_signals
            where day = $d and signal = 'cost_day_over_unreconciled_threshold'""", {"d": DAY}).fetchall()
    assert meta["over_unreconciled_threshold"] == 1.0 and "unreconciled" in meta["flags_md"]
    ((subject, value, threshold, fired, severity, action),) = signals
    assert (subject, fired, severity) == ("USD", True, "WARN")
    assert value == pytest.approx(395.4975) and threshold == pytest.approx(48.326536)
    assert f"Day {DAY}: 395.50 USD" in action and f"cost report --day {DAY}" in action


def test_the_release_cost_check_names_the_flagged_day(without_telemetry, changed):
    from assets.workloads import priced_costs
    from gpu_platform.lineage.graph import LineageNode, check_cost_attributed
    from resources.warehouse import Warehouse

    flagged = priced_costs(Warehouse(path=str(without_telemetry["wh"])), ["req-train-1"])
    assert list(flagged.flagged_days) == [DAY] and "unreconciled is over the limit" in flagged.flagged_days[DAY]
    outcome = check_cost_attributed(LineageNode("req-release", "released_model", None, None), flagged.costs,
                                    flagged.priced_through, flagged_days=flagged.flagged_days)
    # a flagged day is built, not blocked: the check passes and names it
    assert outcome.passed and outcome.flagged == (f"{DAY}: {flagged.flagged_days[DAY]}",)
    assert f"priced on flagged day(s) (1): {DAY}: " in outcome.description
    clean = priced_costs(Warehouse(path=str(changed["wh"])), ["req-train-1"])
    assert clean.flagged_days == {} and clean.costs == {"req-train-1": pytest.approx(1179.84)}


def test_a_warehouse_from_before_creation_times_gets_the_column_and_builds():
    from gpu_platform.finops.feeds.load import table_ddl
    from gpu_platform.finops.sqlmodels import Project, default_project_path, ensure_raw_tables

    con = duckdb.connect()
    con.execute(table_ddl("raw_nodes").replace(', "created_at" TIMESTAMP', ""))
    con.execute("insert into raw_nodes (snapshot_at, node, provider_key, gpu_capacity, source, source_row, day) "
                "values ($t, $n, $k, 8, 'old', 1, $d)", {"t": D0, "n": OD, "k": f"aws:{OLD}", "d": DAY})
    ensure_raw_tables(con)
    Project.load(default_project_path()).build(con, days=(DAY, DAY), select=["stg_nodes"])
    ((instances,),) = con.execute("select instances from stg_nodes where node = $n", {"n": OD}).fetchall()
    assert [(i["provider_key"], i["created_at"]) for i in instances] == [(f"aws:{OLD}", None)]


def test_daily_snapshots_copied_at_once_still_price_both_instances(tmp_path):
    built = build_day(tmp_path, (OD, SPOT, SP), copied=True)
    assert built["build"].exit_code == 0, built["build"].output
    by_key = dict(q(built["wh"], """
        select resource_key, sum(effective_cost) from int_billing_nodes
        where day = $d and hostname = $h and match_rule = 'provider_id' group by 1""", {"d": DAY, "h": OD}))
    assert by_key == {f"aws:{OLD}": D("934.040000"), f"aws:{NEW}": D("1425.640000")}
    (usd,) = built["report"]["totals"]
    assert D(usd["billed"]) == DAY_BILLED and D(usd["unreconciled"]) == D("29.4975") and D(usd["difference"]) == 0
    assert not built["report"].get("flags")
