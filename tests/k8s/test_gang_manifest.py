"""A multi-node request renders as one Kueue-admissible workload: an Indexed Job (one pod per node,
built by dagster-k8s's own builder) plus its headless rendezvous Service, validated strictly."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from click.testing import CliRunner

from gpu_platform.cli import main
from gpu_platform.cluster.jobs import (
    KUEUE_PRIORITY_CLASS,
    KUEUE_QUEUE_NAME,
    LABEL_ATTEMPT,
    LABEL_REQUEST_ID,
    TAS_PREFERRED,
    TAS_REQUIRED,
    executor_config_for,
    gang_job_config_for,
)
from gpu_platform.cluster.names import gang_job_name, is_dns_label
from resources.k8s import render_workload_manifests

ROOT = Path(__file__).resolve().parents[2]
GANG = ROOT / "examples" / "distributed" / "candidate_train_2x8.yaml"
K8S_VERSIONS = ("1.31.0", "latest")


def _validate(manifest: dict) -> None:
    for version in K8S_VERSIONS:
        v = kubernetes_validate.utils.latest_version() if version == "latest" else version
        kubernetes_validate.validate(manifest, v, strict=True)


@pytest.fixture
def gang(example_request):
    return example_request(GANG)


def _env(container: dict) -> dict:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_gang_renders_an_indexed_job_and_a_headless_service(gang, k8s_policy) -> None:
    assert (gang.nodes, gang.gpus_per_node) == (2, 8)
    service, job = render_workload_manifests(gang, "h100-ondemand", k8s_policy, attempt=2)
    _validate(service)
    _validate(job)
    name = gang_job_name(gang.request_id, 2)
    assert is_dns_label(name) and is_dns_label(f"{name}-1")

    assert job["kind"] == "Job" and job["metadata"]["name"] == name
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["parallelism"] == spec["completions"] == 2
    assert spec["suspend"] is True and spec["backoffLimit"] == 0  # one pod fails: the Job fails
    labels = job["metadata"]["labels"]
    assert labels[KUEUE_QUEUE_NAME] == "candidate-train"
    assert labels[KUEUE_PRIORITY_CLASS] == "gpu-platform-candidate-train"
    pod = spec["template"]
    assert pod["metadata"]["annotations"][TAS_PREFERRED] == "topology.kubernetes.io/zone"
    assert TAS_REQUIRED not in pod["metadata"]["annotations"]
    assert pod["spec"]["subdomain"] == service["metadata"]["name"] == name
    (container,) = pod["spec"]["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"  # one node's GPUs per pod
    assert container["args"] == list(gang.command)
    env = _env(container)
    assert env["MASTER_ADDR"] == env["PET_MASTER_ADDR"] == f"{name}-0.{name}"
    assert env["MASTER_PORT"] == "29500" and env["NNODES"] == env["PET_NNODES"] == "2"
    assert env["NPROC_PER_NODE"] == "8" and env["WORLD_SIZE"] == "16"
    rank = {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}
    assert env["NODE_RANK"] == env["PET_NODE_RANK"] == rank

    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    assert service["metadata"]["namespace"] == job["metadata"]["namespace"] == "team-perception"
    for key, value in service["spec"]["selector"].items():
        assert pod["metadata"]["labels"][key] == value
    assert set(service["spec"]["selector"]) == {LABEL_REQUEST_ID, LABEL_ATTEMPT}


def test_required_topology_becomes_the_required_annotation(gang, k8s_policy) -> None:
    from gpu_platform.requests.model import TopologyRequest

    req = gang.model_copy(update={"topology": TopologyRequest(required="topology.kubernetes.io/zone")})
    cfg = gang_job_config_for(req, "h100-ondemand", k8s_policy)
    annotations = cfg["pod_template_spec_metadata"]["annotations"]
    assert annotations[TAS_REQUIRED] == "topology.kubernetes.io/zone" and TAS_PREFERRED not in annotations


def test_a_gangs_workload_step_is_a_cpu_pod_that_launches_the_indexed_job(gang, k8s_policy) -> None:
    """The step Job of a gang's workload step asks for no GPU and joins no Kueue queue (its pods,
    the Indexed Job's, do): Kueue must not reserve a second set of GPUs for the watcher."""
    from resources.k8s import render_job_manifest

    cfg = executor_config_for(gang, "h100-ondemand", k8s_policy)
    assert set(cfg["per_step_k8s_config"]) == {"training_run"}
    job = render_job_manifest(gang, "h100-ondemand", k8s_policy)
    _validate(job)
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert "nvidia.com/gpu" not in ((container.get("resources") or {}).get("limits") or {})
    assert KUEUE_QUEUE_NAME not in job["metadata"]["labels"] and not job["spec"].get("suspend")
    assert job["metadata"]["labels"][LABEL_REQUEST_ID] == gang.request_id


