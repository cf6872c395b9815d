"""`gpu-platform submit FILE...`: all files recorded in one transaction or none; re-runs add nothing."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import yaml
from click.testing import CliRunner

from gpu_platform.cli import main
from gpu_platform.policy import load_policy
from gpu_platform.requests.ledger import Ledger, content_request_id
from gpu_platform.requests.model import validate_request
from tests.conftest import EXAMPLES, ROOT


def _write(dirpath: Path, name: str, **update) -> Path:
    raw = yaml.safe_load((EXAMPLES / "research_best_effort.yaml").read_text())
    raw.update(update)
    path = dirpath / name
    path.write_text(yaml.safe_dump(raw))
    return path


def _submit(ledger_url: str, *files: Path):
    return CliRunner().invoke(main, ["submit", *map(str, files), "--ledger", ledger_url], catch_exceptions=False)


def test_conflict_in_the_middle_records_nothing_and_names_the_file(tmp_path, ledger_url):
    ledger = Ledger(ledger_url)
    ledger.submit(validate_request({**yaml.safe_load(_write(tmp_path, "x.yaml").read_text()),
                                    "request_id": "req-taken"}, load_policy()))
    a = _write(tmp_path, "a.yaml", experiment_id="exp-a")
    b = _write(tmp_path, "b.yaml", experiment_id="exp-b", request_id="req-taken")
    c = _write(tmp_path, "c.yaml", experiment_id="exp-c")
    result = _submit(ledger_url, a, b, c)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert f"conflict {b}: request_id 'req-taken' already exists with different content" in result.output
    assert "nothing was recorded" in result.output
    assert ledger.count() == (1, 1)


def test_same_id_twice_in_one_batch_with_other_content_is_a_conflict(tmp_path, sqlite_url):
    a = _write(tmp_path, "a.yaml", request_id="req-1")
    b = _write(tmp_path, "b.yaml", request_id="req-1", gpu_count=2)
    result = _submit(sqlite_url, a, b)
    assert result.exit_code == 2
    assert f"conflict {b}: request_id 'req-1' is also in {a} with different content" in result.output
    assert Ledger(sqlite_url).count() == (0, 0)


def test_rerunning_a_batch_adds_nothing(tmp_path, ledger_url):
    files = [_write(tmp_path, f"r{i}.yaml", experiment_id=f"exp-{i}") for i in range(5)]
    first = _submit(ledger_url, *files)
    assert first.exit_code == 0, first.output
    ids = first.stdout.split()
    assert len(set(ids)) == 5
    again = _submit(ledger_url, *files)
    assert again.exit_code == 0
    assert again.stdout.split() == ids
    assert "already recorded" in again.output
    assert Ledger(ledger_url).count() == (5, 5)
    req = validate_request(yaml.safe_load(files[0].read_text()), load_policy())
    assert ids[0] == content_request_id(req)


def _unverified_s3_env(tmp_path: Path) -> dict[str, str]:
    """A child process's environment: no identity source and the default policy at scale S3, where
    an unverified submitter is recorded (marked unverified) instead of refused (issue 42)."""
    import yaml

    from gpu_platform.policy import default_policy_path

    raw = yaml.safe_load(default_policy_path().read_text())
    raw["scale"] = "S3"
    policy = tmp_path / "policy-s3.yaml"
    policy.write_text(yaml.safe_dump(raw, sort_keys=False))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GPU_PLATFORM_POLICY": str(policy)}
    env.pop("GPU_PLATFORM_IDENTITY", None)
    return env


def test_kill_9_during_a_batch_leaves_all_or_nothing_and_rerun_completes(tmp_path):
    """A batch of 300 files is killed (SIGKILL) at staggered moments; every time the ledger holds
    0 or 300 requests; the re-run then leaves exactly 300 requests, each with one event."""
    n = 300
    files = [str(_write(tmp_path, f"k{i}.yaml", experiment_id=f"exp-k{i}")) for i in range(n)]
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    Ledger(url)
    cmd = [sys.executable, "-m", "gpu_platform.cli", "submit", *files, "--ledger", url]
    env = _unverified_s3_env(tmp_path)
    seen = []
    for delay in [0.4 + 0.2 * k for k in range(15)]:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        killed = proc.poll() is None
        if killed:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
        requests, events = Ledger(url).count()
        seen.append((delay, killed, requests))
        assert requests in (0, n), seen
        assert events == requests
        if requests == n:
            break
    assert sum(killed for _, killed, _ in seen) >= 3, seen
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert len(set(done.stdout.split())) == n
    assert Ledger(url).count() == (n, n)


def test_kill_9_inside_the_batch_transaction_records_nothing(tmp_path):
    """The ledger is write-locked by another writer, so the batch waits inside its transaction
    (after reading which ids exist, at its insert); it is killed there, and nothing is recorded."""
    n = 50
    files = [str(_write(tmp_path, f"t{i}.yaml", experiment_id=f"exp-t{i}")) for i in range(n)]
    db = tmp_path / "ledger.db"
    url = f"sqlite:///{db}"
    Ledger(url)
    cmd = [sys.executable, "-m", "gpu_platform.cli", "submit", *files, "--ledger", url]
    env = _unverified_s3_env(tmp_path)
    other = sqlite3.connect(db, isolation_level=None, timeout=30)
    other.execute("begin immediate")  # another writer holds the write lock
    started = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    # It validates and reaches its insert, then waits for the lock (busy timeout 30s).
    waited = 0.0
    while waited < 25 and proc.poll() is None:
        time.sleep(0.5)
        waited = time.monotonic() - started
        if _waiting_for_lock(db, proc):
            break
    assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    other.execute("rollback")
    other.close()
    assert Ledger(url).count() == (0, 0)
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert Ledger(url).count() == (n, n)


def _waiting_for_lock(db: Path, proc: subprocess.Popen) -> bool:
    """The submitter has opened the ledger and stopped using CPU: it sleeps in SQLite's busy wait."""
    try:
        fds = os.listdir(f"/proc/{proc.pid}/fd")
        opened = any(os.readlink(f"/proc/{proc.pid}/fd/{fd}") == str(db) for fd in fds)
        stat = Path(f"/proc/{proc.pid}/stat").read_text().split()
    except OSError:
        return False
    cpu = int(stat[13]) + int(stat[14])
    time.sleep(0.5)
    try:
        stat2 = Path(f"/proc/{proc.pid}/stat").read_text().split()
    except OSError:
        return False
    return opened and int(stat2[13]) + int(stat2[14]) - cpu <= 1
