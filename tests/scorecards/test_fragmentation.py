"""The fragmentation signal on a seeded day (2026-11-28, UTC): GPU-hours free but on no whole nodes
while multi-node requests waited, from the reasons the node-aware gate itself gives.

Policy tests/fixtures/policies/four-h100-nodes.yaml: flavor h100, 4 nodes of 8 GPUs, one lane. The
gate's planning (`plan_tick`, node model on) decides every step; the test records its decisions at
the hours below, as the sensor would at those ticks:

02:00  small-0, small-1, small-2 (5 GPUs each) admitted: best fit puts each on its own node
       (3 free on three nodes, 8 on the fourth: 17 free). gang-a (2 x 8) waits:
       "17 GPUs free in h100 but only 1 node(s) have 8 free (needs 2 nodes of 8)"
03:00  gang-b (2 x 8) waits with the same 17
04:00  small-0 ends: two whole nodes free, gang-a admitted; gang-b now waits for quota (6 free of the
       16 it needs): not fragmentation
06:00  small-1 ends: gang-b still waits for quota (11 free; the snapshot's last event)

Free but unplaceable, each GPU counted once while both wait: 02-03 17 (gang-a) + 03-04 17 (both saw
the same 17) = 34 GPU-hours; fires above 8. Counted per request instead it would be 51.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import pytest

from gpu_platform.finops.snapshot import ledger_snapshot, scorecard_snapshot
from gpu_platform.finops.sqlmodels import (
    Project,
    default_project_path,
    ensure_raw_tables,
    load_ledger_snapshot,
)
from gpu_platform.finops.sqlmodels.raw import load_scorecard_snapshot
from gpu_platform.gate.tick import plan_tick
from gpu_platform.observe.scorecards import fired, model_vars
from gpu_platform.policy import load_policy
from gpu_platform.requests.ledger import ACTIVE_STATES, PENDING_STATES, Ledger
from gpu_platform.requests.model import validate_request

POLICY = Path(__file__).parent.parent / "fixtures" / "policies" / "four-h100-nodes.yaml"
DAY = "2026-11-28"
D0 = datetime(2026, 11, 28, tzinfo=UTC)


def at(hours: float) -> datetime:
    return D0 + timedelta(hours=hours)


def _request(policy, name: str, gpus: int):
    return validate_request({
        "request_id": name, "name": name, "owner": "ana@example.com", "team": "perception", "cost_center": "CC-1010",
        "lane": "train", "gpu_type": "h100", "gpu_count": gpus, "max_cost": 1000, "expected_duration": "4h",
        "timeout": "8h", "output_artifact_ids": [f"ckpt-{name}"], "preemption_policy": "checkpoint_requeue",
    }, policy)


def _tick(policy, ledger: Ledger, when: datetime) -> dict[str, str]:
    """One gate tick at `when`, recorded as `record_plan` records it (a waiting row only when the
    reason changed); returns the waits' reasons."""
    states = ledger.states((*PENDING_STATES, *ACTIVE_STATES))
    plan = plan_tick(policy, states, when, node_model=True)
    assert not plan.preemptions and not plan.rejections
    by_id = {s.request_id: s for s in states}
    for launch in plan.launches:
        ledger.record(launch.request_id, "admitted", f"QuotaReserved on {launch.flavor}", flavor=launch.flavor,
                      details={"attempt": launch.attempt}, at=when)
    for w in plan.waits:
        if by_id[w.name].reason != w.message:
            ledger.record(w.name, "waiting", w.message, details={"reason_code": w.reason_code}, at=when)
    return {w.name: w.message for w in plan.waits}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fragmentation")
    policy = load_policy(POLICY)
    ledger = Ledger(f"sqlite:///{tmp / 'ledger.db'}")
    for i in range(3):
        ledger.submit(_request(policy, f"small-{i}", 5), at=at(2))
    assert _tick(policy, ledger, at(2)) == {}
    gang_a = _request(policy, "gang-a", 16)
    assert (gang_a.nodes, gang_a.gpus_per_node) == (2, 8)
    ledger.submit(gang_a, at=at(2))
    reasons = {"02": _tick(policy, ledger, at(2))}
    ledger.submit(_request(policy, "gang-b", 16), at=at(3))
    reasons["03"] = _tick(policy, ledger, at(3))
    ledger.record("small-0", "finished", "run succeeded", at=at(4))
    reasons["04"] = _tick(policy, ledger, at(4))
    ledger.record("small-1", "finished", "run succeeded", at=at(6))
    reasons["06"] = _tick(policy, ledger, at(6))
    con = duckdb.connect(str(tmp / "warehouse.duckdb"))
    ensure_raw_tables(con)
    load_ledger_snapshot(con, *ledger_snapshot(ledger, policy))
    load_scorecard_snapshot(con, *scorecard_snapshot(ledger))
    project = Project.load(default_project_path())
    variables = model_vars(policy)
    project.build(con, day=DAY, select=["+capacity_signals"], variables=variables)
    tests = project.run_tests(con, day=DAY, select=["int_fragmented_waits", "capacity_signals"], variables=variables)
    assert {t.model for t in tests} == {"int_fragmented_waits", "capacity_signals"}
    failing = {f"{t.model}.{t.test_name}": t.failures for t in tests if t.failures}
    yield con, reasons, failing
    con.close()


