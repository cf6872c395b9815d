"""The live demo's incident arrives once the gate would preempt a running research sweep trial for
it: the demo's own live requests in a real SQLite ledger, admitted by the gate's planning as the
sensor records it, and the trials' checkpoints as files under the work root."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpu_platform.cli.demo import DEMO_REQUESTS, INCIDENT, _load, live_request_files
from gpu_platform.demo.incident import would_preempt
from gpu_platform.gate.checkpoints import checkpoints_under, has_checkpoint
from gpu_platform.gate.tick import plan_tick, record_plan
from gpu_platform.policy import load_policy
from gpu_platform.requests.ledger import ACTIVE_STATES, PENDING_STATES, Ledger


@pytest.fixture
def demo(tmp_path: Path):
    policy = load_policy(None)
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    ledger.submit_batch([_load(p, policy) for p in live_request_files()])
    states = ledger.states((*PENDING_STATES, *ACTIVE_STATES))
    record_plan(ledger, plan_tick(policy, states, datetime.now(UTC)), states)  # the sensor's first tick
    trials = [_load(p, policy).request_id for p in sorted(DEMO_REQUESTS.glob("research_sweep_*.yaml"))]
    work = tmp_path / "work"

    def checkpointed(rid: str) -> bool:
        return has_checkpoint(checkpoints_under(work, rid))

    return policy, ledger, _load(INCIDENT, policy), trials, work, checkpointed


def _live(ledger: Ledger):
    return ledger.states((*PENDING_STATES, *ACTIVE_STATES))


def test_not_before_a_trial_that_holds_h100s_has_a_checkpoint(demo):
    policy, ledger, incident, trials, _work, checkpointed = demo
    running = [s.request_id for s in _live(ledger) if s.request_id in trials and s.state == "admitted"]
    assert running, "the demo's first tick admits research sweep trials on H100s"
    assert would_preempt(policy, _live(ledger), incident, trials, checkpointed) == []


def test_once_a_running_trial_has_a_checkpoint_the_incident_would_preempt_it(demo):
    policy, ledger, incident, trials, work, checkpointed = demo
    running = [s.request_id for s in _live(ledger) if s.request_id in trials and s.state == "admitted"]
    for rid in running:
        ckpt = checkpoints_under(work, rid) / "train"
        ckpt.mkdir(parents=True)
        (ckpt / "ckpt-000020.json").write_text("{}")
    victims = would_preempt(policy, _live(ledger), incident, trials, checkpointed)
    assert victims and set(victims) <= set(running)
    # a dry run: nothing was recorded, the incident is not in the ledger
    assert not ledger.known_ids([incident.request_id])
    # and the gate, once the incident is submitted, preempts what the dry run named
    ledger.submit(incident)
    plan = plan_tick(policy, _live(ledger), datetime.now(UTC), checkpointed=checkpointed)
    assert set(victims) <= {p.victim for p in plan.preemptions if p.preemptor == incident.request_id}


def test_a_trial_that_is_not_in_the_way_is_not_named(demo):
    policy, ledger, incident, trials, work, checkpointed = demo
    waiting = [s.request_id for s in _live(ledger) if s.request_id in trials and s.state != "admitted"]
    assert waiting, "the research lane's team limit keeps some trials waiting"
    for rid in waiting:  # a checkpoint of a trial that holds nothing does not make it a victim
        ckpt = checkpoints_under(work, rid) / "train"
        ckpt.mkdir(parents=True)
        (ckpt / "ckpt-000020.json").write_text("{}")
    assert would_preempt(policy, _live(ledger), incident, trials, checkpointed) == []
