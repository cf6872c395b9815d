"""Evidence store crash safety: injective id -> path keys, restartable sweeps, recorded releases,
and `retention sweep` killed with SIGKILL at staggered moments."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from gpu_platform.gate.checkpoints import checkpoint_dir, work_dir
from gpu_platform.lineage.evidence import EvidenceStore
from gpu_platform.safeload import path_key
from tests.conftest import ROOT

PAST = datetime(2020, 1, 1, tzinfo=UTC)
FUTURE = datetime(2100, 1, 1, tzinfo=UTC)
NOW = datetime(2026, 12, 1, tzinfo=UTC)
LOOKALIKES = ["perc:exp-1", "perc/exp-1", "perc_exp-1", "perc exp-1", "perc.exp-1", "../perc_exp-1"]


def test_distinct_ids_never_share_a_directory(tmp_path: Path):
    keys = {path_key(i) for i in LOOKALIKES}
    assert len(keys) == len(LOOKALIKES)
    assert all("/" not in k and k not in (".", "..") and not k.startswith(".") for k in keys)
    assert len({work_dir(tmp_path, i) for i in LOOKALIKES}) == len(LOOKALIKES)
    assert all(checkpoint_dir(tmp_path, i).parent.parent == tmp_path / "work" for i in LOOKALIKES)
    store = EvidenceStore(tmp_path / "ev")
    for i, rid in enumerate(LOOKALIKES):
        store.put(f"log {i}".encode(), rid, "log", PAST)
    store.set_hold("perc:exp-1", "legal", "incident 7")
    for rid in LOOKALIKES:
        assert [r.request_id for r in store.refs(rid)] == [rid]
    assert [h.request_id for h in store.holds("perc/exp-1")] == []
    report = store.sweep(NOW)
    assert len(report.deleted) == len(LOOKALIKES) - 1  # only perc:exp-1's log is held


def test_a_store_written_with_slug_directories_is_still_read_by_exact_id(tmp_path: Path):
    store = EvidenceStore(tmp_path)
    ref = store.put(b"old", "perc:exp-1", "log", FUTURE)
    new_dir = store.refs_dir / path_key("perc:exp-1")
    legacy = store.refs_dir / "perc_exp-1"
    new_dir.rename(legacy)  # how the store laid it out before keys were hashed
    assert [r.digest for r in store.refs("perc:exp-1")] == [ref.digest]
    assert store.refs("perc_exp-1") == []  # same slug, other id: not its evidence
    (store.holds_dir / "perc_exp-1").mkdir(parents=True)
    (store.holds_dir / "perc_exp-1" / "legal.json").write_text(
        json.dumps({"request_id": "perc:exp-1", "holder": "legal", "reason": "", "set_at": NOW.isoformat()}))
    assert [h.holder for h in store.holds("perc:exp-1")] == ["legal"]
    assert store.holds("perc_exp-1") == []


def test_sweep_repairs_dangling_references_and_partial_writes(tmp_path: Path):
    store = EvidenceStore(tmp_path)
    expired = store.put(b"expired", "req-1", "log", PAST)
    held = store.put(b"held", "req-2", "log", PAST, hold=True)
    # an interrupted sweep: the object is gone, its reference is not
    store.path(expired.digest).chmod(0o644)
    store.path(expired.digest).unlink()
    # interrupted writers: half-written files left beside objects, refs and holds
    for d in (store.objects, store.refs_dir / path_key("req-1"), store.holds_dir / path_key("req-3")):
        d.mkdir(parents=True, exist_ok=True)
        (d / ".tmp-abc123").write_bytes(b"partial")
    store.path(held.digest).chmod(0o644)
    store.path(held.digest).unlink()  # evidence lost outside the sweep: reported, never hidden
    dry = store.sweep(NOW, dry_run=True)
    assert len(dry.repaired) == 1 and dry.cleaned == 3
    report = store.sweep(NOW)
    assert len(report.repaired) == 1 and report.repaired[0].startswith(path_key("req-1") + "/")
    assert report.cleaned == 3
    assert [d for d, _ in report.missing] == [held.digest]
    assert store.refs("req-1") == []
    assert [r.digest for r in store.refs("req-2")] == [held.digest]
    again = store.sweep(NOW)
    assert (again.repaired, again.cleaned, again.deleted) == ([], 0, [])


def test_releasing_a_hold_records_who_and_why(tmp_path: Path):
    store = EvidenceStore(tmp_path)
    store.put(b"x", "req-1", "log", PAST)
    store.set_hold("req-1", "legal", "incident 7")
    assert store.release_hold("req-1", "legal", released_by="dana", reason="incident 7 closed")
    assert not store.release_hold("req-1", "legal")
    (rec,) = store.released_holds("req-1")
    assert (rec["holder"], rec["released_by"], rec["release_reason"], rec["reason"]) == (
        "legal", "dana", "incident 7 closed", "incident 7")
    assert store.holds("req-1") == []


def test_retention_hold_records_the_identity_and_a_required_one_is_never_skipped(tmp_path: Path):
    from click.testing import CliRunner

    from gpu_platform.cli import main

    root = tmp_path / "ev"
    EvidenceStore(root).put(b"x", "req-1", "log", PAST)
    env = {"USER": "dana", "GPU_PLATFORM_IDENTITY": ""}
    placed = CliRunner().invoke(main, ["retention", "hold", "req-1", "--evidence-root", str(root),
                                       "--holder", "legal", "--reason", "audit"], env=env)
    assert placed.exit_code == 0, placed.output
    assert "by dana (os_user)" in placed.output
    (hold_file,) = (root / "holds").rglob("legal.json")
    body = json.loads(hold_file.read_text())
    assert (body["set_by"], body["identity_source"]) == ("dana", "os_user")
    # a deployment that requires the proxy's verified login: no header on the CLI, nothing released
    refused = CliRunner().invoke(main, ["retention", "hold", "req-1", "--evidence-root", str(root),
                                        "--holder", "legal", "--release"], env={**env, "GPU_PLATFORM_IDENTITY": "oidc"})
    assert refused.exit_code == 2 and "not recorded" in refused.output
    assert [h.holder for h in EvidenceStore(root).holds("req-1")] == ["legal"]
    released = CliRunner().invoke(main, ["retention", "hold", "req-1", "--evidence-root", str(root),
                                         "--holder", "legal", "--release", "--reason", "done"], env=env)
    assert released.exit_code == 0, released.output
    (rec,) = EvidenceStore(root).released_holds("req-1")
    assert (rec["released_by"], rec["release_identity_source"], rec["release_reason"]) == ("dana", "os_user", "done")


def test_kill_9_during_sweep_never_deletes_held_evidence_and_the_next_sweep_finishes(tmp_path: Path):
    """1,500 expired and 300 held objects; `retention sweep` is SIGKILLed at up to 12 staggered moments.
    After every kill: every held object is intact; after the final sweep: no expired object, no
    dangling reference, no partial write is left."""
    root = tmp_path / "ev"
    store = EvidenceStore(root)
    expired = [store.put(f"expired {i}".encode(), f"req-e{i % 50}", "log", PAST).digest for i in range(1500)]
    held = [store.put(f"held {i}".encode(), f"req-h{i % 10}", "log", PAST, hold=(i % 2 == 0)).digest for i in range(300)]
    for i in range(10):
        store.set_hold(f"req-h{i}", "legal", "incident")
    cmd = [sys.executable, "-m", "gpu_platform.cli", "retention", "sweep", "--evidence-root", str(root)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    kills = 0
    # the CLI starts in ~0.1 s (its commands import what they need when they run), so the kills
    # start early and step through the sweep itself
    for delay in [0.12 + 0.1 * k for k in range(12)]:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            kills += 1
        proc.wait(timeout=60)
        assert all(store.verify(d) for d in held)
        if not any(store.exists(d) for d in expired):
            break
    assert kills >= 1
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:]
    assert not any(store.exists(d) for d in expired)
    assert all(store.verify(d) for d in held)
    assert {r.digest for r in store.refs()} == set(held)
    final = store.sweep(NOW + timedelta(days=1))
    assert (final.deleted, final.repaired, final.cleaned, final.missing) == ([], [], 0, [])
