"""The live demo's incident arrives once the gate would preempt running research sweep trials for
it: the demo's own live requests in a real SQLite ledger, admitted by the gate's planning tick by
tick as the sensor records it, runs ending as they do in the demo, and the trials' checkpoints as
files under the work root.

The story (the live demo's, with the policy the demo's project config names,
`gpu_platform.demo.identity`, and the budget reserved today as the gate's sensor passes it; the
sweep's tuned run waits on its budget throughout, tests/demo/test_budget_story.py): the first tick admits all four trials on
H100s beside the incident lane's example, filling the pool (the idle assurance reserve is lent to
research); the label batch ends and candidate training takes its 8 H100s back by preempting trials
2 and 4, which wait requeued; trial 2 ends (trial 4 is admitted again), then the baseline rebuild and the incident lane's example: every
trial left runs, 8 H100s are free and the incident needs 16."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpu_platform.cli.demo import DEMO_REQUESTS, INCIDENT, _load, live_request_files
from gpu_platform.demo.identity import write_demo_policy
from gpu_platform.demo.incident import submit_incident, would_preempt
from gpu_platform.gate.checkpoints import checkpoints_under, has_checkpoint
from gpu_platform.gate.tick import budget_period_start, plan_tick, record_plan
from gpu_platform.policy import load_policy
from gpu_platform.requests.ledger import ACTIVE_STATES, PENDING_STATES, Ledger


class Demo:
    def __init__(self, tmp: Path) -> None:
        self.policy = load_policy(write_demo_policy(tmp / "home"))
        self.ledger = Ledger(f"sqlite:///{tmp / 'ledger.db'}")
        self.ledger.submit_batch([_load(p, self.policy) for p in live_request_files()])
        self.incident = _load(INCIDENT, self.policy)
        self.trials = [_load(p, self.policy).request_id for p in sorted(DEMO_REQUESTS.glob("research_sweep_*.yaml"))]
        self.work = tmp / "work"
        self.tick()

    def live(self):
        return self.ledger.states((*PENDING_STATES, *ACTIVE_STATES))

    def tick(self):
        states = self.live()
        plan = plan_tick(self.policy, states, datetime.now(UTC), checkpointed=self.checkpointed, spent=self.spent())
        record_plan(self.ledger, plan, states)
        return plan

    def spent(self):
        return self.ledger.reserved_by_lane(budget_period_start(self.policy.budget_period, datetime.now(UTC)))

    def state(self, rid: str) -> str:
        return self.ledger.states(request_id=rid)[0].state

    def lane(self, lane: str) -> str:
        return next(s.request_id for s in self.ledger.states() if s.request.lane == lane and s.request.name == lane)

    def end(self, *rids: str) -> None:
        for rid in rids:
            self.ledger.record(rid, "finished", "run succeeded")
        self.tick()

    def checkpoint(self, rid: str) -> None:
        ckpt = checkpoints_under(self.work, rid) / "training_run"
        ckpt.mkdir(parents=True, exist_ok=True)
        (ckpt / "ckpt-00000020.npz").write_bytes(b"")

    def checkpointed(self, rid: str) -> bool:
        return has_checkpoint(checkpoints_under(self.work, rid))

    def would_preempt(self) -> list[str]:
        return would_preempt(self.policy, self.live(), self.incident, self.trials, self.checkpointed,
                             spent=self.spent())


@pytest.fixture
def demo(tmp_path: Path) -> Demo:
    return Demo(tmp_path)


def _reclaimed_by_candidate_training(demo: Demo) -> None:
    demo.end(demo.lane("labeler_batch"))
    assert demo.state(demo.lane("candidate_train")) == "waiting"
    assert demo.state(demo.trials[1]) == "requeued", "candidate training takes its H100s back from trial 2"


def _all_trials_running(demo: Demo) -> list[str]:
    _reclaimed_by_candidate_training(demo)
    demo.end(demo.trials[1])
    assert demo.state(demo.lane("candidate_train")) == "admitted"
    demo.end(demo.lane("baseline_rebuild"), demo.lane("incident_response"))
    running = [t for t in demo.trials if demo.state(t) == "admitted"]
    assert running == [demo.trials[0], demo.trials[2], demo.trials[3]]
    return running


def test_not_while_a_trial_still_waits(demo):
    assert [demo.state(t) for t in demo.trials] == ["admitted"] * 4, "the first tick admits every trial"
    _reclaimed_by_candidate_training(demo)
    waiting = [t for t in demo.trials if demo.state(t) != "admitted"]
    assert waiting == [demo.trials[1], demo.trials[3]], "candidate training reclaimed trials 2 and 4"
    for t in demo.trials:
        demo.checkpoint(t)
    # a waiting trial admitted before the gate's next tick would be the newest, not-started victim
    assert demo.would_preempt() == []


def test_once_every_trial_runs_with_a_checkpoint_the_incident_would_preempt_them(demo):
    running = _all_trials_running(demo)
    tuned = demo.ledger.states(request_id=_load(DEMO_REQUESTS / "research_tuned_h100.yaml", demo.policy).request_id)[0]
    assert tuned.details.get("reason_code") == "BudgetExhausted", "the tuned run takes no H100s from the story"
    assert demo.would_preempt() == [], "no checkpoint yet: nothing to resume from"
    for t in running:
        demo.checkpoint(t)
    victims = demo.would_preempt()
    assert victims and set(victims) <= set(running)
    assert not demo.ledger.known_ids([demo.incident.request_id]), "a dry run records nothing"
    # the gate, once the incident is submitted, preempts what the dry run named, and only them
    submit_incident(demo.ledger, demo.incident)  # with its nominated approver's grant
    plan = plan_tick(demo.policy, demo.live(), datetime.now(UTC), checkpointed=demo.checkpointed, spent=demo.spent())
    assert sorted(p.victim for p in plan.preemptions if p.preemptor == demo.incident.request_id) == victims


def test_not_while_a_victim_has_no_checkpoint(demo):
    running = _all_trials_running(demo)
    for t in running:
        demo.checkpoint(t)
    victims = demo.would_preempt()
    assert victims
    for t in running:  # the newest trial has not checkpointed yet
        if t == victims[-1]:
            for f in checkpoints_under(demo.work, t).rglob("ckpt-*"):
                f.unlink()
    assert demo.would_preempt() == []
