"""The simulator with a service's traffic beside the batch trace, on a scenario checked by hand.

Pool: one flavor `l4` whose only quota is the service's (4 replicas x 1 GPU); batch lane
`research` has nominal 0 there (it can only borrow). Demand: 5 qps (1 replica) until t=1000,
35 qps (4 replicas at 10 qps each) until t=2000, then 5 qps again; the autoscaler ticks every
100 s with no scale-down window; a reclaim waits 50 s (the borrower's grace), replicas start at
once, no node model. One batch job of 3 GPUs arrives at t=10 for 5000 s. Window [0, 3000).

With lending: the job borrows 3 idle serving GPUs at t=10; at t=1000 three replicas reclaim them
(the job is preempted, InCohortReclamation) and are ready at 1050, so replicas were below need for
50 s (share 50 / 3000); the job runs again when the service scales down at t=2000. Batch
GPU-seconds in the window: 3 x (1000 - 10) + 3 x (3000 - 2000) = 5970 of 4 x 3000.
Without lending: the job can never be admitted (nothing to borrow), the replicas start at their
tick, never below need.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpu_platform.admission import ClusterQueueSpec, ClusterState, FlavorSpec, ResourceQuota, Workload
from gpu_platform.admission.model import LOWER_PRIORITY
from gpu_platform.policy import GPU
from gpu_platform.serving.demand import TraceDemand
from gpu_platform.simulate.scenario import Scenario
from gpu_platform.simulate.serving import (
    ServiceLoad,
    ServingOptions,
    below_need_seconds,
    compare_lending,
    serving_figures,
    serving_scenario,
    simulate_serving,
)
from gpu_platform.simulate.trace import TraceJob


def _scenario() -> Scenario:
    base = ClusterState(
        cluster_queues=(
            ClusterQueueSpec(
                "research", (ResourceQuota("l4", GPU, 0.0),), cohort="pool", within_cluster_queue=LOWER_PRIORITY
            ),
        ),
        flavors=(FlavorSpec("l4", capacity={GPU: 0.0}),),
        cohorts=("pool",),
    )

    def workload(job: TraceJob) -> Workload:
        return Workload(name=job.job_id, cq=job.lane, requests={GPU: job.gpus}, priority=100, created_at=job.submit_ts)

    return Scenario("policy", "hand-checked", base, workload)


SERVICE = ServiceLoad("web", "serving", "l4", 1, 1, 4, 10.0, TraceDemand(((0, 5.0), (1000, 35.0), (2000, 5.0))))
OPTIONS = ServingOptions(cadence_s=100, scale_down_window_s=0, replica_startup_s=0, reclaim_grace_s=50, node_gpus=None)
JOBS = [TraceJob("b1", 10, 5000, 3, "research")]


def test_borrower_is_preempted_when_the_service_scales_up():
    result, run = simulate_serving(_scenario(), JOBS, SERVICE, lending=True, options=OPTIONS, start=0, end=3000)
    job = next(r for r in result.runs if r.job.job_id == "b1")
    assert job.first_admit == 10 and job.flavor == "l4"
    assert job.preemptions == 1
    assert job.last_admit == 2000  # back once the service scaled down
    up = [p for p in run.replicas if p.requested == 1000]
    assert len(up) == 3
    assert all(p.admitted == 1000 and p.reclaimed and p.ready == 1050 for p in up)
    assert all(p.stopped == 2000 for p in up)
    first = run.replicas[0]
    assert first.requested == 0 and first.ready == 0 and not first.reclaimed and first.stopped == 3000


def test_figures_with_and_without_lending():
    doc = compare_lending(_scenario(), JOBS, SERVICE, options=OPTIONS, start=0, end=3000)
    on, off = doc["with_lending"], doc["without_lending"]
    assert on["slo_below_need_share"] == round(50 / 3000, 4)
    assert on["scale_up_delay_s"] == {"p50": 50.0, "p95": 50.0, "max": 50.0}
    assert on["reclaims"] == 3 and on["reclaim_scale_up_delay_s"]["max"] == 50.0
    assert on["batch_runs_reclaimed"] == 1 and off["batch_runs_reclaimed"] == 0
    assert on["batch_gpu_hours"] == round(5970 / 3600, 3)
    assert on["batch_gpu_hours_on_serving_flavor"] == round(5970 / 3600, 3)
    assert on["batch_utilization"] == round(5970 / (4 * 3000), 4)
    # replicas: 1 for 3000 s + 3 for 950 s ready... held from admission: 1 x 3000 + 3 x 1000
    assert on["serving_gpu_hours"] == round(6000 / 3600, 3)
    assert off["slo_below_need_share"] == 0.0
    assert off["reclaims"] == 0
    assert off["batch_gpu_hours"] == 0.0 and off["batch_utilization"] == 0.0
    assert off["scale_up_delay_s"]["max"] == 0.0


def test_scale_down_window_keeps_replicas_and_cadence_delays_scale_up():
    # ticks every 300 s: the rise at t=1000 is seen at t=1200; a 600 s scale-down window keeps the
    # 4 replicas until the tick at 2400 (the last tick wanting 4 is 1800; 1800 + 600 = 2400)
    opts = ServingOptions(cadence_s=300, scale_down_window_s=600, replica_startup_s=0, reclaim_grace_s=0, node_gpus=None)
    _result, run = simulate_serving(_scenario(), [], SERVICE, lending=False, options=opts, start=0, end=3000)
    up = [p for p in run.replicas if p.index > 0]
    assert {p.requested for p in up} == {1200}
    assert {p.stopped for p in up} == {2400}
    doc = serving_figures(_result, run)
    assert doc["slo_below_need_share"] == round(200 / 3000, 4)


def test_node_start_when_the_flavor_had_no_running_node():
    # 2-GPU nodes, none kept warm: the first replica needs a node (360 s); without lending nothing
    # else keeps nodes up, so the 3 replicas at t=1000 need new nodes too
    opts = ServingOptions(
        cadence_s=100, scale_down_window_s=0, replica_startup_s=30, reclaim_grace_s=50, node_gpus=2, node_startup_s=360
    )
    _result, run = simulate_serving(_scenario(), [], SERVICE, lending=False, options=opts, start=0, end=3000)
    first = run.replicas[0]
    assert first.new_node and first.ready == 0 + 360 + 30
    up = [p for p in run.replicas if p.requested == 1000]
    # the first replica's node has one free GPU: one replica starts there, two need a node
    assert sorted(p.ready for p in up) == [1030, 1390, 1390]


def test_below_need_seconds_by_hand():
    need = [(0, 1), (10, 3), (20, 1)]
    ready = [(0, 1), (15, 2), (18, 3), (25, 0)]
    # [10,18): ready < 3; [25,30): 0 < 1
    assert below_need_seconds(need, ready, 0, 30) == 8 + 5


def test_serving_scenario_lends_only_with_lending():
    on = serving_scenario(_scenario(), SERVICE, lending=True).base
    off = serving_scenario(_scenario(), SERVICE, lending=False).base
    q_on = next(c for c in on.cluster_queues if c.name == "serving")
    q_off = next(c for c in off.cluster_queues if c.name == "serving")
    assert q_on.quotas[0].nominal == 4 and q_on.quotas[0].lending_limit is None
    assert q_off.quotas[0].lending_limit == 0
    assert q_on.reclaim_within_cohort == "Any" and q_on.protected and q_on.serving and q_on.cohort == "pool"
    assert on.flavors[0].capacity[GPU] == 4


def test_bad_service_is_refused_naming_fields():
    with pytest.raises(ValueError) as e:
        ServiceLoad("web", "serving", "l4", 0, 2, 1, 0.0, SERVICE.demand)
    msg = str(e.value)
    assert "gpus_per_replica" in msg and "max_replicas" in msg and "target_qps_per_replica" in msg


def _trace(tmp_path):
    p = tmp_path / "jobs.csv"
    rows = ["job_id,submit_ts,duration_s,gpus,lane,gpu_type"]
    rows += [f"j{i},{i * 600},{7200},2,research_best_effort,any" for i in range(6)]
    p.write_text("\n".join(rows) + "\n")
    return p


def test_cli_service_beside_the_trace(tmp_path):
    from click.testing import CliRunner

    from gpu_platform.cli import main

    res = CliRunner().invoke(
        main,
        [
            "simulate", "--trace", str(_trace(tmp_path)), "--compare", "none", "--quiet",
            "--service", "examples/requests/online_serving.yaml", "--demand", "diurnal:200,40,2",
        ],
    )
    assert res.exit_code == 0, res.output
    import json

    doc = json.loads(res.stdout)
    section = doc["serving"]
    assert section["service"]["lane"] == "online_serving" and section["service"]["replicas"] == {"min": 2, "max": 6}
    assert section["demand"]["kind"] == "diurnal" and section["demand"]["period_s"] == 7200
    on, off = section["with_lending"], section["without_lending"]
    assert on["lending"] is True and off["lending"] is False
    assert on["replicas_requested"] >= 2 and 0 <= on["slo_below_need_share"] <= 1
    # node timings from the policy's inference pool (autoscaling.node_pools.inference)
    assert section["options"]["node_startup_s"] == 360 and section["options"]["node_gpus"] == 4


def test_cli_service_problems_listed_together(tmp_path):
    from click.testing import CliRunner

    from gpu_platform.cli import main

    bad = tmp_path / "svc.yaml"
    bad.write_text("lane: research_best_effort\ngpu_count: 0\nservice: {model_id: m, replicas: {min: 3, max: 2}}\n")
    args = ["simulate", "--trace", str(_trace(tmp_path)), "--compare", "none", "--quiet"]
    res = CliRunner().invoke(main, [*args, "--service", str(bad), "--demand", "diurnal:1,5"])
    assert res.exit_code == 2
    out = res.output
    assert "trough_qps" in out and "not a serving lane" in out and "gpu_count" in out and "replicas" in out and "slo" in out
    res = CliRunner().invoke(main, [*args, "--service", str(bad)])
    assert res.exit_code == 2 and "give both" in res.output


def test_cli_request_rate_trace_is_laid_over_the_batch_clock(tmp_path):
    import json

    from click.testing import CliRunner

    from gpu_platform.cli import main

    rates = tmp_path / "rates.csv"
    rates.write_text("timestamp,qps\n2026-12-01T00:00:00Z,40\n2026-12-01T00:30:00Z,240\n2026-12-01T01:30:00Z,40\n")
    res = CliRunner().invoke(
        main,
        [
            "simulate", "--trace", str(_trace(tmp_path)), "--compare", "none", "--quiet",
            "--service", "examples/requests/online_serving.yaml", "--demand", str(rates),
        ],
    )
    assert res.exit_code == 0, res.output
    section = json.loads(res.stdout)["serving"]
    assert section["demand"]["kind"] == "trace" and section["demand"]["rows"] == 3
    assert section["demand"]["start"] == 0  # moved to the batch trace's first submission
    assert section["with_lending"]["replicas_requested"] >= 6  # 240 qps at 40 per replica


def _with_evidence_lane() -> Scenario:
    """The hand-checked pool plus labeling's own 2 L4s and an evidence lane that only borrows."""
    base = ClusterState(
        cluster_queues=(
            ClusterQueueSpec("research", (ResourceQuota("l4", GPU, 0.0),), cohort="pool", within_cluster_queue=LOWER_PRIORITY),
            ClusterQueueSpec("labeler", (ResourceQuota("l4", GPU, 2.0),), cohort="pool"),
            ClusterQueueSpec("release", (ResourceQuota("l4", GPU, 0.0),), cohort="pool"),
        ),
        flavors=(FlavorSpec("l4", capacity={GPU: 2.0}),),
        cohorts=("pool",),
    )

    def workload(job: TraceJob) -> Workload:
        return Workload(
            name=job.job_id, cq=job.lane, requests={GPU: job.gpus}, priority=800 if job.lane == "release" else 100,
            created_at=job.submit_ts, evidence=job.lane == "release",
        )

    return Scenario("policy", "hand-checked, evidence", base, workload)


