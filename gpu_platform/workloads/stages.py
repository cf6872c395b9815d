"""The workload stages as plain functions: what an asset in `assets/workloads.py` does around the
one Dagster-specific step (running the program through the executor and dagster-pipes).

Program stages (label_batch, training_run, replay, map_segmentation): `prepare_program` before
the run, then `record_program_success` or `record_program_failure` after it. Assembled stages
(evidence_pack, released_model, released_map): `assemble`. Metadata comes back as plain values;
the asset layer turns URIs and markdown into Dagster metadata values.

Nothing here imports Dagster.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpu_platform.lineage.evidence import EvidenceRef, EvidenceStore
from gpu_platform.lineage.graph import (
    RELEASE_KINDS,
    SUCCEEDED,
    LineageStore,
    Parent,
    WorkloadRun,
    blocking_outcomes,
    evidence_manifest,
    finished_requests,
    resolve_parents,
)
from gpu_platform.policy import Policy
from gpu_platform.requests.ledger import Ledger
from gpu_platform.requests.model import JobRequest
from gpu_platform.safeload import (
    RESULT_LIMITS,
    InputError,
    PathRefused,
    check_confined,
    decode_utf8,
    load_json_text,
    lstat_kind,
    open_confined,
    read_confined,
)
from gpu_platform.safeload.text import md as md_text
from gpu_platform.workloads import demo_command
from gpu_platform.workloads._common import EXIT_PREEMPTED, OUTPUT_ENV, RESULT_FILE

RESULT_KEYS = ("suites", "accepted", "rejected", "steps_done", "tiles", "replay_hours", "image_pull_s", "setup_s", "runtime_s")
"""Keys of a program's result.json copied into the WorkloadRun's `results`."""

URL_KEYS = ("checkpoint_uri", "log_uri")
"""Metadata keys whose (non-empty) values are URLs."""

MARKDOWN_KEYS = ("lineage",)
"""Metadata keys whose values are markdown."""


class StageFailed(Exception):
    """A stage's program ran but its outputs cannot be accepted (no result, a digest mismatch)."""

    def __init__(self, description: str) -> None:
        super().__init__(description)
        self.description = description


class ReleaseRefused(Exception):
    """A release without passing evidence. missing=None: there is no evidence pack at all."""

    def __init__(self, description: str, missing: list[str] | None = None) -> None:
        super().__init__(description)
        self.description = description
        self.missing = missing


# shared helpers -------------------------------------------------------------------------------


def all_requests(ledger: Ledger) -> dict[str, JobRequest]:
    """Request id -> request (with its id set), for every request in the ledger."""
    return {s.request_id: s.request.model_copy(update={"request_id": s.request_id}) for s in ledger.states()}


def retention_until(req: JobRequest, policy: Policy) -> datetime:
    """When the request's evidence may be swept (absent a hold)."""
    return datetime.now(UTC) + req.retention(policy)


def stage_metadata(req: JobRequest, run: WorkloadRun, parents: list[Parent], uri: str | None) -> dict[str, Any]:
    """A materialization's metadata, plain values (URL_KEYS hold URLs, or None)."""
    md: dict[str, Any] = {
        "request_id": req.request_id,
        "workload": run.kind,
        "lane": req.lane,
        "team": req.team,
        "cost_center": req.cost_center,
        "odd_cell": req.odd_cell,
        "source_commit": req.source_commit,
        "container_digest": req.container_digest,
        "dataset_ids": list(req.dataset_ids),
        "map_ids": list(req.map_ids),
        "taxonomy_ids": list(req.taxonomy_ids),
        "checkpoint_uri": run.checkpoint_uri or None,
        "log_digest": run.log_digest,
        "log_uri": run.log_uri or None,
        "output_artifact_ids": list(req.output_artifact_ids),
        "artifact_digests": dict(run.artifact_digests),
        "gpu_hours": run.gpu_hours,
        "attempts": run.attempts,
        "exit_status": run.exit_status,
        "upstream": [{"request_id": p.request_id, "kind": p.kind, "via_id": p.via_id} for p in parents],
        "upstream_requests": ", ".join(f"{p.kind}[{p.request_id}]" for p in parents) or "none",
    }
    if uri:
        md["dagster/uri"] = uri
    return md


# program stages: label_batch, training_run, replay, map_segmentation -------------------------


