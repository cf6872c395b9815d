"""Everything a fresh cluster with Kueue needs for the platform, as one kustomize tree.

`gpu-platform deploy render --out DIR` writes one file per object plus `kustomization.yaml`, so
`kubectl apply -k DIR` creates it all in one go (`kubectl kustomize DIR` renders it offline):
- the team Namespaces (labelled with their team) and the Dagster namespace, first, so the
  LocalQueues, Roles, claims and ConfigMaps inside them are accepted;
- the Kueue objects of the policy (`admission.kueue_export`);
- the work-volume PersistentVolumeClaim (when a claim is named) in every team namespace (step
  pods keep checkpoints there across attempts) and in the Dagster namespace (the code-location
  server, where the admission sensor reads them, and the run pods);
- the run launcher's ServiceAccount; in each team namespace a Role and RoleBinding that let it
  create and watch the step Jobs and their Pods and logs and list Kueue Workloads and Events
  (the read-back); in the Dagster namespace the same for run Jobs; a ClusterRole that may only
  read Nodes, Pods and PersistentVolumes (the day's inventory that prices GPU time);
- in each team namespace the step ServiceAccount every step Job runs as
  (`cluster.jobs.STEP_SERVICE_ACCOUNT`), with a Role for what the gang step does there: its
  headless Service, its Indexed Job and that Job's pods and logs. Nothing else: no Secrets, no
  cluster-wide write;
- with the official Dagster Helm chart (`instance_config=False`, `deploy.helm`), in each team
  namespace the chart's env ConfigMaps under the chart's names: dagster-k8s gives every step pod
  the run launcher's and the code location's `envFrom` ConfigMaps, which the chart creates in the
  Dagster namespace only, and a pod whose `envFrom` names a missing ConfigMap never starts;
- without the chart, the Dagster instance ConfigMap (`dagster.yaml` with Postgres storage and the
  K8sRunLauncher).
The Postgres password and the ledger URL stay in Secrets the operator creates (their names are
here and in the Helm values, their values never are): in the Dagster namespace and, because a
step pod reads them from its own namespace, in every team namespace (`deploy.steps`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from gpu_platform.admission.kueue_export import kueue_manifests, manifest_filename
from gpu_platform.cluster.jobs import STEP_SERVICE_ACCOUNT
from gpu_platform.cluster.names import k8s_name
from gpu_platform.gate.instance_config import dagster_instance_yaml, render_instance_yaml
from gpu_platform.policy import Policy
from gpu_platform.safeload.files import OutputDir

MANAGED = {"app.kubernetes.io/managed-by": "gpu-platform"}
LABEL_TEAM = "gpu-platform.io/team"
KUSTOMIZATION = "kustomization.yaml"
SETTINGS_FILE = "deploy-settings.json"
"""Beside the objects: the settings they were written with, for `deploy check --tree` (not a
Kubernetes object; kustomize reads only what `kustomization.yaml` lists)."""

TEAM_RULES: tuple[dict[str, Any], ...] = (
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create", "delete", "get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"], "verbs": ["get", "list", "watch", "patch"]},
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["localqueues"], "verbs": ["get", "list", "watch"]},
)
"""In a team namespace: what `k8s_job_executor` needs for step Jobs (create, watch, read logs,
delete on termination) and what the gate's read-back lists (Jobs, Events, Kueue Workloads, and the
LocalQueues whose usage Admission Fair Sharing orders teams by); `patch` on Workloads: the gate
sets the priority boost of its waiting Workloads (`cluster.aging`, docs/policy.md, Aging)."""

DAGSTER_RULES: tuple[dict[str, Any], ...] = TEAM_RULES[:3]
"""In the Dagster namespace: what `K8sRunLauncher` needs for run Jobs."""

STEP_RULES: tuple[dict[str, Any], ...] = (
    {"apiGroups": [""], "resources": ["services"], "verbs": ["create", "get", "delete"]},
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create", "get", "delete"]},
    {"apiGroups": ["batch"], "resources": ["jobs/status"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "delete"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
)
"""In a team namespace, for the step ServiceAccount: what the gang step (`cluster.gang.run_gang`
through dagster-k8s's client) does: create and delete its headless Service, create, watch and
delete its Indexed Job, list its pods, read their logs, delete them when the run is terminated.
A one-pod step needs none of it; every step of a run runs as this one account."""

INVENTORY_RULES: tuple[dict[str, Any], ...] = (
    {"apiGroups": [""], "resources": ["nodes", "pods", "persistentvolumes"], "verbs": ["get", "list"]},
)
"""Cluster-wide, read only: the day's node, pod and PersistentVolume inventory (`raw_nodes`,
`raw_pods`, `raw_volumes`)."""


@dataclass(frozen=True)
class DeploySettings:
    """dagster_namespace / service_account: where the webserver, daemon, code location and run
    pods live and what they run as. step_service_account: what step Jobs run as in each team
    namespace. work_claim: the work volume's PVC in each team namespace and the Dagster namespace
    ("" = none), `work_storage` each, `storage_class` its storageClassName ("" = the cluster's
    default class, which must offer ReadWriteMany). postgres_secret: the operator-created Secret
    holding `postgresql-password`; env_secret: the operator-created Secret holding
    `GPU_PLATFORM_LEDGER_URL`; image_pull_secret: the operator-created registry Secret ("" = a
    public image). instance_config: write the instance ConfigMap; False where the official Dagster
    Helm chart renders the instance from its values (`deploy.helm`), so the two never claim one
    name; helm_release: the chart's release name (the chart's object names derive from it)."""

    dagster_namespace: str = "dagster"
    service_account: str = "dagster"
    step_service_account: str = STEP_SERVICE_ACCOUNT
    instance_config_map: str = "dagster-instance"
    postgres_secret: str = "dagster-postgresql-secret"
    env_secret: str = "gpu-platform-env"
    image_pull_secret: str = ""
    work_claim: str = "gpu-platform-work"
    work_storage: str = "100Gi"
    storage_class: str = ""
    image_pull_policy: str = "IfNotPresent"
    instance_config: bool = True
    helm_release: str = "dagster"


CODE_LOCATION = "gpu-platform"
"""The code location's name: the chart's user deployment (its gRPC Deployment and Service)."""
DAGSTER_HOME = "/opt/dagster/dagster_home"
"""The chart's `global.dagsterHome` default."""


