"""The cost of a multi-node training run counts every pod of its gang, to the cent (day 2026-11-28).

Request `req-gang-2x8`: `examples/requests/candidate_train.yaml` asking for 16 H100s, validated by the
packaged policy as 2 x 8 (one pod per 8-GPU node), admitted on Kubernetes 02:00, finished 08:00. The
ledger knows one placeholder pod per attempt (no host); the cluster ran the Indexed Job the gang
renderer writes (`gang_job_config_for`): two pods, completion indexes 0 and 1, each asking for 8
GPUs, on two nodes, listed as `kubectl get pods -A -o json` prints them, carrying the pod labels and
annotations of the rendered template (the request id among them).

node   GPUs                     billed 24 h          pod (index)   window  GPU-h         cost
gpu-a  8 x NVIDIA H100 80GB     768.00 + 9.60 EBS    <job>-0-...   02-08   6 x 8 = 48    48 x 4.05 = 194.40
gpu-c  8 x NVIDIA H100 80GB     768.00 + 9.60 EBS    <job>-1-...   02-08   6 x 8 = 48    48 x 4.05 = 194.40
                                                                           96            388.80

Price per GPU-hour: 777.60 / (8 x 24) = 4.05 on each node. A figure from one pod only would be 48
GPU-hours and 194.40; one from the placeholder beside the cluster's pods, 16 GPUs x 6 h more.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal as D

import duckdb
import pytest

from gpu_platform.cluster.jobs import gang_job_config_for
from gpu_platform.cluster.names import gang_job_name
from gpu_platform.finops.feeds.k8s_inventory import parse_pods
from gpu_platform.finops.feeds.load import load_batch
from gpu_platform.finops.snapshot import ledger_snapshot
from gpu_platform.finops.sqlmodels import (
    Project,
    default_project_path,
    ensure_raw_tables,
    load_ledger_snapshot,
)
from gpu_platform.requests.ledger import Ledger
from gpu_platform.requests.model import validate_request, validate_request_file
from tests.conftest import EXAMPLES
from tests.sqlmodels.finops_scenario import H100, insert_billing, insert_samples

DAY = "2026-11-28"
D0 = datetime(2026, 11, 28)
RID = "req-gang-2x8"
NODES = ("gpu-a", "gpu-c")
CENT = D("0.01")


def h(x: float) -> datetime:
    return D0 + timedelta(hours=x)


def _z(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _pods(request, policy) -> tuple[dict, list[str]]:
    """The gang's two pods as the Job controller creates them from the rendered template."""
    cfg = gang_job_config_for(request, "h100-ondemand", policy, attempt=1)
    meta = cfg["pod_template_spec_metadata"]
    job = gang_job_name(RID, 1)
    namespace = policy.teams[request.team].namespace
    items, names = [], []
    for index, (node, suffix) in enumerate(zip(NODES, ("x7k2p", "q9w8e"), strict=True)):
        name = f"{job}-{index}-{suffix}"
        names.append(name)
        items.append({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": f"5c3e0a91-d2b4-4f6e-9a1b-00000000000{index}",
                "labels": {**meta["labels"], "job-name": job, "batch.kubernetes.io/job-completion-index": str(index)},
                "annotations": {**meta["annotations"], "batch.kubernetes.io/job-completion-index": str(index)},
            },
            "spec": {
                "nodeName": node,
                "subdomain": job,
                "containers": [{"name": "main", "image": request.image,
                                "resources": {"limits": {"nvidia.com/gpu": "8"}, "requests": {"nvidia.com/gpu": "8"}}}],
            },
            "status": {
                "phase": "Succeeded",
                "startTime": _z(h(2)),
                "containerStatuses": [{"name": "main", "state": {"terminated": {
                    "exitCode": 0, "reason": "Completed", "startedAt": _z(h(2) + timedelta(seconds=9)),
                    "finishedAt": _z(h(8))}}}],
            },
        })
    return {"apiVersion": "v1", "kind": "List", "items": items}, names


