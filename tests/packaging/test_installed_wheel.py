"""The package outside the checkout: a wheel built from the image's build context (the paths
.dockerignore lets in, copied to a temporary directory), installed in a fresh virtual environment,
runs the CLI's main paths and loads the Definitions from the installed files alone.

The dependencies come from this test's own environment (one .pth line naming its site-packages),
so nothing is downloaded; that line adds a directory to sys.path without running the .pth files in
it, so the checkout's editable install is not active there. The checkout is not importable: the
commands run from a temporary directory with no PYTHONPATH, and each asserts that what it loaded
lies under the install.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from gpu_platform.finops.sqlmodels import Project, default_project_path
from gpu_platform.finops.sqlmodels.templates import Macros

ROOT = Path(__file__).resolve().parents[2]
FEEDS = ROOT / "tests" / "fixtures" / "feeds"  # copies of ../shared/reference/feeds
FINOPS = ROOT / "tests" / "fixtures" / "finops"
TRACE = ROOT / "tests" / "fixtures" / "simulate" / "elasticflow-cluster04-head2000.csv"
FOCUS = FEEDS / "focus-1.0-sample.csv"
DAY = "2024-09-27"
"""A day of the FOCUS 1.0 sample with its GPU line (g5.4xlarge, the instance of the EKS node in
tests/fixtures/finops/kubectl-get-nodes.json)."""
SKIP_IN_COPY = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", "*.egg-info", "build")


def context_entries() -> list[str]:
    """The top-level paths the image's build context holds: the `!` lines of .dockerignore."""
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [line[1:].rstrip("/") for line in lines if line.startswith("!")]


@dataclass(frozen=True)
class Installed:
    venv: Path
    site: Path
    work: Path
    env: dict[str, str]

    def run(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        exe = args[0] if args[0].startswith("/") else str(self.venv / "bin" / args[0])
        return subprocess.run([exe, *args[1:]], cwd=self.work, env=self.env, capture_output=True, text=True,
                              timeout=timeout)

    def ok(self, *args: str) -> str:
        res = self.run(*args)
        assert res.returncode == 0, f"{' '.join(args)}: exit {res.returncode}\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
        return res.stdout


def _check(cmd: list[str], cwd: Path) -> None:
    res = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, f"{' '.join(cmd)}\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    base = tmp_path_factory.mktemp("installed")
    src = base / "src"
    src.mkdir()
    for name in context_entries():
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, symlinks=True, ignore=SKIP_IN_COPY)
        else:
            shutil.copy2(path, src / name)
    dist = base / "dist"
    _check([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
            "--wheel-dir", str(dist), str(src)], cwd=base)
    (wheel,) = dist.glob("gpu_platform-*.whl")

    venv = base / "venv"
    _check([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=base)
    site = Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}))
    deps = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
    (site / "_deps_from_test_env.pth").write_text("".join(f"{d}\n" for d in sorted(deps)))
    _check([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--quiet", "--no-deps",
            "--no-index", str(wheel)], cwd=base)

    work = base / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTHON", "GPU_PLATFORM_", "DAGSTER_", "VIRTUAL_ENV", "XDG_CONFIG_HOME"))}
    env.update(PATH=f"{venv / 'bin'}:/usr/bin:/bin", VIRTUAL_ENV=str(venv), GPU_PLATFORM_HOME=str(base / "home"),
               GPU_PLATFORM_CONFIG="none", XDG_CONFIG_HOME=str(base / "xdg"), DAGSTER_HOME=str(base / "dagster"),
               COLUMNS="200", NO_COLOR="1")
    (base / "dagster").mkdir()
    return Installed(venv=venv, site=site, work=work, env=env)


def _under(path: str, root: Path) -> bool:
    return Path(path).resolve().is_relative_to(root.resolve())


