"""Jinja macros in the dbt-like runner: a project's `macros/*.sql`, callable from every model."""

from __future__ import annotations

import duckdb
import pytest

from gpu_platform.finops.sqlmodels import Project, ProjectError, default_project_path, render
from gpu_platform.finops.sqlmodels.templates import Macros
from tests.sqlmodels.test_runner import model, write

MACROS = """
{#- rows of `model` whose `column` is `value` -#}
{% macro rows_where(model, column, value) -%}
select * from {{ ref(model) }} where {{ column | ident }} = {{ value | literal }}
{%- endmacro %}

{% macro doubled(column) -%}
{{ column | ident }} * 2 as {{ (column ~ '_doubled') | ident }}
{%- endmacro %}

{% macro on_day() -%}
{{ var('day') }}
{%- endmacro %}

{% macro wrap() -%}
with final as ({{ caller() | trim }}) select * from final
{%- endmacro %}
"""


def test_a_macro_renders_in_every_model_and_its_refs_and_vars_count(tmp_path):
    write(tmp_path, "macros/common.sql", MACROS)
    model(tmp_path, "staging", "a", "with final as (select 1 as k, 'x''y' as v union all select 2, 'z') select * from final")
    model(tmp_path, "marts", "b", "{% call wrap() %}select k, {{ doubled('k') }}, {{ on_day() }} as day "
                                  "from ({{ rows_where('a', 'v', \"x'y\") }}){% endcall %}")
    p = Project.load(tmp_path)
    b = p.models["b"]
    # the macro's ref() is the model's dependency; its var() a bound parameter
    assert b.refs == ("a",) and p.order.index("a") < p.order.index("b")
    assert b.params == ("day",)
    assert b.sql == ("with final as (select k, k * 2 as k_doubled, $day as day from "
                     "(select * from a where v = 'x''y')) select * from final")
    con = duckdb.connect()
    p.build(con, day="2026-01-02")
    assert con.execute("select k, k_doubled, cast(day as varchar) from b").fetchall() == [(1, 2, "2026-01-02")]


def test_a_macro_inlines_an_ephemeral_ref(tmp_path):
    write(tmp_path, "macros/m.sql", "{% macro all_of(m) %}select * from {{ ref(m) }}{% endmacro %}")
    model(tmp_path, "staging", "e", "with final as (select 7 as k) select * from final",
          "name: e\ndescription: d\ngrain: g\nmaterialized: ephemeral\n")
    model(tmp_path, "marts", "m", "with final as ({{ all_of('e') }}) select * from final")
    p = Project.load(tmp_path)
    assert "select 7 as k" in p.models["m"].sql
    con = duckdb.connect()
    p.build(con)
    assert con.execute("select k from m").fetchall() == [(7,)]


@pytest.mark.parametrize(("template", "message"), [
    # a value printed as it is, not through | literal or | ident: refused, whatever it holds
    ("select {{ 'x; drop table a' }}", r"unsupported template expression printing 'x; drop table a' \(line 1\)"),
    ("select\n{{ 1 }}", r"unsupported template expression printing 1 \(line 2\)"),
    ("{% set x = 'a' ~ 'b' %}select {{ x }}", "unsupported template expression printing 'ab'"),
    ("select {{ day }}", "unsupported template expression: 'day' is undefined"),
    ("select {{ 'a b' | ident }}", r"\| ident: 'a b' is not a valid name"),
    ("select {{ {'k': 1} | literal }}", r"\| literal takes a string"),
    ("select {{ ref('a; drop') }}", "not a valid name"),
    ("select {% if %}", "unsupported template"),
    ("select {{ ''.__class__ }}", "m.sql"),  # the sandbox: no attribute walking out of the template
])
def test_what_a_template_may_print_is_checked(template, message):
    with pytest.raises(ProjectError, match=message):
        render(template, "m.sql")


def test_literal_and_ident_print_sql_the_runner_made():
    sql, *_ = render("select {{ \"it's\" | literal }}, {{ [1, 2.5, none, true] | literal }}, "
                     "{{ ['a', 'r.b'] | ident }}", "m.sql")
    assert sql == "select 'it''s', 1, 2.5, null, true, a, r.b"


def test_bad_macro_files_fail_listing_every_problem(tmp_path):
    write(tmp_path, "macros/a.sql", "{% macro one() %}1{% endmacro %}\n{% macro ref(x) %}{% endmacro %}")
    write(tmp_path, "macros/b.sql", "{% macro one() %}2{% endmacro %}\nselect 1")
    write(tmp_path, "macros/c.sql", "{% macro broken( %}")
    with pytest.raises(ProjectError) as e:
        Macros.load(tmp_path)
    text = str(e.value)
    assert "a.sql:2: macro 'ref' would hide the runner's ref()" in text
    assert "b.sql:1: macro 'one' already defined in" in text and "a.sql" in text
    assert "b.sql:2: a macro file holds only" in text
    assert "c.sql:1:" in text


def test_a_model_calling_an_unknown_macro_names_its_file(tmp_path):
    model(tmp_path, "marts", "m", "with final as (select {{ nope() }} as x) select * from final")
    with pytest.raises(ProjectError, match=r"marts/m\.sql: unsupported template expression: 'nope' is undefined"):
        Project.load(tmp_path)


def test_the_shipped_project_has_macros_and_the_unit_cost_marts_use_them():
    root = default_project_path()
    macros = Macros.load(root)
    assert {"request_unit_cost", "released_lineage_cost", "cost_per"} <= set(macros.names)
    for name in ("unit_cost_training_run", "unit_cost_accepted_label", "unit_cost_replay_hour",
                 "unit_cost_evidence_pack", "unit_cost_released_model", "unit_cost_released_map"):
        text = (root / "marts" / f"{name}.sql").read_text()
        assert "{% call " in text or "{{ " in text.replace("{{ ref(", ""), name
    p = Project.load(root)
    assert p.models["unit_cost_released_map"].refs == ("stg_requests", "int_request_lineage", "int_request_cost")


def test_models_without_macros_render_as_jinja_would():
    """A template of only ref/source/var calls is rendered without compiling it: the same text, refs,
    sources and vars as through Jinja (a Jinja comment, which renders to nothing, forces that path)."""
    root = default_project_path()
    macros = Macros.load(root)
    plain = 0
    for path in sorted(root.glob("*/*.sql")):
        if path.parent.name == "macros":
            continue
        text = path.read_text()
        plain += "{%" not in text
        assert render(text, str(path), macros=macros) == render(text + "{# jinja #}", str(path), macros=macros), path
    assert plain > 20
    with pytest.raises(ProjectError, match=r"ref\('a b'\) is not a valid name"):
        render("select * from {{ ref('a b') }}", "m.sql")
