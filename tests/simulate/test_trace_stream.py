"""A trace read as a stream: rows one at a time, the header checked first, progress on long
files, and one copy of each repeated text, so what a trace costs in memory is the jobs kept."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

from gpu_platform.simulate import simulate
from gpu_platform.simulate import trace as trace_mod
from gpu_platform.simulate.trace import Quarantined, TraceError, TraceJob, load_trace, stream_trace

HEADER = "job_id,submit_ts,duration_s,gpus,lane,user,gpu_type,status\n"


def _write(path: Path, n: int, bad_at: int | None = None) -> Path:
    with path.open("w") as f:
        f.write(HEADER)
        for i in range(n):
            gpus = "zero" if i == bad_at else str(1 + i % 4)
            f.write(f"j{i},{i * 10},{600 + i % 7},{gpus},research_best_effort,user{i % 3},any,Pass\n")
    return path


def test_rows_come_one_at_a_time_in_file_order(tmp_path):
    stream = stream_trace(_write(tmp_path / "t.csv", 5, bad_at=2))
    assert stream.rows == 0  # nothing read yet but the header
    it = iter(stream)
    first = next(it)
    assert isinstance(first, TraceJob) and first.job_id == "j0" and stream.rows == 1
    rest = list(it)
    assert [type(x).__name__ for x in rest] == ["TraceJob", "Quarantined", "TraceJob", "TraceJob"]
    assert rest[1] == Quarantined(4, "gpus: 'zero' is not a number") and stream.rows == 5


def test_a_bad_header_fails_before_any_row(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("id,when\n1,2\n")
    with pytest.raises(TraceError) as err:
        stream_trace(p)
    assert "missing column job_id" in str(err.value) and "missing column gpus" in str(err.value)


def test_progress_is_reported_on_long_files(tmp_path, monkeypatch):
    monkeypatch.setattr(trace_mod, "PROGRESS_ROWS", 1000)
    seen: list[int] = []
    t = load_trace(_write(tmp_path / "t.csv", 3500), progress=seen.append)
    assert seen == [1000, 2000, 3000] and t.rows == 3500 and len(t.jobs) == 3500


def test_repeated_texts_are_kept_once(tmp_path):
    jobs = load_trace(_write(tmp_path / "t.csv", 50)).jobs
    assert len({id(j.lane) for j in jobs}) == 1
    assert len({id(j.user) for j in jobs}) == 3 and len({id(j.status) for j in jobs}) == 1


def test_memory_is_the_jobs_kept(tmp_path):
    """Streaming and keeping nothing holds only the ids seen (for repeats); keeping the jobs holds
    them too, each under 400 bytes (500 before repeated texts were kept once)."""
    p = _write(tmp_path / "t.csv", 20000)
    tracemalloc.start()
    try:
        for _ in stream_trace(p):
            pass
        _cur, peak_stream = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        t = load_trace(p)
        cur, _peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(t.jobs) == 20000
    assert peak_stream < 250 * 20000  # the ids seen, under 200 bytes each
    assert peak_stream < 0.8 * cur  # less than keeping the jobs
    assert cur < 400 * 20000


def test_simulate_reports_progress(monkeypatch):
    from gpu_platform.policy import load_policy
    from gpu_platform.simulate import SCENARIOS, des

    monkeypatch.setattr(des, "PROGRESS_JOBS", 10)
    jobs = [TraceJob(f"j{i}", i * 100.0, 50.0, 1, "research_best_effort") for i in range(35)]
    calls: list[tuple[int, int]] = []
    res = simulate(SCENARIOS["policy"](load_policy(), 64), jobs, progress=lambda a, n: calls.append((a, n)))
    assert calls == [(10, 35), (20, 35), (30, 35)]
    assert all(r.state == "done" for r in res.runs)


def test_simulate_cli_says_how_far_a_long_run_is(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from gpu_platform.cli import main
    from gpu_platform.simulate import des

    monkeypatch.setattr(trace_mod, "PROGRESS_ROWS", 100)
    monkeypatch.setattr(des, "PROGRESS_JOBS", 100)
    p = _write(tmp_path / "t.csv", 250)
    r = CliRunner().invoke(main, ["simulate", "--trace", str(p), "--compare", "none", "--quiet"])
    assert r.exit_code == 0, r.output
    assert f"reading {p}: 200 rows" in r.stderr
    assert "simulating policy: 200 of 250 jobs arrived" in r.stderr
