"""Demand curves and request-rate traces (gpu_platform/serving/demand.py)."""

from __future__ import annotations

import math

import pytest

from gpu_platform.serving.demand import DemandError, DiurnalDemand, load_demand_csv, wanted_replicas


@pytest.mark.parametrize(
    ("qps", "want"),
    [(0.0, 2), (10.0, 2), (20.0, 2), (20.0001, 3), (59.9, 6), (60.0, 6), (1e6, 8)],
)
def test_wanted_replicas_is_ceil_clamped(qps, want):
    assert wanted_replicas(qps, 10.0, 2, 8) == want


def test_diurnal_curve_peak_trough_and_steps():
    d = DiurnalDemand(peak_qps=100, trough_qps=20, period_s=86_400, peak_at_s=14 * 3600, step_s=3600)
    assert d.qps(14 * 3600) == pytest.approx(100)
    assert d.qps(2 * 3600) == pytest.approx(20)
    assert d.qps(14 * 3600 + 86_400) == pytest.approx(100)
    assert d.qps(8 * 3600) == pytest.approx(60)
    steps = d.steps(0, 86_400)
    assert len(steps) == 24 and steps[0][0] == 0 and steps[1][0] == 3600
    assert max(q for _t, q in steps) == pytest.approx(100)


def test_diurnal_refuses_every_bad_field():
    with pytest.raises(DemandError) as e:
        DiurnalDemand(peak_qps=-1, trough_qps=math.nan, period_s=0, step_s=-5)
    text = "\n".join(e.value.errors)
    for field in ("peak_qps", "trough_qps", "period_s", "step_s"):
        assert field in text


def test_trace_reads_seconds_and_iso_and_holds_rates(tmp_path):
    p = tmp_path / "rate.csv"
    p.write_text("timestamp,qps,note\n0,5,a\n600,12.5,b\n2026-12-06T00:20:00+00:00,0,c\n")
    with pytest.raises(DemandError, match="line 4: .*mixes iso with the seconds"):
        load_demand_csv(p)
    p.write_text("timestamp,qps\n100,5\n700,12.5\n1300,0\n")
    d = load_demand_csv(p)
    assert d.qps(0) == 5 and d.qps(699) == 5 and d.qps(700) == 12.5 and d.qps(5000) == 0
    assert d.steps(0, 1000) == [(0, 5.0), (700, 12.5)]
    shifted = load_demand_csv(p, shift_to=10_000)
    assert shifted.points[0] == (10_000, 5.0) and shifted.points[1] == (10_600, 12.5)
    p.write_text("timestamp,qps\n2026-12-06T00:00:00Z,3\n2026-12-06T00:01:00Z,4\n")
    d = load_demand_csv(p)
    assert d.points[1][0] - d.points[0][0] == 60


def test_trace_lists_every_bad_row_with_its_line(tmp_path):
    p = tmp_path / "rate.csv"
    p.write_text("timestamp,qps\n0,5\nnoon,3\n60,-1\n0,2\n90\n120,inf\n2026-12-06T00:00:00,1\n")
    with pytest.raises(DemandError) as e:
        load_demand_csv(p)
    errors = e.value.errors
    assert any(x.startswith("line 3:") and "timestamp" in x for x in errors)
    assert any(x.startswith("line 4:") and "qps" in x for x in errors)
    assert any(x.startswith("line 5:") and "not after" in x for x in errors)
    assert any(x.startswith("line 6:") and "field" in x for x in errors)
    assert any(x.startswith("line 7:") and "qps" in x for x in errors)
    assert any(x.startswith("line 8:") and "UTC offset" in x for x in errors)


def test_trace_missing_column_and_empty(tmp_path):
    p = tmp_path / "rate.csv"
    p.write_text("time,rate\n0,1\n")
    with pytest.raises(DemandError, match="missing column"):
        load_demand_csv(p)
    p.write_text("timestamp,qps\n")
    with pytest.raises(DemandError, match="no rows"):
        load_demand_csv(p)
