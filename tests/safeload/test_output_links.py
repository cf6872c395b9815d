"""Writes that never follow links (issue 42, class 9): every file `report --out`, `deploy render
--out` and `kueue export --out` write is planted beforehand as a symbolic link to a victim file;
the victim stays intact and each name becomes a regular file. Write errors (ENOSPC, EACCES,
EROFS) are one line naming the path, no traceback."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpu_platform.cli import main
from gpu_platform.safeload import files
from gpu_platform.safeload.files import OutputDir, WriteRefused, write_file
from tests.observability.test_report import ledger, warehouse  # noqa: F401  (fixtures)

VICTIM_TEXT = "precious: do not overwrite\n"


def _commands(tmp: Path, ledger_url: str, warehouse_path: Path) -> dict[str, list[str]]:
    return {
        "report": ["report", "--days", "60", "--ledger", ledger_url, "--warehouse", str(warehouse_path)],
        "deploy": ["deploy", "render"],
        "kueue": ["kueue", "export"],
    }


def _written(root: Path) -> list[Path]:
    return sorted(p.relative_to(root) for p in root.rglob("*") if p.is_file())


@pytest.mark.parametrize("command", ["report", "deploy", "kueue"])
def test_planted_links_leave_their_target_intact(command, tmp_path, ledger, warehouse) -> None:  # noqa: F811
    args = _commands(tmp_path, ledger.url, warehouse)[command]
    runner = CliRunner()
    probe = tmp_path / "probe"
    first = runner.invoke(main, [*args, "--out", str(probe)])
    assert first.exit_code == 0, first.output
    names = _written(probe)
    assert len(names) >= 3, names

    victim = tmp_path / "victim.txt"
    victim.write_text(VICTIM_TEXT)
    out = tmp_path / "out"
    for name in names:
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).symlink_to(victim)
    result = runner.invoke(main, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert victim.read_text() == VICTIM_TEXT
    for name in names:
        assert not (out / name).is_symlink(), name
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    assert not [p for p in out.rglob(".*.tmp")]


@pytest.mark.parametrize("command", ["deploy", "kueue"])
def test_a_symlinked_output_directory_is_refused(command, tmp_path) -> None:
    args = {"deploy": ["deploy", "render"], "kueue": ["kueue", "export"]}[command]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "out").symlink_to(elsewhere)
    result = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "out")])
    assert result.exit_code == 1
    assert "is a symbolic link" in result.output and str(tmp_path / "out") in result.output
    assert "Traceback" not in result.output and not list(elsewhere.iterdir())


def test_a_link_to_dev_full_is_replaced_and_dev_full_itself_is_refused(tmp_path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "a.yaml").symlink_to("/dev/full")
    write_file(out / "a.yaml", "x: 1\n")
    assert (out / "a.yaml").read_text() == "x: 1\n" and not (out / "a.yaml").is_symlink()
    with pytest.raises(WriteRefused, match="/dev/full: exists and is not a regular file"):
        write_file("/dev/full", "x")


@pytest.mark.parametrize(
    ("code", "where"),
    [(errno.ENOSPC, "write"), (errno.EACCES, "open"), (errno.EROFS, "open")],
)
@pytest.mark.parametrize("command", ["deploy", "kueue"])
def test_write_errors_are_one_line_naming_the_path(command, code, where, tmp_path, monkeypatch) -> None:
    real = getattr(os, where)

    def failing(*a, **kw):
        if where == "open" and kw.get("dir_fd") is None:
            return real(*a, **kw)  # the directory itself opens; files in it do not
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(files.os, where, failing)
    args = {"deploy": ["deploy", "render"], "kueue": ["kueue", "export"]}[command]
    out = tmp_path / "out"
    result = CliRunner().invoke(main, [*args, "--out", str(out)])
    monkeypatch.undo()
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert str(out) in lines[0] and os.strerror(code) in lines[0]
    assert "Traceback" not in result.output
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]


def test_a_file_in_the_way_of_the_directory_is_one_line(tmp_path) -> None:
    (tmp_path / "out").write_text("a file")
    result = CliRunner().invoke(main, ["kueue", "export", "--out", str(tmp_path / "out")])
    assert result.exit_code in (1, 2) and "Traceback" not in result.output
    with pytest.raises(WriteRefused, match="not a directory"):
        OutputDir(tmp_path / "out")
