"""Cost per MIG slice and per shared replica, hand-computed to the cent (day 2026-11-28).

Node `h100-mig-0`: one NVIDIA H100 80GB HBM3 cut as the default policy's `h100-mig` flavor,
`2 x 2g.20gb + 3 x 1g.10gb` (GPU instances 5, 6: 2g.20gb; 11, 12, 13: 1g.10gb), billed 24 h at
12.25 USD/h = 294.00 USD. Node `l4-shared-0`: one NVIDIA L4 shared 4 ways (`l4-shared`: 4
replicas of 5 GiB), billed 24 h at 0.80 USD/h = 19.20 USD. Shared: the EKS control plane, 2.40 USD.
Billed total 315.60 USD.

request  team        resource                 window   share  GPU-h           cost
RM1      labeling    1 x nvidia.com/mig-2g.20gb 02-08  2/7    6 x 2/7 = 12/7  12/7 x 12.25 = 21.00
RM2      labeling    1 x nvidia.com/mig-1g.10gb 10-14  1/7    4 x 1/7 = 4/7   4/7 x 12.25  =  7.00
RS1      perception  1 x nvidia.com/gpu.shared  00-12  1/4    12 x 1/4 = 3    3 x 0.80     =  2.40
RS2      perception  1 x nvidia.com/gpu.shared  06-24  1/4    18 x 1/4 = 4.5  4.5 x 0.80   =  3.60

Idle: H100 294.00 - 21.00 - 7.00 = 266.00 (slices 6, 12, 13 never held; 5 and 11 outside their
windows); L4 19.20 - 2.40 - 3.60 = 13.20 (two of four replicas, and RS1's after noon). Idle 279.20.
Used: RM1's slice is 60 % busy (3.6 slice-hours = 3.6 x 2/7 GPU-h), RM2's 35 % (1.4 x 1/7); the L4
is 40 % busy (DCGM_FI_DEV_GPU_UTIL 40, device level, copied to each pod's series by
dcgm-exporter's --kubernetes-virtual-gpus): RS1 12 x 0.4 x 1/4 = 1.2, RS2 18 x 0.4 x 1/4 = 1.8.
Chargeback (proportional): labeling 28.00 + 279.20 x 28/34 + 2.40 x 28/34 = 259.91;
perception 6.00 + 279.20 x 6/34 + 2.40 x 6/34 = 55.69; together 315.60.

The samples are dcgm-exporter text as it prints MIG instances (`GPU_I_PROFILE`, `GPU_I_ID` after
`modelName`, pod labels of the pod holding the instance, empty for a free one), one line per 15 s
with a millisecond timestamp (a history export); the ledger is a real SQLite ledger snapshot, so
each pod's share comes from the policy's flavor.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal as D
from fractions import Fraction as F
from pathlib import Path

import duckdb
import pytest

from gpu_platform.finops.feeds.dcgm import parse_text
from gpu_platform.finops.feeds.load import load_batch
from gpu_platform.finops.snapshot import ledger_snapshot
from gpu_platform.finops.sqlmodels import (
    Project,
    default_project_path,
    ensure_raw_tables,
    load_ledger_snapshot,
)
from gpu_platform.requests.ledger import Ledger
from gpu_platform.requests.model import validate_request_file
from tests.conftest import EXAMPLES
from tests.sqlmodels.finops_scenario import insert_billing

DAY = "2026-11-28"
D0 = datetime(2026, 11, 28)
CENT = D("0.01")
H100_NODE, L4_NODE = "h100-mig-0", "l4-shared-0"
H100_UUID = "GPU-7d1e2c3b-4a59-6e7f-8091-a2b3c4d5e6f7"
L4_UUID = "GPU-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9"
# GPU instance id -> profile (the h100-mig layout)
SLICES = {"5": "2g.20gb", "6": "2g.20gb", "11": "1g.10gb", "12": "1g.10gb", "13": "1g.10gb"}


def h(x: float) -> datetime:
    return D0 + timedelta(hours=x)


def _ms(t: datetime) -> int:
    return int((t - datetime(1970, 1, 1)).total_seconds() * 1000)


def _dcgm_text(pods: dict[str, tuple[str, str]]) -> str:
    """pods: request id -> (namespace, pod). Every 15 s of the day."""
    lines = ["# HELP DCGM_FI_PROF_GR_ENGINE_ACTIVE Ratio of time the graphics engine is active.",
             "# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge"]
    held = {"5": ("RM1", 2, 8, 0.6), "11": ("RM2", 10, 14, 0.35)}
    for k in range(5760):
        t = D0 + timedelta(seconds=15 * k)
        hour = k * 15 / 3600
        for gi, profile in SLICES.items():
            ns = pod = container = ""
            value = 0
            if gi in held and held[gi][1] <= hour < held[gi][2]:
                (ns, pod), container, value = pods[held[gi][0]], "main", held[gi][3]
            lines.append(
                f'DCGM_FI_PROF_GR_ENGINE_ACTIVE{{gpu="0",UUID="{H100_UUID}",pci_bus_id="00000000:18:00.0",'
                f'device="nvidia0",modelName="NVIDIA H100 80GB HBM3",GPU_I_PROFILE="{profile}",GPU_I_ID="{gi}",'
                f'Hostname="{H100_NODE}",DCGM_FI_DRIVER_VERSION="550.54.15",container="{container}",'
                f'namespace="{ns}",pod="{pod}"}} {value} {_ms(t)}')
    lines += ["# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).", "# TYPE DCGM_FI_DEV_GPU_UTIL gauge"]
    for k in range(5760):
        t = D0 + timedelta(seconds=15 * k)
        hour = k * 15 / 3600
        series = [("RS1", "0")] if hour < 6 else [("RS1", "0"), ("RS2", "1")] if hour < 12 else [("RS2", "1")]
        for rid, vgpu in series:
            ns, pod = pods[rid]
            lines.append(
                f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="{L4_UUID}",pci_bus_id="00000000:00:1E.0",device="nvidia0",'
                f'modelName="NVIDIA L4",Hostname="{L4_NODE}",DCGM_FI_DRIVER_VERSION="550.54.15",container="main",'
                f'namespace="{ns}",pod="{pod}",vgpu="{vgpu}"}} 40 {_ms(t)}')
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def built(tmp_path_factory, policy):
    tmp = tmp_path_factory.mktemp("fractional")
    ledger = Ledger(f"sqlite:///{tmp / 'ledger.db'}")
    mig = validate_request_file(EXAMPLES / "fractional" / "labeler_mig_slice.yaml", policy)
    shared = validate_request_file(EXAMPLES / "fractional" / "research_shared_replica.yaml", policy)
    plan = [  # request id, request, resource, flavor, node, device, start h, end h
        ("RM1", mig, "nvidia.com/mig-2g.20gb", "h100-mig", H100_NODE, "MIG-5d6c7b8a-0001", 2, 8),
        ("RM2", mig, "nvidia.com/mig-1g.10gb", "h100-mig", H100_NODE, "MIG-5d6c7b8a-0011", 10, 14),
        ("RS1", shared, "nvidia.com/gpu.shared", "l4-shared", L4_NODE, None, 0, 12),
        ("RS2", shared, "nvidia.com/gpu.shared", "l4-shared", L4_NODE, None, 6, 24),
    ]
    for rid, req, resource, flavor, node, device, s, e in plan:
        ledger.submit(req.model_copy(update={"request_id": rid, "gpu_resource": resource, "gpu_count": 1}),
                      at=h(s).replace(tzinfo=UTC))
        details = {"attempt": 1, "hostname": node} | ({"gpu_uuids": [device]} if device else {})
        ledger.record(rid, "admitted", flavor=flavor, details=details, at=h(s).replace(tzinfo=UTC))
        if e < 24:
            ledger.record(rid, "finished", "run succeeded", at=h(e).replace(tzinfo=UTC))
    requests, pods = ledger_snapshot(ledger, policy)
    con = duckdb.connect(str(tmp / "warehouse.duckdb"))
    ensure_raw_tables(con)
    load_ledger_snapshot(con, requests, pods)
    names = {p["request_id"]: (p["namespace"], p["pod"]) for p in pods}
    batch = parse_text(_dcgm_text(names), source="dcgm/2026-11-28/history.prom", scraped_at=h(23.99).replace(tzinfo=UTC))
    assert batch.quarantined == 0
    load_batch(con, "dcgm", batch, source="dcgm/2026-11-28/history.prom", day=D0.date())
    insert_billing(con, [
        (294.00, "USD", D0, h(24), H100_NODE, "Amazon EC2", 1),
        (19.20, "USD", D0, h(24), L4_NODE, "Amazon EC2", 2),
        (2.40, "USD", D0, h(24), "eks-cluster", "Amazon EKS", 3),
    ])
    project = Project.load(default_project_path())
    project.build(con, day=DAY)
    failed = {f"{t.model}.{t.test_name}": t.failures for t in project.run_tests(con, DAY) if t.failures}
    yield con, pods, failed
    con.close()


def q(con, sql: str):
    return con.execute(sql, {"d": DAY}).fetchall()


def test_every_data_test_passes(built):
    assert built[2] == {}


def test_snapshot_records_the_resource_and_the_flavors_share(built):
    shares = {p["request_id"]: (p["gpu_resource"], p["gpu_share"], p["gpu_uuids"]) for p in built[1]}
    assert shares["RM1"] == ("nvidia.com/mig-2g.20gb", pytest.approx(2 / 7), ["MIG-5d6c7b8a-0001"])
    assert shares["RM2"][:2] == ("nvidia.com/mig-1g.10gb", pytest.approx(1 / 7))
    assert shares["RS1"][:2] == ("nvidia.com/gpu.shared", 0.25)


def test_each_slice_and_replica_is_priced_by_its_share(built):
    con = built[0]
    rows = {r[0]: r[1:] for r in q(con, """
        select request_id, gpu_units, allocated_gpu_hours, used_gpu_hours, allocated_cost
        from int_pod_gpu_hours where day = $d""")}
    expect = {  # units, allocated GPU-h, used GPU-h, cost
        "RM1": (1, F(12, 7), F(36, 10) * F(2, 7), D("21.00")),
        "RM2": (1, F(4, 7), F(14, 10) * F(1, 7), D("7.00")),
        "RS1": (1, F(3), F(12) * F(4, 10) / 4, D("2.40")),
        "RS2": (1, F(9, 2), F(18) * F(4, 10) / 4, D("3.60")),
    }
    for rid, (units, alloc, used, cost) in expect.items():
        got = rows[rid]
        assert got[0] == units, rid
        assert got[1] == pytest.approx(float(alloc)), rid
        assert got[2] == pytest.approx(float(used)), rid
        assert got[3].quantize(CENT) == cost, rid
    # the request-level fact and unit costs follow
    fct = dict(q(con, "select request_id, allocated_cost from fct_gpu_cost_by_request where day = $d"))
    assert {k: v.quantize(CENT) for k, v in fct.items()} == {k: v[3] for k, v in expect.items()}
    lifetime = {r: (c.quantize(CENT), h) for r, c, h in con.execute(
        "select request_id, cost, allocated_gpu_hours from int_request_cost").fetchall()}
    assert {r: c for r, (c, _) in lifetime.items()} == {k: v[3] for k, v in expect.items()}
    assert lifetime["RM1"][1] == pytest.approx(12 / 7)


def test_busy_time_per_slice_from_gpu_instance_labels(built):
    con = built[0]
    rows = q(con, """select gpu_instance_id, gpu_instance_profile, pod is not null, sum(samples), sum(busy_samples)
                     from int_gpu_busy where day = $d and hostname = 'h100-mig-0' group by all order by 1, 3""")
    assert {r[0]: r[1] for r in rows} == SLICES
    held = {(r[0]): (r[3], r[4]) for r in rows if r[2]}
    assert held == {"5": (6 * 240, D("0.6") * 6 * 240), "11": (4 * 240, D("0.35") * 4 * 240)}


def test_idle_slices_and_replicas_are_idle_cost(built):
    con = built[0]
    idle = {r[0]: r[1:] for r in q(con, """
        select hostname, capacity_gpu_hours, allocated_gpu_hours, idle_gpu_hours, node_cost, allocated_cost, idle_cost
        from int_idle_capacity where day = $d""")}
    cap, alloc, idle_h, node, alloc_cost, idle_cost = idle[H100_NODE]
    assert (cap, node, alloc_cost, idle_cost) == (24, D("294.00"), D("28.00"), D("266.00"))
    assert alloc == pytest.approx(16 / 7) and idle_h == pytest.approx(24 - 16 / 7)
    cap, alloc, idle_h, node, alloc_cost, idle_cost = idle[L4_NODE]
    assert (node, alloc_cost, idle_cost) == (D("19.20"), D("6.00"), D("13.20"))
    assert alloc == pytest.approx(7.5) and idle_h == pytest.approx(16.5)


def test_chargeback_and_reconciliation_to_the_cent(built):
    con = built[0]
    ((billed, alloc, idle, shared, unrec, total, teams, diff),) = q(con, """
        select billed_cost, allocated_cost, idle_cost, shared_cost, unreconciled_cost, chargeback_total,
               charged_to_teams, difference from reconciliation where day = $d""")
    assert (billed, alloc, idle, shared, unrec) == (D("315.60"), D("34.00"), D("279.20"), D("2.40"), 0)
    assert total == teams == billed and diff == 0
    charged = {team: cost.quantize(CENT) for team, cost in q(con, """
        select team, sum(total_cost) from chargeback where day = $d group by team""")}
    labeling = D("28.00") + D("279.20") * 28 / 34 + D("2.40") * 28 / 34
    perception = D("6.00") + D("279.20") * 6 / 34 + D("2.40") * 6 / 34
    assert charged == {"labeling": labeling.quantize(CENT), "perception": perception.quantize(CENT)}
    assert charged == {"labeling": D("259.91"), "perception": D("55.69")}
    assert q(con, "select count(*) from reconciliation_exceptions where day = $d and treatment = 'unreconciled'") == [(0,)]


def test_fixture_lines_keep_dcgm_exporters_label_layout():
    """The MIG fixture of the feed tests and these lines put the MIG labels in the same place."""
    fixture = (Path(__file__).parent.parent / "fixtures" / "feeds" / "dcgm-variant-mig.txt").read_text()
    ours = _dcgm_text({r: ("ns", "p") for r in ("RM1", "RM2", "RS1", "RS2")}).splitlines()[2]
    key_order = [kv.split("=")[0] for kv in fixture.splitlines()[1].split("{")[1].split("}")[0].split(",")]
    assert [kv.split("=")[0] for kv in ours.split("{")[1].split("}")[0].split(",")] == key_order
