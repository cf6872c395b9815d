"""The demo workload programs run standalone (no Dagster), and training survives preemption."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from gpu_platform.lineage.evidence import sha256_file
from gpu_platform.workloads import PROGRAMS

PY = sys.executable


def run(module: str, *args: str, env: dict[str, str] | None = None) -> dict:
    proc = subprocess.run(
        [PY, "-m", module, *args], capture_output=True, text=True, timeout=60, env={**os.environ, **(env or {})}
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def assert_sealed_log(result: dict) -> None:
    log = Path(result["log_path"])
    assert sha256_file(log) == result["log_digest"]
    assert not log.stat().st_mode & stat.S_IWUSR, "the log is read-only once sealed"


def test_label_program_counts_accepted_and_rejected(tmp_path: Path):
    r = run(PROGRAMS["label_batch"], "--out-dir", str(tmp_path), "--frames", "300", "--dataset-ids", "ds-1")
    assert r["accepted"] + r["rejected"] == 300
    assert 0 < r["accepted"] < 300
    lines = (tmp_path / "labels.jsonl").read_text().splitlines()
    assert len(lines) == 300 and sum(json.loads(x)["accepted"] for x in lines) == r["accepted"]
    assert_sealed_log(r)
    assert json.loads((tmp_path / "result.json").read_text())["accepted"] == r["accepted"]


def test_replay_program_writes_per_suite_results(tmp_path: Path):
    r = run(
        PROGRAMS["replay"], "--out-dir", str(tmp_path), "--suites", "s-day,s-night", "--odd-cell", "odd-urban-day",
        "--fail-suites", "s-night",
    )
    assert r["suites"]["s-day"]["status"] == "passed"
    assert r["suites"]["s-night"]["status"] == "failed"
    assert r["suites_failed"] == ["s-night"]
    # two suites x 200 scenarios x 30 s of drive log each: the unit of unit_cost_replay_hour
    assert r["replay_hours"] == pytest.approx(2 * 200 * 30 / 3600)
    for suite in ("s-day", "s-night"):
        per_suite = json.loads((tmp_path / "suites" / f"{suite}.json").read_text())
        assert per_suite["odd_cell"] == "odd-urban-day"
    assert_sealed_log(r)


def test_mapseg_program_turns_tiles_into_classes(tmp_path: Path):
    tiles = tmp_path / "tiles"
    tiles.mkdir()
    tile = np.zeros((8, 8, 3))
    tile[:4] = (0.35, 0.35, 0.35)  # road
    tile[4:] = (0.2, 0.6, 0.2)  # vegetation
    np.save(tiles / "t0.npy", tile)
    r = run(PROGRAMS["map_segmentation"], "--out-dir", str(tmp_path / "out"), "--tile-dir", str(tiles), "--suites", "qa")
    assert r["tiles"] == 1
    assert r["class_pixels"]["road"] == 32 and r["class_pixels"]["vegetation"] == 32
    assert r["suites"]["qa"]["status"] == "passed"
    with np.load(tmp_path / "out" / "classes.npz") as z:
        assert z["t0"].shape == (8, 8)
    assert_sealed_log(r)


def test_train_program_checkpoints_and_is_deterministic(tmp_path: Path):
    a = run(PROGRAMS["training_run"], "--out-dir", str(tmp_path / "a"), "--steps", "60", "--checkpoint-every", "20")
    b = run(PROGRAMS["training_run"], "--out-dir", str(tmp_path / "b"), "--steps", "60", "--checkpoint-every", "20")
    assert a["steps_done"] == 60 and a["resumed_from_step"] == 0
    assert a["output_digests"]["model"] == b["output_digests"]["model"]
    ckpts = sorted(p.name for p in (tmp_path / "a" / "checkpoints").glob("ckpt-*.npz"))
    assert ckpts == ["ckpt-00000020.npz", "ckpt-00000040.npz", "ckpt-00000060.npz"]
    again = run(PROGRAMS["training_run"], "--out-dir", str(tmp_path / "a"), "--steps", "60")
    assert again["resumed_from_step"] == 60, "a finished run resumes at its end and does no work"


def _wait_for_checkpoint(ckpt_dir: Path, at_least: int, proc: subprocess.Popen, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        steps = [int(p.stem.split("-")[1]) for p in ckpt_dir.glob("ckpt-*.npz")]
        if steps and max(steps) >= at_least:
            return
        assert proc.poll() is None, "training ended before it could be preempted"
        time.sleep(0.02)
    pytest.fail("no checkpoint appeared")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_preempted_training_resumes_losing_at_most_one_interval(tmp_path: Path, sig: int):
    steps, every = 400, 20
    out = tmp_path / "run"
    ckpt = tmp_path / "ckpt"
    env = {**os.environ, "GPU_PLATFORM_CHECKPOINT_DIR": str(ckpt)}
    args = ["--out-dir", str(out), "--steps", str(steps), "--checkpoint-every", str(every)]
    proc = subprocess.Popen(
        [PY, "-m", PROGRAMS["training_run"], *args, "--step-seconds", "0.005"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    _wait_for_checkpoint(ckpt, 2 * every, proc)
    t_signal = time.monotonic()
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=30)
    # Steps that ran before the signal (lower bound: the newest checkpoint seen; the process
    # cannot have run more steps than elapsed time allows after it).
    if sig == signal.SIGTERM:
        assert proc.returncode == 143, stderr
        preempted = json.loads((out / "result.json").read_text())
        assert preempted["preempted"] is True
        reached = preempted["steps_done"]
    else:
        assert proc.returncode == -signal.SIGKILL
        reached = None
    assert time.monotonic() - t_signal < 10

    resumed = run(PROGRAMS["training_run"], *args, env={"GPU_PLATFORM_CHECKPOINT_DIR": str(ckpt)})
    start = resumed["resumed_from_step"]
    assert start >= 2 * every
    if reached is not None:
        assert start == reached, "SIGTERM checkpoints the current step: nothing is lost"
    else:
        assert start % every == 0, "after SIGKILL the last interval checkpoint is the resume point"
    assert resumed["steps_done"] == steps

    clean = run(PROGRAMS["training_run"], "--out-dir", str(tmp_path / "clean"), "--steps", str(steps), "--checkpoint-every", str(every))
    assert resumed["output_digests"]["model"] == clean["output_digests"]["model"], "resumed training ends where an uninterrupted run does"
