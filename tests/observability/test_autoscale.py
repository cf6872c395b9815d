"""`gpu-platform autoscale plan` and the policy's `autoscaling` block."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta

import pytest
import yaml
from click.testing import CliRunner

from gpu_platform.cli import main
from gpu_platform.observe.autoscale import plan_pools
from gpu_platform.observe.queueview.demand import Demand, LaneDemand
from gpu_platform.policy import PolicyError, default_policy_path, parse_policy

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def raw_policy() -> dict:
    return yaml.safe_load(default_policy_path().read_text())


def _demand(**lanes: LaneDemand) -> Demand:
    return Demand(at=NOW, lanes=dict(lanes))


def test_desired_nodes_from_use_unmet_demand_and_warm_pool(policy):
    d = _demand(
        candidate_train=LaneDemand("candidate_train", gpus_in_use={"h100-ondemand": 8}, gpus_pending={"h100-ondemand": 8}),
        research_best_effort=LaneDemand("research_best_effort", gpus_pending={"h100-ondemand": 4, "a100-spot": 4}),
    )
    plans = {p.node_pool: p for p in plan_pools(policy, d)}
    train = plans["training"]
    # 8 in use + 12 pending (none freed before a node would boot: no expected ends) + 8 warm for incidents
    assert (train.gpus_in_use, train.gpus_pending, train.unmet_gpus) == (8, 12, 12)
    assert train.warm_gpus == {"incident_response": 8}
    assert train.desired_gpus == 28 and train.desired_nodes == 4 and not train.capped_at_max
    assert train.max_nodes == 4 and train.startup_time_s == 720
    spot = plans["spot"]
    assert spot.desired_gpus == 4 and spot.desired_nodes == 1
    inference = plans["inference"]
    assert inference.desired_gpus == 4 and inference.desired_nodes == 1  # only the release_eval warm pool
    assert inference.reason == "nothing pending; in use plus warm pool"


def test_jobs_ending_within_startup_time_cover_pending_demand(policy):
    d = _demand(
        candidate_train=LaneDemand("candidate_train", gpus_in_use={"h100-ondemand": 16}, gpus_pending={"h100-ondemand": 8}),
    )
    d.admitted_ends = [("h100-ondemand", 8, NOW + timedelta(minutes=5)), ("h100-ondemand", 8, NOW + timedelta(hours=3))]
    train = next(p for p in plan_pools(policy, d) if p.node_pool == "training")
    assert train.gpus_freed_within_startup == 8 and train.unmet_gpus == 0
    assert train.desired_gpus == 16 + 0 + 8 and train.desired_nodes == 3
    assert "freed by running jobs within" in train.reason


def test_capped_at_capacity_and_floored_at_min_nodes(policy):
    big = _demand(candidate_train=LaneDemand("candidate_train", gpus_pending={"h100-ondemand": 200}))
    train = next(p for p in plan_pools(policy, big) if p.node_pool == "training")
    assert train.desired_nodes == 4 and train.capped_at_max and "capped at max_nodes 4" in train.reason
    idle = next(p for p in plan_pools(policy, _demand()) if p.node_pool == "training")
    assert idle.desired_nodes == 1  # the warm pool's 8 GPUs: one node (min_nodes 1 too)


def test_cli_plans_from_the_ledger_and_refuses_a_policy_without_autoscaling(env, policy, raw_policy, tmp_path):
    from tests.gate.helpers import submit, tick

    instance, ledger, resources, _ = env
    for i in range(5):
        submit(ledger, policy, "candidate_train", output_artifact_ids=[f"m{i}"], gpu_count=8)
    tick(instance, resources)
    out = CliRunner().invoke(main, ["autoscale", "plan", "--ledger", ledger.url])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    train = next(p for p in doc["node_pools"] if p["node_pool"] == "training")
    assert train["gpus_in_use"] == 8 * sum(1 for s in ledger.states(["admitted"]))
    assert train["gpus_pending"] == 8 * len(ledger.states(["waiting"]))
    assert train["flavors"] == ["h100-ondemand"]
    bare = copy.deepcopy(raw_policy)
    del bare["autoscaling"]
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(bare))
    refused = CliRunner().invoke(main, ["autoscale", "plan", "--ledger", ledger.url, "--policy", str(path)])
    assert refused.exit_code == 2 and "no `autoscaling` block" in refused.output


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda a: a["warm_pools"].append({"lane": "nope", "node_pool": "training", "gpus": 1}),
         "autoscaling.warm_pools[2].lane: unknown lane 'nope'"),
        (lambda a: a["warm_pools"].append({"lane": "release_eval", "node_pool": "spot", "gpus": 1}),
         "autoscaling.warm_pools[2]: lane 'release_eval' has no GPU quota on a flavor in node pool 'spot'"),
        (lambda a: a["warm_pools"].append({"lane": "map_semantic_batch", "node_pool": "inference", "gpus": 9}),
         "autoscaling.warm_pools[2].gpus: 9 exceeds the 8 GPUs lane 'map_semantic_batch' may hold in node pool 'inference'"),
        (lambda a: a["node_pools"]["training"].update(min_nodes=5, max_nodes=2),
         "autoscaling.node_pools.training.min_nodes: 5 exceeds max_nodes 2"),
        (lambda a: a["node_pools"]["spot"].update(node_gpus=0),
         "autoscaling.node_pools.spot.node_gpus: Input should be greater than 0"),
        (lambda a: a["node_pools"]["spot"].update(startup_time="soon"),
         "autoscaling.node_pools.spot.startup_time: not a duration: 'soon'"),
        (lambda a: a["node_pools"].update(gpu={"node_gpus": 8, "startup_time": "5m"}),
         "autoscaling.node_pools.gpu"),
        (lambda a: a["warm_pools"].append({"lane": "release_eval", "node_pool": "inference"}),
         "autoscaling.warm_pools[2].gpus: Field required"),
    ],
)
def test_autoscaling_block_errors_name_their_path(raw_policy, change, expected):
    raw = copy.deepcopy(raw_policy)
    change(raw["autoscaling"])
    with pytest.raises(PolicyError) as exc:
        parse_policy(raw)
    assert any(e.startswith(expected) for e in exc.value.errors), exc.value.errors


def test_warm_pool_may_not_name_a_pool_without_scaling(raw_policy):
    raw = copy.deepcopy(raw_policy)
    del raw["autoscaling"]["node_pools"]["inference"]
    with pytest.raises(PolicyError) as exc:
        parse_policy(raw)
    assert "autoscaling.warm_pools[1].node_pool: 'inference' has no entry in autoscaling.node_pools" in exc.value.errors


def test_requests_waiting_for_upstream_ask_for_no_node(policy):
    d = _demand(
        release_eval=LaneDemand(
            "release_eval", gpus_pending={"h100-ondemand": 16}, gpus_waiting_for_upstream={"h100-ondemand": 16}
        ),
    )
    train = next(p for p in plan_pools(policy, d) if p.node_pool == "training")
    assert (train.gpus_pending, train.gpus_waiting_for_upstream, train.unmet_gpus) == (16, 16, 0)
    assert train.desired_gpus == 8  # the warm pool only
    assert train.reason == "pending GPUs all wait for upstream outputs; no node for them yet"


# --- autoscaling.provisioning: demand Kueue asks cluster-autoscaler for through ProvisioningRequests ---

PROVISIONING = default_policy_path().parents[2] / "examples" / "kueue-native" / "provisioning.yaml"


def test_provisioned_demand_is_named_and_not_asked_twice():
    pol = parse_policy(yaml.safe_load(PROVISIONING.read_text()))
    d = _demand(
        candidate_train=LaneDemand("candidate_train", gpus_pending={"a100-spot": 8, "h100-ondemand": 8}),
        labeler_batch=LaneDemand("labeler_batch", gpus_pending={"l4-inference": 4}, gpus_waiting_for_upstream={"l4-inference": 4}),
    )
    plans = {p.node_pool: p for p in plan_pools(pol, d)}
    spot = plans["spot"]
    assert (spot.unmet_gpus, spot.provisioned_gpus, spot.provisioned_lanes) == (8, 8, ("candidate_train",))
    assert spot.provisioning_check == "gpu-platform-provisioning"
    assert spot.desired_gpus == 0 and spot.desired_nodes == 0, "cluster-autoscaler gets these from Kueue"
    assert "asked of cluster-autoscaler by Kueue's gpu-platform-provisioning check" in spot.reason
    # training has min_nodes 1: always up, no check; its pending H100s stay in the plan
    train = plans["training"]
    assert train.provisioning_check is None and train.provisioned_gpus == 0 and train.unmet_gpus == 8
    # inference demand that waits for upstream outputs is not provisioned either
    assert plans["inference"].provisioned_gpus == 0 and plans["inference"].provisioned_lanes == ()
    assert plans["inference"].to_json()["provisioned_lanes"] == []


def test_check_capacity_scales_nothing_so_its_demand_stays_in_the_plan():
    raw = yaml.safe_load(PROVISIONING.read_text())
    raw["autoscaling"]["provisioning"]["provisioning_class_name"] = "check-capacity.autoscaling.x-k8s.io"
    pol = parse_policy(raw)
    d = _demand(candidate_train=LaneDemand("candidate_train", gpus_pending={"a100-spot": 8}))
    spot = next(p for p in plan_pools(pol, d) if p.node_pool == "spot")
    assert spot.provisioned_gpus == 0 and spot.desired_gpus == 8 and spot.desired_nodes == 1
    assert "only checks capacity" in spot.reason


def test_default_policy_plans_without_a_check(policy):
    d = _demand(candidate_train=LaneDemand("candidate_train", gpus_pending={"a100-spot": 8}))
    spot = next(p for p in plan_pools(policy, d) if p.node_pool == "spot")
    assert spot.provisioning_check is None and spot.provisioned_gpus == 0 and spot.desired_gpus == 8
