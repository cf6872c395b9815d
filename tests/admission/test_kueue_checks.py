"""Kueue's admission checks from the policy: ProvisioningRequest (autoscaling from zero) and
MultiKueue (sites), validated against the v1beta2 CRDs in tests/fixtures/kueue-crds/ and the
rules Kueue's ClusterQueue controller applies (pkg/cache/scheduler/clusterqueue.go @ ff69552e:
one MultiKueue check per ClusterQueue, never per flavor, never beside a ProvisioningRequest check)."""

from __future__ import annotations

from pathlib import Path

import jsonschema
import pytest
import yaml
from click.testing import CliRunner

from gpu_platform.admission.kueue_checks import (
    MULTIKUEUE_CONTROLLER,
    PROVISIONING_CHECK,
    PROVISIONING_CONTROLLER,
    check_manifests,
    multikueue_check_name,
)
from gpu_platform.admission.kueue_export import kueue_manifests
from gpu_platform.cli import main
from gpu_platform.cluster.names import LABEL_SITE
from gpu_platform.policy import load_policy, parse_policy
from gpu_platform.policy.loading import default_policy_path

ROOT = Path(__file__).resolve().parents[2]
CRDS = ROOT / "tests" / "fixtures" / "kueue-crds"
NATIVE = ROOT / "examples" / "kueue-native"
CHECK_KINDS = {
    "AdmissionCheck": "kueue.x-k8s.io_admissionchecks.yaml",
    "MultiKueueCluster": "kueue.x-k8s.io_multikueueclusters.yaml",
    "MultiKueueConfig": "kueue.x-k8s.io_multikueueconfigs.yaml",
    "ProvisioningRequestConfig": "kueue.x-k8s.io_provisioningrequestconfigs.yaml",
}
ALL_KINDS = {
    **CHECK_KINDS,
    "ClusterQueue": "kueue.x-k8s.io_clusterqueues.yaml",
    "Cohort": "kueue.x-k8s.io_cohorts.yaml",
    "LocalQueue": "kueue.x-k8s.io_localqueues.yaml",
    "ResourceFlavor": "kueue.x-k8s.io_resourceflavors.yaml",
    "Topology": "kueue.x-k8s.io_topologies.yaml",
    "WorkloadPriorityClass": "kueue.x-k8s.io_workloadpriorityclasses.yaml",
}


def _python_patterns(node):
    """Go's RE2 takes `^(?i)...` (AdmissionCheck's `parameters.kind`); Python's `re` needs the
    flag first. Same language either way: `(?i)^...`."""
    if isinstance(node, dict):
        return {
            k: (v.replace("^(?i)", "(?i)^", 1) if k == "pattern" and isinstance(v, str) else _python_patterns(v))
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_python_patterns(v) for v in node]
    return node


def _schema(kind: str) -> dict:
    crd = yaml.safe_load((CRDS / ALL_KINDS[kind]).read_text())
    assert crd["spec"]["names"]["kind"] == kind
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1beta2"]
    assert version["storage"] is True
    return _python_patterns(version["schema"]["openAPIV3Schema"])


SCHEMAS = {kind: _schema(kind) for kind in ALL_KINDS}


def _kueue_rules(manifests: list[dict]) -> None:
    """What jsonschema does not run: the CRDs' CEL rules on these kinds, and the ClusterQueue
    controller's admission-check rules (a ClusterQueue that breaks them is inactive)."""
    by_kind: dict[str, dict[str, dict]] = {}
    for m in manifests:
        by_kind.setdefault(m["kind"], {})[m["metadata"]["name"]] = m
    checks = by_kind.get("AdmissionCheck", {})
    for m in by_kind.get("MultiKueueCluster", {}).values():
        source = m["spec"]["clusterSource"]
        assert ("kubeConfig" in source) != ("clusterProfileRef" in source)
    for m in by_kind.get("MultiKueueConfig", {}).values():
        clusters = m["spec"]["clusters"]
        assert len(clusters) == len(set(clusters)) and 1 <= len(clusters) <= 20
        assert set(clusters) <= set(by_kind["MultiKueueCluster"]), "every cluster of a config is exported"
    for ac in checks.values():
        params = ac["spec"]["parameters"]
        assert params["name"] in by_kind[params["kind"]], "the check's parameters name an exported object"
        assert {MULTIKUEUE_CONTROLLER: "MultiKueueConfig", PROVISIONING_CONTROLLER: "ProvisioningRequestConfig"}[
            ac["spec"]["controllerName"]
        ] == params["kind"]
    for cq in by_kind.get("ClusterQueue", {}).values():
        rules = cq["spec"].get("admissionChecksStrategy", {}).get("admissionChecks", [])
        flavors = {f["name"] for rg in cq["spec"]["resourceGroups"] for f in rg["flavors"]}
        controllers = []
        for rule in rules:
            assert rule["name"] in checks, f"{cq['metadata']['name']} lists an exported check"
            controller = checks[rule["name"]]["spec"]["controllerName"]
            controllers.append(controller)
            if controller == MULTIKUEUE_CONTROLLER:
                assert "onFlavors" not in rule, "Kueue: MultiKueue AdmissionCheck per flavor"
            else:
                assert rule["onFlavors"] and set(rule["onFlavors"]) <= flavors
        assert controllers.count(MULTIKUEUE_CONTROLLER) <= 1
        assert not (MULTIKUEUE_CONTROLLER in controllers and PROVISIONING_CONTROLLER in controllers)


