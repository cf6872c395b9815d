"""Workload assets (one per workload kind, partitioned by request id), their blocking release
checks, and the retention sweep.

Asset-level deps draw the chain in the UI: label_batch -> training_run -> replay -> evidence_pack
-> released_model, and map_segmentation -> released_map (which also needs its evidence_pack).
Which partition fed which (label batch L -> training run T) is instance lineage: it comes from
the requests' ids, is recorded in the `lineage_edges` table and in each materialization's
`upstream` metadata, and prints with `gpu-platform lineage ID`.

A release request (`workload: released_model | released_map`) runs as one job over its partition:
`evidence_pack` assembles and holds the evidence, its blocking checks run, and only then the
release asset materializes. A failing ERROR check stops the release in that run.
"""

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dagster as dg
import duckdb

from assets.partitions import requests_partitions
from gpu_platform.evidence import EvidenceRef, EvidenceStore
from gpu_platform.ledger import Ledger, LedgerError
from gpu_platform.lineage import (
    RELEASE_KINDS,
    SUCCEEDED,
    CheckOutcome,
    LineageStore,
    Parent,
    WorkloadRun,
    blocking_outcomes,
    check_cost_attributed,
    check_lineage_complete,
    check_logs_retained,
    check_replay_coverage,
    check_reproducible,
    evidence_manifest,
    resolve_parents,
)
from gpu_platform.requests import JobRequest
from gpu_platform.workloads import PROGRAMS, demo_command
from gpu_platform.workloads._common import EXIT_PREEMPTED, OUTPUT_ENV, RESULT_FILE
from resources.evidence import EvidenceStoreResource
from resources.ledger import LedgerResource
from resources.local_executor import LocalGpuExecutor
from resources.policy import PolicyResource
from resources.warehouse import Warehouse

GROUP = "workloads"

UPSTREAM: dict[str, list[str]] = {
    "label_batch": [],
    "training_run": ["label_batch"],
    "replay": ["training_run"],
    "map_segmentation": [],
    "evidence_pack": ["replay"],
    "released_model": ["evidence_pack"],
    "released_map": ["map_segmentation", "evidence_pack"],
}

DESCRIPTIONS = {
    "label_batch": "Auto-labeling batch: labels with accepted and rejected counts.",
    "training_run": "Training run: checkpoints every interval, resumes after preemption.",
    "replay": "Scenario replay for one ODD cell: per-suite results.",
    "map_segmentation": "Semantic segmentation of map tiles into classes.",
    "evidence_pack": "Evidence for a release (or an ODD-cell approval): every upstream stage's "
    "commit, image, data snapshot, logs and results, placed under evidence hold.",
    "released_model": "A released model: published only when its evidence pack's checks pass.",
    "released_map": "A released semantic map: published only when its evidence pack's checks pass.",
}

ACCEPTS: dict[str, tuple[str, ...]] = {k: (k,) for k in UPSTREAM}
ACCEPTS["evidence_pack"] = ("evidence_pack", *RELEASE_KINDS)

JOB_FOR_WORKLOAD: dict[str, str] = {
    "label_batch": "label_batch_job",
    "training_run": "training_run_job",
    "replay": "replay_job",
    "map_segmentation": "map_segmentation_job",
    "evidence_pack": "evidence_pack_job",
    "released_model": "release_model_job",
    "released_map": "release_map_job",
}
"""Request workload -> the job the gate launches for it (partition key = request id)."""

ASSETS_FOR_WORKLOAD: dict[str, tuple[str, ...]] = {
    **{k: (k,) for k in UPSTREAM},
    "released_model": ("evidence_pack", "released_model"),
    "released_map": ("evidence_pack", "released_map"),
}
"""Request workload -> the asset keys one run of it materializes (a release needs its evidence
pack step in the same run, so that the pack's blocking checks can stop it)."""


# shared helpers -------------------------------------------------------------------------------


def _request(context, kind: str, ledger: Ledger) -> JobRequest:
    rid = context.partition_key
    try:
        req = ledger.get(rid)
    except LedgerError as exc:
        raise dg.Failure(description=f"partition {rid}: {exc}", allow_retries=False) from exc
    if req.workload not in ACCEPTS[kind]:
        raise dg.Failure(
            description=f"request {rid} is a {req.workload} request; the {kind} asset takes {', '.join(ACCEPTS[kind])}",
            allow_retries=False,
        )
    return req.model_copy(update={"request_id": rid})


