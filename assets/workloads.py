"""Workload assets (one per workload kind, each partitioned by the ids of its own kind's
requests), their blocking release checks, and the retention sweep.

Asset-level deps draw the chain in the UI: label_batch -> training_run -> replay -> evidence_pack
(an ODD-cell approval) and replay -> model_evidence_pack -> released_model, map_segmentation and
replay -> map_evidence_pack -> released_map. Between different requests there is no partition
mapping: which request fed which (label batch L -> training run T) is instance lineage, recorded
in the `lineage_edges` table and shown on each materialization as `upstream` (a table with a link
to each upstream request's partition) and printed by `gpu-platform lineage ID`. The only
partition-level dependency is the identity between a release's evidence pack and the release:
both are partitions of the same release request.

A release request (`workload: released_model | released_map`) runs as one job over its partition:
its evidence pack (`model_evidence_pack` / `map_evidence_pack`) assembles and holds the evidence,
its blocking checks run, and only then the release asset materializes. A failing ERROR check
stops the release in that run.
"""

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import dagster as dg
import duckdb
from pydantic import Field

from assets.partitions import WORKLOAD_PARTITIONS
from assets.run_links import submitted_by_metadata
from gpu_platform.cluster.jobs import ENV_CHECKPOINT_DIR, RUN_STEPS, is_gang, namespace_for, resolve_flavor
from gpu_platform.finops.sqlmodels.report import day_flags
from gpu_platform.finops.warehouse import WarehouseBusy
from gpu_platform.finops.warehouse import connect as warehouse_connect
from gpu_platform.gate.instance_config import RELEASE_CHECK_PRIORITY, WAREHOUSE_POOL
from gpu_platform.gate.tick import TAG_ATTEMPT, TAG_FLAVOR
from gpu_platform.lineage.evidence import EvidenceStore
from gpu_platform.lineage.graph import (
    Block,
    CheckOutcome,
    LineageStore,
    check_cost_attributed,
    check_lineage_complete,
    check_logs_retained,
    check_replay_coverage,
    check_reproducible,
    fix_for,
)
from gpu_platform.requests.ledger import Ledger, LedgerError
from gpu_platform.requests.model import JobRequest
from gpu_platform.safeload.text import md as md_text
from gpu_platform.safeload.text import md_code
from gpu_platform.workloads import PROGRAMS
from gpu_platform.workloads.stages import (
    MARKDOWN_KEYS,
    URL_KEYS,
    ProgramStage,
    ReleaseRefused,
    StageFailed,
    assemble,
    keep_rank_logs,
    prepare_program,
    program_metadata,
    read_result,
    record_gang_failure,
    record_gang_success,
    record_program_failure,
    record_program_success,
)
from resources.evidence import EvidenceStoreResource
from resources.ledger import LedgerResource
from resources.local_executor import LocalGpuExecutor
from resources.policy import PolicyResource
from resources.settings import PlatformSettings
from resources.warehouse import Warehouse

GROUP = "workloads"

UPSTREAM: dict[str, list[str]] = {
    "label_batch": [],
    "training_run": ["label_batch"],
    "replay": ["training_run"],
    "map_segmentation": [],
    "evidence_pack": ["replay"],
    "model_evidence_pack": ["replay"],
    "map_evidence_pack": ["map_segmentation", "replay"],
    "released_model": ["model_evidence_pack"],
    "released_map": ["map_evidence_pack"],
}
"""Asset -> the assets it reads (other requests' partitions, except a release's own pack)."""

ASSET_WORKLOAD: dict[str, str] = {k: k for k in UPSTREAM}
ASSET_WORKLOAD["model_evidence_pack"] = "released_model"
ASSET_WORKLOAD["map_evidence_pack"] = "released_map"
"""Asset -> the workload kind of the requests it is partitioned by."""

