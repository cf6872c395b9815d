"""The `simulate` command's output, the Kueue scenario, and the event-loop shortcuts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpu_platform.cli import main
from gpu_platform.cli.simulate import LANE_MAPS
from gpu_platform.policy import load_policy
from gpu_platform.simulate import SCENARIOS, TraceJob, load_lane_map, load_trace, simulate
from gpu_platform.simulate.kueue_scenario import kueue_report, load_generator, run_generator

FIX = Path(__file__).parents[1] / "fixtures" / "simulate"
ROOT = Path(__file__).parents[2]
LANE_KEYS = {
    "jobs",
    "admitted",
    "finished",
    "failed",
    "never_admitted",
    "rejected_at_submission",
    "wait_s",
    "gpu_hours",
    "gpu_utilization",
    "useful_gpu_utilization",
    "lost_gpu_utilization",
    "preemptions",
    "gpu_hours_lost_to_preemption",
    "never_admitted_reasons",
}
TOTAL_KEYS = LANE_KEYS | {"gpu_hours_stranded_by_fragmentation", "gpu_hours_idle_by_lending_rule", "never_fits"}


def _slice(tmp_path: Path, n: int) -> Path:
    lines = (FIX / "elasticflow-cluster04-head2000.csv").read_text().splitlines()
    p = tmp_path / "slice.csv"
    p.write_text("\n".join(lines[: n + 1]) + "\n")
    return p


def test_cli_json_shape_and_files(tmp_path):
    out = tmp_path / "out"
    res = CliRunner().invoke(
        main,
        ["simulate", "--trace", str(_slice(tmp_path, 150)), "--lane-map", "elasticflow", "--capacity", "128", "--out", str(out), "--quiet"],
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert set(doc) == {
        "trace", "lane_map", "capacity_gpus", "checkpoint_interval_s", "tick_s", "node_model", "gang_split", "scenarios",
        "targets"}
    assert doc["node_model"] is None and doc["gang_split"] is None
    assert doc["trace"]["rows"] == 150 and doc["trace"]["accepted"] == 150
    assert doc["capacity_gpus"] == 128
    assert list(doc["scenarios"]) == ["policy", "fifo", "fifo-backfill", "fifo-flavors", "fifo-flavors-backfill", "strict"]
    for rep in doc["scenarios"].values():
        assert set(rep["total"]) == TOTAL_KEYS and rep["total"]["gpu_hours_stranded_by_fragmentation"] is None
        assert rep["node_model"] is None
        assert all(set(lane) == LANE_KEYS for lane in rep["lanes"].values())
        assert set(rep["lanes"]) <= {"research_best_effort", "baseline_rebuild", "candidate_train"}
        assert set(rep["total"]["wait_s"]) == {"p50", "p95", "max", "mean"}
        assert sum(lane["jobs"] for lane in rep["lanes"].values()) == 150
    assert doc["scenarios"]["fifo"]["total"]["preemptions"] == 0
    for name in ("report.html", "report.json", "wait_p95.png", "utilization.png", "usage_policy.png"):
        assert (out / name).stat().st_size > 0
    assert (out / "usage_policy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "research_best_effort" in (out / "report.html").read_text()


def test_cli_node_model_places_jobs_on_nodes(tmp_path):
    out = tmp_path / "out"
    args = ["simulate", "--trace", str(_slice(tmp_path, 150)), "--lane-map", "elasticflow", "--capacity", "136",
            "--compare", "fifo-backfill"]
    res = CliRunner().invoke(main, [*args, "--node-model", "policy", "--out", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["node_model"] == "policy"
    for rep in doc["scenarios"].values():
        # 136 GPUs: the serving lane's 8 L4s as declared, the policy's other 64 x 2: h100 64 = 8 nodes
        # of 8, l4 32 + 8 = 10 nodes of 4, a100 32 = 4 nodes of 8
        assert rep["node_model"] == {
            "node_gpus": {"h100-ondemand": 8, "l4-inference": 4, "a100-spot": 8}, "nodes": 22, "gang_split": "smallest"}
        assert rep["total"]["gpu_hours_stranded_by_fragmentation"] >= 0
    assert "GPU-h stranded" in res.stderr and "on 22 nodes" in res.stderr
    assert (out / "stranded_gpu_hours.png").stat().st_size > 0
    assert "GPU-h stranded" in (out / "report.html").read_text()
    res = CliRunner().invoke(main, [*args, "--node-gpus", "16", "--quiet"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["scenarios"]["policy"]["node_model"]["nodes"] == 9  # 64, 40, 32 over 16: 4 + 3 + 2
    res = CliRunner().invoke(main, [*args, "--node-gpus", "8", "--node-model", "policy"])
    assert res.exit_code == 2 and "give one of them" in res.output


def test_cli_missing_column_exits_2(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("job_id,submit_ts,gpus,lane\na,0,1,low\n")
    res = CliRunner().invoke(main, ["simulate", "--trace", str(p)])
    assert res.exit_code == 2
    assert "missing column duration_s" in res.stderr


def test_cli_carries_status_and_users():
    res = CliRunner().invoke(
        main,
        ["simulate", "--trace", str(FIX / "hand-fifo.csv"), "--policy", str(FIX / "policy-one-flavor.yaml"), "--compare", "fifo", "--quiet"],
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["trace"]["statuses"] == {"Completed": 3, "Failed": 1}
    assert doc["trace"]["users"] == 2
    # the FIFO walk-through of docs/simulator.md
    fifo = doc["scenarios"]["fifo"]["total"]
    assert fifo["wait_s"]["p95"] == 128.5 and fifo["gpu_utilization"] == 0.6447


def test_cli_unknown_baseline_exits_2(tmp_path):
    res = CliRunner().invoke(main, ["simulate", "--trace", str(FIX / "hand-fifo.csv"), "--compare", "fifo,lottery"])
    assert res.exit_code == 2
    assert "unknown baseline 'lottery'" in res.stderr


@pytest.mark.parametrize("name", ["policy", "fifo-flavors", "strict"])
def test_shortcuts_give_the_full_queue_outcome(tmp_path, name):
    """Showing identical waiting workloads one at a time (and at most `window` distinct ones),
    and folding running workloads nobody may preempt, gives the same admissions as showing the
    engine every workload."""
    pol = load_policy()
    jobs = load_trace(_slice(tmp_path, 400), lane_map=load_lane_map(LANE_MAPS / "elasticflow.yaml")).jobs
    fast = simulate(SCENARIOS[name](pol, 96), jobs)
    full = simulate(SCENARIOS[name](pol, 96), jobs, window=10**9, per_shape=10**9, merge_held=False)
    key = lambda res: {r.job.job_id: (r.first_admit, r.last_admit, r.end, r.preemptions) for r in res.runs}  # noqa: E731
    assert key(fast) == key(full)
    assert any(r.first_admit != r.job.submit_ts for r in fast.runs)  # the pool was contended


def test_kueue_generator_by_hand():
    # One queue of nominal 1; three workloads created at 0.1, 0.2, 0.3 s, 250 ms each: admitted at
    # 0.1, 0.35, 0.6 -> time to admission 0, 150, 300 ms (avg 150); 0.75 cpu-s used over 0.85 s.
    ks, res = run_generator(FIX / "kueue-tiny-generator.yaml")
    rep = kueue_report(ks, res)
    assert rep["workloadClasses"]["small"]["averageTimeToAdmissionMs"] == 150
    assert rep["clusterQueueClasses"]["cq"]["usagePct"] == round(100 * 0.75 / 0.85, 2)
    assert list(rep["clusterQueues"]) == ["cq-0-0-cohort-0"]


def test_kueue_baseline_generator_shape():
    ks = load_generator(ROOT / "examples" / "simulate" / "kueue-baseline-generator.yaml")
    assert len(ks.jobs) == 5 * 6 * (350 + 100 + 50)
    assert len(ks.scenario.base.cluster_queues) == 30 and len(ks.scenario.base.cohorts) == 5
    large = [j for j in ks.jobs if j.cls == "large" and j.lane == "cq-0-0-cohort-0"]
    assert [j.submit_ts for j in large[:2]] == [1.2, 2.4] and large[0].gpus == 20 and large[0].priority == 200


def test_kueue_generator_errors_name_the_field(tmp_path):
    p = tmp_path / "g.yaml"
    p.write_text("cohorts:\n  - className: c\n    count: 1\n    queuesSets:\n    - className: q\n      count: 1\n      withinClusterQueue: Sometimes\n      workloadsSets: []\n")
    res = CliRunner().invoke(main, ["simulate", "--generator", str(p)])
    assert res.exit_code == 2
    assert "cohorts[0].queuesSets[0].nominalQuota: required" in res.stderr
    assert "cohorts[0].queuesSets[0].withinClusterQueue: 'Sometimes' is not one of" in res.stderr


def test_cli_generator_writes_report(tmp_path):
    out = tmp_path / "k"
    res = CliRunner().invoke(main, ["simulate", "--generator", str(FIX / "kueue-tiny-generator.yaml"), "--out", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["workloadClasses"]["small"]["count"] == 3
    assert (out / "kueue_summary.png").read_bytes()[:4] == b"\x89PNG"
    assert "small" in (out / "report.html").read_text()


def test_cli_empty_trace(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("job_id,submit_ts,duration_s,gpus,lane\n")
    res = CliRunner().invoke(main, ["simulate", "--trace", str(p), "--quiet"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["scenarios"]["policy"]["total"]["jobs"] == 0
    assert doc["scenarios"]["policy"]["total"]["wait_s"]["p50"] is None


def test_a_burst_larger_than_the_window_is_admitted_at_its_instant():
    """64 jobs arriving at one instant, more than the 16 distinct ones shown at first: the window
    grows within the instant, so every job the quota allows starts then, as when the engine is
    shown everything (before, an arrival-only instant stopped after the first 16)."""
    pol = load_policy()
    jobs = [TraceJob(f"r{i:02d}", 0, 1000, 1, "research_best_effort") for i in range(64)]
    fast = simulate(SCENARIOS["policy"](pol, None), jobs)
    full = simulate(SCENARIOS["policy"](pol, None), jobs, window=10**9, per_shape=10**9, merge_held=False)
    key = lambda res: {r.job.job_id: (r.first_admit, r.flavor, r.end) for r in res.runs}  # noqa: E731
    assert key(fast) == key(full)
    assert sum(1 for r in fast.runs if r.first_admit == 0) > 16


def test_a_trace_with_its_own_column_names_is_pointed_at_the_lane_maps(tmp_path):
    p = tmp_path / "ef.csv"
    p.write_text("job_id,submission_time,duration,num_gpu\na,0,10,1\n")
    res = CliRunner().invoke(main, ["simulate", "--trace", str(p)])
    assert res.exit_code == 2
    assert "missing column submit_ts" in res.stderr
    assert "the trace's columns are job_id, submission_time, duration, num_gpu" in res.stderr
    assert "--lane-map FILE`, or a shipped one: elasticflow, elasticflow-fleet" in res.stderr
    ok = CliRunner().invoke(main, ["simulate", "--trace", str(p), "--lane-map", "elasticflow", "--quiet"])
    assert ok.exit_code == 0, ok.output  # the hint works as printed


def test_cli_prints_what_the_serving_lanes_lending_rule_kept_idle(tmp_path):
    # 400 jobs on 96 GPUs, the serving lane with `lend_to_evidence: false`: candidate runs
    # (evidence, not yet checkpointed) wait while the serving lane's idle L4s, which the gate keeps
    # them off, sit free; the baselines have no such rule
    from gpu_platform.policy.loading import default_policy_path

    text = default_policy_path().read_text()
    assert "    lend_to_evidence: true\n    evidence_reclaim_after: 30m\n" in text
    off = tmp_path / "off.yaml"
    off.write_text(text.replace("    lend_to_evidence: true\n    evidence_reclaim_after: 30m\n", "    lend_to_evidence: false\n"))
    args = ["simulate", "--trace", str(_slice(tmp_path, 400)), "--lane-map", "elasticflow", "--capacity", "96",
            "--compare", "fifo"]
    res = CliRunner().invoke(main, [*args, "--policy", str(off)])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    idle = doc["scenarios"]["policy"]["total"]["gpu_hours_idle_by_lending_rule"]
    assert idle > 0 and doc["scenarios"]["fifo"]["total"]["gpu_hours_idle_by_lending_rule"] is None
    # the packaged policy lends to those runs (a 30m bound on the wait for their checkpoint)
    shipped = CliRunner().invoke(main, args)
    assert shipped.exit_code == 0, shipped.output
    assert json.loads(shipped.stdout)["scenarios"]["policy"]["total"]["gpu_hours_idle_by_lending_rule"] < idle
    assert f"policy: the serving lane's lending rule kept {idle:,.1f} GPU-h" in res.stderr
    assert "lend_to_evidence: true" in res.stderr
