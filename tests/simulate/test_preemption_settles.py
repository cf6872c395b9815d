"""A preempted job is requeued only once its preemptor's instant settles.

Regression: requeued at once, a release-eval victim sorted ahead of the incident that preempted
it (it needed no borrowing), took back the GPUs the incident had freed, and the two traded them
at one instant until the simulator gave up ("admission did not settle"). The demo's month of
history with incidents at 0.6 a day (seed 7) hit it.
"""

from __future__ import annotations

import dataclasses
from datetime import date, timedelta

import pytest

import gpu_platform.demo.history as history
from gpu_platform.policy import load_policy


@pytest.mark.parametrize("incidents_per_day", [0.6, 1.5])
def test_a_month_with_frequent_incidents_settles_and_admits_every_incident(monkeypatch, incidents_per_day):
    mix = dict(history.MIX)
    mix["incident_response"] = dataclasses.replace(mix["incident_response"], per_day=incidents_per_day)
    monkeypatch.setattr(history, "MIX", mix)
    days = [date(2026, 11, 1) + timedelta(days=i) for i in range(30)]
    hist = history.generate(load_policy(None), days, seed=7)
    incidents = [j for j in hist.jobs if j.request.lane == "incident_response"]
    assert incidents, "the mix draws incidents"
    assert not [j for j in hist.never_admitted if j.request.lane == "incident_response"]
    preempted = [j for j in hist.jobs if len(j.segments) > 1]
    assert preempted, "incidents preempted someone, and the victims ran again"
