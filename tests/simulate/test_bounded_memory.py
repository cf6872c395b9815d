"""The simulator in bounded memory: a run that keeps no finished job (`keep_runs=False`, a trace
read as a sorted stream) reports exactly what a run that keeps every job reports, holds only its
queued and running jobs however many have finished, and caps what it lists per job."""

from __future__ import annotations

import gc
from pathlib import Path

import numpy as np
import pytest

from gpu_platform.cli.simulate import LANE_MAPS
from gpu_platform.policy import load_policy
from gpu_platform.simulate import SCENARIOS, lane_report, load_lane_map, load_trace, simulate
from gpu_platform.simulate import des as des_mod
from gpu_platform.simulate.des_types import JobRun
from gpu_platform.simulate.outcome import LISTED, Usage
from gpu_platform.simulate.trace import IdSet, SortedTrace, TraceJob, stream_trace

SLICE = Path(__file__).resolve().parents[1] / "fixtures" / "simulate" / "elasticflow-cluster04-head2000.csv"
LANES = load_lane_map(LANE_MAPS / "elasticflow.yaml")


@pytest.mark.parametrize("name", ["policy", "fifo-backfill", "fifo-flavors", "strict"])
def test_a_streamed_run_reports_what_a_kept_run_reports(name):
    """The slice as a list (every JobRun kept) and as a sorted stream spilled in runs of 300 jobs
    (nothing kept): the same report, figure for figure."""
    pol = load_policy()
    kept = simulate(SCENARIOS[name](pol, 768), load_trace(SLICE, lane_map=LANES).jobs)
    assert len(kept.runs) == 2000
    with SortedTrace(SLICE, lane_map=LANES, spill_jobs=300) as trace:
        assert len(trace._runs) == 7  # spilled and merged
        streamed = simulate(SCENARIOS[name](pol, 768), trace, keep_runs=False)
    assert streamed.runs == []
    assert lane_report(streamed) == lane_report(kept)
    assert streamed.peak_live < 2000


def test_a_sorted_trace_is_in_submission_order_with_ties_in_file_order(tmp_path):
    p = tmp_path / "t.csv"
    rows = [(f"j{i}", (i * 7919) % 50) for i in range(400)]  # shuffled times, many ties
    p.write_text("job_id,submit_ts,duration_s,gpus,lane\n" + "".join(f"{j},{t},10,1,research_best_effort\n" for j, t in rows))
    with SortedTrace(p, spill_jobs=37) as trace:
        got = [(j.job_id, j.submit_ts) for j in trace]
        assert [(j.job_id, j.submit_ts) for j in trace] == got  # read again: the same
    want = [(j, float(t)) for j, t in sorted(rows, key=lambda r: r[1])]  # stable: file order for ties
    assert got == want
    assert trace.summary()["accepted"] == 400


def test_a_stream_out_of_submission_order_is_refused():
    pol = load_policy()
    jobs = iter([TraceJob("a", 10.0, 5.0, 1, "research_best_effort"), TraceJob("b", 5.0, 5.0, 1, "research_best_effort")])
    with pytest.raises(ValueError, match="'b' .*submission order"):
        simulate(SCENARIOS["policy"](pol, 64), jobs, keep_runs=False)
    jobs = iter([TraceJob("a", 10.0, 5.0, 1, "research_best_effort"), TraceJob("b", 5.0, 5.0, 1, "research_best_effort")])
    with pytest.raises(ValueError, match="'b' .*submission order"):
        simulate(SCENARIOS["fifo"](pol, 64), jobs, keep_runs=False)


def _jobs(n: int, every: float = 10.0, lasts: float = 25.0):
    """n one-GPU jobs, one every `every` seconds, each `lasts` seconds: at most ceil(lasts/every)
    run at once on a large pool, however many there are. A generator: the caller holds none."""
    for i in range(n):
        yield TraceJob(f"j{i}", i * every, lasts, 1, "research_best_effort")


def _live_jobruns() -> int:
    return sum(1 for o in gc.get_objects() if type(o) is JobRun)


@pytest.mark.parametrize("name", ["policy", "fifo-backfill", "fifo-flavors"])
def test_memory_does_not_grow_with_finished_jobs(name, monkeypatch):
    """The jobs held at once (the loop's own count, and the JobRun objects alive, counted by the
    garbage collector while it runs) stay at what runs and waits, not at the jobs finished."""
    pol = load_policy()
    monkeypatch.setattr(des_mod, "PROGRESS_JOBS", 500)
    alive: list[int] = []
    peaks = {}
    for n in (300, 3000):
        res = simulate(SCENARIOS[name](pol, 64), _jobs(n), keep_runs=False, progress=lambda a, t: alive.append(_live_jobruns()))
        rep = lane_report(res)
        assert rep["total"]["jobs"] == n and rep["total"]["finished"] == n
        assert res.runs == []
        peaks[n] = res.peak_live
    assert peaks[300] == peaks[3000] <= 4  # 3 running + the next job read
    assert len(alive) == 6 and max(alive) <= 6  # every 500 arrivals of 3,000, the baselines' loop too
    assert _live_jobruns() == 0


