"""Exported Kueue manifests validate against the v1beta2 CRD schemas and match the policy."""

from __future__ import annotations

from pathlib import Path

import jsonschema
import pytest
import yaml
from click.testing import CliRunner

from gpu_platform.admission.kueue_export import (
    POOL_LABEL,
    PRODUCT_LABEL,
    k8s_name,
    kueue_manifests,
    priority_class_name,
    quantity,
)
from gpu_platform.cli.admission import kueue
from gpu_platform.policy import GPU, load_policy, parse_policy
from gpu_platform.policy.loading import default_policy_path

CRDS = Path(__file__).resolve().parents[1] / "fixtures" / "kueue-crds"
KINDS = {
    "ClusterQueue": "kueue.x-k8s.io_clusterqueues.yaml",
    "Cohort": "kueue.x-k8s.io_cohorts.yaml",
    "LocalQueue": "kueue.x-k8s.io_localqueues.yaml",
    "ResourceFlavor": "kueue.x-k8s.io_resourceflavors.yaml",
    "Topology": "kueue.x-k8s.io_topologies.yaml",
    "WorkloadPriorityClass": "kueue.x-k8s.io_workloadpriorityclasses.yaml",
}
DNS1123 = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


def _schema(kind: str) -> dict:
    crd = yaml.safe_load((CRDS / KINDS[kind]).read_text())
    assert crd["spec"]["names"]["kind"] == kind
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1beta2"]
    return version["schema"]["openAPIV3Schema"]


SCHEMAS = {kind: _schema(kind) for kind in KINDS}


