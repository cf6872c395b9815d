"""Scorecards and capacity signals on the hand-computed day of tests/scorecards/scenario.py, built by
the real runner into a real DuckDB file; every figure below is worked out in the scenario's table."""

from __future__ import annotations

import duckdb
import pytest

from gpu_platform.finops.sqlmodels import Project, default_project_path
from gpu_platform.observe.scorecards import fired, model_vars, signal_rows
from gpu_platform.policy import load_policy, parse_policy
from gpu_platform.policy.loading import default_policy_path
from gpu_platform.safeload import POLICY_LIMITS, load_document
from tests.scorecards import scenario
from tests.scorecards.scenario import DAY, IMAGE_A, IMAGE_B, IMAGE_C


def _policy(**changes):
    raw = load_document(default_policy_path(), POLICY_LIMITS)
    for key, value in changes.items():
        if isinstance(value, dict):
            raw[key] = {**(raw.get(key) or {}), **value}
        else:
            raw[key] = value
    return parse_policy(raw)


def _build(path: str, policy=None) -> tuple[duckdb.DuckDBPyConnection, Project]:
    con = duckdb.connect(path)
    scenario.load(con)
    project = Project.load(default_project_path())
    project.build(con, day=DAY, variables=model_vars(policy or load_policy()))
    return con, project


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    con, project = _build(str(tmp_path_factory.mktemp("sc") / "warehouse.duckdb"))
    yield con, project
    con.close()


def rows(con, sql: str) -> dict:
    """{subject: row dict} of a query whose first column is the key."""
    cur = con.execute(sql)
    cols = [d[0] for d in cur.description]
    return {r[0]: dict(zip(cols[1:], r[1:], strict=True)) for r in cur.fetchall()}


def test_every_data_test_passes(built):
    con, project = built
    failing = [(t.model, t.test_name, t.failures) for t in project.run_tests(con, day=DAY, variables=model_vars(
        load_policy())) if not t.passed]
    assert failing == []


def test_queue_wait_per_lane_team_site_flavor(built):
    con, _ = built
    lane = rows(con, "select subject, admissions, wait_p50_s, wait_p95_s, wait_max_s, open_waits, open_wait_max_s, "
                     "run_p50_s from scorecard_queue_wait where dimension = 'lane'")
    # T1 waited 600 s, T6 0 s; T1's retry after its failure starts no wait
    assert lane["candidate_train"] == dict(admissions=2, wait_p50_s=300, wait_p95_s=570, wait_max_s=600, open_waits=0,
                                           open_wait_max_s=None, run_p50_s=14400)  # median of 21600 and 7200
    # T2: 0 s, then 3600 s from its requeue after preemption to its second admission
    assert lane["research_best_effort"]["wait_p95_s"] == pytest.approx(3420)
    assert lane["labeler_batch"]["wait_p95_s"] == pytest.approx(7020)  # 3600 + 0.95 x 3600
    assert lane["incident_response"]["wait_max_s"] == 240
    # T7 waits from 20:00 to the snapshot's last event (22:00)
    assert lane["map_semantic_batch"] == dict(admissions=0, wait_p50_s=None, wait_p95_s=None, wait_max_s=None,
                                              open_waits=1, open_wait_max_s=7200, run_p50_s=None)
    site = rows(con, "select subject, admissions, wait_max_s from scorecard_queue_wait where dimension = 'site'")
    assert site == {"sf": dict(admissions=6, wait_max_s=7200), "muc": dict(admissions=2, wait_max_s=3600)}
    team = rows(con, "select subject, admissions from scorecard_queue_wait where dimension = 'team'")
    assert team["safety"] == {"admissions": 2} and team["mapping"] == {"admissions": 0}
    flavor = rows(con, "select subject, admissions from scorecard_queue_wait where dimension = 'flavor'")
    assert flavor == {"a100-spot": {"admissions": 5}, "h100-ondemand": {"admissions": 3},
                      "(not admitted)": {"admissions": 0}}


