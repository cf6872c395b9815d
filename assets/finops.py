"""FinOps assets: one Dagster asset per dbt_like_sql model, one asset check per data test.

Thin by design: each asset asks the `warehouse` resource to build its model for the partition
and reports rows, GPU-hours, utilization and cost as metadata. Dependencies come from the
models' `ref()`s; staging models depend on the raw ingestion assets (`raw_dcgm_samples`,
`raw_focus_billing`, `raw_ledger_snapshot`) named in dbt_like_sql/project.yml.
"""

import warnings
from datetime import UTC, timedelta

import dagster as dg

from assets.scorecards import signal_check_results, signal_check_specs
from gpu_platform.finops.sqlmodels import Model, Project, default_project_path
from gpu_platform.finops.sqlmodels.report import markdown_table
from gpu_platform.gate.instance_config import (
    TODAY_PRIORITY,
    WAREHOUSE_POOL,  # the pool of every warehouse writer (limit 1)
)
from gpu_platform.paths import first_data_day
from resources.warehouse import Warehouse

FINOPS_GROUP = "finops"
INGEST_GROUP = "finops_raw"

finops_daily_partitions = dg.DailyPartitionsDefinition(start_date=first_data_day(), timezone="UTC", end_offset=1)
"""UTC days from the first day with data (`GPU_PLATFORM_FIRST_DAY`, else the demo's first seeded
day, else 2026-01-01; read when Dagster loads the code) up to and including today: today's
partition is "today so far" (rebuilt by `finops_today_sensor` after finished runs), the daily
schedule finalises yesterday."""


def _check_name(model: Model, test_name: str, asset: str) -> str:
    # an ephemeral model's tests run on its child's asset, named after the model they test
    return test_name if model.name == asset else f"{model.name}__{test_name}"


def _check_specs(model: Model, asset: str) -> list[dg.AssetCheckSpec]:
    return [
        dg.AssetCheckSpec(name=_check_name(model, t.name, asset), asset=dg.AssetKey([asset]),
                          blocking=t.blocking,
                          description=f"{model.name}: {t.kind} (failing rows = 0)"
                          f"{' - blocking' if t.blocking else ''}\n\n{t.sql}")
        for t in model.tests
    ]


def _ephemeral_owner(project: Project) -> dict[str, str]:
    """Ephemeral model -> the asset that runs its tests: its first stored child in build order."""
    owner: dict[str, str] = {}
    for name in project.order:
        m = project.models[name]
        if m.is_ephemeral:
            continue
        for r in m.refs:
            if project.models[r].is_ephemeral:
                owner.setdefault(r, name)
    return owner


def _upstream_keys(model: Model, project: Project) -> list[dg.AssetKey]:
    """Asset keys a model reads: stored refs, relationship-test parents, raw sources; through
    ephemeral models to what they read."""
    keys: list[dg.AssetKey] = []
    for r in model.refs + model.test_refs:
        parent = project.models[r]
        keys += _upstream_keys(parent, project) if parent.is_ephemeral else [dg.AssetKey([r])]
    keys += [dg.AssetKey([project.sources.get(s, s)]) for s in model.sources]
    return list(dict.fromkeys(keys))


def _figures(metrics: dict) -> dict[str, dg.MetadataValue]:
    return {
        key: dg.MetadataValue.md(value) if key.endswith("_md")
        else dg.MetadataValue.text(value) if isinstance(value, str)  # e.g. a unit cost's as_of_day
        else dg.MetadataValue.float(float(value))
        for key, value in metrics.items()
    }


def _metadata(build) -> dict[str, dg.MetadataValue]:
    """The whole step's metadata: rows and figures of everything it built (an unpartitioned model,
    or one day), and the build time."""
    return {
        **_figures(build.metrics),  # first: a unit cost's as_of_day and the day's figures lead
        "rows": dg.MetadataValue.int(build.rows),
        "seconds": dg.MetadataValue.float(round(build.result.seconds, 3)),
    }


def add_day_metadata(context: dg.AssetExecutionContext, build) -> dict[str, dg.MetadataValue]:
    """Each daily partition of a run gets its own day's rows and figures (`add_asset_metadata`
    per partition key), however many days one run builds, then the build time and how many days
    it built (the same on every partition of the run); nothing is left for the whole step."""
    keys = context.partition_keys
    for key in keys:
        day = build.day_metrics.get(key, {"rows": 0})
        # the model's figures lead, in their order (chargeback's per-team table first), then rows and
        # the run's entries (on each partition: a step's own metadata would come before them)
        context.add_asset_metadata(
            {**_figures({k: v for k, v in day.items() if k != "rows"}),
             "rows": dg.MetadataValue.int(int(day.get("rows", 0))),
             "seconds": dg.MetadataValue.float(round(build.result.seconds, 3)),
             "days_in_run": dg.MetadataValue.int(len(keys))},
            partition_key=key,
        )
    return {}