STAGE_KIND: dict[str, str] = {k: k for k in UPSTREAM}
STAGE_KIND["model_evidence_pack"] = STAGE_KIND["map_evidence_pack"] = "evidence_pack"
"""Asset -> the lineage stage kind it records (a release's pack is an evidence_pack stage)."""

def asset_for_stage(workload: str, stage: str) -> str:
    """The asset a request of `workload` materializes for its `stage` kind (a model release's
    evidence_pack stage: `model_evidence_pack`)."""
    return next(a for a in UPSTREAM if ASSET_WORKLOAD[a] == workload and STAGE_KIND[a] == stage)


SAME_REQUEST: set[tuple[str, str]] = {("released_model", "model_evidence_pack"), ("released_map", "map_evidence_pack")}
"""(asset, upstream) pairs that are partitions of the same request: identity mapping."""

DESCRIPTIONS = {
    "label_batch": "Auto-labeling batch: labels with accepted and rejected counts.",
    "training_run": "Training run: checkpoints every interval, resumes after preemption.",
    "replay": "Scenario replay for one ODD cell: per-suite results.",
    "map_segmentation": "Semantic segmentation of map tiles into classes.",
    "evidence_pack": "Evidence for an ODD-cell approval: every upstream stage's commit, image, data "
    "snapshot, logs and results, placed under evidence hold.",
    "model_evidence_pack": "The evidence pack of a model release (partition = the release request): "
    "assembled and checked in the release's run; its failing blocking checks stop the release.",
    "map_evidence_pack": "The evidence pack of a map release (partition = the release request): "
    "assembled and checked in the release's run; its failing blocking checks stop the release.",
    "released_model": "A released model: published only when its evidence pack's checks pass.",
    "released_map": "A released semantic map: published only when its evidence pack's checks pass.",
}

ACCEPTS: dict[str, tuple[str, ...]] = {k: (ASSET_WORKLOAD[k],) for k in UPSTREAM}

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



# shared helpers -------------------------------------------------------------------------------


def _request(context, kind: str, ledger: Ledger) -> JobRequest:
    rid = context.partition_key
    try:
        req = ledger.get(rid)
    except LedgerError as exc:
        raise dg.Failure(description=f"partition {rid}: {exc}", allow_retries=False) from exc
    if req.workload not in ACCEPTS[kind]:
        raise dg.Failure(
            description=f"request {rid} is a {req.workload} request; the {kind} asset takes {', '.join(ACCEPTS[kind])} requests",
            allow_retries=False,
        )
    return req.model_copy(update={"request_id": rid})


UPSTREAM_SCHEMA = dg.TableSchema(columns=[
    dg.TableColumn("asset", "string", description="the upstream stage's asset"),
    dg.TableColumn("request_id", "string", description="its partition: the upstream request"),
    dg.TableColumn("via_id", "string", description="the artifact id this request read from it"),
])


def _upstream_asset(parent: dict[str, Any], request_id: str, asset: str) -> str:
    if parent["kind"] == "evidence_pack" and parent["request_id"] == request_id and asset in ("released_model", "released_map"):
        return UPSTREAM[asset][0]  # the release's own pack
    return parent["kind"]


def upstream_metadata(
    md: dict[str, Any], asset: str, exists: Callable[[str, str], bool] | None = None
) -> dict[str, Any]:
    """The real upstream requests of a stage: a table, and markdown links to each one's partition
    (the UI's asset page for that partition). exists(asset, request_id): whether that partition is
    in the instance; one that is not gets no link (the UI would open another partition in its
    place) but says so. None: every one is linked."""
    parents = md.get("upstream") or []
    rows = [(_upstream_asset(p, md.get("request_id") or "", asset), p["request_id"], p.get("via_id") or "")
            for p in parents]
    links = [
        f"- [{md_text(a)}[{md_text(rid)}]]({partition_url(a, rid)}) via {md_code(via)}"
        if exists is None or exists(a, rid)
        else f"- {md_text(a)}[{md_code(rid)}] via {md_code(via)} (no such partition in this instance: not linked)"
        for a, rid, via in rows
    ]
    return {
        "upstream": dg.MetadataValue.table(
            [dg.TableRecord({"asset": a, "request_id": rid, "via_id": via}) for a, rid, via in rows],
            schema=UPSTREAM_SCHEMA),
        "upstream_links": dg.MetadataValue.md("\n".join(links) if links else "no upstream requests"),
    }


