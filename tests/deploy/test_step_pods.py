"""The run and step pods the chart's Dagster would create, checked against what the deployment
path puts in their namespaces: every account, ConfigMap, Secret and claim a pod names exists there.

No cluster here, so the pods are built as dagster-k8s builds them, by its own code: the run
launcher's container context as the official chart configures it (helm/dagster in
dagster-io/dagster, templates/helpers/instance/_run-launcher.tpl and the chart's shared env:
`service_account_name`, `env_config_maps: [<fullname>-pipeline-env, ...]`, `env_secrets`,
`image_pull_secrets`, `postgres_password_secret`), merged with the code location's container
context as `includeConfigInLaunchedRuns` hands it over (charts/dagster-user-deployments/templates/
helpers/_helpers.tpl `dagsterUserDeployments.k8sContainerContext`, parsed by dagster-k8s's
`K8sContainerContext.create_from_config`), then, for a step, with the gate's executor config
(`executor_config_for`) as `K8sStepHandler._get_container_context` merges them, and built with
`construct_dagster_k8s_job`. What each namespace holds comes from the rendered tree (objects) and
the printed commands (the operator's Secrets); the chart makes its own ConfigMaps in the Dagster
namespace only.
"""

from __future__ import annotations

import re
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from click.testing import CliRunner
from dagster_k8s.container_context import K8sContainerContext
from dagster_k8s.job import DagsterK8sJobConfig, UserDefinedDagsterK8sConfig, construct_dagster_k8s_job
from kubernetes.client import ApiClient

from gpu_platform.cli.app import main
from gpu_platform.cluster.jobs import (
    STEP_SERVICE_ACCOUNT,
    WorkVolume,
    executor_config_for,
    resolve_flavor,
    workload_step,
)
from gpu_platform.deploy.tree import KUSTOMIZATION, chart_fullname
from gpu_platform.policy import load_policy
from gpu_platform.requests.model import validate_request_file

ROOT = Path(__file__).resolve().parents[2]
REQUESTS = [ROOT / "examples" / "requests" / "release_eval.yaml", ROOT / "examples" / "distributed" / "candidate_train_2x8.yaml"]
ARGS = ["--image", "registry.example.com/ml/gpu-platform:2026.12.1", "--postgres-host", "pg.example.internal",
        "--image-pull-secret", "regcred"]


