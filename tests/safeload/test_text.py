"""Text that cannot forge (issue 42, classes 7 and 8): free-text fields refuse control and bidi
characters naming the field and the code point; what reaches a terminal or Dagster markdown goes
through `gpu_platform.safeload.text` (`term`/`plain`, `md`/`md_code`)."""

from __future__ import annotations

import pytest
import yaml
from markdown_it import MarkdownIt

from gpu_platform.finops.feeds.ingest import IngestReport
from gpu_platform.finops.tables import markdown_table
from gpu_platform.requests.model import JobRequest, RequestError, validate_request
from gpu_platform.safeload.text import md, md_code, plain, term, unsafe_chars
from tests.gate.helpers import raw_request

HOSTILE = [
    ("\x1b", "U+001B"),  # ESC[2J clears a terminal
    ("\n", "U+000A"),  # forges a line in explain
    ("\r", "U+000D"),
    ("\x7f", "U+007F"),
    ("\x9b", "U+009B"),  # C1 CSI
    ("\u202e", "U+202E"),  # right-to-left override
    ("\u2066", "U+2066"),  # left-to-right isolate
    ("\u200f", "U+200F"),  # right-to-left mark
    ("\u2028", "U+2028"),  # line separator
]
FIELDS = ["owner", "cost_center", "approver", "odd_cell", "incident_id", "data_access_scope", "site"]

_RENDER = MarkdownIt("commonmark").enable("table")


def _html(text: str) -> str:
    return _RENDER.render(text)


@pytest.mark.parametrize(("char", "code"), HOSTILE)
@pytest.mark.parametrize("field", FIELDS)
def test_free_text_refuses_control_and_bidi_naming_field_and_code_point(field, char, code, policy) -> None:
    raw = raw_request("incident_response")
    raw[field] = f"ok{char}APPROVED by platform-lead"
    with pytest.raises(RequestError) as exc:
        validate_request(raw, policy)
    assert any(e.startswith(f"{field}:") and code in e for e in exc.value.errors), exc.value.errors
    assert all(e.isprintable() for e in exc.value.errors)


def test_list_items_and_env_refuse_too_but_command_may_hold_a_newline(policy) -> None:
    raw = raw_request("research_best_effort", dataset_ids=["ds-1"], env={"A": "x\u202ey"})
    raw["command"] = ["python", "-c", "import sys\nprint(1)\x1b"]
    with pytest.raises(RequestError) as exc:
        validate_request(raw, policy)
    text = "\n".join(exc.value.errors)
    assert "env.A" in text or "env:" in text
    assert "U+202E" in text and "U+001B" in text and "U+000A" not in text
    raw = raw_request("research_best_effort", command=["python", "-c", "import sys\n\tprint(1)"])
    assert validate_request(raw, policy).command[-1] == "import sys\n\tprint(1)"


def test_a_stored_request_from_before_the_rule_still_loads(policy) -> None:
    req = validate_request(raw_request("research_best_effort"), policy)
    stored = req.model_copy(update={"owner": "mallory\x1b[2J"}).to_json()
    assert JobRequest.from_json(stored).owner == "mallory\x1b[2J"


def test_unsafe_chars_allow_only_what_a_field_documents() -> None:
    assert unsafe_chars("a\tb\nc", allow="\t\n") == []
    assert unsafe_chars("a\tb\u202ec", allow="\t\n") == ["\u202e"]
    assert unsafe_chars("plain text, ümlaut, 日本") == []


@pytest.mark.parametrize("value", ["a\x1b[2Jb", "x\nAPPROVED by platform-lead", "ab\u202edc", "[bold]x[/bold]", "tail\\"])
def test_terminal_text_is_one_printable_line(value) -> None:
    from rich.console import Console

    for shown in (plain(value), term(value)):
        assert shown.isprintable() and "\u202e" not in shown
    console = Console(width=200, force_terminal=False, color_system=None, record=True)
    console.print(f"owner {term(value)} end")
    out = console.export_text()
    assert out.count("\n") == 1 and "\x1b" not in out
    if value.startswith("[bold]"):
        assert "[bold]x[/bold]" in out


@pytest.mark.parametrize(
    "value",
    ["![x](http://evil.example/p.png)", "[x](javascript:alert(1))", "<img src=x onerror=alert(1)>",
     "<a href='http://e'>x</a>", "USD`](http://e)", "a|b\n| c | d |", "# heading", "http://auto.link/x"],
)
def test_markdown_values_stay_text(value) -> None:
    html = _html(f"| k | v |\n|---|---|\n| {md(value)} | 1 |\n\n- {md(value)}\n\nspan {md_code(value)}")
    assert "<img" not in html and "<a " not in html and "<h1" not in html
    assert html.count("<tr>") == 2 and html.count("<td>") == 2  # no cell or row added


def test_a_backtick_cannot_close_its_code_span() -> None:
    html = _html(f"team {md_code('perc`[x](http://e)`')}")
    assert "<a " not in html and html.count("<code>") == 1


def test_ingest_metadata_quarantine_tables_escape_file_names_and_currencies() -> None:
    rep = IngestReport(rows_in=1, quarantined=1, files_in=1)
    rep.reasons["currency '![x](http://evil.example/i.png)' is not ISO 4217"] = 1
    rep.quarantined_files.append(("focus/[x](javascript:alert(1)).csv", "![y](http://evil.example/y.png)"))
    rep.currency_flags.append("<img src=x>")
    rep.errors.append("[z](javascript:z)")
    meta = rep.metadata()
    for key in ("quarantine_reasons", "quarantined_files", "currency_flags", "scrape_errors"):
        html = _html(str(meta[key]))
        assert "<img" not in html and "<a " not in html, (key, html)


def test_markdown_table_cells_are_escaped() -> None:
    html = _html(markdown_table([{"team": "![t](http://e/i.png)", "cost": 1.5, "currency": "[c](javascript:x)"}],
                                ["team", "cost", "currency"]))
    assert "<img" not in html and "<a " not in html and html.count("<td>") == 3


def test_examples_still_validate(policy) -> None:
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "examples"
    paths = [*root.glob("requests/*.yaml"), *root.glob("requests/release_chain/*.yaml")]
    assert paths
    for p in paths:
        validate_request(yaml.safe_load(p.read_text()), policy, source=str(p))
