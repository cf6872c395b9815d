"""`gpu-platform deploy render`: one kustomize tree a fresh cluster with Kueue takes in one apply.

No cluster here: every core object is validated against the Kubernetes 1.31 schema
(`kubernetes-validate`), every Kueue object against the CRDs in tests/fixtures/kueue-crds/, and
the tree is checked for what `kubectl apply -k` needs (every file listed once, namespaces before
what lives in them). The RBAC is checked verb by verb for least privilege.
"""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from click.testing import CliRunner
from dagster._core.instance.config import dagster_instance_config

from gpu_platform.cli.app import main
from gpu_platform.cluster.jobs import STEP_SERVICE_ACCOUNT
from gpu_platform.cluster.names import local_queue_name
from gpu_platform.deploy.tree import KUSTOMIZATION
from gpu_platform.policy import load_policy
from tests.admission.test_export import _validate as validate_kueue


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> tuple[Path, list[dict]]:
    out = tmp_path_factory.mktemp("deploy") / "tree"
    result = CliRunner().invoke(main, ["deploy", "render", "--out", str(out)])
    assert result.exit_code == 0, result.output
    kustomization = yaml.safe_load((out / KUSTOMIZATION).read_text())
    docs = [yaml.safe_load((out / name).read_text()) for name in kustomization["resources"]]
    return out, docs


def _key(d: dict) -> tuple:
    return d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]


def test_kustomization_lists_every_file_once_namespaces_first(tree) -> None:
    out, docs = tree
    kustomization = yaml.safe_load((out / KUSTOMIZATION).read_text())
    assert kustomization["kind"] == "Kustomization"
    files = sorted(p.name for p in out.glob("*.yaml") if p.name != KUSTOMIZATION)
    assert sorted(kustomization["resources"]) == files  # nothing applied twice, nothing left out
    assert len({_key(d) for d in docs}) == len(docs)
    kinds = [d["kind"] for d in docs]
    last_namespace = max(i for i, k in enumerate(kinds) if k == "Namespace")
    assert all(k == "Namespace" for k in kinds[: last_namespace + 1])
    namespaces = {d["metadata"]["name"] for d in docs if d["kind"] == "Namespace"}
    assert {d["metadata"]["namespace"] for d in docs if "namespace" in d["metadata"]} <= namespaces
    assert "Secret" not in kinds  # a reference, never a value


def test_every_object_validates(tree) -> None:
    _, docs = tree
    for d in docs:
        if d["apiVersion"].startswith("kueue.x-k8s.io/"):
            validate_kueue(d)
        else:
            kubernetes_validate.validate(d, "1.31.0", strict=True)


def test_every_team_namespace_has_its_queues_volume_and_labels(tree) -> None:
    _, docs = tree
    policy = load_policy()
    by = {_key(d): d for d in docs}
    for team in policy.teams.values():
        ns = by[("Namespace", None, team.namespace)]
        assert ns["metadata"]["labels"]["gpu-platform.io/team"]
        for lane in policy.lanes:
            assert ("LocalQueue", team.namespace, local_queue_name(lane)) in by
        pvc = by[("PersistentVolumeClaim", team.namespace, "gpu-platform-work")]
        assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]


def _allowed(rules: list[dict], group: str, resource: str) -> set[str]:
    return {v for r in rules if group in r["apiGroups"] and resource in r["resources"] for v in r["verbs"]}


