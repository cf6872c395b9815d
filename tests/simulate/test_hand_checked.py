"""Simulations small enough to work out by hand (the figures in the comments are the hand
calculation; docs/simulator.md walks through the FIFO one)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_platform.policy import load_policy
from gpu_platform.simulate import TraceJob, lane_report, load_trace, simulate
from gpu_platform.simulate.scenarios import fifo_scenario, policy_scenario, strict_scenario

FIX = Path(__file__).parents[1] / "fixtures" / "simulate"


@pytest.fixture(scope="module")
def pol():
    return load_policy(FIX / "policy-one-flavor.yaml")


@pytest.fixture(scope="module")
def jobs():
    return load_trace(FIX / "hand-fifo.csv").jobs


def _runs(res):
    return {r.job.job_id: r for r in res.runs}


def test_fifo_baseline_by_hand(pol, jobs):
    # 4 GPUs. j1 (2 GPUs) runs 0-100. j2 needs all 4: waits for j1, runs 100-150. j3 (1 GPU,
    # t=20) would fit at once but may not overtake j2: runs 150-160. j4 (2 GPUs) fits beside j3:
    # 150-190. Waits 0, 90, 130, 120.
    res = simulate(fifo_scenario(pol), jobs)
    runs = _runs(res)
    assert {k: (r.first_admit, r.end) for k, r in runs.items()} == {
        "j1": (0, 100),
        "j2": (100, 150),
        "j3": (150, 160),
        "j4": (150, 190),
    }
    rep = lane_report(res)
    total = rep["total"]
    assert total["wait_s"] == {"p50": 105.0, "p95": 128.5, "max": 130.0, "mean": 85.0}
    assert rep["horizon_s"] == 190
    # 2x100 + 4x50 + 1x10 + 2x40 = 490 GPU-seconds over 4 GPUs x 190 s
    assert total["gpu_utilization"] == round(490 / 760, 4)
    assert total["preemptions"] == 0 and total["never_admitted"] == 0
    assert rep["lanes"]["low"]["wait_s"]["p50"] == 65.0  # j1 0, j3 130
    assert rep["lanes"]["low"]["wait_s"]["p95"] == 123.5
    assert rep["lanes"]["high"]["wait_s"]["p50"] == 105.0  # j2 90, j4 120


def test_strict_priority_preempts_with_checkpoint_loss(pol, jobs):
    # j2 (high) at t=10 needs 4: evicts j1 (low) after 10 s; checkpoints every 4 s keep 8 s, so
    # 2 s x 2 GPUs are lost. j2 runs 10-60. At 60 the queue is j4 (high), j1, j3: j4 and j1 start
    # (j1 has 92 s left: ends 152), j3 waits for j4 and runs 100-110.
    res = simulate(strict_scenario(pol), jobs, checkpoint_interval_s=4)
    runs = _runs(res)
    assert runs["j1"].preemptions == 1
    assert runs["j1"].lost_gpu_s == pytest.approx(4.0)
    assert (runs["j1"].last_admit, runs["j1"].end) == (60, 152)
    assert (runs["j2"].first_admit, runs["j2"].end) == (10, 60)
    assert (runs["j4"].first_admit, runs["j3"].first_admit) == (60, 100)
    rep = lane_report(res)
    assert rep["lanes"]["low"]["gpu_hours_lost_to_preemption"] == round(4 / 3600, 3)
    assert rep["total"]["gpu_hours"] == round(494 / 3600, 3)


def test_policy_borrows_and_waits_for_quota(pol, jobs):
    # low borrows for j1 (2 of its nominal 1). j2 (high, 4) must borrow 1 and high may not
    # preempt to borrow: it waits for j1. j3 (low) borrows the free GPUs at once; j4 (high) fits
    # its nominal quota at 30, after j3 ended at 30.
    res = simulate(policy_scenario(pol), jobs)
    runs = _runs(res)
    assert {k: r.first_admit for k, r in runs.items()} == {"j1": 0, "j2": 100, "j3": 20, "j4": 30}
    assert lane_report(res)["total"]["preemptions"] == 0


def _reclaim_jobs(policy: str) -> list[TraceJob]:
    return [
        TraceJob("a", 0, 1000, 4, "low", preemption_policy=policy),
        TraceJob("b", 100, 50, 3, "high"),
    ]


@pytest.mark.parametrize(
    ("policy", "lost", "state", "end"),
    [
        # a ran 100 s on 4 GPUs; checkpoints every 30 s keep 90 s: 10 s x 4 GPUs lost, 910 s left
        ("checkpoint_requeue", 40.0, "done", 150 + 910),
        ("requeue", 400.0, "done", 150 + 1000),  # starts again from zero
        ("fail", 400.0, "failed", 100),
    ],
)
def test_reclaim_accounts_checkpoint_loss(pol, policy, lost, state, end):
    # high reclaims its nominal quota from low, which borrowed 3 GPUs for a.
    res = simulate(policy_scenario(pol), _reclaim_jobs(policy), checkpoint_interval_s=30)
    a = _runs(res)["a"]
    assert a.preemptions == 1
    assert a.lost_gpu_s == pytest.approx(lost)
    assert (a.state, a.end) == (state, end)
    assert _runs(res)["b"].first_admit == 100


def test_job_larger_than_its_queue_is_never_admitted(pol):
    # low can hold at most nominal 1 + borrowing 3 = 4 GPUs; 5 never fits and is rejected at once
    res = simulate(policy_scenario(pol), [TraceJob("big", 0, 10, 5, "low"), TraceJob("ok", 1, 10, 1, "low")])
    rep = lane_report(res)
    assert rep["lanes"]["low"]["never_admitted"] == 1
    assert rep["lanes"]["low"]["rejected_at_submission"] == 1
    assert _runs(res)["ok"].first_admit == 1


def test_tick_admits_only_on_tick_boundaries(pol, jobs):
    res = simulate(fifo_scenario(pol), jobs, tick=60)
    starts = [r.first_admit for r in res.runs]
    assert all(s is not None and s % 60 == 0 for s in starts)
    # j1 ends at 100: j2 starts at the next tick, 120
    assert _runs(res)["j2"].first_admit == 120
