"""The dbt-like runner: loading, graph, rendering, materialization, data tests."""

from __future__ import annotations

import re
from datetime import date, timedelta
from pathlib import Path

import duckdb
import pytest

from gpu_platform.finops.sqlmodels import Project, ProjectError, default_project_path, render
from tests.sqlmodels.finops_scenario import (
    D0,
    DAY,
    billing_rows,
    insert_billing,
    insert_samples,
    load_scenario,
)

DAY_D = date.fromisoformat(DAY)


def write(root: Path, rel: str, text: str) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


def model(root: Path, layer: str, name: str, sql: str, yml: str = "") -> None:
    write(root, f"{layer}/{name}.sql", sql)
    write(root, f"{layer}/{name}.yml", yml or f"name: {name}\ndescription: test\ngrain: any\n")


def test_real_project_graph():
    p = Project.load(default_project_path())
    order = p.order
    assert order.index("stg_dcgm_samples") < order.index("int_pod_gpu_hours") < order.index("fct_gpu_cost_by_request")
    assert order.index("chargeback") < order.index("reconciliation")
    assert set(p.graph["int_node_hour_prices"]) == {"int_gpu_nodes", "int_billing_nodes", "price_book"}
    assert p.models["stg_dcgm_samples"].sources == ("raw_dcgm_samples",)
    assert p.sources["raw_requests"] == "raw_ledger_snapshot"
    for m in p.models.values():
        assert m.description and m.grain, f"{m.name}: yml needs description and grain"
        if not m.is_seed:
            assert m.layer in ("staging", "intermediate", "marts")
            assert m.sql.rstrip().endswith("select * from final"), m.name
            assert not re.search(r"\b(SELECT|FROM|WHERE|GROUP BY|JOIN|WITH)\b", m.sql), f"{m.name}: lower-case SQL"
    assert p.select(["+int_node_hour_prices"]) == [
        n for n in p.order if n in {"int_node_hour_prices", "int_gpu_nodes", "int_gpu_busy", "stg_dcgm_samples",
                                    "stg_focus_billing", "price_book", "stg_nodes", "int_billing_nodes"}]
    assert "reconciliation" in p.select(["chargeback+"])


def test_render_binds_vars_as_parameters():
    sql, refs, sources, variables = render(
        "select * from {{ ref('a') }} join {{ source('raw_x') }} using (k) where day = {{ var('day') }}", "m.sql")
    assert sql == "select * from a join raw_x using (k) where day = $day"
    assert (refs, sources, variables) == (["a"], ["raw_x"], ["day"])
    with pytest.raises(ProjectError, match="not a valid name"):
        render("select {{ var('day; drop table x') }}", "m.sql")
    with pytest.raises(ProjectError, match="unsupported template"):
        render("select {{ day }}", "m.sql")


def test_day_is_a_bound_parameter_not_text(tmp_path):
    model(tmp_path, "staging", "m", "with final as (select {{ var('day') }} as day) select * from final",
          "name: m\ndescription: d\ngrain: g\npartition_by: day\n")
    p = Project.load(tmp_path)
    assert "2026" not in p.models["m"].sql and "$day" in p.models["m"].sql
    con = duckdb.connect()
    p.build(con, day="2026-01-02")
    assert str(con.execute("select day from m").fetchall()[0][0]) == "2026-01-02"
    with pytest.raises(ValueError):
        p.build(con, day="2026-01-02'; drop table m; --")


def test_unknown_ref_names_file_and_ref(tmp_path):
    model(tmp_path, "marts", "m", "select * from {{ ref('nope') }}")
    with pytest.raises(ProjectError, match=r"marts/m\.sql: ref\('nope'\)"):
        Project.load(tmp_path)


def test_cycle_is_reported(tmp_path):
    model(tmp_path, "staging", "a", "select * from {{ ref('b') }}")
    model(tmp_path, "staging", "b", "select * from {{ ref('a') }}")
    with pytest.raises(ProjectError, match=r"cycle in ref\(\) graph: .*a.*b"):
        Project.load(tmp_path)


def test_bad_sql_and_missing_yml(tmp_path):
    model(tmp_path, "staging", "a", "select from where")
    with pytest.raises(ProjectError, match="does not parse"):
        Project.load(tmp_path)
    (tmp_path / "staging" / "a.sql").write_text("select 1 as x")
    (tmp_path / "staging" / "a.yml").unlink()
    with pytest.raises(ProjectError, match="missing a.yml"):
        Project.load(tmp_path)


def test_yml_columns_must_match_table(tmp_path):
    model(tmp_path, "staging", "a", "select 1 as x, 2 as y",
          "name: a\ndescription: d\ngrain: g\ncolumns:\n  - {name: x, description: x}\n")
    with pytest.raises(ProjectError, match=r"not in yml \['y'\]"):
        Project.load(tmp_path).build(duckdb.connect())


