"""Runs that tell the truth: a preempted run ends CANCELED, never FAILURE, tagged and with a message
naming its preemptor and the checkpoint the request resumes from."""

from __future__ import annotations

import dagster as dg
import pytest
from dagster._core.events import DagsterEventType

from gpu_platform.gate.blockers import TAG_PREEMPTED_BY, TAG_PREEMPTED_BY_NAME, TAG_RESUME_FROM
from gpu_platform.gate.checkpoints import checkpoint_dir
from gpu_platform.gate.tick import TAG_REQUEST_ID
from tests.gate.helpers import add_run, submit, tick


def _preempt(env, policy, status):
    """Research borrowing H100s with runs in `status`, checkpointed; an incident reclaims one."""
    instance, ledger, resources, home = env
    for i in range(2):
        submit(ledger, policy, "research_best_effort", name=f"lr sweep trial {i}", owner="ana@example.com",
               gpu_type="h100-ondemand", gpu_count=8, experiment_id=f"exp-{i}", output_artifact_ids=[f"r{i}"])
    submit(ledger, policy, "baseline_rebuild")
    submit(ledger, policy, "candidate_train")
    runs = {}
    for r in tick(instance, resources).run_requests:
        rid = r.tags[TAG_REQUEST_ID]
        runs[rid] = add_run(instance, rid, 1, status=status, lane=ledger.get(rid).lane)
        ckpt = checkpoint_dir(home, rid) / "training_run"
        ckpt.mkdir(parents=True)
        (ckpt / "ckpt-00000120.npz").write_bytes(b"x")
    incident = submit(ledger, policy, "incident_response", name="sev1 repro", owner="gus@example.com", gpu_count=8)
    tick(instance, resources)
    (victim,) = [rid for rid in runs if ledger.state(rid).state == "requeued"]
    return instance, ledger, resources, incident, victim, instance.get_run_by_id(runs[victim])


def _messages(instance, run_id, event_type=None):
    return [
        e.message or (e.dagster_event.message if e.dagster_event else "")
        for e in instance.all_logs(run_id)
        if event_type is None or (e.dagster_event and e.dagster_event.event_type == event_type)
    ]


@pytest.mark.parametrize("status", [dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.NOT_STARTED])
def test_a_victim_that_has_not_started_is_canceled_at_once_with_its_preemptor(env, policy, status):
    instance, _ledger, _resources, incident, victim, run = _preempt(env, policy, status)
    # not left CANCELING: a run worker starting now would mark a CANCELING run failed
    assert run.status == dg.DagsterRunStatus.CANCELED
    assert run.tags[TAG_PREEMPTED_BY] == incident
    assert run.tags[TAG_PREEMPTED_BY_NAME] == "sev1 repro"
    assert run.tags[TAG_RESUME_FROM] == "ckpt-00000120.npz"
    (message,) = _messages(instance, run.run_id, DagsterEventType.RUN_CANCELED)
    assert "Preempted (InCohortReclamation) by sev1 repro (incident_response, gus@example.com)" in message
    assert "canceled, not failed" in message and "resumes from checkpoint ckpt-00000120.npz as attempt 2" in message


def test_a_running_victim_is_terminated_after_saying_why(env, policy):
    instance, _ledger, _resources, incident, victim, run = _preempt(env, policy, dg.DagsterRunStatus.STARTED)
    assert run.status in (dg.DagsterRunStatus.CANCELING, dg.DagsterRunStatus.CANCELED)
    assert run.tags[TAG_PREEMPTED_BY] == incident and run.tags[TAG_RESUME_FROM] == "ckpt-00000120.npz"
    said = [m for m in _messages(instance, run.run_id) if m.startswith("Preempted (")]
    assert said and "by sev1 repro" in said[0]


def test_a_victim_that_still_ends_failed_is_recorded_canceled(env, policy):
    instance, _ledger, resources, _incident, victim, run = _preempt(env, policy, dg.DagsterRunStatus.STARTED)
    instance.report_run_failed(run)  # its worker raced the termination
    assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.FAILURE
    tick(instance, resources)
    after = instance.get_run_by_id(run.run_id)
    assert after.status == dg.DagsterRunStatus.CANCELED
    (message,) = _messages(instance, run.run_id, DagsterEventType.RUN_CANCELED)
    assert message.startswith("Preempted by sev1 repro: canceled, not failed") and "ckpt-00000120.npz" in message


def test_a_real_failure_of_a_run_never_preempted_stays_a_failure(env, policy):
    instance, ledger, resources, _home = env
    rid = submit(ledger, policy, "labeler_batch")
    (rr,) = tick(instance, resources).run_requests
    run_id = add_run(instance, rid, 1, lane="labeler_batch")
    instance.report_run_failed(instance.get_run_by_id(run_id))
    tick(instance, resources)
    assert instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.FAILURE
    assert ledger.state(rid).state == "failed"