def test_rbac_grants_what_the_gate_and_executor_need_and_nothing_else(tree) -> None:
    _, docs = tree
    policy = load_policy()
    roles = {(d["metadata"].get("namespace"), d["metadata"]["name"]): d for d in docs if d["kind"] in ("Role", "ClusterRole")}
    bindings = [d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")]
    launcher = [{"kind": "ServiceAccount", "name": "dagster", "namespace": "dagster"}]
    for b in bindings:
        ns = b["metadata"].get("namespace")
        if b["roleRef"]["name"] == "gpu-platform-step":  # the step account, bound in its own namespace only
            assert b["subjects"] == [{"kind": "ServiceAccount", "name": STEP_SERVICE_ACCOUNT, "namespace": ns}]
        else:
            assert b["subjects"] == launcher
    for rules in (r["rules"] for r in roles.values()):
        for r in rules:
            assert "*" not in r["verbs"] and "*" not in r["resources"] and "*" not in r["apiGroups"]
            assert "secrets" not in r["resources"]
    for ns in {t.namespace for t in policy.teams.values()}:
        rules = roles[(ns, "gpu-platform-launcher")]["rules"]
        assert _allowed(rules, "batch", "jobs") == {"create", "delete", "get", "list", "watch"}  # step Jobs
        assert _allowed(rules, "", "pods") == {"get", "list", "watch"}
        assert _allowed(rules, "", "pods/log") == {"get"}
        assert _allowed(rules, "", "events") == {"get", "list", "watch"}  # read-back
        # read-back, and the priority boost of waiting Workloads (cluster.aging)
        assert _allowed(rules, "kueue.x-k8s.io", "workloads") == {"get", "list", "watch", "patch"}
        assert _allowed(rules, "kueue.x-k8s.io", "localqueues") == {"get", "list", "watch"}
        assert _allowed(rules, "", "configmaps") == set()
        assert _allowed(rules, "", "services") == set()
        # the gang step, as the step account (docs/distributed-training.md, The step that runs a gang)
        step = roles[(ns, "gpu-platform-step")]["rules"]
        assert _allowed(step, "", "services") == {"create", "get", "delete"}
        assert _allowed(step, "batch", "jobs") == {"create", "get", "delete"}
        assert _allowed(step, "batch", "jobs/status") == {"get"}
        assert _allowed(step, "", "pods") == {"get", "list", "delete"}
        assert _allowed(step, "", "pods/log") == {"get"}
        assert {res for r in step for res in r["resources"]} == {"services", "jobs", "jobs/status", "pods", "pods/log"}
    dagster = roles[("dagster", "gpu-platform-launcher")]["rules"]
    assert _allowed(dagster, "batch", "jobs") == {"create", "delete", "get", "list", "watch"}  # run Jobs
    assert _allowed(dagster, "kueue.x-k8s.io", "workloads") == set()
    (cluster,) = [r for (ns, _), r in roles.items() if r["kind"] == "ClusterRole"]
    assert all(set(r["verbs"]) <= {"get", "list"} for r in cluster["rules"])  # no cluster-wide write
    assert {res for r in cluster["rules"] for res in r["resources"]} == {"nodes", "pods", "persistentvolumes"}


def test_every_namespace_holds_the_accounts_its_pods_run_as(tree) -> None:
    """Step Jobs name `STEP_SERVICE_ACCOUNT` (executor_config_for); it exists in every team
    namespace, the launcher's in the Dagster namespace."""
    _, docs = tree
    accounts = {(d["metadata"]["namespace"], d["metadata"]["name"]) for d in docs if d["kind"] == "ServiceAccount"}
    teams = {t.namespace for t in load_policy().teams.values()}
    assert accounts == {("dagster", "dagster")} | {(ns, STEP_SERVICE_ACCOUNT) for ns in teams}


def test_the_work_claim_is_in_every_namespace_whose_pods_mount_it(tree) -> None:
    _, docs = tree
    claims = {d["metadata"]["namespace"]: d for d in docs if d["kind"] == "PersistentVolumeClaim"}
    assert set(claims) == {"dagster"} | {t.namespace for t in load_policy().teams.values()}
    assert all(c["spec"]["accessModes"] == ["ReadWriteMany"] and "storageClassName" not in c["spec"]
               for c in claims.values())


def test_the_storage_class_is_a_value(tmp_path) -> None:
    out = tmp_path / "tree"
    result = CliRunner().invoke(main, ["deploy", "render", "--out", str(out), "--storage-class", "nfs-rwx"])
    assert result.exit_code == 0, result.output
    claims = [yaml.safe_load(p.read_text()) for p in out.glob("persistentvolumeclaim-*.yaml")]
    assert claims and all(c["spec"]["storageClassName"] == "nfs-rwx" for c in claims)


def test_the_instance_configmap_is_a_postgres_k8s_instance(tree, tmp_path) -> None:
    _, docs = tree
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap"]
    assert cm["metadata"] == {**cm["metadata"], "name": "dagster-instance", "namespace": "dagster"}
    (tmp_path / "dagster.yaml").write_text(cm["data"]["dagster.yaml"])
    config, _ = dagster_instance_config(str(tmp_path))
    assert next(iter(config["storage"])) == "postgres"
    launcher = config["run_launcher"]["config"]
    assert launcher["postgres_password_secret"] == "dagster-postgresql-secret"
    assert (launcher["job_namespace"], launcher["service_account_name"]) == ("dagster", "dagster")


def test_no_work_claim_means_no_pvc(tmp_path) -> None:
    out = tmp_path / "tree"
    result = CliRunner().invoke(main, ["deploy", "render", "--out", str(out), "--work-claim", ""])
    assert result.exit_code == 0, result.output
    assert not list(out.glob("persistentvolumeclaim-*.yaml"))


def _kustomize(out: Path) -> list[dict] | None:
    """`kubectl kustomize DIR` (or a standalone `kustomize build DIR`), offline; None when neither
    is installed."""
    import shutil
    import subprocess

    if shutil.which("kubectl"):
        cmd = ["kubectl", "kustomize", str(out)]
    elif shutil.which("kustomize"):
        cmd = ["kustomize", "build", str(out)]
    else:
        return None
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def test_kustomize_renders_the_tree_offline_object_for_object(tree) -> None:
    """What `kubectl apply -k` sends: kustomize itself renders the tree, every object once, as
    written, Namespaces first."""
    out, docs = tree
    rendered = _kustomize(out)
    if rendered is None:
        pytest.skip("needs kubectl (kubectl kustomize) or kustomize on PATH; the structural check above stands in")
    assert sorted(map(_key, rendered)) == sorted(map(_key, docs))
    assert len(rendered) == len(docs)
    by = {_key(d): d for d in docs}
    for d in rendered:
        assert d == by[_key(d)]
    kinds = [d["kind"] for d in rendered]
    assert kinds[: kinds.count("Namespace")] == ["Namespace"] * kinds.count("Namespace")


# Keys of the official chart's values schema (dagster-io/dagster helm/dagster/schema/schema/charts:
# dagster/values.py and helm/dagster/values.yaml (rbacEnabled), subschema/{global_,service_account,postgresql,
# run_launcher,daemon,concurrency}.py,
# dagster_user_deployments/subschema/user_deployments.py; Apache-2.0), for the parts the values set.
CHART_KEYS = {
    (): {"dagsterWebserver", "dagster-user-deployments", "postgresql", "generatePostgresqlPasswordSecret",
         "generateCeleryConfigSecret", "rabbitmq", "redis", "flower", "ingress", "imagePullSecrets",
         "computeLogManager", "scheduler", "runLauncher", "pythonLogs", "dagsterDaemon", "busybox", "migrate",
         "telemetry", "serviceAccount", "global", "retention", "additionalInstanceConfig", "rbacEnabled",
         "concurrency"},
    ("global",): {"postgresqlSecretName", "dagsterHome", "serviceAccountName", "celeryConfigSecretName"},
    ("serviceAccount",): {"create", "name", "annotations"},
    ("postgresql",): {"image", "enabled", "postgresqlHost", "postgresqlUsername", "postgresqlPassword",
                      "postgresqlDatabase", "postgresqlParams", "postgresqlScheme", "service"},
    ("dagster-user-deployments",): {"enabled", "enableSubchart", "imagePullSecrets", "deployments"},
    ("dagster-user-deployments", "deployments", 0, "volumes", 0): {"name", "persistentVolumeClaim"},
    ("dagster-user-deployments", "deployments", 0, "volumeMounts", 0): {"name", "mountPath"},
    ("dagster-user-deployments", "deployments", 0): {
        "name", "image", "dagsterApiGrpcArgs", "codeServerArgs", "includeConfigInLaunchedRuns", "port", "env",
        "envConfigMaps", "envSecrets", "annotations", "nodeSelector", "affinity", "tolerations",
        "podSecurityContext", "securityContext", "resources", "livenessProbe", "readinessProbe", "startupProbe",
        "labels", "volumeMounts", "volumes", "schedulerName"},
    ("runLauncher",): {"type", "config"},
    ("runLauncher", "config", "k8sRunLauncher"): {
        "image", "imagePullPolicy", "jobNamespace", "loadInclusterConfig", "kubeconfigFile", "envConfigMaps",
        "envSecrets", "envVars", "volumeMounts", "volumes", "labels", "failPodOnRunFailure", "resources",
        "schedulerName", "securityContext", "runK8sConfig"},
    ("dagsterDaemon", "runCoordinator"): {"enabled", "type", "config"},
    ("concurrency",): {"enabled", "pools", "runs"},
    ("concurrency", "pools"): {"defaultLimit", "granularity", "opGranularityRunBuffer"},
    ("concurrency", "runs"): {"maxConcurrentRuns", "tagConcurrencyLimits"},
}
HELM_ARGS = ["--image", "registry.local/ml/gpu-platform:2026.12.1", "--postgres-host", "pg.dagster.svc"]


@pytest.fixture(scope="module")
def helm(tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("helm")
    result = CliRunner().invoke(
        main, ["deploy", "render", "--out", str(out / "tree"), "--helm-values", str(out / "values.yaml"), *HELM_ARGS]
    )
    assert result.exit_code == 0, result.output
    return out / "tree", yaml.safe_load((out / "values.yaml").read_text())


def test_helm_values_use_only_the_charts_keys(helm) -> None:
    _, values = helm
    for path, allowed in CHART_KEYS.items():
        node = values
        for part in path:
            node = node[part]
        assert set(node) <= allowed, (path, set(node) - allowed)


def test_helm_values_make_the_charts_instance_the_trees(helm) -> None:
    from gpu_platform.gate.instance_config import dagster_instance_yaml

    tree_dir, values = helm
    instance = dagster_instance_yaml(load_policy(), postgres=True, k8s=True)
    runs = values["concurrency"]["runs"]
    assert values["concurrency"]["enabled"] is True
    assert runs["maxConcurrentRuns"] == instance["concurrency"]["runs"]["max_concurrent_runs"]
    assert runs["tagConcurrencyLimits"] == instance["concurrency"]["runs"]["tag_concurrency_limits"]
    assert values["concurrency"]["pools"]["opGranularityRunBuffer"] == instance["concurrency"]["pools"]["op_granularity_run_buffer"]
    launcher = values["runLauncher"]
    assert launcher["type"] == "K8sRunLauncher"
    assert launcher["config"]["k8sRunLauncher"]["jobNamespace"] == instance["run_launcher"]["config"]["job_namespace"]
    # the tree's ServiceAccount and RBAC, the operator's Secrets: the chart creates neither
    kustomization = yaml.safe_load((tree_dir / KUSTOMIZATION).read_text())
    docs = [yaml.safe_load((tree_dir / n).read_text()) for n in kustomization["resources"]]
    (sa,) = [d for d in docs if d["kind"] == "ServiceAccount" and d["metadata"]["namespace"] == "dagster"]
    assert values["serviceAccount"] == {"create": False, "name": sa["metadata"]["name"]}
    assert values["global"]["serviceAccountName"] == sa["metadata"]["name"] and values["rbacEnabled"] is False
    assert values["global"]["postgresqlSecretName"] == instance["run_launcher"]["config"]["postgres_password_secret"]
    assert values["generatePostgresqlPasswordSecret"] is False and values["postgresql"]["enabled"] is False
    assert "postgresqlPassword" not in values["postgresql"]  # a Secret reference, never a value
    (code,) = values["dagster-user-deployments"]["deployments"]
    assert code["dagsterApiGrpcArgs"] == ["--module-name", "assets.definitions", "--attribute", "defs"]
    workspace = yaml.safe_load((Path(__file__).resolve().parents[2] / "workspace.yaml").read_text())
    module = workspace["load_from"][0]["python_module"]
    assert (module["module_name"], module["attribute"]) == ("assets.definitions", "defs")  # this code location
    assert (code["image"]["repository"], code["image"]["tag"]) == ("registry.local/ml/gpu-platform", "2026.12.1")
    env = {e["name"]: e["value"] for e in code["env"]}
    assert env["GPU_PLATFORM_ENV"] == "prod" and code["envSecrets"] == [{"name": "gpu-platform-env"}]
    assert env["GPU_PLATFORM_WORK_CLAIM"] == "gpu-platform-work" and env["GPU_PLATFORM_WORK_ROOT"] == "/var/lib/gpu-platform/work"
    # the gate's pod (the code-location server evaluates the admission sensor) mounts the work claim
    assert code["volumes"] == [{"name": "gpu-platform-work", "persistentVolumeClaim": {"claimName": "gpu-platform-work"}}]
    assert code["volumeMounts"] == [{"name": "gpu-platform-work", "mountPath": "/var/lib/gpu-platform/work"}]


def test_with_helm_values_the_tree_leaves_the_instance_to_the_chart(helm) -> None:
    """No instance ConfigMap (the chart's); in each team namespace only the chart's env ConfigMaps
    that every step pod's envFrom names (the chart makes them in the Dagster namespace alone)."""
    tree_dir, _ = helm
    kustomization = yaml.safe_load((tree_dir / KUSTOMIZATION).read_text())
    docs = [yaml.safe_load((tree_dir / n).read_text()) for n in kustomization["resources"]]
    maps = {(d["metadata"]["namespace"], d["metadata"]["name"]) for d in docs if d["kind"] == "ConfigMap"}
    teams = {t.namespace for t in load_policy().teams.values()}
    assert maps == {(ns, name) for ns in teams
                    for name in ("dagster-pipeline-env", "dagster-dagster-user-deployments-gpu-platform-user-env")}
    assert sorted(kustomization["resources"]) == sorted(p.name for p in tree_dir.glob("*.yaml") if p.name != KUSTOMIZATION)


def test_helm_values_need_an_image_and_a_database(tmp_path) -> None:
    args = ["deploy", "render", "--out", str(tmp_path / "t"), "--helm-values", str(tmp_path / "v.yaml")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2
    assert "--image is required with --helm-values" in result.output
    assert "--postgres-host is required with --helm-values" in result.output
    result = CliRunner().invoke(main, [*args, "--image", "registry.local/gpu-platform", "--postgres-host", "pg"])
    assert result.exit_code == 2 and "expected repository:tag" in result.output
    assert not (tmp_path / "v.yaml").exists() and not (tmp_path / "t").exists()


QUANTITY_KEYS = {"nominalQuota", "borrowingLimit", "lendingLimit", "weight", "storage"}


def _quantities(node, path=()):
    if isinstance(node, dict):
        for k, v in node.items():
            if k in QUANTITY_KEYS and not isinstance(v, dict | list):
                yield (*path, k), v
            else:
                yield from _quantities(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _quantities(v, (*path, i))


def test_every_quantity_is_the_string_the_api_server_stores(tree) -> None:
    """What Kueue's webhook and the API server write back is Go's canonical Quantity string; the
    tree writes exactly that, so a second `kubectl apply -k` has nothing to patch."""
    from kubernetes.utils import parse_quantity

    from gpu_platform.admission.kueue_export import quantity

    _, docs = tree
    found = [(d["kind"], p, v) for d in docs for p, v in _quantities(d.get("spec", {}))]
    assert any(p[-1] == "nominalQuota" for _, p, _ in found)
    for kind, path, value in found:
        assert isinstance(value, str), (kind, path, value)
        if path[-1] != "storage":
            resource = "memory" if value.endswith("i") else "other"
            amount = float(parse_quantity(value)) / (2**30 if resource == "memory" else 1)
            assert quantity(resource, amount) == value, (kind, path, value)
