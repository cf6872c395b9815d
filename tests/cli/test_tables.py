"""Tables that fit a terminal (issue 40): every table the CLI prints reads at 80 columns: no line
wider than the terminal and no cell cut to an ellipsis; a table too wide for the width becomes one
block of `column  value` lines per row (`gpu_platform.cli.common.print_table`), and the JSON
output still holds every column.

Real data the tests already build: the demo's live requests in a SQLite ledger (queue, explain),
the hand-computed cost scenario built by `cost build` (cost report, scorecard), the FOCUS
reference sample (feeds ingest), the packaged policy (policy check), the hand FIFO trace
(simulate's lane table, on stderr).
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table

from gpu_platform.cli import main
from gpu_platform.cli.common import print_table
from gpu_platform.cli.demo import _load, live_request_files
from gpu_platform.requests.ledger import Ledger
from tests.sqlmodels.finops_scenario import DAY, load_scenario

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
WIDTHS = (80, 140)


def _run(args: list[str], width: int, env: dict | None = None):
    res = CliRunner().invoke(main, args, env={"COLUMNS": str(width), **(env or {})}, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return res


def _assert_reads(text: str, width: int) -> None:
    lines = text.splitlines()
    assert lines, "no output"
    wide = [line for line in lines if cell_len(line) > width]
    assert not wide, f"{len(wide)} line(s) wider than {width}: {wide[0]!r}"
    cut = [line for line in lines if "…" in line or "..." in line]
    assert not cut, f"a cell cut to an ellipsis at {width} columns: {cut[0]!r}"


@pytest.fixture(scope="module")
def demo_ledger(tmp_path_factory, policy):
    """The demo's live requests (one per lane, the release chain, the research sweep), submitted."""
    home = tmp_path_factory.mktemp("home")
    ledger = Ledger(f"sqlite:///{home / 'ledger.db'}")
    ids = ledger.submit_batch([_load(p, policy) for p in live_request_files()])
    return ledger.url, home, ids


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory) -> str:
    """The hand-computed cost scenario, built (`cost build`): every section of `cost report`."""
    wh = tmp_path_factory.mktemp("wh") / "wh.duckdb"
    con = duckdb.connect(str(wh))
    load_scenario(con)
    con.close()
    res = CliRunner().invoke(main, ["cost", "build", "--day", DAY, "--warehouse", str(wh)])
    assert res.exit_code == 0, res.output
    return str(wh)


@pytest.mark.parametrize("width", WIDTHS)
def test_queue_reads(demo_ledger, width):
    url, home, ids = demo_ledger
    for extra in ([], ["--all"]):
        res = _run(["queue", "--ledger", url, *extra], width, {"GPU_PLATFORM_HOME": str(home)})
        _assert_reads(res.output, width)
        assert all(rid in res.output for rid in ids)  # every request, its id whole


def test_queue_keeps_its_table_where_the_terminal_is_wide_enough(demo_ledger):
    url, home, _ = demo_ledger
    res = _run(["queue", "--ledger", url], 240, {"GPU_PLATFORM_HOME": str(home)})
    assert "┃ lane " in res.output  # a table with its header row, not blocks
    _assert_reads(res.output, 240)


@pytest.mark.parametrize("width", WIDTHS)
def test_explain_reads(demo_ledger, width):
    url, _, ids = demo_ledger
    for rid in ids[:3]:
        _assert_reads(_run(["explain", rid, "--ledger", url], width).output, width)


@pytest.mark.parametrize("width", WIDTHS)
def test_cost_report_reads_and_its_json_holds_every_column(warehouse, width):
    res = _run(["cost", "report", "--day", DAY, "--warehouse", warehouse, "--format", "table"], width)
    _assert_reads(res.output, width)
    data = json.loads(_run(["cost", "report", "--day", DAY, "--warehouse", warehouse, "--format", "json"], width).output)
    (usd,) = data["totals"]
    # the totals' 17 columns: each value whole in the table (was "7162..." at 80 and 140)
    for key, value in usd.items():
        if key in ("currency", "billed_cost", "effective_cost", "allocated_cost", "idle_cost", "chargeback_total"):
            assert str(value) in res.output, key
    for section in ("Totals", "Chargeback by team", "Month-end forecast", "Budget burn", "Unit costs"):
        assert section in res.output


@pytest.mark.parametrize("width", WIDTHS)
def test_scorecard_reads(warehouse, width):
    _assert_reads(_run(["scorecard", "--day", DAY, "--warehouse", warehouse, "--all-signals"], width).output, width)


@pytest.mark.parametrize("width", WIDTHS)
def test_feeds_ingest_reads(tmp_path, width):
    focus = FIXTURES / "feeds" / "focus-1.0-sample.csv"  # the official sample: rows of many days
    res = _run(["feeds", "ingest", "--day", "2024-09-18", "--focus", str(focus), "--warehouse",
                str(tmp_path / "w.duckdb"), "--format", "table"], width)
    _assert_reads(res.stdout, width)
    assert str(focus) in res.stdout.replace("\n", "")  # the source path whole (folded, never cut)


@pytest.mark.parametrize("width", WIDTHS)
def test_policy_check_reads(width):
    _assert_reads(_run(["policy", "check"], width).output, width)


@pytest.mark.parametrize("width", WIDTHS)
def test_simulate_lane_table_reads(width):
    sim = FIXTURES / "simulate"
    res = _run(["simulate", "--trace", str(sim / "hand-fifo.csv"), "--policy", str(sim / "policy-one-flavor.yaml"),
                "--compare", "fifo"], width)
    _assert_reads(res.stderr, width)


def test_a_wide_table_becomes_blocks_with_every_value_whole():
    table = Table(title="wide")
    cols = [f"column_number_{i}" for i in range(12)]
    for c in cols:
        table.add_column(c)
    table.add_row(*(f"{i * 1111.125:.6f}" for i in range(12)))
    table.add_row(*("x" for _ in cols))
    out = Console(width=80, record=True, color_system=None)
    with out.capture() as cap:
        print_table(out, table)
    text = cap.get()
    _assert_reads(text, 80)
    assert "(1 of 2)" in text and "(2 of 2)" in text
    assert all(f"{i * 1111.125:.6f}" in text for i in range(12)) and all(c in text for c in cols)


def test_a_table_that_fits_is_printed_as_it_is():
    table = Table(title="narrow")
    table.add_column("a")
    table.add_column("b")
    table.add_row("1", "2")
    out = Console(width=80, color_system=None)
    with out.capture() as cap:
        print_table(out, table)
    assert "┃ a ┃ b ┃" in cap.get()
