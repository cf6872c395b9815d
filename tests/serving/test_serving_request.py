"""A service request (`service:` block) against the policy's serving lane, and the policy rules
that keep batch lanes from preempting serving replicas."""

import copy

import pytest
import yaml

from gpu_platform.policy import PolicyError, default_policy_path, parse_policy
from gpu_platform.requests.model import RequestError, validate_request
from gpu_platform.serving.model import ServiceSpec, service_name

SERVICE = {
    "name": "perception-serving",
    "owner": "ana@example.com",
    "team": "perception",
    "cost_center": "CC-1010",
    "lane": "online_serving",
    "site": "sfo-depot",
    "data_access_scope": "labeled-frames",
    "source_commit": "3f2c1a9b8e7d6c5b4a3928171615141312111009",
    "container_digest": "sha256:9b2f8e1c4d7a6b5c3e2f1a0d9c8b7a6e5f4d3c2b1a09f8e7d6c5b4a392817161",
    "image": "registry.local/ml/perception-server",
    "gpu_type": "l4-inference",
    "gpu_count": 1,
    "expected_duration": "30d",
    "timeout": "60d",
    "max_cost": 12000,
    "output_artifact_ids": ["svc-perception-serving"],
    "preemption_policy": "requeue",
    "retention_policy": "30d",
    "rollback_target": "model-perception-2026.11",
    "service": {
        "model_id": "model-perception-2026.12-rc1",
        "replicas": {"min": 2, "max": 6},
        "slo": {"p95_latency_ms": 120, "target_qps_per_replica": 40},
    },
}


def _raw_policy():
    return yaml.safe_load(default_policy_path().read_text())


def test_a_service_request_validates_with_its_defaults(policy):
    req = validate_request(copy.deepcopy(SERVICE), policy)
    assert req.workload == "service"
    spec = req.service
    assert spec is not None and spec.replicas.min == 2 and spec.replicas.max == 6
    assert spec.port == 8080 and spec.autoscaler == "keda"
    assert service_name(spec, req.name) == "perception-serving"
    qps, latency = spec.queries("perception-serving", "team-perception")
    assert 'service="perception-serving"' in qps and 'namespace="team-perception"' in qps
    assert latency.startswith("histogram_quantile(0.95,")
    # stored and read back whole (the ledger keeps the request as JSON)
    assert type(req).from_json(req.to_json()) == req


def test_every_problem_of_a_service_block_is_listed_with_its_field(policy):
    raw = copy.deepcopy(SERVICE)
    raw["service"] = {
        "model_id": "bad id with spaces",
        "replicas": {"min": 0, "max": True},
        "slo": {"p95_latency_ms": -1, "target_qps_per_replica": 0},
        "port": 70000,
        "autoscaler": "vpa",
        "metrics": {"qps_query": "rate(x{service=\"$svc\"}[1m])"},
        "replica": 3,
    }
    with pytest.raises(RequestError) as exc:
        validate_request(raw, policy)
    text = "\n".join(exc.value.errors)
    for fragment in (
        "service.model_id:",
        "service.replicas.min:",
        "service.replicas.max: must be a number, not a boolean",
        "service.slo.p95_latency_ms:",
        "service.slo.target_qps_per_replica:",
        "service.port:",
        "service.autoscaler:",
        "service.metrics.qps_query: unknown placeholder(s) $svc",
        "service.replica: unknown field",
    ):
        assert fragment in text, (fragment, text)


def test_max_below_min_is_refused():
    with pytest.raises(ValueError, match="max \\(1\\) is below min \\(3\\)"):
        ServiceSpec.model_validate(
            {"model_id": "m", "replicas": {"min": 3, "max": 1}, "slo": {"p95_latency_ms": 1, "target_qps_per_replica": 1}}
        )


def test_service_only_in_a_serving_lane_and_always_there(policy):
    outside = copy.deepcopy(SERVICE)
    outside.update(lane="labeler_batch", workload="service")
    with pytest.raises(RequestError) as exc:
        validate_request(outside, policy)
    text = "\n".join(exc.value.errors)
    assert "service: only for requests in a serving lane; lane labeler_batch is not one (serving lanes: online_serving)" in text
    assert "workload: service runs in a serving lane; lane labeler_batch is not one" in text
    assert "labeler_registry_id: required by lane labeler_batch" in text  # and the lane's own fields

    bare = copy.deepcopy(SERVICE)
    del bare["service"]
    bare["workload"] = "training_run"
    with pytest.raises(RequestError) as exc:
        validate_request(bare, policy)
    text = "\n".join(exc.value.errors)
    assert "service: required by lane online_serving" in text
    assert "workload: lane online_serving is a serving lane; its requests are services" in text


def test_replicas_the_lane_can_never_hold_are_refused(policy):
    raw = copy.deepcopy(SERVICE)
    raw["gpu_count"] = 2
    raw["service"]["replicas"] = {"min": 5, "max": 6}  # 10 and 12 L4s; the lane holds 8 and never borrows
    with pytest.raises(RequestError) as exc:
        validate_request(raw, policy)
    text = "\n".join(exc.value.errors)
    assert "service.replicas.min: 5 replicas x 2 nvidia.com/gpu = 10 exceed the 8 lane online_serving can ever hold" in text
    assert "service.replicas.max: 6 replicas x 2 nvidia.com/gpu = 12 exceed the 8" in text
    raw["service"]["replicas"] = {"min": 4, "max": 4}
    assert validate_request(raw, policy).service.replicas.max == 4


