"""The hand-computed day of finops_scenario: every cost and unit cost to the cent."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal as D

import duckdb
import pytest

from gpu_platform.finops.sqlmodels import Project, default_project_path
from tests.sqlmodels.finops_scenario import (
    D0,
    DAY,
    billing_rows,
    insert_billing,
    insert_samples,
    load_scenario,
)

CENT = D("0.01")

# -- hand computation (see finops_scenario's table) ----------------------------------------------
PRICE_A = D("777.60") / (8 * 24)  # 4.05 USD per H100 GPU-hour (billed)
PRICE_B = D("1.844")  # USD per A100 GPU-hour (price book, AWS capacity block, verified: page)
NODE_A = D("777.60")
NODE_B = PRICE_B * 8 * 24  # 354.048
SHARED = D("48.00") + D("12.00")  # 60.00
BILLED = NODE_A + SHARED  # 837.60

COST = {
    "R1": (2 * 4 + 6 * 4) * PRICE_A,  # 32 GPU-h incl. the failed first attempt = 129.60
    "R2": 12 * 2 * PRICE_B,  # 44.256
    "R3": 6 * 8 * PRICE_A,  # 194.40
    "R4": 2 * 1 * PRICE_B,  # 3.688
    "R6": 4 * 2 * PRICE_B,  # 14.752
    "R7": 1 * 1 * PRICE_B,  # 1.844
}
R1_FAILED = 2 * 4 * PRICE_A  # 32.40
ALLOC_A = COST["R1"] + COST["R3"]  # 324.00
ALLOC_B = COST["R2"] + COST["R4"] + COST["R6"] + COST["R7"]  # 64.54
IDLE = (NODE_A - ALLOC_A) + (NODE_B - ALLOC_B)  # 453.60 + 289.508 = 743.108
ALLOCATED = ALLOC_A + ALLOC_B  # 388.54

TEAM_ALLOC = {
    "perception": COST["R1"],  # 129.60
    "labeling": COST["R2"],  # 44.256
    "safety": COST["R3"] + COST["R4"],  # 198.088
    "mapping": COST["R6"] + COST["R7"],  # 16.596
}

# used GPU-hours: hours x GPUs x busy (engine-active on gpu-a, GPU_UTIL/100 on gpu-b)
USED = {"R1": 2 * 4 * 0.5 + 6 * 4 * 0.5, "R2": 12 * 2 * 0.4, "R3": 6 * 8 * 0.75, "R4": 2.0, "R6": 8.0, "R7": 1.0}


def money(x) -> D:
    return D(str(x)).quantize(CENT)


@pytest.fixture(scope="module")
def project() -> Project:
    return Project.load(default_project_path())


def build(project: Project, con, **variables):
    project.build(con, day=DAY, variables=variables or None)
    return {t.model + "." + t.test_name: t.failures for t in project.run_tests(con, DAY)}


@pytest.fixture(scope="module")
def con(project):
    c = duckdb.connect()
    load_scenario(c)
    failures = build(project, c)
    assert {k: v for k, v in failures.items() if v} == {}
    yield c
    c.close()


def one(con, sql, params=None):
    rows = con.execute(sql, params or {}).fetchall()
    assert len(rows) == 1, rows
    return rows[0]


def test_node_prices(con):
    rows = dict(con.execute("select hostname, price_per_gpu_hour from int_node_hour_prices").fetchall())
    assert rows == {"gpu-a": PRICE_A, "gpu-b": PRICE_B}
    src = con.execute("select price_book_source, price_book_as_of from int_node_hour_prices "
                      "where hostname = 'gpu-b'").fetchall()[0]
    assert "Capacity Blocks" in src[0] and "2025-01-01" in src[1]


def test_request_costs_and_hours(con):
    rows = {r[0]: r[1:] for r in con.execute(
        "select request_id, allocated_cost, used_gpu_hours, attempts, failed_attempts, failed_attempt_cost "
        "from fct_gpu_cost_by_request").fetchall()}
    assert {k: money(v[0]) for k, v in rows.items()} == {k: money(v) for k, v in COST.items()}
    for k, used in USED.items():
        assert rows[k][1] == pytest.approx(used, abs=1e-9), k
    assert rows["R1"][2:] == (2, 1, R1_FAILED)


def test_unit_costs_to_the_cent(con):
    # training run: both attempts, the failed retry included
    assert money(one(con, "select cost_per_training_run from unit_cost_training_run")[0]) == money(COST["R1"])
    assert one(con, "select attempts, failed_attempts from unit_cost_training_run") == (2, 1)
    # accepted label: 44.256 / 10,000 = 0.0044256 (kept to 1e-6)
    assert one(con, "select cost_per_accepted_label from unit_cost_accepted_label")[0] == (
        COST["R2"] / 10_000).quantize(D("0.000001"))
    # replay hour: 194.40 / 20 = 9.72
    assert money(one(con, "select cost_per_replay_hour from unit_cost_replay_hour")[0]) == money(COST["R3"] / 20)
    # evidence pack R4: 3.688
    assert money(one(con, "select cost_per_evidence_pack from unit_cost_evidence_pack")[0]) == money(COST["R4"])
    # ODD-cell approval (P1, muc-urban-day): replay R3 + evidence pack R4, one approval = 198.088
    assert money(one(con, "select cost_per_approval from unit_cost_odd_cell_approval")[0]) == money(
        COST["R3"] + COST["R4"])
    # released model R5: candidate C1 (R1 + R3) and packet P1 (R3, R4), each once = 327.688
    rm = one(con, "select cost_per_released_model, lineage_requests from unit_cost_released_model")
    assert (money(rm[0]), rm[1]) == (money(COST["R1"] + COST["R3"] + COST["R4"]), 3)
    # released map R7: itself + map segmentation R6 of packet PM1 = 16.596
    assert money(one(con, "select cost_per_released_map from unit_cost_released_map")[0]) == money(
        COST["R6"] + COST["R7"])


def test_idle_capacity(con):
    rows = {r[0]: r[1:] for r in con.execute(
        "select hostname, allocated_gpu_hours, idle_gpu_hours, idle_cost from int_idle_capacity").fetchall()}
    assert rows["gpu-a"] == (80.0, 112.0, NODE_A - ALLOC_A)
    assert rows["gpu-b"] == (35.0, 157.0, NODE_B - ALLOC_B)


def test_reconciliation_to_the_cent(con):
    billed, alloc, idle, shared, book, charged, diff = one(
        con, "select billed_cost, allocated_cost, idle_cost, shared_cost, price_book_cost, chargeback_total, "
             "difference from reconciliation")
    assert money(billed) == money(BILLED)
    assert (money(alloc), money(idle), money(shared)) == (money(ALLOC_A), money(NODE_A - ALLOC_A), money(SHARED))
    assert money(book) == money(NODE_B)
    assert money(charged) == money(BILLED + NODE_B)  # 1191.648 -> 1191.65
    assert abs(diff) < CENT


def chargeback(con) -> dict[str, tuple[D, D, D, D]]:
    return {r[0]: r[1:] for r in con.execute(
        "select team, allocated_cost, idle_cost, shared_cost, total_cost from chargeback").fetchall()}


def test_chargeback_proportional(con):
    cb = chargeback(con)
    assert set(cb) == set(TEAM_ALLOC)
    for team, alloc in TEAM_ALLOC.items():
        share = alloc / ALLOCATED
        assert money(cb[team][0]) == money(alloc)
        assert abs(cb[team][1] - IDLE * share) < CENT, team
        assert abs(cb[team][2] - SHARED * share) < CENT, team
    # shares add up exactly, not just to the cent
    assert sum(r[1] for r in cb.values()) == IDLE
    assert sum(r[2] for r in cb.values()) == SHARED
    assert sum(r[3] for r in cb.values()) == BILLED + NODE_B


@pytest.mark.parametrize("policy", ["even", "none"])
def test_chargeback_even_and_none(project, policy):
    con = duckdb.connect()
    load_scenario(con)
    failures = build(project, con, idle_policy=policy, shared_policy=policy)
    assert {k: v for k, v in failures.items() if v} == {}
    cb = chargeback(con)
    if policy == "even":
        # four teams with allocation: each pays a quarter of idle (185.777) and of shared (15.00)
        assert set(cb) == set(TEAM_ALLOC)
        for team in TEAM_ALLOC:
            assert money(cb[team][1]) == money(IDLE / 4)
            assert money(cb[team][2]) == money(SHARED / 4)
    else:
        assert cb["(unallocated)"][1:3] == (IDLE, SHARED)
        for team, alloc in TEAM_ALLOC.items():
            assert cb[team][1:] == (0, 0, alloc)
    assert sum(r[3] for r in cb.values()) == BILLED + NODE_B
    assert one(con, "select abs(difference) < 0.005 from reconciliation")[0]


def test_unknown_policy_is_an_error(project):
    con = duckdb.connect()
    load_scenario(con)
    with pytest.raises(duckdb.Error, match="unknown idle_policy"):
        build(project, con, idle_policy="weighted-by-vibes")


def test_multi_currency_never_mixed(project):
    """A third node billed in EUR: EUR idle/shared go only to EUR allocations; totals per currency."""
    con = duckdb.connect()
    load_scenario(con)
    end = D0 + timedelta(days=1)
    insert_billing(con, [(480.00, "EUR", D0, end, "gpu-c", "Compute", 1), (24.00, "EUR", D0, end, None, "Support", 2)],
                   source="billing-eu.csv")
    insert_samples(con, nodes={"gpu-c": "NVIDIA L4"},
                   pods=[("team-planning", "r8-a1", "R8", 1, "l4-inference", "gpu-c", [0], 0, 6, "Succeeded", None, 50)],
                   engine_nodes=set())
    con.execute("insert into raw_requests (request_id, team, cost_center, lane, site, workload, gpu_count, state) "
                "values ('R8', 'planning', 'CC-1020', 'research_best_effort', 'muc', 'training_run', 1, 'finished')")
    con.execute("insert into raw_pod_requests (namespace, pod, request_id, attempt, flavor_name, hostname, gpu_uuids, "
                "started_at, ended_at, exit_status) values ('team-planning', 'r8-a1', 'R8', 1, 'l4-inference', 'gpu-c', "
                "['GPU-gpu-c-0'], $s, $e, 'Succeeded')", {"s": D0, "e": D0 + timedelta(hours=6)})
    failures = build(project, con)
    assert {k: v for k, v in failures.items() if v} == {}
    eur_price = D("480.00") / (8 * 24)  # 2.50 EUR per GPU-hour
    cb = {(r[0], r[1]): r[2:] for r in con.execute(
        "select team, currency, allocated_cost, idle_cost, shared_cost, total_cost from chargeback").fetchall()}
    # planning is the only EUR tenant: it carries all EUR idle and shared cost, and no USD
    assert cb[("planning", "EUR")] == (6 * eur_price, D("480.00") - 6 * eur_price, D("24.00"), D("504.00"))
    assert not any(cur == "EUR" for (team, cur) in cb if team != "planning")
    totals = dict(con.execute("select currency, chargeback_total from reconciliation").fetchall())
    assert totals == {"EUR": D("504.00"), "USD": BILLED + NODE_B}
    assert con.execute("select count(distinct currency) from platform_cost_per_tenant").fetchall()[0][0] == 2


def test_node_billed_in_two_currencies_fails_tests(project):
    con = duckdb.connect()
    load_scenario(con)
    end = D0 + timedelta(days=1)
    insert_billing(con, [(5.00, "EUR", D0, end, "gpu-a", "Amazon EBS", 9)], source="billing-eu.csv")
    failures = build(project, con)
    assert failures["int_node_hour_prices.unique_day__hostname"] == 1


def test_billing_rows_default_currency_is_usd():
    assert {r[1] for r in billing_rows()} == {"USD"}


def test_released_model_cost_follows_recorded_lineage_not_shared_ids(tmp_path):
    """With lineage recorded, R5 costs its tree (R3 -> R1, R4), not every request sharing C1 / P1."""
    from gpu_platform.finops.sqlmodels import load_ledger_snapshot
    from tests.sqlmodels.finops_scenario import REQUESTS, pod_dicts

    con = duckdb.connect(str(tmp_path / "w.duckdb"))
    load_scenario(con)
    # R8 reuses candidate C1 but is not in R5's lineage; R2's labels fed R1 (a label batch upstream)
    extra = dict(REQUESTS[0], request_id="R8", candidate_id="C1")
    load_ledger_snapshot(con, [*REQUESTS, extra], [*pod_dicts(), dict(pod_dicts()[1], pod="r8-a1", request_id="R8")],
                         [("R5", "R3"), ("R5", "R4"), ("R3", "R1"), ("R1", "R2"), ("R4", "R3")])
    project = Project.load(default_project_path())
    project.build(con, day=DAY)
    rm = con.execute("select cost_per_released_model, lineage_requests, lineage_source "
                     "from unit_cost_released_model").fetchall()
    assert rm == [(D("129.600000") + D("194.400000") + D("3.688000") + D("44.256000"), 4, "lineage")]  # R5 itself has no pods


def test_unpriced_gpu_time_is_in_no_unit_cost_and_listed_with_its_reason(project):
    """R9, a training run on a laptop no inventory, bill or DCGM sample knows (and R1 partly there):
    no price, so no unit-cost row without a currency; unpriced_requests and reconciliation_exceptions
    name it, and the not-null currency tests of the per-pod and per-day models still fail loudly."""
    from gpu_platform.finops.sqlmodels import load_ledger_snapshot
    from tests.sqlmodels.finops_scenario import REQUESTS, pod_dicts

    con = duckdb.connect()
    load_scenario(con)
    r9 = dict(REQUESTS[0], request_id="R9", candidate_id="C9")
    laptop = [dict(pod_dicts()[0], pod="r9-a1", request_id="R9", hostname="laptop"),
              dict(pod_dicts()[1], pod="r1-a3", attempt=3, hostname="laptop")]
    load_ledger_snapshot(con, [*REQUESTS, r9], [*pod_dicts(), *laptop])
    failures = build(project, con)
    for table in ("int_request_cost", "unit_cost_training_run", "unit_cost_released_model"):
        assert con.execute(f"select count(*) from {table} where currency is null").fetchone()[0] == 0, table
    assert con.execute("select count(*) from unit_cost_training_run where request_id = 'R9'").fetchone()[0] == 0
    # R1's priced attempts are still its unit cost; its laptop attempt is listed as unpriced
    assert money(one(con, "select cost_per_training_run from unit_cost_training_run where request_id = 'R1'")[0]) == \
        money(COST["R1"])
    rows = {r[0]: r[1:] for r in con.execute(
        "select request_id, pods, unpriced_gpu_hours, priced_gpu_hours, reason from unpriced_requests").fetchall()}
    assert set(rows) == {"R1", "R9"}
    assert rows["R9"][:3] == (1, 8.0, 0.0) and rows["R1"][:3] == (1, 24.0, 32.0)
    assert rows["R9"][3] == ("node laptop is in no node inventory and sent no DCGM samples: "
                             "no price, so this time is in no unit-cost mart")
    exc = con.execute("select pod, treatment, reason from reconciliation_exceptions where kind = 'pod_without_price' "
                      "order by pod").fetchall()
    assert [(e[0], e[1]) for e in exc] == [("r1-a3", "unpriced"), ("r9-a1", "unpriced")]
    assert "see unpriced_requests" in exc[1][2]
    assert failures["int_pod_gpu_hours.not_null_currency"] == 2  # the unpriced pods themselves
    assert all(v == 0 for k, v in failures.items() if k.startswith(("unit_cost_", "unpriced_requests")))


def test_zero_and_negative_shared_cost_carry_a_reason(project):
    con = duckdb.connect()
    load_scenario(con)
    # a refund (a negative Usage row) larger than the day's shared charges (60.00): net shared cost -40.00
    insert_billing(con, [(-100.00, "USD", D0, D0 + timedelta(days=1), None, "AWS Credits", 9)], source="credit.csv")
    failures = build(project, con)
    assert {k: v for k, v in failures.items() if v} == {}
    (shared, reason), = con.execute("select shared_cost, reason from int_shared_cost").fetchall()
    assert shared == D("-40.000000") and reason.startswith("refunds (-100.000000 USD) exceed the day's shared charges")
    cb = con.execute("select team, shared_cost, shared_cost_reason from chargeback").fetchall()
    assert cb and all(s < 0 and "refunds exceed its shared charges" in r for _, s, r in cb)
    # shared_policy none: the teams pay no shared cost, and say why
    con = duckdb.connect()
    load_scenario(con)
    build(project, con, shared_policy="none")
    reasons = dict(con.execute("select team, shared_cost_reason from chargeback where shared_cost = 0").fetchall())
    assert set(reasons) == set(TEAM_ALLOC)
    assert set(reasons.values()) == {"shared_policy none: the shared cost stays on the (unallocated) row"}
    assert con.execute("select shared_cost_reason from chargeback where team = '(unallocated)'").fetchone()[0] is None


def test_a_cell_without_a_finished_evidence_pack_says_why_it_has_no_cost_per_approval(project):
    con = duckdb.connect()
    load_scenario(con)
    con.execute("update raw_requests set state = 'admitted' where request_id = 'R4'")
    build(project, con)
    approvals, per, reason = one(con, "select approvals, cost_per_approval, reason from unit_cost_odd_cell_approval")
    assert (approvals, per) == (0, None)
    assert reason == "no finished evidence pack for this cell yet (1 submitted)"
