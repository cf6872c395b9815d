"""`gpu-platform approve`: audited exceptions from the policy's approver roster, on SQLite and on
the real PostgreSQL `make test` starts, and the gate honouring them (a request's own
`safety_approval` string is no longer enough)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal

import pytest
import yaml
from click.testing import CliRunner

from gpu_platform.cli import main
from gpu_platform.gate.tick import plan_tick
from gpu_platform.policy import default_policy_path, load_policy, parse_policy
from gpu_platform.requests.ledger import Ledger
from gpu_platform.requests.model import validate_request
from tests.conftest import EXAMPLES


def _raw(lane: str, **update) -> dict:
    raw = yaml.safe_load((EXAMPLES / f"{lane}.yaml").read_text())
    raw.update(update)
    return raw


def _approve(url: str, rid: str, *args: str, policy: str | None = None):
    """`approve` by the caller the API server knows as the `--approver` given (the verified
    identity, GPU_PLATFORM_IDENTITY=kubernetes); `policy`: the deployed policy."""
    from unittest import mock

    who = args[args.index("--approver") + 1] if "--approver" in args else "nobody@example.com"
    env = {"GPU_PLATFORM_IDENTITY": "kubernetes", "GPU_PLATFORM_POLICY": str(policy or "")}
    with mock.patch("gpu_platform.cli.approve._kubernetes_user", lambda: who):
        return CliRunner().invoke(main, ["approve", rid, *args, "--ledger", url], env=env, catch_exceptions=False)


def test_unknown_role_exits_2_naming_the_allowed_roles(ledger_url):
    ledger = Ledger(ledger_url)
    rid = ledger.submit(validate_request(_raw("release_eval"), load_policy()))
    out = _approve(ledger_url, rid, "--role", "intern", "--kind", "safety", "--reason", "x", "--approver", "a")
    assert out.exit_code == 2
    assert "unknown role 'intern' (allowed roles: finops, platform-lead, safety-owner)" in out.output
    assert [e.event for e in ledger.events(rid)] == ["submitted"]


def test_kind_the_role_may_not_approve_and_non_member_are_refused(ledger_url):
    ledger = Ledger(ledger_url)
    rid = ledger.submit(validate_request(_raw("release_eval"), load_policy()))
    out = _approve(ledger_url, rid, "--role", "finops", "--kind", "safety", "--reason", "x", "--approver", "finops-lead@example.com")
    assert out.exit_code == 2 and "role finops may not approve safety (it may approve: cost)" in out.output
    out = _approve(ledger_url, rid, "--role", "finops", "--kind", "cost", "--reason", "x", "--approver", "mallory")
    assert out.exit_code == 2 and "'mallory' is not a member of role finops" in out.output
    out = _approve(ledger_url, rid, "--role", "finops", "--kind", "refund", "--reason", "x")
    assert out.exit_code == 2 and "refund" in out.output  # not an approval kind
    out = _approve(ledger_url, "req-missing", "--role", "finops", "--kind", "cost", "--reason", "x", "--approver", "finops-lead@example.com")
    assert out.exit_code == 2 and "unknown request id 'req-missing'" in out.output
    assert [e.event for e in ledger.events(rid)] == ["submitted"]


def test_approval_is_recorded_with_its_shape_and_changes_no_state(ledger_url):
    ledger = Ledger(ledger_url)
    rid = ledger.submit(validate_request(_raw("release_eval"), load_policy()))
    ledger.record(rid, "waiting", "Inadmissible: lane full", details={"position": 1, "of": 1})
    out = _approve(ledger_url, rid, "--role", "safety-owner", "--kind", "safety", "--reason", "INC-77 needs the replay now",
                   "--approver", "safety-owner@example.com")
    assert out.exit_code == 0, out.output
    shape = {"kind": "safety", "role": "safety-owner", "approver": "safety-owner@example.com", "reason": "INC-77 needs the replay now",
             "identity_source": "kubernetes", "verified": True}
    assert json.loads(out.output) == {"request_id": rid, "event": "approved", **shape}
    last = ledger.events(rid)[-1]
    assert last.event == "approved" and last.details == shape
    state = ledger.state(rid)
    assert (state.state, state.reason) == ("waiting", "Inadmissible: lane full")  # not a state change
    assert state.cluster is None  # nor what the cluster said
    assert [{k: a[k] for k in shape} for a in state.approvals] == [shape]
    ex = CliRunner().invoke(main, ["explain", rid, "--ledger", ledger_url, "--format", "json"], catch_exceptions=False)
    doc = json.loads(ex.output)
    assert doc["approvals"][0]["honoured"] is True and doc["approvals"][0]["approver"] == shape["approver"]
    step = doc["steps"][-1]
    assert step["event"] == "approved" and "approvers.safety-owner.may_approve includes safety" in step["rule"]
    table = CliRunner().invoke(main, ["explain", rid, "--ledger", ledger_url], catch_exceptions=False)
    assert "approval: safety by safety-owner@example.com (safety-owner)" in table.output


def test_a_request_that_has_ended_cannot_be_approved(ledger_url):
    ledger = Ledger(ledger_url)
    rid = ledger.submit(validate_request(_raw("release_eval"), load_policy()))
    ledger.record(rid, "finished", "run succeeded")
    out = _approve(ledger_url, rid, "--role", "platform-lead", "--kind", "cost", "--reason", "x", "--approver", "platform-lead@example.com")
    assert out.exit_code == 2 and "is finished" in out.output


def test_submit_warns_that_a_request_string_grants_nothing(tmp_path):
    path = tmp_path / "req.yaml"
    path.write_text(yaml.safe_dump(_raw("release_eval", safety_approval="SO-1234")))
    out = CliRunner().invoke(main, ["submit", str(path), "--ledger", f"sqlite:///{tmp_path / 'l.db'}"])
    assert out.exit_code == 0, out.output
    assert "safety_approval: recorded but grants nothing" in out.output and "gpu-platform approve" in out.output
    out = CliRunner().invoke(main, ["request", "validate", str(path)])
    assert out.exit_code == 0 and "safety_approval: recorded but grants nothing" in out.output


def _yields_policy(tmp_path):
    """The default policy with map_semantic_batch yielding only to incident_response, and the
    serving lane keeping its 8 L4s (lending_limit 0): the release can have L4s only by reclaiming."""
    raw = yaml.safe_load(default_policy_path().read_text())
    raw["lanes"]["map_semantic_batch"]["yields_to"] = ["incident_response"]
    raw["lanes"]["online_serving"]["quotas"][0]["lending_limit"] = 0
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return parse_policy(raw), str(path)


def _borrowing_maps_and_a_release(ledger: Ledger, pol, **release) -> str:
    """Map batches hold 8 L4 (4 borrowed from the assurance subtree) and a labeling batch 4; a
    release replay needs 8 L4: it can only have them by reclaiming what the maps borrowed."""
    now = datetime.now(UTC)
    lab = ledger.submit(validate_request(_raw("labeler_batch", gpu_type="l4-inference", gpu_count=4), pol))
    ledger.record(lab, "admitted", "QuotaReserved", flavor="l4-inference", details={"attempt": 1}, at=now)
    for i in range(2):
        rid = ledger.submit(validate_request(_raw("map_semantic_batch", output_artifact_ids=[f"m{i}"], tile_set=f"t{i}"), pol))
        ledger.record(rid, "admitted", "QuotaReserved", flavor="l4-inference", details={"attempt": 1}, at=now)
    return ledger.submit(validate_request(_raw("release_eval", gpu_type="l4-inference", gpu_count=8, **release), pol))


def test_recorded_safety_approval_is_honoured_and_the_request_string_is_not(ledger_url, tmp_path):
    pol, path = _yields_policy(tmp_path)
    ledger = Ledger(ledger_url)
    rel = _borrowing_maps_and_a_release(ledger, pol, safety_approval="SO-1234")
    now = datetime.now(UTC)
    plan = plan_tick(pol, ledger.states(), now, checkpointed=lambda _r: True)
    assert plan.preemptions == [] and not plan.launches
    (wait,) = [w for w in plan.waits if w.name == rel]
    assert "map_semantic_batch yields only to incident_response or a safety approval: 2" in wait.message
    out = _approve(
        ledger_url, rel, "--role", "safety-owner", "--kind", "safety", "--reason", "release gate today",
        "--approver", "release-safety-lead@example.com", policy=path,
    )
    assert out.exit_code == 0, out.output
    plan = plan_tick(pol, ledger.states(), now, checkpointed=lambda _r: True)
    assert [p.preemptor for p in plan.preemptions] == [rel] and plan.preemptions[0].victim_cq == "map_semantic_batch"
    # A roster that no longer lets the role approve safety withdraws the grant.
    raw = yaml.safe_load(open(path).read())
    raw["approvers"]["safety-owner"]["may_approve"] = ["cost"]
    stricter = parse_policy(raw)
    assert plan_tick(stricter, ledger.states(), now, checkpointed=lambda _r: True).preemptions == []


def test_cost_approval_lifts_the_lane_budget_for_that_request(ledger_url):
    pol = load_policy()
    ledger = Ledger(ledger_url)
    over = ledger.submit(validate_request(_raw("release_eval", max_cost=1500, output_artifact_ids=["a"]), pol))
    other = ledger.submit(validate_request(_raw("release_eval", max_cost=1500, output_artifact_ids=["b"]), pol))
    now = datetime.now(UTC)
    spent = {"release_eval": Decimal("59000")}  # 1,000 of 60,000 left
    plan = plan_tick(pol, ledger.states(), now, spent=spent)
    assert not plan.launches
    assert {w.name: w.reason_code for w in plan.waits} == {over: "BudgetExhausted", other: "BudgetExhausted"}
    out = _approve(ledger_url, over, "--role", "finops", "--kind", "cost", "--reason", "Q4 release", "--approver", "finops-lead@example.com")
    assert out.exit_code == 0, out.output
    plan = plan_tick(pol, ledger.states(), now, spent=spent)
    assert [la.request_id for la in plan.launches] == [over]
    assert {w.name: w.reason_code for w in plan.waits} == {other: "BudgetExhausted"}


@pytest.mark.parametrize("kind", ["safety", "cost"])
def test_every_approval_event_has_exactly_the_scorecard_shape(ledger_url, kind):
    """The bypass scorecard counts `approved` events from a snapshot of the events table."""
    ledger = Ledger(ledger_url)
    rid = ledger.submit(validate_request(_raw("release_eval"), load_policy()))
    out = _approve(ledger_url, rid, "--role", "platform-lead", "--kind", kind, "--reason", "r", "--approver", "platform-lead@example.com")
    assert out.exit_code == 0, out.output
    (ev,) = [e for e in ledger.events(rid) if e.event == "approved"]
    assert set(ev.details) == {"kind", "role", "approver", "reason", "identity_source", "verified"}
    assert ev.details["kind"] == kind