def partition_url(asset: str, partition: str) -> str:
    """The UI's page of one partition of an asset (its Partitions tab, focused on it); without
    `view=partitions` the asset's overview opens, showing its latest materialization, whichever
    partition that is."""
    return f"/assets/{asset}?view=partitions&partition={quote(partition, safe='')}"


def partition_exists(instance: dg.DagsterInstance) -> Callable[[str, str], bool]:
    """exists(asset, request_id): whether the request is a partition of that workload asset."""
    def exists(asset: str, request_id: str) -> bool:
        kind = ASSET_WORKLOAD.get(asset)
        return kind is not None and instance.has_dynamic_partition(WORKLOAD_PARTITIONS[kind].name, request_id)

    return exists


def dagster_metadata(md: dict[str, Any], asset: str | None = None,
                      instance: dg.DagsterInstance | None = None) -> dict[str, Any]:
    """Plain stage metadata -> Dagster's: URLs and markdown as their metadata values; the upstream
    requests as a table and links (`upstream_metadata`, linking only partitions `instance` has)."""
    out = dict(md)
    if asset is not None and "upstream" in out:
        out.update(upstream_metadata(md, asset, partition_exists(instance) if instance is not None else None))
    for key in URL_KEYS:
        if key in out:
            out[key] = dg.MetadataValue.url(out[key]) if out[key] else None
    for key in MARKDOWN_KEYS:
        if key in out:
            out[key] = dg.MetadataValue.md(out[key])
    return out


def _stores(ledger: LedgerResource, evidence: EvidenceStoreResource) -> tuple[Ledger, LineageStore, EvidenceStore]:
    led = ledger.ledger()
    return led, LineageStore(led.engine), evidence.store()


def _exit_code(exc: BaseException) -> int | None:
    code = exc.metadata.get("exit_code") if isinstance(exc, dg.Failure) else None
    return code.value if code is not None else None


# program stages: label_batch, training_run, replay, map_segmentation -------------------------


def run_program_stage(
    context: dg.AssetExecutionContext,
    kind: str,
    ledger: LedgerResource,
    executor: LocalGpuExecutor,
    evidence: EvidenceStoreResource,
    policy: PolicyResource,
    settings: PlatformSettings | None = None,
) -> dg.MaterializeResult:
    """Run the request's command (or the demo program), keep its log as evidence, record lineage.
    On a cluster (`settings.executor == "k8s"`) a multi-node request's step launches and watches
    its Indexed Job instead (`run_gang_stage`)."""
    led, lineage, store = _stores(ledger, evidence)
    req = _request(context, kind, led)
    work = evidence.work_dir(req.request_id or "")
    stage = prepare_program(req, kind, work, context.run_id, led, lineage, store, policy.load())
    if settings is not None and settings.executor == "k8s" and is_gang(req):
        return run_gang_stage(context, stage, policy, settings)
    try:
        # the pod's namespace labels the run's NVML samples, as dcgm-exporter's k8s mapping would
        try:
            extras = {**stage.pipes_extras, "namespace": namespace_for(req, policy.load())}
        except ValueError:  # a team the policy does not know: samples keep no namespace
            extras = dict(stage.pipes_extras)
        invocation = executor.run(context, stage.run_request, stage.ckpt_dir, extras)
    except BaseException as exc:  # a failure, a timeout, or the run being terminated (preemption)
        try:
            keep_rank_logs(stage)
            record_program_failure(stage, _exit_code(exc), interrupted=not isinstance(exc, Exception))
        except Exception as record_exc:  # never mask why the program failed
            context.log.warning(f"{kind} {stage.request_id}: could not record the failed attempt: {record_exc}")
        raise
    rank_logs = keep_rank_logs(stage)  # a multi-node run's processes, one log each
    try:
        _, md = record_program_success(stage)
    except StageFailed as exc:
        raise dg.Failure(description=exc.description) from exc
    if rank_logs:
        md = {**md, "rank_logs": rank_logs}
    try:
        reported = invocation.get_materialize_result().metadata
    except Exception:  # no pipes materialization arrived: the program's result.json says the same
        reported = {k: v for k, v in (read_result(stage.out_dir) or {}).items() if v is not None}
    return dg.MaterializeResult(metadata={**program_metadata(reported), **dagster_metadata(md, kind, context.instance),
                                          **submitted_by_metadata(context.run)})