OUTPUT_ROOT = "the output directory"
"""How a refusal names the root a program's result paths are confined to (`ProgramStage.out_dir`)."""


def load_result(out_dir: Path) -> tuple[dict[str, Any] | None, str | None]:
    """(the program's result.json, None), (None, None) when it wrote none, or (None, why) when it
    is unreadable, over `RESULT_LIMITS` (the program is not ours: 100,000 brackets must not crash
    the step), not a mapping, or not a regular file in `out_dir` (a link out of it, a FIFO)."""
    path = out_dir / RESULT_FILE
    if not os.path.lexists(path):
        return None, None
    try:
        data = read_confined(path, out_dir, RESULT_LIMITS.max_bytes, field=RESULT_FILE, root_name=OUTPUT_ROOT)
        value = load_json_text(decode_utf8(data, str(path)), str(path), RESULT_LIMITS)
    except PathRefused as exc:
        return None, f"refused {exc}"
    except InputError as exc:
        return None, f"{path}: " + "; ".join(exc.errors)[:500]
    if not isinstance(value, dict):
        return None, f"{path}: not a JSON object"
    return value, None


def read_result(out_dir: Path) -> dict[str, Any] | None:
    """The program's result.json, or None when it wrote none or one that `load_result` refuses."""
    return load_result(out_dir)[0]


def newest_log(out_dir: Path) -> Path | None:
    """The newest regular `*.log` under `out_dir/logs` (links and special files are not logs)."""
    logs_dir = out_dir / "logs"
    if lstat_kind(logs_dir) != "a directory":
        return None
    logs = [p for p in logs_dir.glob("*.log") if lstat_kind(p) is None]
    logs.sort(key=lambda p: p.lstat().st_mtime)
    return logs[-1] if logs else None


def result_paths(result: Mapping[str, Any], out_dir: Path) -> tuple[tuple[str, str], dict[str, tuple[str, str]]]:
    """The log and outputs a program's result names, each checked before anything is stored:
    ((field, path) of the log, {output name: (field, path)}). Every path must be a regular file in
    `out_dir` (relative paths are taken from it); raises PathRefused naming the field, the path and
    why (`outputs.model '/proc/self/environ' is outside the output directory ...`)."""
    log_path = result.get("log_path")
    if not isinstance(log_path, str):
        raise PathRefused("log_path", repr(log_path), "is not a path (a string is required)")
    outputs = result.get("outputs") or {}
    if not isinstance(outputs, Mapping):
        raise PathRefused("outputs", repr(outputs)[:80], "is not a mapping of output name to path")
    checked = {}
    for name, path in outputs.items():
        where = f"outputs.{name}"
        if not isinstance(path, str):
            raise PathRefused(where, repr(path), "is not a path (a string is required)")
        checked[str(name)] = (where, path)
    for where, path in [("log_path", log_path), *checked.values()]:
        check_confined(path, out_dir, field=where, root_name=OUTPUT_ROOT)
    return ("log_path", log_path), checked


def _put_confined(stage: ProgramStage, field: str, path: str, kind: str) -> EvidenceRef:
    """Store one result path (opened confined to the stage's output directory) as evidence."""
    with open_confined(path, stage.out_dir, field=field, root_name=OUTPUT_ROOT) as f:
        return stage.store.put(f, stage.request_id, kind, stage.until, stage.hold, name=Path(path).name)


@dataclass
class ProgramStage:
    """One attempt of a program stage, prepared: what to run and what to record it against."""

    req: JobRequest
    kind: str
    run_request: JobRequest
    out_dir: Path
    ckpt_dir: Path
    attempts: int
    until: datetime
    hold: bool
    parents: list[Parent]
    unresolved: list[str]
    dagster_run_id: str
    lineage: LineageStore
    store: EvidenceStore
    started: float = field(default_factory=time.monotonic)

    @property
    def request_id(self) -> str:
        return self.req.request_id or ""

    @property
    def pipes_extras(self) -> dict[str, str]:
        return {"workload": self.kind, "out_dir": str(self.out_dir)}

    def record(
        self,
        status: str,
        result: dict[str, Any] | None,
        log_ref: EvidenceRef | None,
        refused: list[str] | None = None,
        **facts: Any,
    ) -> WorkloadRun:
        gpu_hours = (time.monotonic() - self.started) * (self.req.gpu_count or 0) / 3600
        results: dict[str, Any] = {k: result[k] for k in RESULT_KEYS if result and k in result}
        if refused:
            results["refused_paths"] = refused
        return self.lineage.record_run(
            WorkloadRun.for_request(
                self.req,
                self.kind,
                status,
                unresolved_inputs=tuple(self.unresolved),
                checkpoint_uri=(result or {}).get("checkpoint_uri"),
                log_digest=log_ref.digest if log_ref else None,
                log_uri=log_ref.uri if log_ref else None,
                gpu_hours=round(gpu_hours, 6),
                attempts=self.attempts,
                results=results,
                dagster_run_id=self.dagster_run_id,
                **facts,
            )
        )


