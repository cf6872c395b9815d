"""Kubernetes node and pod inventory: `kubectl get nodes -o json` / `kubectl get pods -A -o json`.

Both commands print a `v1` `List` (`{"apiVersion": "v1", "kind": "List", "items": [...]}`);
the API's `NodeList` / `PodList` (what :func:`read_cluster` fetches with the `kubernetes`
client and serialises with the client's own `sanitize_for_serialization`, i.e. the same JSON)
is accepted too. Each item is one input row: it becomes a `raw_nodes` / `raw_pods` row or is
quarantined with `item N: field: reason` (N counts items from 1).

Nodes: name, `spec.providerID` and the provider identity parsed from it (:func:`provider_key`),
instance type / GPU product / node pool labels, `nvidia.com/gpu` and MIG (`nvidia.com/mig-*`)
capacity, taints. GPU counts for pricing come from here (DESIGN: never from sample indices).

Pods: namespace, name, uid, node, phase, the request id the k8s executor sets (annotation
`gpu-platform.io/request-id` verbatim, else the label of the same name), team / lane labels,
GPU and MIG requests summed over containers (limits when requests are absent), start (status
`startTime`) and end (latest container `finishedAt`, only for a pod in `Succeeded`/`Failed`), and
the PersistentVolumeClaims it mounts (`spec.volumes[].persistentVolumeClaim.claimName`; a generic
ephemeral volume is the claim `<pod>-<volume>` Kubernetes creates for it).

PersistentVolumes (`kubectl get pv -o json`): name, the claim bound to it (`spec.claimRef`), storage
class, capacity, and the cloud volume behind it (`spec.csi.volumeHandle`, or the in-tree
`awsElasticBlockStore.volumeID` / `gcePersistentDisk.pdName` / `azureDisk.diskURI`) reduced to the
key a FOCUS `ResourceId` of that volume reduces to (:func:`volume_key`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import polars as pl

from gpu_platform.cluster.jobs import (
    ANNOTATION_REQUEST_ID,
    LABEL_GPU_PRODUCT,
    LABEL_LANE,
    LABEL_NODE_POOL,
    LABEL_REQUEST_ID,
    LABEL_TEAM,
)
from gpu_platform.finops.feeds.schemas import UTC_TS, FeedBatch

RAW_NODES = "raw_nodes"
RAW_NODES_QUARANTINE = "raw_nodes_quarantine"
RAW_PODS = "raw_pods"
RAW_PODS_QUARANTINE = "raw_pods_quarantine"
RAW_VOLUMES = "raw_volumes"
RAW_VOLUMES_QUARANTINE = "raw_volumes_quarantine"

NODE_SCHEMA: dict[str, pl.DataType] = {
    "snapshot_at": UTC_TS,
    "node": pl.String(),
    "provider_id": pl.String(),
    "provider": pl.String(),
    "provider_key": pl.String(),
    "alt_provider_key": pl.String(),
    "instance_type": pl.String(),
    "gpu_product": pl.String(),
    "node_pool": pl.String(),
    "gpu_capacity": pl.Int32(),
    "gpu_count_label": pl.Int32(),
    "mig_devices": pl.Int32(),
    "mig_capacity": pl.String(),
    "cpu_capacity": pl.Float64(),
    "memory_capacity": pl.Float64(),
    "taints": pl.String(),
    "labels": pl.String(),
    "created_at": UTC_TS,
    "source": pl.String(),
    "source_row": pl.Int32(),
}
"""Columns of `raw_nodes`. `mig_capacity`, `taints`, `labels`: JSON text (sorted keys).
`cpu_capacity` (cores) and `memory_capacity` (bytes): `status.capacity.cpu` / `.memory`.
`created_at`: `metadata.creationTimestamp`, when the Node object (so the instance behind a name)
appeared: a node replaced under the same name has a new provider id and a new creation time."""

POD_SCHEMA: dict[str, pl.DataType] = {
    "snapshot_at": UTC_TS,
    "namespace": pl.String(),
    "pod": pl.String(),
    "uid": pl.String(),
    "node": pl.String(),
    "phase": pl.String(),
    "request_id": pl.String(),
    "team": pl.String(),
    "lane": pl.String(),
    "run_id": pl.String(),
    "gpu_requests": pl.Int32(),
    "mig_requests": pl.Int32(),
    "cpu_requests": pl.Float64(),
    "memory_requests": pl.Float64(),
    "started_at": UTC_TS,
    "ended_at": UTC_TS,
    "labels": pl.String(),
    "volume_claims": pl.String(),
    "source": pl.String(),
    "source_row": pl.Int32(),
}
"""Columns of `raw_pods`; `labels` is JSON text (sorted keys). `cpu_requests` (cores) and
`memory_requests` (bytes): the pod's effective requests as the scheduler counts them (the sum over
containers, or the largest init container's when larger; a container's limit when it sets no
request), NULL when no container asks for any. `volume_claims`: JSON list of the names of the
PersistentVolumeClaims (in the pod's namespace) it mounts, sorted; NULL when none."""

VOLUME_SCHEMA: dict[str, pl.DataType] = {
    "snapshot_at": UTC_TS,
    "volume": pl.String(),
    "uid": pl.String(),
    "phase": pl.String(),
    "claim_namespace": pl.String(),
    "claim_name": pl.String(),
    "storage_class": pl.String(),
    "capacity_bytes": pl.Float64(),
    "driver": pl.String(),
    "volume_handle": pl.String(),
    "provider": pl.String(),
    "volume_key": pl.String(),
    "created_at": UTC_TS,
    "labels": pl.String(),
    "source": pl.String(),
    "source_row": pl.Int32(),
}
"""Columns of `raw_volumes` (one row per PersistentVolume observed). `driver`: the CSI driver or
the in-tree plugin (`kubernetes.io/aws-ebs`, ...); `volume_handle`: the cloud volume id as the PV
gives it; `volume_key`: that id reduced by :func:`volume_key` (NULL for a volume no bill names:
NFS, hostPath, local)."""

QUARANTINE_SCHEMA: dict[str, pl.DataType] = {
    "source": pl.String(), "source_row": pl.Int32(), "raw": pl.String(), "reason": pl.String(),
}
"""`raw_nodes_quarantine` / `raw_pods_quarantine`: source, source_row (item number), raw, reason."""

GPU_RESOURCE = "nvidia.com/gpu"
MIG_PREFIX = "nvidia.com/mig-"
LABEL_GPU_COUNT = "nvidia.com/gpu.count"
INSTANCE_TYPE_LABELS = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")
NODE_POOL_LABELS = (
    LABEL_NODE_POOL, "eks.amazonaws.com/nodegroup", "karpenter.sh/nodepool", "cloud.google.com/gke-nodepool",
    "kubernetes.azure.com/agentpool", "agentpool", "oci.oraclecloud.com/node-pool-id",
)
GKE_INSTANCE_ID = "container.googleapis.com/instance_id"
"""Annotation GKE puts on a node: the Compute Engine numeric instance id (a billing ResourceId form)."""
LABEL_RUN_ID = "dagster/run-id"

_AWS_INSTANCE = re.compile(r"(?:^|/)((?:i|vol)-[0-9a-z]+)$")
_GCE_PATH = re.compile(r"projects/([^/]+)/zones/([^/]+)/instances/([^/]+)$")
_GCE_DISK = re.compile(r"projects/([^/]+)/(?:zones|regions)/([^/]+)/disks/([^/]+)$")
_OCID = re.compile(r"(ocid1\.instance\.[0-9a-z._-]+)$")


def provider_key(identity: str | None) -> tuple[str | None, str | None]:
    """(provider, normalised key) of a node's `providerID` or a FOCUS `ResourceId`.

    Both sides reduce to the same key, so a bill row matches its node:

    | form | example | key |
    |---|---|---|
    | AWS providerID | `aws:///us-east-1b/i-0abc` | `aws:i-0abc` |
    | AWS ResourceId | `i-0abc`, `arn:aws:ec2:us-east-1:123:instance/i-0abc` | `aws:i-0abc` |
    | Azure | `azure:///subscriptions/S/resourceGroups/G/providers/Microsoft.Compute/virtualMachines/V`, `/subscriptions/...` | `azure:/subscriptions/s/.../v` (lower-case) |
    | GCP | `gce://P/Z/N`, `//compute.googleapis.com/projects/P/zones/Z/instances/N`, `https://www.googleapis.com/compute/v1/projects/P/zones/Z/instances/N` | `gce:p/z/n` |
    | GCP numeric id | `1234567890123` (ResourceId) / the node's `container.googleapis.com/instance_id` | `gce-id:1234567890123` |
    | OCI | `oci://ocid1.instance...`, `ocid1.instance...` | `oci:ocid1.instance...` |
    | AWS EBS volume | `vol-0abc`, `arn:aws:ec2:R:A:volume/vol-0abc`, `aws://us-east-1b/vol-0abc` | `aws:vol-0abc` |
    | GCP disk | `//compute.googleapis.com/projects/P/zones/Z/disks/D` (or `regions/R`) | `gce-disk:p/z/d` |
    | Azure disk | `/subscriptions/.../providers/Microsoft.Compute/disks/D` (any case) | `azure:` + lower-case path |

    Anything else is (None, None); dbt_like_sql/staging/stg_focus_billing.sql applies the same
    rules in SQL (tests check the two agree).
    """
    if not identity:
        return None, None
    s = identity.strip().lower()
    if s.startswith("aws://") or s.startswith("arn:aws") or s.startswith("i-") or s.startswith("vol-"):
        m = _AWS_INSTANCE.search(s)
        return ("aws", f"aws:{m.group(1)}") if m else ("aws", None)
    if s.startswith("azure://") or s.startswith("/subscriptions/"):
        path = s[len("azure://"):] if s.startswith("azure://") else s
        return "azure", f"azure:{path}"
    if s.startswith("gce://"):
        parts = s[len("gce://"):].split("/")
        return ("gce", f"gce:{'/'.join(parts)}") if len(parts) == 3 and all(parts) else ("gce", None)
    m = _GCE_PATH.search(s)
    if m and ("googleapis.com" in s):
        return "gce", f"gce:{m.group(1)}/{m.group(2)}/{m.group(3)}"
    m = _GCE_DISK.search(s)
    if m and ("googleapis.com" in s):
        return "gce", f"gce-disk:{m.group(1)}/{m.group(2)}/{m.group(3)}"
    if s.isdigit() and len(s) >= 10:
        return "gce", f"gce-id:{s}"
    if s.startswith("oci://") or s.startswith("ocid1.instance"):
        m = _OCID.search(s)
        return ("oci", f"oci:{m.group(1)}") if m else ("oci", None)
    return None, None


def volume_key(handle: str | None) -> tuple[str | None, str | None]:
    """(provider, key) of a PersistentVolume's cloud volume id, the key :func:`provider_key` gives
    the same volume's FOCUS `ResourceId`: an EBS CSI handle `vol-0abc` or in-tree `aws://ZONE/vol-0abc`
    -> `aws:vol-0abc`; a GCE PD CSI handle `projects/P/zones/Z/disks/D` -> `gce-disk:p/z/d`; an
    Azure disk id `/subscriptions/.../disks/D` -> `azure:` + the lower-case path. Anything else
    (an NFS path, a local volume, an unknown driver's handle) is (None, None)."""
    if not handle:
        return None, None
    s = handle.strip()
    if s.lower().startswith("projects/"):
        s = "//compute.googleapis.com/" + s
    provider, key = provider_key(s)
    if key and (key.startswith(("aws:vol-", "gce-disk:")) or "/providers/microsoft.compute/disks/" in key):
        return provider, key
    return None, None


class InventoryError(ValueError):
    """The document is not a Kubernetes list of the expected kind (names the field)."""


def _items(doc: Any, kind: str, source: str) -> list[Any]:
    if not isinstance(doc, Mapping):
        raise InventoryError(f"{source}: expected a JSON object (a v1 List), got {type(doc).__name__}")
    doc_kind = doc.get("kind")
    if doc_kind not in ("List", f"{kind}List"):
        raise InventoryError(f"{source}: kind: expected 'List' or '{kind}List', got {doc_kind!r}")
    if doc.get("apiVersion") not in ("v1", None):
        raise InventoryError(f"{source}: apiVersion: expected 'v1', got {doc.get('apiVersion')!r}")
    items = doc.get("items")
    if items is None:
        return []
    if not isinstance(items, list):
        raise InventoryError(f"{source}: items: expected a list, got {type(items).__name__}")
    return items


def _load(data: bytes | str | Mapping[str, Any], source: str) -> Any:
    if isinstance(data, Mapping):
        return data
    try:
        return json.loads(data)
    except json.JSONDecodeError as e:
        raise InventoryError(f"{source}: not JSON: line {e.lineno} column {e.colno}: {e.msg}") from e


class _Bad(ValueError):
    pass


def _str_map(obj: Mapping[str, Any], key: str, where: str) -> dict[str, str]:
    value = obj.get(key) or {}
    if not isinstance(value, Mapping) or not all(isinstance(v, str) for v in value.values()):
        raise _Bad(f"{where}.{key}: expected a map of strings")
    return dict(value)


def _quantity(value: Any, where: str) -> int:
    """A count resource quantity ("8", 8); anything fractional or suffixed is an error."""
    if isinstance(value, bool):
        raise _Bad(f"{where}: {value!r} is not a whole number")
    if isinstance(value, int):
        n = value
    elif isinstance(value, str) and re.fullmatch(r"\s*\d+\s*", value):
        n = int(value)
    else:
        raise _Bad(f"{where}: {value!r} is not a whole number")
    if n < 0 or n > 1_000_000:
        raise _Bad(f"{where}: {n} is out of range")
    return n


def _ts(value: Any, where: str) -> datetime | None:
    if value in (None, ""):
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if not isinstance(value, str):
        raise _Bad(f"{where}: expected an RFC 3339 time, got {value!r}")
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise _Bad(f"{where}: {value!r} is not an RFC 3339 time") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _json(value: Any) -> str | None:
    return json.dumps(value, sort_keys=True, default=str) if value else None


def _raw(item: Any) -> str:
    text = json.dumps(item, sort_keys=True, default=str)
    return text if len(text) <= 4000 else text[:4000] + "..."


def _object_parts(item: Any, kind: str) -> tuple[Mapping[str, Any], dict[str, str], dict[str, str], Mapping[str, Any], Mapping[str, Any]]:
    """metadata, labels, annotations, spec and status of one `kubectl -o json` item of `kind`;
    raises _Bad naming the field that is not what the API returns."""
    if not isinstance(item, Mapping):
        raise _Bad("expected an object")
    if item.get("kind") not in (None, kind):
        raise _Bad(f"kind: expected {kind!r}, got {item.get('kind')!r}")
    meta = item.get("metadata") or {}
    if not isinstance(meta, Mapping):
        raise _Bad("metadata: expected an object")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise _Bad("metadata.name: missing")
    labels = _str_map(meta, "labels", "metadata")
    annotations = _str_map(meta, "annotations", "metadata")
    spec = item.get("spec") or {}
    status = item.get("status") or {}
    if not isinstance(spec, Mapping) or not isinstance(status, Mapping):
        raise _Bad("spec/status: expected objects")
    return meta, labels, annotations, spec, status


def _node_row(item: Any) -> dict[str, Any]:
    meta, labels, annotations, spec, status = _object_parts(item, "Node")
    name = meta["name"]
    capacity = status.get("capacity") or {}
    if not isinstance(capacity, Mapping):
        raise _Bad("status.capacity: expected a map")
    gpus = _quantity(capacity[GPU_RESOURCE], f"status.capacity.{GPU_RESOURCE}") if GPU_RESOURCE in capacity else None
    mig = {k: _quantity(v, f"status.capacity.{k}") for k, v in capacity.items() if k.startswith(MIG_PREFIX)}
    count_label = _quantity(labels[LABEL_GPU_COUNT], f"metadata.labels.{LABEL_GPU_COUNT}") \
        if LABEL_GPU_COUNT in labels else None
    taints = spec.get("taints") or []
    if not isinstance(taints, list):
        raise _Bad("spec.taints: expected a list")
    provider_id = spec.get("providerID")
    if provider_id is not None and not isinstance(provider_id, str):
        raise _Bad("spec.providerID: expected a string")
    provider, key = provider_key(provider_id)
    _, alt = provider_key(annotations.get(GKE_INSTANCE_ID))
    return {
        "node": name.lower(),
        "provider_id": provider_id,
        "provider": provider,
        "provider_key": key,
        "alt_provider_key": alt,
        "instance_type": next((labels[k] for k in INSTANCE_TYPE_LABELS if k in labels), None),
        "gpu_product": labels.get(LABEL_GPU_PRODUCT),
        "node_pool": next((labels[k] for k in NODE_POOL_LABELS if k in labels), None),
        "gpu_capacity": gpus,
        "gpu_count_label": count_label,
        "mig_devices": sum(mig.values()) if mig else None,
        "mig_capacity": _json(mig),
        "cpu_capacity": _resource(capacity.get("cpu"), "status.capacity.cpu"),
        "memory_capacity": _resource(capacity.get("memory"), "status.capacity.memory"),
        "taints": _json(taints),
        "labels": _json(labels),
        "created_at": _ts(meta.get("creationTimestamp"), "metadata.creationTimestamp"),
    }


def _resource(value: Any, where: str) -> float | None:
    """A Kubernetes quantity (`500m`, `16Gi`, `4`) as a number (cores, bytes), by the kubernetes
    client's own parser; None when absent."""
    if value is None:
        return None
    from kubernetes.utils import parse_quantity

    try:
        return float(parse_quantity(value))
    except (ValueError, TypeError) as e:
        raise _Bad(f"{where}: {str(value)[:40]!r} is not a Kubernetes quantity") from e


def _cpu_memory_requests(spec: Mapping[str, Any]) -> tuple[float | None, float | None]:
    """The pod's effective CPU (cores) and memory (bytes) requests: max(sum over containers, the
    largest init container), a container's limit standing for a missing request."""
    out: list[float | None] = []
    for resource in ("cpu", "memory"):
        total: float | None = None
        init_max: float | None = None
        for kind in ("containers", "initContainers"):
            for i, c in enumerate(spec.get(kind) or []):
                res = (c or {}).get("resources") or {}
                if not isinstance(res, Mapping):
                    continue  # _container_requests reports it
                value = (res.get("requests") or {}).get(resource, (res.get("limits") or {}).get(resource))
                q = _resource(value, f"spec.{kind}[{i}].resources.{resource}")
                if q is None:
                    continue
                if kind == "containers":
                    total = (total or 0.0) + q
                else:
                    init_max = q if init_max is None else max(init_max, q)
        out.append(None if total is None and init_max is None else max(total or 0.0, init_max or 0.0))
    return out[0], out[1]


def _container_requests(spec: Mapping[str, Any]) -> tuple[int, int]:
    gpus = mig = 0
    containers = spec.get("containers") or []
    if not isinstance(containers, list):
        raise _Bad("spec.containers: expected a list")
    for i, c in enumerate(containers):
        res = (c or {}).get("resources") or {}
        if not isinstance(res, Mapping):
            raise _Bad(f"spec.containers[{i}].resources: expected an object")
        wanted = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        for k, v in wanted.items():
            if k == GPU_RESOURCE:
                gpus += _quantity(v, f"spec.containers[{i}].resources.{GPU_RESOURCE}")
            elif k.startswith(MIG_PREFIX):
                mig += _quantity(v, f"spec.containers[{i}].resources.{k}")
    return gpus, mig


def _pod_row(item: Any) -> dict[str, Any]:
    meta, labels, annotations, spec, status = _object_parts(item, "Pod")
    name, namespace = meta["name"], meta.get("namespace")
    if not isinstance(namespace, str) or not namespace:
        raise _Bad("metadata.namespace: missing")
    gpus, mig = _container_requests(spec)
    cpu, memory = _cpu_memory_requests(spec)
    phase = status.get("phase")
    started = _ts(status.get("startTime"), "status.startTime")
    ended = None
    if phase in ("Succeeded", "Failed"):
        for i, cs in enumerate(status.get("containerStatuses") or []):
            term = ((cs or {}).get("state") or {}).get("terminated") or {}
            t = _ts(term.get("finishedAt"), f"status.containerStatuses[{i}].state.terminated.finishedAt")
            if t is not None and (ended is None or t > ended):
                ended = t
        if ended is None:
            raise _Bad(f"status: phase {phase} without a container finishedAt")
    if started is not None and ended is not None and ended < started:
        raise _Bad(f"status: finishedAt {ended.isoformat()} before startTime {started.isoformat()}")
    node = spec.get("nodeName")
    claims = _volume_claims(spec, name)
    return {
        "namespace": namespace,
        "pod": name,
        "uid": meta.get("uid"),
        "node": node.lower() if isinstance(node, str) and node else None,
        "phase": phase,
        "request_id": annotations.get(ANNOTATION_REQUEST_ID) or labels.get(LABEL_REQUEST_ID),
        "team": labels.get(LABEL_TEAM),
        "lane": labels.get(LABEL_LANE),
        "run_id": labels.get(LABEL_RUN_ID),
        "gpu_requests": gpus,
        "mig_requests": mig,
        "cpu_requests": cpu,
        "memory_requests": memory,
        "started_at": started,
        "ended_at": ended,
        "labels": _json(labels),
        "volume_claims": json.dumps(claims) if claims else None,
    }


def _volume_claims(spec: Mapping[str, Any], pod: str) -> list[str]:
    """Names of the PersistentVolumeClaims the pod mounts: `persistentVolumeClaim.claimName`, and
    for a generic ephemeral volume the claim `<pod>-<volume>` Kubernetes creates for it."""
    volumes = spec.get("volumes") or []
    if not isinstance(volumes, list):
        raise _Bad("spec.volumes: expected a list")
    claims: set[str] = set()
    for i, v in enumerate(volumes):
        if not isinstance(v, Mapping):
            raise _Bad(f"spec.volumes[{i}]: expected an object")
        pvc = v.get("persistentVolumeClaim")
        if pvc is not None:
            claim = pvc.get("claimName") if isinstance(pvc, Mapping) else None
            if not isinstance(claim, str) or not claim:
                raise _Bad(f"spec.volumes[{i}].persistentVolumeClaim.claimName: missing")
            claims.add(claim)
        elif v.get("ephemeral") is not None:
            vname = v.get("name")
            if not isinstance(vname, str) or not vname:
                raise _Bad(f"spec.volumes[{i}].name: missing")
            claims.add(f"{pod}-{vname}")
    return sorted(claims)


_IN_TREE = (
    ("awsElasticBlockStore", "volumeID", "kubernetes.io/aws-ebs"),
    ("gcePersistentDisk", "pdName", "kubernetes.io/gce-pd"),
    ("azureDisk", "diskURI", "kubernetes.io/azure-disk"),
)


def _volume_row(item: Any) -> dict[str, Any]:
    meta, labels, _annotations, spec, status = _object_parts(item, "PersistentVolume")
    claim = spec.get("claimRef") or {}
    if not isinstance(claim, Mapping):
        raise _Bad("spec.claimRef: expected an object")
    for field in ("namespace", "name"):
        if claim.get(field) is not None and not isinstance(claim.get(field), str):
            raise _Bad(f"spec.claimRef.{field}: expected a string")
    capacity = spec.get("capacity") or {}
    if not isinstance(capacity, Mapping):
        raise _Bad("spec.capacity: expected a map")
    driver = handle = None
    csi = spec.get("csi")
    if csi is not None:
        if not isinstance(csi, Mapping) or not isinstance(csi.get("volumeHandle"), str) or not csi.get("volumeHandle"):
            raise _Bad("spec.csi.volumeHandle: missing")
        driver, handle = csi.get("driver"), csi["volumeHandle"]
    else:
        for plugin, field, name in _IN_TREE:
            source = spec.get(plugin)
            if source is None:
                continue
            value = source.get(field) if isinstance(source, Mapping) else None
            if not isinstance(value, str) or not value:
                raise _Bad(f"spec.{plugin}.{field}: missing")
            driver, handle = name, value
            break
    provider, key = volume_key(handle)
    return {
        "volume": meta["name"],
        "uid": meta.get("uid"),
        "phase": status.get("phase"),
        "claim_namespace": claim.get("namespace") or None,
        "claim_name": claim.get("name") or None,
        "storage_class": spec.get("storageClassName") if isinstance(spec.get("storageClassName"), str) else None,
        "capacity_bytes": _resource(capacity.get("storage"), "spec.capacity.storage"),
        "driver": driver if isinstance(driver, str) else None,
        "volume_handle": handle,
        "provider": provider,
        "volume_key": key,
        "created_at": _ts(meta.get("creationTimestamp"), "metadata.creationTimestamp"),
        "labels": _json(labels),
    }


def _parse(data: bytes | str | Mapping[str, Any], source: str, kind: str, schema: dict[str, pl.DataType],
           row_fn, snapshot_at: datetime | None) -> FeedBatch:
    items = _items(_load(data, source), kind, source)
    at = snapshot_at or datetime.now(UTC)
    rows, bad = [], []
    for n, item in enumerate(items, start=1):
        try:
            row = row_fn(item)
        except _Bad as e:
            bad.append({"source": source, "source_row": n, "raw": _raw(item), "reason": f"item {n}: {e}"})
            continue
        row.update(snapshot_at=at, source=source, source_row=n)
        rows.append(row)
    return FeedBatch(
        rows=pl.DataFrame(rows, schema=schema, orient="row") if rows else pl.DataFrame(schema=schema),
        quarantine=pl.DataFrame(bad, schema=QUARANTINE_SCHEMA) if bad else pl.DataFrame(schema=QUARANTINE_SCHEMA),
        rows_in=len(items),
    )


def parse_nodes(data: bytes | str | Mapping[str, Any], source: str, snapshot_at: datetime | None = None) -> FeedBatch:
    """`kubectl get nodes -o json` (or a NodeList) -> `raw_nodes` rows; bad items quarantined."""
    return _parse(data, source, "Node", NODE_SCHEMA, _node_row, snapshot_at)


def parse_pods(data: bytes | str | Mapping[str, Any], source: str, snapshot_at: datetime | None = None) -> FeedBatch:
    """`kubectl get pods -A -o json` (or a PodList) -> `raw_pods` rows; bad items quarantined."""
    return _parse(data, source, "Pod", POD_SCHEMA, _pod_row, snapshot_at)


def parse_volumes(data: bytes | str | Mapping[str, Any], source: str, snapshot_at: datetime | None = None) -> FeedBatch:
    """`kubectl get pv -o json` (or a PersistentVolumeList) -> `raw_volumes` rows; bad items quarantined."""
    return _parse(data, source, "PersistentVolume", VOLUME_SCHEMA, _volume_row, snapshot_at)


def read_cluster(kind: str, api: Any = None, page_size: int = 500) -> dict[str, Any]:
    """`NodeList` / `PodList` (all namespaces) / `PersistentVolumeList` from the API, as the JSON
    kubectl prints (`kind`: Node | Pod | PersistentVolume).

    `api`: a `kubernetes.client.CoreV1Api`; by default one from the in-cluster config, else
    `KUBECONFIG` / `~/.kube/config`. Pages through `limit` / `continue`.
    """
    from kubernetes import client

    if api is None:
        from gpu_platform.cluster.client import api_client

        api = client.CoreV1Api(api_client())
    method = {"Node": "list_node", "Pod": "list_pod_for_all_namespaces",
              "PersistentVolume": "list_persistent_volume"}[kind]
    fetch = getattr(api, method)
    items: list[Any] = []
    token = None
    while True:
        kwargs: dict[str, Any] = {"limit": page_size}
        if token:
            kwargs["_continue"] = token
        page = fetch(**kwargs)
        body = api.api_client.sanitize_for_serialization(page)
        items += body.get("items") or []
        token = (body.get("metadata") or {}).get("continue")
        if not token:
            break
    return {"apiVersion": "v1", "kind": f"{kind}List", "items": items}


def local_node_list(hostname: str, devices: list[Any], source_detail: str = "") -> dict[str, Any]:
    """This machine as a one-node `v1` List, for the local executor: `nvidia.com/gpu` capacity =
    the local inventory's GPUs (NVML, else `GPU_PLATFORM_LOCAL_GPUS`), the product label = the
    first device's name, no providerID (on-prem: priced from the price book unless billed)."""
    labels = {"kubernetes.io/hostname": hostname, LABEL_NODE_POOL: "local"}
    if devices:
        labels[LABEL_GPU_PRODUCT] = str(getattr(devices[0], "name", "") or "configured GPU")
    node = {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": hostname, "labels": labels,
                     "annotations": {"gpu-platform.io/inventory": source_detail} if source_detail else {}},
        "spec": {},
        "status": {"capacity": {GPU_RESOURCE: str(len(devices))}},
    }
    return {"apiVersion": "v1", "kind": "List", "items": [node]}