def run_gang_stage(
    context: dg.AssetExecutionContext, stage: ProgramStage, policy: PolicyResource, settings: PlatformSettings
) -> dg.MaterializeResult:
    """A multi-node request's workload step on a cluster: create its headless Service and Indexed
    Job, watch every pod, keep every pod's log as evidence, fail naming the pod and exit code."""
    from gpu_platform.cluster.gang import GangFailed
    from resources.k8s import kubernetes_client, launch_gang

    tags = context.run.tags if context.run is not None else {}
    attempt = int(tags.get(TAG_ATTEMPT) or 1)
    pol = policy.load()
    flavor = tags.get(TAG_FLAVOR) or resolve_flavor(stage.run_request, pol).name
    pod_logs: dict[str, str] = {}

    def keep(end, text: str) -> None:
        ref = stage.store.put(text, stage.request_id, "log", stage.until, stage.hold, name=f"{end.name}.log")
        pod_logs[end.name] = ref.digest
        context.log.info(f"pod {end.name} (index {end.index}) {end.phase}, exit code {end.exit_code}: "
                         f"log {ref.digest}\n{text[-4000:]}")

    try:
        outcome = launch_gang(
            stage.run_request, flavor, pol, attempt=attempt, client=kubernetes_client(settings.kubeconfig),
            on_pod_log=keep, log=context.log.info, work_volume=settings.work_volume(),
            env={ENV_CHECKPOINT_DIR: str(stage.ckpt_dir)}, poll_seconds=settings.gang_poll_seconds,
        )
    except BaseException as exc:
        code = exc.exit_code if isinstance(exc, GangFailed) else None
        failed_log = pod_logs.get(exc.pod or "") if isinstance(exc, GangFailed) else None
        try:
            record_gang_failure(stage, code, not isinstance(exc, Exception), failed_log or next(iter(pod_logs.values()), None))
        except Exception as record_exc:  # never mask why the gang failed
            context.log.warning(f"{stage.kind} {stage.request_id}: could not record the failed attempt: {record_exc}")
        if isinstance(exc, GangFailed):
            raise dg.Failure(
                description=f"{stage.kind} {stage.request_id}: {exc}",
                metadata={"pod": exc.pod or "", "exit_code": code if code is not None else -1,
                          "reason": exc.reason, "pod_logs": pod_logs},
            ) from exc
        raise
    try:
        _, md = record_gang_success(stage, pod_logs)
    except StageFailed as exc:
        raise dg.Failure(description=exc.description) from exc
    reported = {k: v for k, v in (read_result(stage.out_dir) or {}).items() if v is not None}
    return dg.MaterializeResult(metadata={
        **program_metadata(reported), **dagster_metadata(md, stage.kind, context.instance),
        "gang_job": outcome.job_name, "pods": len(outcome.pods), "pod_logs": pod_logs,
        **submitted_by_metadata(context.run),
    })


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
    job = JOB_FOR_WORKLOAD.get(req.workload or "", "")
    try:
        _, md = assemble(req, STAGE_KIND[kind], context.run_id, led, lineage, store, policy.load(), evidence_job=job)
    except ReleaseRefused as exc:
        metadata = {"missing": exc.missing} if exc.missing is not None else None
        raise dg.Failure(description=exc.description, metadata=metadata, allow_retries=False) from exc
    return dg.MaterializeResult(metadata={**dagster_metadata(md, kind, context.instance),
                                          **submitted_by_metadata(context.run)})