def test_evidence_work_borrows_around_the_serving_lanes_idle_gpus():
    # 1 replica of 4 runs: 5 of 6 L4s free, 3 of them the service's idle quota. The evidence job
    # (2 GPUs) takes labeling's idle 2; research borrows the service's 3 and is the one reclaimed.
    jobs = [TraceJob("ev", 10, 5000, 2, "release"), TraceJob("b1", 20, 5000, 3, "research")]
    result, run = simulate_serving(_with_evidence_lane(), jobs, SERVICE, lending=True, options=OPTIONS, start=0, end=3000)
    ev = next(r for r in result.runs if r.job.job_id == "ev")
    b1 = next(r for r in result.runs if r.job.job_id == "b1")
    assert ev.first_admit == 10 and ev.preemptions == 0
    assert b1.first_admit == 20 and b1.preemptions == 1
    up = [p for p in run.replicas if p.requested == 1000]
    assert len(up) == 3 and all(p.reclaimed and p.ready == 1050 for p in up)
    # an evidence job larger than what is not the service's can never borrow here: refused at submission
    big = [TraceJob("ev3", 10, 5000, 3, "release")]
    result, _run = simulate_serving(_with_evidence_lane(), big, SERVICE, lending=True, options=OPTIONS, start=0, end=3000)
    r = result.runs[0]
    assert r.state == "rejected"
    assert "only 2 of the 6 free is not the idle quota of serving lane(s) serving" in r.reason
    assert "evidence job not checkpointed" in r.reason


