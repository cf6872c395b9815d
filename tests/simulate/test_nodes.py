"""The simulator's node model (`with_nodes`): gangs need whole free nodes, placements persist while
a job runs, and GPUs free but on no node a waiting head fits are reported as stranded."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_platform.policy import load_policy
from gpu_platform.simulate import TraceJob, lane_report, load_trace, simulate
from gpu_platform.simulate.des import _Sim
from gpu_platform.simulate.scenarios import (
    fifo_backfill_scenario,
    fifo_scenario,
    pods_for,
    policy_node_gpus,
    policy_scenario,
    with_nodes,
)

FIX = Path(__file__).parents[1] / "fixtures" / "simulate"


@pytest.fixture(scope="module")
def pol():
    # one flavor `gpu`; at 16 GPUs lane `high` holds 12 nominal + 4 borrowed: all 16
    return load_policy(FIX / "policy-one-flavor.yaml")


def _on_nodes(pol, make=policy_scenario, node=8, gpus=16):
    return with_nodes(make(pol, gpus), {"gpu": node})


def _runs(res):
    return {r.job.job_id: r for r in res.runs}


def test_nodes_are_full_nodes_plus_a_remainder_and_jobs_become_gangs(pol):
    scn = with_nodes(policy_scenario(pol, 20), {"gpu": 8})
    assert [(n.name, n.gpus) for n in scn.base.nodes] == [("gpu/node-0", 8), ("gpu/node-1", 8), ("gpu/node-2", 4)]
    assert scn.node_gpus == {"gpu": 8}
    assert "on nodes" in scn.description
    wl = scn.workload(TraceJob("big", 0, 10, 16, "high"))
    assert wl.pods == 2 and wl.requests["nvidia.com/gpu"] == 16
    assert scn.workload(TraceJob("small", 0, 10, 8, "high")).pods == 1
    assert (pods_for(12, 8), pods_for(24, 8), pods_for(3, 8), pods_for(16, None)) == (2, 3, 1, 1)
    # no node model: the scenario is untouched
    plain = policy_scenario(pol, 20)
    assert plain.base.nodes == () and plain.node_gpus is None and plain.workload(TraceJob("big", 0, 10, 16, "high")).pods == 1


def test_the_policy_node_shapes_give_the_node_sizes():
    pol = load_policy()
    sizes = policy_node_gpus(pol)
    assert sizes["h100-ondemand"] == 8 and sizes["l4-inference"] == 4
    # the serving lane's 8 L4s kept as declared, the other 64 whole GPUs x 10
    scn = with_nodes(policy_scenario(pol, 648), sizes)
    h100 = [n for n in scn.base.nodes if n.flavor == "h100-ondemand"]
    assert len(h100) == 40 and {n.gpus for n in h100} == {8}  # 320 GPUs after resizing
    assert not any(n.flavor in ("h100-mig", "l4-shared") for n in scn.base.nodes)  # no GPU capacity


def test_a_16_gpu_job_on_8_gpu_nodes_starts_only_when_two_whole_nodes_are_free(pol):
    # 32 GPUs, 4 nodes of 8 (lane `high` holds 24 + 8 borrowed). a, e, f (5 GPUs each) take one
    # node each (best fit: 3 left on a node is too little for the next); at 10, b (16 = 2 x 8)
    # fits quota (17 free) but only node-3 is whole: it waits until a ends at 100 and frees node-0.
    jobs = [TraceJob(n, 0, 100 if n == "a" else 300, 5, "high") for n in "aef"] + [TraceJob("b", 10, 50, 16, "high")]
    res = simulate(_on_nodes(pol, gpus=32), jobs)
    runs = _runs(res)
    assert runs["b"].first_admit == 100 and runs["b"].end == 150
    assert runs["b"].placement == {"gpu/node-0": 8.0, "gpu/node-3": 8.0}
    assert "17 GPUs free in gpu but only 1 node(s) have 8 free (needs 2 nodes of 8)" in runs["b"].wait_reason
    assert res.stranded_gpu_s == pytest.approx(17 * 90)
    # quota only, b starts on arrival
    assert _runs(simulate(policy_scenario(pol, 32), jobs))["b"].first_admit == 10


def _fragmenting(late_head: float = 11):
    # p (4) and q (8) fill node-0 half and node-1; r (4, at 1) packs onto node-0; q ends at 5 and
    # s (4, at 6) goes to the now empty node-1; p ends at 10: 8 GPUs free, 4 on each node.
    return [
        TraceJob("p", 0, 10, 4, "high"),
        TraceJob("q", 0, 5, 8, "high"),
        TraceJob("r", 1, 100, 4, "high"),
        TraceJob("s", 6, 100, 4, "high"),
        TraceJob("h", late_head, 50, 8, "high"),
    ]


def test_fragmented_free_gpus_strand_an_8_gpu_head(pol):
    res = simulate(_on_nodes(pol), _fragmenting())
    runs = _runs(res)
    assert runs["r"].placement == {"gpu/node-0": 4.0} and runs["s"].placement == {"gpu/node-1": 4.0}
    # h waits from 11 until r ends at 101 (node-0 whole again): 8 GPUs stranded for 90 s
    assert runs["h"].first_admit == 101 and runs["h"].placement == {"gpu/node-0": 8.0}
    assert "8 GPUs free in gpu but no node has 8 free" in runs["h"].wait_reason
    assert res.stranded_gpu_s == pytest.approx(8 * 90)
    total = lane_report(res)["total"]
    assert total["gpu_hours_stranded_by_fragmentation"] == pytest.approx(0.2)
    # quota only: h starts on arrival and nothing is counted as stranded
    plain = simulate(policy_scenario(pol, 16), _fragmenting())
    assert _runs(plain)["h"].first_admit == 11 and plain.stranded_gpu_s is None
    assert lane_report(plain)["total"]["gpu_hours_stranded_by_fragmentation"] is None


def test_a_running_jobs_nodes_are_kept_across_engine_calls(pol):
    # x (8) takes node-0 at 0; y (4, at 1) goes to node-1, the only one with room; x ends at 5.
    # Placed afresh, y would look like it sits on node-0 (the first node) and z (8, at 6) would be
    # put on node-1 beside it; kept, y holds node-1 and z gets node-0.
    jobs = [TraceJob("x", 0, 5, 8, "high"), TraceJob("y", 1, 100, 4, "high"), TraceJob("z", 6, 100, 8, "high")]
    runs = _runs(simulate(_on_nodes(pol), jobs))
    assert runs["y"].placement == {"gpu/node-1": 4.0}
    assert runs["z"].first_admit == 6 and runs["z"].placement == {"gpu/node-0": 8.0}


def _never_over_a_node(res, size: float) -> None:
    """Every node holds at most `size` GPUs at every instant (placements of admitted runs)."""
    events = []
    for r in res.runs:
        if r.first_admit is not None and r.preemptions == 0 and r.end is not None:
            for node, g in (r.placement or {}).items():
                events += [(r.first_admit, 1, node, g), (r.end, 0, node, -g)]
    held: dict[str, float] = {}
    for _t, _o, node, g in sorted(events):
        held[node] = held.get(node, 0.0) + g
        assert held[node] <= size + 1e-9, node


@pytest.fixture(scope="module")
def slice400():
    from gpu_platform.simulate import load_lane_map

    lm = load_lane_map(Path(__file__).parents[2] / "gpu_platform" / "simulate" / "lane_maps" / "elasticflow.yaml")
    return load_trace(FIX / "elasticflow-cluster04-head2000.csv", lane_map=lm).jobs[:400]


def test_no_node_is_ever_overcommitted_folded_or_not(slice400):
    # Folding held work changes the order the engine places it in, so a tie between equally
    # free nodes may go another way (docs/simulator.md); either way no node holds more than it has.
    pol = load_policy()
    scn = with_nodes(policy_scenario(pol, 96), policy_node_gpus(pol))
    for merge in (True, False):
        res = simulate(scn, slice400, merge_held=merge)
        assert any((r.placement and len(r.placement) > 1) for r in res.runs)  # some gangs ran
        assert res.stranded_gpu_s > 0
        _never_over_a_node(res, 8)


def test_a_folded_group_holds_the_sum_of_its_members_placements(pol):
    scn = _on_nodes(pol)
    jobs = [TraceJob(n, 0, 100, g, "high") for n, g in (("a", 4), ("b", 2), ("c", 8))]
    sim = _Sim(scn, jobs, 0.0, 0.0, 16, 1, True, True)
    for r, spots in zip(sim.runs, ({"gpu/node-0": 4.0}, {"gpu/node-0": 2.0}, {"gpu/node-1": 8.0}), strict=True):
        sim.arrive(r, 0.0)
        sim._start(r, "gpu", 0.0, spots)
    # a waiting `high` workload may not preempt its own priority (LowerPriority): all is folded
    waiting = scn.workload(TraceJob("w", 1, 10, 8, "high"))
    (group,) = sim._admitted([waiting], 1.0)
    assert group.name.startswith("~running:high:gpu:") and group.requests["nvidia.com/gpu"] == 14
    assert dict(group.placement) == {"gpu/node-0": 6.0, "gpu/node-1": 8.0}
    assert sim._admitted([waiting], 1.0)[0] is group  # reused while the group is unchanged
    sim.complete(sim.runs[1], 5.0)
    (group,) = sim._admitted([waiting], 5.0)
    assert dict(group.placement) == {"gpu/node-0": 4.0, "gpu/node-1": 8.0}
    sim.complete(sim.runs[0], 6.0)
    (group,) = sim._admitted([waiting], 6.0)
    assert dict(group.placement) == {"gpu/node-1": 8.0}


@pytest.mark.parametrize("make", [fifo_scenario, fifo_backfill_scenario])
def test_node_aware_fifo_starts_a_gang_only_on_two_whole_nodes(pol, make):
    # as the engine test: a, e, f take a node each; b (2 x 8) waits for a to free node-0
    jobs = [TraceJob(n, 0, 100 if n == "a" else 300, 5, "high") for n in "aef"] + [TraceJob("b", 10, 50, 16, "high")]
    res = simulate(_on_nodes(pol, make, gpus=32), jobs)
    runs = _runs(res)
    assert {k: r.placement for k, r in runs.items() if k != "b"} == {
        "a": {"gpu/node-0": 5.0}, "e": {"gpu/node-1": 5.0}, "f": {"gpu/node-2": 5.0}}
    assert runs["b"].first_admit == 100 and runs["b"].placement == {"gpu/node-0": 8.0, "gpu/node-3": 8.0}
    assert "17 GPUs free in pool but only 1 node(s) have 8 free (needs 2 nodes of 8)" in runs["b"].wait_reason
    assert res.stranded_gpu_s == pytest.approx(17 * 90)
    assert _runs(simulate(make(pol, 32), jobs))["b"].first_admit == 10  # quota only: at once


@pytest.mark.parametrize("make", [fifo_scenario, fifo_backfill_scenario])
def test_node_aware_fifo_strands_fragmented_gpus(pol, make):
    res = simulate(_on_nodes(pol, make), _fragmenting())
    runs = _runs(res)
    assert runs["r"].placement == {"gpu/node-0": 4.0} and runs["s"].placement == {"gpu/node-1": 4.0}
    assert runs["h"].first_admit == 101 and res.stranded_gpu_s == pytest.approx(8 * 90)
    assert lane_report(res)["total"]["gpu_hours_stranded_by_fragmentation"] == pytest.approx(0.2)


def test_node_aware_backfill_uses_the_shadow_time_on_nodes(pol):
    # 2 nodes of 8. a (8) runs 0-100 on node-0, c (4) 0-50 on node-1. The head b (16 = 2 x 8)
    # arrives at 1: its pods fit once both have ended, shadow 100. d (4, 60 s) fits node-1 now and
    # ends at 61 <= 100: backfilled; e (4, 200 s) would end after the shadow: it waits behind b.
    jobs = [
        TraceJob("a", 0, 100, 8, "high"),
        TraceJob("c", 0, 50, 4, "high"),
        TraceJob("b", 1, 10, 16, "high"),
        TraceJob("d", 1, 60, 4, "high"),
        TraceJob("e", 1, 200, 4, "high"),
    ]
    runs = _runs(simulate(_on_nodes(pol, fifo_backfill_scenario), jobs))
    assert runs["d"].first_admit == 1
    assert runs["b"].first_admit == 100 and runs["e"].first_admit == 110
    plain = _runs(simulate(_on_nodes(pol, fifo_scenario), jobs))
    assert plain["d"].first_admit == 110  # no backfill: d waits behind b


def test_a_gang_larger_than_the_pools_nodes_is_rejected(pol):
    res = simulate(_on_nodes(pol, fifo_scenario), [TraceJob("big", 0, 10, 24, "high"), TraceJob("ok", 1, 10, 8, "high")])
    runs = _runs(res)
    assert runs["big"].state == "rejected" and "3 x 8 GPUs" in runs["big"].reason
    assert runs["ok"].first_admit == 1



def test_gang_split_smallest_or_largest_node_size_for_policy_and_baselines():
    """A 16-GPU candidate run may use 8-GPU H100/A100 nodes and 4-GPU L4 nodes: split by the
    smallest size it is 4 pods of 4 (any of them holds a pod), by the largest 2 whole 8-GPU nodes
    (no L4 node holds a pod); the like-for-like baseline splits it the same way."""
    from gpu_platform.simulate.scenario import split_node_size
    from gpu_platform.simulate.scenarios import fifo_flavors_backfill_scenario

    pol = load_policy()
    sizes = policy_node_gpus(pol)
    job = TraceJob("big", 0, 3600, 16, "candidate_train")
    small = with_nodes(policy_scenario(pol, 136), sizes)
    large = with_nodes(policy_scenario(pol, 136), sizes, "largest")
    assert (small.gang_split, large.gang_split) == ("smallest", "largest")
    assert small.workload(job).pods == 4 and large.workload(job).pods == 2
    assert "largest node size" in large.description and "largest" not in small.description
    assert split_node_size((4.0, 8.0)) == 4.0 and split_node_size((4.0, 8.0), "largest") == 8.0
    assert split_node_size((), "largest") is None
    with pytest.raises(ValueError, match="gang split must be one of"):
        with_nodes(policy_scenario(pol, 136), sizes, "medium")
    # policy and the baseline over the same flavors alike: 2 whole 8-GPU nodes, or 4 pods of 4 that
    # go two to a free 8-GPU node (best fit: the first node takes all the pods it holds)
    for split in ("smallest", "largest"):
        for make in (policy_scenario, fifo_flavors_backfill_scenario):
            (r,) = simulate(with_nodes(make(pol, 136), sizes, split), [job]).runs
            assert r.flavor.startswith("h100") and r.placement and len(r.placement) == 2, (make, split, r.placement)
            assert set(r.placement.values()) == {8.0}, (make, split, r.placement)