# asset factories -----------------------------------------------------------------------------


NO_PARTITION_DEPENDENCY = dg.SpecificPartitionsPartitionMapping([])
"""Between different requests' assets: no partition of one depends on a partition of the other
by key; the real upstream requests are the lineage (`upstream` metadata)."""


def _deps(kind: str) -> list[dg.AssetDep]:
    return [
        dg.AssetDep(u, partition_mapping=dg.IdentityPartitionMapping() if (kind, u) in SAME_REQUEST
                    else NO_PARTITION_DEPENDENCY)
        for u in UPSTREAM[kind]
    ]


def _asset_args(kind: str) -> dict:
    return {
        "name": kind,
        "partitions_def": WORKLOAD_PARTITIONS[ASSET_WORKLOAD[kind]],
        "deps": _deps(kind),
        "group_name": GROUP,
        "kinds": {"python"},
        "description": DESCRIPTIONS[kind],
    }


def _program_asset(kind: str) -> dg.AssetsDefinition:
    @dg.asset(**_asset_args(kind))
    def _asset(
        context: dg.AssetExecutionContext,
        ledger: LedgerResource,
        executor: LocalGpuExecutor,
        evidence: EvidenceStoreResource,
        policy: PolicyResource,
        settings: PlatformSettings,
    ) -> dg.MaterializeResult:
        return run_program_stage(context, kind, ledger, executor, evidence, policy, settings)

    return _asset


def _assembled_asset(kind: str) -> dg.AssetsDefinition:
    @dg.asset(**_asset_args(kind))
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

WORKLOAD_ASSET_KEYS = tuple(UPSTREAM)


# blocking release checks ---------------------------------------------------------------------

CHECKED_ASSETS = ("evidence_pack", "model_evidence_pack", "map_evidence_pack", "released_model", "released_map")
CHECK_DESCRIPTIONS = {
    "lineage_complete": "Every referenced upstream stage exists and succeeded; artifact_set ids were all produced.",
    "replay_coverage": "Each required scenario suite (evaluator_ids) was replayed for the ODD cell and passed.",
    "logs_retained": "Every stage's log is in the evidence store, verifies against its digest, and is held.",
    "reproducible": "Every stage has source commit, container digest and data snapshot ids.",
    "cost_attributed": "Every program stage has GPU-hours, a team and cost center, and a priced cost from the cost models "
    "(fails when they have not been built; a stage newer than the last priced day awaits pricing: passes, listed) "
    "(ERROR; WARN with enforce=false).",
}


class CostCheckConfig(dg.Config):
    """enforce: fail with ERROR (blocking the release); false reports a WARN instead. On by default.
    Without the cost models (no warehouse, no cost table) the check fails: cost cannot be attributed.
    Stages run after the last priced day (today's) await pricing: they pass and are listed in the
    check's `awaiting_pricing`, so a same-day release is not blocked by the daily schedule."""

    enforce: bool = Field(
        default=True,
        description="true: a cost not attributed fails with ERROR and blocks the release; false: a WARN only.",
    )


def _check_result(outcome: CheckOutcome, severity: dg.AssetCheckSeverity, request_id: str = "") -> dg.AssetCheckResult:
    """The outcome as a check result that reads on its own per partition: the request, then what
    is missing, one markdown bullet each."""
    missing = list(outcome.missing)
    metadata: dict[str, Any] = {"request_id": request_id, "missing": missing, "missing_count": len(missing),
                                "checked": outcome.checked}
    if missing:
        metadata["missing_md"] = dg.MetadataValue.md("\n".join(f"- {md_text(m)}" for m in missing))
    return dg.AssetCheckResult(passed=outcome.passed, severity=severity, description=outcome.description,
                               metadata=metadata)