def test_the_gate_names_the_fragmented_free_gpus(built):
    _, reasons, _ = built
    assert "17 GPUs free in h100 but only 1 node(s) have 8 free (needs 2 nodes of 8)" in reasons["02"]["gang-a"]
    assert "17 GPUs free in h100 but only 1 node(s) have 8 free" in reasons["03"]["gang-b"]
    assert "gang-a" not in reasons["04"]  # admitted on the two whole nodes
    assert "cohort pool has 0 free" in reasons["04"]["gang-b"] and "GPUs free in" not in reasons["04"]["gang-b"]
    assert "GPUs free in" not in reasons["06"]["gang-b"]


def test_every_data_test_of_the_models_passes(built):
    assert built[2] == {}


def test_stretches_run_from_each_waiting_event_to_the_next_state_event(built):
    con = built[0]
    rows = con.execute("""select request_id, free_gpus, gpus_per_node, nodes_needed, hour(waiting_from), hour(waiting_to),
                                 still_waiting from int_fragmented_waits order by request_id, waiting_from""").fetchall()
    assert rows == [
        ("gang-a", 17.0, 8.0, 2, 2, 3, False),  # its reason changes at 03:00 (position 1 of 2 now)
        ("gang-a", 17.0, 8.0, 2, 3, 4, False),  # until its admission
        ("gang-b", 17.0, 8.0, 2, 3, 4, False),  # until its wait for quota
    ]
    ((position,),) = con.execute("select reason from stg_request_events where request_id = 'gang-a' "
                                 "and event = 'waiting' and hour(event_at) = 3").fetchall()
    assert "position 1 of 2" in position


def test_the_signal_counts_free_gpus_once_and_says_what_to_do(built):
    con = built[0]
    ((value, threshold, is_fired, action),) = con.execute(
        "select value, threshold, fired, action from capacity_signals where signal = 'gang_blocked_by_fragmentation' "
        "and subject = 'h100' and day = ?", [DAY]).fetchall()
    assert value == pytest.approx(17 + 17)  # 34, not 51: the 03-04 hour's 17 GPUs once
    assert (threshold, is_fired) == (8.0, True)
    assert "2 multi-node request(s)" in action and "Pack small jobs" in action and "reserve whole nodes" in action
    assert [s.subject for s in fired(con, DAY, DAY) if s.signal == "gang_blocked_by_fragmentation"] == ["h100"]


def test_below_the_threshold_it_is_computed_but_does_not_fire(built, tmp_path):
    con = built[0]
    policy = load_policy(POLICY)
    policy = policy.model_copy(update={"capacity_signals": policy.capacity_signals.model_copy(
        update={"fragmented_gpu_hours_max": 50.0})})
    Project.load(default_project_path()).build(con, day=DAY, select=["capacity_signals"], variables=model_vars(policy))
    ((value, is_fired),) = con.execute("select value, fired from capacity_signals where "
                                       "signal = 'gang_blocked_by_fragmentation'").fetchall()
    assert value == pytest.approx(34) and not is_fired
