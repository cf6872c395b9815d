"""Every example renders to a Job that Kueue admits on the flavor the gate's engine picks.

For each example request (`examples/requests/**`, `examples/distributed/*`, `examples/demo/*`)
under the default policy: the engine admits it on an empty cluster (`admit_until_stable`, node
model on); its Job (the workload step's, or a gang's Indexed Job) is rendered for that flavor;
the resolver (`kueue_resolve`) follows it through the default policy's Kueue export as Kueue
v0.20 does (LocalQueue, WorkloadPriorityClass, Topology Aware Scheduling check, taints, node
affinity, quota) and must assign that same flavor: the first flavor, in the ClusterQueue's
order, that Kueue keeps for the Job and whose quota can hold its PodSet. The same holds for each
example asking for `gpu_type: any`, and, on a cluster whose H100s are taken, for an any-GPU job
the engine sends to a flavor without a Topology.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpu_platform.admission.engine import admit_until_stable
from gpu_platform.admission.kueue_export import kueue_manifests
from gpu_platform.admission.policy_view import AdmittedRequest, PendingRequest, from_policy
from gpu_platform.cluster.jobs import TAS_UNCONSTRAINED, is_topology_aware
from gpu_platform.requests.model import JobRequest, RequestError, validate_request
from resources.k8s import render_workload_manifests
from tests.k8s.kueue_resolve import resolve

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(
    p
    for p in [
        *(ROOT / "examples" / "requests").rglob("*.yaml"),
        *(ROOT / "examples" / "distributed").glob("*.yaml"),
        *(ROOT / "examples" / "demo").glob("*.yaml"),
    ]
    if "service" not in (yaml.safe_load(p.read_text()) or {})
)
"""Every example that runs as a Job (a service's Deployment: tests/k8s/test_kueue_resolution.py)."""
IDS = [str(p.relative_to(ROOT / "examples").with_suffix("")) for p in EXAMPLES]
# `gpu_type: any` picks among the whole-GPU flavors, so its variant covers the whole-GPU examples
# (a MIG or shared example names its slice's flavor itself)
WHOLE = [p for p in EXAMPLES if (yaml.safe_load(p.read_text()) or {}).get("gpu_resource", "nvidia.com/gpu") == "nvidia.com/gpu"]
WHOLE_IDS = [str(p.relative_to(ROOT / "examples").with_suffix("")) for p in WHOLE]


@pytest.fixture(scope="module")
def exported(k8s_policy):
    return kueue_manifests(k8s_policy)


def _engine_flavor(policy, req: JobRequest, admitted: list[AdmittedRequest] | None = None) -> str:
    state = from_policy(policy, admitted=admitted or [], pending=[PendingRequest(req, name=req.request_id)])
    res = admit_until_stable(state)
    mine = [a for a in res.admitted if a.name == req.request_id]
    assert mine, f"the engine does not admit {req.request_id}: {[p.message for p in res.pending]}"
    return mine[0].flavor


def _podset_amounts(job: dict) -> dict[str, float]:
    """What Kueue charges for the Job's one PodSet: the pod's requests times `parallelism`."""
    count = job["spec"].get("parallelism") or 1
    amounts: dict[str, float] = {}
    for c in job["spec"]["template"]["spec"]["containers"]:
        for r, v in ((c.get("resources") or {}).get("requests") or {}).items():
            amounts[r] = amounts.get(r, 0.0) + float(v) * count
    return amounts


def _check(policy, req: JobRequest, flavor: str, exported) -> dict:
    job = render_workload_manifests(req, flavor, policy)[-1]
    res = resolve(job, exported)
    assert res.admits_on(flavor, _podset_amounts(job)) == flavor, (res.flavors, res.refused)
    annotations = job["spec"]["template"]["metadata"].get("annotations") or {}
    # every Job that may land on a topology-aware flavor carries a topology annotation
    may_land = res.flavors
    if any(is_topology_aware(policy, f) for f in may_land):
        assert res.topology_request is not None, annotations
    else:
        assert res.topology_request is None, annotations
    return job


def test_every_example_is_covered() -> None:
    assert len(EXAMPLES) == 22  # 14 Job requests (release chain, fractional), 1 distributed, 7 demo


@pytest.mark.parametrize("path", EXAMPLES, ids=IDS)
def test_kueue_admits_the_example_on_the_engines_flavor(path: Path, k8s_policy, example_request, exported) -> None:
    req = example_request(path)
    flavor = _engine_flavor(k8s_policy, req)
    job = _check(k8s_policy, req, flavor, exported)
    if flavor == "h100-ondemand" and req.topology is None:
        assert job["spec"]["template"]["metadata"]["annotations"][TAS_UNCONSTRAINED] == "true"


@pytest.mark.parametrize("path", WHOLE, ids=WHOLE_IDS)
def test_kueue_admits_the_example_for_any_gpu_on_the_engines_flavor(
    path: Path, k8s_policy, example_request, exported
) -> None:
    req = example_request(path)
    assert req.gpu_resource == "nvidia.com/gpu"
    raw = req.model_dump(exclude_none=True, exclude={"nodes", "gpus_per_node"})
    try:
        anyreq = validate_request({**raw, "gpu_type": "any"}, k8s_policy)
    except RequestError as exc:  # pragma: no cover - every example's lane takes any GPU today
        pytest.fail(str(exc))
    anyreq = anyreq.model_copy(update={"request_id": req.request_id})
    flavor = _engine_flavor(k8s_policy, anyreq)
    _check(k8s_policy, anyreq, flavor, exported)


def test_an_any_gpu_job_goes_where_the_engine_sends_it_when_the_h100s_are_taken(
    k8s_policy, example_request, exported
) -> None:
    research = example_request(ROOT / "examples" / "requests" / "research_best_effort.yaml")
    anyreq = research.model_copy(update={"gpu_type": "any", "request_id": "req-20261129-anygpu0001"})
    # all 32 H100s run candidate training (its 8 + borrowed): research's any-GPU job cannot fit there
    cand = example_request(ROOT / "examples" / "requests" / "candidate_train.yaml")
    running = [
        AdmittedRequest(cand.model_copy(update={"request_id": f"req-20261129-cand{i:06d}"}), "h100-ondemand")
        for i in range(4)
    ]
    flavor = _engine_flavor(k8s_policy, anyreq, running)
    assert flavor == "a100-spot"
    job = _check(k8s_policy, anyreq, flavor, exported)
    res = resolve(job, exported)
    # Kueue's first choice of the Job's kind is the engine's; the H100s are not offered to it
    assert res.flavors[0] == flavor and "h100-ondemand" not in res.flavors


def test_a_one_pod_request_keeps_to_flavors_whose_nodes_hold_it():
    # An 8-GPU request of any GPU type is one pod of 8 (no gang recorded): a flavor of 4-GPU nodes
    # (l4-inference) is not one it can run on, though 8 is "placeable" there as 2 whole nodes.
    import yaml

    from gpu_platform.policy import load_policy
    from gpu_platform.requests.model import matching_flavors, shaped_flavors, validate_request

    pol = load_policy()
    raw = yaml.safe_load((Path(__file__).parents[2] / "examples" / "requests" / "candidate_train.yaml").read_text())
    raw["gpu_type"] = "any"
    req = validate_request(raw, pol)
    assert req.nodes in (None, 1)
    usable = matching_flavors(pol, "candidate_train", "any")
    assert "l4-inference" in usable
    assert shaped_flavors(pol, req, list(usable)) == [f for f in usable if f != "l4-inference"]
    raw["gpu_count"] = 4
    assert "l4-inference" in shaped_flavors(pol, validate_request(raw, pol), list(usable))