def chart_fullname(release: str, chart: str = "dagster") -> str:
    """The Helm chart's `dagster.fullname` (no override): the release name when it contains the
    chart's name, else `<release>-<chart>`."""
    return release if chart in release else f"{release}-{chart}"


def chart_env_config_maps(s: DeploySettings) -> dict[str, dict[str, str]]:
    """ConfigMap name -> data, for what the chart's `K8sRunLauncher` (`<fullname>-pipeline-env`)
    and its code location's container context (`<subchart fullname>-<deployment>-user-env`)
    name in every run and step pod's `envFrom` (helm/dagster in dagster-io/dagster: templates/
    helpers/instance/_run-launcher.tpl, charts/dagster-user-deployments/templates/helpers/
    _helpers.tpl). The code location's env is a list in the values, carried in the container
    context itself, so the user-env copy is empty; the pipeline-env copy holds what the chart's
    does that a step reads (`DAGSTER_HOME`)."""
    user = chart_fullname(s.helm_release, "dagster-user-deployments")
    return {
        f"{chart_fullname(s.helm_release)}-pipeline-env": {"DAGSTER_HOME": DAGSTER_HOME},
        f"{user}-{CODE_LOCATION}-user-env": {},
    }


def _meta(name: str, namespace: str | None = None, **labels: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {**MANAGED, **labels}}
    if namespace is not None:
        meta["namespace"] = namespace
    return meta


def team_namespaces(policy: Policy) -> dict[str, str]:
    """namespace -> team (the first team that names it)."""
    out: dict[str, str] = {}
    for team in policy.teams.values():
        out.setdefault(team.namespace, team.name)
    return out


