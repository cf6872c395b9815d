"""A service request renders a Deployment (or LeaderWorkerSet), a Service and its autoscaler, each
valid against the Kubernetes schema (kubernetes-validate, strict) or its CRD (KEDA's ScaledObject,
LeaderWorkerSet; tests/fixtures/keda/SOURCE.md), unknown fields refused."""

from __future__ import annotations

import copy
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml
from click.testing import CliRunner

from gpu_platform.cli import main
from gpu_platform.cluster.names import (
    KUEUE_PRIORITY_CLASS,
    KUEUE_QUEUE_NAME,
    LABEL_GPU_PRODUCT,
    LABEL_NODE_POOL,
)
from gpu_platform.cluster.services import service_manifests
from gpu_platform.policy import default_policy_path, parse_policy
from gpu_platform.requests.model import validate_request, validate_request_file
from gpu_platform.serving.render import HPA_LATENCY_METRIC, HPA_QPS_METRIC, LABEL_SERVICE, quantity

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "requests" / "online_serving.yaml"
FIXTURES = ROOT / "tests" / "fixtures" / "keda"
K8S_VERSIONS = ("1.31.0", "latest")


def _crd_schema(name: str, version: str) -> dict:
    docs = [d for d in yaml.safe_load_all((FIXTURES / name).read_text()) if d]
    (crd,) = docs
    (v,) = [x for x in crd["spec"]["versions"] if x["name"] == version]
    return _closed(v["schema"]["openAPIV3Schema"])


def _closed(schema: dict) -> dict:
    """The API server prunes fields a structural schema does not declare; a test refuses them
    instead, so a misspelt field fails here rather than vanishing on the cluster."""
    out = dict(schema)
    if "properties" in out and "additionalProperties" not in out and not out.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    if "properties" in out:
        out["properties"] = {k: _closed(v) for k, v in out["properties"].items()}
    if isinstance(out.get("items"), dict):
        out["items"] = _closed(out["items"])
    if isinstance(out.get("additionalProperties"), dict):
        out["additionalProperties"] = _closed(out["additionalProperties"])
    return out


SCALED_OBJECT = _crd_schema("keda.sh_scaledobjects.yaml", "v1alpha1")
LWS = _crd_schema("leaderworkerset.x-k8s.io_leaderworkersets.abridged.yaml", "v1")


def _validate_k8s(manifest: dict) -> None:
    for version in K8S_VERSIONS:
        v = kubernetes_validate.utils.latest_version() if version == "latest" else version
        kubernetes_validate.validate(manifest, v, strict=True)


