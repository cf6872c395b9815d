"""The gate and gangs: in front of a cluster (k8s executor) it places GPUs on the policy's nodes
and launches a gang once whole nodes are free; on one machine (local executor) it counts quota
only, as before."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import yaml

from gpu_platform.gate.tick import build_state, plan_tick
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


def test_cluster_gate_places_on_nodes_and_launches_the_gang_on_whole_nodes(tmp_path, policy) -> None:
    ledger, rid = _ledger(tmp_path, policy)
    now = datetime.now(UTC)
    state = build_state(policy, ledger.states(), now, node_model=True)
    assert {n.flavor for n in state.nodes} == {"h100-ondemand", "l4-inference", "a100-spot"}
    (wl,) = state.pending
    assert wl.pods == 2
    # two whole nodes are free: the gang is launched (its step creates the Indexed Job)
    plan = plan_tick(policy, ledger.states(), now, node_model=True)
    assert [x.request_id for x in plan.launches] == [rid]
    assert all(w.reason_code != "GangNotLaunchable" for w in plan.waits)
