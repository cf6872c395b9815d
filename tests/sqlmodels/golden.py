"""Golden snapshots of every SQL model's rows, to prove that a change to how the models are written
(macros, a split CTE) leaves what they compute unchanged.

Each dataset loads raw tables the way the tests do, builds every model of a project and records,
per stored model, its columns, its row count and one digest of its rows sorted (floating-point
values to 8 decimals and 9 significant digits, so a different summation order in DuckDB's threads
does not count), and per data test its failing rows. `test_golden.py` builds the working tree's project
on the same datasets and compares.

Regenerate on purpose only, when a change is meant to change rows (say which in its commit)::

    .venv/bin/python -m tests.sqlmodels.golden              # the working tree's dbt_like_sql/
    .venv/bin/python -m tests.sqlmodels.golden --rev e050b86  # the project as of a commit

The first snapshots were made from the SQL before the models used macros: the models that use
them now as of e050b86, the other models as of the commit (so the test proved the rewrite kept
every row). A later change that means to change rows regenerates them from the working tree.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb

from gpu_platform.finops.sqlmodels import Project, default_project_path

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "fixtures" / "sqlmodels_golden"
FEEDS = ROOT / "tests" / "fixtures" / "feeds"
DEMO_DAYS = [date(2026, 11, 1) + timedelta(days=n) for n in range(3)]


@dataclass(frozen=True)
class Dataset:
    name: str
    description: str
    load: Callable[[Path, Path], None]
    """load(warehouse, scratch): fill the raw tables of a fresh DuckDB file (scratch: a folder for
    feed files). In the rows' text its path is replaced by `<scratch>`, and the checkout's by
    `<root>` (a file's source is its absolute path), so a snapshot holds wherever it is made."""
    days: tuple[date, date]


def _model_vars() -> dict[str, Any]:
    from gpu_platform.observe.scorecards import model_vars
    from gpu_platform.policy import load_policy

    return model_vars(load_policy(None))


def _load_scenario(warehouse: Path, _: Path) -> None:
    from tests.sqlmodels.finops_scenario import load_scenario

    with duckdb.connect(str(warehouse)) as con:
        load_scenario(con)


def _load_feed_samples(warehouse: Path, _: Path) -> None:
    with duckdb.connect(str(warehouse)) as con:
        _feed_samples(con)


def _feed_samples(con: duckdb.DuckDBPyConnection) -> None:
    from gpu_platform.finops.feeds import dcgm, focus, load
    from gpu_platform.finops.sqlmodels import ensure_raw_tables, load_ledger_snapshot
    from tests.sqlmodels.test_feeds_integration import R42, R42_POD

    day = date(2024, 9, 3)
    ensure_raw_tables(con)
    for name in ("dcgm-variant-released.txt", "dcgm-metrics-k8s-unassigned.txt"):
        batch = dcgm.parse_text((FEEDS / name).read_bytes(), source=name,
                                scraped_at=datetime(2024, 9, 3, 12, tzinfo=UTC))
        load.load_batch(con, "dcgm", batch, source=name, day=day)
    for name in ("focus-1.0-sample.csv",):
        load.load_batch(con, "focus", focus.load_focus(FEEDS / name, source=name), source=name, day=day)
    load_ledger_snapshot(con, [R42], [R42_POD])


def _load_whole_bill(warehouse: Path, scratch: Path) -> None:
    """As tests/finops/test_whole_bill.py: `gpu-platform feeds ingest` of the 28th (and the 27th, the
    correction's day), then the ledger's requests and pods."""
    from click.testing import CliRunner

    from gpu_platform.cli import main as cli
    from gpu_platform.finops.sqlmodels import load_ledger_snapshot
    from gpu_platform.finops.sqlmodels.raw import load_scorecard_snapshot
    from tests.finops import test_whole_bill as wb

    env = {"GPU_PLATFORM_HOME": str(scratch), "GPU_PLATFORM_WAREHOUSE": str(warehouse)}
    parquet = scratch / "dcgm.parquet"
    wb.dcgm_history(parquet)
    # an inventory file's snapshot time is its mtime: copies with one fixed mtime, not the checkout's
    fixed = datetime(2026, 11, 28, 23, 55, tzinfo=UTC).timestamp()
    files = {}
    for name in (wb.BILL.name, "kubectl-get-nodes.json", "kubectl-get-pods.json", "kubectl-get-pv.json"):
        files[name] = scratch / name
        shutil.copyfile(wb.FIX / name, files[name])
        os.utime(files[name], (fixed, fixed))
    bill = str(files[wb.BILL.name])
    for args in (["--day", wb.DAY, "--focus", bill, "--dcgm", str(parquet),
                  "--nodes", str(files["kubectl-get-nodes.json"]), "--pods", str(files["kubectl-get-pods.json"]),
                  "--volumes", str(files["kubectl-get-pv.json"])],
                 ["--day", wb.PREV, "--focus", bill]):
        res = CliRunner().invoke(cli, ["feeds", "ingest", *args, "--warehouse", str(warehouse)], env=env)
        if res.exit_code != 0:
            raise RuntimeError(f"feeds ingest {' '.join(args)}: {res.output}")
    with duckdb.connect(str(warehouse)) as con:
        load_ledger_snapshot(con, wb.REQUESTS, wb.LEDGER_PODS)
        load_scorecard_snapshot(con, [], wb.OWNERS, [])


def _load_demo(warehouse: Path, scratch: Path) -> None:
    from gpu_platform.demo import history as demo_history
    from gpu_platform.finops.feeds import ingest
    from gpu_platform.finops.snapshot import ledger_snapshot, lineage_edges, scorecard_snapshot
    from gpu_platform.finops.sqlmodels import ensure_raw_tables, load_ledger_snapshot
    from gpu_platform.finops.sqlmodels.raw import load_scorecard_snapshot
    from gpu_platform.lineage.graph import LineageStore
    from gpu_platform.policy import load_policy
    from gpu_platform.requests.ledger import Ledger

    policy = load_policy(None)
    history = demo_history.generate(policy, DEMO_DAYS)
    ledger = Ledger(f"sqlite:///{scratch / 'ledger.db'}")
    demo_history.write_ledger(history, ledger, policy)
    demo_history.write_feeds(history, scratch / "feeds", policy)
    # an inventory file's snapshot time is its mtime: the same for every run
    fixed = datetime(DEMO_DAYS[-1].year, DEMO_DAYS[-1].month, DEMO_DAYS[-1].day, 23, 55, tzinfo=UTC).timestamp()
    for f in (scratch / "feeds").rglob("*"):
        if f.is_file():
            os.utime(f, (fixed, fixed))
    with duckdb.connect(str(warehouse)) as con:
        ensure_raw_tables(con)
        for day in DEMO_DAYS:
            ingest.load_dcgm_day(con, scratch / "feeds", day, [])
            ingest.load_focus_day(con, scratch / "feeds", day)
            for kind in ("nodes", "pods"):
                ingest.load_inventory_day(con, scratch / "feeds", day, kind)
        store = LineageStore(ledger.engine)
        load_ledger_snapshot(con, *ledger_snapshot(ledger, policy, store), lineage_edges(store))
        load_scorecard_snapshot(con, *scorecard_snapshot(ledger, store))
    ledger.engine.dispose()


DATASETS = (
    Dataset("scenario", "tests/sqlmodels/finops_scenario.py: two nodes, seven requests, one day",
            _load_scenario, (date(2026, 11, 28), date(2026, 11, 28))),
    Dataset("feed_samples", "tests/fixtures/feeds: dcgm-exporter text and the FOCUS samples, one day",
            _load_feed_samples, (date(2024, 9, 3), date(2024, 9, 3))),
    Dataset("whole_bill", "tests/fixtures/finops/whole-bill: a whole AWS-shaped FOCUS day, nodes, pods, volumes",
            _load_whole_bill, (date(2026, 11, 27), date(2026, 11, 28))),
    Dataset("demo", "gpu_platform.demo.history: the demo's generated history, three days (seed 7)",
            _load_demo, (DEMO_DAYS[0], DEMO_DAYS[-1])),
)


def _row_text(con: duckdb.DuckDBPyConnection, table: str) -> tuple[list[list[str]], str]:
    """The table's columns ([name, type]) and one SQL expression rendering a row as text."""
    cols = [[r[0], str(r[1])] for r in con.execute(f"describe {table}").fetchall()]
    parts = []
    for name, sql_type in cols:
        col = f'"{name}"'
        if sql_type in ("DOUBLE", "FLOAT", "REAL"):
            # a sum that should be 0 comes out as +-1e-17 by the order DuckDB's threads add in
            text = f"printf('%.9g', round({col}, 8) + 0.0)"
        else:
            text = f"replace(replace(cast({col} as varchar), $scratch, '<scratch>'), $root, '<root>')"
        parts.append(f"coalesce({text}, '<null>')")
    return cols, " || chr(31) || ".join(parts) if parts else "''"


def snapshot(project: Project, dataset: Dataset, scratch: Path) -> dict[str, Any]:
    """Every stored model's columns, rows and digest, and every data test's failures, after
    building `project` on `dataset` in a fresh warehouse."""
    warehouse = scratch / "warehouse.duckdb"
    dataset.load(warehouse, scratch)
    con = duckdb.connect(str(warehouse))
    try:
        variables = _model_vars()
        project.build(con, days=dataset.days, variables=variables)
        models: dict[str, Any] = {}
        for name in project.order:
            m = project.models[name]
            if m.is_ephemeral:
                continue
            cols, row = _row_text(con, name)
            rows, digest = con.execute(
                f"select count(*), md5(coalesce(string_agg(r, chr(30) order by r), '')) "
                f"from (select {row} as r from {name})",
                {"scratch": str(scratch), "root": str(ROOT)} if "$scratch" in row else {}).fetchall()[0]
            models[name] = {"columns": cols, "rows": int(rows), "digest": digest}
        tests = {f"{t.model}.{t.test_name}": t.failures
                 for t in project.run_tests(con, days=dataset.days, variables=variables)}
        return {"dataset": dataset.name, "description": dataset.description,
                "days": [str(d) for d in dataset.days], "models": models, "tests": tests}
    finally:
        con.close()


def project_at(rev: str | None, into: Path) -> Path:
    """The SQL project of the working tree (rev None) or of commit `rev` (extracted into `into`)."""
    if rev is None:
        return default_project_path()
    data = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "dbt_like_sql"],
                          capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    return into / "dbt_like_sql"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rev", help="git commit whose dbt_like_sql/ to snapshot (default: the working tree)")
    parser.add_argument("--only", action="append", choices=[d.name for d in DATASETS], help="one dataset")
    args = parser.parse_args(argv)
    GOLDEN.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        project = Project.load(project_at(args.rev, Path(tmp)))
        for ds in DATASETS:
            if args.only and ds.name not in args.only:
                continue
            scratch = Path(tmp) / ds.name
            scratch.mkdir()
            snap = snapshot(project, ds, scratch)
            out = GOLDEN / f"{ds.name}.json"
            out.write_text(json.dumps(snap, indent=1, sort_keys=True) + "\n")
            digest = hashlib.sha256(out.read_bytes()).hexdigest()[:12]
            print(f"{out.relative_to(ROOT)}: {len(snap['models'])} models, "
                  f"{sum(m['rows'] for m in snap['models'].values())} rows ({digest})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
