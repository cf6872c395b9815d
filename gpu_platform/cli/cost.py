"""`cost` commands: build the cost models for a day and report on them.

`gpu_platform.cli.app` attaches this group to `gpu-platform`.
"""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING

import click

from gpu_platform.cli.common import WarehouseBusyExit, policy_option, policy_or_exit

if TYPE_CHECKING:
    import duckdb

    from gpu_platform.finops.sqlmodels.runner import Project

POLICIES = click.Choice(["proportional", "even", "none"])


def _day(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    try:
        return date.fromisoformat(value).isoformat()
    except ValueError as e:
        raise click.BadParameter(f"{value!r} is not YYYY-MM-DD") from e


def _project(path: str | None) -> Project:
    from gpu_platform.finops.sqlmodels import default_project_path
    from gpu_platform.finops.sqlmodels.runner import Project

    return Project.load(Path(path) if path else default_project_path())


warehouse_option = click.option(
    "--warehouse",
    type=click.Path(dir_okay=False),
    default=None,
    help="DuckDB file (default: $GPU_PLATFORM_WAREHOUSE, else $GPU_PLATFORM_HOME/warehouse.duckdb).",
)


def _warehouse(value: str | None) -> str:
    from gpu_platform.paths import default_warehouse

    return str(Path(value) if value else default_warehouse())


@click.group()
def cost() -> None:
    """GPU cost models: build a day, report unit costs and chargeback, export it as FOCUS."""


@cost.command()
@click.option("--day", required=True, callback=_day, help="UTC day, YYYY-MM-DD.")
@click.option(
    "--until",
    default=None,
    callback=lambda c, p, v: _day(c, p, v) if v else None,
    help="Last day of a backfill (inclusive): build --day..--until in one pass.",
)
@warehouse_option
@click.option(
    "--select", "select", multiple=True, help="Models to build: name, +name (ancestors), name+ (descendants)."
)
@click.option(
    "--idle-policy",
    type=POLICIES,
    default=None,
    help="How idle GPU cost is distributed (default: project.yml).",
)
@click.option("--shared-policy", type=POLICIES, default=None, help="How shared platform cost is distributed.")
@click.option(
    "--project",
    "project_path",
    type=click.Path(file_okay=False, exists=True),
    default=None,
    help="dbt_like_sql directory (default: the repository's).",
)
@click.option(
    "--unreconciled-threshold",
    type=click.FloatRange(0, 1),
    default=None,
    help="Share of the day's cost the (unreconciled) row may hold before the blocking check fails "
    "(default: project.yml, 0.01).",
)
@click.option("--no-tests", is_flag=True, help="Skip the data tests.")
@policy_option
def build(
    day: str,
    until: str | None,
    warehouse: str | None,
    select: tuple[str, ...],
    idle_policy: str | None,
    shared_policy: str | None,
    project_path: str | None,
    unreconciled_threshold: float | None,
    no_tests: bool,
    policy_path: str | None,
) -> None:
    """Build the cost models for DAY (or DAY..UNTIL; idempotent) and run their data tests.

    The scorecards and capacity signals take their thresholds and scale from the policy."""
    import duckdb

    from gpu_platform.finops.sqlmodels.runner import ProjectError
    from gpu_platform.finops.warehouse import WarehouseBusy
    from gpu_platform.finops.warehouse import connect as warehouse_connect
    from gpu_platform.observe.scorecards import model_vars

    warehouse = _warehouse(warehouse)
    signal_vars = model_vars(policy_or_exit(policy_path))
    try:
        project = _project(project_path)
        variables: dict[str, object] = {
            **signal_vars,
            **{k: v for k, v in (("idle_policy", idle_policy), ("shared_policy", shared_policy)) if v},
        }
        if unreconciled_threshold is not None:
            variables["unreconciled_threshold"] = unreconciled_threshold
        Path(warehouse).parent.mkdir(parents=True, exist_ok=True)
        con = warehouse_connect(warehouse, read_only=False)
        try:
            _build(con, project, day, until, select, variables, no_tests)
        finally:
            con.close()
    except WarehouseBusy as e:
        raise WarehouseBusyExit(str(e)) from None  # a writer: one line, exit 2
    except (ProjectError, duckdb.Error) as e:
        raise click.ClickException(str(e)) from e


def _build(
    con: duckdb.DuckDBPyConnection,
    project: Project,
    day: str,
    until: str | None,
    select: tuple[str, ...],
    variables: dict[str, object],
    no_tests: bool,
) -> None:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from gpu_platform.finops.sqlmodels.raw import ensure_raw_tables

    ensure_raw_tables(con)
    with Progress(
        TextColumn("{task.description:<32}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        transient=False,
    ) as bar:
        total = len([n for n in project.select(select) if not project.models[n].is_ephemeral])
        task = bar.add_task("building", total=total)

        def progress(name: str, i: int, total: int) -> None:
            bar.update(task, completed=i, description=name)

        days = (day, until or day)
        results = project.build(con, days=days, select=select or None, progress=progress, variables=variables)
        bar.update(task, completed=len(results), description="done")
    rows = sum(r.rows for r in results)
    span = day if days[0] == days[1] else f"{days[0]}..{days[1]}"
    click.echo(
        f"built {len(results)} models for {span}: {rows} rows in {sum(r.seconds for r in results):.2f}s"
    )
    if not no_tests:
        tests = project.run_tests(con, days=days, select=select or None, variables=variables)
        failed = [t for t in tests if t.failures and not t.warn]
        flagged = [t for t in tests if t.failures and t.warn]
        for t in failed + flagged:
            kind = "WARN (day built, flagged)" if t.warn else "FAIL (blocking)" if t.blocking else "FAIL"
            click.echo(f"{kind} {t.model}.{t.test_name}: {t.failures} row(s)\n  {t.sql}", err=True)
            for line in t.describe().splitlines():
                click.echo(f"    {line}", err=True)
        warned = f", {len(flagged)} flagged" if flagged else ""
        click.echo(f"data tests: {len(tests) - len(failed) - len(flagged)} passed, {len(failed)} failed{warned}")
        # a flag (severity: warn, e.g. unreconciled money over the threshold) leaves the day built
        # and shown; only a failed invariant stops (docs/finops.md, "What blocks a day")
        if failed:
            raise SystemExit(1)


@cost.command()
@click.option("--day", required=True, callback=_day, help="UTC day, YYYY-MM-DD.")
@warehouse_option
@click.option("--format", "fmt", type=click.Choice(["json", "table"]), default="table", show_default=True)
@click.option(
    "--fail-on-stale",
    is_flag=True,
    help="Exit 1 when the day's figures are stale (a model's last build failed, or feeds came in after it).",
)
@policy_option
@click.option(
    "--ledger",
    "ledger_url",
    default=None,
    help="Ledger URL for the gate's side of the budgets (default: $GPU_PLATFORM_LEDGER_URL or sqlite under "
    "$GPU_PLATFORM_HOME, when it exists).",
)
def report(
    day: str, warehouse: str | None, fmt: str, fail_on_stale: bool, policy_path: str | None, ledger_url: str | None
) -> None:
    """Billed, allocated, idle, shared and unreconciled cost, exceptions, unit costs and chargeback for DAY.

    When the day is stale (its last build of a model failed, or its feeds were ingested after its
    last successful build) the figures are those of the last successful build: a WARNING on
    stderr says why (JSON: `stale` with the failed models and their errors; null when current).
    The exit status stays 0 unless --fail-on-stale is given."""
    from gpu_platform.finops.sqlmodels.report import cost_report, to_jsonable
    from gpu_platform.finops.warehouse import WarehouseBusy
    from gpu_platform.finops.warehouse import connect as warehouse_connect

    warehouse = _warehouse(warehouse)
    if not Path(warehouse).exists():
        raise click.ClickException(
            f"{warehouse}: no warehouse there (set GPU_PLATFORM_HOME or GPU_PLATFORM_WAREHOUSE, or pass --warehouse, "
            f"to the one your feeds were ingested into; a new one is filled by `gpu-platform feeds ingest --day {day} "
            f"...` and then `gpu-platform cost build --day {day}`)"
        )
    try:
        con = warehouse_connect(warehouse)
    except WarehouseBusy as exc:
        raise WarehouseBusyExit(str(exc)) from None  # a reader too: one line, exit 2
    try:
        data = cost_report(con, day)
        data["budgets"], data["budget_rule"] = _budgets(con, day, policy_path, ledger_url)
    finally:
        con.close()
    stale = data.get("stale")
    if fmt == "json":
        click.echo(json.dumps(to_jsonable(data), indent=2))
        _warn_incomplete(data)
        if stale:
            _warn_stale(stale)
            if fail_on_stale:
                raise SystemExit(1)
        return
    from rich.table import Table

    from gpu_platform.cli.common import make_console, print_table

    console = make_console()
    sections = (
        (
            "Totals",
            data["totals"],
            [
                "currency",
                "billed",
                "effective",
                "allocated",
                "bypass",
                "idle",
                "shared",
                "cpu_nodes",
                "storage",
                "unmounted_volumes",
                "tax",
                "credit",
                "unused_commitment",
                "unreconciled",
                "price_book",
                "chargeback_total",
                "quarantined_billed",
                "quarantined_effective",
                "rounding",
                "difference",
            ],
        ),
        (
            "Quarantined (money in no total above: per file, reason and currency)",
            data["quarantined"],
            ["file", "reason", "currency", "rows", "billed", "effective", "counted"],
        ),
        (
            "Price-book nodes (no bill: on-prem hardware, or a bill not in yet)",
            data["price_book_nodes"],
            ["hostname", "gpus", "model_name", "currency", "price_per_gpu_hour", "node_cost", "basis"],
        ),
        (
            "Exceptions",
            data["exceptions"],
            ["kind", "treatment", "currency", "amount", "hostname", "pod", "reason"],
        ),
        (
            "Unit costs (units complete by the day, at their lifetime cost)",
            data["unit_costs"],
            ["unit", "currency", "cost", "units", "cost_per_unit", "cost_without_units"],
        ),
        (
            "Inference services (the day's replica cost per 1,000 requests; idle: held, not busy)",
            data.get("services", []),
            ["service", "team", "currency", "replica_hours", "allocated_cost", "idle_cost", "requests",
             "cost_per_1k_requests", "reason"],
        ),
        (
            "Unpriced requests (GPU time no price covers: in no unit cost)",
            data["unpriced_requests"],
            ["request_id", "team", "workload", "unpriced_gpu_hours", "reason"],
        ),
        (
            "Month-end forecast (month to date + pending queue + run rate)",
            data["forecast"],
            ["team", "lane", "currency", "month_to_date_cost", "pending_gpu_hours", "pending_cost", "run_rate_cost",
             "forecast_month_end_cost"],
        ),
        (
            "Budget burn (forecast against lane and team budgets)",
            data["budget_burn"],
            ["scope", "subject", "currency", "month_budget", "month_to_date_cost", "bypass_cost",
             "forecast_month_end_cost", "status", "days_left", "projected_exceed_day"],
        ),
        (
            "Budgets: the gate's (reservations at admission, which admits) beside FinOps' (measured spend)",
            data["budgets"],
            ["scope", "subject", "currency", "admits", "gate_budget", "gate_reserved", "gate_remaining",
             "month_budget", "month_to_date_cost", "finops_left", "finops_status"],
        ),
        (
            "Chargeback by team",
            data["chargeback_by_team"],
            ["team", "cost_center", "currency", "allocated_cost", "bypass_cost", "cpu_cost", "storage_cost", "idle_cost",
             "shared_cost",
             "tax_cost", "credit_cost", "total_cost"],
        ),
    )
    for title, rows, cols in sections:
        table = Table(title=f"{title} — {day}")
        for c in cols:
            table.add_column(
                c,
                justify="left"
                if c
                in (
                    "currency",
                    "unit",
                    "team",
                    "cost_center",
                    "kind",
                    "treatment",
                    "hostname",
                    "model_name",
                    "lane",
                    "scope",
                    "subject",
                    "status",
                    "basis",
                    "pod",
                    "reason",
                    "request_id",
                    "workload",
                    "file",
                    "service",
                )
                else "right",
            )
        for r in to_jsonable(rows):
            table.add_row(*(str(r.get(c, "")) for c in cols))
        print_table(console, table)
    _warn_incomplete(data)
    if stale:
        _warn_stale(stale)  # below the tables, where the reader ends
        if fail_on_stale:
            raise SystemExit(1)


@cost.command()
@click.option("--day", required=True, callback=_day, help="UTC day, YYYY-MM-DD.")
@warehouse_option
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["focus", "csv", "parquet"]),
    default="focus",
    show_default=True,
    help="focus: FOCUS 1.2 rows as CSV; parquet: the same rows as Parquet; csv: the same rows in our own "
    "snake_case columns.",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, writable=True),
    default=None,
    help="File to write (default: stdout; parquet needs --out or a stdout that is not a terminal).",
)
def export(day: str, warehouse: str | None, fmt: str, out: str | None) -> None:
    """The day's allocation as FOCUS 1.2 rows: EffectiveCost per team and request, its parts in
    x_ columns, Tags team / cost_center / lane / request / release, and reconciling lines so the
    rows add up to the day's bill (docs/finops.md, "FOCUS export").

    Exit 2 when the day is not built or its rows fail the FOCUS checks (every problem listed)."""
    import sys

    from gpu_platform.finops.export import ExportError, focus_export, write_export
    from gpu_platform.finops.warehouse import WarehouseBusy
    from gpu_platform.finops.warehouse import connect as warehouse_connect

    warehouse = _warehouse(warehouse)
    if not Path(warehouse).exists():
        raise click.UsageError(
            f"{warehouse}: no warehouse there: {day} is not built (run `gpu-platform cost build --day {day}`, "
            "or pass --warehouse)"
        )
    if fmt == "parquet" and out is None and sys.stdout.isatty():
        raise click.UsageError("--format parquet writes binary: give --out FILE or redirect stdout")
    try:
        con = warehouse_connect(warehouse)
    except WarehouseBusy as exc:
        raise WarehouseBusyExit(str(exc)) from None
    from gpu_platform.finops.sqlmodels.report import quarantined_money, staleness

    try:
        data = focus_export(con, day)
        stale, q = staleness(con, day), quarantined_money(con, day)
    except ExportError as exc:
        raise click.UsageError(str(exc)) from None
    finally:
        con.close()
    # the rows are written all the same (they add up to what was built); what a reader should know
    _warn_incomplete({"day": day, "incomplete": q["incomplete"]})
    if stale:
        _warn_stale(stale)
    if out is None:
        write_export(data, fmt, sys.stdout.buffer)
        sys.stdout.buffer.flush()
        return
    with open(out, "wb") as f:
        write_export(data, fmt, f)
    sums = ", ".join(f"{cur} billed {t['billed']:.2f} effective {t['effective']:.2f}"
                     for cur, t in sorted(data.totals.items()))
    click.echo(f"wrote {len(data.rows)} rows for {day} to {out} ({sums})", err=True)