def _tree(context, asset_kind: str, ledger: LedgerResource) -> tuple[JobRequest, Any]:
    led = ledger.ledger()
    rid = context.partition_key
    req = led.get(rid).model_copy(update={"request_id": rid})
    return req, LineageStore(led.engine).tree(rid, STAGE_KIND[asset_kind])


def _release_check(asset_kind: str, name: str) -> dg.AssetChecksDefinition:
    @dg.asset_check(
        asset=dg.AssetKey(asset_kind), name=name, blocking=True, description=CHECK_DESCRIPTIONS[name]
    )
    def _check(
        context: dg.AssetCheckExecutionContext, ledger: LedgerResource, evidence: EvidenceStoreResource
    ) -> Iterator[dg.AssetCheckResult]:
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
        result = _check_result(outcome, dg.AssetCheckSeverity.ERROR, context.partition_key)
        yield result
        if not outcome.passed:
            _blocked(context, asset_kind, req, outcome, ledger)

    return _check


TAG_BLOCKED_BY = "gpu-platform/blocked-by"
TAG_BLOCKED_MISSING = "gpu-platform/blocked-missing"
TAG_BLOCKED_FIX = "gpu-platform/blocked-fix"
"""Tags a release run gets when a blocking check stops it: `<asset>.<check>` (comma-separated when
several fail), what is missing (the suite ids, else the gaps) and what to run."""


def _blocked(
    context: dg.AssetCheckExecutionContext,
    asset_kind: str,
    req: JobRequest,
    outcome: CheckOutcome,
    ledger: LedgerResource,
    cost_fix: str = "",
) -> None:
    """A blocking check failed: record the block in the lineage, tag the run, and fail the step
    with a message naming the check, what is missing and what to run (instead of Dagster's
    generic "1 blocking asset check failed"). The check's evaluation is already recorded."""
    fix = fix_for(outcome, req, cost_fix)
    run_id = context.run.run_id
    missing = ", ".join(outcome.subjects) if outcome.subjects else "; ".join(outcome.missing)
    LineageStore(ledger.ledger().engine).record_block(
        req.request_id or "", STAGE_KIND[asset_kind], Block(outcome.name, asset_kind, outcome.missing, fix, run_id)
    )
    current = context.instance.get_run_by_id(run_id)
    earlier = current.tags.get(TAG_BLOCKED_BY, "") if current is not None else ""
    blocked_by = ", ".join(dict.fromkeys([*filter(None, earlier.split(", ")), f"{asset_kind}.{outcome.name}"]))
    context.instance.add_run_tags(
        run_id, {TAG_BLOCKED_BY: blocked_by, TAG_BLOCKED_MISSING: missing[:500], TAG_BLOCKED_FIX: fix[:500]}
    )
    raise dg.Failure(
        description=(
            f"Release {req.name or req.request_id} ({req.request_id}) blocked by {asset_kind}.{outcome.name}: "
            f"missing {missing}. To fix: {fix}."
        ),
        metadata={"check": f"{asset_kind}.{outcome.name}", "missing": list(outcome.missing), "fix": fix},
        allow_retries=False,
    )


COST_TABLE = "fct_gpu_cost_by_request"
"""The cost mart (assets/finops.py) that prices requests; read-only, when it has been built."""

BUILD_COST_MODELS = (
    f"materialize the finops assets ({COST_TABLE} and upstream: job finops_daily, which the 02:00 UTC "
    "schedule runs for yesterday; a backfill for older days) or run `gpu-platform cost build --day YYYY-MM-DD` "
    "after `gpu-platform feeds ingest`, then re-run this check"
)
"""What to do when the cost models are not available (named in the failing check's description)."""


