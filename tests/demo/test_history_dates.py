"""The demo's history seeds on any date: admitted with the gate's node model, so every admitted
run has a placement on the fleet, for 60 consecutive "today"s and for 1..45 days of history.

The history draw depends on the day count and the calendar (weekday arrivals, chain days), not on
wall-clock time, so these runs are exactly what `make demo` does on each of those dates.
"""

from __future__ import annotations

from datetime import date, timedelta

import pytest

from gpu_platform.demo import history as demo_history
from gpu_platform.demo.costs import demo_days
from gpu_platform.policy import load_policy

DEFAULT_DAYS = 30
TODAYS = [date(2026, 11, 20) + timedelta(days=n) for n in range(60)]


@pytest.fixture(scope="module")
def policy():
    return load_policy(None)


def _check(history: demo_history.History) -> None:
    nodes = {n.name: n for n in history.nodes}
    held: dict[tuple[str, int], list[tuple[float, float]]] = {}
    assert history.jobs, "a history with no admitted job"
    for job in history.jobs:
        assert job.segments, job.request_id
        for seg in job.segments:
            # every admitted run sits on nodes of its flavor, one pod per node, all its GPUs placed
            assert sum(len(g) for _, g in seg.placement) == job.request.gpu_count, (job.request_id, seg)
            assert seg.end > seg.start
            for node, gpus in seg.placement:
                assert nodes[node].flavor == seg.flavor
                assert all(0 <= g < nodes[node].gpus for g in gpus)
                for g in gpus:
                    held.setdefault((node, g), []).append((seg.start, seg.end))
    for spans in held.values():
        spans.sort()
        for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
            assert start >= end  # no GPU held twice


@pytest.mark.parametrize("today", TODAYS, ids=[d.isoformat() for d in TODAYS])
def test_the_default_history_seeds_on_every_today(policy, today: date):
    _check(demo_history.generate(policy, demo_days(DEFAULT_DAYS, today)))


@pytest.mark.parametrize("days", range(1, 46))
def test_every_history_length_seeds(policy, days: int):
    _check(demo_history.generate(policy, demo_days(days, date(2026, 12, 6))))


def test_a_run_the_engine_did_not_place_is_a_bug_not_a_busy_day(policy):
    """The placement step trusts the engine's nodes; a segment without them is refused loudly."""
    history = demo_history.generate(policy, demo_days(2, date(2026, 12, 6)))
    job = history.jobs[0]
    seg = demo_history.Segment(1, job.segments[0].start, job.segments[0].end, job.segments[0].flavor, "finished")
    with pytest.raises(AssertionError, match="without a placement"):
        demo_history._place(history.nodes, [(job.request_id, seg, job.request.gpu_count)])
