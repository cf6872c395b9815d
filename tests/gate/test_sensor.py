"""The admission sensor against a real Dagster instance and a real ledger."""

from __future__ import annotations

import socket
from datetime import UTC, datetime

import dagster as dg
import pytest
import yaml
from dagster._core.storage.dagster_run import DagsterRun

from assets.gate import WORKLOAD_JOB, admission_sensor, submit_request
from gpu_platform.gate import TAG_ATTEMPT, TAG_LANE, TAG_REQUEST_ID, checkpoint_dir, plan_tick
from gpu_platform.ledger import Ledger
from gpu_platform.requests import validate_request
from resources.ledger import LedgerResource
from resources.policy import PolicyResource
from resources.settings import PlatformSettings
from tests.conftest import EXAMPLES


def _raw(lane: str, **update) -> dict:
    raw = yaml.safe_load((EXAMPLES / f"{lane}.yaml").read_text())
    raw.update(update)
    return raw


@pytest.fixture
def env(tmp_path, policy):
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    resources = {
        "ledger": LedgerResource(url=url),
        "policy": PolicyResource(),
        "settings": PlatformSettings(home=str(tmp_path / "home")),
    }
    (tmp_path / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:
        yield instance, Ledger(url), resources, tmp_path / "home"


def _tick(instance, resources):
    ctx = dg.build_sensor_context(instance=instance, resources=resources)
    return admission_sensor(ctx)


def _submit(ledger, policy, lane, **update) -> str:
    return ledger.submit(validate_request(_raw(lane, **update), policy))


def _add_run(instance, request_id, attempt, status=dg.DagsterRunStatus.STARTED, lane="research_best_effort") -> str:
    run = DagsterRun(
        job_name=WORKLOAD_JOB,
        status=status,
        tags={TAG_REQUEST_ID: request_id, TAG_ATTEMPT: str(attempt), TAG_LANE: lane},
    )
    instance.add_run(run)
    return run.run_id


def test_empty_queue_skips_with_reason(env):
    instance, _, resources, _ = env
    result = _tick(instance, resources)
    assert isinstance(result, dg.SkipReason)
    assert "no pending requests" in result.skip_message


def test_mixed_requests_are_admitted_as_the_engine_says(env, policy):
    instance, ledger, resources, _ = env
    for lane in ("research_best_effort", "release_eval", "candidate_train", "labeler_batch"):
        for i in range(3):
            _submit(ledger, policy, lane, output_artifact_ids=[f"{lane}-out-{i}"])
    expected = plan_tick(policy, ledger.states(), datetime.now(UTC))
    result = _tick(instance, resources)
    assert isinstance(result, dg.SensorResult)
    keys = {r.run_key for r in result.run_requests}
    assert keys == {launch.run_key for launch in expected.launches}
    assert len(keys) > 0
    for rr in result.run_requests:
        rid = rr.tags[TAG_REQUEST_ID]
        assert rr.partition_key == rid
        assert rr.tags["dagster/priority"].isdigit()
        assert dg.AssetKey(ledger.get(rid).workload) in rr.asset_selection
        assert ledger.state(rid).state == "admitted"
        assert ledger.state(rid).details["hostname"] == socket.gethostname()  # local executor: this machine
    assert result.dynamic_partitions_requests[0].partition_keys == [r.partition_key for r in result.run_requests]
    waiting = ledger.states(["waiting"])
    assert {w.request_id for w in waiting} == {w.name for w in expected.waits}
    for w in waiting:
        assert w.reason and w.details["position"] >= 1 and w.details["of"] >= w.details["position"]


def test_crash_between_recording_and_launching_relaunches_same_run_key_once(env, policy):
    instance, ledger, resources, _ = env
    rid = _submit(ledger, policy, "release_eval")
    first = _tick(instance, resources)  # recorded as admitted; pretend the process died before launching
    assert [r.run_key for r in first.run_requests] == [f"{rid}#1"]
    second = _tick(instance, resources)
    assert [r.run_key for r in second.run_requests] == [f"{rid}#1"]
    assert [e.event for e in ledger.events(rid)] == ["submitted", "admitted"]
    _add_run(instance, rid, 1, lane="release_eval")
    third = _tick(instance, resources)
    assert isinstance(third, dg.SkipReason)
    assert ledger.state(rid).attempts == 1


def test_finished_and_failed_runs_are_recorded(env, policy):
    instance, ledger, resources, _ = env
    ok = _submit(ledger, policy, "labeler_batch")
    bad = _submit(ledger, policy, "labeler_batch", output_artifact_ids=["other"])
    _tick(instance, resources)
    _add_run(instance, ok, 1, dg.DagsterRunStatus.SUCCESS)
    _add_run(instance, bad, 1, dg.DagsterRunStatus.FAILURE)
    _tick(instance, resources)
    assert ledger.state(ok).state == "finished"
    assert ledger.state(bad).state == "failed"


def _fill_h100(ledger, policy):
    """H100s busy up to the cohort's lendable quota: research borrows, baseline borrows, candidate in quota."""
    research = [
        _submit(ledger, policy, "research_best_effort", gpu_type="h100-ondemand", gpu_count=8, experiment_id=f"exp-{i}", output_artifact_ids=[f"r{i}"])
        for i in range(2)
    ]
    others = [_submit(ledger, policy, "baseline_rebuild"), _submit(ledger, policy, "candidate_train")]
    return research, others


def test_incident_preempts_checkpointed_research_and_victim_requeues(env, policy):
    instance, ledger, resources, home = env
    research, others = _fill_h100(ledger, policy)
    first = _tick(instance, resources)
    launched = [r.tags[TAG_REQUEST_ID] for r in first.run_requests]
    assert set(others) <= set(launched) and research[0] in launched
    run_ids = {rid: _add_run(instance, rid, 1) for rid in launched}
    for rid in launched:
        ckpt = checkpoint_dir(home, rid)
        ckpt.mkdir(parents=True)
        (ckpt / "ckpt-00000020.npz").write_bytes(b"x")
    incident = _submit(ledger, policy, "incident_response", gpu_count=8)
    _tick(instance, resources)
    preempted = [rid for rid in launched if ledger.state(rid).state == "requeued"]
    assert len(preempted) == 1, [ledger.state(r).state for r in launched]
    assert preempted[0] in research
    victim = preempted[0]
    events = [e.event for e in ledger.events(victim)]
    assert events[-2:] == ["preempted", "requeued"]
    assert ledger.events(victim)[-2].details["kueue_reason"] in ("InCohortReclamation", "InCohortReclaimWhileBorrowing")
    assert instance.get_run_by_id(run_ids[victim]).status in (dg.DagsterRunStatus.CANCELING, dg.DagsterRunStatus.CANCELED)
    assert ledger.state(incident).state == "waiting"
    # victim's run stops; the incident is admitted on the next tick, the victim waits in its original order
    instance.report_run_canceled(instance.get_run_by_id(run_ids[victim]))
    result = _tick(instance, resources)
    assert incident in [r.tags[TAG_REQUEST_ID] for r in result.run_requests]
    assert ledger.state(victim).state in ("requeued", "waiting")


def test_uncheckpointed_evidence_run_is_left_alone(env, policy):
    """Every H100 the incident could reclaim runs an evidence job without a checkpoint: nothing is preempted."""
    instance, ledger, resources, _ = env
    evidence = [
        _submit(ledger, policy, "candidate_train", candidate_id=f"c{i}", output_artifact_ids=[f"m{i}"], gpu_count=8)
        for i in range(2)
    ] + [_submit(ledger, policy, "release_eval", output_artifact_ids=[f"e{i}"], gpu_count=4) for i in range(4)]
    _tick(instance, resources)
    assert all(ledger.state(c).state == "admitted" for c in evidence)
    for c in evidence:
        _add_run(instance, c, 1, lane=ledger.get(c).lane)
    incident = _submit(ledger, policy, "incident_response", gpu_count=8)
    _tick(instance, resources)
    assert all(ledger.state(c).state == "admitted" for c in evidence)
    assert ledger.state(incident).state == "waiting"
    assert "not checkpointed" in ledger.state(incident).reason


def test_submit_request_job_records_valid_and_refuses_invalid(env, policy):
    instance, ledger, resources, _ = env
    ok = submit_request.execute_in_process(
        run_config={"ops": {"submit_request_op": {"config": _raw("release_eval")}}},
        resources={"ledger": resources["ledger"], "policy": resources["policy"]},
        instance=instance,
    )
    assert ok.success
    rid = ok.output_for_node("submit_request_op")
    assert ledger.state(rid).state == "submitted"
    bad = submit_request.execute_in_process(
        run_config={"ops": {"submit_request_op": {"config": {"lane": "release_eval"}}}},
        resources={"ledger": resources["ledger"], "policy": resources["policy"]},
        instance=instance,
        raise_on_error=False,
    )
    assert not bad.success
    failure = bad.get_step_failure_events()[0].step_failure_data.user_failure_data
    assert "release_packet_id: required by lane release_eval" in failure.description
    assert "owner: required" in failure.description
    assert ledger.count()[0] == 1


def test_request_waits_for_its_upstream_producer(env, policy):
    instance, ledger, resources, _ = env
    labels = _submit(ledger, policy, "labeler_batch")  # produces lbl-batch-2026-11-28
    train = _submit(ledger, policy, "candidate_train")  # consumes lbl-batch-2026-11-28
    _tick(instance, resources)
    assert ledger.state(labels).state == "admitted"
    state = ledger.state(train)
    assert state.state == "waiting"
    assert state.reason.startswith("WaitingForUpstream: needs lbl-batch-2026-11-28 from " + labels)
    _add_run(instance, labels, 1, dg.DagsterRunStatus.SUCCESS, lane="labeler_batch")
    result = _tick(instance, resources)
    assert ledger.state(labels).state == "finished"
    assert [r.tags[TAG_REQUEST_ID] for r in result.run_requests] == [train]