def _validate(m: dict) -> None:
    jsonschema.Draft7Validator(SCHEMAS[m["kind"]]).validate(m)
    assert m["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    assert jsonschema.Draft7Validator({"pattern": DNS1123}).is_valid(m["metadata"]["name"])


def _cel_rules(cq: dict) -> None:
    """The CRD's x-kubernetes-validations that jsonschema does not run, checked by hand."""
    spec = cq["spec"]
    if "cohortName" not in spec:
        for rg in spec["resourceGroups"]:
            for f in rg["flavors"]:
                assert all("borrowingLimit" not in r for r in f["resources"])
    pre = spec["preemption"]
    assert not (
        pre["reclaimWithinCohort"] == "Never"
        and pre.get("borrowWithinCohort", {}).get("policy", "Never") != "Never"
    )
    for rg in spec["resourceGroups"]:
        for f in rg["flavors"]:
            assert [r["name"] for r in f["resources"]] == rg["coveredResources"]


@pytest.fixture(scope="module")
def manifests() -> list[dict]:
    return kueue_manifests(load_policy())


def test_every_manifest_validates(manifests: list[dict]) -> None:
    for m in manifests:
        _validate(m)
        if m["kind"] == "ClusterQueue":
            _cel_rules(m)


def test_kinds_and_counts(manifests: list[dict]) -> None:
    policy = load_policy()
    kinds: dict[str, int] = {}
    for m in manifests:
        kinds[m["kind"]] = kinds.get(m["kind"], 0) + 1
    assert kinds == {
        "Topology": 1,
        "ResourceFlavor": len(policy.flavors),
        "Cohort": len(policy.cohorts),
        "WorkloadPriorityClass": len(policy.lanes),
        "ClusterQueue": len(policy.lanes),
        "LocalQueue": len(policy.lanes) * len(policy.teams),
    }


def test_cluster_queues_match_policy(manifests: list[dict]) -> None:
    policy = load_policy()
    cqs = {m["metadata"]["name"]: m for m in manifests if m["kind"] == "ClusterQueue"}
    for lane in policy.lanes.values():
        cq = cqs[k8s_name(lane.name)]
        spec = cq["spec"]
        assert spec.get("cohortName") == lane.cohort_name
        assert spec["queueingStrategy"] == lane.queueing_strategy
        pre = spec["preemption"]
        assert pre["withinClusterQueue"] == lane.preemption.within_cluster_queue
        assert pre["reclaimWithinCohort"] == lane.preemption.reclaim_within_cohort
        bwc = lane.preemption.borrow_within_cohort
        assert pre.get("borrowWithinCohort", {}).get("policy", "Never") == bwc.policy
        assert pre.get("borrowWithinCohort", {}).get("maxPriorityThreshold") == bwc.max_priority_threshold
        seen = set()
        for rg in spec["resourceGroups"]:
            for f in rg["flavors"]:
                for r in f["resources"]:
                    q = lane.quota(f["name"], r["name"])
                    assert q is not None
                    seen.add((f["name"], r["name"]))
                    assert r["nominalQuota"] == quantity(r["name"], q.nominal_quota)
                    assert r.get("borrowingLimit") == (
                        None if q.borrowing_limit is None else quantity(r["name"], q.borrowing_limit)
                    )
                    assert r.get("lendingLimit") == (
                        None if q.lending_limit is None else quantity(r["name"], q.lending_limit)
                    )
        assert seen == {(q.flavor_name, q.resource) for q in lane.quotas}
        ann = cq["metadata"]["annotations"]
        assert ann["gpu-platform.io/protected"] == str(lane.protected).lower()
        if lane.yields_to:
            assert ann["gpu-platform.io/yields-to"] == ",".join(lane.yields_to)


def test_flavors_priority_classes_local_queues(manifests: list[dict]) -> None:
    policy = load_policy()
    rfs = {m["metadata"]["name"]: m for m in manifests if m["kind"] == "ResourceFlavor"}
    for f in policy.flavors:
        spec = rfs[f.name]["spec"]
        assert spec["nodeLabels"][PRODUCT_LABEL] == f.gpu_product
        assert spec["nodeLabels"][POOL_LABEL] == f.node_pool
        assert [(t["key"], t.get("value"), t["effect"]) for t in spec["tolerations"]] == [
            (t.key, t.value, t.effect) for t in f.taints
        ]
    wpcs = {m["metadata"]["name"]: m["value"] for m in manifests if m["kind"] == "WorkloadPriorityClass"}
    assert wpcs == {priority_class_name(lane.name): lane.priority for lane in policy.lanes.values()}
    lqs = {
        (m["metadata"]["namespace"], m["metadata"]["name"]): m["spec"]["clusterQueue"]
        for m in manifests
        if m["kind"] == "LocalQueue"
    }
    for team in policy.teams.values():
        for lane in policy.lanes.values():
            assert lqs[(team.namespace, k8s_name(lane.name))] == k8s_name(lane.name)


def test_memory_and_cpu_quotas_render_as_quantities() -> None:
    raw = yaml.safe_load(default_policy_path().read_text())
    raw["lanes"]["research_best_effort"]["quotas"] += [
        {"flavor_name": "h100-ondemand", "resource": "memory", "nominal_quota": 256, "borrowing_limit": 512},
        {"flavor_name": "h100-ondemand", "resource": "cpu", "nominal_quota": 2.5},
    ]
    raw["fair_sharing"] = {"enabled": True}
    policy = parse_policy(raw)
    ms = kueue_manifests(policy)
    for m in ms:
        _validate(m)
    cq = next(
        m for m in ms if m["kind"] == "ClusterQueue" and m["metadata"]["name"] == "research-best-effort"
    )
    _cel_rules(cq)
    rg = cq["spec"]["resourceGroups"][0]
    assert rg["coveredResources"] == [GPU, "memory", "cpu"]
    h100 = next(f for f in rg["flavors"] if f["name"] == "h100-ondemand")
    res = {r["name"]: r for r in h100["resources"]}
    assert res["memory"]["nominalQuota"] == "256Gi" and res["memory"]["borrowingLimit"] == "512Gi"
    assert res["cpu"]["nominalQuota"] == "2500m"
    spot = next(f for f in rg["flavors"] if f["name"] == "a100-spot")
    assert {r["name"]: r["nominalQuota"] for r in spot["resources"]} == {GPU: "4", "memory": "0", "cpu": "0"}
    assert cq["spec"]["fairSharing"] == {"weight": "1"}


def test_schema_rejects_a_broken_manifest(manifests: list[dict]) -> None:
    cq = next(m for m in manifests if m["kind"] == "ClusterQueue")
    bad = {**cq, "spec": {**cq["spec"], "queueingStrategy": "Lottery"}}
    with pytest.raises(jsonschema.ValidationError):
        _validate(bad)


def test_cli_export(tmp_path: Path) -> None:
    res = CliRunner().invoke(kueue, ["export", "--out", str(tmp_path / "k")])
    assert res.exit_code == 0, res.output
    files = sorted((tmp_path / "k").glob("*.yaml"))
    docs = [yaml.safe_load(p.read_text()) for p in files]
    assert len(docs) == len(kueue_manifests(load_policy()))  # one file per object: `kubectl apply -f` sends each once
    for d in docs:
        _validate(d)
    assert len({(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]) for d in docs}) == len(docs)