def _lending_to_evidence(bound: float | None) -> Scenario:
    """The hand-checked pool with `research` an evidence lane and the serving queue declared as the
    policy's would be: lending to evidence runs (`lend_to_evidence`), waiting at most `bound` s
    for their checkpoint (`evidence_reclaim_after`; None: until it comes)."""
    scn = _scenario()
    serving = ClusterQueueSpec(
        "serving", (ResourceQuota("l4", GPU, 0.0),), cohort="pool", protected=True, serving=True,
        lend_to_evidence=True, evidence_reclaim_after=bound,
    )

    def workload(job: TraceJob) -> Workload:
        return Workload(name=job.job_id, cq=job.lane, requests={GPU: job.gpus}, priority=100, created_at=job.submit_ts,
                        evidence=True)

    return replace(scn, base=replace(scn.base, cluster_queues=(*scn.base.cluster_queues, serving)), workload=workload)


@pytest.mark.parametrize(("bound", "ready"), [(1500.0, 1650.0), (None, None)])
def test_a_scale_up_waits_for_an_evidence_borrowers_checkpoint_at_most_the_bound(bound, ready):
    # an evidence run that never checkpoints (`requeue`) borrows 3 of the service's idle L4s at
    # t=10; the service scales up at t=1000. With a 1500 s bound the run is reclaimed at the first
    # autoscaler tick past 10 + 1500 (t=1600), its replicas ready after the 50 s grace; without one
    # they wait for a checkpoint that never comes, until the service scales down at t=2000
    jobs = [TraceJob("ev", 10, 5000, 3, "research", preemption_policy="requeue")]
    result, run = simulate_serving(_lending_to_evidence(bound), jobs, SERVICE, lending=True, options=OPTIONS,
                                   start=0, end=3000)
    ev = result.runs[0]
    assert ev.first_admit == 10 and ev.flavor == "l4"
    up = [p for p in run.replicas if p.requested == 1000]
    assert len(up) == 3
    if ready is None:
        assert ev.preemptions == 0 and all(p.ready is None for p in up)
    else:
        assert ev.preemptions == 1 and ev.lost_gpu_s == 3 * (1600 - 10)  # its work since it started
        assert all(p.admitted == 1600 and p.reclaimed and p.ready == ready for p in up)