def test_everything_read_at_run_time_comes_from_the_install(installed: Installed) -> None:
    probe = """
import json
import assets.definitions, gpu_platform, resources
from gpu_platform.demo.instance import EXAMPLES
from gpu_platform.finops.feeds.dcgm import SCAN_PATH
from gpu_platform.finops.sqlmodels import Project, default_project_path
from gpu_platform.finops.sqlmodels.templates import Macros
from gpu_platform.policy.loading import default_policy_path
project = Project.load(default_project_path())
print(json.dumps({
    "modules": [m.__file__ for m in (gpu_platform, assets.definitions, resources)],
    "project": str(project.path), "models": len(project.models),
    "macros": sorted(Macros.load(project.path).names),
    "examples": str(EXAMPLES), "example_files": len(list(EXAMPLES.glob("*.yaml"))),
    "policy": str(default_policy_path()), "scan": SCAN_PATH,
}))
"""
    got = json.loads(installed.ok("python", "-c", probe))
    for path in (*got["modules"], got["project"], got["examples"], got["policy"]):
        assert _under(path, installed.site), f"{path} is not under the install {installed.site}"
        assert not _under(path, ROOT), path
    assert got["models"] == len(Project.load(default_project_path()).models)
    # the models call the project's macros: the wheel ships dbt_like_sql/macros/ with them
    assert got["macros"] == sorted(Macros.load(default_project_path()).names) != []
    assert got["example_files"] == len(list((ROOT / "examples" / "requests").glob("*.yaml"))) > 0
    assert got["scan"] == "compiled", "the wheel lacks the compiled DCGM scan"


def test_policy_check(installed: Installed) -> None:
    installed.ok("gpu-platform", "policy", "check")


def _billed_on(day: str) -> Decimal:
    """The day's BilledCost, summed straight from the FOCUS file."""
    with FOCUS.open(newline="") as f:
        return sum((Decimal(r["BilledCost"]) for r in csv.DictReader(f)
                    if r["ChargePeriodStart"].startswith(day) and r["BilledCost"] != "NULL"), Decimal(0))


def test_reference_feeds_are_priced(installed: Installed) -> None:
    ingest = json.loads(installed.ok("gpu-platform", "feeds", "ingest", "--day", DAY, "--focus", str(FOCUS),
                                     "--nodes", str(FINOPS / "kubectl-get-nodes.json"),
                                     "--pods", str(FINOPS / "kubectl-get-pods.json"), "--format", "json"))
    assert {f["feed"]: f["quarantined"] for f in ingest["feeds"]} == {"focus": 0, "nodes": 0, "pods": 0}
    # dcgm-exporter text carries no timestamps: its samples belong to the day it is read
    today = datetime.now(UTC).date().isoformat()
    dcgm = json.loads(installed.ok("gpu-platform", "feeds", "ingest", "--day", today, "--dcgm",
                                   str(FEEDS / "dcgm-metrics-baremetal.txt"), "--format", "json"))
    (line,) = dcgm["feeds"]
    assert line["rows_in"] == line["accepted"] + line["quarantined"] + line["other_days"] > 0

    build = installed.ok("gpu-platform", "cost", "build", "--day", DAY)
    assert ", 0 failed" in build, build

    report = json.loads(installed.ok("gpu-platform", "cost", "report", "--day", DAY, "--format", "json"))
    (usd,) = report["totals"]
    assert usd["currency"] == "USD"
    assert Decimal(usd["billed"]) == _billed_on(DAY).quantize(Decimal("0.000001"))
    # nodes with no bill are priced from the price book, a seed of the SQL project
    assert report["price_book_nodes"] and Decimal(usd["price_book"]) > 0


def test_report_renders_its_template(installed: Installed) -> None:
    out = installed.work / "report"
    installed.ok("gpu-platform", "report", "--out", str(out), "--days", "3")
    html = (out / "index.html").read_text()
    assert html.lstrip().lower().startswith("<!doctype html") and "</html>" in html


def test_simulate_with_the_shipped_lane_map(installed: Installed) -> None:
    doc = json.loads(installed.ok("gpu-platform", "simulate", "--trace", str(TRACE), "--lane-map", "elasticflow",
                                  "--compare", "none", "--quiet"))
    assert _under(doc["lane_map"]["source"], installed.site), doc["lane_map"]
    assert doc["trace"]["accepted"] == 2000
    lanes = doc["scenarios"]["policy"]["lanes"]
    assert sum(lane["jobs"] for lane in lanes.values()) == 2000


def test_dagster_definitions_validate(installed: Installed) -> None:
    res = installed.run("python", "-m", "dagster", "definitions", "validate", "-m", "assets.definitions")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "Validation successful" in res.stdout + res.stderr
