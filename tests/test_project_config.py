"""The CLI finds its state: a project config (./gpu-platform.yaml, $XDG_CONFIG_HOME/gpu-platform/
config.yaml, or $GPU_PLATFORM_CONFIG) names the home; the environment wins over it; a command that
creates a new home says so on stderr, in one line."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from click.testing import CliRunner
from rich.console import Console

from gpu_platform.cli import main
from gpu_platform.cli.demo import write_project_config
from gpu_platform.cli.project import DEMO_MARK
from tests.conftest import EXAMPLES

VARS = ("GPU_PLATFORM_HOME", "GPU_PLATFORM_LEDGER_URL", "GPU_PLATFORM_WAREHOUSE", "GPU_PLATFORM_CONFIG", "DAGSTER_HOME")


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A project directory as the working directory, no variable set, an empty XDG config dir."""
    for var in VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    work = tmp_path / "project"
    work.mkdir()
    monkeypatch.chdir(work)
    shutil.copy(EXAMPLES / "labeler_batch.yaml", work / "labels.yaml")
    return work


def _run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_the_config_in_the_working_directory_names_the_home(project):
    (project / "gpu-platform.yaml").write_text("home: state\n")
    sub = _run("submit", "labels.yaml")
    assert sub.exit_code == 0, sub.output
    assert (project / "state" / "ledger.db").exists() and not (project / "var").exists()
    lines = [line for line in sub.stderr.splitlines() if "new home" in line]
    assert lines == [f"gpu-platform: created a new home {project / 'state'} (home from {project / 'gpu-platform.yaml'})"]
    out = _run("queue", "--format", "json")
    assert [r["request_id"] for r in json.loads(out.stdout)] == [sub.stdout.strip()]
    assert "new home" not in out.stderr  # it exists now: nothing to say
    # the config speaks for one command: the caller's environment is left as it was
    assert "GPU_PLATFORM_HOME" not in os.environ


def test_the_environment_wins_over_the_config(project, tmp_path, monkeypatch):
    (project / "gpu-platform.yaml").write_text("home: state\n")
    monkeypatch.setenv("GPU_PLATFORM_HOME", str(tmp_path / "from-env"))
    sub = _run("submit", "labels.yaml")
    assert sub.exit_code == 0, sub.output
    assert (tmp_path / "from-env" / "ledger.db").exists() and not (project / "state").exists()
    assert "(from GPU_PLATFORM_HOME)" in sub.stderr


def test_the_xdg_config_is_the_fallback_and_names_the_ledger(project, tmp_path):
    xdg = tmp_path / "xdg" / "gpu-platform"
    xdg.mkdir(parents=True)
    (xdg / "config.yaml").write_text("home: ../../shared-home\nledger: ../../ledgers/main.db\n")
    sub = _run("submit", "labels.yaml")
    assert sub.exit_code == 0, sub.output
    assert (tmp_path / "ledgers" / "main.db").exists()
    assert f"created a new home {tmp_path / 'shared-home'}" not in sub.stderr  # the ledger is elsewhere
    assert not (project / "var").exists()


def test_without_any_config_the_default_home_says_where_the_demo_lives(project):
    sub = _run("queue")
    assert sub.exit_code == 0, sub.output
    assert (project / "var" / "ledger.db").exists()
    (line,) = [x for x in sub.stderr.splitlines() if "new home" in x]
    assert str(project / "var") in line and "gpu-platform.yaml" in line and ".demo" in line


def test_a_bad_config_is_exit_2_naming_each_key(project):
    (project / "gpu-platform.yaml").write_text("home: state\nwarehose: w.duckdb\nledger: 3\n")
    out = _run("queue")
    assert out.exit_code == 2
    assert "project config invalid" in out.stderr
    assert "warehose: unknown key" in out.stderr and "ledger:" in out.stderr
    assert not (project / "state").exists()


def test_config_env_var_names_a_file_or_turns_the_lookup_off(project, tmp_path, monkeypatch):
    (project / "gpu-platform.yaml").write_text("home: state\n")
    monkeypatch.setenv("GPU_PLATFORM_CONFIG", "none")
    assert _run("queue").exit_code == 0
    assert (project / "var").exists() and not (project / "state").exists()
    monkeypatch.setenv("GPU_PLATFORM_CONFIG", str(tmp_path / "missing.yaml"))
    out = _run("queue")
    assert out.exit_code == 2 and "does not exist" in out.stderr


def test_the_demo_writes_its_config_and_leaves_a_foreign_one(project, monkeypatch):
    monkeypatch.setenv("GPU_PLATFORM_HOME", str(project / ".demo"))
    monkeypatch.setenv("DAGSTER_HOME", str(project / ".demo" / "dagster_home"))
    path = project / "gpu-platform.yaml"
    console = Console(file=open(os.devnull, "w"))
    assert write_project_config(path, console)
    text = path.read_text()
    assert text.startswith(DEMO_MARK) and "home: .demo\n" in text and "dagster_home: .demo/dagster_home" in text
    assert write_project_config(path, console)  # its own file: rewritten freely
    path.write_text("home: mine\n")
    assert not write_project_config(path, console)
    assert path.read_text() == "home: mine\n"
    # what the demo wrote works as the README says: the CLI in that directory reads .demo
    path.write_text(text)
    monkeypatch.delenv("GPU_PLATFORM_HOME")
    monkeypatch.delenv("DAGSTER_HOME")
    assert _run("submit", "labels.yaml").exit_code == 0
    assert (project / ".demo" / "ledger.db").exists()