@pytest.mark.parametrize("name", ["provisioning", "sites"])
def test_every_object_validates_against_the_crds(name: str) -> None:
    manifests = kueue_manifests(load_policy(NATIVE / f"{name}.yaml"))
    for m in manifests:
        jsonschema.Draft7Validator(SCHEMAS[m["kind"]]).validate(m)
        assert m["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    _kueue_rules(manifests)
    kinds = [m["kind"] for m in manifests]
    # configs and checks are applied before the ClusterQueues that list them
    assert max(i for i, k in enumerate(kinds) if k in CHECK_KINDS) < kinds.index("ClusterQueue")


def test_default_policy_writes_no_check_and_no_strategy() -> None:
    policy = load_policy()
    assert check_manifests(policy) == []
    assert all("admissionChecksStrategy" not in m.get("spec", {}) for m in kueue_manifests(policy))


def test_provisioning_covers_only_the_pools_that_scale_from_zero() -> None:
    policy = load_policy(NATIVE / "provisioning.yaml")
    manifests = kueue_manifests(policy)
    (config,) = [m for m in manifests if m["kind"] == "ProvisioningRequestConfig"]
    assert config["spec"]["provisioningClassName"] == "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
    assert config["spec"]["retryStrategy"] == {"backoffLimitCount": 3, "backoffBaseSeconds": 60, "backoffMaxSeconds": 1800}
    assert "nvidia.com/gpu" in config["spec"]["managedResources"]
    cqs = {m["metadata"]["name"]: m["spec"] for m in manifests if m["kind"] == "ClusterQueue"}
    # training (min_nodes 1) is always up: incident response, all H100, lists no check
    assert "admissionChecksStrategy" not in cqs["incident-response"]
    # candidate training: its spot A100s and the L4s it may borrow scale from zero, its H100s do not
    assert cqs["candidate-train"]["admissionChecksStrategy"] == {
        "admissionChecks": [{"name": PROVISIONING_CHECK, "onFlavors": ["a100-spot", "l4-inference"]}]
    }
    scale_from_zero = {f.name for f in policy.flavors if f.node_pool in ("inference", "spot")}
    for spec in cqs.values():
        for rule in spec.get("admissionChecksStrategy", {}).get("admissionChecks", []):
            assert set(rule["onFlavors"]) <= scale_from_zero


def test_sites_become_multikueue_clusters_configs_and_checks() -> None:
    policy = load_policy(NATIVE / "sites.yaml")
    manifests = kueue_manifests(policy)
    clusters = {m["metadata"]["name"]: m for m in manifests if m["kind"] == "MultiKueueCluster"}
    assert clusters["gpu-platform-pit-depot"]["spec"]["clusterSource"]["kubeConfig"] == {
        "locationType": "Secret",
        "location": "multikueue-pit-depot",
    }
    configs = {m["metadata"]["name"]: m["spec"]["clusters"] for m in manifests if m["kind"] == "MultiKueueConfig"}
    assert configs == {
        "gpu-platform-sites-sfo-depot": ["gpu-platform-sfo-depot"],
        "gpu-platform-sites-sfo-depot-pit-depot": ["gpu-platform-sfo-depot", "gpu-platform-pit-depot"],
    }
    cqs = {m["metadata"]["name"]: m["spec"] for m in manifests if m["kind"] == "ClusterQueue"}
    # incident response holds only H100s (sfo-depot): its Workloads are never sent to pit-depot
    assert cqs["incident-response"]["admissionChecksStrategy"]["admissionChecks"] == [
        {"name": "gpu-platform-sites-sfo-depot"}
    ]
    assert cqs["research-best-effort"]["admissionChecksStrategy"]["admissionChecks"] == [
        {"name": "gpu-platform-sites-sfo-depot-pit-depot"}
    ]
    rfs = {m["metadata"]["name"]: m["spec"]["nodeLabels"] for m in manifests if m["kind"] == "ResourceFlavor"}
    assert rfs["a100-spot"][LABEL_SITE] == "pit-depot" and rfs["h100-ondemand"][LABEL_SITE] == "sfo-depot"


def test_a_lane_on_sites_leaves_provisioning_to_its_workers() -> None:
    raw = yaml.safe_load((NATIVE / "sites.yaml").read_text())
    raw["autoscaling"]["provisioning"] = {}
    manifests = kueue_manifests(parse_policy(raw))
    _kueue_rules(manifests)  # never MultiKueue beside ProvisioningRequest on one ClusterQueue
    assert not [m for m in manifests if m["kind"] == "ProvisioningRequestConfig"]


def test_long_site_sets_get_a_short_stable_name() -> None:
    sites = tuple(f"site-number-{i}" for i in range(6))
    name = multikueue_check_name(sites)
    assert len(name) <= 63 and name == multikueue_check_name(sites) != multikueue_check_name(sites[:5])


def test_export_cli_writes_the_check_objects(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["kueue", "export", "--policy", str(NATIVE / "sites.yaml"), "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    names = {p.name for p in tmp_path.iterdir()}
    assert "multikueuecluster-gpu-platform-sfo-depot.yaml" in names
    assert "admissioncheck-gpu-platform-sites-sfo-depot.yaml" in names
    assert "multikueueconfig-gpu-platform-sites-sfo-depot-pit-depot.yaml" in names


def test_example_policies_are_the_default_plus_their_block() -> None:
    """The examples differ from the default policy only by what they opt in to."""
    base = yaml.safe_load(default_policy_path().read_text())
    prov = yaml.safe_load((NATIVE / "provisioning.yaml").read_text())
    sites = yaml.safe_load((NATIVE / "sites.yaml").read_text())
    assert prov["autoscaling"].pop("provisioning") and prov == base
    assert sites.pop("sites") and sites == base
