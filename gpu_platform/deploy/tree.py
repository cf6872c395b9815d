"""Everything a fresh cluster with Kueue needs for the platform, as one kustomize tree.

`gpu-platform deploy render --out DIR` writes one file per object plus `kustomization.yaml`, so
`kubectl apply -k DIR` creates it all in one go (`kubectl kustomize DIR` renders it offline):
- the team Namespaces (labelled with their team) and the Dagster namespace, first, so the
  LocalQueues and Roles inside them are accepted;
- the Kueue objects of the policy (`admission.kueue_export`);
- per team namespace a PersistentVolumeClaim for the work volume (when a claim is named), where
  step pods keep checkpoints across attempts;
- the run launcher's ServiceAccount; in each team namespace a Role and RoleBinding that let it
  create and watch the step Jobs and their Pods and logs and list Kueue Workloads and Events
  (the read-back); in the Dagster namespace the same for run Jobs; a ClusterRole that may only
  read Nodes and Pods (the day's inventory that prices GPU time). Nothing else: no Secrets, no
  cluster-wide write;
- the Dagster instance ConfigMap (`dagster.yaml` with Postgres storage and the K8sRunLauncher),
  whose launcher reads the Postgres password from a Secret named here and created by the
  operator (never a value in the tree).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpu_platform.admission.kueue_export import kueue_manifests, manifest_filename
from gpu_platform.cluster.names import k8s_name
from gpu_platform.gate.instance_config import dagster_instance_yaml, render_instance_yaml
from gpu_platform.policy import Policy

MANAGED = {"app.kubernetes.io/managed-by": "gpu-platform"}
LABEL_TEAM = "gpu-platform.io/team"
KUSTOMIZATION = "kustomization.yaml"

TEAM_RULES: tuple[dict[str, Any], ...] = (
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create", "delete", "get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads", "localqueues"], "verbs": ["get", "list", "watch"]},
)
"""In a team namespace: what `k8s_job_executor` needs for step Jobs (create, watch, read logs,
delete on termination) and what the gate's read-back lists (Jobs, Events, Kueue Workloads, and the
LocalQueues whose usage Admission Fair Sharing orders teams by)."""

DAGSTER_RULES: tuple[dict[str, Any], ...] = TEAM_RULES[:3]
"""In the Dagster namespace: what `K8sRunLauncher` needs for run Jobs."""

INVENTORY_RULES: tuple[dict[str, Any], ...] = (
    {"apiGroups": [""], "resources": ["nodes", "pods", "persistentvolumes"], "verbs": ["get", "list"]},
)
"""Cluster-wide, read only: the day's node, pod and PersistentVolume inventory (`raw_nodes`,
`raw_pods`, `raw_volumes`)."""


@dataclass(frozen=True)
class DeploySettings:
    """dagster_namespace / service_account: where the webserver, daemon and run pods live and
    what they run as. work_claim: the work volume's PVC in each team namespace ("" = none).
    postgres_secret: the operator-created Secret holding `postgresql-password`.
    instance_config: write the instance ConfigMap; False where the official Dagster Helm chart
    renders the instance from its values (`deploy.helm`), so the two never claim one name."""

    dagster_namespace: str = "dagster"
    service_account: str = "dagster"
    instance_config_map: str = "dagster-instance"
    postgres_secret: str = "dagster-postgresql-secret"
    work_claim: str = "gpu-platform-work"
    work_storage: str = "100Gi"
    storage_class: str = ""
    image_pull_policy: str = "IfNotPresent"
    instance_config: bool = True


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


def _role(name: str, namespace: str, rules: tuple[dict[str, Any], ...], s: DeploySettings) -> list[dict[str, Any]]:
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": _meta(name, namespace),
         "rules": [dict(r) for r in rules]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": _meta(name, namespace),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": s.service_account, "namespace": s.dagster_namespace}]},
    ]


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
    role = "gpu-platform-launcher"
    for ns in sorted(teams):
        out += _role(role, ns, TEAM_RULES, s)
        if s.work_claim:
            spec: dict[str, Any] = {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": s.work_storage}}}
            if s.storage_class:
                spec["storageClassName"] = s.storage_class
            out.append({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": _meta(s.work_claim, ns), "spec": spec})
    if s.dagster_namespace not in teams:
        out += _role(role, s.dagster_namespace, DAGSTER_RULES, s)
    reader = "gpu-platform-inventory-reader"
    out += [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": _meta(reader),
         "rules": [dict(r) for r in INVENTORY_RULES]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": _meta(reader),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": reader},
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


def write_tree(policy: Policy, out_dir: str | Path, s: DeploySettings | None = None) -> list[Path]:
    """One file per object and `kustomization.yaml` listing them in apply order."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for m in deploy_manifests(policy, s):
        p = out / manifest_filename(m)
        if p in paths:
            raise ValueError(f"two objects would be written to {p.name}")
        p.write_text(yaml.safe_dump(m, sort_keys=False))
        paths.append(p)
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [p.name for p in paths],
    }
    (out / KUSTOMIZATION).write_text(
        "# Written by `gpu-platform deploy render`: kubectl apply -k <this directory>\n"
        + yaml.safe_dump(kustomization, sort_keys=False)
    )
    return paths
