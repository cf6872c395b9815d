"""Ctrl-C on `gpu-platform demo run` stops `dagster dev` and all its children within 10 s, even
when they ignore SIGTERM: a real supervisor process over a real (fake) `dagster dev` tree."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from gpu_platform.demo.supervisor import _alive

FAKE = Path(__file__).with_name("fake_dagster_dev.py")
ROOT = Path(__file__).resolve().parents[2]


def _wait_for(path: Path, timeout: float = 30.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            return [int(x) for x in path.read_text().split()]
        time.sleep(0.05)
    raise AssertionError(f"the fake dagster dev never wrote {path}")


def test_ctrl_c_stops_the_whole_tree_within_ten_seconds(tmp_path: Path):
    pids_file = tmp_path / "pids"
    code = ("import sys; from gpu_platform.demo.supervisor import supervise; "
            f"sys.exit(supervise([sys.executable, {str(FAKE)!r}, {str(pids_file)!r}], grace=3))")
    sup = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
    try:
        pids = _wait_for(pids_file)
        assert len(pids) == 3 and all(_alive(p) for p in pids)
        t0 = time.monotonic()
        sup.send_signal(signal.SIGINT)  # what Ctrl-C sends
        out, _ = sup.communicate(timeout=10)
        took = time.monotonic() - t0
        deadline = time.monotonic() + 2
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [p for p in pids if _alive(p)], out
        assert took < 10, out
        assert sup.returncode == 0, out
        assert "ignored SIGTERM" in out and "SIGKILL" in out, out  # the KILL fallback was needed here
    finally:
        for p in _wait_for(pids_file, 0.1) if pids_file.exists() else []:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if sup.poll() is None:
            sup.kill()


def test_a_tree_that_honours_sigterm_is_stopped_without_kill(tmp_path: Path):
    from gpu_platform.demo.supervisor import stop_tree

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    messages: list[str] = []
    took = stop_tree(proc, grace=5, log=messages.append)
    assert proc.poll() is not None and took < 5 and messages == []


def test_runs_left_in_flight_by_a_stopped_demo_are_canceled_and_release_their_pool_slot():
    """After a KILL, a run stays STARTED and keeps its warehouse pool slot: the next `demo run`
    cancels it first, or every later warehouse step waits on it for ever."""
    import dagster as dg
    from dagster._core.storage.dagster_run import DagsterRun

    from assets.demo_seed import recover_stopped_runs
    from gpu_platform.gate.tick import TAG_ATTEMPT, TAG_REQUEST_ID

    with dg.instance_for_test() as instance:
        instance.event_log_storage.set_concurrency_slots("duckdb_warehouse", 1)
        dead = DagsterRun(job_name="finops_daily", status=dg.DagsterRunStatus.STARTED)
        done = DagsterRun(job_name="finops_daily", status=dg.DagsterRunStatus.SUCCESS)
        instance.add_run(dead)
        instance.add_run(done)
        assert instance.event_log_storage.claim_concurrency_slot("duckdb_warehouse", dead.run_id, "chargeback").is_claimed
        # a canceled run whose slot was never given back (killed between claim and release)
        stale = DagsterRun(job_name="finops_daily", status=dg.DagsterRunStatus.CANCELED)
        instance.add_run(stale)
        instance.event_log_storage.set_concurrency_slots("duckdb_warehouse", 2)
        assert instance.event_log_storage.claim_concurrency_slot("duckdb_warehouse", stale.run_id, "stg_pods").is_claimed
        workload = DagsterRun(job_name="training_run_job", status=dg.DagsterRunStatus.STARTED,
                              tags={TAG_REQUEST_ID: "req-1", TAG_ATTEMPT: "1"})
        instance.add_run(workload)
        assert sorted(recover_stopped_runs(instance)) == sorted([dead.run_id, workload.run_id])
        assert instance.get_run_by_id(dead.run_id).status == dg.DagsterRunStatus.CANCELED
        # the workload run is gone: the gate sees an admitted request without a run and relaunches it
        assert instance.get_run_by_id(workload.run_id) is None
        assert instance.get_run_by_id(done.run_id).status == dg.DagsterRunStatus.SUCCESS
        info = instance.event_log_storage.get_concurrency_info("duckdb_warehouse")
        assert info.active_slot_count == 0


def test_before_stop_runs_while_the_command_still_runs_and_is_bounded(monkeypatch):
    """The demo cancels its backfill and runs through the API before the tree stops: the hook
    sees the command alive, and a hook that hangs delays the stop by `before_stop_s` only."""
    from gpu_platform.demo.supervisor import supervise

    seen: list[bool] = []
    procs: list[subprocess.Popen] = []
    real_popen = subprocess.Popen

    def popen(*args, **kwargs):
        procs.append(real_popen(*args, **kwargs))
        return procs[-1]

    def hook() -> None:
        seen.append(procs[0].poll() is None)

    monkeypatch.setattr(subprocess, "Popen", popen)
    try:
        assert supervise([sys.executable, "-c", "import time; time.sleep(600)"], grace=2, stop_after=0.5,
                         before_stop=hook, log=lambda _m: None) == 0
        assert seen == [True] and procs[0].poll() is not None
        t0 = time.monotonic()
        supervise([sys.executable, "-c", "import time; time.sleep(600)"], grace=2, stop_after=0.2,
                  before_stop=lambda: time.sleep(30), before_stop_s=1.0, log=lambda _m: None)
        assert time.monotonic() - t0 < 6 and procs[1].poll() is not None
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