def prepare_program(
    req: JobRequest,
    kind: str,
    work_dir: Path,
    run_id: str,
    ledger: Ledger,
    lineage: LineageStore,
    store: EvidenceStore,
    policy: Policy,
) -> ProgramStage:
    """Choose the command (the request's, or the demo program), its output and checkpoint dirs,
    resolve and record the lineage edges; the clock for GPU-hours starts here."""
    rid = req.request_id or ""
    out = work_dir / "out" / f"{kind}-{run_id}"
    command = req.command or demo_command(req, kind, out)
    run_req = req.model_copy(update={"command": command, "env": {**req.env, OUTPUT_ENV: str(out)}})
    attempts = lineage.attempts(rid, kind) + 1
    until = retention_until(req, policy)
    parents, unresolved = resolve_parents(req, all_requests(ledger), finished_requests(lineage.latest_runs()))
    lineage.record_edges(rid, kind, parents)
    return ProgramStage(
        req=req,
        kind=kind,
        run_request=run_req,
        out_dir=out,
        ckpt_dir=work_dir / "checkpoints" / kind,
        attempts=attempts,
        until=until,
        hold=bool(req.evidence_hold),
        parents=list(parents),
        unresolved=list(unresolved),
        dagster_run_id=run_id,
        lineage=lineage,
        store=store,
    )


def record_program_failure(stage: ProgramStage, exit_code: int | None, interrupted: bool) -> WorkloadRun:
    """Record a failed attempt with whatever log it left. exit_code: the process's, when known
    (else the one in result.json); interrupted: the run was terminated (not an Exception).
    Status is "preempted" when interrupted or the program exited EXIT_PREEMPTED, else "failed".
    The log is stored only when it is a regular file in the output directory; a refused path is
    recorded in the run's results (`refused_paths`), never copied."""
    result, problem = load_result(stage.out_dir)
    refused = [problem] if problem else []
    exit_status = exit_code if exit_code is not None else (result or {}).get("exit_status")
    log_ref = None
    try:
        if result is not None:
            (field, log), _ = result_paths({"log_path": result.get("log_path")}, stage.out_dir)
        else:
            newest = newest_log(stage.out_dir)
            field, log = "logs", str(newest) if newest else ""
        if log:
            log_ref = _put_confined(stage, field, log, "log")
    except PathRefused as exc:
        refused.append(str(exc))
    status = "preempted" if exit_status == EXIT_PREEMPTED or interrupted else "failed"
    return stage.record(status, result, log_ref, refused=refused, exit_status=exit_status)