def _role(name: str, namespace: str, rules: tuple[dict[str, Any], ...], account: str, account_namespace: str) -> list[dict[str, Any]]:
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": _meta(name, namespace),
         "rules": [dict(r) for r in rules]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": _meta(name, namespace),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": account_namespace}]},
    ]


def _claim(s: DeploySettings, namespace: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": s.work_storage}}}
    if s.storage_class:
        spec["storageClassName"] = s.storage_class
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": _meta(s.work_claim, namespace), "spec": spec}


LAUNCHER_ROLE = "gpu-platform-launcher"
STEP_ROLE = "gpu-platform-step"
INVENTORY_ROLE = "gpu-platform-inventory-reader"


def deploy_manifests(policy: Policy, s: DeploySettings | None = None) -> list[dict[str, Any]]:
    """Every object, in apply order (namespaces first)."""
    s = s or DeploySettings()
    teams = team_namespaces(policy)
    out: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(s.dagster_namespace)},
        *({"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(ns, **{LABEL_TEAM: k8s_name(team)})}
          for ns, team in sorted(teams.items()) if ns != s.dagster_namespace),
    ]
    out += kueue_manifests(policy)
    out.append({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(s.service_account, s.dagster_namespace)})
    for ns in sorted(teams):
        out += _role(LAUNCHER_ROLE, ns, TEAM_RULES, s.service_account, s.dagster_namespace)
        out.append({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(s.step_service_account, ns)})
        out += _role(STEP_ROLE, ns, STEP_RULES, s.step_service_account, ns)
        if s.work_claim:
            out.append(_claim(s, ns))
        if not s.instance_config and ns != s.dagster_namespace:
            out += [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(name, ns), "data": dict(data)}
                    for name, data in chart_env_config_maps(s).items()]
    if s.dagster_namespace not in teams:
        out += _role(LAUNCHER_ROLE, s.dagster_namespace, DAGSTER_RULES, s.service_account, s.dagster_namespace)
        if s.work_claim:
            out.append(_claim(s, s.dagster_namespace))
    out += [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": _meta(INVENTORY_ROLE),
         "rules": [dict(r) for r in INVENTORY_RULES]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": _meta(INVENTORY_ROLE),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": INVENTORY_ROLE},
         "subjects": [{"kind": "ServiceAccount", "name": s.service_account, "namespace": s.dagster_namespace}]},
    ]
    if not s.instance_config:
        return out
    instance = dagster_instance_yaml(
        policy, postgres=True, k8s=True, job_namespace=s.dagster_namespace, service_account_name=s.service_account,
        instance_config_map=s.instance_config_map, image_pull_policy=s.image_pull_policy,
        postgres_password_secret=s.postgres_secret,
    )
    out.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(s.instance_config_map, s.dagster_namespace),
                "data": {"dagster.yaml": render_instance_yaml(instance, policy)}})
    return out


def namespaces(policy: Policy, s: DeploySettings) -> list[str]:
    """The Dagster namespace, then every team namespace: where the operator's Secrets go."""
    return [s.dagster_namespace, *(ns for ns in sorted(team_namespaces(policy)) if ns != s.dagster_namespace)]


def write_tree(policy: Policy, out_dir: str | Path, s: DeploySettings | None = None) -> list[Path]:
    """One file per object and `kustomization.yaml` listing them in apply order."""
    paths = []
    with OutputDir(out_dir) as out:
        names: set[str] = set()
        for m in deploy_manifests(policy, s):
            name = manifest_filename(m)
            if name in names:
                raise ValueError(f"two objects would be written to {name}")
            names.add(name)
            paths.append(out.write(name, yaml.safe_dump(m, sort_keys=False)))
        kustomization = {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "resources": [p.name for p in paths],
        }
        out.write(
            KUSTOMIZATION,
            "# Written by `gpu-platform deploy render`: kubectl apply -k <this directory>\n"
            + yaml.safe_dump(kustomization, sort_keys=False),
        )
        out.write(SETTINGS_FILE, json.dumps(asdict(s or DeploySettings()), indent=2) + "\n")
    return paths
