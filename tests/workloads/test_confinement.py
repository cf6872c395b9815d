"""Confinement (issue 24, class 1): a workload's result.json may name only regular files inside
its own output directory, and the retention sweep never follows a link out of the store.

Each case names a file outside the output directory (or a FIFO inside it) and checks that the
stage fails naming the field, the path and why, and that nothing was copied into the evidence
store; the sweep cases check that the outside target keeps its content and its mode.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpu_platform.cli import main
from gpu_platform.lineage.evidence import EvidenceStore
from gpu_platform.lineage.graph import LineageStore
from gpu_platform.policy import load_policy
from gpu_platform.requests.ledger import Ledger
from gpu_platform.requests.model import JobRequest, validate_request_file
from gpu_platform.workloads._common import RESULT_FILE
from gpu_platform.workloads.stages import (
    ProgramStage,
    StageFailed,
    prepare_program,
    record_program_failure,
    record_program_success,
)

EX = Path(__file__).resolve().parents[2] / "examples" / "requests"
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
SECRET = b"DAGSTER_PG_PASSWORD=hunter2\n"


@pytest.fixture
def stage(tmp_path: Path) -> ProgramStage:
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    req = validate_request_file(EX / "labeler_batch.yaml", load_policy()).model_copy(update={"request_id": "req-label"})
    rid = ledger.submit(JobRequest.model_validate(req.model_dump()))
    req = req.model_copy(update={"request_id": rid})
    store = EvidenceStore(tmp_path / "evidence")
    st = prepare_program(
        req, "label_batch", tmp_path / "work" / "tenant-a", "run-1", ledger, LineageStore(ledger.engine), store,
        load_policy(),
    )
    st.out_dir.mkdir(parents=True)
    return st


def _write_result(stage: ProgramStage, *, outputs: dict | None = None, log_path: str | None = None) -> None:
    log = stage.out_dir / "logs" / "label.log"
    log.parent.mkdir(exist_ok=True)
    log.write_text("labelled 10 frames\n")
    digest = "sha256:" + hashlib.sha256(log.read_bytes()).hexdigest()
    result = {"log_path": log_path or str(log), "log_digest": digest, "accepted": 9, "rejected": 1,
              "outputs": outputs or {}}
    (stage.out_dir / RESULT_FILE).write_text(json.dumps(result))


def _stored(store: EvidenceStore) -> list[bytes]:
    """Every object's bytes in the store."""
    if not store.objects.exists():
        return []
    return [p.read_bytes() for p in store.objects.glob("*/*") if not p.name.startswith(".tmp-")]


def _assert_refused(stage: ProgramStage, field: str, path: str, why: str) -> None:
    with pytest.raises(StageFailed) as err:
        record_program_success(stage)
    msg = err.value.description
    assert f"{field} {path!r} {why}" in msg, msg
    assert "nothing was stored" in msg
    assert _stored(stage.store) == [] and stage.store.refs() == []
    assert stage.lineage.runs("req-label") == []


def test_an_output_naming_proc_self_environ_is_refused_and_nothing_is_copied(stage: ProgramStage):
    _write_result(stage, outputs={"labels": "/proc/self/environ"})
    _assert_refused(stage, "outputs.labels", "/proc/self/environ", "is outside the output directory")


def test_a_log_path_naming_proc_self_environ_is_refused(stage: ProgramStage):
    _write_result(stage, log_path="/proc/self/environ")
    _assert_refused(stage, "log_path", "/proc/self/environ", "is outside the output directory")


def test_an_output_naming_another_tenants_file_through_dotdot_is_refused(stage: ProgramStage, tmp_path: Path):
    # relative paths are taken from the output directory: ../other-tenant/secret is its sibling
    other = stage.out_dir.parent / "other-tenant" / "secret"
    other.parent.mkdir(parents=True)
    other.write_bytes(SECRET)
    _write_result(stage, outputs={"labels": "../other-tenant/secret"})
    _assert_refused(stage, "outputs.labels", "../other-tenant/secret", "is outside the output directory")
    # the same escape written as an absolute path through the output directory
    _write_result(stage, outputs={"labels": f"{stage.out_dir}/../other-tenant/secret"})
    _assert_refused(stage, "outputs.labels", f"{stage.out_dir}/../other-tenant/secret", "is outside")