def record_program_success(stage: ProgramStage) -> tuple[WorkloadRun, dict[str, Any]]:
    """Store the log and outputs as evidence, verify their digests against what the program
    reported, record the run; returns it with its metadata (plain values). Raises StageFailed.

    Every path the result names (log_path, outputs) must be a regular file in the stage's output
    directory: one that is not (a link or `..` out of it, `/proc/self/environ`, another tenant's
    file, a FIFO) fails the stage naming the field, the path and why, before anything is stored."""
    kind, rid, out = stage.kind, stage.request_id, stage.out_dir
    result, problem = load_result(out)
    if problem:
        raise StageFailed(f"{kind} {rid}: {problem}")
    if result is None:
        raise StageFailed(f"{kind} {rid}: the program exited 0 but wrote no {out / RESULT_FILE}")
    try:
        (log_field, log_path), outputs = result_paths(result, out)
    except PathRefused as exc:
        raise StageFailed(f"{kind} {rid}: {RESULT_FILE} refused: {exc}; nothing was stored") from None
    try:
        log_ref = _put_confined(stage, log_field, log_path, "log")
    except PathRefused as exc:  # replaced after the check: still nothing from outside is stored
        raise StageFailed(f"{kind} {rid}: {RESULT_FILE} refused: {exc}") from None
    if log_ref.digest != result.get("log_digest"):
        raise StageFailed(f"{kind} {rid}: log digest {log_ref.digest} != reported {result.get('log_digest')}")
    digests: dict[str, str] = {}
    primary_uri = None
    for name, (field_name, path) in outputs.items():
        try:
            ref = _put_confined(stage, field_name, path, f"output:{name}")
        except PathRefused as exc:
            raise StageFailed(f"{kind} {rid}: {RESULT_FILE} refused: {exc}") from None
        if ref.digest != (result.get("output_digests") or {}).get(name, ref.digest):
            raise StageFailed(f"{kind} {rid}: output {name} changed after the program reported it")
        digests[name] = ref.digest
        primary_uri = primary_uri or ref.uri
    first = next(iter(digests.values()), None)
    artifact_digests = {a: first for a in stage.req.output_artifact_ids if first}
    run = stage.record(SUCCEEDED, result, log_ref, exit_status=0, artifact_digests=artifact_digests)
    return run, stage_metadata(stage.req, run, stage.parents, primary_uri)


def record_gang_success(stage: ProgramStage, pod_logs: Mapping[str, str]) -> tuple[WorkloadRun, dict[str, Any]]:
    """Record a completed multi-node attempt. pod_logs: pod name -> digest of its log, already in
    the evidence store. With a `result.json` (the pods write the stage's output directory on the
    shared work volume) it is recorded as any program (`record_program_success`); without one (no
    work volume, or a program that writes none) the first pod's log is the stage's log, and the
    others stay referenced from the request in the store."""
    result, problem = load_result(stage.out_dir)
    if result is not None or problem:
        return record_program_success(stage)
    first = next(iter(pod_logs.values()), None)
    log_ref = EvidenceRef(digest=first, uri=stage.store.uri(first), size=0) if first else None
    run = stage.record(SUCCEEDED, {"pod_logs": dict(pod_logs)}, log_ref, exit_status=0)
    return run, stage_metadata(stage.req, run, stage.parents, None)


RANK_LOGS = "ranks"
"""Where the local executor writes each process's output of a multi-node run, under the stage's output directory."""


def keep_rank_logs(stage: ProgramStage) -> dict[str, str]:
    """Store the output of every process of a local multi-node run (`<out>/ranks/rank-<i>.log`) as
    evidence of the request; returns file name -> digest (empty for a run of one process)."""
    kept: dict[str, str] = {}
    directory = stage.out_dir / RANK_LOGS
    if not directory.is_dir() or directory.is_symlink():
        return kept
    for path in sorted(directory.glob("rank-*.log")):
        try:
            kept[path.name] = _put_confined(stage, "rank_log", str(path), "log").digest
        except PathRefused:
            continue
    return kept


def record_gang_failure(
    stage: ProgramStage, exit_code: int | None, interrupted: bool, pod_log: str | None
) -> WorkloadRun:
    """Record a failed multi-node attempt. pod_log: digest of the failed pod's log (already in the
    evidence store), the stage's log when the pods left none in the output directory."""
    result, _ = load_result(stage.out_dir)
    if result is not None or newest_log(stage.out_dir) is not None or not pod_log:
        return record_program_failure(stage, exit_code, interrupted)
    status = "preempted" if exit_code == EXIT_PREEMPTED or interrupted else "failed"
    ref = EvidenceRef(digest=pod_log, uri=stage.store.uri(pod_log), size=0)
    return stage.record(status, None, ref, exit_status=exit_code)


PROGRAM_METADATA_DROPPED = ("log_path", "outputs", "output_digests", "program", "request_id", "exit_status", "log_digest")
"""Keys of a program's own reported metadata that the stage's metadata replaces or omits."""


def program_metadata(reported: Mapping[str, Any] | None) -> dict[str, Any]:
    """The program's reported metadata, less what the stage reports itself."""
    md = dict(reported or {})
    for key in PROGRAM_METADATA_DROPPED:
        md.pop(key, None)
    return md


# assembled stages: evidence_pack, released_model, released_map -------------------------------


