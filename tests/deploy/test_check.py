"""`gpu-platform deploy check` through the real kubernetes client against an API server double
(tests/deploy/fake_kube.py) holding clusters in the states an operator meets: ready, bare (no
Kueue, nothing applied), Kueue's webhook down, nodes without the labels, RBAC of an older tree,
Secrets missing, no server at all. Each failure is one line naming the object and the fix.
The same check on a real cluster: `test_deploy_check_on_a_real_cluster` (`-m cluster`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpu_platform.cli.app import main
from gpu_platform.deploy.check import KUEUE_PLURALS, read_tree
from gpu_platform.deploy.steps import KUEUE_VERSION
from tests.deploy.fake_kube import Cluster, kueue_crds, kueue_deployment, node, serve
from tests.k8s.fake_apiserver import write_kubeconfig

ARGS = ["--image", "registry.example.com/ml/gpu-platform:2026.12.1", "--postgres-host", "pg.example.internal"]


@pytest.fixture(scope="module")
def tree_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("check")
    result = CliRunner().invoke(main, ["deploy", "render", "--out", str(out / "tree"),
                                       "--helm-values", str(out / "values.yaml"), *ARGS])
    assert result.exit_code == 0, result.output
    return out / "tree"


def ready(tree_dir: Path) -> Cluster:
    """Kueue installed and answering, the tree applied, nodes labelled as the flavors select
    (with their Topology's levels), the operator's Secrets in every namespace."""
    tree = read_tree(tree_dir)
    levels = {t["metadata"]["name"]: [lv["nodeLabel"] for lv in t["spec"]["levels"]] for t in tree.of_kind("Topology")}
    nodes = []
    for flavor in tree.of_kind("ResourceFlavor"):
        name = f"{flavor['metadata']['name']}-0"
        topo = {lv: "zone-a" for lv in levels.get(flavor["spec"].get("topologyName"), []) if lv != "kubernetes.io/hostname"}
        nodes.append(node(name, {**flavor["spec"]["nodeLabels"], **topo}))
    namespaces = {o["metadata"]["name"] for o in tree.of_kind("Namespace")}
    s = tree.settings
    secrets = {(ns, name): [key] for ns in namespaces
               for name, key in ((s.postgres_secret, "postgresql-password"), (s.env_secret, "GPU_PLATFORM_LEDGER_URL"))}
    return Cluster(crds=kueue_crds(), deployments=[kueue_deployment(args=("--feature-gates=PriorityBoost=true",))],
                   webhooks=("kueue-validating-webhook-configuration", "kueue-mutating-webhook-configuration"),
                   namespaces=namespaces | {"default", "kube-system", "kueue-system"}, nodes=nodes,
                   objects=list(tree.objects), secrets=secrets)


def run_check(cluster: Cluster, tree_dir: Path, tmp_path: Path) -> tuple[int, list[str]]:
    with serve(cluster) as url:
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", url)
        result = CliRunner().invoke(main, ["deploy", "check", "--kubeconfig", str(kubeconfig), "--tree", str(tree_dir)])
    lines = result.output.splitlines()
    for line in lines:
        if line.startswith("FAIL"):
            assert "; fix: " in line, line  # every failure says what to do
    return result.exit_code, lines


def fails(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("FAIL")]


def test_a_ready_cluster_passes_every_check(tree_dir, tmp_path) -> None:
    cluster = ready(tree_dir)
    code, lines = run_check(cluster, tree_dir, tmp_path)
    assert code == 0 and not fails(lines), "\n".join(fails(lines))
    tree = read_tree(tree_dir)
    assert f"ok    dry-run: {len(tree.objects)} object(s): accepted" in "\n".join(lines)
    assert sum(r.startswith("PATCH ") for r in cluster.requests) == len(tree.objects)  # every object dry-run
    assert any(f"runs {KUEUE_VERSION}" in line for line in lines)
    assert lines[-1].startswith("deploy check: 0 failed")


def test_a_bare_cluster_names_each_missing_piece_once(tree_dir, tmp_path) -> None:
    tree = read_tree(tree_dir)
    bare = Cluster(namespaces={"default", "kube-system"},
                   nodes=[node("gpu-node-1", {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})])
    code, lines = run_check(bare, tree_dir, tmp_path)
    failed = fails(lines)
    assert code == 1
    kinds = sorted({o["kind"] for o in tree.objects if o["apiVersion"].startswith("kueue.x-k8s.io/")} | {"Workload"})
    crds = [f for f in failed if "CustomResourceDefinition" in f and "not installed" in f and KUEUE_VERSION in f]
    assert len(crds) == len(kinds)  # one line per CRD, with the pinned install
    for kind in kinds:
        assert sum(f"CustomResourceDefinition {KUEUE_PLURALS[kind]}.kueue.x-k8s.io:" in f for f in crds) == 1
    assert any("Deployment kueue-system/kueue-controller-manager: not found" in f for f in failed)
    assert any("ValidatingWebhookConfiguration kueue-validating-webhook-configuration: not found" in f for f in failed)
    # the cluster-scoped Kueue objects are not dry-run one by one: one line names their kinds
    assert sum("not dry-run: their CRDs are missing" in f for f in failed) == 1
    # the namespaces the tree creates do not exist yet: their objects are counted, not failed
    assert any(line.startswith("ok    dry-run: Namespace team-perception: not there yet") for line in lines)
    for flavor in tree.of_kind("ResourceFlavor"):
        assert any(f"ResourceFlavor {flavor['metadata']['name']}: no node carries" in f and "kubectl label node" in f
                   for f in failed)
    assert any("ServiceAccount dagster/dagster: may not" in f and "cluster-wide" in f for f in failed)
    assert any("ServiceAccount team-perception/gpu-platform-step: may not create services" in f for f in failed)
    assert any(f.startswith("FAIL  secrets: Secret team-perception/dagster-postgresql-secret: missing") for f in failed)
    assert lines[-1].startswith(f"deploy check: {len(failed)} failed")


def test_a_webhook_that_does_not_answer_is_one_line(tree_dir, tmp_path) -> None:
    cluster = ready(tree_dir)
    cluster.webhook_down = True
    code, lines = run_check(cluster, tree_dir, tmp_path)
    (failed,) = fails(lines)
    assert code == 1
    assert failed.startswith("FAIL  dry-run: Kueue webhook: does not answer: Internal error occurred: failed calling webhook")
    assert "kubectl -n kueue-system rollout status deployment/kueue-controller-manager" in failed


def test_nodes_without_the_flavor_or_topology_labels(tree_dir, tmp_path) -> None:
    cluster = ready(tree_dir)
    tree = read_tree(tree_dir)
    topo_flavor = next(f for f in tree.of_kind("ResourceFlavor") if f["spec"].get("topologyName"))
    name = topo_flavor["metadata"]["name"]
    cluster.nodes = [n for n in cluster.nodes if n["metadata"]["name"] != f"{name}-0"]
    cluster.nodes.append(node(f"{name}-0", dict(topo_flavor["spec"]["nodeLabels"])))  # no zone label
    def unique(flavor: dict) -> bool:  # no other flavor's node carries this flavor's labels
        return not any(all(n["metadata"]["labels"].get(k) == v for k, v in flavor["spec"]["nodeLabels"].items())
                       for n in cluster.nodes if n["metadata"]["name"] != f"{flavor['metadata']['name']}-0")
    other = next(f for f in tree.of_kind("ResourceFlavor") if not f["spec"].get("topologyName") and unique(f))
    cluster.nodes = [n for n in cluster.nodes if n["metadata"]["name"] != f"{other['metadata']['name']}-0"]
    code, lines = run_check(cluster, tree_dir, tmp_path)
    failed = fails(lines)
    assert code == 1 and len(failed) == 2, failed
    assert any(f"ResourceFlavor {name}: 1 node(s) match, but not all carry the levels of Topology "
               f"{topo_flavor['spec']['topologyName']}: topology.kubernetes.io/zone" in f for f in failed)
    assert any(f"ResourceFlavor {other['metadata']['name']}: no node carries" in f for f in failed)


def test_a_tree_without_the_step_role_leaves_the_gang_step_without_rights(tree_dir, tmp_path) -> None:
    """The RBAC of a tree from before the step account: what the gang step needs is named."""
    cluster = ready(tree_dir)
    cluster.objects = [o for o in cluster.objects if o["metadata"]["name"] != "gpu-platform-step"]
    code, lines = run_check(cluster, tree_dir, tmp_path)
    failed = fails(lines)
    assert code == 1
    teams = read_tree(tree_dir).team_namespaces()
    assert len(failed) == len(teams)
    for ns in teams:
        assert any(f.startswith(f"FAIL  access: ServiceAccount {ns}/gpu-platform-step: may not create services, get services, "
                                f"delete services, create jobs.batch") and f"in {ns}; fix: kubectl apply -k" in f
                   for f in failed)


def test_secrets_missing_or_without_their_key(tree_dir, tmp_path) -> None:
    cluster = ready(tree_dir)
    del cluster.secrets[("team-perception", "dagster-postgresql-secret")]
    cluster.secrets[("dagster", "gpu-platform-env")] = ["LEDGER"]
    code, lines = run_check(cluster, tree_dir, tmp_path)
    failed = fails(lines)
    assert code == 1 and len(failed) == 2, failed
    assert ('FAIL  secrets: Secret team-perception/dagster-postgresql-secret: missing: pods in this namespace read it; '
            'fix: kubectl -n team-perception create secret generic dagster-postgresql-secret '
            '--from-literal=postgresql-password="$DAGSTER_PG_PASSWORD"') in failed
    assert any("Secret dagster/gpu-platform-env: has no key GPU_PLATFORM_LEDGER_URL" in f for f in failed)


def test_an_unreachable_cluster_is_one_line(tree_dir, tmp_path) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", "http://127.0.0.1:9")
    result = CliRunner().invoke(main, ["deploy", "check", "--kubeconfig", str(kubeconfig), "--tree", str(tree_dir)])
    assert result.exit_code == 1
    assert result.output.strip().count("\n") == 0 and "deploy check: cannot reach the cluster" in result.output


@pytest.mark.cluster
def test_deploy_check_on_a_real_cluster(tree_dir) -> None:
    """Opt-in (`make test-cluster`, KUBECONFIG of a cluster with Kueue): the check runs read-only
    against a real API server and Kueue webhook; Kueue's pieces pass; every failure (the tree
    need not be applied there) is one line with its fix."""
    kubeconfig = os.environ.get("KUBECONFIG", "")
    if not kubeconfig:
        if os.environ.get("GPU_PLATFORM_REQUIRE_CLUSTER"):
            pytest.fail("KUBECONFIG is not set")
        pytest.skip("needs a Kubernetes cluster with Kueue; set KUBECONFIG and run: make test-cluster")
    result = CliRunner().invoke(main, ["deploy", "check", "--kubeconfig", kubeconfig, "--tree", str(tree_dir)])
    lines = result.output.splitlines()
    assert lines and lines[-1].startswith("deploy check: "), result.output
    assert not [line for line in fails(lines) if line.startswith(("FAIL  kueue:", "FAIL  dry-run: Kueue webhook"))], result.output
    assert all("; fix: " in line for line in fails(lines))


def test_kueue_without_the_priority_boost_gate_fails_where_lanes_age(tree_dir, tmp_path) -> None:
    """The packaged policy's lanes age: the gate sets `kueue.x-k8s.io/priority-boost`, which Kueue
    reads only with its PriorityBoost feature gate on (alpha, off by default)."""
    from gpu_platform.deploy.check import feature_gates_of

    for args, state in (((), "not set (off by default)"), (("--feature-gates=PriorityBoost=false",), "off"),
                        (("--feature-gates=PriorityBoost=true", "--feature-gates=PriorityBoost=false"), "off")):
        cluster = ready(tree_dir)
        cluster.deployments = [kueue_deployment(args=args)]
        code, lines = run_check(cluster, tree_dir, tmp_path)
        (failed,) = fails(lines)
        assert code == 1 and f"feature gate PriorityBoost {state}" in failed, failed
        assert "patch deployment kueue-controller-manager" in failed and "--feature-gates=PriorityBoost=true" in failed
    code, lines = run_check(ready(tree_dir), tree_dir, tmp_path)
    assert code == 0 and any("feature gate PriorityBoost on" in line for line in lines)
    # several gates in one argument, or the value as the next argument
    dep = kueue_deployment(args=("--feature-gates=TopologyAwareScheduling=true,PriorityBoost=true",))
    assert feature_gates_of(dep) == {"TopologyAwareScheduling": True, "PriorityBoost": True}
    assert feature_gates_of(kueue_deployment(args=("--feature-gates", "PriorityBoost=true"))) == {"PriorityBoost": True}


def test_a_policy_without_aging_needs_no_feature_gate(tree_dir, tmp_path) -> None:
    import yaml

    from gpu_platform.policy import default_policy_path

    raw = yaml.safe_load(default_policy_path().read_text())
    for lane in raw["lanes"].values():
        if lane.get("targets"):
            lane["targets"]["boost_after"] = None
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump(raw))
    cluster = ready(tree_dir)
    cluster.deployments = [kueue_deployment()]
    with serve(cluster) as url:
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", url)
        result = CliRunner().invoke(main, ["deploy", "check", "--kubeconfig", str(kubeconfig), "--tree", str(tree_dir),
                                           "--policy", str(policy)])
    assert result.exit_code == 0, result.output
    assert "feature gate" not in result.output
