"""Values for the official Dagster Helm chart (`dagster/dagster`) that run this code location
beside the kustomize tree (`deploy.tree`).

The chart renders the instance ConfigMap itself (`<release>-instance`, mounted by the webserver,
the daemon and every run pod), so with the chart the tree leaves its own instance ConfigMap out
and these values make the chart's instance the one `deploy render` would have written: Postgres
storage on the operator's database, the password from the operator's Secret (never a value here),
the `K8sRunLauncher` creating run Jobs in the Dagster namespace as the tree's ServiceAccount (whose
least-privilege RBAC the tree grants; the chart creates no ServiceAccount and no Role), and the
run queue's limits from the policy (`gate.instance_config.dagster_instance_yaml`).

Chart keys as the chart's values schema names them (helm/dagster/schema in dagster-io/dagster):
`global.postgresqlSecretName` / `serviceAccountName`, `serviceAccount.create` / `name`,
`rbacEnabled`, `generatePostgresqlPasswordSecret`, `postgresql.enabled` / `postgresqlHost` /
`postgresqlUsername` / `postgresqlDatabase` / `service.port`,
`dagster-user-deployments.deployments[]` (`name`, `image`, `dagsterApiGrpcArgs`, `port`, `env`,
`envSecrets`, `includeConfigInLaunchedRuns`, `volumes`, `volumeMounts`),
`runLauncher.type: K8sRunLauncher` with `config.k8sRunLauncher` (`jobNamespace`,
`loadInclusterConfig`, `imagePullPolicy`, `envSecrets`), `dagsterDaemon.runCoordinator`, and
`concurrency` (`enabled`, `runs.maxConcurrentRuns` / `tagConcurrencyLimits`, `pools.granularity` /
`opGranularityRunBuffer`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpu_platform.deploy.tree import DeploySettings
from gpu_platform.gate.instance_config import dagster_instance_yaml
from gpu_platform.policy import Policy

CODE_LOCATION = "gpu-platform"
"""The user deployment's name (the chart's gRPC Deployment and Service)."""
GRPC_ARGS = ("--module-name", "assets.definitions", "--attribute", "defs")
"""`dagster api grpc` arguments: the Definitions workspace.yaml loads."""
WORK_ROOT = "/var/lib/gpu-platform/work"


@dataclass(frozen=True)
class HelmSettings:
    """image: `repository:tag` of the image holding this repository (and dagster-k8s,
    dagster-postgres). postgres_*: the operator's database (its password is in the tree's
    `postgres_secret`). env_secret: the operator's Secret with `GPU_PLATFORM_LEDGER_URL` (the
    ledger on Postgres: a URL with a password, so never a value here)."""

    image: str
    postgres_host: str
    postgres_user: str = "dagster"
    postgres_db: str = "dagster"
    postgres_port: int = 5432
    env_secret: str = "gpu-platform-env"

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
    env: dict[str, str] = {"GPU_PLATFORM_ENV": "prod", "GPU_PLATFORM_WORK_ROOT": WORK_ROOT}
    deployment: dict[str, Any] = {
        "name": CODE_LOCATION,
        "image": {"repository": repo, "tag": tag, "pullPolicy": s.image_pull_policy},
        "dagsterApiGrpcArgs": list(GRPC_ARGS),
        "port": 3030,
        "env": env,
        "envSecrets": [{"name": h.env_secret}],
        # run pods get the same env, secrets and volumes as the code location
        "includeConfigInLaunchedRuns": {"enabled": True},
    }
    if s.work_claim:
        env["GPU_PLATFORM_WORK_CLAIM"] = s.work_claim
    return {
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
        "dagster-user-deployments": {"enabled": True, "deployments": [deployment]},
        "runLauncher": {
            "type": "K8sRunLauncher",
            "config": {
                "k8sRunLauncher": {
                    "jobNamespace": s.dagster_namespace,
                    "loadInclusterConfig": True,
                    "imagePullPolicy": s.image_pull_policy,
                    "envSecrets": [{"name": h.env_secret}],
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
