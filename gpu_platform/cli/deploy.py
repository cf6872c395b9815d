"""`gpu-platform deploy render --out DIR`: the kustomize tree `kubectl apply -k DIR` deploys in one go."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import click

from gpu_platform.cli.common import fail, policy_option, policy_or_exit


@click.group("deploy")
def deploy() -> None:
    """Deploy the platform on a Kubernetes cluster with Kueue."""


@deploy.command("render")
@policy_option
@click.option("--out", "out_dir", type=click.Path(file_okay=False), required=True, help="Directory to write into.")
@click.option("--dagster-namespace", default="dagster", show_default=True)
@click.option("--service-account", default="dagster", show_default=True, help="The run launcher's ServiceAccount.")
@click.option("--work-claim", envvar="GPU_PLATFORM_WORK_CLAIM", default="gpu-platform-work", show_default=True,
              help="Work-volume PVC made in each team namespace ('' = none); $GPU_PLATFORM_WORK_CLAIM.")
@click.option("--work-storage", default="100Gi", show_default=True, help="Size of each work-volume PVC.")
@click.option("--storage-class", default="", help="storageClassName of the PVCs (default: the cluster's).")
@click.option("--postgres-secret", default="dagster-postgresql-secret", show_default=True,
              help="Secret (created by you, key postgresql-password) the run launcher mounts.")
@click.option("--helm-values", "helm_values_path", type=click.Path(dir_okay=False), default=None,
              help="Also write values for the official Dagster Helm chart (dagster/dagster) to this file; the "
                   "chart then renders the instance ConfigMap, so the tree leaves it out.")
@click.option("--image", default="", help="With --helm-values: the code location's image, repository:tag.")
@click.option("--postgres-host", default="", help="With --helm-values: the Postgres host of the Dagster instance.")
@click.option("--postgres-user", default="dagster", show_default=True)
@click.option("--postgres-db", default="dagster", show_default=True)
@click.option("--env-secret", default="gpu-platform-env", show_default=True,
              help="With --helm-values: Secret (created by you) holding GPU_PLATFORM_LEDGER_URL.")
def render(policy_path: str | None, out_dir: str, dagster_namespace: str, service_account: str, work_claim: str,
           work_storage: str, storage_class: str, postgres_secret: str, helm_values_path: str | None, image: str,
           postgres_host: str, postgres_user: str, postgres_db: str, env_secret: str) -> None:
    """Write Namespaces, the Kueue objects, work PVCs, the launcher's ServiceAccount and RBAC and the
    Dagster instance ConfigMap, one file each, plus kustomization.yaml (apply order). With
    --helm-values, the values for the official Dagster Helm chart instead of the ConfigMap."""
    import yaml

    from gpu_platform.deploy.helm import HelmSettings, helm_values
    from gpu_platform.deploy.tree import DeploySettings, write_tree

    policy = policy_or_exit(policy_path)
    settings = DeploySettings(dagster_namespace=dagster_namespace, service_account=service_account,
                              work_claim=work_claim, work_storage=work_storage, storage_class=storage_class,
                              postgres_secret=postgres_secret, instance_config=helm_values_path is None)
    values = None
    if helm_values_path is not None:
        missing = [f"--{n} is required with --helm-values" for n, v in (("image", image), ("postgres-host", postgres_host))
                   if not v]
        if missing:
            fail("cannot write Helm values", missing)
        try:
            values = helm_values(policy, settings, HelmSettings(image, postgres_host, postgres_user, postgres_db,
                                                                env_secret=env_secret))
        except ValueError as exc:
            fail("cannot write Helm values", [str(exc)])
    try:
        paths = write_tree(policy, out_dir, settings)
    except ValueError as exc:
        fail(f"cannot render {out_dir}", [str(exc)])
    if values is not None:
        Path(helm_values_path).write_text(
            "# Written by `gpu-platform deploy render --helm-values`: helm upgrade --install dagster dagster/dagster "
            f"-n {dagster_namespace} -f <this file>\n" + yaml.safe_dump(values, sort_keys=False)
        )
        click.echo(f"wrote Helm values for dagster/dagster to {helm_values_path}; create the Secret {env_secret} "
                   "(key GPU_PLATFORM_LEDGER_URL) too", err=True)
    kinds = Counter(p.name.split("-", 1)[0] for p in paths)
    click.echo(f"wrote {len(paths)} objects and kustomization.yaml to {out_dir} ("
               + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) + f"); apply with: kubectl apply -k {out_dir}")
    click.echo(f"create the Secret first: kubectl -n {dagster_namespace} create secret generic {postgres_secret} "
               "--from-literal=postgresql-password=...", err=True)