def _all_requests(ledger: Ledger) -> dict[str, JobRequest]:
    return {s.request_id: s.request.model_copy(update={"request_id": s.request_id}) for s in ledger.states()}


def _retention_until(req: JobRequest, policy: PolicyResource) -> datetime:
    return datetime.now(UTC) + req.retention(policy.load())


def _metadata(req: JobRequest, run: WorkloadRun, parents: list[Parent], uri: str | None) -> dict[str, Any]:
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
        "checkpoint_uri": dg.MetadataValue.url(run.checkpoint_uri) if run.checkpoint_uri else None,
        "log_digest": run.log_digest,
        "log_uri": dg.MetadataValue.url(run.log_uri) if run.log_uri else None,
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


def _stores(ledger: LedgerResource, evidence: EvidenceStoreResource) -> tuple[Ledger, LineageStore, EvidenceStore]:
    led = ledger.ledger()
    return led, LineageStore(led.engine), evidence.store()


# program stages: label_batch, training_run, replay, map_segmentation -------------------------


def _read_result(out_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((out_dir / RESULT_FILE).read_text())
    except (OSError, ValueError):
        return None


def _newest_log(out_dir: Path) -> Path | None:
    logs = sorted((out_dir / "logs").glob("*.log"), key=lambda p: p.stat().st_mtime)
    return logs[-1] if logs else None


def run_program_stage(
    context: dg.AssetExecutionContext,
    kind: str,
    ledger: LedgerResource,
    executor: LocalGpuExecutor,
    evidence: EvidenceStoreResource,
    policy: PolicyResource,
) -> dg.MaterializeResult:
    """Run the request's command (or the demo program), keep its log as evidence, record lineage."""
    led, lineage, store = _stores(ledger, evidence)
    req = _request(context, kind, led)
    rid = req.request_id or ""
    work = evidence.work_dir(rid)
    out = work / "out" / f"{kind}-{context.run_id}"
    command = req.command or demo_command(req, kind, out)
    run_req = req.model_copy(update={"command": command, "env": {**req.env, OUTPUT_ENV: str(out)}})
    attempts = lineage.attempts(rid, kind) + 1
    until = _retention_until(req, policy)
    hold = bool(req.evidence_hold)
    parents, unresolved = resolve_parents(req, _all_requests(led))
    lineage.record_edges(rid, kind, parents)
    started = time.monotonic()

    def record(status: str, result: dict[str, Any] | None, log_ref: EvidenceRef | None, **facts: Any) -> WorkloadRun:
        gpu_hours = (time.monotonic() - started) * (req.gpu_count or 0) / 3600
        results = {k: result[k] for k in ("suites", "accepted", "rejected", "steps_done", "tiles") if result and k in result}
        return lineage.record_run(
            WorkloadRun.for_request(
                req,
                kind,
                status,
                unresolved_inputs=tuple(unresolved),
                checkpoint_uri=(result or {}).get("checkpoint_uri"),
                log_digest=log_ref.digest if log_ref else None,
                log_uri=log_ref.uri if log_ref else None,
                gpu_hours=round(gpu_hours, 6),
                attempts=attempts,
                results=results,
                dagster_run_id=context.run_id,
                **facts,
            )
        )

    ckpt_dir = work / "checkpoints" / kind
    try:
        invocation = executor.run(context, run_req, ckpt_dir, {"workload": kind, "out_dir": str(out)})
    except BaseException as exc:  # a failure, a timeout, or the run being terminated (preemption)
        try:
            result = _read_result(out)
            code = exc.metadata.get("exit_code") if isinstance(exc, dg.Failure) else None
            exit_status = code.value if code is not None else (result or {}).get("exit_status")
            log = Path(result["log_path"]) if result else _newest_log(out)
            log_ref = store.put(log, rid, "log", until, hold) if log else None
            interrupted = not isinstance(exc, Exception)
            status = "preempted" if exit_status == EXIT_PREEMPTED or interrupted else "failed"
            record(status, result, log_ref, exit_status=exit_status)
        except Exception as record_exc:  # never mask why the program failed
            context.log.warning(f"{kind} {rid}: could not record the failed attempt: {record_exc}")
        raise
    result = _read_result(out)
    if result is None:
        raise dg.Failure(description=f"{kind} {rid}: the program exited 0 but wrote no {out / RESULT_FILE}")
    log_ref = store.put(Path(result["log_path"]), rid, "log", until, hold)
    if log_ref.digest != result["log_digest"]:
        raise dg.Failure(description=f"{kind} {rid}: log digest {log_ref.digest} != reported {result['log_digest']}")
    digests: dict[str, str] = {}
    primary_uri = None
    for name, path in (result.get("outputs") or {}).items():
        ref = store.put(Path(path), rid, f"output:{name}", until, hold)
        if ref.digest != (result.get("output_digests") or {}).get(name, ref.digest):
            raise dg.Failure(description=f"{kind} {rid}: output {name} changed after the program reported it")
        digests[name] = ref.digest
        primary_uri = primary_uri or ref.uri
    first = next(iter(digests.values()), None)
    artifact_digests = {a: first for a in req.output_artifact_ids if first}
    run = record(SUCCEEDED, result, log_ref, exit_status=0, artifact_digests=artifact_digests)
    program_md = {}
    try:
        program_md = dict(invocation.get_materialize_result().metadata or {})
    except Exception:  # the program reported through result.json only
        program_md = {}
    for key in ("log_path", "outputs", "output_digests", "program", "request_id", "exit_status", "log_digest"):
        program_md.pop(key, None)
    return dg.MaterializeResult(metadata={**program_md, **_metadata(req, run, parents, primary_uri)})


# assembled stages: evidence_pack, released_model, released_map -------------------------------


def assemble_stage(
    context: dg.AssetExecutionContext,
    kind: str,
    ledger: LedgerResource,
    evidence: EvidenceStoreResource,
    policy: PolicyResource,
) -> dg.MaterializeResult:
    """Build the evidence pack / release manifest from the lineage, hold its evidence, record it."""
    led, lineage, store = _stores(ledger, evidence)
    req = _request(context, kind, led)
    rid = req.request_id or ""
    parents, unresolved = resolve_parents(req, _all_requests(led))
    if kind in RELEASE_KINDS:
        _require_passing_evidence(rid, req, lineage, store)
        parents = [Parent(rid, "evidence_pack", f"evidence-pack:{rid}")]
    lineage.record_edges(rid, kind, parents)
    tree = lineage.tree(rid, kind)
    manifest = evidence_manifest(tree, req)
    holder = f"{kind}:{rid}"
    for n in tree.unique():
        store.set_hold(n.request_id, holder, f"{kind} {req.release_packet_id or rid}")
    until = _retention_until(req, policy)
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
            dagster_run_id=context.run_id,
        )
    )
    md = _metadata(req, run, parents, ref.uri)
    md["manifest_digest"] = ref.digest
    md["lineage"] = dg.MetadataValue.md(_lineage_markdown(manifest))
    return dg.MaterializeResult(metadata=md)


