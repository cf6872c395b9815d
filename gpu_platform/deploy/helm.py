"""Values for the official Dagster Helm chart (`dagster/dagster`) that run this code location
beside the kustomize tree (`deploy.tree`).

The chart renders the instance ConfigMap itself (`<release>-instance`, mounted by the webserver,
the daemon and every run pod), so with the chart the tree leaves its own instance ConfigMap out
and these values make the chart's instance the one `deploy render` would have written: Postgres
storage on the operator's database, the password from the operator's Secret (never a value here),
the `K8sRunLauncher` creating run Jobs in the Dagster namespace as the tree's ServiceAccount (whose
least-privilege RBAC the tree grants; the chart creates no ServiceAccount and no Role), and the
run queue's limits from the policy (`gate.instance_config.dagster_instance_yaml`).

The work claim is mounted in the code-location server, where Dagster evaluates sensors and so
where the admission sensor looks for checkpoints, at the work root; with
`includeConfigInLaunchedRuns` the chart hands the same volume, env, Secrets and pull secrets to
every run pod and, through the run's container context, to every step pod (dagster-k8s merges
lists without duplicates, so the executor's own mount of the same claim, `cluster.jobs`, is one
mount). The code location's env is a list, carried in that container context, not a ConfigMap the
team namespaces would lack.

Chart keys as the chart's values schema names them (helm/dagster/schema in dagster-io/dagster):
`global.postgresqlSecretName` / `serviceAccountName`, `serviceAccount.create` / `name`,
`rbacEnabled`, `generatePostgresqlPasswordSecret`, `imagePullSecrets`, `postgresql.enabled` /
`postgresqlHost` / `postgresqlUsername` / `postgresqlDatabase` / `service.port`,
`dagster-user-deployments.imagePullSecrets` / `deployments[]` (`name`, `image`,
`dagsterApiGrpcArgs`, `port`, `env`, `envSecrets`, `includeConfigInLaunchedRuns`, `volumes`,
`volumeMounts`), `runLauncher.type: K8sRunLauncher` with `config.k8sRunLauncher` (`jobNamespace`,
`loadInclusterConfig`, `imagePullPolicy`, `envSecrets`), `dagsterDaemon.runCoordinator`, and
`concurrency` (`enabled`, `runs.maxConcurrentRuns` / `tagConcurrencyLimits`, `pools.granularity` /
`opGranularityRunBuffer`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpu_platform.cluster.jobs import ENV_WORK_ROOT, WORK_VOLUME_NAME, WorkVolume
from gpu_platform.deploy.tree import CODE_LOCATION, DeploySettings
from gpu_platform.gate.instance_config import dagster_instance_yaml
from gpu_platform.policy import Policy

GRPC_ARGS = ("--module-name", "assets.definitions", "--attribute", "defs")
"""`dagster api grpc` arguments: the Definitions workspace.yaml loads."""
WORK_ROOT = WorkVolume("").mount_path


@dataclass(frozen=True)
class HelmSettings:
    """image: `repository:tag` of the code-location image (`make image`: this repository with
    dagster-k8s and dagster-postgres). postgres_*: the operator's database (its password is in the
    tree's `postgres_secret`; the ledger URL in its `env_secret`)."""

    image: str
    postgres_host: str
    postgres_user: str = "dagster"
    postgres_db: str = "dagster"
    postgres_port: int = 5432

    def image_parts(self) -> tuple[str, str]:
        repo, sep, tag = self.image.rpartition(":")
        if not sep or "/" in tag or not repo:
            raise ValueError(f"image {self.image!r}: expected repository:tag")
        return repo, tag


def helm_values(policy: Policy, s: DeploySettings, h: HelmSettings) -> dict[str, Any]:
    """The chart's values (a mapping to dump as YAML)."""
    repo, tag = h.image_parts()
    instance = dagster_instance_yaml(
        policy, postgres=True, k8s=True, job_namespace=s.dagster_namespace, service_account_name=s.service_account,
        instance_config_map=s.instance_config_map, image_pull_policy=s.image_pull_policy,
        postgres_password_secret=s.postgres_secret,
    )
    runs, pools = instance["concurrency"]["runs"], instance["concurrency"]["pools"]
    env = [{"name": "GPU_PLATFORM_ENV", "value": "prod"}]
    deployment: dict[str, Any] = {
        "name": CODE_LOCATION,
        "image": {"repository": repo, "tag": tag, "pullPolicy": s.image_pull_policy},
        "dagsterApiGrpcArgs": list(GRPC_ARGS),
        "port": 3030,
        "env": env,
        "envSecrets": [{"name": s.env_secret}],
        # run pods, and through the run's container context step pods, get the same env,
        # Secrets, volumes and pull secrets as the code location
        "includeConfigInLaunchedRuns": {"enabled": True},
    }
    if s.work_claim:
        env += [{"name": "GPU_PLATFORM_WORK_CLAIM", "value": s.work_claim}, {"name": ENV_WORK_ROOT, "value": WORK_ROOT}]
        # the executor's spelling of the same volume and mount (cluster.jobs), so the two merge into one
        deployment["volumes"] = [{"name": WORK_VOLUME_NAME, "persistentVolumeClaim": {"claimName": s.work_claim}}]
        deployment["volumeMounts"] = [{"name": WORK_VOLUME_NAME, "mountPath": WORK_ROOT}]
    pull = [{"name": s.image_pull_secret}] if s.image_pull_secret else []
    values: dict[str, Any] = {
        "global": {"postgresqlSecretName": s.postgres_secret, "serviceAccountName": s.service_account},
        "serviceAccount": {"create": False, "name": s.service_account},
        "rbacEnabled": False,
        "generatePostgresqlPasswordSecret": False,
        "postgresql": {
            "enabled": False,
            "postgresqlHost": h.postgres_host,
            "postgresqlUsername": h.postgres_user,
            "postgresqlDatabase": h.postgres_db,
            "service": {"port": h.postgres_port},
        },
        "imagePullSecrets": pull,
        "dagster-user-deployments": {"enabled": True, "imagePullSecrets": pull, "deployments": [deployment]},
        "runLauncher": {
            "type": "K8sRunLauncher",
            "config": {
                "k8sRunLauncher": {
                    "jobNamespace": s.dagster_namespace,
                    "loadInclusterConfig": True,
                    "imagePullPolicy": s.image_pull_policy,
                    "envSecrets": [{"name": s.env_secret}],
                }
            },
        },
        "dagsterDaemon": {
            "runCoordinator": {"enabled": True, "type": "QueuedRunCoordinator", "config": {"queuedRunCoordinator": {}}}
        },
        "concurrency": {
            "enabled": True,
            "runs": {
                "maxConcurrentRuns": runs["max_concurrent_runs"],
                "tagConcurrencyLimits": [dict(t) for t in runs["tag_concurrency_limits"]],
            },
            "pools": {"granularity": pools["granularity"], "opGranularityRunBuffer": pools["op_granularity_run_buffer"]},
        },
    }
    return values
