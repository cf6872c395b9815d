"""Budgets people trust (issue 43 part 5): bypass spend in budget burn, and the gate's budget
(reservations at admission, which admits) beside FinOps' (measured spend) in `explain` and
`cost report`, with the way to a cost exception in the waiting reason.

The forecast month of tests/finops/test_forecast.py (perception spends 50 a day on bypass pods,
days 1..10 of November 2026) and, through the real admission sensor, release_eval's 60,000 budget
reserved up to 500 by one admitted request (tests/gate/test_approvals_gate.py's shape).
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from decimal import Decimal as D

import duckdb
from click.testing import CliRunner

from gpu_platform.cli import main
from gpu_platform.finops.budgets import RULE, budget_rows, cost_exception_command
from gpu_platform.observe.queueview import explain
from tests.finops.test_forecast import DAY, wh  # noqa: F401  (a fixture)
from tests.gate.helpers import env, submit, tick  # noqa: F401  (env: a fixture)


def burn(path) -> dict:
    with duckdb.connect(str(path), read_only=True) as con:
        cur = con.execute("select * from budget_burn where day = $d", {"d": DAY})
        names = [c[0] for c in cur.description]
        return {(r[1], r[2]): dict(zip(names, r, strict=True)) for r in cur.fetchall()}


def test_budget_burn_charges_bypass_to_the_team_and_shows_it(wh):  # noqa: F811
    rows = burn(wh)
    team = rows[("team", "perception")]
    # 10 days x (1,000 in candidate_train + 50 bypass): the bypass is the team's, and shown
    assert team["month_to_date_cost"] == D(10500) and team["bypass_cost"] == D(500)
    assert rows[("lane", "candidate_train")]["bypass_cost"] == 0
    by = rows[("bypass", "(bypass)")]
    assert (by["month_to_date_cost"], by["bypass_cost"], by["forecast_month_end_cost"]) == (D(500), D(500), D(1500))
    assert (by["status"], by["fired"], by["days_left"], by["month_budget"]) == ("unbudgeted", False, None, 0)


def test_the_gate_and_finops_budgets_side_by_side(wh, policy):  # noqa: F811
    lane = policy.lanes["candidate_train"]
    teams = {**policy.teams, "perception": policy.teams["perception"].model_copy(update={"budget": D(32000)})}
    policy = policy.model_copy(update={"teams": teams})
    with duckdb.connect(str(wh), read_only=True) as con:
        rows = budget_rows(policy, {"candidate_train": lane.budget}, datetime(2026, 11, 1, tzinfo=UTC), con,
                           date(2026, 11, 12))
    by = {(r["scope"], r["subject"]): r for r in rows}
    ct = by[("lane", "candidate_train")]
    # the gate has nothing left (all reserved) while FinOps measured 15,000 of the 60,000 budget_burn judged
    assert ct["admits"] == "gate" and ct["gate_remaining"] == 0 and ct["gate_reserved"] == lane.budget
    assert ct["finops_as_of"] == DAY.isoformat()  # the newest day built on or before the 12th
    assert ct["month_to_date_cost"] == D(15000) and ct["finops_left"] == D(45000)
    team = by[("team", "perception")]
    assert team["admits"] == "none" and team["gate_budget"] is None and team["gate_reserved"] is None
    assert team["month_to_date_cost"] == D(10500)  # bypass included
    assert "gate's budget admits" in RULE
    # without a warehouse or ledger: each side says it has no figure
    (alone,) = budget_rows(policy, None, None, None, DAY, lanes=["candidate_train"], teams=[])
    assert alone["gate_remaining"] is None and alone["month_to_date_cost"] is None


def test_the_waiting_reason_names_the_cost_exception_and_explain_shows_both_budgets(env, policy):  # noqa: F811
    instance, ledger, resources, home = env
    submit(ledger, policy, "release_eval", max_cost=59500, output_artifact_ids=["big"])
    tick(instance, resources)
    over = submit(ledger, policy, "release_eval", max_cost=1500, output_artifact_ids=["over"])
    tick(instance, resources)
    reason = ledger.state(over).reason
    assert "remaining budget 500;" in reason
    assert f"gpu-platform approve {over} --kind cost" in reason
    ex = explain(ledger, policy, over)
    (lane,) = [b for b in ex.budgets if b["scope"] == "lane"]
    assert (lane["subject"], lane["gate_budget"], lane["gate_reserved"], lane["gate_remaining"]) == (
        "release_eval", D(60000), D(59500), D(500))
    assert lane["month_budget"] is None  # no warehouse given: FinOps' side is not there
    assert ex.cost_exception == cost_exception_command(policy, over)
    assert "--role finops|platform-lead" in ex.cost_exception
    doc = ex.to_json()
    assert doc["budget_rule"] == RULE and doc["cost_exception"].startswith(f"gpu-platform approve {over}")
    out = CliRunner().invoke(main, ["explain", over, "--ledger", ledger.url],
                             env={"GPU_PLATFORM_HOME": str(home), "COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    assert "budget lane release_eval: gate (admits): 500.00 of 60,000.00" in out.output
    assert "FinOps: budget_burn not built" in out.output
    assert f"cost exception (the way past the gate's budget): gpu-platform approve {over}" in out.output
    js = json.loads(CliRunner().invoke(main, ["explain", over, "--ledger", ledger.url, "--format", "json"],
                                       env={"GPU_PLATFORM_HOME": str(home)}).output)
    assert D(js["budgets"][0]["gate_remaining"]) == 500


def test_cost_report_shows_both_budgets(wh, tmp_path):  # noqa: F811
    out = CliRunner().invoke(main, ["cost", "report", "--day", DAY.isoformat(), "--warehouse", str(wh),
                                    "--format", "json", "--ledger", f"sqlite:///{tmp_path / 'none.db'}"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["budget_rule"] == RULE
    ct = next(b for b in data["budgets"] if b["subject"] == "candidate_train")
    # November 2026 is not the current budget period: the gate's side (today's) is not shown for it
    assert ct["gate_reserved"] is None and ct["month_to_date_cost"] == "15000.000000"
    table = CliRunner().invoke(main, ["cost", "report", "--day", DAY.isoformat(), "--warehouse", str(wh)],
                               env={"COLUMNS": "250"})
    assert "Budgets: the gate's" in table.output and "bypass_cost" in table.output
