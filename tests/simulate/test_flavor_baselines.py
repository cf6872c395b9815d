"""The like-for-like FIFO baselines (`fifo-flavors`, `fifo-flavors-backfill`): one queue over the
policy's flavors (and nodes), replayed without the engine. Checked against the engine's FIFO over
the same flavors, against the single-pool EASY on one flavor, by hand, and for what they report:
utilization split into useful and lost work, and the jobs no flavor can ever hold."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_platform.cli.simulate import LANE_MAPS
from gpu_platform.policy import default_policy_path, load_policy
from gpu_platform.simulate import TraceJob, lane_report, load_lane_map, load_trace, simulate
from gpu_platform.simulate.scenarios import (
    fifo_backfill_scenario,
    fifo_flavors_backfill_scenario,
    fifo_flavors_fast_scenario,
    fifo_flavors_scenario,
    policy_node_gpus,
    policy_scenario,
    with_nodes,
)

FIX = Path(__file__).parents[1] / "fixtures" / "simulate"


@pytest.fixture(scope="module")
def jobs():
    lm = load_lane_map(LANE_MAPS / "elasticflow.yaml")
    return load_trace(FIX / "elasticflow-cluster04-head2000.csv", lane_map=lm).jobs[:800]


def _starts(res):
    return {r.job.job_id: (r.first_admit, r.flavor) for r in res.runs}


@pytest.mark.parametrize("capacity", [96, 160])
def test_fast_flavor_fifo_is_the_engines(jobs, capacity):
    pol = load_policy(default_policy_path())
    engine = simulate(fifo_flavors_scenario(pol, capacity), jobs)
    fast = simulate(fifo_flavors_fast_scenario(pol, capacity), jobs)
    assert engine.engine_calls > 0 and fast.engine_calls == 0
    assert _starts(engine) == _starts(fast)


def test_flavor_backfill_on_one_flavor_is_the_pool_backfill(jobs):
    one = load_policy(FIX / "policy-one-flavor.yaml")
    pool = simulate(fifo_backfill_scenario(one, 64), jobs)
    flav = simulate(fifo_flavors_backfill_scenario(one, 64), jobs)
    assert {k: v[0] for k, v in _starts(pool).items()} == {k: v[0] for k, v in _starts(flav).items()}


def test_flavor_backfill_never_delays_the_reserved_head():
    # default policy at 76 GPUs: h100-ondemand 32, l4 24, a100 16, mig 2, shared 2.
    pol = load_policy(default_policy_path())
    jobs = [
        TraceJob("a", 0, 100, 30, "research_best_effort"),    # h100: 2 left
        TraceJob("b", 1, 100, 24, "research_best_effort"),    # l4: full
        TraceJob("head", 2, 50, 32, "research_best_effort"),  # fits h100 only, at 100
        TraceJob("short", 3, 50, 2, "research_best_effort"),  # h100 now, ends 53 <= 100
        TraceJob("long", 4, 500, 2, "research_best_effort"),  # h100 and l4 full: a100, not reserved
        TraceJob("late", 5, 500, 14, "research_best_effort"),  # a100: 14 of 16 left
    ]
    res = {r.job.job_id: r for r in simulate(fifo_flavors_backfill_scenario(pol), jobs).runs}
    assert (res["head"].first_admit, res["head"].flavor) == (100, "h100-ondemand")
    assert (res["short"].first_admit, res["short"].flavor) == (3, "h100-ondemand")
    assert (res["long"].first_admit, res["long"].flavor) == (4, "a100-spot")
    assert (res["late"].first_admit, res["late"].flavor) == (5, "a100-spot")


def test_a_job_no_flavor_holds_is_listed_with_what_it_needs():
    pol = load_policy(default_policy_path())
    jobs = [TraceJob("big", 0, 10, 40, "candidate_train"), TraceJob("ok", 1, 10, 8, "candidate_train")]
    for scn in (fifo_flavors_backfill_scenario(pol), policy_scenario(pol)):
        rep = lane_report(simulate(scn, jobs))
        nf = rep["total"]["never_fits"]
        assert nf["jobs"] == 1 and nf["gpus_needed_max"] == 40 and nf["listed"][0]["job_id"] == "big", scn.name
        assert rep["total"]["admitted"] == 1


def test_utilization_splits_into_useful_and_lost(jobs):
    lm = load_lane_map(LANE_MAPS / "elasticflow-fleet.yaml")
    fleet = load_trace(FIX / "elasticflow-cluster04-head2000.csv", lane_map=lm).jobs[:800]
    rep = lane_report(simulate(policy_scenario(load_policy(default_policy_path()), 96), fleet))
    for f in [*rep["lanes"].values(), rep["total"]]:
        assert f["useful_gpu_utilization"] + f["lost_gpu_utilization"] == pytest.approx(f["gpu_utilization"], abs=2e-4)


def test_flavor_backfill_on_nodes_keeps_gangs_on_distinct_nodes(jobs):
    pol = load_policy(default_policy_path())
    scn = with_nodes(fifo_flavors_backfill_scenario(pol, 160), policy_node_gpus(pol))
    res = simulate(scn, jobs)
    rep = lane_report(res)
    assert rep["total"]["admitted"] == len(jobs) and rep["total"]["gpu_hours_stranded_by_fragmentation"] is not None
    for r in res.runs:
        if r.placement and r.job.gpus > 8:
            assert len(r.placement) >= r.job.gpus / 8