def _budgets(con: duckdb.DuckDBPyConnection, day: str, policy_path: str | None, ledger_url: str | None):
    """(the budgets side by side, the rule that says which admits). The gate's side needs the ledger
    and is today's: shown for a day of the current budget period only (None otherwise, or without
    a ledger); FinOps' is budget_burn of the day."""
    from datetime import UTC, datetime

    from gpu_platform.finops.budgets import RULE, budget_rows
    from gpu_platform.gate.tick import budget_period_start
    from gpu_platform.requests.ledger import Ledger, default_ledger_url

    pol = policy_or_exit(policy_path)
    url = ledger_url or default_ledger_url()
    reserved = since = None
    since_now = budget_period_start(pol.budget_period, datetime.now(UTC))
    exists = not url.startswith("sqlite") or Path(url.split("///", 1)[-1]).exists()
    if exists and date.fromisoformat(day) >= since_now.date():
        since = since_now
        reserved = Ledger(url).reserved_by_lane(since)
    return budget_rows(pol, reserved, since, con, date.fromisoformat(day)), RULE


def _warn_incomplete(data: dict) -> None:
    """The incomplete warning on stderr (money the day's loads quarantined is in no total) and
    the day's flags (unreconciled money over the threshold)."""
    for flag in data.get("flags") or []:
        click.echo(f"WARNING: {data['day']} is flagged: {flag['message']}", err=True)
    if data.get("incomplete"):
        click.echo(f"WARNING: the figures for {data['day']} are incomplete", err=True)
        for reason in data["incomplete"]:
            click.echo(f"  {reason}", err=True)


def _warn_stale(stale: dict) -> None:
    """The stale warning on stderr, one line per reason and failed model (errors cut, one line each)."""
    click.echo(f"WARNING: the figures for {stale['day']} are stale", err=True)
    for reason in stale["reasons"]:
        click.echo(f"  - {reason}", err=True)
    for f in stale["failed_models"]:
        error = " ".join(str(f["error"] or "").split())[:300]
        when = f["failed_at"].strftime("%Y-%m-%d %H:%M:%S") if f["failed_at"] else "?"
        click.echo(f"  - {f['model']} failed at {when} UTC: {error}", err=True)
    click.echo(f"  rebuild with: {stale['rebuild']}", err=True)