def test_a_service_needs_a_kubernetes_name(policy):
    raw = copy.deepcopy(SERVICE)
    raw["name"] = "Perception Serving"
    with pytest.raises(RequestError, match="name: a service is named by service.name or the request's name"):
        validate_request(raw, policy)
    raw["service"]["name"] = "perception-serving"
    assert service_name(validate_request(raw, policy).service, "Perception Serving") == "perception-serving"


def test_default_policy_serving_lane_is_protected_and_never_borrows(policy):
    lane = policy.lane("online_serving")
    assert lane.serving and lane.protected and lane.default_workload == "service"
    assert all(q.borrowing_limit == 0 for q in lane.quotas)
    assert {q.flavor_name for q in lane.quotas} == {"l4-inference"}
    assert policy.flavor("l4-inference").node_pool == "inference"
    order = [x.name for x in policy.lanes_by_priority()]
    assert order.index("online_serving") == 1  # below incident_response only
    assert [x.name for x in policy.lanes.values() if x.serving] == ["online_serving"]


def _check(mutate):
    raw = _raw_policy()
    mutate(raw["lanes"])
    with pytest.raises(PolicyError) as exc:
        parse_policy(raw)
    return exc.value.errors


def test_policy_refuses_a_serving_lane_batch_could_reclaim():
    # serving borrows on the L4s: labeler_batch (reclaim Any) and map_semantic_batch
    # (LowerPriority, but below serving's 900) share the tree and the flavor
    def borrow(lanes):
        lanes["online_serving"]["quotas"][0]["borrowing_limit"] = 4

    errors = _check(borrow)
    text = "\n".join(errors)
    assert (
        "lanes.labeler_batch.preemption.reclaim_within_cohort: Any (any priority) lets batch lane labeler_batch preempt "
        "serving lane online_serving's replicas on l4-inference (nvidia.com/gpu) while online_serving borrows there "
        "(lanes.online_serving.quotas[0].borrowing_limit is 4)"
    ) in text
    assert "lanes.map_semantic_batch" not in text  # LowerPriority from below cannot take a 900 replica
    assert "lanes.release_eval.preemption" in text  # Any

    # LowerPriority above the serving lane's priority reaches it too
    def above(lanes):
        borrow(lanes)
        lanes["map_semantic_batch"]["priority"] = 950

    assert any(
        e.startswith("lanes.map_semantic_batch.preemption.reclaim_within_cohort: LowerPriority (priority 950 above online_serving's 900)")
        for e in _check(above)
    )

    # an unlimited borrowing_limit (unset) is named as such
    def unlimited(lanes):
        del lanes["online_serving"]["quotas"][0]["borrowing_limit"]

    assert any("borrowing_limit is unset (no limit)" in e for e in _check(unlimited))


def test_policy_accepts_batch_reclaim_that_cannot_reach_serving():
    raw = _raw_policy()
    raw["lanes"]["online_serving"]["quotas"][0]["borrowing_limit"] = 4
    for name in ("labeler_batch", "release_eval", "incident_response"):
        raw["lanes"][name]["preemption"]["reclaim_within_cohort"] = "Never"
    # map_semantic_batch: LowerPriority from 700, below serving's 900; others have no L4 quota
    # or reclaim Never/LowerPriority from below
    parse_policy(raw)


def test_serving_lane_rules():
    def unprotected(lanes):
        lanes["online_serving"]["protected"] = False
        lanes["online_serving"]["default_workload"] = "replay"
        lanes["online_serving"]["quotas"][0]["lending_limit"] = 4
        lanes["online_serving"]["preemption"]["reclaim_within_cohort"] = "LowerPriority"
        lanes["research_best_effort"]["default_workload"] = "service"

    text = "\n".join(_check(unprotected))
    assert "lanes.online_serving.protected: a serving lane must be protected" in text
    assert "lanes.online_serving.default_workload: a serving lane's requests are services" in text
    assert "lanes.online_serving.preemption.reclaim_within_cohort: a serving lane that lends idle GPUs" in text
    assert "lanes.research_best_effort.default_workload: service is for serving lanes only" in text


def test_request_validate_prints_the_service():
    from pathlib import Path

    from click.testing import CliRunner

    from gpu_platform.cli import main

    example = Path(__file__).resolve().parents[2] / "examples" / "requests" / "online_serving.yaml"
    res = CliRunner().invoke(main, ["request", "validate", str(example)])
    assert res.exit_code == 0, res.output
    assert "workload service (2-6 replicas of model model-perception-2026.12-rc1, autoscaler keda)" in res.output


def test_policy_check_marks_the_serving_lane():
    from click.testing import CliRunner

    from gpu_platform.cli import main

    res = CliRunner().invoke(main, ["policy", "check"], env={"COLUMNS": "400"})
    assert res.exit_code == 0, res.output
    (row,) = [line for line in res.output.splitlines() if "online_serving" in line and "reclaim=Any" in line]
    assert "protected serving" in row


def test_the_launchpad_config_takes_a_service(policy):
    from pathlib import Path

    from assets.submit import SubmitRequestConfig

    example = Path(__file__).resolve().parents[2] / "examples" / "requests" / "online_serving.yaml"
    raw = yaml.safe_load(example.read_text())
    fields = SubmitRequestConfig(**raw).request_fields()
    assert fields["service"] == {
        "model_id": "model-perception-2026.12-rc1", "replicas": {"min": 2, "max": 6},
        "slo": {"p95_latency_ms": 120.0, "target_qps_per_replica": 40.0}, "port": 8080, "autoscaler": "keda",
    }
    req = validate_request(fields, policy)
    assert req.service == validate_request(raw, policy).service