def test_utilization_allocated_vs_busy(built):
    con, _ = built
    u = rows(con, "select dimension || ':' || subject, allocated_gpu_hours, used_gpu_hours, capacity_gpu_hours "
                  "from scorecard_utilization")
    # gpu-a: T1 4 x 2 x .5 + 4 x 6 x .5, T6 1 x 2 x .1, T4 2 x 1 x .8 = 17.8 busy of 36 held, 192 capacity
    assert u["node_pool:training"] == pytest.approx(dict(allocated_gpu_hours=36, used_gpu_hours=17.8,
                                                         capacity_gpu_hours=192))
    # gpu-b (GPU_UTIL): T2 2x4x.6 twice, T3 2x2x.9, T5 1x4x.5, T8 .5x1 = 15.7 busy of 24.5 held
    assert u["flavor:a100-spot"] == pytest.approx(dict(allocated_gpu_hours=24.5, used_gpu_hours=15.7,
                                                       capacity_gpu_hours=None))
    assert u["lane:candidate_train"] == pytest.approx(dict(allocated_gpu_hours=34, used_gpu_hours=16.2,
                                                         capacity_gpu_hours=None))  # T1 + T6
    assert u["team:safety"]["used_gpu_hours"] == pytest.approx(3.6 + 1.6)  # T3 + T4
    assert u["site:muc"]["allocated_gpu_hours"] == pytest.approx(6)
    assert u["sharing_mode:exclusive"]["allocated_gpu_hours"] == pytest.approx(60.5)
    assert u["profile:whole"]["used_gpu_hours"] == pytest.approx(33.5)


def test_failures_retries_and_oom(built):
    con, _ = built
    f = rows(con, "select dimension || ':' || subject, attempts, failed_attempts, preempted_attempts, retry_attempts, "
                  "oom_failures, oom_retries from scorecard_failures")
    # image A: T1 a1 (failed, exit 137 = OOM), T1 a2 (its retry), T6
    assert f[f"image:{IMAGE_A}"] == dict(attempts=3, failed_attempts=1, preempted_attempts=0, retry_attempts=1,
                                         oom_failures=1, oom_retries=1)
    # image C: T3, T4, T5 (failed with exit 1 and "dataset shard missing": not OOM)
    assert f[f"image:{IMAGE_C}"] == dict(attempts=3, failed_attempts=1, preempted_attempts=0, retry_attempts=0,
                                         oom_failures=0, oom_retries=0)
    assert f[f"image:{IMAGE_B}"]["preempted_attempts"] == 1
    assert f["dataset:ds-frames"]["attempts"] == 4  # T1 x 2, T2 x 2
    assert f["dataset:(none)"]["attempts"] == 3  # T3, T4, T6
    assert f["gpu_type:h100-ondemand"]["attempts"] == 4
    assert f["workload:label_batch"]["failed_attempts"] == 1
    assert f["lane:candidate_train"]["oom_retries"] == 1
    assert f["team:perception"]["attempts"] == 3 and f["site:sf"]["attempts"] == 7
    (rate,) = con.execute("select failure_rate from scorecard_failures where dimension = 'lane' "
                          "and subject = 'labeler_batch'").fetchone()
    assert rate == 0.5


def test_preemption_impact_lost_since_checkpoint(built):
    con, _ = built
    p = rows(con, "select dimension || ':' || subject, interrupted_attempts, interrupted_requests, "
                  "interrupted_gpu_hours, lost_gpu_hours, lost_from_checkpoint, failed_gpu_hours, ended_gpu_hours "
                  "from scorecard_preemption")
    # T2 a1: 2 GPUs x 4 h interrupted; checkpoint at 04:15, preempted at 05:00: 2 x 0.75 lost
    assert p["lane:research_best_effort"] == pytest.approx(dict(
        interrupted_attempts=1, interrupted_requests=1, interrupted_gpu_hours=8, lost_gpu_hours=1.5,
        lost_from_checkpoint=1, failed_gpu_hours=0, ended_gpu_hours=16))
    assert p["site:sf"]["interrupted_attempts"] == 1 and p["site:muc"]["interrupted_attempts"] == 0
    assert p["flavor:a100-spot"] == pytest.approx(dict(
        interrupted_attempts=1, interrupted_requests=1, interrupted_gpu_hours=8, lost_gpu_hours=1.5,
        lost_from_checkpoint=1, failed_gpu_hours=4, ended_gpu_hours=24.5))


def test_preemption_without_checkpoint_uses_the_request_policy(tmp_path):
    con = duckdb.connect(str(tmp_path / "w.duckdb"))
    scenario.load(con)
    # no checkpoint recorded: T2 resumes from checkpoints (checkpoint_requeue), so at most one 30 min interval
    con.execute("update raw_request_events set details = '{\"by\": \"T3\"}' where event = 'preempted'")
    project = Project.load(default_project_path())
    project.build(con, day=DAY, select=["+scorecard_preemption"], variables=model_vars(load_policy()))
    (lost,) = con.execute("select lost_gpu_hours from scorecard_preemption where dimension = 'lane' "
                          "and subject = 'research_best_effort'").fetchone()
    assert lost == pytest.approx(2 * 0.5)
    # a job that restarts (requeue) loses the whole attempt
    con.execute("update raw_request_metadata set preemption_policy = 'requeue' where request_id = 'T2'")
    project.build(con, day=DAY, select=["stg_request_metadata", "scorecard_preemption"],
                  variables=model_vars(load_policy()))
    (lost,) = con.execute("select lost_gpu_hours from scorecard_preemption where dimension = 'lane' "
                          "and subject = 'research_best_effort'").fetchone()
    assert lost == pytest.approx(8.0)
    con.close()