def test_partitioned_model_needs_a_day(tmp_path):
    model(tmp_path, "staging", "m", "select {{ var('day') }} as day",
          "name: m\ndescription: d\ngrain: g\npartition_by: day\n")
    with pytest.raises(ProjectError, match="day=YYYY-MM-DD"):
        Project.load(tmp_path).build(duckdb.connect())


def test_a_partitioned_model_that_gains_a_column_keeps_its_built_days(tmp_path):
    """A warehouse built before a model gained a column: the next build adds it (NULL on the days
    built before) instead of failing the insert, and keeps those days."""
    yml = "name: m\ndescription: d\ngrain: g\npartition_by: day\ncolumns:\n  - {name: day, description: d}\n"
    model(tmp_path, "staging", "m", "select cast({{ var('day') }} as date) as day", yml)
    con = duckdb.connect(str(tmp_path / "w.duckdb"))
    Project.load(tmp_path).build(con, day="2026-11-27")
    model(tmp_path, "staging", "m", "select cast({{ var('day') }} as date) as day, 'why' as reason",
          yml + "  - {name: reason, description: d}\n")
    Project.load(tmp_path).build(con, day="2026-11-28")
    assert con.execute("select cast(day as varchar), reason from m order by day").fetchall() == [
        ("2026-11-27", None), ("2026-11-28", "why")]


def test_data_test_kinds(tmp_path):
    model(tmp_path, "staging", "parent", "select 1 as id union all select 2")
    model(tmp_path, "marts", "child", "select * from (values (1, 'a', 5), (1, 'b', -1), (3, null, 2)) t(id, kind, n) "
          "where {{ ref('parent') }}.id is not null or true",
          """name: child
description: d
grain: g
columns:
  - name: id
    description: d
    tests:
      - relationships: {to: "ref('parent')", field: id}
  - name: kind
    description: d
    tests: [not_null, {accepted_values: {values: [a]}}]
  - name: n
    description: d
    tests: [unique, {expression_is_true: {expression: ">= 0"}}]
tests:
  - unique: {columns: [id]}
  - expression_is_true: {name: n_small, expression: "n < 5"}
""")
    # the child's SQL mentions parent only to create the ref edge; it never reads it
    (tmp_path / "marts" / "child.sql").write_text(
        "with p as (select * from {{ ref('parent') }} limit 0) "
        "select * from (values (1, 'a', 5), (1, 'b', -1), (3, null, 2)) t(id, kind, n)")
    p = Project.load(tmp_path)
    con = duckdb.connect()
    p.build(con)
    got = {t.test_name: t.failures for t in p.run_tests(con, select=["child"])}
    assert got == {
        "relationships_id__parent_id": 1,  # id 3 has no parent
        "not_null_kind": 1,
        "accepted_values_kind": 1,  # 'b'
        "unique_n": 0,
        "expression_is_true_n_0": 1,  # -1
        "unique_id": 1,  # id 1 twice
        "expression_is_true_n_small": 1,  # 5
    }


@pytest.fixture(scope="module")
def built():
    p = Project.load(default_project_path())
    con = duckdb.connect()
    load_scenario(con)
    p.build(con, day=DAY)
    return p, con


def snapshot(con, table):
    return sorted(map(repr, con.execute(f"select * from {table}").fetchall()))


def test_rerun_of_a_day_is_idempotent(built):
    p, con = built
    before = {t: snapshot(con, t) for t in ("int_gpu_busy", "fct_gpu_cost_by_request", "chargeback", "reconciliation")}
    results = p.build(con, day=DAY)
    assert {t: snapshot(con, t) for t in before} == before
    assert {r.name: r.rows for r in results}["int_gpu_busy"] == len(before["int_gpu_busy"])
    # another day leaves this day alone
    p.build(con, day="2026-11-29", select=["stg_dcgm_samples+"])
    assert snapshot(con, "fct_gpu_cost_by_request") == before["fct_gpu_cost_by_request"]


def test_all_scenario_data_tests_pass(built):
    p, con = built
    results = p.run_tests(con, DAY)
    assert len(results) > 50
    assert [r for r in results if r.failures] == []


def test_planted_bad_rows_are_caught(built):
    p, con = built
    con.execute("insert into raw_pod_requests (namespace, pod, request_id, attempt, flavor_name, hostname, "
                "started_at, ended_at, exit_status) values ('team-x', 'ghost', 'R404', 1, 'a100-spot', 'gpu-b', "
                "timestamp '2026-11-28 01:00', timestamp '2026-11-28 00:00', 'Succeeded')")
    try:
        p.build(con, day=DAY, select=["stg_pod_requests"])
        failing = {t.test_name for t in p.run_tests(con, DAY, select=["stg_pod_requests"]) if t.failures}
        assert failing == {"relationships_request_id__stg_requests_request_id", "expression_is_true_ends_after_start"}
    finally:
        con.execute("delete from raw_pod_requests where pod = 'ghost'")
        p.build(con, day=DAY)


