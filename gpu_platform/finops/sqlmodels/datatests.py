"""A model's yml: its description, grain, partitioning, materialization, columns and data tests
(not_null, unique, relationships, accepted_values, expression_is_true), each test turned into
the SQL that selects its failing rows.

May import: yaml, the standard library, `sqlmodels.model` and `sqlmodels.templates` (to check a
test's `details` query); nothing that runs SQL.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from gpu_platform.finops.sqlmodels.model import NAME, DataTest, ProjectError
from gpu_platform.finops.sqlmodels.templates import validate_sql

TEST_KINDS = ("not_null", "unique", "relationships", "accepted_values", "expression_is_true")
_ANY_JINJA = re.compile(r"\{\{.*?\}\}|\{%.*?%\}", re.S)


def _cols(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def _test_sql(model: str, kind: str, column: str | None, args: Any, where: str) -> tuple[str, str]:
    """(test_name, failing-rows SQL) for one test on `model`."""
    if kind == "not_null":
        return f"not_null_{column}", f"select * from {model} where {column} is null"
    if kind == "unique":
        cols = _cols(args["columns"]) if isinstance(args, dict) and "columns" in args else [column]
        key = ", ".join(cols)
        if len(cols) == 1:
            return (
                f"unique_{'__'.join(cols)}",
                f"select {key}, count(*) as n from {model} group by {key} having count(*) > 1",
            )
        # two phases, exact: group on one 64-bit hash of the key (far cheaper than hashing and
        # comparing every key column), then recount exactly only the rows of hashes seen twice (a
        # collision is a candidate, never a silent pass; with no candidate the second scan's join
        # has an empty side and reads nothing)
        return (
            f"unique_{'__'.join(cols)}",
            f"select {key}, count(*) as n from {model} semi join ("
            f"select hash({key}) as _h from {model} group by _h having count(*) > 1) as _dup "
            f"on hash({key}) = _dup._h group by {key} having count(*) > 1",
        )
    if kind == "accepted_values":
        values = args["values"] if isinstance(args, dict) else args
        # The allowed values come from the project's own yml, never from a user: quote as literals.
        lits = ", ".join("'" + str(v).replace("'", "''") + "'" for v in values)
        return f"accepted_values_{column}", f"select * from {model} where {column} not in ({lits})"
    if kind == "relationships":
        to, target = args["to"], args["field"]
        m = re.fullmatch(r"\s*ref\('([a-z_][a-z0-9_]*)'\)\s*", to)
        if not m:
            raise ProjectError(f"{where}: relationships 'to' must be ref('model'), got {to!r}")
        other = m.group(1)
        return (
            f"relationships_{column}__{other}_{target}",
            f"select c.* from {model} c left join {other} p on c.{column} = p.{target} "
            f"where c.{column} is not null and p.{target} is null",
        )
    if kind == "expression_is_true":
        expr = args["expression"] if isinstance(args, dict) else args
        name = args.get("name") if isinstance(args, dict) else None
        slug = name or re.sub(r"[^a-z0-9]+", "_", f"{column or ''} {expr}".lower()).strip("_")[:60]
        target = f"{column} " if column else ""
        return f"expression_is_true_{slug}", f"select * from {model} where not coalesce(({target}{expr}), false)"
    raise ProjectError(f"{where}: unknown test {kind!r} (known: {', '.join(TEST_KINDS)})")


def parse_tests(model: str, spec: dict[str, Any], where: str) -> list[DataTest]:
    out: list[DataTest] = []

    def add(kind: str, column: str | None, args: Any) -> None:
        name, sql = _test_sql(model, kind, column, args, where)
        target = None
        if kind == "relationships":
            target = re.fullmatch(r"\s*ref\('([a-z_][a-z0-9_]*)'\)\s*", args["to"]).group(1)
        blocking = bool(args.get("blocking")) if isinstance(args, dict) else False
        severity = args.get("severity", "error") if isinstance(args, dict) else "error"
        if severity not in ("error", "warn"):
            raise ProjectError(f"{where}: test {name}: severity is 'error' or 'warn', not {severity!r}")
        if blocking and severity == "warn":
            raise ProjectError(f"{where}: test {name}: a 'warn' test cannot be blocking")
        details = args.get("details") if isinstance(args, dict) else None
        if details is not None:
            if _ANY_JINJA.search(details):
                raise ProjectError(f"{where}: test {name}: details is plain SQL (model names, $day_from/$day_to)")
            validate_sql(details, f"{where}: test {name}: details")
        out.append(DataTest(model=model, name=name, kind=kind, sql=sql, target=target, blocking=blocking,
                            warn=severity == "warn", details=details.strip() if details else None))

    def items(tests: list[Any]) -> Iterable[tuple[str, Any]]:
        for t in tests or []:
            if isinstance(t, str):
                yield t, None
            elif isinstance(t, dict) and len(t) == 1:
                yield next(iter(t.items()))
            else:
                raise ProjectError(f"{where}: bad test entry {t!r}")

    for col in spec.get("columns") or []:
        for kind, args in items(col.get("tests") or col.get("data_tests") or []):
            add(kind, col["name"], args)
    for kind, args in items(spec.get("tests") or spec.get("data_tests") or []):
        add(kind, None, args)
    names = [t.name for t in out]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ProjectError(f"{where}: duplicate test names {sorted(dup)}; give expression tests a name")
    return out



def row_predicate(t: DataTest) -> str | None:
    """The failing-row condition of a row-level test (`select * from m where <cond>`), else None."""
    prefix = f"select * from {t.model} where "
    if t.kind in ("not_null", "accepted_values", "expression_is_true") and t.sql.startswith(prefix):
        return t.sql[len(prefix):]
    return None



def yml_meta(path: Path, name: str) -> dict[str, Any]:
    if not path.exists():
        return {}
    spec = yaml.safe_load(path.read_text()) or {}
    if spec.get("name", name) != name:
        raise ProjectError(f"{path}: name {spec.get('name')!r} does not match file name {name!r}")
    partition_by = spec.get("partition_by")
    if partition_by in ("none", None):
        partition_by = None
    columns = {c["name"]: (c.get("description") or "") for c in spec.get("columns") or []}
    depends_on = [str(d) for d in spec.get("depends_on") or []]
    bad = [d for d in depends_on if not NAME.match(d)]
    if bad:
        raise ProjectError(f"{path}: depends_on names {bad} are not valid model names")
    materialized = spec.get("materialized", "table")
    if materialized not in ("table", "ephemeral"):
        raise ProjectError(f"{path}: materialized must be table or ephemeral, not {materialized!r}")
    return {
        "materialized": materialized,
        "description": (spec.get("description") or "").strip(),
        "grain": spec.get("grain") or "",
        "partition_by": partition_by,
        "columns": columns,
        "tests": tuple(parse_tests(name, spec, str(path))),
        "depends_on": depends_on,
    }
