"""`gpu-platform deploy render --out DIR` (the kustomize tree, the Helm values and the ordered
commands that deploy them) and `gpu-platform deploy check` (is a live cluster ready for them)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import click

from gpu_platform.cli.common import fail, policy_option, policy_or_exit


@click.group("deploy")
def deploy() -> None:
    """Deploy the platform on a Kubernetes cluster with Kueue (docs/deploy.md)."""


@deploy.command("render")
@policy_option
@click.option("--out", "out_dir", type=click.Path(file_okay=False), required=True, help="Directory to write into.")
@click.option("--dagster-namespace", default="dagster", show_default=True)
@click.option("--service-account", default="dagster", show_default=True, help="The run launcher's ServiceAccount.")
@click.option("--work-claim", envvar="GPU_PLATFORM_WORK_CLAIM", default="gpu-platform-work", show_default=True,
              help="Work-volume PVC made in each team namespace and the Dagster namespace ('' = none); "
                   "$GPU_PLATFORM_WORK_CLAIM.")
@click.option("--work-storage", default="100Gi", show_default=True, help="Size of each work-volume PVC.")
@click.option("--storage-class", default="",
              help="storageClassName of the PVCs, a class offering ReadWriteMany (default: the cluster's default class).")
@click.option("--postgres-secret", default="dagster-postgresql-secret", show_default=True,
              help="Secret (created by you, key postgresql-password) every Dagster pod and step pod reads.")
@click.option("--env-secret", default="gpu-platform-env", show_default=True,
              help="Secret (created by you, key GPU_PLATFORM_LEDGER_URL) the code location, run and step pods read.")
@click.option("--image-pull-secret", default="", help="Registry Secret (created by you) for a private image ('' = none).")
@click.option("--helm-values", "helm_values_path", type=click.Path(dir_okay=False), default=None,
              help="Also write values for the official Dagster Helm chart (dagster/dagster) to this file; the "
                   "chart then renders the instance ConfigMap, so the tree leaves it out.")
@click.option("--helm-release", default="dagster", show_default=True, help="With --helm-values: the chart's release name.")
@click.option("--image", default="", help="With --helm-values: the code location's image, repository:tag (make image).")
@click.option("--postgres-host", default="", help="With --helm-values: the Postgres host of the Dagster instance.")
@click.option("--postgres-user", default="dagster", show_default=True)
@click.option("--postgres-db", default="dagster", show_default=True)
def render(policy_path: str | None, out_dir: str, dagster_namespace: str, service_account: str, work_claim: str,
           work_storage: str, storage_class: str, postgres_secret: str, env_secret: str, image_pull_secret: str,
           helm_values_path: str | None, helm_release: str, image: str, postgres_host: str, postgres_user: str,
           postgres_db: str) -> None:
    """Write Namespaces, the Kueue objects, work PVCs, the ServiceAccounts and their RBAC (and the
    Dagster instance ConfigMap, or with --helm-values the chart's values instead), one file each,
    plus kustomization.yaml (apply order); then print, on stdout, the commands that deploy them,
    in order (a shell script: Kueue, `kubectl apply -k`, the Secrets, `helm upgrade --install`,
    `deploy check`)."""
    import yaml

    from gpu_platform.deploy.helm import HelmSettings, helm_values
    from gpu_platform.deploy.steps import deploy_steps, render_steps
    from gpu_platform.deploy.tree import DeploySettings, write_tree

    policy = policy_or_exit(policy_path)
    settings = DeploySettings(dagster_namespace=dagster_namespace, service_account=service_account,
                              work_claim=work_claim, work_storage=work_storage, storage_class=storage_class,
                              postgres_secret=postgres_secret, env_secret=env_secret,
                              image_pull_secret=image_pull_secret, instance_config=helm_values_path is None,
                              helm_release=helm_release)
    values = None
    if helm_values_path is not None:
        missing = [f"--{n} is required with --helm-values" for n, v in (("image", image), ("postgres-host", postgres_host))
                   if not v]
        if missing:
            fail("cannot write Helm values", missing)
        try:
            values = helm_values(policy, settings, HelmSettings(image, postgres_host, postgres_user, postgres_db))
        except ValueError as exc:
            fail("cannot write Helm values", [str(exc)])
    try:
        paths = write_tree(policy, out_dir, settings)
    except ValueError as exc:
        fail(f"cannot render {out_dir}", [str(exc)])
    kinds = Counter(p.name.split("-", 1)[0] for p in paths)
    click.echo(f"wrote {len(paths)} objects and kustomization.yaml to {out_dir} ("
               + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) + ")", err=True)
    if values is not None:
        from gpu_platform.safeload.files import write_file

        write_file(
            helm_values_path,
            "# Written by `gpu-platform deploy render --helm-values`: helm upgrade --install "
            f"{helm_release} dagster/dagster -n {dagster_namespace} -f <this file>\n"
            + yaml.safe_dump(values, sort_keys=False)
        )
        click.echo(f"wrote Helm values for dagster/dagster to {helm_values_path}", err=True)
    click.echo(render_steps(deploy_steps(policy, settings, out_dir, helm_values_path)))


def _check_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)(f)
    f = click.option("--tree", "tree_dir", type=click.Path(exists=True, file_okay=False), default=None,
                     help="The directory `deploy render --out` wrote (default: the policy's tree, rendered with "
                          "the default settings, in memory).")(f)
    f = click.option("--kubeconfig", default="",
                     help="kubeconfig file (default: the in-cluster service account, else $KUBECONFIG / "
                          "~/.kube/config).")(f)
    return policy_option(f)


@deploy.command("check")
@_check_options
def check(policy_path: str | None, kubeconfig: str, tree_dir: str | None, fmt: str) -> None:
    """Check a live cluster against the tree, changing nothing: Kueue's CRDs, controller and
    webhook answer, with the feature gates the policy needs (PriorityBoost where lanes age); every object passes a server-side dry run (dryRun=All); nodes carry the
    labels the ResourceFlavors select (and their Topology's levels); the ServiceAccounts may do
    what the gate, the executor and the gang step need (SubjectAccessReview); the Secrets the tree
    names exist where pods read them. One line per finding, each failure naming the object and
    the fix.

    Exit 0 when nothing failed, 1 when something did or the cluster cannot be reached (one line).
    """
    import json

    from gpu_platform.cluster.client import ClusterConfigError, api_client
    from gpu_platform.deploy.check import ClusterUnreachable, Tree, check_cluster, read_tree
    from gpu_platform.deploy.steps import kueue_feature_gates
    from gpu_platform.deploy.tree import DeploySettings, deploy_manifests

    policy = policy_or_exit(policy_path)
    if tree_dir is not None:
        tree = read_tree(tree_dir)
    else:
        settings = DeploySettings()
        tree = Tree(deploy_manifests(policy, settings), settings)
    tree.feature_gates = kueue_feature_gates(policy)
    try:
        findings = check_cluster(api_client(kubeconfig), tree)
    except (ClusterConfigError, ClusterUnreachable) as exc:
        click.echo(f"deploy check: cannot reach the cluster: {exc}", err=True)
        raise SystemExit(1) from exc
    failed = [f for f in findings if not f.ok]
    if fmt == "json":
        click.echo(json.dumps([f.__dict__ for f in findings], indent=2))
    else:
        for f in findings:
            click.echo(f.line())
        click.echo(f"deploy check: {len(failed)} failed, {len(findings) - len(failed)} ok")
    raise SystemExit(1 if failed else 0)
