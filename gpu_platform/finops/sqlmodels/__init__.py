"""dbt-like SQL models for GPU cost: a small runner over DuckDB (no Dagster here).
May import `finops/feeds/` (the raw tables' DDL) and `safeload/`; the scorecard vars are passed in, not imported.
Modules, one job each: `runner` (Project: load, select, build, data tests; re-exports the rest),
`model` (dataclasses, errors), `templates` (Jinja rendering, the project's macros), `datatests`
(a model's yml and its tests' SQL), `warehouse` (build log, build settings), `raw` (the raw
tables and snapshots loaded into them), `report` (the cost report's queries).
"""

from importlib.resources import files
from pathlib import Path

from gpu_platform.finops.sqlmodels.raw import ensure_raw_tables, load_ledger_snapshot
from gpu_platform.finops.sqlmodels.runner import (
    DataTest,
    Model,
    ModelResult,
    Project,
    ProjectError,
    TestResult,
    render,
)


def default_project_path() -> Path:
    """The SQL project shipped in this package (`dbt_like_sql/` beside this module: in a checkout a
    link to the top-level `dbt_like_sql/`, in an installed wheel its copy). Another project is
    configured with `cost build --project DIR` or the warehouse resource's `project_dir`."""
    return Path(str(files(__name__) / "dbt_like_sql")).resolve()


__all__ = [
    "DataTest", "Model", "ModelResult", "Project", "ProjectError", "TestResult", "default_project_path",
    "ensure_raw_tables", "load_ledger_snapshot", "render",
]
