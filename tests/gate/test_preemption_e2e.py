"""End to end on one machine: an incident preempts a running, checkpointed research training
process through the admission sensor; the requeued run resumes losing at most one interval.

The training program is the real demo workload in a real subprocess. The test plays the part
of the run worker for termination: when the sensor cancels the victim's run, it sends SIGTERM
to the process group, as `LocalGpuExecutor` does for an interrupted step.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import dagster as dg

from gpu_platform.gate.checkpoints import checkpoint_dir, has_checkpoint
from gpu_platform.gate.tick import TAG_REQUEST_ID
from tests.gate.helpers import add_run, fill_h100, submit, tick

CHECKPOINT_EVERY = 10


def _start_training(home, rid, out_dir):
    ckpt = checkpoint_dir(home, rid) / "training_run"
    env_vars = {**os.environ, "GPU_PLATFORM_CHECKPOINT_DIR": str(ckpt), "GPU_PLATFORM_REQUEST_ID": rid}
    env_vars.pop("DAGSTER_PIPES_CONTEXT", None)
    return subprocess.Popen(
        [sys.executable, "-m", "gpu_platform.workloads.train", "--steps", "100000", "--checkpoint-every", str(CHECKPOINT_EVERY),
         "--step-seconds", "0.01", "--out-dir", str(out_dir)],
        env=env_vars,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _wait(predicate, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_incident_preempts_running_research_which_resumes_from_checkpoint(env, policy, tmp_path):
    instance, ledger, resources, home = env
    research, others = fill_h100(ledger, policy)
    launched = [r.tags[TAG_REQUEST_ID] for r in tick(instance, resources).run_requests]
    # both research runs are admitted in one tick (one second): Kueue's candidate order ties on
    # priority and reservation time, and the smaller UID (here the request id) is the victim
    victim_candidate = min(research)
    assert victim_candidate in launched
    run_ids = {rid: add_run(instance, rid, 1, lane=ledger.get(rid).lane) for rid in launched}
    for rid in launched:
        if rid != victim_candidate:
            (checkpoint_dir(home, rid) / "training_run").mkdir(parents=True)
            (checkpoint_dir(home, rid) / "training_run" / "ckpt-00000001.npz").write_bytes(b"x")

    proc = _start_training(home, victim_candidate, tmp_path / "attempt1")
    try:
        assert _wait(lambda: has_checkpoint(checkpoint_dir(home, victim_candidate))), "no checkpoint written"
        incident = submit(ledger, policy, "incident_response", gpu_count=8)
        tick(instance, resources)
        victim = next(rid for rid in launched if ledger.state(rid).state == "requeued")
        assert victim == victim_candidate
        run = instance.get_run_by_id(run_ids[victim])
        assert run.status == dg.DagsterRunStatus.CANCELING
        os.killpg(proc.pid, signal.SIGTERM)  # what the run worker's executor does for a canceled step
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    first = json.loads(out.strip().splitlines()[-1])
    assert first["preempted"] is True, err
    stopped_at = first["steps_done"]
    instance.report_run_canceled(run)

    admitted = [r.tags[TAG_REQUEST_ID] for r in tick(instance, resources).run_requests]
    assert admitted == [incident]
    add_run(instance, incident, 1, dg.DagsterRunStatus.SUCCESS, lane="incident_response")
    relaunch = tick(instance, resources).run_requests
    assert [r.run_key for r in relaunch] == [f"{victim}#2"], [r.run_key for r in relaunch]
    assert ledger.state(victim).attempts == 2

    proc2 = _start_training(home, victim, tmp_path / "attempt2")
    try:
        assert _wait(lambda: (tmp_path / "attempt2").exists() and any((tmp_path / "attempt2").iterdir()))
        time.sleep(0.5)
        os.killpg(proc2.pid, signal.SIGTERM)
        out2, _ = proc2.communicate(timeout=60)
    finally:
        if proc2.poll() is None:
            os.killpg(proc2.pid, signal.SIGKILL)
    second = json.loads(out2.strip().splitlines()[-1])
    assert second["resumed_from_step"] >= stopped_at - CHECKPOINT_EVERY
    assert second["resumed_from_step"] == stopped_at  # SIGTERM checkpoints the current step: nothing lost
