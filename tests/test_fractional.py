"""Fractional GPUs end to end in the domain: MIG geometry and sharing modes in the policy, requests
for slices and replicas, admission against slice quota, Jobs that ask for the MIG resource, and
the export that carries it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpu_platform.admission import admit_until_stable, from_policy
from gpu_platform.admission.kueue_export import kueue_manifests
from gpu_platform.devices.sharing import gpu_share, layout_errors, parse_layout
from gpu_platform.policy import PolicyError, load_policy, parse_policy
from gpu_platform.requests.model import RequestError, validate_request, validate_request_file
from resources.k8s import render_job_manifest

ROOT = Path(__file__).resolve().parents[1]
FRACTIONAL = ROOT / "examples" / "requests" / "fractional"
MIG = "nvidia.com/mig-1g.10gb"


@pytest.fixture(scope="module")
def pol():
    return load_policy()


def test_layouts_follow_each_products_mig_geometry() -> None:
    assert parse_layout("3 x 2g.20gb + 1 x 1g.10gb") == {"2g.20gb": 3, "1g.10gb": 1}
    assert layout_errors("NVIDIA-H100-80GB-HBM3", {"1g.10gb": 7}) == []
    assert layout_errors("NVIDIA-A100-SXM4-40GB", {"3g.20gb": 1, "4g.20gb": 1}) == []
    assert layout_errors("NVIDIA-A100-SXM4-40GB", {"2g.10gb": 3, "1g.5gb": 1}) == []
    # 2 x 3g.40gb + 1g.10gb takes 9 of 8 memory slices.
    assert any("9 memory slices" in e for e in layout_errors("NVIDIA-H100-80GB-HBM3", {"3g.40gb": 2, "1g.10gb": 1}))
    assert any("exceeds the 7" in e for e in layout_errors("NVIDIA-H100-80GB-HBM3", {"1g.10gb": 8}))
    assert any("does not exist" in e for e in layout_errors("NVIDIA-A100-SXM4-40GB", {"1g.10gb": 1, "1g.20gb": 1}))
    assert any("no known MIG geometry" in e for e in layout_errors("NVIDIA-L4", {"1g.10gb": 1}))
    with pytest.raises(ValueError, match="is not '<count> x <profile>'"):
        parse_layout("seven 1g.10gb")


def test_price_share_per_slice_and_replica() -> None:
    assert gpu_share("NVIDIA-H100-80GB-HBM3", MIG) == pytest.approx(1 / 7)
    assert gpu_share("NVIDIA-H100-80GB-HBM3", "nvidia.com/mig-3g.40gb") == pytest.approx(3 / 7)
    assert gpu_share("NVIDIA-H100-80GB-HBM3", MIG, weights={"1g.10gb": 0.125}) == 0.125
    assert gpu_share("NVIDIA-L4", "nvidia.com/gpu.shared", replicas=4) == 0.25
    assert gpu_share("NVIDIA-L4", "nvidia.com/gpu") == 1.0


def _policy_with(pol_raw: dict, **flavor) -> dict:
    raw = yaml.safe_load(yaml.safe_dump(pol_raw))
    next(f for f in raw["flavors"] if f["name"] == "h100-mig").update(flavor)
    return raw


@pytest.fixture(scope="module")
def raw_policy() -> dict:
    return yaml.safe_load((ROOT / "gpu_platform" / "policy" / "default.yaml").read_text())


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"sharing": {"mode": "mig", "layout": "2 x 3g.40gb + 1 x 1g.10gb"}}, "flavors[3].sharing.layout: the layout takes 9 memory slices"),
        ({"sharing": {"mode": "mig"}}, "flavors[3].sharing.layout: required for mode mig"),
        ({"sharing": {"mode": "shared", "replicas": 4}}, "flavors[3].sharing.replica_memory_gib: required for mode shared"),
        ({"sharing": {"mode": "mig", "layout": "7 x 1g.10gb"}}, "offers no 'nvidia.com/mig-2g.20gb'"),
    ],
)
def test_sharing_errors_are_named(raw_policy, change, message) -> None:
    with pytest.raises(PolicyError) as exc:
        parse_policy(_policy_with(raw_policy, **change))
    assert any(message in e for e in exc.value.errors), exc.value.errors


def test_evidence_lanes_may_not_use_shared_gpus(raw_policy) -> None:
    raw = yaml.safe_load(yaml.safe_dump(raw_policy))
    raw["lanes"]["release_eval"]["sharing_modes"] = ["exclusive", "mig", "shared"]
    raw["lanes"]["release_eval"]["quotas"].append(
        {"flavor_name": "l4-shared", "resource": "nvidia.com/gpu.shared", "nominal_quota": 0}
    )
    with pytest.raises(PolicyError) as exc:
        parse_policy(raw)
    assert "lanes.release_eval.sharing_modes: an evidence lane may not use shared GPUs" in " ".join(exc.value.errors)
    raw["lanes"]["release_eval"]["sharing_modes"] = ["exclusive", "mig"]
    with pytest.raises(PolicyError) as exc:
        parse_policy(raw)
    assert any("nvidia.com/gpu.shared is shared, which the lane's sharing_modes" in e for e in exc.value.errors)


def _example(name: str) -> dict:
    return yaml.safe_load((FRACTIONAL / name).read_text())


def test_fractional_examples_validate(pol) -> None:
    mig = validate_request_file(FRACTIONAL / "labeler_mig_slice.yaml", pol)
    assert (mig.gpu_resource, mig.gpu_count) == (MIG, 1)
    shared = validate_request_file(FRACTIONAL / "research_shared_replica.yaml", pol)
    assert shared.gpu_resource == "nvidia.com/gpu.shared" and shared.gpu_memory_gib == 4


@pytest.mark.parametrize(
    ("file", "update", "message"),
    [
        ("research_shared_replica.yaml", {"gpu_memory_gib": None}, "gpu_memory_gib: required for shared GPUs"),
        ("research_shared_replica.yaml", {"gpu_memory_gib": 6}, "gpu_memory_gib: 6 exceeds the per-replica limit of 5 GiB"),
        ("labeler_mig_slice.yaml", {"gpu_count": 9}, f"gpu_count: 9 x {MIG} exceed every flavor that offers it (at most 6)"),
        ("labeler_mig_slice.yaml", {"gpu_resource": "nvidia.com/mig-3g.40gb"}, "has no quota of nvidia.com/mig-3g.40gb"),
        ("labeler_mig_slice.yaml", {"gpu_resource": "nvidia.com/tpu"}, "gpu_resource: 'nvidia.com/tpu' is not a GPU resource"),
        ("labeler_mig_slice.yaml", {"gpu_memory_gib": 4}, "gpu_memory_gib: only for shared GPUs"),
    ],
)
def test_fractional_requests_fail_closed_naming_the_field(pol, file, update, message) -> None:
    raw = {k: v for k, v in {**_example(file), **update}.items() if v is not None}
    with pytest.raises(RequestError) as exc:
        validate_request(raw, pol)
    assert any(message in e for e in exc.value.errors), exc.value.errors


def test_evidence_lane_refuses_a_shared_replica(pol) -> None:
    raw = yaml.safe_load((ROOT / "examples" / "requests" / "release_eval.yaml").read_text())
    raw.update(gpu_type="any", gpu_resource="nvidia.com/gpu.shared", gpu_memory_gib=4, gpu_count=1)
    with pytest.raises(RequestError) as exc:
        validate_request(raw, pol)
    assert any("lane release_eval may not use shared GPUs" in e for e in exc.value.errors), exc.value.errors


def test_a_mig_request_is_admitted_against_slice_quota_and_renders_a_mig_job(pol) -> None:
    base = validate_request_file(FRACTIONAL / "labeler_mig_slice.yaml", pol)
    reqs = [base.model_copy(update={"request_id": f"mig-{i}", "gpu_count": 2}) for i in range(4)]
    res = admit_until_stable(from_policy(pol, pending=reqs))
    # labeler_batch holds 4 slices of nominal quota and may borrow research's 2: three jobs of 2.
    assert [a.name for a in res.admitted] == ["mig-0", "mig-1", "mig-2"]
    assert {a.flavor for a in res.admitted} == {"h100-mig"}
    (waiting,) = res.pending
    assert waiting.name == "mig-3" and MIG in waiting.message
    job = render_job_manifest(reqs[0], "h100-mig", pol, run_id="5f1c9a1e-1111-2222-3333-444455556666")
    (container,) = [c for c in job["spec"]["template"]["spec"]["containers"]]
    assert str(container["resources"]["limits"][MIG]) == "2" and "nvidia.com/gpu" not in container["resources"]["limits"]


def test_export_carries_mig_and_shared_resources(pol) -> None:
    manifests = kueue_manifests(pol)
    flavors = {m["metadata"]["name"]: m["spec"] for m in manifests if m["kind"] == "ResourceFlavor"}
    assert flavors["h100-mig"]["nodeLabels"]["gpu-platform.io/gpu-sharing"] == "mig"
    assert "gpu-platform.io/gpu-sharing" not in flavors["h100-ondemand"]["nodeLabels"]
    cq = next(m["spec"] for m in manifests if m["kind"] == "ClusterQueue" and m["metadata"]["name"] == "labeler-batch")
    groups = {tuple(g["coveredResources"]): [f["name"] for f in g["flavors"]] for g in cq["resourceGroups"]}
    assert groups[(MIG,)] == ["h100-mig"]
    assert groups[("nvidia.com/gpu.shared",)] == ["l4-shared"]
    assert "h100-mig" not in groups[("nvidia.com/gpu",)]