def test_cache_efficiency_with_and_without_timings(built):
    con, _ = built
    c = rows(con, "select subject, runs, timed_runs, pull_setup_share, missing_reason from scorecard_cache_efficiency "
                  "where dimension in ('image', 'all')")
    assert c[IMAGE_A]["pull_setup_share"] == pytest.approx(360 / 21600)
    assert c[IMAGE_B]["pull_setup_share"] == pytest.approx(4200 / 14400)
    assert c[IMAGE_C]["runs"] == 2 and c[IMAGE_C]["timed_runs"] == 0
    assert c[IMAGE_C]["pull_setup_share"] is None and "no image pull / setup timings" in c[IMAGE_C]["missing_reason"]
    assert c["all"]["pull_setup_share"] == pytest.approx(4560 / 36000)


def test_allocation_coverage_and_bypass(built):
    con, _ = built
    a = rows(con, "select subject, cost, cost_with_owner, cost_with_site, cost_with_artifact, cost_covered, "
                  "spend_share from scorecard_allocation_coverage")
    # T1 32 GPU-h x 4.05 + T4 2 x 4.05 + T6 2 x 4.05 + (T2 16 + T3 4 + T5 4 + T8 0.5) x 1.844 + 0.5 x 4.05 unattributed
    assert str(a["all"]["cost"]) == "193.003000"
    # less T8 (no owner); the unattributed pod is in team-platform's namespace: platform owns it (bypass)
    assert str(a["all"]["cost_with_owner"]) == "192.081000"
    assert str(a["all"]["cost_with_site"]) == "190.978000"
    assert str(a["all"]["cost_with_artifact"]) == "145.076000"  # T1, T3, T4
    assert str(a["all"]["cost_covered"]) == "145.076000"
    assert a["sf"]["spend_share"] == pytest.approx(175.502 / 193.003)
    b = con.execute("select attributed_gpu_hours, unattributed_gpu_hours, unattributed_pods, bypass_share, "
                    "approved_exceptions, safety_approvals, cost_exceptions, approvers from scorecard_bypass").fetchall()
    assert b == [(60.5, 0.5, 1, pytest.approx(0.5 / 61), 2, 1, 1, 2)]


def test_sharing_mode_and_profile_from_the_gpu_resource(built):
    con, _ = built
    m = rows(con, "select request_id, sharing_mode, profile from stg_request_metadata where request_id in ('T1', 'T7')")
    assert m == {"T1": {"sharing_mode": "exclusive", "profile": "whole"},
                 "T7": {"sharing_mode": "mig", "profile": "1g.10gb"}}


EXPECTED = {  # (signal, subject): (fired, severity, value)
    ("queue_wait_exceeds_training_time", "labeler_batch"): (True, "WARN", 3.9),
    ("queue_wait_exceeds_training_time", "release_eval"): (False, "ERROR", 0.5),
    ("queue_wait_exceeds_training_time", "candidate_train"): (False, "WARN", 570 / 14400),
    ("pool_utilization_low", "training"): (True, "WARN", 17.8 / 192),
    ("pool_utilization_low", "spot"): (True, "WARN", 15.7 / 192),
    ("oom_retries_high", "candidate_train"): (True, "WARN", 1 / 3),
    ("oom_retries_high", "release_eval"): (False, "ERROR", 0.0),
    ("release_replay_delayed_by_research", "release_eval"): (True, "ERROR", 3600),
    ("incident_waiting_for_capacity", "incident_response"): (False, "ERROR", 240),
    ("spot_failures_erasing_work", "a100-spot"): (True, "WARN", (1.5 + 4) / 24.5),
    ("site_dominating_spend", "sf (USD)"): (True, "WARN", 175.502 / 193.003),
    ("site_dominating_spend", "muc (USD)"): (False, "WARN", 15.476 / 193.003),
    ("image_pull_dominating_runtime", IMAGE_B): (True, "WARN", 4200 / 14400),
    ("image_pull_dominating_runtime", IMAGE_A): (False, "WARN", 360 / 21600),
    ("whole_gpu_fits_slice", "T6"): (True, "WARN", 6000 / 1024),
    ("whole_gpu_fits_slice", "T1"): (False, "WARN", 70000 / 1024),
    # the lanes' own targets (lanes.<lane>.targets.wait_p95): incident 60 s, release 15 min, candidate 24 h
    ("lane_wait_target_missed", "incident_response"): (True, "ERROR", 240),
    ("lane_wait_target_missed", "release_eval"): (True, "ERROR", 3600),
    ("lane_wait_target_missed", "candidate_train"): (False, "WARN", 570),
}


