"""`gpu-platform k8s render` prints a Job that validates; bad input exits 2 naming the problem."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import yaml
from click.testing import CliRunner

from gpu_platform.cli.k8s import k8s
from gpu_platform.cluster.jobs import KUEUE_QUEUE_NAME, LABEL_REQUEST_ID

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "requests" / "labeler_batch.yaml"


def test_render_prints_valid_job() -> None:
    result = CliRunner().invoke(k8s, ["render", str(EXAMPLE), "--request-id", "req-20261129-cli"])
    assert result.exit_code == 0, result.output
    manifest = yaml.safe_load(result.stdout)
    kubernetes_validate.validate(manifest, "1.31.0", strict=True)
    assert manifest["metadata"]["labels"][KUEUE_QUEUE_NAME] == "labeler-batch"
    assert manifest["spec"]["template"]["metadata"]["labels"][LABEL_REQUEST_ID] == "req-20261129-cli"
    (term,) = manifest["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-L4"]} in term["matchExpressions"]


def test_default_job_names_differ_per_request_and_attempt() -> None:
    """Rendering several requests with the defaults never yields two Jobs of the same name."""
    runner = CliRunner()

    def name(*args: str) -> str:
        result = runner.invoke(k8s, ["render", *args])
        assert result.exit_code == 0, result.output
        return next(yaml.safe_load_all(result.stdout))["metadata"]["name"]  # a service's first object

    names = {
        name(str(path)) for path in sorted((ROOT / "examples" / "requests").glob("*.yaml"))
    } | {name(str(EXAMPLE), "--attempt", "2"), name(str(RELEASE), "--step", "model_evidence_pack")}
    assert len(names) == len(list((ROOT / "examples" / "requests").glob("*.yaml"))) + 2


RELEASE = ROOT / "examples" / "requests" / "release_chain" / "released_model.yaml"


def test_render_of_a_check_step_asks_for_no_gpu() -> None:
    result = CliRunner().invoke(k8s, ["render", str(RELEASE), "--step", "released_model_cost_attributed"])
    assert result.exit_code == 0, result.output
    manifest = yaml.safe_load(result.stdout)
    kubernetes_validate.validate(manifest, "1.31.0", strict=True)
    assert KUEUE_QUEUE_NAME not in manifest["metadata"]["labels"]
    (container,) = manifest["spec"]["template"]["spec"]["containers"]
    assert "nvidia.com/gpu" not in str(container.get("resources"))
    assert "suspend" not in manifest["spec"]


def test_render_default_request_id_is_stable() -> None:
    runner = CliRunner()
    first = yaml.safe_load(runner.invoke(k8s, ["render", str(EXAMPLE)]).stdout)
    second = yaml.safe_load(runner.invoke(k8s, ["render", str(EXAMPLE)]).stdout)
    rid = first["metadata"]["annotations"]["gpu-platform.io/request-id"]
    assert rid.startswith("req-render-")
    assert rid == second["metadata"]["annotations"]["gpu-platform.io/request-id"]


def test_render_refuses_flavor_outside_quota() -> None:
    result = CliRunner().invoke(k8s, ["render", str(EXAMPLE), "--flavor", "h100-ondemand"])
    assert result.exit_code == 2
    assert "does not fit request" in result.stderr


def test_render_reports_invalid_request(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(EXAMPLE.read_text().replace("gpu_count: 2", "gpu_count: -1"))
    result = CliRunner().invoke(k8s, ["render", str(bad)])
    assert result.exit_code == 2
    assert "gpu_count" in result.stderr


def test_render_refuses_a_step_the_run_does_not_have() -> None:
    result = CliRunner().invoke(k8s, ["render", str(EXAMPLE), "--step", "bogus"])
    assert result.exit_code == 2
    assert "--step 'bogus': not a step of a label_batch run (its steps: label_batch)" in result.stderr
    assert result.stdout == ""


def test_render_mounts_the_work_claim_from_the_environment(monkeypatch) -> None:
    """GPU_PLATFORM_WORK_CLAIM: the Job mounts the PVC at the work root, as the gate's Jobs do."""
    monkeypatch.setenv("GPU_PLATFORM_WORK_CLAIM", "gpu-platform-work")
    monkeypatch.setenv("GPU_PLATFORM_WORK_ROOT", "/var/lib/gpu-platform/work")
    result = CliRunner().invoke(k8s, ["render", str(EXAMPLE)])
    assert result.exit_code == 0, result.output
    manifest = yaml.safe_load(result.stdout)
    kubernetes_validate.validate(manifest, "1.31.0", strict=True)
    pod = manifest["spec"]["template"]["spec"]
    assert {"name": "gpu-platform-work", "persistentVolumeClaim": {"claimName": "gpu-platform-work"}} in [
        {k: v for k, v in vol.items()} for vol in pod["volumes"]
    ]
    (container,) = pod["containers"]
    assert any(m["mountPath"] == "/var/lib/gpu-platform/work" for m in container["volumeMounts"])
