"""docs/deploy.md, command by command: each command of its `bash` blocks is run as far as it can
be without a cluster, or skipped with the reason; a command this file does not know fails, so the
page cannot gain a command no test runs.

The page's paths under `var/deploy` are run in a temporary directory; its `$IMAGE` is a test tag.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from gpu_platform.deploy.tree import KUSTOMIZATION
from tests.admission.test_export import _validate as validate_kueue
from tests.deploy.fake_kube import serve
from tests.deploy.test_check import ready
from tests.k8s.fake_apiserver import write_kubeconfig

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "deploy.md"
IMAGE = "registry.example.com/ml/gpu-platform:0.1.0-0123456789ab"
CLUSTER = "needs a live cluster"


def blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, re.S)


def commands(block: str) -> list[str]:
    """Shell commands of a block: comments dropped, `for ... done` and `\\` continuations kept whole."""
    out: list[str] = []
    loop: list[str] = []
    for line in block.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if loop or line.startswith("for "):
            loop.append(line)
            if line.strip() == "done":
                out.append("\n".join(loop))
                loop = []
            continue
        if out and out[-1].endswith("\\"):
            out[-1] = out[-1][:-1] + line.strip()
        else:
            out.append(line)
    assert not loop, "a for loop without done"
    return out


DOC_COMMANDS = [c for b in blocks(DOC.read_text()) for c in commands(b)]
SCRIPT_BLOCK = next(b for b in blocks(DOC.read_text()) if b.startswith("# 1. Install Kueue"))


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("doc")


def _env(work: Path) -> dict[str, str]:
    return {**os.environ, "PATH": f"{ROOT / '.venv' / 'bin'}:{os.environ['PATH']}", "IMAGE": IMAGE,
            "DAGSTER_PG_PASSWORD": "not-a-real-password", "GPU_PLATFORM_LEDGER_URL": f"sqlite:///{work / 'ledger.db'}",
            "GPU_PLATFORM_HOME": str(work / "home")}


def _sh(cmd: str, work: Path, **env: str) -> subprocess.CompletedProcess:
    local = re.sub(r"(?<![\w/])var/deploy", str(work / "var" / "deploy"), cmd)
    done = subprocess.run(["bash", "-c", "set -euo pipefail\n" + local], cwd=ROOT, capture_output=True, text=True,
                          env={**_env(work), **env}, timeout=300, check=False)
    assert done.returncode == 0, f"{cmd}\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def rendered(work) -> Path:
    """The page's own render command, run: the tree, the values and the printed commands."""
    (render,) = [c for c in DOC_COMMANDS if c.startswith("gpu-platform deploy render")]
    _sh("mkdir -p var/deploy\n" + render, work)
    return work / "var" / "deploy"


def _objects(tree: Path) -> list[dict]:
    kustomization = yaml.safe_load((tree / KUSTOMIZATION).read_text())
    return [yaml.safe_load((tree / n).read_text()) for n in kustomization["resources"]]


def run_render(cmd: str, work: Path, rendered: Path) -> None:
    script = (rendered / "deploy.sh").read_text().replace(str(work / "var" / "deploy"), "var/deploy")
    assert script == SCRIPT_BLOCK, "docs/deploy.md's script block is not what deploy render prints"
    for obj in _objects(rendered / "tree"):
        if obj["apiVersion"].startswith("kueue.x-k8s.io/"):
            validate_kueue(obj)
        else:
            kubernetes_validate.validate(obj, "1.31.0", strict=True)
    values = yaml.safe_load((rendered / "values.yaml").read_text())
    (code,) = values["dagster-user-deployments"]["deployments"]
    assert f"{code['image']['repository']}:{code['image']['tag']}" == IMAGE


def run_kustomize(cmd: str, work: Path, rendered: Path) -> None:
    if not shutil.which("kubectl"):
        pytest.skip("kubectl is not installed (Debian ships none; its kustomize renders the tree offline)")
    out = _sh("kubectl kustomize var/deploy/tree", work).stdout
    assert len([d for d in yaml.safe_load_all(out) if d]) == len(_objects(rendered / "tree"))


def run_make_image(cmd: str, work: Path, rendered: Path) -> None:
    done = _sh(cmd.replace("make image", "make -n image", 1), work)
    assert f"build -f Dockerfile -t '{IMAGE}'" in done.stdout, done.stdout


def run_secrets(cmd: str, work: Path, rendered: Path) -> None:
    """The loop, each Secret written by `kubectl create ... --dry-run=client` (offline) instead of
    applied; every Secret valid, in every namespace of the tree."""
    if not shutil.which("kubectl"):
        pytest.skip("kubectl is not installed: its create --dry-run=client writes the Secrets offline")
    out = work / "secrets.yaml"
    out.unlink(missing_ok=True)
    _sh(cmd.replace("| kubectl apply -f -", f">> {out}; echo --- >> {out}"), work)
    secrets = [d for d in yaml.safe_load_all(out.read_text()) if d]
    for s in secrets:
        kubernetes_validate.validate(s, "1.31.0", strict=True)
    namespaces = {o["metadata"]["name"] for o in _objects(rendered / "tree") if o["kind"] == "Namespace"}
    assert {s["metadata"]["namespace"] for s in secrets} == namespaces
    assert all(s["data"] for s in secrets)


