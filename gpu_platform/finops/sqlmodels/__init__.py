"""dbt-like SQL models for GPU cost: a small runner over DuckDB (no Dagster here).
May import `finops/feeds/` (the raw tables' DDL) and `safeload/`; the scorecard vars are passed in, not imported.
"""

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
    """The repository's `dbt_like_sql/` directory."""
    return Path(__file__).resolve().parents[3] / "dbt_like_sql"


__all__ = [
    "DataTest", "Model", "ModelResult", "Project", "ProjectError", "TestResult", "default_project_path",
    "ensure_raw_tables", "load_ledger_snapshot", "render",
]