def require_passing_evidence(
    rid: str, req: JobRequest, lineage: LineageStore, store: EvidenceStore, evidence_job: str
) -> None:
    """Defence in depth for a release launched without its evidence_pack step (so without the
    blocking checks in its run): evaluate the same ERROR checks here and refuse on any gap.
    evidence_job: the job to name in the refusal when there is no evidence pack."""
    pack = lineage.latest_run(rid, "evidence_pack")
    if pack is None or pack.status != SUCCEEDED:
        raise ReleaseRefused(
            f"release {rid}: no evidence pack; run {evidence_job} (evidence_pack, its checks, then the release)"
        )
    tree = lineage.tree(rid, "evidence_pack")
    failed = [o for o in blocking_outcomes(tree, req, store.exists, store.verify, store.held_digests()) if not o.passed]
    if failed:
        raise ReleaseRefused(
            f"release {rid} refused: " + " | ".join(o.description for o in failed),
            missing=[m for o in failed for m in o.missing],
        )


def _cell(value: str | None, cut: int | None = None) -> str:
    """A table cell: `-` when empty, else the value (cut) escaped for markdown."""
    return md_text(value[:cut]) if value else "-"


def lineage_markdown(manifest: dict[str, Any]) -> str:
    rows = ["| stage | request | status | commit | datasets | log |", "|---|---|---|---|---|---|"]
    for s in manifest["stages"]:
        datasets = ", ".join(s.get("dataset_ids", []) + s.get("map_ids", []))
        rows.append(
            f"| {md_text(s['kind'])} | {md_text(s['request_id'])} | {md_text(s['status'])} | {_cell(s.get('source_commit'), 12)} "
            f"| {_cell(datasets)} | {_cell(s.get('log_digest'), 19)} |"
        )
    return "\n".join(rows)


def assemble(
    req: JobRequest,
    kind: str,
    run_id: str,
    ledger: Ledger,
    lineage: LineageStore,
    store: EvidenceStore,
    policy: Policy,
    evidence_job: str,
) -> tuple[WorkloadRun, dict[str, Any]]:
    """Build the evidence pack / release manifest from the lineage, hold its evidence, store the
    manifest and a log, record the run; returns it with its metadata (plain values; `lineage` is
    markdown). A release first requires passing evidence (raises ReleaseRefused)."""
    rid = req.request_id or ""
    parents, unresolved = resolve_parents(req, all_requests(ledger), finished_requests(lineage.latest_runs()))
    if kind in RELEASE_KINDS:
        require_passing_evidence(rid, req, lineage, store, evidence_job)
        parents = [Parent(rid, "evidence_pack", f"evidence-pack:{rid}")]
    lineage.record_edges(rid, kind, parents)
    tree = lineage.tree(rid, kind)
    manifest = evidence_manifest(tree, req)
    holder = f"{kind}:{rid}"
    for n in tree.unique():
        store.set_hold(n.request_id, holder, f"{kind} {req.release_packet_id or rid}")
    until = retention_until(req, policy)
    body = json.dumps(manifest, indent=2, sort_keys=True, default=str)
    ref = store.put(body, rid, "evidence_pack" if kind == "evidence_pack" else "release_manifest", until, hold=True)
    log_lines = [f"{datetime.now(UTC).isoformat()} {kind} {rid}: manifest {ref.digest}"]
    log_lines += [f"  {s['kind']} {s['request_id']} {s['status']} log={s.get('log_digest')}" for s in manifest["stages"]]
    log_ref = store.put("\n".join(log_lines) + "\n", rid, "log", until, hold=True)
    run = lineage.record_run(
        WorkloadRun.for_request(
            req,
            kind,
            SUCCEEDED,
            unresolved_inputs=tuple(unresolved),
            log_digest=log_ref.digest,
            log_uri=log_ref.uri,
            gpu_hours=0.0,
            attempts=lineage.attempts(rid, kind) + 1,
            exit_status=0,
            artifact_digests={a: ref.digest for a in req.output_artifact_ids} or {f"{kind}:{rid}": ref.digest},
            results={"stages": len(manifest["stages"]), "manifest_digest": ref.digest},
            dagster_run_id=run_id,
        )
    )
    md = stage_metadata(req, run, parents, ref.uri)
    md["manifest_digest"] = ref.digest
    md["lineage"] = lineage_markdown(manifest)
    return run, md