def test_cli_export_reports_a_bad_policy(tmp_path: Path) -> None:
    bad = Path(__file__).resolve().parents[1] / "fixtures" / "policies" / "broken.yaml"
    res = CliRunner().invoke(kueue, ["export", "--policy", str(bad), "--out", str(tmp_path)])
    assert res.exit_code != 0


def test_cohort_tree_is_exported_with_parents_and_quotas(manifests: list[dict]) -> None:
    cohorts = {m["metadata"]["name"]: m["spec"] for m in manifests if m["kind"] == "Cohort"}
    assert "parentName" not in cohorts["gpu-pool"]
    assert cohorts["assurance"]["parentName"] == "gpu-pool" and cohorts["batch"]["parentName"] == "gpu-pool"
    (group,) = cohorts["assurance"]["resourceGroups"]
    assert group["coveredResources"] == ["nvidia.com/gpu"]
    h100 = next(f for f in group["flavors"] if f["name"] == "h100-ondemand")
    assert h100["resources"] == [{"name": "nvidia.com/gpu", "nominalQuota": "8"}]  # lends while idle
    # Every ClusterQueue names a cohort that is exported, and every parent is exported before use.
    for m in manifests:
        if m["kind"] == "ClusterQueue" and "cohortName" in m["spec"]:
            assert m["spec"]["cohortName"] in cohorts
    for spec in cohorts.values():
        assert spec.get("parentName") in (None, *cohorts)


def _topology_cel(topo: dict) -> None:
    """The Topology CRD's CEL rule, by hand: kubernetes.io/hostname only as the last level."""
    labels = [lv["nodeLabel"] for lv in topo["spec"]["levels"]]
    assert "kubernetes.io/hostname" not in labels[:-1]
    assert len(set(labels)) == len(labels)


def test_flavors_with_topology_levels_name_their_topology(manifests: list[dict]) -> None:
    (topo,) = [m for m in manifests if m["kind"] == "Topology"]
    _validate(topo)
    _topology_cel(topo)
    assert topo["metadata"]["name"] == "gpu-platform-training"
    assert [lv["nodeLabel"] for lv in topo["spec"]["levels"]] == ["topology.kubernetes.io/zone", "kubernetes.io/hostname"]
    flavors = {m["metadata"]["name"]: m["spec"] for m in manifests if m["kind"] == "ResourceFlavor"}
    assert flavors["h100-ondemand"]["topologyName"] == "gpu-platform-training"
    # the ResourceFlavor CEL rule: a topologyName needs nodeLabels
    assert flavors["h100-ondemand"]["nodeLabels"]
    assert [n for n, s in flavors.items() if "topologyName" in s] == ["h100-ondemand"]
    # the Topology comes before the flavors that name it
    kinds = [m["kind"] for m in manifests]
    assert kinds.index("Topology") < kinds.index("ResourceFlavor")


def test_flavor_levels_of_its_own_get_their_own_topology() -> None:
    text = default_policy_path().read_text().replace(
        "    node_pool: spot\n", "    node_pool: spot\n    topology_levels: [example.com/rack, kubernetes.io/hostname]\n", 1
    )
    ms = kueue_manifests(parse_policy(yaml.safe_load(text)))
    topos = {m["metadata"]["name"]: [lv["nodeLabel"] for lv in m["spec"]["levels"]] for m in ms if m["kind"] == "Topology"}
    assert topos["gpu-platform-a100-spot"] == ["example.com/rack", "kubernetes.io/hostname"]
    for m in ms:
        if m["kind"] == "Topology":
            _validate(m)
            _topology_cel(m)


def _afs_policy(weights: dict | None = None, top: dict | None = None):
    raw = yaml.safe_load(default_policy_path().read_text())
    raw["lanes"]["research_best_effort"]["admission_fair_sharing"] = {"team_weights": weights or {}}
    if top is not None:
        raw["admission_fair_sharing"] = top
    return parse_policy(raw)


