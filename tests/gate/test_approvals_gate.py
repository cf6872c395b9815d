"""Approvals through the real admission sensor: a cost exception lets one request run over its
lane's budget on the next tick; the others keep waiting."""

from __future__ import annotations

from click.testing import CliRunner

from gpu_platform.cli import main
from gpu_platform.gate.tick import TAG_REQUEST_ID
from tests.gate.helpers import submit, tick


def test_cost_approval_lifts_the_budget_on_the_next_tick(env, policy):
    instance, ledger, resources, _home = env
    big = submit(ledger, policy, "release_eval", max_cost=59500, output_artifact_ids=["big"])
    first = tick(instance, resources)
    assert [r.tags[TAG_REQUEST_ID] for r in first.run_requests] == [big]  # 500 of 60,000 left
    over = submit(ledger, policy, "release_eval", max_cost=1500, output_artifact_ids=["over"])
    also = submit(ledger, policy, "release_eval", max_cost=1500, output_artifact_ids=["also"])
    tick(instance, resources)
    assert ledger.state(over).details["reason_code"] == "BudgetExhausted"
    out = CliRunner().invoke(
        main,
        ["approve", over, "--role", "finops", "--kind", "cost", "--reason", "release week",
         "--approver", "finops-lead@example.com", "--ledger", ledger.url],
        catch_exceptions=False,
    )
    assert out.exit_code == 0, out.output
    result = tick(instance, resources)
    assert over in {r.tags[TAG_REQUEST_ID] for r in result.run_requests}
    assert ledger.state(over).state == "admitted"
    assert ledger.state(also).details["reason_code"] == "BudgetExhausted"
    assert [e.event for e in ledger.events(over)].count("approved") == 1
