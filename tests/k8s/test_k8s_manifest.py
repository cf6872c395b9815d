"""The step Job built by dagster-k8s's own code from each example request, validated strictly."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import dagster as dg
import kubernetes_validate
import pytest
import yaml
from dagster_k8s import k8s_job_executor
from dagster_k8s.job import UserDefinedDagsterK8sConfig, get_user_defined_k8s_config

from gpu_platform.cluster.jobs import (
    ANNOTATION_GATE_FLAVOR,
    ANNOTATION_REQUEST_ID,
    KUEUE_PRIORITY_CLASS,
    KUEUE_QUEUE_NAME,
    LABEL_ATTEMPT,
    LABEL_GPU_PRODUCT,
    LABEL_LANE,
    LABEL_NODE_POOL,
    LABEL_REQUEST_ID,
    LABEL_TEAM,
    TAS_UNCONSTRAINED,
    k8s_config_for,
    label_value,
    resolve_flavor,
)
from resources.k8s import k8s_run_config, k8s_tags, render_job_manifest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(
    p for p in (ROOT / "examples" / "requests").rglob("*.yaml") if "service" not in (yaml.safe_load(p.read_text()) or {})
)
"""Every example request but services, which are no Job (tests/serving/test_render.py renders them)."""
K8S_VERSIONS = ("1.31.0", "latest")


def _validate(manifest: dict) -> None:
    for version in K8S_VERSIONS:
        v = kubernetes_validate.utils.latest_version() if version == "latest" else version
        kubernetes_validate.validate(manifest, v, strict=True)


def test_kubernetes_validate_covers_1_31_or_newer() -> None:
    assert tuple(int(x) for x in kubernetes_validate.utils.latest_version().split(".")[:2]) >= (1, 31)


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_renders_valid_job(path: Path, k8s_policy, example_request) -> None:
    req = example_request(path)
    flavor = resolve_flavor(req, k8s_policy)
    manifest = render_job_manifest(
        req, flavor.name, k8s_policy, run_id="5f1c9a1e-1111-2222-3333-444455556666"
    )
    _validate(manifest)

    team = k8s_policy.team(req.team)
    lane_k8s = req.lane.replace("_", "-")
    meta, spec = manifest["metadata"], manifest["spec"]
    assert manifest["kind"] == "Job" and manifest["apiVersion"] == "batch/v1"
    assert meta["namespace"] == team.namespace
    assert meta["labels"][KUEUE_QUEUE_NAME] == lane_k8s
    assert meta["labels"][KUEUE_PRIORITY_CLASS] == f"gpu-platform-{lane_k8s}"
    assert meta["annotations"][ANNOTATION_REQUEST_ID] == req.request_id
    assert meta["annotations"][ANNOTATION_GATE_FLAVOR] == flavor.name
    assert spec["suspend"] is True
    assert spec["backoffLimit"] == 0
    assert spec["activeDeadlineSeconds"] == int(req.timeout.total_seconds())

    pod = spec["template"]
    assert pod["metadata"]["labels"][LABEL_TEAM] == req.team
    assert pod["metadata"]["labels"][LABEL_LANE] == req.lane
    assert pod["metadata"]["labels"][LABEL_REQUEST_ID] == req.request_id
    assert pod["metadata"]["labels"][LABEL_ATTEMPT] == "1"
    # No pinned flavor: Kueue injects the chosen flavor's node labels and tolerations.
    assert "nodeSelector" not in pod["spec"] and not pod["spec"].get("tolerations")
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    expected = [
        {"key": LABEL_GPU_PRODUCT, "operator": "In", "values": [flavor.gpu_product]},
        {"key": LABEL_NODE_POOL, "operator": "In", "values": [flavor.node_pool]},
    ]
    if flavor.sharing.mode != "exclusive":
        expected.append({"key": "gpu-platform.io/gpu-sharing", "operator": "In", "values": [flavor.sharing.mode]})
    assert {"matchExpressions": expected} in terms

    (container,) = pod["spec"]["containers"]
    assert container["image"] == req.image_ref
    assert "@sha256:" in container["image"]
    gpus = str(req.gpu_count)
    assert container["resources"]["limits"][req.gpu_resource] == gpus
    assert container["resources"]["requests"][req.gpu_resource] == gpus
    assert {"name": "GPU_PLATFORM_REQUEST_ID", "value": req.request_id} in container["env"]


@pytest.fixture
def research(example_request):
    """The research example with gpu_type `any`, so every flavor of its lane fits."""
    path = ROOT / "examples" / "requests" / "research_best_effort.yaml"
    return example_request(path).model_copy(update={"gpu_type": "any"})


def test_any_gpu_type_accepts_every_lane_flavor_including_spot(k8s_policy, research) -> None:
    req = research
    spot = render_job_manifest(req, "a100-spot", k8s_policy)
    ondemand = render_job_manifest(req, "h100-ondemand", k8s_policy)
    _validate(spot)
    _validate(ondemand)
    # The gate's flavor is recorded, not pinned: each Job accepts the lane's flavors of the gate
    # flavor's kind. Kueue lets the unannotated Job use only flavors without a Topology (the lane
    # also has L4s and A100s), and the annotated one only topology-aware flavors (the H100s).
    def pools(job):
        terms = job["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"]
        return [next(e["values"][0] for e in t["matchExpressions"] if e["key"] == LABEL_NODE_POOL) for t in terms]

    assert pools(spot) == ["spot", "inference"]  # idle L4s are lent to any-GPU work
    assert pools(ondemand) == ["training"]
    assert TAS_UNCONSTRAINED not in spot["spec"]["template"]["metadata"]["annotations"]
    assert ondemand["spec"]["template"]["metadata"]["annotations"][TAS_UNCONSTRAINED] == "true"
    assert spot["metadata"]["annotations"][ANNOTATION_GATE_FLAVOR] == "a100-spot"


def test_flavor_outside_lane_quota_is_refused(k8s_policy, research) -> None:
    req = research
    with pytest.raises(ValueError, match="does not fit request"):
        k8s_config_for(req, "l4-shared", k8s_policy)  # time-sliced: not a whole-GPU flavor of the lane
    with pytest.raises(ValueError, match="unknown flavor"):
        k8s_config_for(req, "tpu-v5", k8s_policy)


def test_request_without_id_or_digest_is_refused(k8s_policy, research) -> None:
    req = research
    with pytest.raises(ValueError, match="request_id"):
        k8s_config_for(req.model_copy(update={"request_id": None}), "a100-spot", k8s_policy)
    with pytest.raises(ValueError, match="container_digest"):
        k8s_config_for(req.model_copy(update={"container_digest": None}), "a100-spot", k8s_policy)


def test_cpu_memory_and_missing_timeout(k8s_policy, research) -> None:
    req = research.model_copy(update={"cpu": 7.5, "memory_gib": 96, "timeout": None})
    manifest = render_job_manifest(req, "a100-spot", k8s_policy)
    _validate(manifest)
    res = manifest["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert res["requests"] == {"nvidia.com/gpu": "4", "cpu": "7500m", "memory": "96Gi"}
    assert res["limits"] == {"nvidia.com/gpu": "4", "memory": "96Gi"}
    lane_max = k8s_policy.lane("research_best_effort").max_run_duration.total_seconds()
    assert manifest["spec"]["activeDeadlineSeconds"] == int(lane_max)


def test_request_id_that_is_not_a_label_value(k8s_policy, research) -> None:
    rid = "team/perception:" + "x" * 90
    req = research.model_copy(update={"request_id": rid})
    manifest = render_job_manifest(req, "a100-spot", k8s_policy)
    _validate(manifest)
    label = manifest["spec"]["template"]["metadata"]["labels"][LABEL_REQUEST_ID]
    assert label == label_value(rid) and len(label) <= 63 and "/" not in label
    assert label != label_value(rid + "y")
    assert manifest["spec"]["template"]["metadata"]["annotations"][ANNOTATION_REQUEST_ID] == rid
    assert label_value("req-20261129-abc") == "req-20261129-abc"


def test_config_has_dagster_k8s_keys_and_parses_from_tags(k8s_policy, research) -> None:
    req = research
    cfg = k8s_config_for(req, "a100-spot", k8s_policy)
    assert set(cfg) <= set(UserDefinedDagsterK8sConfig._fields)
    parsed = get_user_defined_k8s_config(k8s_tags(req, "a100-spot", k8s_policy))
    assert parsed.job_spec_config == {"suspend": True, "active_deadline_seconds": 21600, "backoff_limit": 0}
    assert parsed.container_config["resources"]["limits"]["nvidia.com/gpu"] == 4
    assert json.loads(json.dumps(cfg)) == cfg


def test_run_config_validates_against_k8s_job_executor(k8s_policy, research) -> None:
    @dg.op
    def workload() -> None: ...

    @dg.job(executor_def=k8s_job_executor)
    def one_request() -> None:
        workload()

    req = research
    run_config = k8s_run_config(req, "a100-spot", k8s_policy)
    resolved = dg.validate_run_config(one_request, run_config)
    k8s_cfg = resolved["execution"]["k8s"]
    assert k8s_cfg["job_namespace"] == "team-perception"
    assert k8s_cfg["per_step_k8s_config"]["training_run"]["job_spec_config"]["suspend"] is True
    assert "suspend" not in k8s_cfg["step_k8s_config"]["job_spec_config"]


def test_domain_modules_do_not_import_dagster() -> None:
    code = (
        "import sys, gpu_platform.cluster.jobs, gpu_platform.devices.gpus, gpu_platform.gate.instance_config, gpu_platform.cli.k8s\n"
        "import gpu_platform.cluster.names, gpu_platform.cluster.readback\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('dagster', 'dagster_k8s', 'dagster_pipes'))\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_a_service_is_no_job(k8s_policy, example_request) -> None:
    req = example_request(ROOT / "examples" / "requests" / "online_serving.yaml")
    with pytest.raises(ValueError, match="is a service .* not a Job"):
        render_job_manifest(req, "l4-inference", k8s_policy)