@dataclass(frozen=True)
class Pricing:
    """What the cost models say of a tree's requests. costs=None: not available, `unavailable` says why."""

    costs: dict[str, float] | None
    priced_through: date | None = None
    unavailable: str = ""
    flagged_days: dict[str, str] = field(default_factory=dict)
    """Days the requests were priced on that are flagged (over the unreconciled threshold): day -> why."""


def _today() -> date:
    return datetime.now(UTC).date()


def priced_costs(warehouse: Warehouse, request_ids: list[str]) -> Pricing:
    """Request id -> priced (allocated) cost and the last priced day, from the cost models.

    Not available (costs None): no warehouse file, no cost table, a table that has priced no day
    yet, or a warehouse another process keeps writing for the whole wait (the check is in the
    warehouse pool, so Dagster's own pricing steps never overlap it). Today's partition is
    "today so far" (finops_today_sensor): only days before today are final, so the last priced
    day is at most yesterday and a stage of today awaits pricing rather than failing."""
    path = Path(warehouse.path)
    if not path.exists():
        return Pricing(None, unavailable=f"there is no warehouse at {path}: the cost models have not been built")
    try:
        con = warehouse_connect(path, read_only=True)
    except WarehouseBusy as exc:
        return Pricing(None, unavailable=f"the warehouse could not be read: {exc}")
    except duckdb.Error as exc:
        return Pricing(None, unavailable=f"the warehouse {path} could not be opened ({exc})")
    try:
        try:
            (priced_through,) = con.execute(f"select max(day) from {COST_TABLE}").fetchone()
        except duckdb.CatalogException:
            return Pricing(None, unavailable=f"{path} has no {COST_TABLE} table: the cost models have not been built")
        if priced_through is None:
            return Pricing(None, unavailable=f"{COST_TABLE} in {path} has priced no day yet")
        rows = con.execute(
            f"select request_id, sum(allocated_cost) from {COST_TABLE} "
            "where allocated_cost is not null and list_contains(?, request_id) group by 1",
            [request_ids],
        ).fetchall()
        days = [d for (d,) in con.execute(
            f"select distinct day from {COST_TABLE} where list_contains(?, request_id) order by day", [request_ids]
        ).fetchall()]
        flagged = {str(d): "; ".join(f["message"] for f in flags) for d in days if (flags := day_flags(con, d))}
    finally:
        con.close()
    yesterday = _today() - timedelta(days=1)
    return Pricing({rid: float(cost) for rid, cost in rows}, min(priced_through, yesterday), flagged_days=flagged)


def _cost_check(asset_kind: str) -> dg.AssetChecksDefinition:
    @dg.asset_check(
        asset=dg.AssetKey(asset_kind),
        name="cost_attributed",
        blocking=True,
        description=CHECK_DESCRIPTIONS["cost_attributed"],
        # it reads the warehouse: in the writers' pool, so no pricing step holds DuckDB's lock meanwhile;
        # a short read a release waits on, so it claims the slot ahead of the next pricing step (the
        # step's priority adds to its run's), never behind a whole pricing run
        pool=WAREHOUSE_POOL,
        op_tags=RELEASE_CHECK_PRIORITY,
    )
    def _check(
        context: dg.AssetCheckExecutionContext,
        config: CostCheckConfig,
        ledger: LedgerResource,
        warehouse: Warehouse,
    ) -> Iterator[dg.AssetCheckResult]:
        req, tree = _tree(context, asset_kind, ledger)
        pricing = priced_costs(warehouse, sorted({n.request_id for n in tree.unique()}))
        severity = dg.AssetCheckSeverity.ERROR if config.enforce else dg.AssetCheckSeverity.WARN
        outcome = check_cost_attributed(tree, pricing.costs, pricing.priced_through,
                                        unavailable=pricing.unavailable or "the cost models are not available",
                                        flagged_days=pricing.flagged_days)
        result = _check_result(outcome, severity, context.partition_key)
        if pricing.costs is None:
            note = BUILD_COST_MODELS
        else:
            note = f"priced by the cost models through {pricing.priced_through}"
        yield dg.AssetCheckResult(
            passed=result.passed,
            severity=severity,
            description=f"{result.description} ({note})",
            metadata={**result.metadata, "cost_models": pricing.costs is not None,
                      "priced_through": str(pricing.priced_through) if pricing.priced_through else "",
                      "awaiting_pricing": list(outcome.awaiting),
                      "awaiting_pricing_count": len(outcome.awaiting),
                      "flagged_cost_days": list(outcome.flagged),
                      "flagged_cost_days_count": len(outcome.flagged)},
        )
        if not outcome.passed and severity == dg.AssetCheckSeverity.ERROR:
            _blocked(context, asset_kind, req, outcome, ledger,
                     cost_fix=BUILD_COST_MODELS if pricing.costs is None else "")

    return _check