def _validate(manifest: dict) -> None:
    kind = manifest["kind"]
    if kind == "ScaledObject":
        jsonschema.Draft7Validator(SCALED_OBJECT).validate(manifest)
    elif kind == "LeaderWorkerSet":
        jsonschema.Draft7Validator(LWS).validate(manifest)
        lwt = manifest["spec"]["leaderWorkerTemplate"]
        for which in ("leaderTemplate", "workerTemplate"):
            _validate_k8s({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": lwt[which]})
    else:
        _validate_k8s(manifest)


@pytest.fixture
def service(policy):
    return validate_request_file(EXAMPLE, policy).model_copy(update={"request_id": "req-20261206-serving1"})


def test_keda_crd_fixture_is_the_scaledobject_crd():
    crd = yaml.safe_load((FIXTURES / "keda.sh_scaledobjects.yaml").read_text())
    assert crd["spec"]["group"] == "keda.sh" and crd["spec"]["names"]["kind"] == "ScaledObject"
    assert "scaleTargetRef" in SCALED_OBJECT["properties"]["spec"]["required"]


def test_the_example_renders_deployment_service_and_scaled_object(policy, service):
    docs = service_manifests(service, policy)
    assert [d["kind"] for d in docs] == ["Deployment", "Service", "ScaledObject"]
    for doc in docs:
        _validate(doc)
    deployment, svc, scaled = docs
    ns = policy.team("perception").namespace
    assert {d["metadata"]["namespace"] for d in docs} == {ns}
    assert {d["metadata"]["name"] for d in docs} == {"perception-serving"}

    # Kueue admits it through its pod integration: queue and priority class of the lane
    labels = deployment["metadata"]["labels"]
    assert labels[KUEUE_QUEUE_NAME] == "online-serving"
    pod = deployment["spec"]["template"]
    assert pod["metadata"]["labels"][KUEUE_QUEUE_NAME] == "online-serving"
    assert pod["metadata"]["labels"][KUEUE_PRIORITY_CLASS] == "gpu-platform-online-serving"
    assert deployment["spec"]["replicas"] == 2  # min replicas
    assert deployment["spec"]["selector"]["matchLabels"] == {LABEL_SERVICE: "perception-serving"}
    assert pod["metadata"]["labels"][LABEL_SERVICE] == "perception-serving"

    # the inference pool's L4s, the flavor's taints tolerated
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [
        {"key": LABEL_GPU_PRODUCT, "operator": "In", "values": ["NVIDIA-L4"]},
        {"key": LABEL_NODE_POOL, "operator": "In", "values": ["inference"]},
    ]}]
    assert pod["spec"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "effect": "NoSchedule", "operator": "Equal", "value": "present"}
    ]
    (container,) = pod["spec"]["containers"]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "1"} == container["resources"]["requests"]
    assert container["image"] == service.image_ref
    assert {"name": "GPU_PLATFORM_MODEL_ID", "value": "model-perception-2026.12-rc1"} in container["env"]
    assert container["ports"][0]["containerPort"] == 8080

    assert svc["spec"]["ports"] == [{"name": "http", "port": 8080, "targetPort": "http", "protocol": "TCP"}]
    assert svc["spec"]["selector"] == {LABEL_SERVICE: "perception-serving"}

    spec = scaled["spec"]
    assert spec["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "perception-serving"}
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (2, 6)
    qps, latency = spec["triggers"]
    assert qps["type"] == latency["type"] == "prometheus"
    assert qps["metricType"] == "AverageValue" and qps["metadata"]["threshold"] == "40"
    assert 'service="perception-serving"' in qps["metadata"]["query"] and f'namespace="{ns}"' in qps["metadata"]["query"]
    assert latency["metricType"] == "Value" and latency["metadata"]["threshold"] == "0.12"
    assert latency["metadata"]["query"].startswith("histogram_quantile(0.95,")


def test_the_crd_check_refuses_what_keda_would_drop(policy, service):
    scaled = copy.deepcopy(service_manifests(service, policy)[2])
    scaled["spec"]["minReplicas"] = 2  # the HPA's word, not KEDA's
    with pytest.raises(jsonschema.ValidationError):
        _validate(scaled)
    scaled = copy.deepcopy(service_manifests(service, policy)[2])
    del scaled["spec"]["triggers"][0]["metadata"]
    with pytest.raises(jsonschema.ValidationError):
        _validate(scaled)


def test_hpa_alternative_scales_on_custom_metrics(policy, service):
    spec = service.service.model_copy(update={"autoscaler": "hpa", "slo": service.service.slo.model_copy(
        update={"target_qps_per_replica": 12.5, "p95_latency_ms": 250})})
    req = service.model_copy(update={"service": spec})
    docs = service_manifests(req, policy)
    assert [d["kind"] for d in docs] == ["Deployment", "Service", "HorizontalPodAutoscaler"]
    for doc in docs:
        _validate(doc)
    hpa = docs[2]
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 6)
    pods, external = hpa["spec"]["metrics"]
    assert pods["pods"]["metric"]["name"] == HPA_QPS_METRIC
    assert pods["pods"]["target"] == {"type": "AverageValue", "averageValue": "12500m"}
    assert external["external"]["metric"]["name"] == HPA_LATENCY_METRIC
    assert external["external"]["target"] == {"type": "Value", "value": "250m"}


def test_the_request_env_joins_the_platforms_without_replacing_it(policy, service):
    req = service.model_copy(update={"env": {"PORT": "9999", "LOG_LEVEL": "info"}})
    (container,) = service_manifests(req, policy)[0]["spec"]["template"]["spec"]["containers"]
    names = [e["name"] for e in container["env"]]
    assert len(names) == len(set(names))
    assert {"name": "PORT", "value": "8080"} in container["env"] and {"name": "LOG_LEVEL", "value": "info"} in container["env"]


def test_quantity():
    assert [quantity(x) for x in (40, 40.0, 0.12, 12.5, 0.0005)] == ["40", "40", "120m", "12500m", "1m"]


def test_a_replica_over_two_nodes_renders_a_leader_worker_set(policy, service):
    raw = yaml.safe_load(EXAMPLE.read_text())
    raw.update(gpu_count=8, service={**raw["service"], "replicas": {"min": 1, "max": 1}})
    req = validate_request(raw, policy).model_copy(update={"request_id": "req-20261206-serving2"})
    assert (req.nodes, req.gpus_per_node) == (2, 4)  # nodes of 4 L4s
    docs = service_manifests(req, policy)
    assert [d["kind"] for d in docs] == ["LeaderWorkerSet", "Service", "ScaledObject"]
    for doc in docs:
        _validate(doc)
    lws = docs[0]
    assert lws["metadata"]["labels"][KUEUE_QUEUE_NAME] == "online-serving"
    assert lws["spec"]["replicas"] == 1 and lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    for which in ("leaderTemplate", "workerTemplate"):
        (c,) = lws["spec"]["leaderWorkerTemplate"][which]["spec"]["containers"]
        assert c["resources"]["limits"] == {"nvidia.com/gpu": "4"}
    assert docs[1]["spec"]["selector"]["leaderworkerset.sigs.k8s.io/worker-index"] == "0"
    assert docs[2]["spec"]["scaleTargetRef"]["kind"] == "LeaderWorkerSet"
    # the LWS schema refuses a size that is not a number
    bad = copy.deepcopy(lws)
    bad["spec"]["leaderWorkerTemplate"]["size"] = "two"
    with pytest.raises(jsonschema.ValidationError):
        _validate(bad)