def build_finops_asset(model: Model, project: Project, ephemeral: tuple[Model, ...] = ()) -> dg.AssetsDefinition:
    """The asset for one model: daily-partitioned when the model is `partition_by: day`, built
    for a whole partition range in one step on backfills. `ephemeral`: inlined models whose
    tests this asset runs."""
    partitioned = model.partition_by is not None
    specs = _check_specs(model, model.name) + [s for e in ephemeral for s in _check_specs(e, model.name)]
    specs += signal_check_specs(model.name)
    names = {(e.name, t.name): _check_name(e, t.name, model.name) for e in (model, *ephemeral) for t in e.tests}

    def _asset(context: dg.AssetExecutionContext, warehouse: Warehouse):
        days = None
        if partitioned:
            keys = context.partition_key_range
            days = (keys.start, keys.end)
        build = warehouse.build_partition(model.name, days=days, with_tests_of=tuple(e.name for e in ephemeral))
        yield dg.MaterializeResult(metadata=add_day_metadata(context, build) if partitioned else _metadata(build))
        for t in build.tests:
            metadata = {"failing_rows": dg.MetadataValue.int(t.failures), "sql": dg.MetadataValue.md(f"```sql\n{t.sql}\n```")}
            if t.details:
                metadata["details"] = dg.MetadataValue.md(markdown_table(list(t.details), list(t.details[0])))
            yield dg.AssetCheckResult(
                check_name=names[(t.model, t.test_name)],
                passed=t.passed,
                # ERROR: a failing blocking check stops the assets downstream of this one; WARN: a
                # flag on a day that is built and shown (severity: warn in the yml)
                severity=dg.AssetCheckSeverity.WARN if t.warn else dg.AssetCheckSeverity.ERROR,
                description=(t.describe() or None) if not t.passed else None,
                metadata=metadata,
            )
        if days is not None:
            yield from signal_check_results(model.name, warehouse, days)

    with warnings.catch_warnings():
        # BackfillPolicy is beta in this Dagster; single-run backfills are what DuckDB wants
        warnings.simplefilter("ignore", dg.BetaWarning)
        return dg.asset(
            name=model.name,
            deps=_upstream_keys(model, project),
            partitions_def=finops_daily_partitions if partitioned else None,
            backfill_policy=dg.BackfillPolicy.single_run() if partitioned else None,
            group_name=FINOPS_GROUP,
            kinds={"duckdb"},
            pool=WAREHOUSE_POOL,
            description=f"{model.description}\n\nGrain: {model.grain}.",
            check_specs=specs,
            metadata={"grain": model.grain, "sql_path": str(model.path.relative_to(project.path.parent))},
        )(_asset)


def build_finops_definitions(project: Project | None = None):
    """(assets, check specs, jobs, schedules) for a project (default: the repository's dbt_like_sql)."""
    project = project or Project.load(default_project_path())
    owner = _ephemeral_owner(project)
    assets = [
        build_finops_asset(
            project.models[name], project,
            tuple(project.models[e] for e, child in owner.items() if child == name),
        )
        for name in project.order if not project.models[name].is_ephemeral
    ]
    checks = [spec for a in assets for spec in a.check_specs]
    job = dg.define_asset_job(
        "finops_daily",
        # plus the raw ingestion assets (assets/ingest.py, group finops_raw): the day is ingested,
        # then priced; by group so this module needs no import of them
        selection=dg.AssetSelection.assets(*assets) | dg.AssetSelection.groups(INGEST_GROUP),
        partitions_def=finops_daily_partitions,
        # every step is a warehouse writer in a pool of one slot: the steps run one after the other
        # anyway, so a process per step (the multiprocess executor) only adds its start-up
        executor_def=dg.in_process_executor,
        tags=TODAY_PRIORITY,
        description="Ingest one day's feeds and the ledger snapshot, then rebuild every cost model for it "
        "(unpartitioned marts are rebuilt in full).",
    )

    @dg.schedule(cron_schedule="0 2 * * *", job=job, execution_timezone="UTC", name="finops_daily_schedule",
                 default_status=dg.DefaultScheduleStatus.RUNNING,
                 description="02:00 UTC: ingest and price the day that just ended (yesterday), final.")
    def finops_daily_schedule(context: dg.ScheduleEvaluationContext):
        yesterday = (context.scheduled_execution_time.astimezone(UTC) - timedelta(days=1)).date().isoformat()
        return dg.RunRequest(run_key=f"finops-final-{yesterday}", partition_key=yesterday)

    return assets, checks, [job], [finops_daily_schedule]


finops_assets, finops_checks, finops_jobs, finops_schedules = build_finops_definitions()
"""finops_checks holds the AssetCheckSpecs already attached to finops_assets (they run with each
build); pass finops_assets to Definitions(assets=...), not finops_checks to asset_checks=."""