def test_a_queue_is_held_but_finished_jobs_are_not():
    """40 jobs that each take the whole pool arrive at once: the peak is the queue, once."""
    pol = load_policy()
    scn = SCENARIOS["fifo"](pol, 64)
    burst = [TraceJob(f"b{i}", 0.0, 100.0, scn.capacity, "research_best_effort") for i in range(40)]
    tail = [TraceJob(f"t{i}", 10_000.0 + 10 * i, 5.0, 1, "research_best_effort") for i in range(2000)]
    res = simulate(scn, iter(burst + tail), keep_runs=False)
    assert res.peak_live == 40
    assert lane_report(res)["total"]["finished"] == 2040


def test_jobs_that_never_fit_are_listed_up_to_a_cap_with_the_count_left_out():
    pol = load_policy()
    big = [TraceJob(f"big{i}", float(i), 10.0, 10_000, "research_best_effort") for i in range(LISTED + 12)]
    for name in ("policy", "fifo"):
        rep = lane_report(simulate(SCENARIOS[name](pol, 64), iter(big), keep_runs=False))
        nf = rep["total"]["never_fits"]
        assert nf["jobs"] == LISTED + 12 and nf["left_out"] == 12
        assert [d["job_id"] for d in nf["listed"]] == [f"big{i}" for i in range(LISTED)]  # the first to arrive
        assert nf["gpus_needed_max"] == 10_000


def test_waits_are_exact_percentiles_of_every_admitted_job():
    pol = load_policy()
    scn = SCENARIOS["fifo"](pol, 64)  # each job takes the whole pool: they run one after another
    res = simulate(scn, iter([TraceJob(f"j{i}", 0.0, 10.0, scn.capacity, "research_best_effort") for i in range(101)]),
                   keep_runs=False)
    w = lane_report(res)["total"]["wait_s"]
    waits = np.arange(101) * 10.0
    assert w == {"p50": float(np.percentile(waits, 50)), "p95": float(np.percentile(waits, 95)), "max": 1000.0, "mean": 500.0}


def test_usage_buckets_stay_bounded_and_exact_at_their_ends():
    u = Usage(width=1.0)
    rng = np.random.default_rng(7)
    events = []
    held = 0.0
    for t in np.sort(rng.uniform(0, 1e6, 50_000)):
        d = 1.0 if held < 5 or rng.random() < 0.5 else -1.0
        held += d
        events.append((float(t), "a" if d > 0 else "b", d))
    for e in events:
        u.append(e)
    out = u.events()
    assert len({(t, lane) for t, lane, _d in out}) == len(out) <= 2 * Usage.BUCKETS
    for t_end in (out[len(out) // 3][0], out[-1][0]):  # held at a bucket's end = the exact sum so far
        exact = sum(d for t, _lane, d in events if t < t_end)
        assert abs(sum(d for t, _lane, d in out if t <= t_end) - exact) < 1e-9


def test_the_id_set_finds_repeats_in_a_few_bytes_an_id(tmp_path):
    s = IdSet()
    for i in range(50_000):
        assert f"job-{i}" not in s
        s.add(f"job-{i}")
    assert len(s) == 50_000 and "job-49999" in s and "job-50000" not in s
    assert len(s.table) * 8 <= 23 * 50_000  # 11 to 23 bytes an id, not an id string each
    p = tmp_path / "t.csv"
    p.write_text("job_id,submit_ts,duration_s,gpus,lane\na,1,5,1,x\nb,2,5,1,x\na,3,5,1,x\n")
    got = list(stream_trace(p))
    assert got[2].line == 4 and "repeats an earlier row" in got[2].reason


def test_quarantined_rows_are_listed_up_to_a_cap_with_the_count_left_out(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("job_id,submit_ts,duration_s,gpus,lane\n" + "".join(f"j{i},{i},10,{'x' if i % 2 else 1},research_best_effort\n" for i in range(200)))
    with SortedTrace(p) as trace:
        doc = trace.summary()
    assert doc["quarantined"] == 100 and len(doc["quarantined_rows"]) == 50 and doc["quarantined_rows_left_out"] == 50
    assert doc["quarantined_rows"][0] == {"line": 3, "reason": "gpus: 'x' is not a number"}
    assert load_trace(p).summary() == doc