def test_an_output_naming_an_absolute_path_elsewhere_is_refused(stage: ProgramStage, tmp_path: Path):
    elsewhere = tmp_path / "work" / "tenant-b" / "model.npz"
    elsewhere.parent.mkdir(parents=True)
    elsewhere.write_bytes(SECRET)
    _write_result(stage, outputs={"model": str(elsewhere)})
    _assert_refused(stage, "outputs.model", str(elsewhere), "is outside the output directory")


def test_a_symlink_inside_the_output_directory_pointing_outside_is_refused(stage: ProgramStage, tmp_path: Path):
    secret = tmp_path / "secret.txt"
    secret.write_bytes(SECRET)
    link = stage.out_dir / "labels.jsonl"
    link.symlink_to(secret)
    _write_result(stage, outputs={"labels": str(link)})
    _assert_refused(stage, "outputs.labels", str(link), "leads outside the output directory")
    # a link to /proc/self/environ the same way, and a symlinked directory on the way
    (stage.out_dir / "env").symlink_to("/proc/self/environ")
    _write_result(stage, outputs={"labels": "env"})
    _assert_refused(stage, "outputs.labels", "env", "leads outside the output directory")
    (stage.out_dir / "sub").symlink_to(tmp_path)
    _write_result(stage, outputs={"labels": "sub/secret.txt"})
    _assert_refused(stage, "outputs.labels", "sub/secret.txt", "leads outside the output directory")


def test_a_fifo_inside_the_output_directory_is_refused_without_blocking(stage: ProgramStage):
    fifo = stage.out_dir / "labels.jsonl"
    os.mkfifo(fifo)
    _write_result(stage, outputs={"labels": str(fifo)})
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            record_program_success(stage)
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout=10)
    if t.is_alive():  # blocked on the FIFO: unblock it (a writer that closes at once) and fail
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        t.join(timeout=10)
        pytest.fail("record_program_success blocked opening a FIFO named in outputs")
    assert isinstance(outcome[0], StageFailed), outcome
    assert f"outputs.labels {str(fifo)!r} is not a regular file (a FIFO)" in outcome[0].description
    assert _stored(stage.store) == []


def test_a_result_json_that_links_to_another_tenants_result_is_refused(stage: ProgramStage, tmp_path: Path):
    other = tmp_path / "work" / "tenant-b" / RESULT_FILE
    other.parent.mkdir(parents=True)
    other.write_text(json.dumps({"log_path": str(other), "log_digest": "x", "outputs": {}}))
    (stage.out_dir / RESULT_FILE).symlink_to(other)
    with pytest.raises(StageFailed, match=r"refused result.json .* through a symbolic link"):
        record_program_success(stage)
    assert _stored(stage.store) == []


def test_a_failed_attempt_never_copies_a_refused_log(stage: ProgramStage):
    _write_result(stage, log_path="/proc/self/environ")
    run = record_program_failure(stage, 1, interrupted=False)
    assert run.status == "failed" and run.log_digest is None
    assert run.results["refused_paths"] == [
        f"log_path '/proc/self/environ' is outside the output directory {stage.out_dir}"
    ]
    assert _stored(stage.store) == []


def test_outputs_inside_the_output_directory_are_still_stored(stage: ProgramStage):
    (stage.out_dir / "labels.jsonl").write_text('{"frame": 1}\n')
    (stage.out_dir / "latest").symlink_to("labels.jsonl")  # a link that stays inside is fine
    _write_result(stage, outputs={"labels": str(stage.out_dir / "labels.jsonl"), "latest": "latest"})
    run, _ = record_program_success(stage)
    assert run.status == "succeeded"
    assert sorted(_stored(stage.store)) == sorted([b'{"frame": 1}\n', b"labelled 10 frames\n"])


# retention sweep -----------------------------------------------------------------------------


