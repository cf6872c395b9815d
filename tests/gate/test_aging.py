"""Aging toward a lane's wait target: the rule (`gpu_platform.policy.aging`), the gate's engine
at effective priorities (base + boost, as Kueue adds `kueue.x-k8s.io/priority-boost`), and the
simulator sharing the one rule."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from gpu_platform.gate.tick import build_state, plan_tick
from gpu_platform.policy import default_policy_path, load_policy, parse_policy
from gpu_platform.policy.aging import (
    NO_HIGHER_LANE_CAP,
    aging_rules,
    boost_now,
    parse_boost,
    priority_boost,
)
from gpu_platform.requests.ledger import ACTIVE_STATES, PENDING_STATES, Ledger
from gpu_platform.requests.model import validate_request
from gpu_platform.simulate.scenarios import lane_boosts

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "simulate" / "policy-one-flavor.yaml"
T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)


def _raw(targets: dict | None, middle: int | None = None) -> dict:
    """The four-GPU pool: lane `low` (100) all of it, BestEffortFIFO; `high` (500) borrows.
    middle: a third lane `mid` at that priority, borrowing like `high`."""
    raw = yaml.safe_load(FIX.read_text())
    raw["scale"] = "S1"
    low = raw["lanes"]["low"]
    low["queueing_strategy"] = "BestEffortFIFO"
    low["quotas"] = [{"flavor_name": "gpu", "nominal_quota": 4}]
    if targets is not None:
        low["targets"] = targets
    raw["lanes"]["high"]["quotas"] = [{"flavor_name": "gpu", "nominal_quota": 0, "borrowing_limit": 4}]
    if middle is not None:
        raw["lanes"]["mid"] = {**raw["lanes"]["high"], "priority": middle, "description": "between"}
    return raw


def _policy(targets: dict | None = None, middle: int | None = None):
    return parse_policy(_raw(targets, middle))


# -- the rule ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("waited_s", "boost"),
    [(-5, 0), (0, 0), (49.9, 0), (50, 1), (99, 1), (100, 2), (149, 2), (150, 3), (50 * 398, 398), (50 * 399, 399),
     (50 * 400, 399), (10**9, 399)],
)
def test_the_boost_steps_with_the_wait_and_stops_one_below_the_next_lane(waited_s, boost):
    pol = _policy({"wait_p95": "100s", "boost_after": 0.5})  # a step of 50 s; `high` is 500
    assert priority_boost(pol, "low", T0, T0 + timedelta(seconds=waited_s)) == boost
    assert priority_boost(pol, "low", T0.timestamp(), T0.timestamp() + waited_s) == boost


def test_a_sweep_of_now_rises_by_one_step_at_a_time_and_never_falls():
    pol = _policy({"wait_p95": "2h", "boost_after": 0.25, "boost": 3}, middle=120)  # 30 min, +3, cap 19
    seen = [priority_boost(pol, "low", T0, T0 + timedelta(minutes=m)) for m in range(0, 400, 7)]
    assert seen == sorted(seen)
    assert {b - a for a, b in zip(seen, seen[1:], strict=False)} <= {0, 3, 1}  # the last step is cut at the cap
    assert max(seen) == 19 == aging_rules(pol)["low"].cap  # mid is 120: at most 119
    assert priority_boost(pol, "low", T0, T0 + timedelta(minutes=29)) == 0
    assert priority_boost(pol, "low", T0, T0 + timedelta(minutes=30)) == 3


def test_a_lane_without_targets_or_aging_never_boosts():
    for targets in (None, {"wait_p95": "100s", "boost_after": None}, {"max_lost_gpu_hours_share": 0.1}):
        pol = _policy(targets)
        assert "low" not in aging_rules(pol)
        assert priority_boost(pol, "low", T0, T0 + timedelta(days=365)) == 0
        assert boost_now(pol, "low", T0, T0 + timedelta(days=1)) is None
    # `high` has no lane above it: no cap but the large constant
    raw = _raw(None)
    raw["lanes"]["high"]["targets"] = {"wait_p95": "10s"}
    assert aging_rules(parse_policy(raw))["high"].cap == NO_HIGHER_LANE_CAP
    # a lane with no room below the next (equal-but-one priority): nothing to gain
    assert "low" not in aging_rules(_policy({"wait_p95": "10s"}, middle=101))


def test_boost_now_names_the_next_step_and_the_cap():
    pol = _policy({"wait_p95": "100s", "boost_after": 0.5}, middle=103)  # cap 2
    at = boost_now(pol, "low", T0, T0 + timedelta(seconds=70))
    assert (at.boost, at.next_boost, at.next_at) == (1, 2, T0 + timedelta(seconds=100))
    assert "+1" in at.text() and "kueue.x-k8s.io/priority-boost" in at.text() and "next +2 at" in at.text()
    capped = boost_now(pol, "low", T0, T0 + timedelta(seconds=500))
    assert (capped.boost, capped.next_boost, capped.next_at) == (2, None, None)
    assert "at its cap" in capped.text()


def test_the_simulator_and_the_gate_share_the_rule():
    for pol in (load_policy(default_policy_path()), _policy({"wait_p95": "100s", "boost_after": 0.5}, middle=150)):
        assert lane_boosts(pol) == {name: r.as_tuple() for name, r in aging_rules(pol).items()}
    default = load_policy(default_policy_path())
    assert aging_rules(default)["release_eval"].cap == 99  # online_serving is 900


@pytest.mark.parametrize("bad", ["", "1.5", "ten", "0x10"])
def test_a_boost_that_is_no_integer_is_refused_with_where(bad):
    with pytest.raises(ValueError, match=r"wl\.yaml: .* is not an integer priority boost"):
        parse_boost(bad, "wl.yaml")
    assert parse_boost(" -60 ", "x") == -60


# -- the gate's engine at effective priorities ------------------------------------------------
def _request(pol, gpus: int, name: str):
    raw = yaml.safe_load((ROOT / "examples" / "requests" / "research_best_effort.yaml").read_text())
    raw.update(lane="low", team="platform", cost_center="CC-1000", gpu_type="gpu", gpu_count=gpus,
               data_access_scope="synthetic", max_cost=100, experiment_id=name, output_artifact_ids=[f"out-{name}"])
    raw.pop("site")
    return validate_request(raw, pol)


def _stream(tmp_path, pol):
    """Three 1-GPU runs of lane low admitted at T0+20 s.. (younger than `big`, submitted at T0+1 s,
    4 GPUs, waiting: BestEffortFIFO lets small work pass it), one GPU free."""
    led = Ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    big = led.submit(_request(pol, 4, "big"), at=T0 + timedelta(seconds=1))
    small = []
    for i in range(3):
        rid = led.submit(_request(pol, 1, f"s{i}"), at=T0 + timedelta(seconds=10 + i))
        led.record(rid, "admitted", "QuotaReserved on gpu", flavor="gpu", details={"attempt": 1},
                   at=T0 + timedelta(seconds=20 + i))
        small.append(rid)
    return led, big, small


@pytest.mark.parametrize(("after_s", "preempts"), [(30, False), (50, False), (51, True), (400, True)])
def test_an_aged_request_preempts_its_lanes_younger_work_only_once_its_boost_says_so(tmp_path, after_s, preempts):
    pol = _policy({"wait_p95": "100s", "boost_after": 0.5})  # a step of 50 s
    led, big, small = _stream(tmp_path, pol)
    now = T0 + timedelta(seconds=after_s)
    states = led.states((*PENDING_STATES, *ACTIVE_STATES))
    state = build_state(pol, states, now)
    prio = {w.name: w.priority for w in (*state.pending, *state.admitted)}
    assert prio[big] == 100 + priority_boost(pol, "low", T0 + timedelta(seconds=1), now)
    # admitted work keeps the boost it had when admitted (under one step: none)
    assert all(prio[s] == 100 for s in small)
    plan = plan_tick(pol, states, now)
    victims = {p.victim for p in plan.preemptions}
    if preempts:
        assert victims == set(small) and {p.preemptor for p in plan.preemptions} == {big}
        assert all(p.reason == "InClusterQueue" for p in plan.preemptions)
    else:
        assert not victims and not plan.launches
        assert [w.name for w in plan.waits] == [big]


def test_without_aging_the_same_queue_never_preempts(tmp_path):
    pol = _policy({"wait_p95": "100s", "boost_after": None})
    led, big, _small = _stream(tmp_path, pol)
    plan = plan_tick(pol, led.states((*PENDING_STATES, *ACTIVE_STATES)), T0 + timedelta(days=3))
    assert not plan.preemptions and [w.name for w in plan.waits] == [big]


def test_an_admitted_request_keeps_the_boost_of_its_wait(tmp_path):
    pol = _policy({"wait_p95": "100s", "boost_after": 0.5})
    led = Ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    rid = led.submit(_request(pol, 1, "old"), at=T0)
    led.record(rid, "admitted", "QuotaReserved on gpu", flavor="gpu", details={"attempt": 1},
               at=T0 + timedelta(seconds=160))  # 3 steps waited
    for later in (200, 10_000):
        state = build_state(pol, led.states((*PENDING_STATES, *ACTIVE_STATES)), T0 + timedelta(seconds=later))
        assert [w.priority for w in state.admitted] == [103]


# -- explain ------------------------------------------------------------------------------------
def test_explain_shows_the_boost_and_when_the_next_step_comes(tmp_path):
    from gpu_platform.observe.queueview.explain import explain

    pol = _policy({"wait_p95": "100s", "boost_after": 0.5}, middle=103)  # a step of 50 s, cap 2
    led, big, small = _stream(tmp_path, pol)
    ex = explain(led, pol, big, now=T0 + timedelta(seconds=80))  # waited 79 s
    a = ex.aging
    assert (a["boost"], a["effective_priority"], a["next_boost"]) == (1, 101, 2)
    assert a["next_at"] == (T0 + timedelta(seconds=101)).isoformat()
    assert a["annotation"] == "kueue.x-k8s.io/priority-boost" and "next +2 at" in a["text"]
    assert ex.to_json()["aging"] == a
    capped = explain(led, pol, big, now=T0 + timedelta(hours=2)).aging
    assert (capped["boost"], capped["next_at"]) == (2, None) and "at its cap" in capped["text"]
    # an admitted request keeps the boost of its wait until admission (19 s: none), no next step
    kept = explain(led, pol, small[0], now=T0 + timedelta(hours=2)).aging
    assert (kept["boost"], kept["next_at"]) == (0, None) and "kept since admission" in kept["text"]


def test_explain_says_a_lane_without_targets_does_not_age(tmp_path):
    from gpu_platform.observe.queueview.explain import explain

    pol = _policy(None)
    led, big, _small = _stream(tmp_path, pol)
    a = explain(led, pol, big, now=T0 + timedelta(days=2)).aging
    assert a["ages"] is False and a["boost"] == 0 and "lanes.low has no targets.wait_p95" in a["text"]
    led.record(big, "failed", "ended by hand")
    assert explain(led, pol, big).aging is None


def test_the_explain_command_prints_the_aging_line(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from gpu_platform.cli.app import main

    raw = _raw({"wait_p95": "100s", "boost_after": 0.5})
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(raw))
    pol = parse_policy(raw)
    led = Ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    rid = led.submit(_request(pol, 4, "big"), at=datetime.now(UTC) - timedelta(seconds=120))
    monkeypatch.setenv("GPU_PLATFORM_WAREHOUSE", str(tmp_path / "none.duckdb"))
    out = CliRunner().invoke(main, ["explain", rid, "--policy", str(path), "--ledger", led.url])
    assert out.exit_code == 0, out.output
    line = next(x for x in out.output.splitlines() if x.startswith("aging:"))
    assert "priority boost +2" in line and "effective priority 102 = 100 + 2" in line and "next +3 at" in line


# -- admission case files carry Kueue's annotation --------------------------------------------
def _case(boost) -> dict:
    younger = {"name": "young", "cq": "a", "priority": 100, "created_at": 2, "requests": {"nvidia.com/gpu": 4}}
    if boost is not None:
        younger["priority_boost"] = boost
    return {
        "id": "boost", "kind": "schedule_cycle",
        "flavors": [{"name": "gpu"}],
        "cluster_queues": [{"name": "a", "queueingStrategy": "StrictFIFO",
                            "quotas": [{"flavor": "gpu", "resource": "nvidia.com/gpu", "nominal": 4}]}],
        "pending": [{"name": "old", "cq": "a", "priority": 100, "created_at": 1, "requests": {"nvidia.com/gpu": 4}},
                    younger],
    }


@pytest.mark.parametrize(("boost", "first"), [(None, "old"), (0, "old"), ("-3", "old"), (1, "young"), ("25", "young")])
def test_a_case_workloads_priority_boost_adds_to_its_priority(boost, first):
    from gpu_platform.admission.cases import run_case

    out = run_case(_case(boost)).output
    assert [a["name"] if isinstance(a, dict) else a for a in out["admitted"]] == [first]


@pytest.mark.parametrize("bad", ["high", "2.5", True])
def test_a_case_priority_boost_that_is_no_integer_names_the_workload(bad):
    from gpu_platform.admission.cases import state_from_case

    with pytest.raises(ValueError, match=r"workload 'young': priority_boost: .* is not an integer priority boost"):
        state_from_case(_case(bad))


def test_an_aged_request_never_passes_a_younger_one_of_the_next_lane(tmp_path):
    """low (100) ages to at most 101 below mid (102): borrowing the same idle GPUs from high,
    the younger mid request goes first however long low's has waited; alone, low's goes."""
    raw = _raw({"wait_p95": "100s", "boost_after": 0.5}, middle=102)
    raw["lanes"]["low"]["quotas"] = [{"flavor_name": "gpu", "nominal_quota": 0, "borrowing_limit": 4}]
    raw["lanes"]["mid"]["quotas"] = [{"flavor_name": "gpu", "nominal_quota": 0, "borrowing_limit": 4}]
    raw["lanes"]["high"]["quotas"] = [{"flavor_name": "gpu", "nominal_quota": 4}]
    pol = parse_policy(raw)
    assert aging_rules(pol)["low"].cap == 1
    led = Ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    old = led.submit(_request(pol, 4, "old"), at=T0)
    young = _request(pol, 4, "young").model_copy(update={"lane": "mid"})
    later = T0 + timedelta(days=30)
    alone = plan_tick(pol, led.states((*PENDING_STATES, *ACTIVE_STATES)), later)
    assert [x.request_id for x in alone.launches] == [old]
    mid = led.submit(young, at=later - timedelta(seconds=1))
    state = build_state(pol, led.states((*PENDING_STATES, *ACTIVE_STATES)), later)
    assert {w.name: w.priority for w in state.pending} == {old: 101, mid: 102}
    plan = plan_tick(pol, led.states((*PENDING_STATES, *ACTIVE_STATES)), later)
    assert [x.request_id for x in plan.launches] == [mid] and [w.name for w in plan.waits] == [old]


@pytest.mark.parametrize("boost_after", [0.2, 0.3, 0.5, 0.9])
def test_the_simulator_admits_at_the_priority_the_gate_would_give(boost_after):
    """One rule, two engines: every job the simulator admitted and never preempted runs at its
    lane's priority plus `priority_boost` of its wait from submission to admission, as the gate
    keeps an admitted request's boost (`aged_admitted`)."""
    from gpu_platform.simulate import TraceJob, simulate
    from gpu_platform.simulate.scenarios import policy_scenario

    pol = _policy({"wait_p95": "100s", "boost_after": boost_after})
    jobs = [TraceJob(f"s{i:02d}", 10 * i, 30, 1, "low") for i in range(31)] + [TraceJob("big", 1, 10, 4, "low")]
    runs = [r for r in simulate(policy_scenario(pol), jobs, checkpoint_interval_s=5).runs if r.first_admit is not None]
    steady = [r for r in runs if not r.preemptions]
    assert any(r.job.job_id == "big" for r in steady) and len(steady) > 20
    for r in steady:
        assert r.wl.priority == 100 + priority_boost(pol, "low", r.job.submit_ts, r.first_admit), r.job.job_id
    assert next(r for r in steady if r.job.job_id == "big").wl.priority == 101  # it waited one step
