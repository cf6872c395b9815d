"""The gate and gangs: in front of a cluster (k8s executor) it places GPUs on the policy's nodes
and holds multi-node requests it cannot launch yet; on one machine (local executor) it counts
quota only, as before."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import yaml

from gpu_platform.gate.tick import GANG_NOT_LAUNCHABLE, build_state, plan_tick
from gpu_platform.requests.ledger import Ledger
from gpu_platform.requests.model import validate_request

ROOT = Path(__file__).resolve().parents[2]
GANG = ROOT / "examples" / "distributed" / "candidate_train_2x8.yaml"


def _ledger(tmp_path, policy) -> tuple[Ledger, str]:
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    rid = ledger.submit(validate_request(yaml.safe_load(GANG.read_text()), policy))
    return ledger, rid


def test_recorded_gang_keeps_its_shape_in_the_ledger(tmp_path, policy) -> None:
    ledger, rid = _ledger(tmp_path, policy)
    (state,) = ledger.states()
    assert state.request_id == rid and (state.request.nodes, state.request.gpus_per_node) == (2, 8)


def test_local_gate_admits_the_gang_on_quota(tmp_path, policy) -> None:
    ledger, rid = _ledger(tmp_path, policy)
    now = datetime.now(UTC)
    assert build_state(policy, ledger.states(), now).nodes == ()
    plan = plan_tick(policy, ledger.states(), now)
    assert [x.request_id for x in plan.launches] == [rid]


def test_cluster_gate_places_on_nodes_and_holds_a_gang_it_cannot_launch(tmp_path, policy) -> None:
    ledger, rid = _ledger(tmp_path, policy)
    now = datetime.now(UTC)
    state = build_state(policy, ledger.states(), now, node_model=True)
    assert {n.flavor for n in state.nodes} == {"h100-ondemand", "l4-inference", "a100-spot"}
    (wl,) = state.pending
    assert wl.pods == 2
    # node model on, launching on: two whole nodes are free, so it is admitted
    plan = plan_tick(policy, ledger.states(), now, node_model=True)
    assert [x.request_id for x in plan.launches] == [rid]
    # the k8s gate cannot launch a gang yet: it waits without taking quota
    plan = plan_tick(policy, ledger.states(), now, node_model=True, launch_gangs=False)
    assert plan.launches == []
    (wait,) = plan.waits
    assert wait.reason_code == GANG_NOT_LAUNCHABLE and "2 nodes x 8 GPUs" in wait.message