def _require_passing_evidence(rid: str, req: JobRequest, lineage: LineageStore, store: EvidenceStore) -> None:
    """Defence in depth for a release launched without its evidence_pack step (so without the
    blocking checks in its run): evaluate the same ERROR checks here and refuse on any gap."""
    pack = lineage.latest_run(rid, "evidence_pack")
    if pack is None or pack.status != SUCCEEDED:
        raise dg.Failure(
            description=f"release {rid}: no evidence pack; run {JOB_FOR_WORKLOAD[req.workload or '']} "
            "(evidence_pack, its checks, then the release)",
            allow_retries=False,
        )
    tree = lineage.tree(rid, "evidence_pack")
    failed = [o for o in blocking_outcomes(tree, req, store.exists, store.verify, store.held_digests()) if not o.passed]
    if failed:
        raise dg.Failure(
            description=f"release {rid} refused: " + " | ".join(o.description for o in failed),
            metadata={"missing": [m for o in failed for m in o.missing]},
            allow_retries=False,
        )


def _lineage_markdown(manifest: dict[str, Any]) -> str:
    rows = ["| stage | request | status | commit | datasets | log |", "|---|---|---|---|---|---|"]
    for s in manifest["stages"]:
        datasets = ", ".join(s.get("dataset_ids", []) + s.get("map_ids", []))
        rows.append(
            f"| {s['kind']} | {s['request_id']} | {s['status']} | {(s.get('source_commit') or '-')[:12]} "
            f"| {datasets or '-'} | {(s.get('log_digest') or '-')[:19]} |"
        )
    return "\n".join(rows)


