"""`policy tune` weighs a service beside the trace: its lane's lending_limit is a knob, its share of
time below need a constraint, batch utilization the objective (docs/serving.md, Simulating traffic).

Eight research jobs of 4 L4s (2 h) and the example service (2..6 replicas of 1 L4, 40 qps each)
whose demand steps from 40 to 240 qps (6 replicas) for an hour: lending lets research use the
service's idle L4s (utilization up) and reclaiming a borrower (30 s grace + 60 s start) is faster
than starting a node (6 min + 60 s) for the replicas the other lanes' idle nodes cannot hold.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from gpu_platform.cli import main
from gpu_platform.policy import load_policy
from gpu_platform.policy.loading import default_policy_path
from gpu_platform.safeload import POLICY_LIMITS, load_document
from gpu_platform.simulate import tune
from gpu_platform.simulate.serving import ServingInputError, serving_target
from gpu_platform.simulate.trace import TraceJob

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "requests" / "online_serving.yaml"
JOBS = [TraceJob(f"r{i}", i * 60.0, 2 * 3600.0, 4, "research_best_effort", gpu_type="l4-inference") for i in range(8)]
KNOB = "lanes.online_serving.l4-inference.lending_limit"


def test_tune_weighs_serving_slo_and_batch_utilization(tmp_path):
    rate = tmp_path / "rate.csv"
    rate.write_text("timestamp,qps\n0,40\n1800,240\n5400,40\n")
    target = serving_target(load_policy(), JOBS, str(EXAMPLE), str(rate), 0.05)
    raw = load_document(default_policy_path(), POLICY_LIMITS)
    knobs = tune.discover(raw, {"research_best_effort"})
    assert any(k.name == KNOB for k in knobs)  # the serving lane's lending limit is searched
    problem = tune.Problem(raw, JOBS, None, 0.02, serving=target)
    values = tune.current(raw, knobs)
    assert values[KNOB] >= 8  # the packaged policy lends all its idle L4s (no lending_limit)
    shut = problem.evaluate(knobs, {**values, KNOB: 0})
    lend = problem.evaluate(knobs, values)
    for ev in (shut, lend):
        share = ev.report["serving"]["slo_below_need_share"]
        assert ev.violations["online_serving.serving_below_need_share"] == pytest.approx((share - 0.05) / 0.05)
    assert lend.utilization > shut.utilization
    assert lend.report["serving"]["reclaims"] > 0 and shut.report["serving"]["reclaims"] == 0
    assert lend.report["serving"]["slo_below_need_share"] < shut.report["serving"]["slo_below_need_share"]


def test_serving_target_lists_every_problem(tmp_path):
    with pytest.raises(ServingInputError) as e:
        serving_target(load_policy(), JOBS, str(tmp_path / "missing.yaml"), "diurnal:x", 1.5, reclaim_grace_s=-1)
    text = "\n".join(e.value.errors)
    assert "missing.yaml" in text and "--demand" in text and "--serving-slo" in text and "--reclaim-grace" in text


def test_policy_tune_needs_service_and_demand_together(tmp_path):
    res = CliRunner().invoke(
        main, ["policy", "tune", "--trace", str(EXAMPLE), "--out", str(tmp_path / "o"), "--service", str(EXAMPLE)]
    )
    assert res.exit_code == 2 and "--service and --demand: give both" in res.output
