"""Gang jobs on the default policy's node shapes: a 16-GPU candidate training request is 2 x 8,
admitted only when two whole nodes are free, and a fragmented pool says why it waits."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from gpu_platform.admission import AdmittedRequest, PendingRequest, from_policy, schedule_cycle, workload_for
from gpu_platform.admission.model import ClusterState
from gpu_platform.policy import Policy, load_policy
from gpu_platform.requests.model import RequestError, validate_request, validate_request_file

ROOT = Path(__file__).resolve().parents[2]
GANG = ROOT / "examples" / "distributed" / "candidate_train_2x8.yaml"


@pytest.fixture(scope="module")
def pol() -> Policy:
    return load_policy()


def _gang(pol: Policy, rid: str = "gang-1"):
    return validate_request_file(GANG, pol).model_copy(update={"request_id": rid})


def _running(pol: Policy, rid: str, gpus: int, lane: str = "research_best_effort") -> AdmittedRequest:
    raw = validate_request_file(ROOT / "examples" / "requests" / f"{lane}.yaml", pol).model_dump(exclude_none=True)
    raw.update(request_id=rid, gpu_count=gpus, gpu_type="h100-ondemand")
    return AdmittedRequest(validate_request(raw, pol), "h100-ondemand", admitted_at=1.0)


def test_sixteen_gpus_are_recorded_as_two_nodes_of_eight(pol: Policy) -> None:
    req = _gang(pol)
    assert (req.gpu_count, req.nodes, req.gpus_per_node, req.pods) == (16, 2, 8, 2)
    assert '"nodes":2' in req.to_json() and '"gpus_per_node":8' in req.to_json()
    wl = workload_for(pol, req, "g")
    assert wl.pods == 2 and wl.requests["nvidia.com/gpu"] == 16
    assert wl.allowed_flavors == ("h100-ondemand",)


def test_count_no_node_shape_can_place_is_refused_naming_the_node_size(pol: Policy) -> None:
    raw = _gang(pol).model_dump(exclude_none=True)
    for key in ("nodes", "gpus_per_node", "request_id"):
        raw.pop(key)
    raw["gpu_count"] = 12
    with pytest.raises(RequestError) as err:
        validate_request(raw, pol)
    (msg,) = err.value.errors
    assert msg.startswith("gpu_count: 12 GPUs cannot be placed on any flavor of lane candidate_train")
    assert "h100-ondemand has nodes of 8 GPUs" in msg and "multiple of 8 up to 32" in msg
    raw["gpu_count"] = 16
    raw["nodes"] = 4
    with pytest.raises(RequestError, match=r"nodes: 4 does not match gpu_count 16"):
        validate_request(raw, pol)
    raw.pop("nodes")
    raw["topology"] = {"required": "example.com/rack"}
    with pytest.raises(RequestError, match=r"topology.required: 'example.com/rack' is not a topology level"):
        validate_request(raw, pol)


def _state(pol: Policy, admitted: list[AdmittedRequest], gang=None) -> ClusterState:
    gang = gang if gang is not None else _gang(pol)
    return from_policy(pol, admitted=admitted, pending=[PendingRequest(gang, created_at=5.0)], now=10.0)


def test_gang_admitted_when_two_whole_nodes_are_free(pol: Policy) -> None:
    # two research jobs of 4 GPUs: best fit puts both on one node, three stay whole
    res = schedule_cycle(_state(pol, [_running(pol, "r1", 4), _running(pol, "r2", 4)]))
    assert [a.name for a in res.admitted] == ["gang-1"] and res.preempted == []


def _placed(pol: Policy, rid: str, lane: str, gpus: int, node: int):
    """A running job held on a given node of h100-ondemand (as the cluster placed it)."""
    req = _running(pol, rid, gpus, lane).request
    wl = workload_for(pol, req, rid, flavor="h100-ondemand", admitted_at=float(node))
    return replace(wl, placement={f"h100-ondemand/node-{node}": float(gpus)})


def test_gang_preempts_jobs_that_free_whole_nodes(pol: Policy) -> None:
    # four lower-priority, checkpointed candidate jobs of 1 GPU, one per node: 28 GPUs free and
    # quota fits, but no node is whole
    adm = [
        replace(_placed(pol, f"c{i}", "candidate_train", 1, i), priority=500, checkpointed=True) for i in range(4)
    ]
    quota_only = schedule_cycle(from_policy(pol, admitted=adm, pending=[_gang(pol)], node_model=False))
    assert [a.name for a in quota_only.admitted] == ["gang-1"] and quota_only.preempted == []
    res = schedule_cycle(_state(pol, adm))
    assert res.admitted == []
    # the two most recently admitted, on two nodes: exactly two whole nodes freed
    assert sorted((p.victim, p.reason) for p in res.preempted) == [("c2", "InClusterQueue"), ("c3", "InClusterQueue")]
    (info,) = res.pending
    assert info.reason_code == "PendingPreemption"


def test_gang_waits_on_fragmented_nodes_though_quota_fits(pol: Policy) -> None:
    # candidate jobs of 1 GPU on each node, not checkpointed (so never victims): 28 free, none whole
    adm = [_placed(pol, f"c{i}", "candidate_train", 1, i) for i in range(4)]
    quota_only = schedule_cycle(from_policy(pol, admitted=adm, pending=[_gang(pol)], node_model=False))
    assert [a.name for a in quota_only.admitted] == ["gang-1"]
    res = schedule_cycle(_state(pol, adm))
    assert res.admitted == [] and res.preempted == []
    (info,) = res.pending
    assert info.reason_code == "Inadmissible"
    assert "28 GPUs free in h100-ondemand but no node has 8 free (needs 2 nodes of 8)" in info.message


def test_node_book_best_fit_and_release_restore_the_same_nodes() -> None:
    from gpu_platform.admission.model import NodeSpec, Workload
    from gpu_platform.admission.nodes import NodeBook, placement_of

    book = NodeBook([NodeSpec(f"n{i}", "f", 8) for i in range(3)])
    a = Workload("a", "q", {"nvidia.com/gpu": 5}, flavor="f")
    b = Workload("b", "q", {"nvidia.com/gpu": 3}, flavor="f")
    gang = Workload("g", "q", {"nvidia.com/gpu": 16}, flavor="f", pods=2)
    book.place(a)
    book.place(b)  # best fit: beside a, on the fullest node that holds 3
    assert placement_of(book, "a") == {"n0": 5} and placement_of(book, "b") == {"n0": 3}
    assert book.fits(gang, "f")
    book.place(gang)
    assert sorted(placement_of(book, "g")) == ["n1", "n2"] and book.free_total("f") == 0
    book.release(b)
    book.place(b)  # taken out and put back within a cycle: the same node
    assert set(placement_of(book, "b")) == set(placement_of(book, "a"))
    with pytest.raises(ValueError, match="listed twice"):
        NodeBook([NodeSpec("n", "f", 8), NodeSpec("n", "f", 8)])


def test_gang_pods_smaller_than_a_node_share_it_as_kube_scheduler_would_place_them() -> None:
    """Nothing in an Indexed Job keeps two of its pods off one node: 4 pods of 4 GPUs fit 2 free
    8-GPU nodes (two each), best fit first; whole-node pods still need one free node each."""
    from gpu_platform.admission.model import NodeSpec, Workload
    from gpu_platform.admission.nodes import NodeBook, placement_of

    book = NodeBook([NodeSpec(f"n{i}", "f", 8) for i in range(3)])
    book.place(Workload("small", "q", {"nvidia.com/gpu": 4}, flavor="f"))  # n0 keeps 4 free
    quads = Workload("quads", "q", {"nvidia.com/gpu": 16}, flavor="f", pods=4)
    assert book.fits(quads, "f")
    book.place(quads)  # the fullest node first: n0's 4, then two pods on n1, the last on n2
    assert placement_of(book, "quads") == {"n0": 4, "n1": 8, "n2": 4}
    book.release(quads, remember=False)
    whole = Workload("whole", "q", {"nvidia.com/gpu": 24}, flavor="f", pods=3)
    assert not book.fits(whole, "f")  # n0 has 4 free: a pod of 8 needs a whole node
    assert book.refusal(whole, "f") == "20 GPUs free in f but only 2 node(s) have 8 free (needs 3 nodes of 8)"
    assert book.fits(Workload("five", "q", {"nvidia.com/gpu": 20}, flavor="f", pods=5), "f")  # 1 + 2 + 2 pods
    six = Workload("six", "q", {"nvidia.com/gpu": 24}, flavor="f", pods=6)
    assert book.refusal(six, "f") == (
        "20 GPUs free in f but its nodes hold only 5 pod(s) of 4 (needs 6 pods of 4, on 3 node(s) with room)"
    )


def test_an_admission_says_which_nodes_its_pods_got() -> None:
    from gpu_platform.admission import admit_until_stable
    from gpu_platform.admission.model import ClusterQueueSpec, FlavorSpec, NodeSpec, ResourceQuota, Workload

    gpu = "nvidia.com/gpu"
    base = ClusterState(
        cluster_queues=(ClusterQueueSpec("q", (ResourceQuota("f", gpu, 24),)),),
        flavors=(FlavorSpec("f", False, {gpu: 24}),),
        nodes=tuple(NodeSpec(f"n{i}", "f", 8) for i in range(3)),
    )
    held = Workload("held", "q", {gpu: 4}, flavor="f", admitted_at=1.0, placement={"n1": 4})
    gang = Workload("gang", "q", {gpu: 16}, pods=2, created_at=2.0)
    small = Workload("small", "q", {gpu: 4}, created_at=3.0)
    res = admit_until_stable(replace(base, admitted=(held,), pending=(gang, small), now=5.0))
    got = {a.name: dict(a.placement) for a in res.admitted}
    # the gang takes the two whole nodes; the small job packs beside the held one on n1
    assert got == {"gang": {"n0": 8.0, "n2": 8.0}, "small": {"n1": 4.0}}
    quota_only = admit_until_stable(replace(base, nodes=(), admitted=(held,), pending=(gang, small), now=5.0))
    assert all(a.placement is None for a in quota_only.admitted)
