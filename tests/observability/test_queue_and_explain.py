"""`gpu-platform queue` (position, reason, estimated start) and `gpu-platform explain`."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from click.testing import CliRunner

from gpu_platform.cli import main
from gpu_platform.observe.queueview import explain
from tests.gate.helpers import submit, tick


def _cli(ledger, *args, home=None):
    env = {"GPU_PLATFORM_HOME": str(home)} if home else {}
    return CliRunner().invoke(main, [*args, "--ledger", ledger.url], env=env, catch_exceptions=False)


def test_queue_json_has_position_reason_and_estimated_start(env, policy):
    instance, ledger, resources, home = env
    # five 8-GPU runs ask for more than the 32 H100s (idle reserves are lent): some wait
    ids = [submit(ledger, policy, "candidate_train", output_artifact_ids=[f"m{i}"], gpu_count=8) for i in range(5)]
    tick(instance, resources)
    out = _cli(ledger, "queue", "--format", "json", home=home)
    assert out.exit_code == 0, out.output
    rows = {r["request_id"]: r for r in json.loads(out.output)}
    assert set(rows) == set(ids)
    waiting = [r for r in rows.values() if r["state"] == "waiting"]
    assert [w["position"] for w in sorted(waiting, key=lambda w: w["position"])] == list(range(1, len(waiting) + 1))
    # the admitted jobs declare expected_duration 20h: the head starts when the first of them ends
    first_end = min(ledger.state(r).updated_at for r in ids if ledger.state(r).state == "admitted") + timedelta(hours=20)
    for w in waiting:
        assert w["of"] == len(waiting)
        assert w["reason_code"] == "Inadmissible" and "position" in w["reason"]
        est = datetime.fromisoformat(w["estimated_start"])
        assert first_end - timedelta(seconds=5) <= est <= datetime.now(UTC) + timedelta(hours=20, seconds=5)
    head = min(waiting, key=lambda w: w["position"])
    last = max(waiting, key=lambda w: w["position"])
    assert datetime.fromisoformat(head["estimated_start"]) <= datetime.fromisoformat(last["estimated_start"])
    for r in rows.values():
        if r["state"] == "admitted":
            assert r["flavor"] == "h100-ondemand" and r["position"] is None
    table = _cli(ledger, "queue", home=home)
    assert "est. start" in table.output and "1 of" in table.output


def test_queue_shows_what_the_next_tick_would_admit(env, policy):
    _, ledger, _, home = env
    rid = submit(ledger, policy, "release_eval")  # submitted, no tick yet
    rows = json.loads(_cli(ledger, "queue", "--format", "json", home=home).output)
    (row,) = rows
    assert row["request_id"] == rid and row["state"] == "submitted"
    assert row["reason_code"] == "Admissible" and row["reason"].startswith("admissible at the next gate tick")
    assert row["flavor"] in {q.flavor_name for q in policy.lane("release_eval").quotas}


def test_explain_victim_names_preemptor_and_the_rule(preempted, policy):
    _, ledger, _, _, incident, victim, _ = preempted
    ex = explain(ledger, policy, victim)
    events = [s.event for s in ex.steps]
    assert events[:2] == ["submitted", "admitted"] and events[-2:] == ["preempted", "requeued"]
    pre = ex.steps[-2]
    assert pre.preempted_by == incident
    knob = {"InCohortReclamation": "reclaim_within_cohort", "InCohortReclaimWhileBorrowing": "borrow_within_cohort"}[
        pre.details["kueue_reason"]
    ]
    value = getattr(policy.lane("incident_response").preemption, knob)
    assert f"lanes.incident_response.preemption.{knob} = {getattr(value, 'policy', value)}" in pre.rule
    if knob == "borrow_within_cohort":
        assert "(max_priority_threshold 800)" in pre.rule
    assert ex.steps[1].flavor == "h100-ondemand" and "lanes.research_best_effort.quotas" in ex.steps[1].rule


def test_explain_preemptor_lists_its_victims_and_cli_prints_json(preempted, policy):
    _, ledger, _, _, incident, victim, _ = preempted
    ex = explain(ledger, policy, incident)
    # the nominated approver's grant (an incident needs one, issue 42) is a step of its own
    assert [s.event for s in ex.steps] == ["submitted", "approved", "waiting"]
    wait = ex.steps[2]
    assert victim in wait.victims
    assert wait.details["reason_code"] == "PendingPreemption" and wait.position == 1
    assert "lanes.incident_response.preemption" in wait.rule
    out = _cli(ledger, "explain", incident, "--format", "json")
    assert out.exit_code == 0
    doc = json.loads(out.output)
    assert doc["lane"] == "incident_response" and victim in doc["steps"][2]["victims"]
    table = _cli(ledger, "explain", victim)
    assert f"by {incident}" in table.output


def test_explain_unknown_request_exits_2(env):
    _, ledger, _, _ = env
    out = CliRunner().invoke(main, ["explain", "req-nope", "--ledger", ledger.url])
    assert out.exit_code == 2 and "unknown request id 'req-nope'" in out.output


def test_queue_rows_show_the_priority_boost_a_waiting_request_has_earned(env, policy):
    from gpu_platform.cli.queue import _boost
    from gpu_platform.observe.queueview.rows import queue_rows
    from gpu_platform.requests.ledger import PENDING_STATES

    instance, ledger, resources, home = env
    ids = [submit(ledger, policy, "candidate_train", output_artifact_ids=[f"m{i}"], gpu_count=8) for i in range(5)]
    tick(instance, resources)
    states = ledger.states((*PENDING_STATES, "admitted"))
    waiting = [s for s in states if s.state in PENDING_STATES]
    assert waiting and set(ids) >= {s.request_id for s in waiting}
    step = policy.lane("candidate_train").targets
    assert step is not None
    # just submitted: no boost yet; a day and an hour later: one step (the packaged lane ages per
    # whole wait target of 24 h)
    now = max(s.submitted_at for s in waiting)
    fresh = {r.request_id: r for r in queue_rows(states, None, now, policy=policy)}
    later = {r.request_id: r for r in queue_rows(states, None, now + timedelta(hours=25), policy=policy)}
    for s in waiting:
        assert fresh[s.request_id].aging["boost"] == 0 and _boost(fresh[s.request_id].aging) == ""
        aged = later[s.request_id].aging
        assert aged["ages"] and aged["boost"] > 0
        assert aged["effective_priority"] == policy.lane("candidate_train").priority + aged["boost"]
        assert _boost(aged) == f"\naged +{aged['boost']} (priority {aged['effective_priority']})"
        assert later[s.request_id].to_json()["aging"]["boost"] == aged["boost"]
    # admitted rows carry no aging, and without the policy nothing is computed
    assert all(r.aging is None for r in later.values() if r.state == "admitted")
    assert all(r.aging is None for r in queue_rows(states, None, now, policy=None))