# asset factories -----------------------------------------------------------------------------


def _program_asset(kind: str) -> dg.AssetsDefinition:
    @dg.asset(
        name=kind,
        partitions_def=requests_partitions,
        deps=UPSTREAM[kind],
        group_name=GROUP,
        kinds={"python"},
        description=DESCRIPTIONS[kind],
    )
    def _asset(
        context: dg.AssetExecutionContext,
        ledger: LedgerResource,
        executor: LocalGpuExecutor,
        evidence: EvidenceStoreResource,
        policy: PolicyResource,
    ) -> dg.MaterializeResult:
        return run_program_stage(context, kind, ledger, executor, evidence, policy)

    return _asset


def _assembled_asset(kind: str) -> dg.AssetsDefinition:
    @dg.asset(
        name=kind,
        partitions_def=requests_partitions,
        deps=UPSTREAM[kind],
        group_name=GROUP,
        kinds={"python"},
        description=DESCRIPTIONS[kind],
    )
    def _asset(
        context: dg.AssetExecutionContext,
        ledger: LedgerResource,
        evidence: EvidenceStoreResource,
        policy: PolicyResource,
    ) -> dg.MaterializeResult:
        return assemble_stage(context, kind, ledger, evidence, policy)

    return _asset


workload_assets: list[dg.AssetsDefinition] = [
    _program_asset(k) if k in PROGRAMS else _assembled_asset(k) for k in UPSTREAM
]


# blocking release checks ---------------------------------------------------------------------

CHECKED_ASSETS = ("evidence_pack", "released_model", "released_map")
CHECK_DESCRIPTIONS = {
    "lineage_complete": "Every referenced upstream stage exists and succeeded; artifact_set ids were all produced.",
    "replay_coverage": "Each required scenario suite (evaluator_ids) was replayed for the ODD cell and passed.",
    "logs_retained": "Every stage's log is in the evidence store, verifies against its digest, and is held.",
    "reproducible": "Every stage has source commit, container digest and data snapshot ids.",
    "cost_attributed": "Every program stage has GPU-hours and a team/cost center (WARN until enforce=true).",
}


class CostCheckConfig(dg.Config):
    """enforce: fail with ERROR (blocking the release) instead of WARN; turn on once the cost
    models price every request."""

    enforce: bool = False


def _check_result(outcome: CheckOutcome, severity: dg.AssetCheckSeverity) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(
        passed=outcome.passed,
        severity=severity,
        description=outcome.description,
        metadata={"missing": list(outcome.missing), "missing_count": len(outcome.missing), "checked": outcome.checked},
    )


def _tree(context, asset_kind: str, ledger: LedgerResource) -> tuple[JobRequest, Any]:
    led = ledger.ledger()
    rid = context.partition_key
    req = led.get(rid).model_copy(update={"request_id": rid})
    return req, LineageStore(led.engine).tree(rid, asset_kind)


def _release_check(asset_kind: str, name: str) -> dg.AssetChecksDefinition:
    @dg.asset_check(
        asset=dg.AssetKey(asset_kind), name=name, blocking=True, description=CHECK_DESCRIPTIONS[name]
    )
    def _check(
        context: dg.AssetCheckExecutionContext, ledger: LedgerResource, evidence: EvidenceStoreResource
    ) -> dg.AssetCheckResult:
        req, tree = _tree(context, asset_kind, ledger)
        if name == "lineage_complete":
            outcome = check_lineage_complete(tree, req)
        elif name == "replay_coverage":
            outcome = check_replay_coverage(tree, req)
        elif name == "logs_retained":
            store = evidence.store()
            outcome = check_logs_retained(tree, store.exists, store.verify, store.held_digests())
        else:
            outcome = check_reproducible(tree)
        return _check_result(outcome, dg.AssetCheckSeverity.ERROR)

    return _check


COST_TABLE = "fct_gpu_cost_by_request"
"""The cost mart (assets/finops.py) that prices requests; read-only, when it has been built."""