def _expired_store(root: Path, content: bytes) -> tuple[EvidenceStore, Path]:
    store = EvidenceStore(root)
    ref = store.put(content, "req-old", "log", NOW - timedelta(days=1))
    return store, store.path(ref.digest)


def test_sweep_never_deletes_through_a_symlinked_object_directory(tmp_path: Path):
    store, obj = _expired_store(tmp_path / "evidence", SECRET)
    outside = tmp_path / "outside"
    outside.mkdir()
    shard = obj.parent
    shutil.move(str(shard), str(outside / shard.name))  # the same bytes now live outside the store
    shard.symlink_to(outside / shard.name, target_is_directory=True)
    target = outside / shard.name / obj.name
    mode = stat.S_IMODE(target.stat().st_mode)
    report = store.sweep(NOW)
    assert target.read_bytes() == SECRET and stat.S_IMODE(target.stat().st_mode) == mode
    assert report.deleted == []
    assert any(where == f"objects/sha256/{shard.name}" for where, _ in report.skipped), report.skipped
    assert "skipped 1 symbolic link(s)" in report.summary()


def test_sweep_never_chmods_or_deletes_the_target_of_a_symlinked_object_file(tmp_path: Path):
    store, obj = _expired_store(tmp_path / "evidence", SECRET)
    outside = tmp_path / "precious.txt"
    outside.write_bytes(b"not the store's\n")
    outside.chmod(0o640)
    obj.unlink()
    obj.symlink_to(outside)
    report = store.sweep(NOW)
    assert outside.read_bytes() == b"not the store's\n"
    assert stat.S_IMODE(outside.stat().st_mode) == 0o640
    assert report.deleted == [] and obj.is_symlink()
    assert any(where.endswith(obj.name) and "symbolic link" in why for where, why in report.skipped), report.skipped
    # its references stay: the link is for a person to look at, not evidence lost to repair away
    assert report.repaired == [] and len(store.refs("req-old")) == 1


def test_sweep_never_deletes_files_in_a_symlinked_reference_directory(tmp_path: Path):
    store, obj = _expired_store(tmp_path / "evidence", SECRET)
    ref_file = next(store.refs_dir.glob("*/*.json"))
    outside = tmp_path / "outside-refs"
    outside.mkdir()
    # an expired reference whose object is gone looks like what an interrupted sweep leaves
    (outside / ref_file.name).write_bytes(ref_file.read_bytes())
    obj.unlink()
    ref_file.unlink()
    (store.refs_dir / "req-elsewhere-000000000000").symlink_to(outside, target_is_directory=True)
    report = store.sweep(NOW)
    assert (outside / ref_file.name).exists()
    assert report.repaired == []
    assert any(where == "refs/req-elsewhere-000000000000" for where, _ in report.skipped)


def test_sweep_does_not_block_on_a_fifo_in_the_index(tmp_path: Path):
    store, _ = _expired_store(tmp_path / "evidence", SECRET)
    key_dir = next(store.refs_dir.glob("*"))
    os.mkfifo(key_dir / "0000000000000000-log-r-none.json")
    done: list[object] = []
    t = threading.Thread(target=lambda: done.append(store.sweep(NOW)), daemon=True)
    t.start()
    t.join(timeout=10)
    if t.is_alive():
        os.close(os.open(key_dir / "0000000000000000-log-r-none.json", os.O_WRONLY | os.O_NONBLOCK))
        t.join(timeout=10)
        pytest.fail("the sweep blocked reading a FIFO in refs/")
    assert done and any("FIFO" in why for _, why in done[0].skipped)  # type: ignore[attr-defined]


def test_retention_sweep_cli_names_what_it_skipped(tmp_path: Path):
    store, obj = _expired_store(tmp_path / "evidence", SECRET)
    outside = tmp_path / "precious.txt"
    outside.write_bytes(b"x")
    obj.unlink()
    obj.symlink_to(outside)
    result = CliRunner().invoke(main, ["retention", "sweep", "--evidence-root", str(store.root)])
    assert f"SKIPPED objects/sha256/{obj.parent.name}/{obj.name}: a symbolic link" in result.output
    assert outside.read_bytes() == b"x"