def run_helm(cmd: str, work: Path, rendered: Path) -> None:
    if not shutil.which("helm"):
        pytest.skip("helm is not installed (Debian ships no helm package; PyPI has none): helm template not run")
    version = re.search(r"--version (\S+)", cmd).group(1)
    if subprocess.run(["helm", "show", "chart", "dagster/dagster", "--version", version], capture_output=True,
                      check=False).returncode != 0:
        pytest.skip(f"the chart dagster/dagster {version} is not in helm's repositories here (helm repo add needs the network)")
    out = _sh(f"helm template dagster dagster/dagster --version {version} -n dagster -f var/deploy/values.yaml", work).stdout
    assert "kind: Deployment" in out


def run_check(cmd: str, work: Path, rendered: Path) -> None:
    """Against the API server double holding a cluster where everything is in place."""
    with serve(ready(rendered / "tree")) as url:
        kubeconfig = write_kubeconfig(work / "kubeconfig", url)
        _sh(cmd, work, KUBECONFIG=str(kubeconfig))


def run_k8s_render(cmd: str, work: Path, rendered: Path) -> None:
    job = yaml.safe_load(_sh(cmd, work).stdout)
    kubernetes_validate.validate(job, "1.31.0", strict=True)
    assert job["metadata"]["namespace"] == "team-labeling"


def run_submit(cmd: str, work: Path, rendered: Path) -> None:
    """What runs in the code-location pod, here: the example recorded in a SQLite ledger."""
    # the platform's pod runs with the identity source its deployment configures; here the OS login,
    # given the roster role that submits on the teams' behalf (as the demo's policy does)
    from gpu_platform.demo.identity import demo_policy_text

    policy = work / "deployed-policy.yaml"
    policy.write_text(demo_policy_text())
    done = _sh("gpu-platform submit examples/requests/labeler_batch.yaml", work,
               GPU_PLATFORM_IDENTITY="os_user", GPU_PLATFORM_POLICY=str(policy))
    assert re.fullmatch(r"req-[0-9a-z-]+\n", done.stdout), done.stdout


def run_shell(cmd: str, work: Path, rendered: Path) -> None:
    _sh(cmd, work)


def skip(reason: str) -> Callable[[str, Path, Path], None]:
    def run(cmd: str, work: Path, rendered: Path) -> None:
        pytest.skip(reason)
    return run


HOW: list[tuple[str, Callable[[str, Path, Path], None]]] = [
    (r"^git clone ", skip("needs the network; the tests run inside a clone")),
    (r"^make install$", skip("the tests run in the installed .venv")),
    (r"^export ", run_shell),
    (r"^mkdir -p ", run_shell),
    (r"^make image ", run_make_image),
    (r"^docker push ", skip("needs a registry")),
    (r"^gpu-platform deploy render ", run_render),
    (r"^kubectl kustomize |^kubectl apply -k ", run_kustomize),
    (r"^kubectl apply --server-side (--force-conflicts )?-f https://",
     skip(f"{CLUSTER} and the network (Kueue's release manifests)")),
    (r"^kubectl -n kueue-system patch deployment kueue-controller-manager ", skip(CLUSTER)),
    (r"^kubectl -n kueue-system wait ", skip(CLUSTER)),
    (r"^for ns in .*create secret", run_secrets),
    (r"^helm repo ", skip("needs the network (the chart repository)")),
    (r"^helm upgrade --install ", run_helm),
    (r"^gpu-platform deploy check ", run_check),
    (r"^bash var/deploy/deploy.sh$", skip(f"{CLUSTER}: its commands are run one by one here")),
    (r"^kubectl label node ", skip(CLUSTER)),
    (r"^gpu-platform k8s render ", run_k8s_render),
    (r"^(pod|web)=\$\(kubectl ", skip(CLUSTER)),
    (r"^kubectl -n dagster cp ", skip(CLUSTER)),
    (r"^kubectl -n dagster exec .* gpu-platform submit ", run_submit),
    (r"^kubectl -n \S+ get workloads$", skip(CLUSTER)),
    (r"^kubectl -n dagster port-forward ", skip(CLUSTER)),
]


def how(cmd: str) -> Callable[[str, Path, Path], None]:
    for pattern, run in HOW:
        if re.search(pattern, cmd, re.S):
            return run
    raise AssertionError(f"docs/deploy.md has a command no test knows how to run: {cmd!r}")


@pytest.mark.parametrize("cmd", DOC_COMMANDS, ids=[f"{i}-{c.split()[0]}-{c.split()[1]}" for i, c in enumerate(DOC_COMMANDS)])
def test_every_command_of_the_page(cmd: str, work: Path, rendered: Path) -> None:
    how(cmd)(cmd, work, rendered)


def test_the_page_walks_the_whole_path() -> None:
    """Clone, image, render, Kueue, apply -k, Secrets, helm, check, submit, watch: in this order."""
    firsts = ["git clone", "make image", "docker push", "gpu-platform deploy render", "kubectl apply --server-side",
              "kubectl apply -k", "create secret", "helm upgrade --install", "gpu-platform deploy check",
              "gpu-platform submit", "get workloads", "port-forward"]
    text = "\n".join(DOC_COMMANDS)
    positions = [text.find(f) for f in firsts]
    assert -1 not in positions and positions == sorted(positions), dict(zip(firsts, positions, strict=True))