def priced_costs(warehouse: Warehouse, request_ids: list[str]) -> dict[str, float] | None:
    """Request id -> allocated cost from the cost models; None while they are not built (or the
    warehouse is busy with a writer): the cost check then judges GPU-hours attribution only."""
    if not Path(warehouse.path).exists():
        return None
    try:
        con = warehouse.connect(read_only=True)
    except duckdb.Error:
        return None
    try:
        rows = con.execute(
            f"select request_id, sum(allocated_cost) from {COST_TABLE} where list_contains(?, request_id) group by 1",
            [request_ids],
        ).fetchall()
    except duckdb.Error:
        return None
    finally:
        con.close()
    return {rid: float(cost) for rid, cost in rows}


def _cost_check(asset_kind: str) -> dg.AssetChecksDefinition:
    @dg.asset_check(
        asset=dg.AssetKey(asset_kind),
        name="cost_attributed",
        blocking=True,
        description=CHECK_DESCRIPTIONS["cost_attributed"],
    )
    def _check(
        context: dg.AssetCheckExecutionContext,
        config: CostCheckConfig,
        ledger: LedgerResource,
        warehouse: Warehouse,
    ) -> dg.AssetCheckResult:
        _, tree = _tree(context, asset_kind, ledger)
        costs = priced_costs(warehouse, sorted({n.request_id for n in tree.unique()}))
        severity = dg.AssetCheckSeverity.ERROR if config.enforce else dg.AssetCheckSeverity.WARN
        result = _check_result(check_cost_attributed(tree, costs), severity)
        note = "priced by the cost models" if costs is not None else f"{COST_TABLE} not available: GPU-hours only"
        return dg.AssetCheckResult(
            passed=result.passed,
            severity=severity,
            description=f"{result.description} ({note})",
            metadata={**result.metadata, "cost_models": costs is not None},
        )

    return _check


workload_checks: list[dg.AssetChecksDefinition] = [
    _release_check(a, n) for a in CHECKED_ASSETS for n in ("lineage_complete", "replay_coverage", "logs_retained", "reproducible")
] + [_cost_check(a) for a in CHECKED_ASSETS]


# retention sweep -----------------------------------------------------------------------------


class SweepConfig(dg.Config):
    dry_run: bool = False
    """True: report what would be deleted, delete nothing."""


@dg.op(description="Delete expired evidence that is not under hold; report what was kept and why.")
def sweep_evidence(
    context: dg.OpExecutionContext, config: SweepConfig, evidence: EvidenceStoreResource
) -> dg.Output:
    report = evidence.store().sweep(dry_run=config.dry_run)
    context.log.info(report.summary())
    reasons: dict[str, int] = {}
    for _, why in report.kept:
        key = why.split(":", 1)[0]
        reasons[key] = reasons.get(key, 0) + 1
    return dg.Output(
        {"deleted": report.deleted, "kept": report.kept},
        metadata={
            "dry_run": config.dry_run,
            "deleted": len(report.deleted),
            "kept": len(report.kept),
            "freed_bytes": report.freed_bytes,
            "kept_by_reason": reasons,
            "deleted_digests": report.deleted[:200],
            "kept_detail": dg.MetadataValue.md(
                "\n".join(["| digest | reason |", "|---|---|"] + [f"| {d[:19]} | {w} |" for d, w in report.kept[:200]])
            ),
        },
    )


@dg.job(name="retention_sweep", description="Evidence retention: never deletes anything under hold.")
def retention_sweep() -> None:
    sweep_evidence()


retention_sweep_schedule = dg.ScheduleDefinition(job=retention_sweep, cron_schedule="0 3 * * *", name="retention_sweep_daily")

# jobs ----------------------------------------------------------------------------------------

_kind_jobs = [
    dg.define_asset_job(JOB_FOR_WORKLOAD[k], selection=dg.AssetSelection.assets(k), description=f"One {k} request.")
    for k in ("label_batch", "training_run", "replay", "map_segmentation", "evidence_pack")
]
release_job = dg.define_asset_job(
    JOB_FOR_WORKLOAD["released_model"],
    selection=dg.AssetSelection.assets("evidence_pack", "released_model"),
    description="A model release: evidence pack, its blocking checks, then the release.",
)
release_map_job = dg.define_asset_job(
    JOB_FOR_WORKLOAD["released_map"],
    selection=dg.AssetSelection.assets("evidence_pack", "released_map"),
    description="A map release: evidence pack, its blocking checks, then the release.",
)
workload_jobs: list[Any] = [*_kind_jobs, release_job, release_map_job, retention_sweep]
workload_schedules: list[dg.ScheduleDefinition] = [retention_sweep_schedule]
