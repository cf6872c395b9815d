"""A Launchpad submission and its work run link to each other: the work run carries the submit
run's id (`gpu-platform/submit-run`), the submit run the work run's (`gpu-platform/work-run`, set
by the gate once the run exists, with a log line linking `/runs/<id>`)."""

from __future__ import annotations

import dagster as dg
from dagster._core.storage.dagster_run import DagsterRun

from assets.gate import submit_request
from assets.run_links import (
    TAG_SUBMIT_RUN,
    TAG_SUBMITTED_REQUEST,
    TAG_WORK_RUN,
    WORK_RUN_PENDING,
    request_runs_url,
    submitted_by_metadata,
)
from gpu_platform.gate.tick import TAG_REQUEST_ID
from tests.gate.helpers import add_run, raw_request, tick


def _launch(instance, resources, lane="labeler_batch", **update):
    result = submit_request.execute_in_process(
        run_config={"ops": {"submit_request_op": {"config": raw_request(lane, **update)}}},
        resources={"ledger": resources["ledger"], "policy": resources["policy"]},
        instance=instance,
    )
    assert result.success
    return result.run_id, result.output_for_node("submit_request_op")


def test_the_submit_run_and_the_work_run_point_at_each_other(env):
    instance, ledger, resources, _ = env
    submit_run, rid = _launch(instance, resources)
    tags = instance.get_run_by_id(submit_run).tags
    assert tags[TAG_SUBMITTED_REQUEST] == rid and tags[TAG_WORK_RUN] == WORK_RUN_PENDING
    # the submit run's output links to the request's runs (empty until the gate launches it)
    output = next(e for e in instance.all_logs(submit_run) if e.dagster_event and e.dagster_event.is_successful_output)
    url = output.dagster_event.event_specific_data.metadata["request_runs"].value
    assert url == request_runs_url(rid) == f"/runs?q%5B%5D=tag%3Agpu-platform%2Frequest-id%3D{rid}"

    first = tick(instance, resources)
    (launched,) = [r for r in first.run_requests if r.tags[TAG_REQUEST_ID] == rid]
    assert launched.tags[TAG_SUBMIT_RUN] == submit_run
    assert instance.get_run_by_id(submit_run).tags[TAG_WORK_RUN] == WORK_RUN_PENDING  # no run yet

    work_run = add_run(instance, rid, 1, lane="labeler_batch")  # the daemon creates the run
    tick(instance, resources)
    assert instance.get_run_by_id(submit_run).tags[TAG_WORK_RUN] == work_run
    logged = [e.message for e in instance.all_logs(submit_run) if f"/runs/{work_run}" in (e.message or "")]
    assert logged == [f"request {rid} launched as run {work_run} (attempt 1): /runs/{work_run}"]
    tick(instance, resources)  # linked once
    assert len([e for e in instance.all_logs(submit_run) if f"/runs/{work_run}" in (e.message or "")]) == 1


def test_a_request_that_ends_without_a_run_says_so_on_its_submit_run(env):
    instance, ledger, resources, _ = env
    submit_run, rid = _launch(instance, resources, "research_best_effort")
    ledger.record(rid, "rejected", "test: refused by policy")
    tick(instance, resources)
    assert instance.get_run_by_id(submit_run).tags[TAG_WORK_RUN] == "none: request rejected"


def test_requests_submitted_elsewhere_carry_no_submit_run(env, policy):
    from tests.gate.helpers import submit

    instance, ledger, resources, _ = env
    rid = submit(ledger, policy, "labeler_batch")
    (launched,) = tick(instance, resources).run_requests
    assert launched.tags[TAG_REQUEST_ID] == rid and TAG_SUBMIT_RUN not in launched.tags


def test_the_work_runs_materialization_links_its_submit_run():
    run = DagsterRun(job_name="label_batch_job", tags={TAG_SUBMIT_RUN: "abc-123"})
    (value,) = submitted_by_metadata(run).values()
    assert isinstance(value, dg.DagsterRunMetadataValue) and value.run_id == "abc-123"
    assert submitted_by_metadata(DagsterRun(job_name="label_batch_job")) == {}
    assert submitted_by_metadata(None) == {}
