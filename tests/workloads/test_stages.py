"""The workload stages as plain functions (gpu_platform.workloads.stages): no Dagster, no program
run; a real SQLite ledger and lineage store and a real evidence store under tmp_path."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from gpu_platform.lineage.evidence import EvidenceStore
from gpu_platform.lineage.graph import LineageStore
from gpu_platform.policy import load_policy
from gpu_platform.requests.ledger import Ledger
from gpu_platform.requests.model import JobRequest, validate_request_file
from gpu_platform.workloads._common import EXIT_PREEMPTED, OUTPUT_ENV, RESULT_FILE
from gpu_platform.workloads.stages import (
    ProgramStage,
    ReleaseRefused,
    StageFailed,
    lineage_markdown,
    prepare_program,
    record_program_failure,
    record_program_success,
    require_passing_evidence,
)

from .test_lineage import EX, _record_chain, requests


@pytest.fixture
def stage(tmp_path: Path) -> ProgramStage:
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    req = validate_request_file(EX / "labeler_batch.yaml", load_policy()).model_copy(update={"request_id": "req-label"})
    rid = ledger.submit(JobRequest.model_validate(req.model_dump()))
    req = req.model_copy(update={"request_id": rid})
    store = EvidenceStore(tmp_path / "evidence")
    return prepare_program(
        req, "label_batch", tmp_path / "work", "run-1", ledger, LineageStore(ledger.engine), store, load_policy()
    )


def _write_result(stage: ProgramStage, log_digest: str | None = None) -> str:
    stage.out_dir.mkdir(parents=True, exist_ok=True)
    log = stage.out_dir / "logs" / "label.log"
    log.parent.mkdir()
    log.write_text("labelled 10 frames\n")
    digest = "sha256:" + hashlib.sha256(log.read_bytes()).hexdigest()
    result = {"log_path": str(log), "log_digest": log_digest or digest, "accepted": 9, "rejected": 1, "outputs": {}}
    (stage.out_dir / RESULT_FILE).write_text(json.dumps(result))
    return digest


def test_prepare_program_picks_the_demo_command_and_its_output_dir(stage: ProgramStage, tmp_path: Path):
    assert stage.out_dir == tmp_path / "work" / "out" / "label_batch-run-1"
    assert stage.ckpt_dir == tmp_path / "work" / "checkpoints" / "label_batch"
    assert "gpu_platform.workloads.label" in stage.run_request.command
    assert stage.run_request.env[OUTPUT_ENV] == str(stage.out_dir)
    assert stage.attempts == 1 and stage.pipes_extras == {"workload": "label_batch", "out_dir": str(stage.out_dir)}


def test_record_program_success_keeps_the_log_and_records_the_run(stage: ProgramStage):
    digest = _write_result(stage)
    run, md = record_program_success(stage)
    assert run.status == "succeeded" and run.log_digest == digest and run.results == {"accepted": 9, "rejected": 1}
    assert md["log_digest"] == digest and md["log_uri"] == run.log_uri and md["workload"] == "label_batch"
    assert md["checkpoint_uri"] is None and "dagster/uri" not in md
    assert stage.lineage.latest_run("req-label", "label_batch") == run


def test_record_program_success_rejects_a_log_digest_mismatch(stage: ProgramStage):
    _write_result(stage, log_digest="sha256:" + "0" * 64)
    with pytest.raises(StageFailed, match=r"label_batch req-label: log digest sha256:\w+ != reported sha256:0+$"):
        record_program_success(stage)
    assert stage.lineage.runs("req-label") == []


def test_record_program_success_without_a_result_names_the_file(stage: ProgramStage):
    with pytest.raises(StageFailed, match="the program exited 0 but wrote no .*result"):
        record_program_success(stage)


@pytest.mark.parametrize(
    ("exit_code", "interrupted", "status"),
    [(EXIT_PREEMPTED, False, "preempted"), (None, True, "preempted"), (1, False, "failed")],
)
def test_record_program_failure_tells_preemption_from_failure(stage: ProgramStage, exit_code, interrupted, status):
    run = record_program_failure(stage, exit_code, interrupted)
    assert (run.status, run.exit_status, run.log_digest) == (status, exit_code, None)


def test_record_program_failure_falls_back_to_the_reported_exit_status(stage: ProgramStage):
    digest = _write_result(stage)
    result = json.loads((stage.out_dir / RESULT_FILE).read_text())
    (stage.out_dir / RESULT_FILE).write_text(json.dumps({**result, "exit_status": EXIT_PREEMPTED}))
    run = record_program_failure(stage, None, interrupted=False)
    assert (run.status, run.exit_status, run.log_digest) == ("preempted", EXIT_PREEMPTED, digest)


def test_require_passing_evidence_refuses_without_an_evidence_pack(tmp_path: Path):
    lineage = LineageStore(sa.create_engine(f"sqlite:///{tmp_path / 'l.db'}"))
    req = requests()["req-release"]
    with pytest.raises(ReleaseRefused) as info:
        require_passing_evidence("req-release", req, lineage, EvidenceStore(tmp_path / "ev"), "release_model_job")
    assert info.value.description == (
        "release req-release: no evidence pack; run release_model_job (evidence_pack, its checks, then the release)"
    )
    assert info.value.missing is None


class _EmptyStore:
    """An evidence store holding nothing (the chain's digests are placeholders, not sha256)."""

    def exists(self, digest: str) -> bool:
        return False

    def verify(self, digest: str) -> bool:
        return False

    def held_digests(self) -> set[str]:
        return set()


def test_require_passing_evidence_names_what_is_missing(tmp_path: Path):
    lineage = LineageStore(sa.create_engine(f"sqlite:///{tmp_path / 'l.db'}"))
    reqs = requests()
    _record_chain(lineage, reqs, skip="req-label")
    with pytest.raises(ReleaseRefused) as info:
        require_passing_evidence("req-release", reqs["req-release"], lineage, _EmptyStore(), "job")  # type: ignore[arg-type]
    assert info.value.description.startswith("release req-release refused: ")
    assert "label_batch req-label (via lbl-batch-2026-11-28): not materialized" in info.value.missing


def test_lineage_markdown_has_one_row_per_stage():
    manifest = {"stages": [{"kind": "replay", "request_id": "req-r", "status": "succeeded", "dataset_ids": ["ds"]}]}
    assert lineage_markdown(manifest).splitlines()[-1] == "| replay | req-r | succeeded | - | ds | - |"


def test_cost_check_counts_stages_after_the_last_priced_day_as_awaiting_not_missing():
    from datetime import UTC, date, datetime

    from gpu_platform.lineage.graph import WorkloadRun, awaiting_pricing

    run = WorkloadRun(request_id="r", kind="training_run", status="succeeded", recorded_at=datetime(2026, 11, 29, 9, tzinfo=UTC))
    assert awaiting_pricing(run, date(2026, 11, 28))
    assert not awaiting_pricing(run, date(2026, 11, 29))
    assert not awaiting_pricing(run, None)


def test_cost_check_passes_stages_awaiting_pricing_and_lists_them():
    from datetime import UTC, date, datetime

    from gpu_platform.lineage.graph import LineageNode, WorkloadRun, check_cost_attributed

    def node(rid: str, kind: str, day: int) -> LineageNode:
        return LineageNode(rid, kind, None, WorkloadRun(request_id=rid, kind=kind, status="succeeded", team="t",
                                                        cost_center="CC", gpu_hours=1.0,
                                                        recorded_at=datetime(2026, 11, day, 9, tzinfo=UTC)))

    tree = node("rel", "evidence_pack", 29)
    tree.parents = [node("old", "training_run", 27), node("new", "replay", 29)]
    outcome = check_cost_attributed(tree, {"old": 5.0}, date(2026, 11, 28))
    assert outcome.passed and outcome.awaiting == ("replay new (ran 2026-11-29, priced through 2026-11-28)",)
    assert "awaiting pricing (1): replay new" in outcome.description
    # once its day is priced, a stage without a cost is missing
    assert not check_cost_attributed(tree, {"old": 5.0}, date(2026, 11, 29)).passed


def test_a_hostile_result_file_is_unreadable_not_a_crash(tmp_path):
    from gpu_platform.workloads.stages import RESULT_FILE, read_result

    (tmp_path / RESULT_FILE).write_text("[" * 100_000 + "]" * 100_000)
    assert read_result(tmp_path) is None
    (tmp_path / RESULT_FILE).write_text('{"frames": 3, "frames": 4}')
    assert read_result(tmp_path) is None
    (tmp_path / RESULT_FILE).write_text('{"frames": 3}')
    assert read_result(tmp_path) == {"frames": 3}