def test_admission_fair_sharing_lane_orders_its_team_local_queues_in_kueue() -> None:
    policy = _afs_policy({"perception": 2, "planning": 0.5})
    ms = kueue_manifests(policy)
    for m in ms:
        _validate(m)
    cqs = {m["metadata"]["name"]: m for m in ms if m["kind"] == "ClusterQueue"}
    research = cqs[k8s_name("research_best_effort")]
    _cel_rules(research)
    assert research["spec"]["admissionScope"] == {"admissionMode": "UsageBasedAdmissionFairSharing"}
    assert all("admissionScope" not in cq["spec"] for name, cq in cqs.items() if cq is not research)
    lqs = [m for m in ms if m["kind"] == "LocalQueue" and m["spec"]["clusterQueue"] == research["metadata"]["name"]]
    # one LocalQueue per team, each in its team's namespace, each with its weight
    by_ns = {m["metadata"]["namespace"]: m["spec"]["fairSharing"]["weight"] for m in lqs}
    assert by_ns == {
        t.namespace: {"perception": "2", "planning": "500m"}.get(t.name, "1") for t in policy.teams.values()
    }
    others = [m for m in ms if m["kind"] == "LocalQueue" and m not in lqs]
    assert others and all("fairSharing" not in m["spec"] for m in others)


def test_no_lane_with_admission_fair_sharing_exports_none(manifests: list[dict]) -> None:
    from gpu_platform.admission.kueue_export import kueue_configuration

    assert kueue_configuration(load_policy()) is None
    assert all("admissionScope" not in m["spec"] for m in manifests if m["kind"] == "ClusterQueue")
    assert all("fairSharing" not in m["spec"] for m in manifests if m["kind"] == "LocalQueue")


def test_kueue_configuration_carries_usage_decay_and_resource_weights() -> None:
    from gpu_platform.admission.kueue_export import kueue_configuration

    cfg = kueue_configuration(
        _afs_policy(top={"usage_half_life": "3d", "usage_sampling_interval": "90s", "resource_weights": {GPU: 1, "cpu": 0}})
    )
    assert cfg == {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "admissionFairSharing": {
            "usageHalfLifeTime": "72h",
            "usageSamplingInterval": "90s",
            "resourceWeights": {"cpu": 0, GPU: 1},
        },
    }
    assert kueue_configuration(_afs_policy())["admissionFairSharing"] == {  # type: ignore[index]
        "usageHalfLifeTime": "168h",
        "usageSamplingInterval": "5m",
    }


def test_cli_export_writes_the_configuration_beside_not_among_the_objects(tmp_path: Path) -> None:
    raw = yaml.safe_load(default_policy_path().read_text())
    raw["lanes"]["research_best_effort"]["admission_fair_sharing"] = {"team_weights": {"perception": 2}}
    pfile = tmp_path / "policy.yaml"
    pfile.write_text(yaml.safe_dump(raw))
    res = CliRunner().invoke(kueue, ["export", "--policy", str(pfile), "--out", str(tmp_path / "k")])
    assert res.exit_code == 0, res.output
    top = sorted((tmp_path / "k").glob("*.yaml"))
    assert len(top) == len(kueue_manifests(parse_policy(raw)))  # `kubectl apply -f DIR` sees only objects
    cfg = yaml.safe_load((tmp_path / "k" / "kueue-manager-config" / "admission-fair-sharing.yaml").read_text())
    assert cfg["admissionFairSharing"]["usageHalfLifeTime"] == "168h"
    assert "kueue-manager-config" in res.output


@pytest.mark.parametrize(
    ("resource", "amount", "stored"),
    [("nvidia.com/gpu", 32, "32"), ("nvidia.com/gpu", 0, "0"), ("cpu", 2.5, "2500m"), ("cpu", 2000, "2k"),
     ("cpu", 1500, "1500"), ("memory", 256, "256Gi"), ("memory", 1024, "1Ti"), ("memory", 1.5, "1536Mi"),
     ("weight", 0.5, "500m"), ("weight", 1.0, "1")],
)
def test_quantities_are_written_as_kueue_stores_them(resource: str, amount: float, stored: str) -> None:
    """Go's canonical `resource.Quantity` string, what Kueue's webhook writes back: the same
    text in the file and on the server, so a second `kubectl apply` patches nothing."""
    assert quantity(resource, amount) == stored
