"""Every `MetadataValue.md(...)` site (issue 42, class 8): each is listed here with what makes the
values in it unable to open a link, an image, HTML or a code span. A new site fails this test
until it is reviewed and listed; the listed escapes are tested in tests/safeload/test_text.py and
below on the real builders."""

from __future__ import annotations

import ast
from pathlib import Path

from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[2]

REVIEWED: dict[tuple[str, str], str] = {
    ("assets/ingest.py", "_metadata"): "IngestReport.metadata: every reason, file, flag and error through md()",
    ("assets/scorecards.py", "signal_check_results"): "markdown_table: every cell through md()",
    ("assets/finops.py", "_figures"): "the *_md figures are markdown_table output (cells through md())",
    ("assets/finops.py", "_asset"): "the model's own SQL from the repository in a fence, and markdown_table details",
    ("assets/gate.py", "submit_request_op"): "validation problems as md_code() spans",
    ("assets/workloads.py", "upstream_metadata"): "asset names and pattern-checked ids through md()/md_code()",
    ("assets/workloads.py", "dagster_metadata"): "MARKDOWN_KEYS: lineage_markdown, every cell through md()",
    ("assets/workloads.py", "_check_result"): "each missing item through md()",
    ("assets/workloads.py", "sweep_evidence"): "digest and reason cells through md()",
    ("assets/serving.py", "inference_service"): "service_markdown is markdown_table output (cells through md()); the other texts are literals",
}

_RENDER = MarkdownIt("commonmark").enable("table")
HOSTILE = "![x](http://evil.example/i.png) [y](javascript:alert(1)) <img src=x> `tick"


class _Finder(ast.NodeVisitor):
    """(innermost enclosing function, ...) of every `*.MetadataValue.md(...)` call."""

    def __init__(self) -> None:
        self.stack: list[str] = ["<module>"]
        self.found: set[str] = set()

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.stack.append(node.name)
        self.generic_visit(node)
        self.stack.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Call(self, node: ast.Call) -> None:
        f = node.func
        if (isinstance(f, ast.Attribute) and f.attr == "md" and isinstance(f.value, ast.Attribute)
                and f.value.attr == "MetadataValue"):
            self.found.add(self.stack[-1])
        self.generic_visit(node)


def _sites() -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for folder in ("assets", "resources", "gpu_platform"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            finder = _Finder()
            finder.visit(ast.parse(path.read_text(encoding="utf-8")))
            found |= {(str(path.relative_to(ROOT)), name) for name in finder.found}
    return found


def test_every_markdown_metadata_site_is_reviewed() -> None:
    sites = _sites()
    assert sites, "no MetadataValue.md site found: the walker is broken"
    unreviewed = sorted(sites - set(REVIEWED))
    assert not unreviewed, f"MetadataValue.md with values not reviewed for escaping: {unreviewed}"


def _live(html: str) -> bool:
    return "<img" in html or "<a " in html


def test_the_check_result_and_sweep_tables_escape_their_values() -> None:
    import dagster as dg

    from assets.workloads import _check_result
    from gpu_platform.lineage.graph import CheckOutcome

    outcome = CheckOutcome("lineage_complete", False, missing=(HOSTILE,), checked=1)
    result = _check_result(outcome, dg.AssetCheckSeverity.ERROR, "req-1")
    html = _RENDER.render(result.metadata["missing_md"].value)
    assert not _live(html) and "<code>" not in html


def test_lineage_markdown_escapes_its_cells() -> None:
    from gpu_platform.workloads.stages import lineage_markdown

    manifest = {"stages": [{"kind": "replay", "request_id": "req-1", "status": HOSTILE,
                            "dataset_ids": [HOSTILE], "map_ids": [], "log_digest": "sha256:" + "0" * 64}]}
    html = _RENDER.render(lineage_markdown(manifest))
    assert not _live(html) and html.count("<td>") == 6


def test_the_service_table_escapes_its_cells() -> None:
    from gpu_platform.finops.sqlmodels.report import SERVICE_COLUMNS, service_markdown

    row = {c: HOSTILE for c in SERVICE_COLUMNS} | {"requests": 1000, "cost_per_1k_requests": None,
                                                     "idle_cost_per_1k_requests": None}
    html = _RENDER.render(service_markdown([row]))
    assert not _live(html) and "<code>" not in html and html.count("<td>") == len(SERVICE_COLUMNS)
