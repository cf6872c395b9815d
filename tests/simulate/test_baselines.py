"""The FIFO baselines (`fifo`, `fifo-backfill`) are one queue over the whole pool, replayed
without the engine: checked by hand, against an independent single-queue FIFO written here
another way, and for EASY backfilling's promise (no job delays the head's reserved start)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_platform.cli.simulate import LANE_MAPS
from gpu_platform.policy import load_policy
from gpu_platform.simulate import TraceJob, lane_report, load_lane_map, load_trace, simulate
from gpu_platform.simulate.scenarios import fifo_backfill_scenario, fifo_flavors_scenario, fifo_scenario

FIX = Path(__file__).parents[1] / "fixtures" / "simulate"


@pytest.fixture(scope="module")
def pol():
    return load_policy(FIX / "policy-one-flavor.yaml")


@pytest.fixture(scope="module")
def elasticflow():
    return load_trace(FIX / "elasticflow-cluster04-head2000.csv",
                      lane_map=load_lane_map(LANE_MAPS / "elasticflow.yaml")).jobs


def _runs(res):
    return {r.job.job_id: r for r in res.runs}


def test_easy_backfill_by_hand(pol):
    # 4 GPUs. j1 (2) runs 0-100; j2 (4, t=10) is the blocked head, reserved at 100 (j1's end).
    # j3 (1, t=20, 10 s) ends at 30 <= 100: backfilled at 20. j4 (2, t=30, 40 s) ends at 70:
    # backfilled at 30. j2 starts at 100 as reserved. Waits 0, 90, 0, 0.
    jobs = load_trace(FIX / "hand-fifo.csv").jobs
    res = simulate(fifo_backfill_scenario(pol), jobs)
    assert {k: (r.first_admit, r.end) for k, r in _runs(res).items()} == {
        "j1": (0, 100), "j2": (100, 150), "j3": (20, 30), "j4": (30, 70)}
    rep = lane_report(res)
    assert rep["horizon_s"] == 150
    assert rep["total"]["gpu_utilization"] == round(490 / 600, 4)
    strict = simulate(fifo_scenario(pol), jobs)  # the docs/simulator.md walk-through
    assert {k: r.first_admit for k, r in _runs(strict).items()} == {"j1": 0, "j2": 100, "j3": 150, "j4": 150}


def test_a_backfilled_job_never_delays_the_head(pol):
    # j3 (1 GPU, 500 s) would fit now but end after the head's reservation at 100, and the head
    # needs every GPU then (no extra GPUs): it waits. j4 (1 GPU) fits the extra GPU of a 3-GPU
    # head: it may run past the reservation.
    jobs = [TraceJob("j1", 0, 100, 2, "low"), TraceJob("j2", 10, 50, 4, "high"), TraceJob("j3", 20, 500, 1, "low")]
    runs = _runs(simulate(fifo_backfill_scenario(pol), jobs))
    assert runs["j2"].first_admit == 100 and runs["j3"].first_admit == 150
    jobs = [TraceJob("j1", 0, 100, 2, "low"), TraceJob("j2", 10, 50, 3, "high"), TraceJob("j4", 20, 500, 1, "low")]
    runs = _runs(simulate(fifo_backfill_scenario(pol), jobs))
    assert runs["j2"].first_admit == 100 and runs["j4"].first_admit == 20


def _independent_fifo(jobs: list[TraceJob], capacity: float) -> dict[str, float]:
    """A single-queue head-of-line FIFO written another way: walk the jobs in queue order, each
    starting at the earliest time >= max(its submission, the previous job's start) at which
    the GPUs still held by jobs started before it leave room for it."""
    order = sorted(jobs, key=lambda j: (j.submit_ts, j.job_id))
    started: list[tuple[float, float, float]] = []  # (start, end, gpus)
    out: dict[str, float] = {}
    prev = -float("inf")
    for j in order:
        t = max(j.submit_ts, prev)
        live = [(e, g) for s, e, g in started if e > t]
        held = sum(g for _e, g in live)
        for e, _g in sorted(live):
            if held + j.gpus <= capacity:
                break
            t = e
            held = sum(g for s, ee, g in started if ee > t)
        started = [x for x in started if x[1] > t] + [(t, t + j.duration_s, j.gpus)]
        out[j.job_id] = t
        prev = t
    return out


def test_fifo_matches_an_independent_single_queue_fifo(elasticflow):
    pol = load_policy()
    capacity = 96.0
    res = simulate(fifo_scenario(pol, capacity), elasticflow)
    starts = _independent_fifo([j for j in elasticflow if j.gpus <= capacity], capacity)
    ours = {r.job.job_id: r.first_admit for r in res.runs if r.first_admit is not None}
    assert ours == pytest.approx(starts)  # every start the same, so p95 and utilization are
    assert any(ours[k] > r.job.submit_ts for k, r in _runs(res).items() if k in ours)  # contended


def test_backfill_never_idles_more_than_strict_fifo_and_never_delays_a_head_past_fifo(elasticflow):
    pol = load_policy()
    strict = lane_report(simulate(fifo_scenario(pol, 96), elasticflow))["total"]
    easy = lane_report(simulate(fifo_backfill_scenario(pol, 96), elasticflow))["total"]
    assert easy["wait_s"]["mean"] < strict["wait_s"]["mean"]
    assert easy["gpu_utilization"] >= strict["gpu_utilization"]
    assert easy["admitted"] == strict["admitted"] == len(elasticflow)


def test_a_job_larger_than_the_pool_is_reported_as_such(pol):
    res = simulate(fifo_scenario(pol), [TraceJob("big", 0, 10, 5, "low"), TraceJob("ok", 1, 10, 1, "low")])
    runs = _runs(res)
    assert runs["big"].state == "rejected" and "more than the whole pool (4)" in runs["big"].reason
    assert runs["ok"].first_admit == 1


def test_fifo_flavors_is_the_engine_fifo_over_flavors(pol):
    jobs = load_trace(FIX / "hand-fifo.csv").jobs
    res = simulate(fifo_flavors_scenario(pol), jobs)  # one flavor: the same as the pool FIFO
    assert {k: r.first_admit for k, r in _runs(res).items()} == {"j1": 0, "j2": 100, "j3": 150, "j4": 150}
    assert res.engine_calls > 0 and simulate(fifo_scenario(pol), jobs).engine_calls == 0


def test_a_small_pool_keeps_node_sized_quotas():
    # The pool at 24 GPUs: the serving lane keeps its 8 L4s, every other quota about a quarter. A lane with nominal 8 and a borrowing limit
    # of 12 H100s (a node of 8 and more) used to become 2 + 3 (rounded down), so its 8-GPU jobs
    # were rejected as "more than it can ever hold". Now it keeps one node.
    import yaml

    from gpu_platform.policy import default_policy_path, parse_policy
    from gpu_platform.simulate.scenarios import node_gpus, policy_scenario

    raw = yaml.safe_load(default_policy_path().read_text())
    raw["lanes"]["candidate_train"]["quotas"] = [
        {"flavor_name": "h100-ondemand", "resource": "nvidia.com/gpu", "nominal_quota": 8, "borrowing_limit": 12}]
    raw["lanes"]["research_best_effort"]["quotas"][1]["nominal_quota"] = 8
    pol = parse_policy(raw)
    assert node_gpus(pol)["h100-ondemand"] == 8
    scn = policy_scenario(pol, 24)
    (quota,) = [q for c in scn.base.cluster_queues if c.name == "candidate_train" for q in c.quotas]
    assert (quota.nominal, quota.borrowing_limit) == (8, 8)  # 2 -> one node; 12 x 1/4 = 3 -> one node
    res = simulate(scn, [TraceJob("node-sized", 0, 100, 8, "candidate_train")])
    assert res.runs[0].state == "done" and res.runs[0].first_admit == 0
    research = {q.flavor: q.nominal for c in scn.base.cluster_queues if c.name == "research_best_effort"
                for q in c.quotas}
    assert research["a100-spot"] == 4  # held a node of 8, but the flavor has only 4 GPUs at this size
    maintenance = {q.flavor: q.nominal for c in scn.base.cluster_queues if c.name == "platform_maintenance"
                   for q in c.quotas}
    assert maintenance["h100-ondemand"] == 1  # 2 x 1/4 = 0.5, rounded half up; less than a node: no floor


def test_a_share_rule_gives_a_stable_few_percent_of_jobs_to_a_lane(tmp_path):
    from gpu_platform.simulate.trace import TraceError

    lm = load_lane_map(LANE_MAPS / "elasticflow-fleet.yaml")
    jobs = load_trace(FIX / "elasticflow-cluster04-head2000.csv", lane_map=lm).jobs
    lanes = [j.lane for j in jobs]
    small = sum(1 for j in jobs if j.gpus <= 8)
    assert 0.01 * small < lanes.count("incident_response") < 0.03 * small
    assert 0.03 * small < lanes.count("release_eval") < 0.08 * small
    assert all(j.gpus <= 8 for j in jobs if j.lane in ("incident_response", "release_eval"))
    again = load_trace(FIX / "elasticflow-cluster04-head2000.csv", lane_map=lm).jobs
    assert [j.lane for j in again] == lanes  # the same jobs every run
    bad = tmp_path / "bad.yaml"
    bad.write_text("column: gpus\nrules:\n  - {share: 1.5, lane: incident_response}\n  - {lane: x}\n")
    with pytest.raises(TraceError) as info:
        load_lane_map(bad)
    assert "rules[0].share: 1.5 must be a number in (0, 1]" in info.value.errors
    assert "rules[1]: needs `values`, `min`/`max` or `share`" in info.value.errors


def test_resizing_keeps_the_serving_lanes_quota_as_declared():
    # A serving lane's quota is sized by its services' replicas, not by the batch load: `--capacity`
    # sets its 8 L4s aside and scales the rest of the pool (64 GPUs of nvidia.com/gpu) to N - 8.
    from gpu_platform.policy import load_policy
    from gpu_platform.simulate.scenarios import policy_scenario

    pol = load_policy()
    for n in (40, 136, 648):
        scn = policy_scenario(pol, n)
        caps = {f.name: (f.capacity or {}).get("nvidia.com/gpu", 0.0) for f in scn.base.flavors}
        assert sum(caps.values()) == n
        k = (n - 8) / 64
        assert caps["h100-ondemand"] == 32 * k and caps["l4-inference"] == 16 * k + 8 and caps["a100-spot"] == 16 * k
        serving = next(c for c in scn.base.cluster_queues if c.name == "online_serving")
        assert [(q.flavor, q.nominal) for q in serving.quotas if q.resource == "nvidia.com/gpu"] == [("l4-inference", 8.0)]
        cand = next(c for c in scn.base.cluster_queues if c.name == "candidate_train")
        # scaled with the pool, never below one 8-GPU node
        assert next(q.nominal for q in cand.quotas if q.flavor == "h100-ondemand") == max(8, round(8 * k))
    with pytest.raises(ValueError, match="leaves no GPUs for batch work.*8 GPUs"):
        policy_scenario(pol, 8)
