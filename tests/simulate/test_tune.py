"""`gpu-platform policy tune`: the knobs it finds, the candidates it writes (valid, comments kept,
a diff of only what moved), and a search that turns the tight example policy into a better one."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpu_platform.cli import main
from gpu_platform.policy import load_policy
from gpu_platform.policy.loading import parse_policy_document
from gpu_platform.safeload import POLICY_LIMITS, load_document
from gpu_platform.simulate import load_lane_map, load_trace, tune
from gpu_platform.simulate.trace import TraceJob

ROOT = Path(__file__).parents[2]
TIGHT = ROOT / "examples" / "tune" / "tight-policy.yaml"
SLICE = ROOT / "tests" / "fixtures" / "simulate" / "elasticflow-cluster04-head2000.csv"
FLEET = ROOT / "gpu_platform" / "simulate" / "lane_maps" / "elasticflow-fleet.yaml"
TRACE_LANES = {"research_best_effort", "baseline_rebuild", "candidate_train", "incident_response", "release_eval"}


@pytest.fixture(scope="module")
def raw():
    return load_document(TIGHT, POLICY_LIMITS)


def test_the_tight_example_is_valid_and_tight():
    pol = load_policy(TIGHT)
    cand = {q.flavor_name: q for q in pol.lanes["candidate_train"].quotas}
    assert cand["h100-ondemand"].borrowing_limit == 12
    assert "l4-inference" not in cand


def test_knobs_come_from_the_policy(raw):
    knobs = {k.name: k for k in tune.discover(raw, TRACE_LANES)}
    # a lane with jobs: its whole-GPU rows' three numbers, borrow-only rows for flavors it lacks
    assert {"lanes.candidate_train.h100-ondemand.nominal_quota", "lanes.candidate_train.h100-ondemand.borrowing_limit",
            "lanes.candidate_train.h100-ondemand.lending_limit"} <= set(knobs)
    assert knobs["lanes.candidate_train.l4-inference.borrow_only"].kind == "row"
    assert knobs["lanes.candidate_train.l4-inference.borrow_only"].high == 16  # the L4s' capacity
    assert knobs["lanes.candidate_train.reclaim_within_cohort"].choices == ("Never", "LowerPriority", "Any")
    assert "lanes.candidate_train.max_priority_threshold" in knobs
    # ... on a grid of 50 through the written threshold, so the input policy is a point of the search
    import copy

    for written, grid in ((200, (0, 1000)), (299, (49, 999)), (1200, (0, 1000))):
        doc = copy.deepcopy(raw)
        doc["lanes"]["candidate_train"]["preemption"]["borrow_within_cohort"]["max_priority_threshold"] = written
        k = next(k for k in tune.discover(doc, TRACE_LANES) if k.name == "lanes.candidate_train.max_priority_threshold")
        assert ((k.low, k.high), k.step) == (grid, 50)
        assert tune.current(doc, [k])[k.name] == min(written, k.high)
    # MIG slices and shared GPUs are not whole GPUs: never a knob
    assert not [n for n in knobs if "h100-mig" in n or "l4-shared" in n]
    # a lane without jobs in the trace only lends: its lending limits are knobs, nothing else
    assert {n for n in knobs if n.startswith("lanes.labeler_batch.")} == {
        "lanes.labeler_batch.l4-inference.lending_limit", "lanes.labeler_batch.a100-spot.lending_limit"}
    # the protected lane is left as written
    assert not [n for n in knobs if n.startswith("lanes.platform_maintenance.")] or \
        all(k.field == "lending_limit" for n, k in knobs.items() if n.startswith("lanes.platform_maintenance."))
    assert "cohorts.assurance.h100-ondemand.lending_limit" in knobs


def test_the_input_values_round_trip_to_the_same_file(raw):
    knobs = tune.discover(raw, TRACE_LANES)
    text = TIGHT.read_text()
    same = tune.tuned_text(text, knobs, tune.current(raw, knobs))
    assert tune.diff(text, same, "p") == ""


def test_lend_idle_is_written_as_a_small_valid_diff(raw, tmp_path):
    knobs = tune.discover(raw, TRACE_LANES)
    text = TIGHT.read_text()
    values = tune.repair(raw, knobs, tune.lend_idle(raw, knobs))
    after = tune.tuned_text(text, knobs, values)
    out = tmp_path / "tuned.yaml"
    out.write_text(after)
    pol = load_policy(out)
    cand = {q.flavor_name: q for q in pol.lanes["candidate_train"].quotas}
    assert cand["h100-ondemand"].borrowing_limit is None  # opened
    assert cand["l4-inference"].nominal_quota == 0 and cand["l4-inference"].borrowing_limit is None  # borrow only
    d = tune.diff(text, after, "p")
    changed = [ln for ln in d.splitlines() if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
    assert changed and all("quota" in ln or "reclaim_within_cohort" in ln for ln in changed), changed
    # comments and layout are kept
    assert after.splitlines()[0] == text.splitlines()[0]
    assert "  - name: h100-ondemand" in after


def test_repair_keeps_nominal_quotas_within_each_flavor(raw):
    knobs = tune.discover(raw, TRACE_LANES)
    values = tune.current(raw, knobs)
    for k in knobs:
        if k.field == "nominal_quota":
            values[k.name] = k.high  # every lane asks for the whole flavor: invalid as written
    with pytest.raises(Exception, match="nominal quotas sum"):
        parse_policy_document(tune.apply(copy.deepcopy(raw), knobs, values), "p")
    fixed = tune.repair(raw, knobs, values)
    parse_policy_document(tune.apply(copy.deepcopy(raw), knobs, fixed), "p")  # valid now
    assert any(fixed[n] < values[n] for n in values if n.endswith("nominal_quota"))


def test_a_lane_may_get_quota_of_its_own_on_a_flavor_it_lacks(raw, tmp_path):
    knobs = tune.discover(raw, TRACE_LANES)
    names = {k.name for k in knobs}
    # candidate training has no A100 row in the tight policy: its nominal there is a knob too
    assert {"lanes.candidate_train.a100-spot.nominal_quota", "lanes.candidate_train.a100-spot.borrow_only"} <= names
    values = tune.current(raw, knobs)
    assert values["lanes.candidate_train.a100-spot.nominal_quota"] == 0  # the input: no row
    values["lanes.candidate_train.a100-spot.nominal_quota"] = 4
    values["lanes.candidate_train.a100-spot.borrow_only"] = 0  # ignored: the lane owns quota there now
    values = tune.repair(raw, knobs, values)
    out = tmp_path / "p.yaml"
    out.write_text(tune.tuned_text(TIGHT.read_text(), knobs, values))
    pol = load_policy(out)
    cand = {q.flavor_name: q for q in pol.lanes["candidate_train"].quotas}
    assert cand["a100-spot"].nominal_quota == 4
    # the A100s still add up: the lane holding the most gave way
    spot = sum(q.nominal_quota for lane in pol.lanes.values() for q in lane.quotas if q.flavor_name == "a100-spot")
    assert spot <= next(f for f in pol.flavors if f.name == "a100-spot").capacity["nvidia.com/gpu"]


def test_the_demand_seed_splits_quota_by_gpu_hours_and_keeps_urgent_lanes(raw):
    knobs = tune.discover(raw, TRACE_LANES)
    before = tune.current(raw, knobs)
    jobs = [
        TraceJob("a", 0.0, 3600.0, 8, "candidate_train"),
        TraceJob("b", 0.0, 3600.0, 8, "candidate_train"),
        TraceJob("c", 0.0, 3600.0, 8, "candidate_train"),
        TraceJob("d", 0.0, 3600.0, 8, "research_best_effort"),
        TraceJob("e", 0.0, 60.0, 1, "incident_response"),
    ]
    seed = tune.demand_share(raw, knobs, jobs)
    fl = "h100-ondemand"
    shared = [k for k in knobs if k.field == "nominal_quota" and k.flavor == fl
              and k.owner not in ("incident_response", "release_eval")]
    # what the sharing lanes hold together is kept, now 3:1 by GPU-hours (the rest to the largest)
    pool = sum(before[k.name] for k in shared)
    assert sum(seed[k.name] for k in shared) == pool
    assert seed[f"lanes.candidate_train.{fl}.nominal_quota"] == pool - pool // 4
    assert seed[f"lanes.research_best_effort.{fl}.nominal_quota"] == pool // 4
    assert seed[f"lanes.baseline_rebuild.{fl}.nominal_quota"] == 0  # no jobs, no quota
    # incident response (wait_p95 1m) and release evaluation (15m) keep what they reserve
    for lane in ("incident_response", "release_eval"):
        assert seed[f"lanes.{lane}.{fl}.nominal_quota"] == before[f"lanes.{lane}.{fl}.nominal_quota"]
    # and it is "lend idle" otherwise: borrowing open
    assert seed[f"lanes.candidate_train.{fl}.borrowing_limit"] == tune.lend_idle(raw, knobs)[
        f"lanes.candidate_train.{fl}.borrowing_limit"]


def _sample(n: int) -> list[TraceJob]:
    trace = load_trace(SLICE, lane_map=load_lane_map(FLEET))
    return sorted(trace.jobs, key=lambda j: (j.submit_ts, j.job_id))[:n]


def test_violations_are_normalized_and_signed():
    rep = {"total": {"gpu_utilization": 0.70, "never_admitted": 2}}
    base = {"total": {"gpu_utilization": 0.80, "never_admitted": 0}}
    targets = {"lanes": {"a": [{"target": "wait_p95", "limit": 600.0, "value": 1200.0, "unit": "s", "met": False}],
                         "b": [{"target": "max_lost_gpu_hours_share", "limit": 0.1, "value": 0.05, "unit": "share",
                                "met": True}]}}
    v = tune.violations(rep, targets, base, 0.02)
    assert v["a.wait_p95"] == pytest.approx(1.0)  # one limit over
    assert v["b.max_lost_gpu_hours_share"] == pytest.approx(-0.5)
    assert v["utilization"] == pytest.approx(8.0)  # 8 points short of 80 - 2
    assert v["never_admitted"] == 2


def test_the_search_improves_on_the_tight_policy(raw):
    jobs = _sample(400)
    problem = tune.Problem(raw, jobs, 800, 0.02)
    knobs = tune.discover(raw, {j.lane for j in jobs})
    evals = tune.search(problem, knobs, trials=3, seed=1)
    assert len(evals) == 3
    first, chosen = evals[0], tune.choose(evals)
    assert first.values == tune.repair(raw, knobs, tune.current(raw, knobs))  # the input is candidate 0
    assert first.error is None and chosen.error is None
    # the tuner never returns something worse than its input
    assert (chosen.feasible, chosen.utilization) >= (first.feasible, first.utilization) or \
        chosen.violation <= first.violation
    front = tune.pareto(evals)
    assert chosen in front or not chosen.feasible


def test_cli_refuses_bad_options_listing_every_problem(tmp_path):
    r = CliRunner().invoke(main, ["policy", "tune", "--trace", str(SLICE), "--trials", "1", "--capacity", "-3",
                                  "--lane-from", "num_gpu", "--out", str(tmp_path / "o")])
    assert r.exit_code == 2
    assert "--trials" in r.output and "--capacity" in r.output and "--lane-from" in r.output


def test_cli_writes_the_tuned_policy_diff_front_and_report(tmp_path):
    out = tmp_path / "tuned"
    r = CliRunner().invoke(main, ["policy", "tune", "--trace", str(SLICE), "--lane-map", "elasticflow-fleet",
                                  "--policy", str(TIGHT), "--capacity", "800", "--trials", "2", "--sample-jobs", "300",
                                  "--validate", "sample", "--out", str(out)])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout[r.stdout.index("{"):])
    assert summary["candidates"] == 2
    load_policy(out / "tuned-policy.yaml")  # valid as written
    assert (out / "policy.diff").read_text().startswith("--- a/tight-policy.yaml")
    front = json.loads((out / "pareto.json").read_text())
    assert len(front["trials"]) == 2 and front["chosen"] in range(2)
    report = json.loads((out / "report.json").read_text())
    assert set(report["scenarios"]) == {"policy", "tuned", "fifo", "fifo-backfill"}
    for f in ("pareto.png", "report.html", "usage_tuned.png"):
        assert (out / f).stat().st_size > 0


def test_an_infeasible_search_names_its_binding_target_and_says_when_nothing_changed():
    inp = tune.Evaluation({"a": 1}, violations={"candidate_train.wait_p95": 2.5, "utilization": 0.5, "never_admitted": 0.0})
    other = tune.Evaluation({"a": 2}, violations={"candidate_train.wait_p95": 3.0, "utilization": -1.0})
    bad = tune.Evaluation({"a": 3}, error="autoscaling.warm_pools: ...")
    found = tune.verdict([inp, other, bad], inp)
    assert found == {"feasible_candidates": 0, "invalid_candidates": 1, "result": "infeasible",
                     "binding": "candidate_train.wait_p95", "binding_excess": 2.5, "unchanged_from_input": True}
    ok = tune.Evaluation({"a": 4}, violations={"utilization": -0.1})
    assert tune.verdict([inp, ok], ok) == {"feasible_candidates": 1, "invalid_candidates": 0, "result": "feasible"}


def test_repair_keeps_room_for_a_warm_pool_so_validation_passes(raw):
    """Validation requires a warm pool's lane to hold its GPUs in the pool's node pool; a candidate
    that shuts incident response out of the training pool (nominal 0, borrowing 0) is repaired by
    opening its borrowing there, not spent on a refusal."""
    knobs = tune.discover(raw, TRACE_LANES)
    values = tune.current(raw, knobs)
    closed = {k.name: 0 for k in knobs if k.owner == "incident_response" and k.kind in ("int", "limit", "row")}
    assert any(n.endswith("h100-ondemand.borrowing_limit") for n in closed)
    values.update(closed)
    problem = tune.Problem.__new__(tune.Problem)  # only the policy builder is needed
    problem.raw = raw
    assert "autoscaling.warm_pools[0]" in problem.validate(knobs, values)
    fixed = tune.repair(raw, knobs, values)
    assert problem.validate(knobs, fixed) is None
    assert fixed["lanes.incident_response.h100-ondemand.borrowing_limit"] == knobs[
        [k.name for k in knobs].index("lanes.incident_response.h100-ondemand.borrowing_limit")].high


def test_invalid_candidates_cost_no_trial_and_are_counted(raw, monkeypatch):
    jobs = _sample(200)
    problem = tune.Problem(raw, jobs, 800, 0.02)
    knobs = tune.discover(raw, {j.lane for j in jobs})
    calls = {"n": 0}
    real = tune.Problem.validate

    def every_other(self, knobs, values):
        calls["n"] += 1
        return "autoscaling.warm_pools[0].gpus: refused for the test" if calls["n"] % 2 == 0 else real(self, knobs, values)

    monkeypatch.setattr(tune.Problem, "validate", every_other)
    refused: list = []
    evals = tune.search(problem, knobs, trials=3, seed=2, invalid=refused)
    assert len(evals) == 3 and all(e.error is None for e in evals)  # three simulated, all valid
    assert len(refused) == 2 and all(e.error.startswith("autoscaling.warm_pools") for e in refused)
    found = tune.verdict(evals, tune.choose(evals), invalid=len(refused))
    assert found["invalid_candidates"] == 2


def test_the_objective_is_the_worst_violation_across_inputs(raw):
    """Two tuning inputs: a candidate's constraints are the worst of each across them, and its
    violation is the single worst excess, not a sum."""
    jobs = _sample(600)
    problem = tune.Problem(raw, jobs[:300], 800, 0.02, inputs=[tune.Input("later", jobs[300:])])
    assert [i.name for i in problem.inputs] == ["sample", "later"] and all(i.baseline for i in problem.inputs)
    knobs = tune.discover(raw, {j.lane for j in jobs})
    ev = problem.evaluate(knobs, tune.current(raw, knobs))
    assert set(ev.by_input) == {"sample", "later"}
    for k, v in ev.violations.items():
        assert v == max(ev.by_input["sample"][k], ev.by_input["later"][k])
    assert ev.violation == max(0.0, *ev.violations.values())
    two = tune.Evaluation({}, violations={"a.wait_p95": 0.5, "b.wait_p95": 0.7})
    assert two.violation == 0.7


def test_an_infeasible_search_over_inputs_names_where_the_target_binds():
    ev = tune.Evaluation({"a": 1}, violations={"candidate_train.wait_p95": 2.0},
                         by_input={"cluster04": {"candidate_train.wait_p95": -0.5},
                                   "cluster02": {"candidate_train.wait_p95": 2.0}})
    found = tune.verdict([ev], ev)
    assert found["binding"] == "candidate_train.wait_p95" and found["binding_input"] == "cluster02"


def test_cli_reports_the_tuned_policy_out_of_sample_and_on_a_held_out_trace(tmp_path):
    out = tmp_path / "tuned"
    held = tmp_path / "held.csv"
    lines = SLICE.read_text().splitlines()
    held.write_text("\n".join(lines[:1] + lines[1001:1401]) + "\n")
    r = CliRunner().invoke(main, ["policy", "tune", "--trace", str(SLICE), "--lane-map", "elasticflow-fleet",
                                  "--policy", str(TIGHT), "--capacity", "800", "--trials", "2", "--sample-jobs", "300",
                                  "--validate-trace", str(held), "--validate-capacity", "200", "--out", str(out)])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout[r.stdout.index("{"):])
    assert summary["validated_on"] == "later" and summary["validation_jobs"] == 2000 - 300
    h = summary["held_out"]["held.csv"]
    assert h["jobs"] == 400 and h["capacity_gpus"] == 200 and h["targets_met"] + h["targets_missed"] > 0
    assert len(h["missed"]) == h["targets_missed"]
    assert "held out held.csv (400 jobs)" in r.stderr


def test_each_tuning_input_is_judged_at_its_own_pool_size(raw):
    jobs = _sample(400)
    problem = tune.Problem(raw, jobs[:200], 800, 0.02, inputs=[tune.Input("small", jobs[200:], capacity=400)])
    assert [i.baseline["capacity_gpus"] for i in problem.inputs] == [800, 400]
    knobs = tune.discover(raw, {j.lane for j in jobs})
    ev = problem.evaluate(knobs, tune.current(raw, knobs))
    assert set(ev.by_input) == {"sample", "small"} and ev.report["capacity_gpus"] == 800


def test_lend_to_evidence_is_searched_only_beside_a_service():
    """A serving lane's `lend_to_evidence` is a knob only when a service runs beside the trace
    (its time below need is then a constraint): without one, nothing would show what lending to
    runs it must wait for costs the service."""
    from gpu_platform.policy.loading import default_policy_path

    doc = load_document(default_policy_path(), POLICY_LIMITS)
    name = "lanes.online_serving.lend_to_evidence"
    assert name not in {k.name for k in tune.discover(doc, TRACE_LANES)}
    knobs = tune.discover(doc, TRACE_LANES, with_service=True)
    (flag,) = [k for k in knobs if k.name == name]
    assert flag.choices == ("false", "true")
    assert tune.current(doc, knobs)[name] == "true" and tune.lend_idle(doc, knobs)[name] == "true"
    off = load_document(default_policy_path(), POLICY_LIMITS)
    off["lanes"]["online_serving"]["lend_to_evidence"] = False
    assert tune.current(off, knobs)[name] == "false" and tune.lend_idle(off, knobs)[name] == "true"
    out = tune.apply(copy.deepcopy(doc), knobs, {name: "true"})
    assert out["lanes"]["online_serving"]["lend_to_evidence"] is True
    assert parse_policy_document(out, "tuned").lanes["online_serving"].lend_to_evidence
    # no evidence lane among the trace's: nothing it could change
    assert name not in {k.name for k in tune.discover(doc, {"research_best_effort"}, with_service=True)}
