"""Reasons that name the blocker: a request waiting for GPUs others hold names them (name, lane,
owner) and when they are expected free; a preemption victim names its preemptor and the
checkpoint it resumes from. The engine's own reason stays first, unchanged."""

from __future__ import annotations

import json

from click.testing import CliRunner

from gpu_platform.cli import main
from gpu_platform.gate.checkpoints import checkpoint_dir
from gpu_platform.gate.tick import TAG_REQUEST_ID
from tests.gate.helpers import add_run, submit, tick


def _scenario(env, policy):
    instance, ledger, resources, home = env
    research = [
        submit(ledger, policy, "research_best_effort", name=f"lr sweep trial {i}", owner="ana@example.com",
               gpu_type="h100-ondemand", gpu_count=8, experiment_id=f"exp-{i}", output_artifact_ids=[f"r{i}"])
        for i in range(2)
    ]
    others = [submit(ledger, policy, "baseline_rebuild", name="planner baseline", owner="bo@example.com"),
              submit(ledger, policy, "candidate_train", name="perception rc1", owner="cy@example.com")]
    first = tick(instance, resources)
    runs = {}
    for r in first.run_requests:
        rid = r.tags[TAG_REQUEST_ID]
        runs[rid] = add_run(instance, rid, 1, lane=ledger.get(rid).lane)
        ckpt = checkpoint_dir(home, rid)
        ckpt.mkdir(parents=True)
        (ckpt / "ckpt-00000001.npz").write_bytes(b"x")
        (ckpt / "ckpt-00000040.npz").write_bytes(b"x")
    incident = submit(ledger, policy, "incident_response", name="sev1 repro", owner="gus@example.com", gpu_count=8)
    tick(instance, resources)
    victim = next(rid for rid in research if ledger.state(rid).state == "requeued")
    instance.report_run_canceled(instance.get_run_by_id(runs[victim]))  # its run stopped
    return instance, ledger, resources, home, research, others, incident, victim


def test_a_victim_names_its_preemptor_its_checkpoint_and_who_holds_its_gpus(env, policy):
    instance, ledger, resources, home, _research, _others, incident, victim = _scenario(env, policy)
    requeued = ledger.state(victim).reason
    assert "sev1 repro (incident_response, gus@example.com)" in requeued
    tick(instance, resources)  # the incident starts on the freed GPUs, the victim waits
    state = ledger.state(victim)
    assert state.state == "waiting"
    reason = state.reason
    # the engine's reason first, as the engine wrote it
    assert reason.startswith(state.details["reason_code"] + ": ")
    assert "preempted by sev1 repro (incident_response, gus@example.com) at " in reason
    assert "resumes from checkpoint ckpt-00000040.npz" in reason
    inc = ledger.state(incident)
    assert inc.state == "admitted"
    free = (inc.updated_at + ledger.get(incident).expected_duration).strftime("%Y-%m-%d %H:%M UTC")
    assert "the GPUs it can use (h100-ondemand) are held by sev1 repro (incident_response, gus@example.com, " \
        f"8 GPUs, expected free {free})" in reason
    assert "planner baseline (baseline_rebuild, bo@example.com" in reason
    # the queue view's dry run says the same, and so does explain's history
    out = CliRunner().invoke(main, ["queue", "--format", "json", "--ledger", ledger.url], env={"GPU_PLATFORM_HOME": str(home)})
    row = next(r for r in json.loads(out.stdout) if r["request_id"] == victim)
    # (the engine's own words may differ a tick later; the blockers it names do not)
    assert row["reason"].split("; preempted by ", 1)[1] == reason.split("; preempted by ", 1)[1]
    ex = CliRunner().invoke(main, ["explain", victim, "--format", "json", "--ledger", ledger.url])
    assert json.loads(ex.stdout)["steps"][-1]["reason"] == reason


def test_a_requeue_victim_restarts_and_budget_waits_name_no_holders(env, policy):
    from gpu_platform.admission.model import PendingInfo
    from gpu_platform.gate.blockers import PreemptedBy, name_blockers, resume_text

    instance, ledger, resources, _home, _research, _others, incident, victim = _scenario(env, policy)
    tick(instance, resources)
    req = ledger.get(victim)
    assert resume_text(req.model_copy(update={"preemption_policy": "requeue"}), None).startswith("restarts from the beginning")
    assert "none written yet" in resume_text(req, None)
    states = ledger.states()
    budget = PendingInfo(victim, "research_best_effort", "BudgetExhausted", "QuotaReserved", "BudgetExhausted: lane over budget", 1, 1)
    (out,) = name_blockers(policy, states, [budget])
    assert out.message == "BudgetExhausted: lane over budget"  # nothing holds a budget
    quota = PendingInfo(victim, "research_best_effort", "Inadmissible", "QuotaReserved", "Inadmissible: no room", 1, 1)
    by = PreemptedBy(incident, inc_at := ledger.state(incident).updated_at, ledger.get(incident))
    (out,) = name_blockers(policy, states, [quota], preempted={victim: by})
    assert out.message.startswith("Inadmissible: no room; preempted by sev1 repro (incident_response, gus@example.com) at "
                                  + inc_at.strftime("%Y-%m-%d %H:%M UTC"))
    assert "resumes from its last checkpoint (none written yet" in out.message  # no checkpoint_of given
    many = name_blockers(policy, states, [quota])[0].message
    assert many.count("(") >= 3 and "held by" in many
