"""What a terminal shows cannot be forged by a stored value (issue 42, class 7): a request recorded
before validation refused control and bidi characters (or any value that reaches a console)
prints escaped in `queue`, `explain` and `lineage`: no ESC reaches the terminal, a newline in a
value does not start a line, U+202E does not reorder, rich markup in a value prints as written."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpu_platform.cli import main
from gpu_platform.lineage.graph import LineageStore, WorkloadRun
from gpu_platform.requests.ledger import Ledger
from gpu_platform.requests.model import validate_request
from tests.gate.helpers import raw_request

ROOT = Path(__file__).resolve().parents[2]
FORGED_OWNER = "mallory\x1b[2J\nAPPROVED by platform-lead\u202e[link=http://evil.example]x[/link]"


@pytest.fixture
def ledger(tmp_path, policy) -> tuple[Ledger, str]:
    led = Ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    req = validate_request(raw_request("research_best_effort"), policy)
    # as a ledger written before the rule holds it: the stored request is not validated again
    rid = led.submit(req.model_copy(update={"owner": FORGED_OWNER}))
    led.record(rid, "waiting", "waiting for quota\x1b[31m\nAPPROVED", details={"position": 1})
    store = LineageStore(led.engine)
    stored = {s.request_id: s.request for s in led.states()}[rid]
    store.record_run(WorkloadRun.for_request(
        stored.model_copy(update={"request_id": rid}), "training_run", "succeeded",
        checkpoint_uri="s3://b/ckpt\x1b]0;pwned\x07[bold]x[/bold]"))
    return led, rid


def _clean(text: str) -> None:
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    assert not any(line.lstrip().startswith("APPROVED") for line in text.splitlines()), text


def test_queue_escapes_stored_values(ledger) -> None:
    led, _rid = ledger
    result = CliRunner().invoke(main, ["queue", "--ledger", led.url, "--all"])
    assert result.exit_code == 0, result.output
    _clean(result.output)
    assert "\\x1b" in result.output


def test_explain_escapes_stored_values(ledger) -> None:
    led, rid = ledger
    result = CliRunner().invoke(main, ["explain", rid, "--ledger", led.url])
    assert result.exit_code == 0, result.output
    _clean(result.output)
    assert "[link=http://evil.example]" in result.output.replace("\n", "") or "link=http" in result.output


def test_lineage_escapes_stored_values(ledger) -> None:
    led, rid = ledger
    result = CliRunner().invoke(main, ["lineage", rid, "--ledger", led.url])
    assert result.exit_code == 0, result.output
    _clean(result.output)
    assert "[bold]x[/bold]" in result.output


def test_every_console_is_a_safe_console() -> None:
    """Consoles are made by `cli.common.make_console` (or are a `SafeConsole`); the listed
    exceptions print only the platform's own progress lines."""
    allowed = {"gpu_platform/cli/demo.py", "assets/demo_seed.py"}
    offenders = []
    for folder in ("gpu_platform", "assets", "resources"):
        for path in (ROOT / folder).rglob("*.py"):
            rel = str(path.relative_to(ROOT))
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Console"
                        and rel not in allowed):
                    offenders.append(f"{rel}:{node.lineno}")
    assert not offenders, f"a rich Console that does not escape what it prints: {offenders}"
