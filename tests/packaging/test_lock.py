"""requirements/lock.txt and requirements/build-lock.txt (the image's pins, `make lock`) agree
with pyproject.toml: every requirement is pinned at a version it allows, the lock's direct
requirements are exactly pyproject's, every pin carries hashes, and the lock is for the Python the
image runs. Offline: the files are compared, nothing is resolved again."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements" / "lock.txt"
BUILD_LOCK = ROOT / "requirements" / "build-lock.txt"
PROJECT = "gpu-platform (pyproject.toml)"
FIX = "out of date with pyproject.toml: run `make lock` and commit requirements/"


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def parse_lock(text: str) -> dict[str, dict]:
    """name -> {"version", "hashes", "via"} from pip-compile / `uv pip compile` output."""
    pins: dict[str, dict] = {}
    current: dict | None = None
    in_via = False
    for line in text.splitlines():
        if m := re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+?)(\s*\\)?$", line):
            current = {"version": m.group(2), "hashes": [], "via": []}
            pins[canonicalize_name(m.group(1))] = current
            in_via = False
        elif current is not None and (m := re.match(r"^\s+--hash=(sha256:[0-9a-f]{64})", line)):
            current["hashes"].append(m.group(1))
        elif current is not None and (m := re.match(r"^\s+# via\s*(.*)$", line)):
            in_via = not m.group(1)
            if m.group(1):
                current["via"].append(m.group(1).strip())
        elif current is not None and in_via and (m := re.match(r"^\s+#\s+(\S.*)$", line)):
            current["via"].append(m.group(1).strip())
        elif line.strip() and not line.lstrip().startswith("#"):
            raise AssertionError(f"unexpected line in a lock: {line!r}")
    return pins


def lock_problems(requirements: list[str], pins: dict[str, dict], *, direct: bool) -> list[str]:
    """What makes a lock out of date with these requirements (direct: the lock's own `# via
    gpu-platform (pyproject.toml)` set must be exactly theirs)."""
    problems = []
    for text in requirements:
        req = Requirement(text)
        pin = pins.get(canonicalize_name(req.name))
        if pin is None:
            problems.append(f"{text!r} is not pinned")
        elif not req.specifier.contains(Version(pin["version"]), prereleases=True):
            problems.append(f"{req.name}=={pin['version']} is outside {text!r}")
    if direct:
        locked = {n for n, p in pins.items() if PROJECT in p["via"]}
        wanted = {canonicalize_name(Requirement(r).name) for r in requirements}
        problems += [f"{n} is a direct requirement in the lock only" for n in sorted(locked - wanted)]
        problems += [f"{n} is not a direct requirement in the lock" for n in sorted(wanted - locked)]
    return problems


def test_every_pin_has_hashes() -> None:
    for lock in (LOCK, BUILD_LOCK):
        pins = parse_lock(lock.read_text())
        assert pins, lock
        assert [n for n, p in pins.items() if not p["hashes"]] == [], f"{lock.name}: pins without --hash"


def test_lock_pins_what_pyproject_requires() -> None:
    problems = lock_problems(pyproject()["project"]["dependencies"], parse_lock(LOCK.read_text()), direct=True)
    assert problems == [], f"requirements/lock.txt is {FIX}: {problems}"


def test_a_changed_pyproject_is_caught() -> None:
    deps = pyproject()["project"]["dependencies"]
    pins = parse_lock(LOCK.read_text())
    bumped = [d if not d.startswith("duckdb") else "duckdb>=999" for d in deps]
    version = pins["duckdb"]["version"]
    assert lock_problems(bumped, pins, direct=True) == [f"duckdb=={version} is outside 'duckdb>=999'"]
    assert lock_problems([*deps, "einops>=0.8"], pins, direct=True) == [
        "'einops>=0.8' is not pinned", "einops is not a direct requirement in the lock"]
    assert lock_problems([d for d in deps if not d.startswith("optuna")], pins, direct=True) == [
        "optuna is a direct requirement in the lock only"]


def test_build_lock_pins_the_build_system() -> None:
    problems = lock_problems(pyproject()["build-system"]["requires"], parse_lock(BUILD_LOCK.read_text()), direct=False)
    assert problems == [], f"requirements/build-lock.txt is {FIX}: {problems}"


def test_locks_are_for_the_python_the_image_runs() -> None:
    makefile = (ROOT / "Makefile").read_text()
    (lock_python,) = set(re.findall(r"--python-version (\S+)", makefile))
    assert Requirement(f"x{pyproject()['project']['requires-python']}").specifier.contains(f"{lock_python}.0")
    bases = re.findall(r"^ARG (?:BUILDER|BASE)_IMAGE=python:(\d+\.\d+)\.\d+-", (ROOT / "Dockerfile").read_text(), re.M)
    assert bases and set(bases) == {lock_python}, (bases, lock_python)
    for lock in (LOCK, BUILD_LOCK):
        assert "make lock" in lock.read_text().split("\n", 3)[1], f"{lock.name}: not written by `make lock`"


def test_parse_lock_reads_both_annotation_forms() -> None:
    text = """\
# header
aiohttp==3.14.5 \\
    --hash=sha256:{a}
    # via
    #   gpu-platform (pyproject.toml)
    #   gql
click==8.5.1 \\
    --hash=sha256:{b} \\
    --hash=sha256:{a}
    # via gpu-platform (pyproject.toml)
""".format(a="a" * 64, b="b" * 64)
    pins = parse_lock(text)
    assert pins["aiohttp"] == {"version": "3.14.5", "hashes": ["sha256:" + "a" * 64], "via": [PROJECT, "gql"]}
    assert pins["click"]["via"] == [PROJECT] and len(pins["click"]["hashes"]) == 2
