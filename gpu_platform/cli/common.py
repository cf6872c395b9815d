"""Options and error handling shared by every `gpu-platform` command.

Exit codes: 0 success, 2 invalid input (every problem printed, one per line), 1 anything else.
A command that writes the warehouse exits 2 with one line too when another process held it
for the whole bounded wait (`WarehouseBusyExit`).
"""

from __future__ import annotations

import os
import sys
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import click
from rich.console import Console

if TYPE_CHECKING:
    from rich.table import Table

    from gpu_platform.policy import Policy

ROOT = Path(__file__).resolve().parents[2]
"""The repository (examples/, workspace.yaml): `gpu_platform.demo.instance.ROOT`, without importing
the demo for `demo --help` (tests/cli checks that they agree)."""
EXAMPLES = Path(str(files("gpu_platform") / "demo" / "examples" / "requests")).resolve()
"""`gpu_platform.demo.instance.EXAMPLES`: one request per lane, shipped in the package (found the
same way in a checkout and in an installed wheel)."""

policy_option = click.option(
    "--policy",
    "policy_path",
    type=click.Path(dir_okay=False),
    envvar="GPU_PLATFORM_POLICY",
    default=None,
    help="Policy file (default: $GPU_PLATFORM_POLICY or the packaged default.yaml).",
)
ledger_option = click.option(
    "--ledger",
    "ledger_url",
    default=None,
    help="Ledger SQLAlchemy URL (default: $GPU_PLATFORM_LEDGER_URL or sqlite under $GPU_PLATFORM_HOME).",
)