def test_a_mig_replica_asks_for_its_slice(policy):
    raw = yaml.safe_load(default_policy_path().read_text())
    # the serving lane gets two 1g.10gb slices that research held
    raw["lanes"]["online_serving"]["quotas"].append(
        {"flavor_name": "h100-mig", "resource": "nvidia.com/mig-1g.10gb", "nominal_quota": 2, "borrowing_limit": 0, "lending_limit": 0}
    )
    for q in raw["lanes"]["research_best_effort"]["quotas"]:
        if q["resource"] == "nvidia.com/mig-1g.10gb":
            q["nominal_quota"] = 0
    mig_policy = parse_policy(raw)
    req_raw = yaml.safe_load(EXAMPLE.read_text())
    req_raw.update(gpu_type="h100-mig", gpu_resource="nvidia.com/mig-1g.10gb", gpu_count=1,
                   service={**req_raw["service"], "replicas": {"min": 1, "max": 2}})
    req = validate_request(req_raw, mig_policy).model_copy(update={"request_id": "req-20261206-serving3"})
    docs = service_manifests(req, mig_policy)
    for doc in docs:
        _validate(doc)
    pod = docs[0]["spec"]["template"]["spec"]
    assert pod["containers"][0]["resources"]["limits"] == {"nvidia.com/mig-1g.10gb": "1"}
    (term,) = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert {"key": "gpu-platform.io/gpu-sharing", "operator": "In", "values": ["mig"]} in term["matchExpressions"]
    # three replicas of a slice would exceed the lane's two
    req_raw["service"]["replicas"] = {"min": 3, "max": 3}
    with pytest.raises(ValueError, match="service.replicas.min: 3 replicas x 1 nvidia.com/mig-1g.10gb = 3 exceed the 2"):
        validate_request(req_raw, mig_policy)


def test_cli_renders_a_service():
    res = CliRunner().invoke(main, ["k8s", "render", str(EXAMPLE), "--request-id", "req-cli-serving"])
    assert res.exit_code == 0, res.output
    body = res.output.split("\n", 1)[1]
    docs = list(yaml.safe_load_all(body))
    assert [d["kind"] for d in docs] == ["Deployment", "Service", "ScaledObject"]
    assert docs[2]["spec"]["triggers"][0]["metadata"]["serverAddress"] == "http://prometheus-operated.monitoring.svc:9090"
    res = CliRunner().invoke(
        main, ["k8s", "render", str(EXAMPLE), "--prometheus-url", "http://prom.obs.svc:9090", "--step", "x"]
    )
    assert res.exit_code == 2 and "a service runs no steps" in res.output
    res = CliRunner().invoke(main, ["k8s", "render", str(EXAMPLE), "--prometheus-url", "http://prom.obs.svc:9090"])
    assert res.exit_code == 0 and "serverAddress: http://prom.obs.svc:9090" in res.output


def test_kueue_export_writes_the_integrations_a_serving_lane_needs(tmp_path, policy):
    from gpu_platform.serving.render import kueue_integrations

    res = CliRunner().invoke(main, ["kueue", "export", "--out", str(tmp_path / "k")])
    assert res.exit_code == 0, res.output
    cfg = yaml.safe_load((tmp_path / "k" / "kueue-manager-config" / "integrations.yaml").read_text())
    assert cfg["kind"] == "Configuration" and cfg["apiVersion"] == "config.kueue.x-k8s.io/v1beta2"
    assert cfg["integrations"]["frameworks"] == ["batch/job", "pod", "deployment", "leaderworkerset.x-k8s.io/leaderworkerset"]
    # `kubectl apply -f DIR` (not recursive) leaves the subfolder alone
    assert not list((tmp_path / "k").glob("*integrations*"))
    raw = yaml.safe_load(default_policy_path().read_text())
    del raw["lanes"]["online_serving"]
    raw["flavors"][1]["capacity"]["nvidia.com/gpu"] = 16
    assert kueue_integrations(parse_policy(raw)) is None
