"""`/metrics` kept up to date by the ledger's changes alone (`DemandCache`) must say exactly what
a full read says: after every step of random sequences of submissions, waits, admissions,
preemptions, requeues, finishes, failures, rejections, observations, approvals and lane/team
edits, at a clock that moves on (waits age, admissions leave the window), on SQLite and
PostgreSQL, and when transactions commit out of id order."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from prometheus_client import CollectorRegistry, generate_latest

import gpu_platform.requests.ledger as ledger_mod
from gpu_platform.observe.metrics import registry_for
from gpu_platform.observe.metrics.collector import QueueCollector
from gpu_platform.observe.metrics.services import ServiceCollector
from gpu_platform.observe.queueview.demand import DemandCache, load_demand
from gpu_platform.requests.ledger import Ledger, events_table, state_table
from gpu_platform.requests.model import validate_request
from tests.gate.helpers import raw_request

T0 = datetime(2026, 11, 30, 22, 0, tzinfo=UTC)  # the budget month turns during the walk
LANES = ("research_best_effort", "candidate_train", "release_eval", "incident_response", "map_semantic_batch", "labeler_batch")
FLAVORS = ("h100-ondemand", "a100-spot", "l4-inference", "h100-mig", "l4-shared", None)
WAIT_REASONS = ("Inadmissible: full", "WaitingForUpstream: out-1 missing", "Pending", "")
WINDOW = timedelta(minutes=20)


def _figures(d) -> dict:
    """Everything a Demand says, in an order-free form."""
    return {
        "lanes": {
            name: (ld.pending, ld.admitted, ld.gpus_pending, ld.gpus_in_use, ld.gpus_waiting_for_upstream,
                   ld.oldest_submitted, ld.preemptions_total, ld.rejections_total, float(ld.budget_reserved))
            for name, ld in d.lanes.items()
        },
        "ends": sorted(d.admitted_ends),
        "waits": {lane: sorted(w) for lane, w in d.waits_s.items() if w},
    }


class _Walk:
    """A ledger driven at random, with a clock that moves on."""

    def __init__(self, url: str, policy, seed: int):
        self.led, self.policy, self.rnd = Ledger(url), policy, random.Random(seed)
        self.now = T0
        self.n = 0

    def at(self) -> datetime:
        self.now += timedelta(seconds=self.rnd.choice((1, 5, 30, 90, 400)))
        return self.now

    def states(self) -> dict[str, str]:
        with self.led.engine.connect() as conn:
            return dict(conn.execute(sa.select(state_table.c.request_id, state_table.c.state)).all())

    def submit(self, k: int) -> None:
        reqs = []
        for _ in range(k):
            lane = self.rnd.choice(LANES)
            update = {"output_artifact_ids": [f"out-{self.n}"], "request_id": f"req-walk-{self.n:05d}"}
            if lane in ("research_best_effort", "candidate_train", "release_eval", "incident_response"):
                update["gpu_count"] = self.rnd.randint(1, 4)
            if lane in ("research_best_effort", "candidate_train") and self.rnd.random() < 0.5:
                update["gpu_type"] = "any"
            if self.rnd.random() < 0.4:
                update["expected_duration"] = f"PT{self.rnd.randint(1, 90)}M"
            self.n += 1
            reqs.append(validate_request(raw_request(lane, **update), self.policy))
        self.led.submit_batch(reqs, at=self.at())

    def step(self) -> None:
        rnd, states = self.rnd, self.states()
        if not states or rnd.random() < 0.25:
            self.submit(rnd.randint(1, 6))
            return
        by_state: dict[str, list[str]] = {}
        for rid, st in states.items():
            by_state.setdefault(st, []).append(rid)
        pending = by_state.get("submitted", []) + by_state.get("waiting", []) + by_state.get("requeued", [])
        admitted = by_state.get("admitted", [])
        rows = []
        for _ in range(rnd.randint(1, 8)):
            pick = rnd.random()
            if pending and pick < 0.3:
                rows.append((rnd.choice(pending), "waiting", rnd.choice(WAIT_REASONS), None, None, {"position": 1}))
            elif pending and pick < 0.55:
                f = rnd.choice(FLAVORS)
                rows.append((rnd.choice(pending), "admitted", f"QuotaReserved on {f}", f, None, {"attempt": 1}))
            elif admitted and pick < 0.65:
                rid = rnd.choice(admitted)
                rows.append((rid, "preempted", "Preempted (InCohortReclamation)", None, None, None))
                if rnd.random() < 0.7:
                    rows.append((rid, "requeued", "requeued in its original queue order", None, None, None))
            elif admitted and pick < 0.75:
                rows.append((rnd.choice(admitted), rnd.choice(("finished", "failed")), "run ended", None, "r-1", None))
            elif pending and pick < 0.82:
                rows.append((rnd.choice(pending), "rejected", "Inadmissible: too large", None, None, None))
            elif pick < 0.88:
                rows.append((rnd.choice(list(states)), "requeued", "requeued by an operator", None, None, None))
            elif pick < 0.94:
                rows.append((rnd.choice(list(states)), "cluster", "Admitted", "h100-ondemand", None, {"condition": "Admitted"}))
            else:
                rows.append((rnd.choice(list(states)), "approved", "sign-off", None, None, {"kind": "cost"}))
        if rnd.random() < 0.1:
            self.edit(rnd.choice(list(states)))
        self.led.record_many(rows, at=self.at())

    def edit(self, rid: str) -> None:
        """A request moved to another lane (sometimes one the policy does not know) and team, in
        the transaction of an event, as any edit of a request would be written."""
        lane = self.rnd.choice((*LANES, "retired_lane"))
        with self.led.engine.begin() as conn:
            conn.execute(state_table.update().where(state_table.c.request_id == rid).values(lane=lane, team="other-team"))
            ledger_mod._insert_events(conn, [{"request_id": rid, "event": "cluster", "at": self.at(), "reason": "edited",
                                              "flavor": None, "run_id": None, "details": None}])


def _check(walk: _Walk, reg, cache: DemandCache, policy) -> None:
    clock = lambda: walk.now  # noqa: E731
    fresh = registry_for(walk.led, policy, wait_window=WINDOW, clock=clock)
    assert generate_latest(reg).decode() == generate_latest(fresh).decode()
    since = datetime(walk.now.year, walk.now.month, 1, tzinfo=UTC)
    kept = cache.load(walk.led, policy, walk.now, wait_window=WINDOW, budget_since=since)
    assert _figures(kept) == _figures(load_demand(walk.led, policy, walk.now, wait_window=WINDOW, budget_since=since))


@pytest.mark.parametrize(
    ("seed", "options"),
    [(1, {}), (2, {"slack": 0}), (3, {"slack": 0, "changes_limit": 6})],
    ids=["defaults", "compacting-at-once", "bursts-read-in-full"],
)
def test_the_kept_figures_equal_a_full_read_after_every_change(ledger_url, policy, seed, options):
    walk = _Walk(ledger_url, policy, seed)
    collector = QueueCollector(walk.led, policy, wait_window=WINDOW, clock=lambda: walk.now)
    collector.demand = DemandCache(**options)
    reg = CollectorRegistry(auto_describe=False)
    reg.register(collector)
    reg.register(ServiceCollector(walk.led))  # registry_for's second collector: services (read in full)
    cache = DemandCache(**options)
    steps = 120 if ledger_url.startswith("sqlite") else 60
    for i in range(steps):
        walk.step()
        _check(walk, reg, cache, policy)
        if i % 7 == 3:
            walk.at()  # time passes with nothing written: only the clock moves the figures
            _check(walk, reg, cache, policy)
    # changes were applied, not re-read: one full read per budget period (the month turned once),
    # and with a low changes_limit, one per burst beyond it
    assert collector.demand.updates > steps // 3
    if "changes_limit" in options:
        assert 2 < collector.demand.reads < steps // 2
    else:
        assert collector.demand.reads <= 2
        assert cache.reads <= 2


def _event(rid: str, at: datetime, event_id: int | None = None) -> dict:
    out = {"request_id": rid, "event": "admitted", "at": at, "reason": "QuotaReserved on h100-ondemand",
           "flavor": "h100-ondemand", "run_id": None, "details": None}
    if event_id is not None:
        out["id"] = event_id
    return out


def _write_with_id(led: Ledger, values: list[dict]) -> None:
    """Events with the ids they carry, and their state rows, in one transaction (as a writer whose
    ids were handed out before another's commits)."""
    with led.engine.begin() as conn:
        conn.execute(events_table.insert(), values)
        conn.execute(ledger_mod._STATE_UPDATE, list(ledger_mod._fold(values).values()))


def test_an_event_committed_below_the_newest_seen_id_is_still_applied_sqlite(sqlite_url, policy):
    walk = _Walk(sqlite_url, policy, 7)
    walk.submit(6)
    rids = sorted(walk.states())
    cache = DemandCache()
    cache.load(walk.led, policy, walk.now, wait_window=WINDOW)
    top = walk.led.newest_event_id()
    # ids top+1 .. top+4 still in flight when top+5 commits; they land in any order later
    for rid, offset, admitted in ((rids[0], 5, 1), (rids[1], 3, 2), (rids[2], 1, 3), (rids[3], 4, 4), (rids[4], 2, 5)):
        _write_with_id(walk.led, [_event(rid, walk.at(), top + offset)])
        kept = cache.load(walk.led, policy, walk.now, wait_window=WINDOW)
        assert sum(ld.admitted for ld in kept.lanes.values()) == admitted
        assert _figures(kept) == _figures(load_demand(walk.led, policy, walk.now, wait_window=WINDOW))
    assert cache.reads == 1


def test_a_transaction_committing_after_a_newer_one_is_still_applied_postgres(pg_url, policy):
    walk = _Walk(pg_url, policy, 8)
    walk.submit(6)
    rids = sorted(walk.states())
    cache = DemandCache()
    cache.load(walk.led, policy, walk.now, wait_window=WINDOW)
    slow = walk.led.engine.connect()
    tx = slow.begin()
    ledger_mod._insert_events(slow, [_event(rids[0], walk.at())])  # takes the next id, not committed yet
    walk.led.record_many([(rids[1], "admitted", "QuotaReserved on h100-ondemand", "h100-ondemand", None, None)], at=walk.at())
    seen = cache.load(walk.led, policy, walk.now, wait_window=WINDOW)
    assert sum(ld.admitted for ld in seen.lanes.values()) == 1
    tx.commit()
    slow.close()
    kept = cache.load(walk.led, policy, walk.now, wait_window=WINDOW)
    assert sum(ld.admitted for ld in kept.lanes.values()) == 2
    assert _figures(kept) == _figures(load_demand(walk.led, policy, walk.now, wait_window=WINDOW))
    assert cache.reads == 1


def test_many_gaps_are_merged_and_still_filled(sqlite_url, policy):
    walk = _Walk(sqlite_url, policy, 9)
    for _ in range(8):
        walk.submit(6)
    rids = sorted(walk.states())
    cache = DemandCache()
    cache.load(walk.led, policy, walk.now, wait_window=WINDOW)
    top = walk.led.newest_event_id()
    # every second id of 2 x 40 commits first: 40 one-id gaps, merged down to 32 ranges
    _write_with_id(walk.led, [_event(rids[k], walk.at(), top + 2 * (k + 1)) for k in range(40)])
    kept = cache.load(walk.led, policy, walk.now, wait_window=WINDOW)
    assert len(cache._gaps) == 32
    assert sum(ld.admitted for ld in kept.lanes.values()) == 40
    # the ids in between land later: another request's admission each
    late = [_event(rids[40 + k % 8], walk.at(), top + 2 * k + 1) for k in range(40)]
    _write_with_id(walk.led, late)
    kept = cache.load(walk.led, policy, walk.now, wait_window=WINDOW)
    assert sum(ld.admitted for ld in kept.lanes.values()) == 48
    assert _figures(kept) == _figures(load_demand(walk.led, policy, walk.now, wait_window=WINDOW))
    assert (cache.reads, cache._gaps) == (1, [])


def test_a_gap_older_than_its_ttl_is_left_to_the_backstop_read(sqlite_url, policy):
    walk = _Walk(sqlite_url, policy, 10)
    walk.submit(4)
    rids = sorted(walk.states())
    cache = DemandCache(gap_ttl=timedelta(0))  # gaps forgotten at once: a late commit below is not seen
    cache.load(walk.led, policy, walk.now, wait_window=WINDOW)
    top = walk.led.newest_event_id()
    _write_with_id(walk.led, [_event(rids[0], walk.at(), top + 2)])
    cache.load(walk.led, policy, walk.now, wait_window=WINDOW)
    _write_with_id(walk.led, [_event(rids[1], walk.at(), top + 1)])
    missed = cache.load(walk.led, policy, walk.now, wait_window=WINDOW)
    assert sum(ld.admitted for ld in missed.lanes.values()) == 1
    backstop = DemandCache(gap_ttl=timedelta(0), refresh_every=timedelta(0))  # reads in full on every call
    backstop.load(walk.led, policy, walk.now, wait_window=WINDOW)
    kept = backstop.load(walk.led, policy, walk.now, wait_window=WINDOW)
    assert backstop.reads == 2
    assert sum(ld.admitted for ld in kept.lanes.values()) == 2
    assert _figures(kept) == _figures(load_demand(walk.led, policy, walk.now, wait_window=WINDOW))