def checked_id(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A click callback: a request or artifact id given on the command line must match the
    request-id pattern (`gpu_platform.requests.model.id_problem`), so a newline or a control
    character in it never reaches a printed YAML, a query or a label. Exit 2 naming the value."""
    if value is None:
        return None
    from gpu_platform.requests.model import id_problem

    problem = id_problem(value, "id")
    if problem:
        raise click.BadParameter(problem, ctx=ctx, param=param)
    return value


class WarehouseBusyExit(click.ClickException):
    """A writer of the warehouse found it held by another process for the whole wait
    (`gpu_platform.finops.warehouse.WarehouseBusy`): one line naming the file and the holder, exit 2."""

    exit_code = 2


def fail(title: str, errors: list[str], code: int = 2) -> NoReturn:
    """Print a title and every problem on stderr, then exit (2: invalid input)."""
    click.echo(f"{title}: {len(errors)} problem(s)", err=True)
    for e in errors:
        click.echo(f"  {e}", err=True)
    sys.exit(code)


def policy_or_exit(path: str | None) -> Policy:
    """Load the policy or exit 2 listing every error with its path."""
    from gpu_platform.policy import PolicyError, load_policy

    try:
        return load_policy(path)
    except PolicyError as exc:
        fail(f"policy invalid: {exc.source}", exc.errors)


def _width(stream) -> int | None:
    """None (rich's own: the terminal's width, or $COLUMNS) on a terminal or where $COLUMNS is
    set; else 200, so a pipe or a file keeps a long row on one line."""
    return None if stream.isatty() or os.environ.get("COLUMNS", "").isdigit() else 200


class SafeConsole(Console):
    """A console that cannot be made to emit a control sequence by the text it prints: every
    segment's text (never rich's own styles or control segments) goes through
    `gpu_platform.safeload.text.plain`, so an `ESC[2J`, a C1 control or a bidi override in a
    value stored before validation refused them (or in a feed, a result file) prints escaped.
    Values that may hold rich markup are passed through `term` where they are formatted."""

    def _render_buffer(self, buffer):  # rich's one place where segments become output text
        from rich.segment import Segment

        from gpu_platform.safeload.text import plain

        return super()._render_buffer(
            seg if seg.control else Segment(plain(seg.text, keep="\n\t"), seg.style) for seg in buffer
        )


    @property
    def size(self):  # the width read when asked (`_width`), not when the console was made
        from rich.console import ConsoleDimensions

        dims = super().size
        width = _width(self.file)
        if width is None:
            columns = os.environ.get("COLUMNS", "")
            width = int(columns) if columns.isdigit() else dims.width
        return ConsoleDimensions(width, dims.height)

    @size.setter
    def size(self, new_size) -> None:
        Console.size.fset(self, new_size)


def make_console(stderr: bool = False) -> Console:
    """A console for a command's output (a `SafeConsole`). Its width follows the output and the
    environment at the time it prints (`_width`): the module-level consoles below are made when a
    command module is first imported, which says nothing of where a later command writes."""
    out = SafeConsole(stderr=stderr)
    out._width = None  # rich freezes $COLUMNS at construction; `size` reads it when asked
    return out


console = make_console()
err_console = make_console(stderr=True)


def print_table(out: Console, table: Table) -> None:
    """Print `table` as it is where every word of every cell fits its column at `out`'s width;
    else each row as a block of `column  value` lines under the table's title, so a wide table
    still reads at 80 columns with nothing cut (a value longer than its line folds onto the
    next; empty cells are left out). A command's JSON output holds the same rows."""
    from rich.cells import cell_len
    from rich.segment import SegmentLines
    from rich.table import Table

    lines = _rendered_whole(out, table)
    if lines is not None:
        out.print(SegmentLines(lines, new_lines=True))
        return
    rows = list(zip(*(list(c.cells) for c in table.columns), strict=True))
    if table.title:
        out.print(table.title, style="table.title")
    keys = min(max(cell_len(str(c.header)) for c in table.columns), max(out.width // 3, 1))
    for i, cells in enumerate(rows, 1):
        block = Table(box=None, show_header=False, padding=(0, 1), pad_edge=False)
        block.add_column(style="bold", overflow="fold", width=keys)
        block.add_column(overflow="fold")
        for column, cell in zip(table.columns, cells, strict=True):
            if str(cell).strip():
                block.add_row(column.header, cell)
        if len(rows) > 1:
            out.print(f"{'' if i == 1 else chr(10)}({i} of {len(rows)})", style="dim", highlight=False)
        out.print(block)
    if table.caption:
        out.print(table.caption, style="table.caption")


def _rendered_whole(out: Console, table: Table) -> list | None:
    """`table` rendered for `out` (lines of segments) when each word of each cell fits its column:
    rendered with every column's overflow an ellipsis (what a fitting table renders the same),
    no line is wider than the console and no ellipsis shows that no cell holds; else None."""
    from rich.segment import Segment

    saved = [c.overflow for c in table.columns]
    for c in table.columns:
        c.overflow = "ellipsis"
    try:
        lines = list(Segment.split_lines(out.render(table, out.options)))
    finally:
        for c, overflow in zip(table.columns, saved, strict=True):
            c.overflow = overflow
    held = sum(str(cell).count("…") for c in table.columns for cell in (c.header, *c.cells))
    shown = sum(seg.text.count("…") for line in lines for seg in line)
    fits = shown <= held and all(Segment.get_line_length(line) <= out.width for line in lines)
    return lines if fits else None


class _Deferred:
    """A stand-in for a name of a module not imported yet (see `deferred`)."""

    __slots__ = ("_load", "_name")

    def __init__(self, load, name: str) -> None:
        self._load, self._name = load, name

    def _target(self):
        return getattr(self._load(), self._name) if self._name else self._load()

    def __call__(self, *args, **kwargs):
        return self._target()(*args, **kwargs)

    def __getattr__(self, attr: str):
        return getattr(self._target(), attr)


def deferred(namespace: dict, module: str, *names: str) -> tuple:
    """Stand-ins for `from module import names` (or, without names, for `import module`) that
    import `module` on first use, for a command module whose bodies name these at module level
    but whose `--help` must not import them (issue 40). The first use of any of them binds every
    one in `namespace` (the module's globals) to the real object, so an `except NAME` that follows
    a call of a sibling sees the real class. A body that imports what it uses needs none of this."""
    import importlib

    def load():
        mod = importlib.import_module(module)
        for name in names:
            namespace[name] = getattr(mod, name)
        return mod

    return tuple(_Deferred(load, name) for name in names) if names else (_Deferred(load, ""),)
