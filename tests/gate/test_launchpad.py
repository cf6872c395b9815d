"""Launchpad templates: `submit_request` has a typed config (a description per field, defaults
where they make sense) and opens with a working example; launching it as it opens records a request."""

from __future__ import annotations

import dagster as dg
import yaml
from dagster._core.remote_representation.external_data import active_presets_from_job_def

from assets.definitions import build_definitions
from assets.gate import submit_request
from assets.submit import EXAMPLE, SubmitRequestConfig
from gpu_platform.requests.model import JobRequest, validate_request
from tests.conftest import EXAMPLES


def _op_config_fields(job: dg.JobDefinition) -> dict:
    ops = job.run_config_schema.config_type.fields["ops"].config_type
    return ops.fields["submit_request_op"].config_type.fields["config"].config_type.fields


def test_the_config_has_every_request_field_each_described():
    assert set(SubmitRequestConfig.model_fields) == set(JobRequest.model_fields)
    job = build_definitions("test").get_job_def("submit_request")
    fields = _op_config_fields(job)
    assert set(fields) == set(JobRequest.model_fields)
    undescribed = [name for name, f in fields.items() if not f.description]
    assert undescribed == []
    # who pays has no default (a launch never bills someone by default); the rest may
    assert fields["owner"].default_value is None and fields["team"].default_value is None
    assert fields["gpu_count"].default_value == 1 and fields["preemption_policy"].default_value == "checkpoint_requeue"


def test_the_launchpad_opens_with_a_working_example(policy):
    job = build_definitions("test").get_job_def("submit_request")
    (preset,) = active_presets_from_job_def(job)  # what the Launchpad opens with
    assert preset.run_config == {"ops": {"submit_request_op": {"config": EXAMPLE}}}
    example = yaml.safe_load((EXAMPLES / "research_best_effort.yaml").read_text())
    assert {k: v for k, v in EXAMPLE.items() if k != "name"} == example
    req = validate_request(SubmitRequestConfig(**EXAMPLE).request_fields(), policy)
    assert req.name == "occupancy lr sweep (Launchpad example)"


def test_launching_the_template_as_it_opens_records_the_request(env):
    instance, ledger, resources, _ = env
    result = submit_request.execute_in_process(
        resources={"ledger": resources["ledger"], "policy": resources["policy"]}, instance=instance
    )
    assert result.success
    rid = result.output_for_node("submit_request_op")
    state = ledger.state(rid)
    assert state.state == "submitted" and state.request.name == "occupancy lr sweep (Launchpad example)"
    assert state.request.owner == "ana@example.com"


def test_a_typo_in_the_config_is_refused_before_anything_runs(env):
    instance, ledger, resources, _ = env
    try:
        submit_request.execute_in_process(
            run_config={"ops": {"submit_request_op": {"config": {**EXAMPLE, "gpu_cuont": 2}}}},
            resources={"ledger": resources["ledger"], "policy": resources["policy"]},
            instance=instance,
        )
    except dg.DagsterInvalidConfigError as exc:
        assert "gpu_cuont" in str(exc)
    else:
        raise AssertionError("an unknown field was accepted")
    assert ledger.count()[0] == 0


def test_an_invalid_request_fails_with_its_problems_and_no_trace_under_them(env):
    """The run's failure is the validation listing: every problem in the description and as
    metadata, with no chained traceback of the validator under it (Dagster records the raising
    frames of any failure; the cause is left out) and no retry."""
    instance, ledger, resources, _ = env
    bad = submit_request.execute_in_process(
        run_config={"ops": {"submit_request_op": {"config": {"lane": "release_eval", "gpu_count": 2}}}},
        resources={"ledger": resources["ledger"], "policy": resources["policy"]},
        instance=instance,
        raise_on_error=False,
    )
    assert not bad.success
    (event,) = bad.get_step_failure_events()
    failure = event.step_failure_data
    description = failure.user_failure_data.description
    assert description.startswith("request refused: ") and "- owner: required" in description
    assert "- release_packet_id: required by lane release_eval" in description
    assert "owner: required" in failure.user_failure_data.metadata["problems"].value
    assert failure.error.cause is None and failure.error.context is None
    assert failure.error.cls_name == "Failure" and "request refused" in failure.error.message
    assert not any("requests/model.py" in frame for frame in failure.error.stack)
    assert ledger.count()[0] == 0
