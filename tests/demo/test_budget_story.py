"""The demo's budget story: after the demo seeds, the sweep's tuned run
(`examples/demo/research_tuned_h100.yaml`) waits `BudgetExhausted` on the research lane's daily
budget, whatever the date, and a cost exception granted with the README's `approve` line lets the
gate take it past the budget.

The harness does what `demo seed` does to the ledger (the live requests, the incident's nominated
approval, a short history through `write_ledger`) and then ticks as the gate's sensor does
(`assets/gate.py`: `plan_tick` with the budget reserved this period, decisions recorded), with
the policy the demo's project config names (`gpu_platform.demo.identity`)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from gpu_platform.cli.app import main
from gpu_platform.cli.demo import DEMO_REQUESTS, _load, live_request_files
from gpu_platform.demo import history as demo_history
from gpu_platform.demo.costs import demo_days
from gpu_platform.demo.identity import ROLE, demo_budgets, write_demo_policy
from gpu_platform.demo.incident import approve_nominated
from gpu_platform.gate.tick import budget_period_start, plan_tick, record_plan
from gpu_platform.policy import default_policy_path, load_policy
from gpu_platform.requests.identity import os_login
from gpu_platform.requests.ledger import ACTIVE_STATES, PENDING_STATES, Ledger

TUNED = DEMO_REQUESTS / "research_tuned_h100.yaml"
LAUNCHPAD_AND_README = 3
"""Research requests of 400 the ui-check adds on the demo's day: the Launchpad's, the README's
`submit ... --again` and its own request (scripts/ui_check.py)."""


class Seeded:
    def __init__(self, tmp: Path, history_days: int = 0) -> None:
        self.policy_path = write_demo_policy(tmp / "home")
        self.policy = load_policy(self.policy_path)
        self.url = f"sqlite:///{tmp / 'ledger.db'}"
        self.ledger = Ledger(self.url)
        live = [_load(p, self.policy) for p in live_request_files()]
        approve_nominated(self.ledger, live, self.ledger.submit_batch(live))
        if history_days:
            history = demo_history.generate(load_policy(None), demo_days(history_days))
            demo_history.write_ledger(history, self.ledger, self.policy)
        self.tuned = _load(TUNED, self.policy).request_id

    def tick(self):
        now = datetime.now(UTC)
        states = self.ledger.states((*PENDING_STATES, *ACTIVE_STATES))
        spent = self.ledger.reserved_by_lane(budget_period_start(self.policy.budget_period, now))
        plan = plan_tick(self.policy, states, now, spent=spent)
        record_plan(self.ledger, plan, states)
        return plan

    def state(self, rid: str):
        return self.ledger.states(request_id=rid)[0]

    def budget_waits(self) -> list[str]:
        return sorted(s.request_id for s in self.ledger.states(PENDING_STATES)
                      if s.details.get("reason_code") == "BudgetExhausted")


@pytest.fixture
def seeded(tmp_path: Path) -> Seeded:
    return Seeded(tmp_path, history_days=3)


def test_after_the_seed_only_the_tuned_run_waits_on_its_budget_until_a_cost_exception(seeded, monkeypatch, tmp_path):
    seeded.tick()
    tuned = seeded.state(seeded.tuned)
    assert tuned.state == "waiting" and tuned.details.get("reason_code") == "BudgetExhausted", tuned
    assert f"gpu-platform approve {seeded.tuned} --kind cost" in tuned.reason
    assert "research_best_effort" in tuned.reason
    assert seeded.budget_waits() == [seeded.tuned], "the rest of the live demo fits the daily budgets"
    # the sweep's trials run (the incident's story needs them) and it still waits as they end
    trials = [_load(p, seeded.policy).request_id for p in sorted(DEMO_REQUESTS.glob("research_sweep_*.yaml"))]
    assert any(seeded.state(t).state == "admitted" for t in trials)
    for rid in [t for t in trials if seeded.state(t).state == "admitted"]:
        seeded.ledger.record(rid, "finished", "run succeeded")
    seeded.tick()
    assert seeded.budget_waits() == [seeded.tuned], "an ended request's reservation still counts today"

    # the README's line, as the demo's operator (the OS login, the demo policy's cost role)
    for var in ("GPU_PLATFORM_HOME", "GPU_PLATFORM_WAREHOUSE", "DAGSTER_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("GPU_PLATFORM_CONFIG", "none")
    monkeypatch.setenv("GPU_PLATFORM_LEDGER_URL", seeded.url)
    monkeypatch.setenv("GPU_PLATFORM_POLICY", str(seeded.policy_path))
    monkeypatch.setenv("GPU_PLATFORM_IDENTITY", "os_user")
    out = CliRunner().invoke(main, ["approve", seeded.tuned, "--role", ROLE, "--kind", "cost",
                                    "--reason", "tuned run over budget"])
    assert out.exit_code == 0, out.output
    assert os_login() in out.output and seeded.tuned in out.output

    seeded.tick()
    after = seeded.state(seeded.tuned)
    assert after.details.get("reason_code") != "BudgetExhausted", after
    assert after.state == "admitted" or "BudgetExhausted" not in after.reason, after
    assert seeded.budget_waits() == []


def test_without_the_approval_no_later_tick_lets_it_past_the_budget(tmp_path):
    demo = Seeded(tmp_path)  # no history: what the gate sees on the 1st of a month under a monthly period
    for _ in range(3):
        plan = demo.tick()
        assert demo.state(demo.tuned).details.get("reason_code") == "BudgetExhausted"
        assert all(a.request_id != demo.tuned for a in plan.launches)


def test_the_demo_budgets_hold_the_live_demo_and_not_the_tuned_run():
    """Why the story holds on every date: a daily period (the history ends yesterday, so the gate
    counts only today's live requests), each lane's daily budget holds all of that lane's live
    requests but the tuned run (and the ui-check's research submissions), and the tuned run is
    over what is left once the research request ahead of it in its queue is admitted."""
    raw = yaml.safe_load(default_policy_path().read_text())
    budgets = demo_budgets(raw)
    demo = load_policy(None)
    live = [_load(p, demo) for p in live_request_files()]
    tuned = _load(TUNED, demo)
    by_lane: dict[str, Decimal] = {}
    for req in live:
        if req.request_id != tuned.request_id:
            by_lane[req.lane] = by_lane.get(req.lane, Decimal(0)) + (req.max_cost or 0)
    by_lane["research_best_effort"] += LAUNCHPAD_AND_README * Decimal(400)
    for lane, total in by_lane.items():
        assert total <= budgets[lane], (lane, total, budgets[lane])
    research = budgets["research_best_effort"]
    first = next(r for r in live if r.lane == "research_best_effort")  # the queue's head: submitted first
    assert first.request_id != tuned.request_id
    assert research - first.max_cost < tuned.max_cost <= research
    # the packaged examples validate under the demo's budgets (none is over its lane's whole budget)
    for lane, cost in ((r.lane, r.max_cost) for r in live):
        assert cost <= budgets[lane]


@pytest.mark.parametrize("today", [date(2026, 12, 1), date(2026, 12, 15), date(2026, 12, 31), date(2027, 3, 1)])
def test_no_history_day_is_in_the_demo_budget_period(tmp_path, today: date):
    policy = load_policy(write_demo_policy(tmp_path))
    assert policy.budget_period == "day"
    for hour in (0, 13, 23):
        now = datetime(today.year, today.month, today.day, hour, 59, tzinfo=UTC)
        last_history_day = demo_days(30, today)[-1]
        assert budget_period_start(policy.budget_period, now) >= datetime(
            last_history_day.year, last_history_day.month, last_history_day.day, tzinfo=UTC) + timedelta(days=1)
