from __future__ import annotations

from pathlib import Path

import pytest

from gpu_platform.cli.simulate import LANE_MAPS
from gpu_platform.simulate import TraceError, load_lane_map, load_trace

FIX = Path(__file__).parents[1] / "fixtures" / "simulate"


def test_missing_column_is_named(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("job_id,submit_ts,gpus,lane\na,0,1,low\n")
    with pytest.raises(TraceError) as exc:
        load_trace(p)
    assert exc.value.errors[0] == "missing column duration_s"
    assert exc.value.errors[1].startswith("the trace's columns are job_id, submit_ts, gpus, lane: map them")


def test_bad_rows_are_quarantined_with_line_and_reason(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text(
        "job_id,submit_ts,duration_s,gpus,lane,preemption_policy\n"
        "a,0,10,1,low,\n"
        "b,x,10,1,low,\n"
        "c,0,0,1,low,\n"
        "a,5,10,1,low,\n"
        "d,0,10,1,nowhere,\n"
        "e,0,10,1,low,sometimes\n"
        "f,3,10,2,high,requeue\n"
    )
    tr = load_trace(p, lanes=frozenset({"low", "high"}))
    assert tr.rows == 7 == len(tr.jobs) + len(tr.quarantined)
    assert [j.job_id for j in tr.jobs] == ["a", "f"]
    assert tr.jobs[1].preemption_policy == "requeue"
    reasons = {q.line: q.reason for q in tr.quarantined}
    assert reasons[3] == "submit_ts: 'x' is not a number"
    assert reasons[4] == "duration_s: '0' must be > 0"
    assert reasons[5] == "job_id: 'a' repeats an earlier row"
    assert reasons[6] == "lane: 'nowhere' is not a lane of the policy"
    assert reasons[7].startswith("preemption_policy: 'sometimes'")


def test_shipped_elasticflow_map_on_a_trace_slice():
    lm = load_lane_map(LANE_MAPS / "elasticflow.yaml")
    tr = load_trace(FIX / "elasticflow-cluster04-head2000.csv", lane_map=lm)
    assert tr.rows == 2000 and not tr.quarantined
    by_gpus: dict[float, set[str]] = {}
    for j in tr.jobs:
        by_gpus.setdefault(j.gpus, set()).add(j.lane)
    assert by_gpus[1] == {"research_best_effort"}
    assert by_gpus.get(2, {"baseline_rebuild"}) | by_gpus[4] == {"baseline_rebuild"}
    assert all(by_gpus[g] == {"candidate_train"} for g in by_gpus if g >= 8)
    first = tr.jobs[0]
    assert (first.job_id, first.submit_ts, first.duration_s, first.gpus) == (
        "c9c620ea-4336-c1a9-8abe-e26bd13076b8",
        5810,
        288476,
        16,
    )


def test_lane_map_errors_name_the_field(tmp_path):
    p = tmp_path / "m.yaml"
    p.write_text("column: x\nrules:\n  - {lane: a}\n  - {values: [1]}\ncolumns: {n: gpuz}\nextra: 1\n")
    with pytest.raises(TraceError) as exc:
        load_lane_map(p)
    assert exc.value.errors == [
        "extra: unknown field",
        "rules[0]: needs `values`, `min`/`max` or `share`",
        "rules[1].lane: required (a lane name)",
        "rules: at least one rule or a default lane",
        "columns.n: 'gpuz' is not a trace column (job_id, submit_ts, duration_s, gpus, lane, user, gpu_type, status, preemption_policy, site)",
    ]


def test_lane_from_a_column_with_values(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("job_id,submit_ts,duration_s,gpus,vc\na,0,10,1,vc-a\nb,0,10,1,vc-b\nc,0,10,1,vc-z\n")
    m = tmp_path / "m.yaml"
    m.write_text("rules:\n  - {values: [vc-a], lane: high}\n  - {values: [vc-b], lane: low}\n")
    tr = load_trace(p, "vc", load_lane_map(m))
    assert [(j.job_id, j.lane) for j in tr.jobs] == [("a", "high"), ("b", "low")]
    assert tr.quarantined[0].line == 4 and "vc: 'vc-z' matches no rule" in tr.quarantined[0].reason