def test_each_signal_fires_or_not_with_policy_threshold(built):
    con, _ = built
    got = {(r.signal, r.subject): r for r in signal_rows(con, DAY, DAY)}
    for key, (is_fired, severity, value) in EXPECTED.items():
        r = got[key]
        assert (r.signal, r.subject, r.value == pytest.approx(value), r.severity) == (*key, True, severity)
        assert (key, r.signal in {f.signal for f in fired(con, DAY, DAY) if f.subject == r.subject}) == (key, is_fired)
    cs = load_policy().capacity_signals
    assert got[("pool_utilization_low", "spot")].threshold == cs.pool_utilization_min == 0.30
    assert got[("whole_gpu_fits_slice", "T6")].threshold == cs.slice_memory_gib
    assert got[("release_replay_delayed_by_research", "release_eval")].action.startswith(
        "release_eval waited up to 3600 s (fires above 900 s) while research_best_effort held GPUs")
    assert "nvidia.com/mig-1g.10gb" in got[("whole_gpu_fits_slice", "T6")].action


def test_thresholds_come_from_the_policy(tmp_path):
    policy = _policy(capacity_signals={"pool_utilization_min": 0.09, "incident_wait_s": 200})
    con, _ = _build(str(tmp_path / "w.duckdb"), policy)
    got = {(r.signal, r.subject): (r.fired, r.threshold) for r in signal_rows(con, DAY, DAY)}
    assert got[("pool_utilization_low", "training")] == (False, 0.09)  # 9.27% busy
    assert got[("pool_utilization_low", "spot")] == (True, 0.09)  # 8.18% busy
    assert got[("incident_waiting_for_capacity", "incident_response")] == (True, 200)
    con.close()


def test_lane_wait_targets_come_from_the_policy(tmp_path):
    lanes = load_document(default_policy_path(), POLICY_LIMITS)["lanes"]
    lanes["candidate_train"]["targets"] = {"wait_p95": "5m"}
    lanes["labeler_batch"]["targets"] = {"wait_p95": "3h"}
    del lanes["release_eval"]["targets"]
    con, _ = _build(str(tmp_path / "t.duckdb"), _policy(lanes=lanes))
    got = {r.subject: (r.fired, r.threshold, r.value) for r in signal_rows(con, DAY, DAY)
           if r.signal == "lane_wait_target_missed"}
    assert got == {"incident_response": (True, 60, 240), "candidate_train": (True, 300, 570),
                   "labeler_batch": (False, 10800, 7020),  # release_eval has no target now: no row
                   "research_best_effort": (False, 259200, 3420)}  # the packaged 72h
    con.close()


def test_scale_decides_rows_signals_and_severity(tmp_path):
    con, _ = _build(str(tmp_path / "s0.duckdb"), _policy(scale="S0"))
    counts = {m: con.execute(f"select count(*) from {m}").fetchone()[0] for m in (
        "scorecard_queue_wait", "scorecard_utilization", "scorecard_failures", "scorecard_preemption",
        "scorecard_cache_efficiency", "scorecard_allocation_coverage", "scorecard_bypass")}
    assert counts["scorecard_queue_wait"] > 0 and counts["scorecard_utilization"] > 0
    assert {m: n for m, n in counts.items() if n} == {k: counts[k] for k in ("scorecard_queue_wait",
                                                                           "scorecard_utilization")}
    # S0 has utilization by pool, flavor, lane, team and site, not by sharing mode
    assert {d for (d,) in con.execute("select distinct dimension from scorecard_utilization").fetchall()} == {
        "node_pool", "flavor", "lane", "team", "site"}
    sig = signal_rows(con, DAY, DAY)
    assert {r.signal for r in sig} == {"queue_wait_exceeds_training_time", "pool_utilization_low",
                                        "release_replay_delayed_by_research", "incident_waiting_for_capacity",
                                        "lane_wait_target_missed"}
    assert {r.severity for r in sig} == {"WARN"}  # below S3 nothing is ERROR
    con.close()
    con, _ = _build(str(tmp_path / "s5.duckdb"), _policy(scale="S5"))
    sev = {(r.signal, r.subject): r.severity for r in signal_rows(con, DAY, DAY)}
    assert sev[("spot_failures_erasing_work", "a100-spot")] == "ERROR"
    assert sev[("site_dominating_spend", "sf (USD)")] == "ERROR"
    assert sev[("pool_utilization_low", "training")] == "WARN"
    con.close()


def test_project_defaults_are_the_shipped_policy():
    assert {k: v for k, v in Project.load(default_project_path()).vars.items() if k in model_vars(load_policy())} \
        == model_vars(load_policy())