def test_progress_callback(built):
    p, con = built
    seen = []
    p.build(con, day=DAY, select=["stg_requests", "stg_pod_requests"], progress=lambda n, i, t: seen.append((n, i, t)))
    assert seen == [("stg_requests", 0, 2), ("stg_pod_requests", 1, 2)]


def test_ephemeral_model_is_inlined_not_stored(built):
    p, con = built
    stg = p.models["stg_dcgm_samples"]
    assert stg.is_ephemeral and "stg_dcgm_samples" not in p.models["int_gpu_busy"].sql
    assert "raw_dcgm_hourly" in p.models["int_gpu_busy"].sql
    tables = {r[0] for r in con.execute("select table_name from information_schema.tables").fetchall()}
    assert "stg_dcgm_samples" not in tables and "int_gpu_busy" in tables
    # 16 GPUs x 5,760 samples; gpu-a reports both metrics; the history duplicates and the sentinel are gone
    n = con.execute(f"select count(*) from ({stg.sql})", p.bind(stg, (DAY_D, DAY_D))).fetchall()[0][0]
    assert n == 8 * 5760 * 2 + 8 * 5760


def test_rollup_and_int_gpu_busy_agree_with_the_per_sample_rules(built):
    """stg_dcgm_samples (the per-sample definition) summed = int_gpu_busy (from the hourly rollup)."""
    p, con = built
    stg = p.models["stg_dcgm_samples"]
    keys = "day, hostname, gpu, gpu_instance_id, namespace, pod, metric"
    per_sample = con.execute(f"select {keys}, count(*), sum(busy) from ({stg.sql}) group by all order by all",
                             p.bind(stg, (DAY_D, DAY_D))).fetchall()
    stored = con.execute(f"select {keys}, samples, busy_samples from int_gpu_busy where day = $d order by all",
                         {"d": DAY_D}).fetchall()
    assert per_sample == stored and len(stored) > 16


def test_a_sample_repeated_in_one_source_fails_the_uniqueness_check(built):
    from gpu_platform.finops.feeds.load import rollup_dcgm_samples

    p, con = built
    con.execute("insert into raw_dcgm_samples select * replace (-7 as source_line) from raw_dcgm_samples "
                "where hostname = 'gpu-b' and gpu = 3 and ts = timestamp '2026-11-28 07:00:00'")
    try:
        rollup_dcgm_samples(con)
        p.build(con, day=DAY, select=["int_gpu_busy"])
        failing = {t.test_name: t.failures for t in p.run_tests(con, DAY, select=["int_gpu_busy"]) if t.failures}
        assert failing == {"expression_is_true_samples_unique_per_gpu_pod_metric_ts": 1}
    finally:
        con.execute("delete from raw_dcgm_samples where source_line = -7")
        rollup_dcgm_samples(con)
        p.build(con, day=DAY)


def test_range_build_equals_day_by_day(project_days):
    p, per_day, ranged = project_days
    for table in ("int_gpu_busy", "int_pod_gpu_hours", "fct_gpu_cost_by_request", "chargeback", "reconciliation",
                  "unit_cost_training_run"):
        assert snapshot(ranged, table) == snapshot(per_day, table), table
    days = ranged.execute("select distinct day from reconciliation order by day").fetchall()
    assert [str(d[0]) for d in days] == ["2026-11-27", "2026-11-28"]
    assert all(t.failures == 0 for t in p.run_tests(ranged, days=("2026-11-27", "2026-11-28")))


@pytest.fixture(scope="module")
def project_days():
    """Two days of the scenario (the 27th shifted copy), built day by day and as one range."""
    p = Project.load(default_project_path())
    cons = []
    for _ in range(2):
        con = duckdb.connect()
        load_scenario(con)
        insert_billing(con, billing_rows(), source="billing-27.csv")
        con.execute("update raw_focus_billing set ChargePeriodStart = ChargePeriodStart - interval 1 day, "
                    "ChargePeriodEnd = ChargePeriodEnd - interval 1 day where source = 'billing-27.csv'")
        insert_samples(con, day=D0 - timedelta(days=1), pods=[])
        cons.append(con)
    per_day, ranged = cons
    for d in ("2026-11-27", "2026-11-28"):
        p.build(per_day, day=d)
    p.build(ranged, days=("2026-11-27", "2026-11-28"))
    return p, per_day, ranged
