"""The runner's vocabulary: a model, a data test, their results, the error type and the day span.

May import: the standard library only (no DuckDB, no Jinja), so every other sqlmodels module can
import it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import Any

LAYERS = ("staging", "intermediate", "marts")
NAME = re.compile(r"^[a-z_][a-z0-9_]*$")
"""A model, source, var or macro-provided name."""


class ProjectError(ValueError):
    """A project that cannot load or run: bad template, unknown ref, cycle, bad yml, bad SQL."""



@dataclass(frozen=True)
class DataTest:
    """One data test. `sql` selects the failing rows (before any day filter)."""

    model: str
    name: str
    kind: str
    sql: str
    target: str | None = None
    """relationships: the parent model."""
    blocking: bool = False
    """`blocking: true` in the yml: in Dagster a blocking ERROR check (downstream assets do not run)."""
    warn: bool = False
    """`severity: warn` in the yml: a flag, not a failure: a WARN check in Dagster (never blocking),
    a WARN line from `cost build` without exit 1 (docs/finops.md, "What blocks a day")."""
    details: str | None = None
    """`details:` in the yml: a query run when the test fails (binds $day_from / $day_to), whose
    rows explain the failure (e.g. the largest exceptions)."""


@dataclass(frozen=True)
class Model:
    """One model (or seed). `sql` is rendered: refs/sources are table names, vars are `$name`."""

    name: str
    layer: str
    path: Path
    sql: str
    refs: tuple[str, ...]
    sources: tuple[str, ...]
    params: tuple[str, ...]
    description: str = ""
    grain: str = ""
    partition_by: str | None = None
    materialized: str = "table"
    """table (partitioned: delete+insert per day range; else create or replace) or ephemeral
    (never stored: inlined as a subquery into the models that ref it)."""
    columns: dict[str, str] = field(default_factory=dict)
    tests: tuple[DataTest, ...] = ()
    seed_path: Path | None = None

    @property
    def test_refs(self) -> tuple[str, ...]:
        """Models this model's relationships tests read: built first, like refs."""
        return tuple(dict.fromkeys(t.target for t in self.tests if t.target))

    @property
    def is_seed(self) -> bool:
        return self.seed_path is not None

    @property
    def is_ephemeral(self) -> bool:
        return self.materialized == "ephemeral"


@dataclass(frozen=True)
class ModelResult:
    """One model built: rows in the built partition(s) (whole table when unpartitioned)."""

    name: str
    rows: int
    seconds: float


@dataclass(frozen=True)
class TestResult:
    """One data test's outcome: `failures` failing rows of `sql` (0 = passed)."""

    __test__ = False  # not a pytest test class

    model: str
    test_name: str
    failures: int
    sql: str
    blocking: bool = False
    details: tuple[dict[str, Any], ...] = ()
    """Rows of the test's `details` query when it failed."""
    warn: bool = False
    """A `severity: warn` test: its failure flags the day, it does not fail the build."""

    @property
    def passed(self) -> bool:
        return self.failures == 0

    def describe(self) -> str:
        """One line per failure detail (empty when passed or without details)."""
        return "\n".join(", ".join(f"{k}={v}" for k, v in row.items() if v is not None) for row in self.details)


Progress = Callable[[str, int, int], None]
"""progress(model_name, index, total): called before each model is built."""


Days = tuple[date, date]


def each_day(span: Days) -> list[Days]:
    """Every day of `span` as a one-day span."""
    first, last = span
    return [(first + timedelta(days=i),) * 2 for i in range((last - first).days + 1)]


def day_span(day: str | date | None, days: tuple[str | date, str | date] | None) -> Days | None:
    """The (first, last) days a build or test covers: `day`, or `days` = (first, last); None: neither."""
    if day is not None and days is not None:
        raise ProjectError("pass day or days, not both")
    if day is not None:
        d = date.fromisoformat(str(day))
        return d, d
    if days is not None:
        first, last = (date.fromisoformat(str(x)) for x in days)
        if last < first:
            raise ProjectError(f"days: {last} is before {first}")
        return first, last
    return None

