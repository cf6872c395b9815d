"""`gpu-platform deploy check`: is this cluster ready for the tree `deploy render` wrote?

Read-only against a live API server (nothing is created: every write is `dryRun=All`), each
check a list of `Finding`s, each failure one line naming the object and the fix:
- Kueue: its CRDs for every kind the tree writes, serving the version the tree writes
  (`kueue.x-k8s.io/v1beta2`); its controller Deployment available (and which release it runs,
  against `steps.KUEUE_VERSION`), with the feature gates the policy needs turned on in its
  arguments (`PriorityBoost` where lanes age: Kueue reads the gate's priority boost only then);
  its webhook configurations present;
- the tree, server-side: every object sent as a server-side apply with `dryRun=All`, so the API
  server runs its schema validation and every admission webhook (Kueue's included) on it and
  stores nothing. An object whose namespace does not exist yet cannot be dry-run (the tree
  creates it); those are counted, not failed. A webhook that does not answer is named once;
- nodes: for every ResourceFlavor of the tree, some node carries all of its `nodeLabels`, and
  where the flavor names a Topology, those nodes carry every level's label;
- access: a SubjectAccessReview per verb for each ServiceAccount of the tree (the run launcher:
  run Jobs, step Jobs, the read-back, the inventory; the step account: what the gang step does),
  as the account itself with its groups, so what is checked is what the API server will
  decide, whatever RBAC objects grant it;
- Secrets: the Postgres password and ledger URL Secrets (and the registry Secret) the tree and
  the Helm values name exist in every namespace whose pods read them.

Talks to the API through the platform's one client (`cluster.client.api_client`), with plain
REST paths: no discovery round trips, the same requests on every cluster.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpu_platform.cluster.names import KUEUE_API_GROUP, KUEUE_API_VERSION
from gpu_platform.deploy.steps import (
    KUEUE_DEPLOYMENT,
    KUEUE_MANIFESTS,
    KUEUE_NAMESPACE,
    KUEUE_VERSION,
    feature_gate_patch,
)
from gpu_platform.deploy.tree import (
    DAGSTER_RULES,
    INVENTORY_RULES,
    KUSTOMIZATION,
    SETTINGS_FILE,
    STEP_RULES,
    TEAM_RULES,
    DeploySettings,
)

FIELD_MANAGER = "gpu-platform-deploy-check"
KUEUE_WEBHOOKS = ("kueue-validating-webhook-configuration", "kueue-mutating-webhook-configuration")

_CORE = {"Namespace": "namespaces", "ServiceAccount": "serviceaccounts", "ConfigMap": "configmaps",
         "PersistentVolumeClaim": "persistentvolumeclaims", "Secret": "secrets"}
_RBAC = {"Role": "roles", "RoleBinding": "rolebindings", "ClusterRole": "clusterroles",
         "ClusterRoleBinding": "clusterrolebindings"}
KUEUE_PLURALS = {"ResourceFlavor": "resourceflavors", "ClusterQueue": "clusterqueues", "LocalQueue": "localqueues",
                 "Cohort": "cohorts", "WorkloadPriorityClass": "workloadpriorityclasses", "Topology": "topologies",
                 "AdmissionCheck": "admissionchecks", "ProvisioningRequestConfig": "provisioningrequestconfigs",
                 "MultiKueueConfig": "multikueueconfigs", "MultiKueueCluster": "multikueueclusters",
                 "Workload": "workloads"}
"""Kind -> plural of the Kueue objects the tree writes, and of the Workloads the read-back lists."""


@dataclass(frozen=True)
class Finding:
    """One thing checked. ok=False: `subject` names the object, `problem` what is wrong, `fix`
    what to do; ok=True: `problem` says what was verified."""

    ok: bool
    check: str
    subject: str
    problem: str
    fix: str = ""

    def line(self) -> str:
        if self.ok:
            return f"ok    {self.check}: {self.subject}: {self.problem}"
        return f"FAIL  {self.check}: {self.subject}: {self.problem}" + (f"; fix: {self.fix}" if self.fix else "")


@dataclass
class Tree:
    """The objects to check and the settings they were written with."""

    objects: list[dict[str, Any]]
    settings: DeploySettings = field(default_factory=DeploySettings)
    source: str = ""
    feature_gates: tuple[str, ...] = ()
    """Kueue feature gates the policy needs on (`steps.kueue_feature_gates`)."""

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o["kind"] == kind]

    def team_namespaces(self) -> list[str]:
        return sorted(o["metadata"]["name"] for o in self.of_kind("Namespace")
                      if o["metadata"]["name"] != self.settings.dagster_namespace)


def read_tree(directory: str | Path) -> Tree:
    """The objects `kustomization.yaml` lists, in its order, and the settings `deploy render`
    recorded beside it (defaults where none were recorded)."""
    d = Path(directory)
    kustomization = yaml.safe_load((d / KUSTOMIZATION).read_text())
    objects = [yaml.safe_load((d / name).read_text()) for name in kustomization["resources"]]
    settings = DeploySettings()
    if (d / SETTINGS_FILE).exists():
        settings = DeploySettings(**json.loads((d / SETTINGS_FILE).read_text()))
    return Tree(objects, settings, str(d))


class ClusterUnreachable(RuntimeError):
    """The API server did not answer (connection refused, TLS refused, timeout)."""


class _Api:
    """JSON over the client's connection pool: `request` returns (status, body)."""

    def __init__(self, api_client: Any) -> None:
        self.client = api_client

    def request(self, method: str, path: str, body: Any = None, query: Iterable[tuple[str, str]] = (),
                content_type: str = "application/json") -> tuple[int, dict[str, Any]]:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        headers = {"Accept": "application/json", "Content-Type": content_type}
        try:
            resp = self.client.call_api(path, method, query_params=list(query), header_params=headers, body=body,
                                        auth_settings=["BearerToken"], _preload_content=False,
                                        _return_http_data_only=True, _request_timeout=30)
            return resp.status, json.loads(resp.data or b"{}")
        except ApiException as exc:
            try:
                return exc.status, json.loads(exc.body or "{}")
            except ValueError:
                return exc.status, {"message": str(exc.body or exc.reason)}
        except (HTTPError, OSError) as exc:
            raise ClusterUnreachable(f"{self.client.configuration.host}: {exc}") from exc

    def get(self, path: str) -> tuple[int, dict[str, Any]]:
        return self.request("GET", path)


