"""The DuckDB warehouse as a Dagster resource: builds cost models and runs their data tests.

DuckDB allows one writing process per file: every asset using this resource is in the
`duckdb_warehouse` pool (limit 1 in the instance config), and each call opens and closes its
own connection so no connection outlives a step. Processes outside Dagster open the file too (the
CLI's `cost report`, `scorecard` and `report` readers, the metrics server's forecast, `feeds
ingest` and `cost build`): while one holds it, a step's `connect` waits for it (`lock_wait_s`)
instead of failing on DuckDB's lock error, then fails naming the file and the holder.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from datetime import date
from functools import lru_cache
from pathlib import Path
from typing import Any

import dagster as dg
import duckdb

from gpu_platform.finops.sqlmodels import (
    ModelResult,
    Project,
    TestResult,
    default_project_path,
    ensure_raw_tables,
)
from gpu_platform.finops.sqlmodels.report import day_model_metrics, model_metrics
from gpu_platform.finops.warehouse import connect as warehouse_connect
from gpu_platform.observe.scorecards import model_vars
from gpu_platform.policy import default_policy_path, load_policy


@lru_cache(maxsize=8)
def _load_project(path: str) -> Project:
    return Project.load(path)


@lru_cache(maxsize=8)
def _policy_vars(path: str, stamp: tuple[int, int]) -> dict[str, Any]:
    """The scorecard variables of the policy at `path` ("" = the default), read once per version
    of the file (`stamp`: its mtime and size): a step builds with them twice, and parsing the
    policy took 0.2 s each time, a fifth of a one-day pricing run."""
    del stamp
    return model_vars(load_policy(path or None))


def _stamp(path: str) -> tuple[int, int]:
    try:
        st = (Path(path) if path else default_policy_path()).stat()
    except OSError:
        return (-1, -1)  # load_policy says what is wrong with the path
    return st.st_mtime_ns, st.st_size


@dataclass(frozen=True)
class PartitionBuild:
    """One model built for one day (day=None: unpartitioned) with its data tests and UI metrics."""

    result: ModelResult
    tests: list[TestResult]
    metrics: dict[str, Any] = field(default_factory=dict)
    """Unpartitioned models: the figures of the whole table."""
    day_metrics: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Partitioned models: each day's own figures (`rows` and `model_metrics` of that day alone),
    keyed by ISO day, for every day of the build."""

    @property
    def rows(self) -> int:
        return self.result.rows


class Warehouse(dg.ConfigurableResource):
    """path: the DuckDB file. project_dir: the dbt_like_sql directory ("" = the repository's).
    idle_policy / shared_policy: proportional | even | none ("" = project.yml's default).
    unreconciled_threshold: share of the day's cost chargeback's (unreconciled) row may hold before
    its blocking check fails (< 0 = project.yml's default, 0.01).
    memory_limit / threads: DuckDB settings ("" / 0 = DuckDB's defaults).
    lock_wait_s: how long a step waits while another process holds the file (a CLI reader takes
    well under a second; a `cost build` from a shell can take minutes): then `WarehouseBusy`.
    """

    path: str
    project_dir: str = ""
    idle_policy: str = ""
    shared_policy: str = ""
    unreconciled_threshold: float = -1.0
    memory_limit: str = ""
    threads: int = 0
    lock_wait_s: float = 300.0
    policy_path: str = ""
    """The policy file whose `scale` and `capacity_signals:` thresholds the scorecard models bind
    ("" = the packaged default)."""

    def project(self) -> Project:
        return _load_project(self.project_dir or str(default_project_path()))

    def variables(self) -> dict[str, Any]:
        out: dict[str, Any] = copy.deepcopy(_policy_vars(self.policy_path, _stamp(self.policy_path)))
        out |= {
            k: v for k, v in (("idle_policy", self.idle_policy), ("shared_policy", self.shared_policy)) if v}
        if self.unreconciled_threshold >= 0:
            out["unreconciled_threshold"] = self.unreconciled_threshold
        return out

    def connect(self, read_only: bool = False) -> duckdb.DuckDBPyConnection:
        """A connection to the warehouse file (created with its raw tables when missing)."""
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        config: dict[str, Any] = {}
        if self.memory_limit:
            config["memory_limit"] = self.memory_limit
        if self.threads:
            config["threads"] = self.threads
        con = warehouse_connect(self.path, read_only=read_only, wait_s=self.lock_wait_s, config=config)
        if not read_only:
            ensure_raw_tables(con)
        return con

    def build_partition(
        self, model: str, day: str | date | None = None, days: tuple[str | date, str | date] | None = None,
        with_tests_of: tuple[str, ...] = (),
    ) -> PartitionBuild:
        """Build one model for `day` or every day of `days` (inclusive; idempotent), run its data
        tests (and those of the ephemeral models in `with_tests_of`), collect its metrics.

        An unpartitioned model ignores day/days and is rebuilt in full."""
        project = self.project()
        partitioned = project.models[model].partition_by is not None
        day, days = (day, days) if partitioned else (None, None)
        con = self.connect()
        try:
            result = project.build_model(con, model, day, self.variables(), days)
            tests = project.run_tests(con, day, select=[model, *with_tests_of], days=days, variables=self.variables())
            span = (days[0], days[-1]) if days else (day, day)
            if partitioned and span[0] is not None:
                return PartitionBuild(result=result, tests=tests, day_metrics=day_model_metrics(con, model, span))
            return PartitionBuild(result=result, tests=tests, metrics=model_metrics(con, model, None))
        finally:
            con.close()

    def run_tests(self, model: str | None = None, day: str | date | None = None) -> list[TestResult]:
        """Data tests of one model (all models when None) on `day`."""
        con = self.connect()
        try:
            return self.project().run_tests(con, day, select=[model] if model else None)
        finally:
            con.close()
