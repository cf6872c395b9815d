"""The Launchpad binds identity too (issue 42, class 1): `submit_request` records who launched it,
from the Dagster+ user tag where the deployment says Dagster+ sets it, and refuses an owner or
team that user may not act for; a typed `user` tag counts for nothing without that."""

from __future__ import annotations

import pytest

from assets.gate import submit_request
from tests.gate.helpers import env  # noqa: F401

pytestmark = pytest.mark.real_identity


def _launch(env, user: str | None):  # noqa: F811
    instance, _ledger, resources, _ = env
    return submit_request.execute_in_process(
        resources={"ledger": resources["ledger"], "policy": resources["policy"]}, instance=instance,
        tags={"user": user} if user else None, raise_on_error=False,
    )


def test_the_launchpad_records_the_dagster_user_and_refuses_a_spoofed_owner(env, monkeypatch):  # noqa: F811
    _instance, ledger, _resources, _ = env
    monkeypatch.setenv("GPU_PLATFORM_IDENTITY", "dagster")
    bad = _launch(env, "mallory@example.com")  # the example's owner is ana@example.com, team perception
    assert not bad.success
    text = str(bad.failure_data_for_node("submit_request_op").user_failure_data.description)
    assert "owner: 'ana@example.com' is not you ('mallory@example.com', from dagster)" in text
    assert ledger.count()[0] == 0
    ok = _launch(env, "ana@example.com")
    assert ok.success
    rid = ok.output_for_node("submit_request_op")
    assert ledger.submitter(rid) == {"submitted_by": "ana@example.com", "identity_source": "dagster", "verified": True}


def test_without_an_identity_source_a_typed_user_tag_counts_for_nothing(env, monkeypatch):  # noqa: F811
    _instance, ledger, _resources, _ = env
    monkeypatch.delenv("GPU_PLATFORM_IDENTITY", raising=False)
    out = _launch(env, "ana@example.com")
    assert not out.success  # the default policy is S4: an unverified submitter is refused
    text = str(out.failure_data_for_node("submit_request_op").user_failure_data.description)
    assert "no identity source is configured" in text
    assert ledger.count()[0] == 0


def test_the_ui_lists_an_open_retrospective_on_gpu_queue(env, policy):  # noqa: F811
    """A used break-glass grant opens a retrospective, shown on gpu_queue's materialization (the
    UI) as `approve --due` lists it, until it is recorded done."""
    from assets.gate import GPU_QUEUE
    from tests.gate.helpers import submit, tick

    instance, ledger, resources, _ = env
    rid = submit(ledger, policy, "incident_response")
    ledger.record(rid, "approved", "incident approval", details={
        "kind": "incident", "role": "safety-owner", "approver": "release-safety-lead@example.com", "reason": "sev1",
        "identity_source": "oidc", "verified": True})
    for _ in range(2):  # the first tick admits it (the grant is used), the next one shows it
        for ev in tick(instance, resources).asset_events:
            instance.report_runless_asset_event(ev)
    assert ledger.state(rid).state == "admitted"
    meta = instance.get_latest_materialization_event(GPU_QUEUE).asset_materialization.metadata
    (row,) = meta["break_glass_retrospectives_due"].records
    assert row.data["request_id"] == rid and row.data["why"] == "used"
