import pytest
import yaml
from click.testing import CliRunner

from gpu_platform.cli import main
from gpu_platform.requests.model import RequestError, validate_request, validate_request_file
from tests.conftest import EXAMPLES, ROOT

EXAMPLE_FILES = sorted(EXAMPLES.glob("*.yaml"))


def _example(lane: str) -> dict:
    return yaml.safe_load((EXAMPLES / f"{lane}.yaml").read_text())


def _errors(raw, policy) -> list[str]:
    with pytest.raises(RequestError) as exc:
        validate_request(raw, policy)
    return exc.value.errors


def test_there_is_an_example_for_every_lane(policy):
    assert {p.stem for p in EXAMPLE_FILES} == set(policy.lanes)


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.stem)
def test_examples_validate(path, policy):
    req = validate_request_file(path, policy)
    assert req.lane == path.stem
    assert req.workload == policy.lane(req.lane).default_workload
    assert req.image_ref.endswith(req.container_digest)


def test_empty_request_names_every_missing_field(policy):
    errors = _errors({}, policy)
    for field in policy.common_required_fields:
        assert f"{field}: required" in errors
    assert len(errors) == len(policy.common_required_fields)


@pytest.mark.parametrize(
    "lane, fields",
    [
        ("release_eval", ["release_packet_id", "odd_cell", "artifact_set", "rollback_target"]),
        ("incident_response", ["incident_id", "evidence_hold", "approver"]),
        ("labeler_batch", ["labeler_registry_id", "prompt_pack", "allowed_use"]),
        ("map_semantic_batch", ["source_map_acceptance_id", "tile_set", "semantic_taxonomy", "publication_target"]),
    ],
)
def test_lane_required_fields_are_named(policy, lane, fields):
    raw = _example(lane)
    for f in fields:
        raw.pop(f)
    errors = _errors(raw, policy)
    for f in fields:
        assert f"{f}: required by lane {lane}" in errors


def test_fail_closed_rules_all_reported_together(policy):
    raw = _example("release_eval")
    raw.update(
        data_access_scope="incident-restricted",
        team="planning",
        cost_center="CC-1020",
        gpu_count=64,
        expected_duration="9h",
        timeout="8h",
        max_cost=0,
        source_commit="abc123",
        container_digest="sha256:xyz",
        gpu_typo="h100",
    )
    errors = _errors(raw, policy)
    joined = "\n".join(errors)
    assert "data_access_scope: team planning may not use 'incident-restricted'" in joined
    assert "gpu_count: 64 GPUs do not fit the largest flavor (32 GPUs)" in joined
    assert "expected_duration: 9:00:00 exceeds timeout 8:00:00" in joined
    assert "max_cost: must be greater than 0" in joined
    assert "source_commit: must be a full 40-character lowercase hex git commit" in joined
    assert "container_digest: must be 'sha256:' followed by 64 lowercase hex characters" in joined
    assert "gpu_typo: unknown field" in joined


def test_cost_center_must_match_team_and_gpu_type_must_have_quota(policy):
    raw = _example("map_semantic_batch")
    raw.update(cost_center="CC-9999", gpu_type="h100-ondemand")
    errors = _errors(raw, policy)
    assert "cost_center: 'CC-9999' is not team mapping's cost center 'CC-1030'" in errors
    assert "gpu_type: lane map_semantic_batch has no quota on a flavor matching 'h100-ondemand'" in errors
    raw = _example("map_semantic_batch")
    raw["gpu_type"] = "tpu-v5"
    assert any(e.startswith("gpu_type: unknown GPU type 'tpu-v5'") for e in _errors(raw, policy))


def test_gpu_type_accepts_product_label_and_any(policy):
    raw = _example("release_eval")
    raw["gpu_type"] = "NVIDIA-H100-80GB-HBM3"
    assert validate_request(raw, policy).gpu_type == "NVIDIA-H100-80GB-HBM3"
    raw["gpu_type"] = "any"
    assert validate_request(raw, policy).gpu_type == "any"


def test_timeout_bounded_by_lane_and_incident_hold(policy):
    raw = _example("incident_response")
    raw.update(timeout="13h", evidence_hold=False)
    errors = _errors(raw, policy)
    assert any(e.startswith("timeout: 13:00:00 exceeds lane incident_response's max_run_duration") for e in errors)
    assert any(e.startswith("evidence_hold:") for e in errors)


def test_request_json_round_trip(policy):
    req = validate_request(_example("candidate_train"), policy)
    assert type(req).from_json(req.to_json()) == req


def test_cli_validate_empty_request_exits_2_naming_every_field(policy):
    result = CliRunner().invoke(main, ["request", "validate", str(ROOT / "examples" / "invalid-empty-request.json")])
    assert result.exit_code == 2
    for field in policy.common_required_fields:
        assert f"{field}: required" in result.output


def test_cli_validate_examples_exit_0():
    result = CliRunner().invoke(main, ["request", "validate", *map(str, EXAMPLE_FILES)])
    assert result.exit_code == 0, result.output
    assert result.output.count("ok ") == 9  # one example per lane


def test_cli_reports_syntax_error_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"owner": "a",\n "team": }')
    result = CliRunner().invoke(main, ["request", "validate", str(bad)])
    assert result.exit_code == 2
    assert "<json> line 2" in result.output


GANG_EXAMPLE = ROOT / "examples" / "distributed" / "candidate_train_2x8.yaml"


def test_cli_refuses_more_gpus_than_the_local_machine_has(tmp_path):
    """The local executor runs on this machine: with its inventory declared (no NVML here), a
    request for more whole GPUs than it has is refused at validation and at submit, naming both."""
    env = {"GPU_PLATFORM_LOCAL_GPUS": "8", "GPU_PLATFORM_HOME": str(tmp_path), "GPU_PLATFORM_ENV": "local"}
    one_node = str(ROOT / "examples" / "requests" / "candidate_train.yaml")
    result = CliRunner().invoke(main, ["request", "validate", str(GANG_EXAMPLE), one_node], env=env)
    assert result.exit_code == 2
    assert "gpu_count: 16 GPUs (2 nodes x 8) exceed this machine's 8 for the local executor" in result.output
    assert "GPU_PLATFORM_LOCAL_GPUS=8" in result.output
    assert f"ok {one_node}" in result.output
    ledger = f"sqlite:///{tmp_path / 'l.db'}"
    result = CliRunner().invoke(main, ["submit", "--ledger", ledger, str(GANG_EXAMPLE)], env=env)
    assert result.exit_code == 2 and "exceed this machine's 8" in result.output
    # with 16 declared it fits; on the cluster path (prod) the machine's GPUs are not the limit
    assert CliRunner().invoke(main, ["request", "validate", str(GANG_EXAMPLE)], env={**env, "GPU_PLATFORM_LOCAL_GPUS": "16"}).exit_code == 0
    prod = {**env, "GPU_PLATFORM_ENV": "prod", "GPU_PLATFORM_LEDGER_URL": ledger}
    assert CliRunner().invoke(main, ["request", "validate", str(GANG_EXAMPLE)], env=prod).exit_code == 0
