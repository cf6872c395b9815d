"""Rendering one model's template: Jinja with `ref()`, `source()`, `var()` and the project's macros.

A project's `macros/*.sql` files hold `{% macro name(args) %}...{% endmacro %}` blocks, as in dbt;
every macro can be called by name from every model (and from the other macros), beside `ref()`.

What a template may put into SQL is checked, so that no value of a user's is ever formatted in:
every `{{ ... }}` must print SQL text the runner made: `ref('m')` / `source('raw_x')` (a checked
table name, or an ephemeral model's parenthesised SQL), `var('v')` (the bound parameter `$v`), a
macro call or `caller()`, or a model author's literal passed through `| literal` (a quoted SQL
literal) or `| ident` (a checked name). Anything else (`{{ day }}`, `{{ 'x' }}`) is an error.
Templates run in Jinja's sandbox.

May import: the standard library, jinja2, sqlglot and `sqlmodels.model` (the error type and name
pattern); nothing that runs SQL.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import jinja2.nodes
import sqlglot
import sqlglot.errors
from jinja2.sandbox import SandboxedEnvironment
from markupsafe import Markup

from gpu_platform.finops.sqlmodels.model import NAME, ProjectError

MACROS_DIR = "macros"
_PARAM = re.compile(r"\$([a-z_][a-z0-9_]*)")
_SIMPLE = re.compile(r"\{\{\s*(ref|source|var)\s*\(\s*'([^'{}]*)'\s*\)\s*\}\}")
"""`{{ ref('m') }}` and its like: what most models hold, rendered without Jinja (same text)."""
_SYNTAX = re.compile(r"\{\{|\{%|\{#")
_BUILTINS = frozenset({"ref", "source", "var", "caller"})


class _Refused(Exception):
    """A template asked for something the runner does not render (wrapped into ProjectError)."""


def _only_sql(value: Any) -> Any:
    """Jinja's finalize: every `{{ }}` prints SQL text the runner made (see the module's docstring)."""
    if isinstance(value, Markup):
        return value
    if isinstance(value, jinja2.Undefined):
        value._fail_with_undefined_error()
    raise _Refused(
        f"unsupported template expression printing {value!r}: only ref(), source(), var(), macros, "
        "caller() and a literal passed through `| literal` or `| ident` are rendered")


def _literal(value: Any) -> Markup:
    """A model author's literal as SQL: a string quoted ('' escaped), a number, true/false, null, or
    a list of them separated by commas."""
    if isinstance(value, (list, tuple)):
        return Markup(", ".join(_literal(v) for v in value))
    if value is None:
        return Markup("null")
    if isinstance(value, bool):
        return Markup("true" if value else "false")
    if isinstance(value, (int, float)):
        return Markup(repr(value))
    if isinstance(value, str):
        return Markup("'" + value.replace("'", "''") + "'")
    raise _Refused(f"| literal takes a string, a number, a boolean, none or a list of them, not {value!r}")


def _ident(value: Any) -> Markup:
    """A model author's column or table name (`name` or `alias.name`), each part checked against
    the name pattern; a list of them separated by commas."""
    if isinstance(value, (list, tuple)):
        return Markup(", ".join(_ident(v) for v in value))
    if not isinstance(value, str) or not all(NAME.match(part) for part in value.split(".", 1)):
        raise _Refused(f"| ident: {value!r} is not a valid name (want {NAME.pattern}, or two joined by '.')")
    return Markup(value)


def _environment() -> SandboxedEnvironment:
    env = SandboxedEnvironment(
        autoescape=True, undefined=jinja2.StrictUndefined, finalize=_only_sql, keep_trailing_newline=True)
    env.filters["literal"] = _literal
    env.filters["ident"] = _ident
    return env


_ENV = _environment()


@dataclass(frozen=True)
class Macros:
    """A project's macros: the names each file defines and one compiled template holding them all."""

    names: dict[str, Path]
    """macro name -> the file defining it."""
    source: str
    """Every macro file's text, one after another (each file checked on its own first)."""

    @classmethod
    def load(cls, root: Path) -> Macros:
        """The macros of `root/macros/*.sql` (none when the folder is missing). A file that does not
        parse, holds anything but macro blocks, or defines a macro another file (or the runner:
        ref, source, var, caller) defines, is an error naming every such problem."""
        names: dict[str, Path] = {}
        problems: list[str] = []
        texts: list[str] = []
        for path in sorted((root / MACROS_DIR).glob("*.sql")):
            text = path.read_text()
            try:
                tree = _ENV.parse(text)
            except jinja2.TemplateSyntaxError as e:
                problems.append(f"{path}:{e.lineno}: {e.message}")
                continue
            for node in tree.body:
                if isinstance(node, jinja2.nodes.Macro):
                    if node.name in _BUILTINS:
                        problems.append(f"{path}:{node.lineno}: macro {node.name!r} would hide the runner's {node.name}()")
                    elif node.name in names:
                        problems.append(f"{path}:{node.lineno}: macro {node.name!r} already defined in {names[node.name]}")
                    else:
                        names[node.name] = path
                elif not (isinstance(node, jinja2.nodes.Output) and all(
                        isinstance(n, jinja2.nodes.TemplateData) and not n.data.strip() for n in node.nodes)):
                    problems.append(f"{path}:{_first_line(node)}: a macro file holds only "
                                    "{% macro name(args) %}...{% endmacro %} blocks (and {# comments #})")
            problems += [f"{path}: {c}: print it through | literal or | ident" for c in _constant_prints(tree)]
            texts.append(text)
        if problems:
            raise ProjectError("bad macros:\n  " + "\n  ".join(problems))
        return cls(names=names, source="\n".join(texts))

    def template(self) -> jinja2.Template | None:
        return _compiled(self.source) if self.names else None