workload_checks: list[dg.AssetChecksDefinition] = [
    _release_check(a, n) for a in CHECKED_ASSETS for n in ("lineage_complete", "replay_coverage", "logs_retained", "reproducible")
] + [_cost_check(a) for a in CHECKED_ASSETS]


# retention sweep -----------------------------------------------------------------------------


class SweepConfig(dg.Config):
    dry_run: bool = Field(default=False, description="true: report what would be deleted, delete nothing.")


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
                "\n".join(["| digest | reason |", "|---|---|"] + [f"| {md_text(d[:19])} | {md_text(w)} |" for d, w in report.kept[:200]])
            ),
        },
    )


@dg.job(name="retention_sweep", description="Evidence retention: never deletes anything under hold.")
def retention_sweep() -> None:
    sweep_evidence()


def make_retention_schedule(running: bool = False) -> dg.ScheduleDefinition:
    """`retention_sweep_daily` (03:00 UTC). Stopped by default: deleting expired evidence on a
    schedule is a site's decision; the demo turns it on (`GPU_PLATFORM_RETENTION_SCHEDULE=on`,
    set by `gpu-platform demo run`), as docs/demo.md says every schedule is on."""
    return dg.ScheduleDefinition(
        job=retention_sweep,
        cron_schedule="0 3 * * *",
        name="retention_sweep_daily",
        default_status=dg.DefaultScheduleStatus.RUNNING if running else dg.DefaultScheduleStatus.STOPPED,
        description="Delete expired evidence not under hold (never anything held).",
    )


retention_sweep_schedule = make_retention_schedule()

# jobs ----------------------------------------------------------------------------------------

def make_workload_jobs(executor_def: dg.ExecutorDefinition | None = None) -> list[Any]:
    """One job per request workload kind (JOB_FOR_WORKLOAD), over that kind's partitions: the
    jobs the admission sensor launches (k8s_job_executor in production). A release's job runs
    its evidence pack, the pack's blocking checks, then the release."""
    jobs = []
    for workload, name in JOB_FOR_WORKLOAD.items():
        assets = RUN_STEPS[workload]
        description = (f"One {workload} request: {assets[0]}, its blocking checks, then the release."
                       if len(assets) > 1 else f"One {workload} request.")
        jobs.append(dg.define_asset_job(name, selection=dg.AssetSelection.assets(*assets),
                                        partitions_def=WORKLOAD_PARTITIONS[workload], executor_def=executor_def,
                                        description=description))
    return jobs


kind_jobs = make_workload_jobs(dg.multiprocess_executor)
"""The workload jobs on the multiprocess executor (what `admission_sensor` launches outside prod):
each step in its own process, as on a cluster each is its own pod."""
release_job = next(j for j in kind_jobs if j.name == JOB_FOR_WORKLOAD["released_model"])
release_map_job = next(j for j in kind_jobs if j.name == JOB_FOR_WORKLOAD["released_map"])
workload_jobs: list[Any] = [*kind_jobs, retention_sweep]
workload_schedules: list[dg.ScheduleDefinition] = [retention_sweep_schedule]