def test_gang_pods_get_the_requests_env_and_the_steps_env(gang, k8s_policy) -> None:
    req = gang.model_copy(update={"env": {"DEMO_STEPS": "40"}})
    cfg = gang_job_config_for(req, "h100-ondemand", k8s_policy, env={"GPU_PLATFORM_OUTPUT_DIR": "/work/out"})
    env = {e["name"]: e.get("value") for e in cfg["container_config"]["env"]}
    assert env["DEMO_STEPS"] == "40" and env["GPU_PLATFORM_OUTPUT_DIR"] == "/work/out"
    assert "name" not in cfg["job_metadata"]  # one name, the builder's (gang_job_name)


def test_one_node_request_still_renders_its_step_job(example_request, k8s_policy) -> None:
    req = example_request(ROOT / "examples" / "requests" / "candidate_train.yaml")
    (job,) = render_workload_manifests(req, "h100-ondemand", k8s_policy)
    assert "completionMode" not in job["spec"] and job["metadata"]["name"].startswith("dagster-step-")


def test_cli_render_prints_service_and_indexed_job() -> None:
    res = CliRunner().invoke(main, ["k8s", "render", str(GANG), "--request-id", "req-gang-1"])
    assert res.exit_code == 0, res.output
    docs = [d for d in yaml.safe_load_all(res.stdout) if d]
    assert [d["kind"] for d in docs] == ["Service", "Job"]
    assert docs[1]["spec"]["completionMode"] == "Indexed"
    assert "Indexed Job of 2 pods x 8 GPUs" in res.stdout
    for d in docs:
        _validate(d)


def test_kueue_takes_the_gang_as_one_workload_on_a_tas_flavor(gang, k8s_policy) -> None:
    """Kueue's view of the Job: its queue, a candidate flavor with a Topology, and the one Workload
    it creates (one PodSet, count = parallelism, the TAS annotation as topologyRequest), checked
    against the Workload CRD (v1beta2)."""
    import jsonschema

    from gpu_platform.admission.kueue_export import kueue_manifests
    from tests.k8s.kueue_resolve import resolve

    _service, job = render_workload_manifests(gang, "h100-ondemand", k8s_policy)
    exported = kueue_manifests(k8s_policy)
    res = resolve(job, exported)
    assert res.flavors == ["h100-ondemand"]
    flavor = next(m for m in exported if m["kind"] == "ResourceFlavor" and m["metadata"]["name"] == "h100-ondemand")
    topology = next(m for m in exported if m["kind"] == "Topology")
    assert flavor["spec"]["topologyName"] == topology["metadata"]["name"]
    level = job["spec"]["template"]["metadata"]["annotations"][TAS_PREFERRED]
    assert level in [lv["nodeLabel"] for lv in topology["spec"]["levels"]]

    workload = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": f"job-{job['metadata']['name']}", "namespace": job["metadata"]["namespace"]},
        "spec": {
            "queueName": job["metadata"]["labels"][KUEUE_QUEUE_NAME],
            "podSets": [
                {
                    "name": "main",
                    "count": job["spec"]["parallelism"],
                    "template": job["spec"]["template"],
                    "topologyRequest": {
                        "preferred": level,
                        "podIndexLabel": "batch.kubernetes.io/job-completion-index",
                    },
                }
            ],
        },
    }
    crd = yaml.safe_load((ROOT / "tests" / "fixtures" / "kueue-crds" / "kueue.x-k8s.io_workloads.yaml").read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1beta2"]
    jsonschema.Draft7Validator(version["schema"]["openAPIV3Schema"]).validate(workload)
    assert workload["spec"]["podSets"][0]["count"] == 2
