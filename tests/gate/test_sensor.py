"""The admission sensor against a real Dagster instance and a real ledger."""

from __future__ import annotations

import socket
from datetime import UTC, datetime

import dagster as dg

from assets.gate import submit_request
from assets.workloads import JOB_FOR_WORKLOAD
from gpu_platform.gate.checkpoints import checkpoint_dir
from gpu_platform.gate.tick import TAG_REQUEST_ID, plan_tick
from tests.gate.helpers import add_run, fill_h100, raw_request, submit, tick


def test_empty_queue_skips_with_reason(env):
    instance, _, resources, _ = env
    result = tick(instance, resources)
    assert isinstance(result, dg.SensorResult) and not result.run_requests
    assert "no pending requests" in result.skip_reason.skip_message


def test_mixed_requests_are_admitted_as_the_engine_says(env, policy):
    instance, ledger, resources, _ = env
    for lane in ("research_best_effort", "release_eval", "candidate_train", "labeler_batch"):
        for i in range(3):
            submit(ledger, policy, lane, output_artifact_ids=[f"{lane}-out-{i}"])
    expected = plan_tick(policy, ledger.states(), datetime.now(UTC))
    result = tick(instance, resources)
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
        # one job and one partition set per workload kind
        assert rr.job_name == JOB_FOR_WORKLOAD[ledger.get(rid).workload]
    added = {req.partitions_def_name: set(req.partition_keys) for req in result.dynamic_partitions_requests}
    expected_sets: dict[str, set[str]] = {}
    for rr in result.run_requests:
        expected_sets.setdefault(f"{ledger.get(rr.partition_key).workload}_requests", set()).add(rr.partition_key)
    assert added == expected_sets and len(added) > 1
    waiting = ledger.states(["waiting"])
    assert {w.request_id for w in waiting} == {w.name for w in expected.waits}
    for w in waiting:
        assert w.reason and w.details["position"] >= 1 and w.details["of"] >= w.details["position"]


def test_crash_between_recording_and_launching_relaunches_same_run_key_once(env, policy):
    instance, ledger, resources, _ = env
    rid = submit(ledger, policy, "release_eval")
    first = tick(instance, resources)  # recorded as admitted; pretend the process died before launching
    assert [r.run_key for r in first.run_requests] == [f"{rid}#1"]
    second = tick(instance, resources)
    assert [r.run_key for r in second.run_requests] == [f"{rid}#1"]
    assert [e.event for e in ledger.events(rid)] == ["submitted", "admitted"]
    add_run(instance, rid, 1, lane="release_eval")
    third = tick(instance, resources)
    assert third.skip_reason is not None and not third.run_requests
    assert ledger.state(rid).attempts == 1


def test_finished_and_failed_runs_are_recorded(env, policy):
    instance, ledger, resources, _ = env
    ok = submit(ledger, policy, "labeler_batch")
    bad = submit(ledger, policy, "labeler_batch", output_artifact_ids=["other"])
    tick(instance, resources)
    add_run(instance, ok, 1, dg.DagsterRunStatus.SUCCESS)
    add_run(instance, bad, 1, dg.DagsterRunStatus.FAILURE)
    tick(instance, resources)
    assert ledger.state(ok).state == "finished"
    assert ledger.state(bad).state == "failed"


def test_incident_preempts_checkpointed_research_and_victim_requeues(env, policy):
    instance, ledger, resources, home = env
    research, others = fill_h100(ledger, policy)
    first = tick(instance, resources)
    launched = [r.tags[TAG_REQUEST_ID] for r in first.run_requests]
    assert set(others) <= set(launched) and research[0] in launched
    run_ids = {rid: add_run(instance, rid, 1) for rid in launched}
    for rid in launched:
        ckpt = checkpoint_dir(home, rid)
        ckpt.mkdir(parents=True)
        (ckpt / "ckpt-00000020.npz").write_bytes(b"x")
    incident = submit(ledger, policy, "incident_response", gpu_count=8)
    tick(instance, resources)
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
    result = tick(instance, resources)
    assert incident in [r.tags[TAG_REQUEST_ID] for r in result.run_requests]
    assert ledger.state(victim).state in ("requeued", "waiting")


def test_uncheckpointed_evidence_run_is_left_alone(env, policy):
    """Every H100 the incident could reclaim runs an evidence job without a checkpoint: nothing is preempted."""
    instance, ledger, resources, _ = env
    evidence = [
        submit(ledger, policy, "candidate_train", candidate_id=f"c{i}", output_artifact_ids=[f"m{i}"], gpu_count=8)
        for i in range(2)
    ] + [submit(ledger, policy, "release_eval", output_artifact_ids=[f"e{i}"], gpu_count=4) for i in range(4)]
    tick(instance, resources)
    assert all(ledger.state(c).state == "admitted" for c in evidence)
    for c in evidence:
        add_run(instance, c, 1, lane=ledger.get(c).lane)
    incident = submit(ledger, policy, "incident_response", gpu_count=8)
    tick(instance, resources)
    assert all(ledger.state(c).state == "admitted" for c in evidence)
    assert ledger.state(incident).state == "waiting"
    assert "not checkpointed" in ledger.state(incident).reason


def test_submit_request_job_records_valid_and_refuses_invalid(env, policy):
    instance, ledger, resources, _ = env
    ok = submit_request.execute_in_process(
        run_config={"ops": {"submit_request_op": {"config": raw_request("release_eval")}}},
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
    labels = submit(ledger, policy, "labeler_batch")  # produces lbl-batch-2026-11-28
    train = submit(ledger, policy, "candidate_train")  # consumes lbl-batch-2026-11-28
    tick(instance, resources)
    assert ledger.state(labels).state == "admitted"
    state = ledger.state(train)
    assert state.state == "waiting"
    assert state.reason.startswith("WaitingForUpstream: needs lbl-batch-2026-11-28 from " + labels)
    add_run(instance, labels, 1, dg.DagsterRunStatus.SUCCESS, lane="labeler_batch")
    result = tick(instance, resources)
    assert ledger.state(labels).state == "finished"
    assert [r.tags[TAG_REQUEST_ID] for r in result.run_requests] == [train]