def _constant_prints(tree: jinja2.nodes.Template) -> list[str]:
    """`{{ }}` expressions Jinja folds into constants at compile time (`{{ 'x' }}`, `{{ 1 + 1 }}`):
    printed without passing :func:`_only_sql` (autoescaping marks a folded constant safe first), so
    refused here unless the constant is what `| literal` or `| ident` made. 'value (line N)' each."""
    ctx = jinja2.nodes.EvalContext(_ENV)
    found = []
    for output in tree.find_all(jinja2.nodes.Output):
        for child in output.nodes:
            if isinstance(child, jinja2.nodes.TemplateData):
                continue
            try:
                value = child.as_const(ctx)
            except Exception:  # jinja2.nodes.Impossible, or a filter refusing its constant (raised again at render)
                continue
            if not isinstance(value, Markup):
                found.append(f"{value!r} (line {child.lineno})")
    return found


def _first_line(node: jinja2.nodes.Node) -> int:
    """The line of a node's first non-blank text (a text node starts where the block before it ended)."""
    if isinstance(node, jinja2.nodes.Output) and node.nodes and isinstance(node.nodes[0], jinja2.nodes.TemplateData):
        data = node.nodes[0].data
        return node.lineno + data[: len(data) - len(data.lstrip())].count("\n")
    return node.lineno


_COMPILED: dict[str, jinja2.Template] = {}


def _compiled(source: str) -> jinja2.Template:
    """The template of `source` (parsed and checked once per distinct text)."""
    t = _COMPILED.get(source)
    if t is None:
        tree = _ENV.parse(source)
        constants = _constant_prints(tree)
        if constants:
            raise _Refused(f"unsupported template expression printing {'; '.join(constants)}: only ref(), "
                           "source(), var(), macros, caller() and a literal passed through `| literal` or "
                           "`| ident` are rendered")
        t = _COMPILED[source] = _ENV.from_string(tree)
    return t


def render(
    template: str, where: str, resolve_ref: Callable[[str], str] | None = None, macros: Macros | None = None,
) -> tuple[str, list[str], list[str], list[str]]:
    """Render one model template. Returns (sql, refs, sources, vars), each list in order of use.

    A ref renders as the model's table name, or as `resolve_ref(name)` (an ephemeral model's
    parenthesised SQL) when given; a var as the bound parameter `$name`. `macros`: the project's
    macros, callable by name.
    """
    refs: list[str] = []
    sources: list[str] = []
    variables: list[str] = []

    def named(fn: str, into: list[str]) -> Callable[[str], Markup]:
        def call(name: Any) -> Markup:
            if not isinstance(name, str) or not NAME.match(name):
                raise _Refused(f"{fn}('{name}') is not a valid name (want {NAME.pattern})")
            into.append(name)
            if fn == "var":
                return Markup(f"${name}")
            if fn == "ref" and resolve_ref:
                return Markup(resolve_ref(name))
            return Markup(name)
        return call

    scope: dict[str, Any] = {"ref": named("ref", refs), "source": named("source", sources),
                             "var": named("var", variables)}
    if not _SYNTAX.search(_SIMPLE.sub("", template)):
        # only ref/source/var calls: the text Jinja would render, without compiling a template
        try:
            sql = _SIMPLE.sub(lambda m: str(scope[m.group(1)](m.group(2))), template)
        except _Refused as e:
            raise ProjectError(f"{where}: {e}") from None
        return sql, _dedupe(refs), _dedupe(sources), _dedupe(variables)
    try:
        lib = macros.template() if macros else None
        if lib is not None:
            module = lib.make_module(dict(scope))
            scope |= {name: getattr(module, name) for name in macros.names}  # type: ignore[union-attr]
        sql = _compiled(template).render(scope)
    except _Refused as e:
        raise ProjectError(f"{where}: {e}") from None
    except jinja2.TemplateSyntaxError as e:
        raise ProjectError(f"{where}:{e.lineno}: unsupported template: {e.message}") from None
    except jinja2.UndefinedError as e:
        raise ProjectError(f"{where}: unsupported template expression: {e.message}") from None
    except jinja2.TemplateError as e:
        raise ProjectError(f"{where}: template error: {e}") from None
    return sql, _dedupe(refs), _dedupe(sources), _dedupe(variables)


def _dedupe(xs: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(xs))


def params(sql: str) -> list[str]:
    """The `$names` a rendered statement binds, in order of use (strings and comments skipped)."""
    return _dedupe(_PARAM.findall(strip_strings(sql)))


def strip_strings(sql: str) -> str:
    # one left-to-right pass, so a quote inside a comment or a `--` inside a string is not misread
    return re.sub(r"'(?:[^']|'')*'|--[^\n]*|/\*.*?\*/", " ", sql, flags=re.S)


def validate_sql(sql: str, where: str) -> None:
    """A model is exactly one query that sqlglot parses (DuckDB dialect)."""
    try:
        parsed = sqlglot.parse(sql, read="duckdb")
    except sqlglot.errors.ParseError as e:
        raise ProjectError(f"{where}: SQL does not parse: {e}") from e
    stmts = [p for p in parsed if p is not None]
    if len(stmts) != 1 or not isinstance(stmts[0], sqlglot.exp.Query):
        raise ProjectError(f"{where}: a model must be exactly one select statement")
