"""The ordered commands that deploy what `deploy render` wrote, printed by `deploy render` and
walked through in docs/deploy.md.

Order, and why:
1. Kueue, at the pinned release, with its feature gate PriorityBoost on when the policy's lanes
   age, and wait for its controller (the tree holds Kueue objects; their CRDs and webhooks must
   answer first);
2. `kubectl apply -k` the tree: Namespaces first (kustomize orders them so), then everything that
   lives in them, including the ServiceAccount the chart's pods run as;
3. the operator's Secrets, in namespaces that now exist: the Postgres password and the ledger URL
   in the Dagster namespace and in every team namespace (a step pod reads both from its own
   namespace), the registry Secret where the image is private. Values come from the operator's
   environment (`$DAGSTER_PG_PASSWORD`, ...), never from a file; `create --dry-run=client -o yaml |
   kubectl apply -f -` makes each command safe to run again;
4. the official Dagster chart at the Dagster version this code location is built with, with the
   generated values;
5. `gpu-platform deploy check`, against the same cluster.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from importlib.metadata import version

from gpu_platform.deploy.tree import DeploySettings, namespaces
from gpu_platform.policy import Policy
from gpu_platform.policy.aging import aging_rules

KUEUE_VERSION = "v0.20.0"
"""The Kueue release the tree is written for. The Kueue CRDs the tests validate every object
against (tests/fixtures/kueue-crds, from the shared reference: kubernetes-sigs/kueue @ ff69552e,
`controller-gen.kubebuilder.io/version: v0.20.1`) are of the v0.20 line: v1beta2 is their
storage version, and they carry the v0.20 schema changes such as the minimum on
`podSetSliceSize`; v0.20.0 is that line's release. The tree writes v1beta2 only, the one version
v0.20 serves."""
KUEUE_NAMESPACE = "kueue-system"
KUEUE_DEPLOYMENT = "kueue-controller-manager"
KUEUE_MANIFESTS = f"https://github.com/kubernetes-sigs/kueue/releases/download/{KUEUE_VERSION}/manifests.yaml"
DAGSTER_HELM_REPO = "https://dagster-io.github.io/helm"
PRIORITY_BOOST_GATE = "PriorityBoost"
"""Kueue's feature gate for the `kueue.x-k8s.io/priority-boost` annotation (KEP-7990; alpha since
v0.17, off by default): without it Kueue ignores the boost the gate sets (docs/admission.md, Aging).
The step patches it onto the manager's args after the apply; the apply runs with
`--force-conflicts`, so that running the commands again takes the args back from that patch (the
manifests' args) instead of failing on the conflict, and the patch adds the flag once more."""


def dagster_chart_version() -> str:
    """The chart release made with the Dagster this code location runs (the chart's version is
    Dagster's)."""
    return version("dagster")


@dataclass(frozen=True)
class Step:
    """One step of the deployment: what it does and its shell commands, in order."""

    title: str
    commands: tuple[str, ...]


def _q(value: str) -> str:
    return shlex.quote(value)


def _secret(name: str, literal_key: str, env_var: str) -> str:
    return (f'kubectl -n "$ns" create secret generic {_q(name)} '
            f'--from-literal={literal_key}="${env_var}" --dry-run=client -o yaml | kubectl apply -f -')


def kueue_feature_gates(policy: Policy) -> tuple[str, ...]:
    """The Kueue feature gates the policy needs on: PriorityBoost where its lanes age."""
    return (PRIORITY_BOOST_GATE,) if aging_rules(policy) else ()


def feature_gate_patch(gate: str) -> str:
    """The command that turns `gate` on in Kueue's controller (appends `--feature-gates=<gate>=true`
    to its arguments; the Deployment rolls out again)."""
    return (f"kubectl -n {KUEUE_NAMESPACE} patch deployment {KUEUE_DEPLOYMENT} --type=json -p "
            + _q(json.dumps([{"op": "add", "path": "/spec/template/spec/containers/0/args/-",
                              "value": f"--feature-gates={gate}=true"}], separators=(",", ":"))))


def deploy_steps(policy: Policy, s: DeploySettings, tree_dir: str, values_path: str | None = None,
                 kubeconfig: str = '"$KUBECONFIG"') -> list[Step]:
    """The commands, in order, for the tree written to `tree_dir` (and, with the chart, the values
    written to `values_path`)."""
    kueue = [f"kubectl apply --server-side -f {KUEUE_MANIFESTS}"]
    title = f"Install Kueue {KUEUE_VERSION} and wait for its controller and webhook"
    if aging_rules(policy):
        # Kueue reads `kueue.x-k8s.io/priority-boost`, which the gate sets on waiting Workloads of the
        # lanes that age, only with its alpha feature gate PriorityBoost on (off by default).
        title = f"Install Kueue {KUEUE_VERSION} with feature gate {PRIORITY_BOOST_GATE} (the policy's lanes age) and wait for its controller and webhook"
        kueue = [f"kubectl apply --server-side --force-conflicts -f {KUEUE_MANIFESTS}"]
        kueue.append(feature_gate_patch(PRIORITY_BOOST_GATE))
    kueue.append(f"kubectl -n {KUEUE_NAMESPACE} wait --for=condition=Available deployment/{KUEUE_DEPLOYMENT} --timeout=300s")
    steps = [
        Step(title, tuple(kueue)),
        Step("Apply the platform's objects (Namespaces first)", (f"kubectl apply -k {_q(tree_dir)}",)),
    ]
    every = " ".join(_q(ns) for ns in namespaces(policy, s))
    body = [_secret(s.postgres_secret, "postgresql-password", "DAGSTER_PG_PASSWORD"),
            _secret(s.env_secret, "GPU_PLATFORM_LEDGER_URL", "GPU_PLATFORM_LEDGER_URL")]
    if s.image_pull_secret:
        body.append(f'kubectl -n "$ns" create secret docker-registry {_q(s.image_pull_secret)} '
                    '--docker-server="$REGISTRY" --docker-username="$REGISTRY_USER" --docker-password="$REGISTRY_PASSWORD" '
                    "--dry-run=client -o yaml | kubectl apply -f -")
    secrets = [f"for ns in {every}; do\n" + "".join(f"  {c}\n" for c in body) + "done"]
    if s.image_pull_secret:
        # a gang's Indexed Job runs as its namespace's default account
        teams = " ".join(_q(ns) for ns in namespaces(policy, s) if ns != s.dagster_namespace)
        patch = _q('{"imagePullSecrets":[{"name":"' + s.image_pull_secret + '"}]}')
        secrets.append(f"for ns in {teams}; do\n  kubectl -n \"$ns\" patch serviceaccount default -p {patch}\ndone")
    steps.append(Step("Create the Secrets the tree and the values name (values from your environment)", tuple(secrets)))
    if values_path is not None:
        steps.append(Step(f"Install Dagster (chart {dagster_chart_version()}) with the generated values", (
            f"helm repo add dagster {DAGSTER_HELM_REPO}",
            "helm repo update dagster",
            f"helm upgrade --install {_q(s.helm_release)} dagster/dagster --version {dagster_chart_version()} "
            f"-n {_q(s.dagster_namespace)} -f {_q(values_path)} --wait",
        )))
    steps.append(Step("Check the cluster against the tree", (
        f"gpu-platform deploy check --kubeconfig {kubeconfig} --tree {_q(tree_dir)}",
    )))
    return steps


def render_steps(steps: list[Step]) -> str:
    """The steps as a shell script's text: a comment per step, its commands below."""
    lines: list[str] = []
    for i, step in enumerate(steps, 1):
        lines.append(f"# {i}. {step.title}")
        lines.extend(step.commands)
    return "\n".join(lines)
