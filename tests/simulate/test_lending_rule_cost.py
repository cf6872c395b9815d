"""What the serving lane's lending rule costs, measured by `simulate`: GPU-hours of its idle quota
that sat free while a waiting head it withholds them from (an uncheckpointed evidence run) would
have fit (`total.gpu_hours_idle_by_lending_rule`, `des_engine._Sim._withheld_idle`)."""

from __future__ import annotations

import pytest

from gpu_platform.admission.model import ClusterQueueSpec, ClusterState, FlavorSpec, ResourceQuota, Workload
from gpu_platform.simulate import TraceJob, lane_report, simulate
from gpu_platform.simulate.scenario import Scenario

GPU = "nvidia.com/gpu"


def _run(evidence: bool, serving: bool = True, lend_to_evidence: bool = False):
    # l: 12 GPUs; a serving lane's 6 (no service runs, so all idle) and `low`'s 6. `low` runs 4
    # GPUs from 0 to 1000; a 6-GPU candidate run arrives at 100. 8 GPUs are free then, but 6 of
    # them are the serving lane's, which it lends only to work it could take back
    cqs = (
        ClusterQueueSpec("cand", (ResourceQuota("l", GPU, 0.0),), cohort="pool"),
        ClusterQueueSpec("serve", (ResourceQuota("l", GPU, 6.0, borrowing_limit=0.0),), cohort="pool", serving=serving,
                         lend_to_evidence=lend_to_evidence),
        ClusterQueueSpec("low", (ResourceQuota("l", GPU, 6.0),), cohort="pool"),
    )
    state = ClusterState(cqs, (FlavorSpec("l", capacity={GPU: 12}),), cohorts=("pool",))
    prio = {"cand": 600, "low": 100}

    def wl(job: TraceJob) -> Workload:
        return Workload(job.job_id, job.lane, {GPU: job.gpus}, priority=prio[job.lane], created_at=job.submit_ts,
                        expected_duration_s=job.duration_s, evidence=evidence and job.lane == "cand")

    jobs = [TraceJob("busy", 0, 1000, 4, "low"), TraceJob("run", 100, 100, 6, "cand")]
    res = simulate(Scenario("t", "t", state, wl), jobs)
    return {r.job.job_id: r for r in res.runs}, lane_report(res)["total"]


def test_the_gpus_the_rule_keeps_idle_from_an_evidence_head_are_reported():
    runs, total = _run(evidence=True)
    # it waits for `low` to end (then 6 GPUs it may borrow are free); the serving lane's 6 idle
    # GPUs sat free for it from 100 to 1000: 6 x 900 GPU-s = 1.5 GPU-h
    assert runs["run"].first_admit == 1000
    assert total["gpu_hours_idle_by_lending_rule"] == pytest.approx(1.5)


def test_work_the_serving_lane_can_take_back_borrows_them_and_nothing_is_idle_by_the_rule():
    runs, total = _run(evidence=False)
    assert runs["run"].first_admit == 100
    assert total["gpu_hours_idle_by_lending_rule"] == 0


def test_without_a_serving_lane_the_figure_is_none():
    runs, total = _run(evidence=True, serving=False)
    assert runs["run"].first_admit == 100
    assert total["gpu_hours_idle_by_lending_rule"] is None


def test_a_serving_lane_that_lends_to_evidence_keeps_nothing_idle_from_it():
    runs, total = _run(evidence=True, lend_to_evidence=True)
    assert runs["run"].first_admit == 100
    assert total["gpu_hours_idle_by_lending_rule"] == 0