@pytest.fixture(scope="module")
def deployment(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("deploy")
    result = CliRunner().invoke(main, ["deploy", "render", "--out", str(out / "tree"),
                                       "--helm-values", str(out / "values.yaml"), *ARGS])
    assert result.exit_code == 0, result.output
    kustomization = yaml.safe_load((out / "tree" / KUSTOMIZATION).read_text())
    docs = [yaml.safe_load((out / "tree" / n).read_text()) for n in kustomization["resources"]]
    return {"docs": docs, "values": yaml.safe_load((out / "values.yaml").read_text()), "commands": result.stdout}


def _in(docs: list[dict], kind: str) -> set[tuple[str, str]]:
    return {(d["metadata"].get("namespace"), d["metadata"]["name"]) for d in docs if d["kind"] == kind}


def operator_secrets(commands: str) -> set[tuple[str, str]]:
    """(namespace, Secret) the printed commands create: `for ns in ...; do kubectl -n "$ns"
    create secret <type> NAME ...; done`."""
    out: set[tuple[str, str]] = set()
    for loop in re.finditer(r"for ns in ([^;]+); do\n(.*?)\ndone", commands, re.S):
        names = re.findall(r'kubectl -n "\$ns" create secret \S+ (\S+)', loop.group(2))
        out |= {(ns, name) for ns in loop.group(1).split() for name in names}
    return out


def chart_contexts(values: dict) -> tuple[K8sContainerContext, DagsterK8sJobConfig]:
    """The run launcher's context merged with the code location's, and the launcher's job config,
    as the chart renders them for a release named `dagster` in the values' namespace."""
    launcher = values["runLauncher"]["config"]["k8sRunLauncher"]
    sa = values["global"]["serviceAccountName"]
    release_ns = launcher["jobNamespace"]
    fullname = chart_fullname("dagster")
    run_launcher = K8sContainerContext(
        image_pull_policy=launcher["imagePullPolicy"],
        image_pull_secrets=values["imagePullSecrets"],
        service_account_name=sa,
        env_config_maps=[f"{fullname}-pipeline-env", *(c["name"] for c in launcher.get("envConfigMaps", []))],
        env_secrets=[s["name"] for s in launcher.get("envSecrets", [])],
        namespace=release_ns,
    )
    users = values["dagster-user-deployments"]
    (code,) = users["deployments"]
    assert code["includeConfigInLaunchedRuns"] == {"enabled": True}
    code_context = K8sContainerContext.create_from_config({"k8s": {
        "image_pull_policy": code["image"]["pullPolicy"],
        "image_pull_secrets": users["imagePullSecrets"],
        "env_config_maps": [f"{chart_fullname('dagster', 'dagster-user-deployments')}-{code['name']}-user-env"],
        "env_secrets": [s["name"] for s in code["envSecrets"]],
        "volume_mounts": code.get("volumeMounts", []),
        "volumes": code.get("volumes", []),
        "namespace": release_ns,
        "service_account_name": sa,
        "env": code["env"],
        "run_k8s_config": {"pod_spec_config": {"automount_service_account_token": True}},
    }})
    job_config = DagsterK8sJobConfig(
        job_image=f"{code['image']['repository']}:{code['image']['tag']}",
        dagster_home="/opt/dagster/dagster_home",
        instance_config_map=f"{fullname}-instance",
        postgres_password_secret=values["global"]["postgresqlSecretName"],
    )
    return run_launcher.merge(code_context), job_config


def _pod_refs(job: dict) -> dict[str, set[str]]:
    spec = job["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    return {
        "ServiceAccount": {spec["serviceAccountName"]},
        "ConfigMap": {e["configMapRef"]["name"] for e in container.get("envFrom", []) if "configMapRef" in e},
        "Secret": {e["secretRef"]["name"] for e in container.get("envFrom", []) if "secretRef" in e}
        | {e["valueFrom"]["secretKeyRef"]["name"] for e in container.get("env", []) if "secretKeyRef" in (e.get("valueFrom") or {})}
        | {s["name"] for s in spec.get("imagePullSecrets", [])},
        "PersistentVolumeClaim": {v["persistentVolumeClaim"]["claimName"] for v in spec.get("volumes", [])
                                  if "persistentVolumeClaim" in v},
    }


def _build(context: K8sContainerContext, job_config: DagsterK8sJobConfig, name: str) -> dict:
    job = construct_dagster_k8s_job(job_config=job_config, args=["dagster", "api", "execute_step"], job_name=name,
                                    pod_name=name, component="step_worker", user_defined_k8s_config=context.run_k8s_config)
    manifest = ApiClient().sanitize_for_serialization(job)
    manifest["metadata"]["namespace"] = context.namespace
    kubernetes_validate.validate(manifest, "1.31.0", strict=True)
    spec = manifest["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    names = [v["name"] for v in spec.get("volumes", [])]
    paths = [m["mountPath"] for m in container.get("volumeMounts", [])]
    assert len(names) == len(set(names)) and len(paths) == len(set(paths)), (names, paths)  # one mount of the claim
    return manifest


def _assert_present(manifest: dict, deployment: dict, chart_made: set[tuple[str, str]] = frozenset()) -> None:
    ns = manifest["metadata"]["namespace"]
    docs = deployment["docs"]
    have = {
        "ServiceAccount": _in(docs, "ServiceAccount"),
        "ConfigMap": _in(docs, "ConfigMap") | set(chart_made),
        "Secret": operator_secrets(deployment["commands"]),
        "PersistentVolumeClaim": _in(docs, "PersistentVolumeClaim"),
    }
    for kind, names in _pod_refs(manifest).items():
        missing = {n for n in names if (ns, n) not in have[kind]}
        assert not missing, f"{manifest['metadata']['name']} in {ns} names {kind} {sorted(missing)}, which nothing creates there"


def test_the_run_pod_finds_everything_it_names_in_the_dagster_namespace(deployment) -> None:
    context, job_config = chart_contexts(deployment["values"])
    run = _build(context, job_config, "dagster-run-5f1c9a1e")
    assert run["metadata"]["namespace"] == "dagster"
    assert run["spec"]["template"]["spec"]["serviceAccountName"] == "dagster"
    chart_made = {("dagster", "dagster-pipeline-env"), ("dagster", "dagster-dagster-user-deployments-gpu-platform-user-env")}
    _assert_present(run, deployment, chart_made)
    assert _pod_refs(run)["PersistentVolumeClaim"] == {"gpu-platform-work"}  # the run pod mounts the work claim


@pytest.mark.parametrize("path", REQUESTS, ids=[p.stem for p in REQUESTS])
def test_every_step_pod_finds_everything_it_names_in_its_team_namespace(path: Path, deployment) -> None:
    policy = load_policy()
    req = validate_request_file(path, policy).model_copy(update={"request_id": f"req-20261129-{path.stem[:10]}"})
    flavor = resolve_flavor(req, policy).name
    executor = executor_config_for(req, flavor, policy, 1, WorkVolume("gpu-platform-work"))
    assert executor["service_account_name"] == STEP_SERVICE_ACCOUNT
    context, job_config = chart_contexts(deployment["values"])
    context = context.merge(K8sContainerContext(
        namespace=executor["job_namespace"], service_account_name=executor["service_account_name"],
        run_k8s_config=UserDefinedDagsterK8sConfig.from_dict(executor["step_k8s_config"]),
    ))
    steps = {"check_step": {}, workload_step(req): executor["per_step_k8s_config"][workload_step(req)]}
    for step, per_step in steps.items():
        step_context = context.merge(K8sContainerContext(run_k8s_config=UserDefinedDagsterK8sConfig.from_dict(per_step)))
        manifest = _build(step_context, job_config, f"dagster-step-{step.replace('_', '-')}")
        assert manifest["metadata"]["namespace"] == policy.team(req.team).namespace != "dagster"
        assert manifest["spec"]["template"]["spec"]["serviceAccountName"] == STEP_SERVICE_ACCOUNT
        _assert_present(manifest, deployment)
        assert _pod_refs(manifest)["Secret"] == {"dagster-postgresql-secret", "gpu-platform-env", "regcred"}