@pytest.fixture(scope="module")
def built(tmp_path_factory, policy):
    tmp = tmp_path_factory.mktemp("gang")
    raw = validate_request_file(EXAMPLES / "candidate_train.yaml", policy).model_dump(exclude_none=True)
    request = validate_request({**raw, "gpu_count": 16, "request_id": RID}, policy)
    assert (request.nodes, request.gpus_per_node) == (2, 8)
    ledger = Ledger(f"sqlite:///{tmp / 'ledger.db'}")
    ledger.submit(request, at=h(2).replace(tzinfo=UTC))
    ledger.record(RID, "admitted", "QuotaReserved on h100-ondemand", flavor="h100-ondemand", details={"attempt": 1},
                  at=h(2).replace(tzinfo=UTC))
    ledger.record(RID, "finished", "run succeeded", at=h(8).replace(tzinfo=UTC))
    requests, ledger_pods = ledger_snapshot(ledger, policy)
    con = duckdb.connect(str(tmp / "warehouse.duckdb"))
    ensure_raw_tables(con)
    load_ledger_snapshot(con, requests, ledger_pods)
    pods, names = _pods(request, policy)
    batch = parse_pods(json.dumps(pods), source="pods/2026-11-28/kubectl-get-pods.json",
                       snapshot_at=h(23.5).replace(tzinfo=UTC))
    assert batch.quarantined == 0
    load_batch(con, "pods", batch, source="pods/2026-11-28/kubectl-get-pods.json", day=D0.date())
    namespace = policy.teams[request.team].namespace
    insert_samples(con, nodes=dict.fromkeys(NODES, H100), engine_nodes=set(NODES),
                   pods=[(namespace, name, RID, 1, "h100-ondemand", node, list(range(8)), 2, 8, "Succeeded", 0.9, 95)
                         for name, node in zip(names, NODES, strict=True)])
    insert_billing(con, [row for n, node in enumerate(NODES) for row in (
        (768.00, "USD", D0, h(24), node, "Amazon EC2", 2 * n + 1),
        (9.60, "USD", D0, h(24), node, "Amazon EBS", 2 * n + 2))])
    project = Project.load(default_project_path())
    project.build(con, day=DAY)
    # every data test of the day, the models a training run's cost goes through among them (a
    # Kubernetes attempt's placeholder pod has no host: stg_pod_requests allows it)
    cost_path = ["int_pods", "int_pod_gpu_hours", "fct_gpu_cost_by_request", "int_request_cost",
                 "unit_cost_training_run", "int_idle_capacity", "stg_pod_requests"]
    tests = project.run_tests(con, DAY)
    assert set(cost_path) <= {t.model for t in tests}
    failed = {f"{t.model}.{t.test_name}": t.failures for t in tests if t.failures}
    yield con, names, ledger_pods, failed
    con.close()


def test_every_data_test_of_the_cost_path_passes(built):
    assert built[3] == {}


def test_the_ledger_knows_one_placeholder_and_the_cluster_both_pods(built):
    con, names, ledger_pods, _ = built
    assert [(p["request_id"], p["hostname"]) for p in ledger_pods] == [(RID, None)]
    pods = con.execute("select pod, hostname, assigned_gpus, origin from int_pods where request_id = $r order by pod",
                       {"r": RID}).fetchall()
    assert pods == [(names[0], "gpu-a", 8, "kubernetes"), (names[1], "gpu-c", 8, "kubernetes")]


def test_each_pod_is_priced_on_its_own_node(built):
    con, names, _, _ = built
    rows = con.execute("""select pod, hostname, gpu_units, allocated_gpu_hours, used_gpu_hours, allocated_cost
                          from int_pod_gpu_hours where request_id = $r and day = $d order by pod""",
                       {"r": RID, "d": DAY}).fetchall()
    assert [(r[0], r[1], r[2]) for r in rows] == [(names[0], "gpu-a", 8), (names[1], "gpu-c", 8)]
    for _, _, _, alloc, used, cost in rows:
        assert alloc == pytest.approx(48.0) and used == pytest.approx(48 * 0.9)
        assert cost.quantize(CENT) == D("194.40")


def test_the_training_runs_cost_is_both_nodes_gpu_hours(built):
    con = built[0]
    ((alloc, used, gpu_cost, cost, attempts),) = con.execute(
        "select allocated_gpu_hours, used_gpu_hours, gpu_cost, cost_per_training_run, attempts "
        "from unit_cost_training_run where request_id = $r", {"r": RID}).fetchall()
    assert alloc == pytest.approx(96.0) and used == pytest.approx(96 * 0.9)
    assert gpu_cost.quantize(CENT) == cost.quantize(CENT) == D("388.80")
    assert attempts == 1  # two pods, one attempt
    # both nodes' held GPU-hours are the run's, and nothing of them is idle in that window
    held = dict(con.execute("select hostname, allocated_gpu_hours from int_idle_capacity where day = $d",
                            {"d": DAY}).fetchall())
    assert held == {"gpu-a": pytest.approx(48.0), "gpu-c": pytest.approx(48.0)}
