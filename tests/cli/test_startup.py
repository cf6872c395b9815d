"""A CLI that answers at once (issue 40): `gpu-platform --help` and every `COMMAND --help` import
click, rich and the command's own module, never the heavy libraries the commands use when they
run; the root lists every command from static short helps that match the commands' docstrings."""

from __future__ import annotations

import json
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from gpu_platform.cli.app import COMMANDS, main

HEAVY = (
    "duckdb",
    "polars",
    "sqlalchemy",
    "dagster",
    "numpy",
    "pyarrow",
    "pandas",
    "kubernetes",
    "gpu_platform.finops.sqlmodels.runner",
    "gpu_platform.admission.cases",
)


def _paths() -> list[list[str]]:
    """[] (the root), every command and every subcommand, walked from the click tree."""
    out: list[list[str]] = [[]]

    def walk(cmd: click.Command, path: list[str], ctx: click.Context) -> None:
        if isinstance(cmd, click.Group):
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                out.append([*path, name])
                walk(sub, [*path, name], click.Context(sub, parent=ctx, info_name=name))

    walk(main, [], click.Context(main, info_name="gpu-platform"))
    return out


def _fresh(code: str) -> str:
    env = {"GPU_PLATFORM_CONFIG": "none", "PATH": "/usr/bin:/bin"}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip().splitlines()[-1]


def test_importing_the_root_cli_module_imports_no_heavy_library():
    code = f"import sys, json, gpu_platform.cli.app; print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    assert json.loads(_fresh(code)) == []


def test_help_of_the_root_and_of_every_command_imports_no_heavy_library():
    """Each --help in turn in one fresh process, as `gpu-platform ... --help` runs it: what each
    one added to sys.modules of the heavy list (the root's --help: not even a command module)."""
    code = f"""
import contextlib, io, json, sys
from gpu_platform.cli import main
heavy, found = {HEAVY!r}, {{}}
for path in {_paths()!r}:
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            main([*path, "--help"], prog_name="gpu-platform")
        except SystemExit as e:
            assert e.code == 0, (path, e.code)
    if path == []:
        found["(root) command modules"] = sorted(m for m in sys.modules if m.startswith("gpu_platform.cli.")
                                                 and m not in ("gpu_platform.cli.app", "gpu_platform.cli.__main__"))
    new = [m for m in heavy if m in sys.modules and not any(m in v for v in found.values())]
    if new:
        found[" ".join(path)] = new
print(json.dumps({{k: v for k, v in found.items() if v}}))
"""
    assert json.loads(_fresh(code)) == {}


def test_gpu_platform_help_in_a_subprocess_imports_no_heavy_library(tmp_path):
    """The installed entry point itself (`gpu-platform --help`), through a sitecustomize that
    reports what the process imported when it exits."""
    (tmp_path / "sitecustomize.py").write_text(
        "import atexit, json, os, sys\n"
        f"atexit.register(lambda: open(os.environ['REPORT'], 'w').write(json.dumps([m for m in {HEAVY!r} "
        "if m in sys.modules])))\n"
    )
    report = tmp_path / "report.json"
    script = [sys.executable, "-c", "import sys; from gpu_platform.cli import main; sys.exit(main())", "--help"]
    env = {"GPU_PLATFORM_CONFIG": "none", "PYTHONPATH": str(tmp_path), "REPORT": str(report), "PATH": "/usr/bin:/bin"}
    res = subprocess.run(script, capture_output=True, text=True, env=env, check=False)
    assert res.returncode == 0 and "Commands:" in res.stdout, res.stderr
    assert json.loads(report.read_text()) == []


@pytest.mark.parametrize("path", _paths(), ids=lambda p: " ".join(p) or "(root)")
def test_every_command_help_works(path):
    res = CliRunner().invoke(main, [*path, "--help"], prog_name="gpu-platform")
    assert res.exit_code == 0, res.output
    assert res.output.startswith(f"Usage: gpu-platform {' '.join(path)}".rstrip())


def test_the_root_lists_every_command_with_its_own_short_help():
    ctx = click.Context(main, info_name="gpu-platform")
    for name, (target, short) in COMMANDS.items():
        cmd = main.get_command(ctx, name)
        assert cmd is not None and cmd.name == name, target
        assert cmd.get_short_help_str(10**6) == short, f"{name}: update COMMANDS in gpu_platform/cli/app.py"
    res = CliRunner().invoke(main, ["--help"], terminal_width=80)
    listed = [line.split()[0] for line in res.output.split("Commands:\n", 1)[1].splitlines() if line.strip()]
    assert listed == sorted(COMMANDS)


def test_an_unknown_command_is_refused_with_exit_2():
    res = CliRunner().invoke(main, ["no-such-command"])
    assert res.exit_code == 2 and "No such command 'no-such-command'" in res.output


def test_constants_spelled_for_a_light_start_agree_with_their_sources():
    from gpu_platform.cli.approve import APPROVAL_KINDS
    from gpu_platform.cli.common import EXAMPLES, ROOT
    from gpu_platform.demo import instance
    from gpu_platform.policy import APPROVAL_KINDS as POLICY_KINDS

    assert APPROVAL_KINDS == POLICY_KINDS
    assert (ROOT, EXAMPLES) == (instance.ROOT, instance.EXAMPLES)


def test_deferred_names_bind_the_real_objects_before_an_except_needs_them():
    from gpu_platform.cli.common import deferred

    ns: dict = {}
    ns["loads"], ns["JSONDecodeError"] = deferred(ns, "json", "loads", "JSONDecodeError")
    with pytest.raises(TypeError):  # a stand-in is no exception class...
        try:
            raise ValueError
        except ns["JSONDecodeError"]:
            pass
    try:
        ns["loads"]("{")  # ...but the first use of a sibling binds the real one
    except ns["JSONDecodeError"]:
        pass
    assert ns["JSONDecodeError"] is json.JSONDecodeError and ns["loads"] is json.loads
    (mod,) = deferred({}, "json")
    assert mod.dumps([1]) == "[1]"