def object_path(obj: dict[str, Any]) -> str:
    """The REST path of one object of the tree."""
    kind, meta = obj["kind"], obj["metadata"]
    ns = f"namespaces/{meta['namespace']}/" if meta.get("namespace") else ""
    if kind in _CORE:
        base, plural = "/api/v1", _CORE[kind]
    elif kind in _RBAC:
        base, plural = "/apis/rbac.authorization.k8s.io/v1", _RBAC[kind]
    elif kind in KUEUE_PLURALS:
        base, plural = f"/apis/{obj['apiVersion']}", KUEUE_PLURALS[kind]
    else:
        raise ValueError(f"{kind} {meta['name']}: no REST path known for this kind")
    return f"{base}/{ns}{plural}/{meta['name']}"


def _describe(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    return f"{obj['kind']} {meta['namespace'] + '/' if meta.get('namespace') else ''}{meta['name']}"


def _message(body: dict[str, Any]) -> str:
    return " ".join(str(body.get("message") or body.get("reason") or "no message").split())


def check_kueue(api: _Api, tree: Tree) -> list[Finding]:
    """Kueue's CRDs (one per kind the tree writes, plus Workload for the read-back), its
    controller and its webhook configurations."""
    out: list[Finding] = []
    install = f"kubectl apply --server-side -f {KUEUE_MANIFESTS}"
    kinds = sorted({o["kind"] for o in tree.objects if o["apiVersion"].startswith(KUEUE_API_GROUP + "/")} | {"Workload"})
    for kind in kinds:
        name = f"{KUEUE_PLURALS[kind]}.{KUEUE_API_GROUP}"
        status, crd = api.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        subject = f"CustomResourceDefinition {name}"
        if status == 404:
            out.append(Finding(False, "kueue", subject, "not installed", install))
            continue
        if status != 200:
            out.append(Finding(False, "kueue", subject, f"cannot read it: HTTP {status}: {_message(crd)}",
                               "run the check with an account that may read CustomResourceDefinitions"))
            continue
        served = [v["name"] for v in crd.get("spec", {}).get("versions", []) if v.get("served")]
        if KUEUE_API_VERSION not in served:
            out.append(Finding(False, "kueue", subject, f"serves {', '.join(served) or 'nothing'}, not {KUEUE_API_VERSION}",
                               f"upgrade Kueue to {KUEUE_VERSION}: {install}"))
        else:
            out.append(Finding(True, "kueue", subject, f"serves {KUEUE_API_VERSION}"))
    status, dep = api.get(f"/apis/apps/v1/namespaces/{KUEUE_NAMESPACE}/deployments/{KUEUE_DEPLOYMENT}")
    subject = f"Deployment {KUEUE_NAMESPACE}/{KUEUE_DEPLOYMENT}"
    if status == 404:
        out.append(Finding(False, "kueue", subject, "not found: Kueue's controller is not installed", install))
    elif status != 200:
        out.append(Finding(False, "kueue", subject, f"cannot read it: HTTP {status}: {_message(dep)}",
                           "run the check with an account that may read Deployments in kueue-system"))
    else:
        available = (dep.get("status") or {}).get("availableReplicas") or 0
        images = [c.get("image", "") for c in dep["spec"]["template"]["spec"].get("containers", [])]
        tags = sorted({i.rsplit(":", 1)[-1] for i in images if ":" in i and "kueue" in i})
        if not available:
            out.append(Finding(False, "kueue", subject, "no replica available: its webhook cannot answer",
                               f"kubectl -n {KUEUE_NAMESPACE} describe deployment/{KUEUE_DEPLOYMENT}; "
                               f"kubectl -n {KUEUE_NAMESPACE} logs deployment/{KUEUE_DEPLOYMENT}"))
        else:
            runs = f"runs {', '.join(tags)}" if tags else "runs"
            note = "" if not tags or KUEUE_VERSION in tags else f" (the tree is written for {KUEUE_VERSION})"
            out.append(Finding(True, "kueue", subject, f"{available} replica(s) available, {runs}{note}"))
        out += _check_feature_gates(dep, tree.feature_gates, subject)
    for name in KUEUE_WEBHOOKS:
        kind = "ValidatingWebhookConfiguration" if "validating" in name else "MutatingWebhookConfiguration"
        plural = kind.lower() + "s"
        status, body = api.get(f"/apis/admissionregistration.k8s.io/v1/{plural}/{name}")
        if status == 404:
            out.append(Finding(False, "kueue", f"{kind} {name}", "not found: Kueue's webhook is not registered", install))
        elif status != 200:
            out.append(Finding(False, "kueue", f"{kind} {name}", f"cannot read it: HTTP {status}: {_message(body)}",
                               "run the check with an account that may read webhook configurations"))
        else:
            out.append(Finding(True, "kueue", f"{kind} {name}", f"{len(body.get('webhooks') or [])} webhook(s) registered"))
    return out


def feature_gates_of(deployment: dict[str, Any]) -> dict[str, bool]:
    """Kueue's feature gates as its controller's arguments set them (`--feature-gates=A=true,B=false`,
    the last setting of a gate winning, as Kubernetes' component-base parses them)."""
    out: dict[str, bool] = {}
    for c in deployment.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
        args = list(c.get("args") or []) + list(c.get("command") or [])
        for i, a in enumerate(args):
            value = None
            if a.startswith("--feature-gates="):
                value = a.split("=", 1)[1]
            elif a == "--feature-gates" and i + 1 < len(args):
                value = args[i + 1]
            for item in (value or "").split(","):
                name, _, flag = item.strip().partition("=")
                if name:
                    out[name] = flag.strip().lower() == "true"
    return out


def _check_feature_gates(dep: dict[str, Any], needed: tuple[str, ...], subject: str) -> list[Finding]:
    have = feature_gates_of(dep)
    out = []
    for gate in needed:
        if have.get(gate):
            out.append(Finding(True, "kueue", subject, f"feature gate {gate} on"))
        else:
            state = "off" if gate in have else "not set (off by default)"
            out.append(Finding(False, "kueue", subject,
                               f"feature gate {gate} {state}: the policy's lanes age and Kueue ignores the priority "
                               "boost the gate sets on waiting Workloads without it",
                               feature_gate_patch(gate)))
    return out


def _webhook_failure(message: str) -> bool:
    return "failed calling webhook" in message or "failed to call webhook" in message


def check_dry_run(api: _Api, tree: Tree) -> list[Finding]:
    """Every object of the tree as a server-side apply with `dryRun=All`."""
    out: list[Finding] = []
    existing: dict[str, bool] = {}
    skipped: dict[str, int] = {}
    webhook_down: str | None = None
    missing_crds: set[str] = set()
    passed = 0
    for obj in tree.objects:
        ns = obj["metadata"].get("namespace")
        if ns:
            if ns not in existing:
                existing[ns] = api.get(f"/api/v1/namespaces/{ns}")[0] == 200
            if not existing[ns]:
                skipped[ns] = skipped.get(ns, 0) + 1
                continue
        status, body = api.request(
            "PATCH", object_path(obj), body=obj,
            query=[("dryRun", "All"), ("fieldManager", FIELD_MANAGER), ("force", "true")],
            content_type="application/apply-patch+yaml",
        )
        if status in (200, 201):
            passed += 1
            continue
        message = _message(body)
        if _webhook_failure(message):
            webhook_down = webhook_down or message
            continue
        if status == 404 and obj["kind"] in KUEUE_PLURALS:
            missing_crds.add(obj["kind"])  # named once by the Kueue check
            continue
        fix = "fix the object in the tree (re-render it with this version of gpu-platform) and check again"
        if status in (401, 403):
            fix = "run the check with an account that may apply the tree (the one that runs kubectl apply -k)"
        out.append(Finding(False, "dry-run", _describe(obj), f"the API server refuses it: HTTP {status}: {message}", fix))
    if webhook_down:
        out.append(Finding(False, "dry-run", "Kueue webhook", f"does not answer: {webhook_down}",
                           f"kubectl -n {KUEUE_NAMESPACE} rollout status deployment/{KUEUE_DEPLOYMENT}; wait until it "
                           "is Available (its webhook Service and certificate come up with it), then check again"))
    if missing_crds:
        out.append(Finding(False, "dry-run", ", ".join(sorted(missing_crds)), "not dry-run: their CRDs are missing",
                           "install Kueue (see the kueue findings), then check again"))
    out.append(Finding(True, "dry-run", f"{passed} object(s)", "accepted by the API server and its admission webhooks "
                       "(dryRun=All: nothing stored)"))
    for ns, n in sorted(skipped.items()):
        out.append(Finding(True, "dry-run", f"Namespace {ns}",
                           f"not there yet: {n} object(s) in it not dry-run (the tree creates it: apply it, then check again)"))
    return out


def _matches(labels: dict[str, str], selector: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def check_nodes(api: _Api, tree: Tree) -> list[Finding]:
    """Nodes for every ResourceFlavor's `nodeLabels`, and its Topology's level labels on them."""
    status, body = api.get("/api/v1/nodes")
    if status != 200:
        return [Finding(False, "nodes", "Nodes", f"cannot list them: HTTP {status}: {_message(body)}",
                        "run the check with an account that may list Nodes")]
    nodes = [(n["metadata"]["name"], n["metadata"].get("labels") or {}) for n in body.get("items", [])]
    levels = {t["metadata"]["name"]: [lv["nodeLabel"] for lv in t["spec"]["levels"]] for t in tree.of_kind("Topology")}
    out: list[Finding] = []
    for flavor in tree.of_kind("ResourceFlavor"):
        name, selector = flavor["metadata"]["name"], flavor["spec"].get("nodeLabels") or {}
        subject = f"ResourceFlavor {name}"
        matching = [(n, labels) for n, labels in nodes if _matches(labels, selector)]
        wanted = " ".join(f"{k}={v}" for k, v in sorted(selector.items()))
        if not matching:
            out.append(Finding(False, "nodes", subject, f"no node carries {wanted}",
                               f"kubectl label node <gpu node> {wanted} (GPU feature discovery sets nvidia.com/gpu.product; "
                               "the node pool label is yours to set)"))
            continue
        topo = flavor["spec"].get("topologyName")
        lacking = sorted({lv for n, labels in matching for lv in levels.get(topo, []) if lv not in labels})
        if lacking:
            out.append(Finding(False, "nodes", subject,
                               f"{len(matching)} node(s) match, but not all carry the levels of Topology {topo}: "
                               + ", ".join(lacking), f"label those nodes with {', '.join(lacking)}"))
        else:
            out.append(Finding(True, "nodes", subject, f"{len(matching)} node(s) carry {wanted}"))
    return out


@dataclass(frozen=True)
class Need:
    """One permission an account needs: verb on group/resource, in a namespace (None: cluster)."""

    namespace: str | None
    group: str
    resource: str
    verb: str

    def text(self) -> str:
        res, _, sub = self.resource.partition("/")
        name = f"{res}.{self.group}" if self.group else res
        return f"{self.verb} {name}{'/' + sub if sub else ''}"


def _needs(rules: Iterable[dict[str, Any]], namespace: str | None) -> list[Need]:
    return [Need(namespace, g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"]
            for v in rule["verbs"]]


def account_needs(tree: Tree) -> dict[tuple[str, str], list[Need]]:
    """(namespace, ServiceAccount) -> what the gate, the executor and the gang step need of it:
    the platform's rule tables, not the tree's RBAC objects (those are what is being checked)."""
    s = tree.settings
    launcher = (s.dagster_namespace, s.service_account)
    teams = tree.team_namespaces()
    needs: dict[tuple[str, str], list[Need]] = {launcher: _needs(INVENTORY_RULES, None)}
    if s.dagster_namespace not in teams:
        needs[launcher] += _needs(DAGSTER_RULES, s.dagster_namespace)
    for ns in teams:
        needs[launcher] += _needs(TEAM_RULES, ns)
        needs[(ns, s.step_service_account)] = _needs(STEP_RULES, ns)
    return needs


def check_access(api: _Api, tree: Tree) -> list[Finding]:
    """A SubjectAccessReview per needed verb, as each ServiceAccount with its groups."""
    out: list[Finding] = []
    for (sa_ns, sa), needs in account_needs(tree).items():
        subject = f"ServiceAccount {sa_ns}/{sa}"
        denied: dict[str | None, list[str]] = {}
        for need in needs:
            res, _, sub = need.resource.partition("/")
            attrs: dict[str, Any] = {"verb": need.verb, "group": need.group, "resource": res}
            if sub:
                attrs["subresource"] = sub
            if need.namespace:
                attrs["namespace"] = need.namespace
            review = {
                "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                "spec": {"user": f"system:serviceaccount:{sa_ns}:{sa}",
                         "groups": ["system:serviceaccounts", f"system:serviceaccounts:{sa_ns}", "system:authenticated"],
                         "resourceAttributes": attrs},
            }
            status, body = api.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", body=review)
            if status not in (200, 201):
                return out + [Finding(False, "access", subject,
                                      f"cannot ask the API server: HTTP {status}: {_message(body)}",
                                      "run the check with an account that may create subjectaccessreviews "
                                      "(a cluster admin)")]
            if not (body.get("status") or {}).get("allowed"):
                denied.setdefault(need.namespace, []).append(need.text())
        for ns, verbs in sorted(denied.items(), key=lambda kv: kv[0] or ""):
            where = f"in {ns}" if ns else "cluster-wide"
            src = f" (see {tree.source})" if tree.source else ""
            out.append(Finding(False, "access", subject, f"may not {', '.join(verbs)} {where}",
                               f"kubectl apply -k <the tree>{src}: its Role/ClusterRole and binding for this account grant it"))
        if not denied:
            out.append(Finding(True, "access", subject, f"may do all {len(needs)} things it needs"))
    return out


def check_secrets(api: _Api, tree: Tree) -> list[Finding]:
    """The operator's Secrets, where pods read them: the Dagster namespace and every team's."""
    s = tree.settings
    wanted = [(s.postgres_secret, "postgresql-password", "DAGSTER_PG_PASSWORD"),
              (s.env_secret, "GPU_PLATFORM_LEDGER_URL", "GPU_PLATFORM_LEDGER_URL")]
    out: list[Finding] = []
    for ns in [s.dagster_namespace, *tree.team_namespaces()]:
        for name, key, env in wanted + ([(s.image_pull_secret, ".dockerconfigjson", "")] if s.image_pull_secret else []):
            status, body = api.get(f"/api/v1/namespaces/{ns}/secrets/{name}")
            subject = f"Secret {ns}/{name}"
            if status == 404:
                fix = (f'kubectl -n {ns} create secret generic {name} --from-literal={key}="${env}"' if env else
                       f"kubectl -n {ns} create secret docker-registry {name} --docker-server=... (deploy render prints it)")
                out.append(Finding(False, "secrets", subject, "missing: pods in this namespace read it", fix))
            elif status != 200:
                out.append(Finding(False, "secrets", subject, f"cannot read it: HTTP {status}: {_message(body)}",
                                   "check it exists, or run the check with an account that may get Secrets there"))
            elif key not in (body.get("data") or {}):
                out.append(Finding(False, "secrets", subject, f"has no key {key}",
                                   f"recreate it with {key} (deploy render prints the command)"))
            else:
                out.append(Finding(True, "secrets", subject, f"has {key}"))
    return out


CHECKS = (("kueue", check_kueue), ("dry-run", check_dry_run), ("nodes", check_nodes),
          ("access", check_access), ("secrets", check_secrets))


def check_cluster(api_client: Any, tree: Tree) -> list[Finding]:
    """Every check, in order, against the cluster behind `api_client` (a `kubernetes.client.ApiClient`)."""
    api = _Api(api_client)
    out: list[Finding] = []
    for _, check in CHECKS:
        out += check(api, tree)
    return out
