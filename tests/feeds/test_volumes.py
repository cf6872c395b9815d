"""PersistentVolumes (`kubectl get pv -o json`) and the claims pods mount: the inventory side of
storage allocation (PVC -> PV -> the cloud volume a FOCUS ResourceId names)."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb

from gpu_platform.finops.feeds.k8s_inventory import (
    parse_pods,
    parse_volumes,
    provider_key,
    read_cluster,
    volume_key,
)

FIX = Path(__file__).parent.parent / "fixtures" / "finops" / "whole-bill"


def pv(name: str, source: dict, claim: tuple[str, str] | None = ("team-a", "data")) -> dict:
    spec = {"capacity": {"storage": "100Gi"}, "storageClassName": "standard", **source}
    if claim:
        spec["claimRef"] = {"kind": "PersistentVolumeClaim", "namespace": claim[0], "name": claim[1]}
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name}, "spec": spec,
            "status": {"phase": "Bound"}}


GCE_CSI = "projects/av-fleet/zones/us-central1-a/disks/pvc-0c1d"
AZURE_DISK = "/subscriptions/0000-1111/resourceGroups/MC_rg_aks_westeurope/providers/Microsoft.Compute/disks/pvc-9abc"


def test_each_providers_volume_id_reduces_to_its_bills_key():
    doc = {"apiVersion": "v1", "kind": "List", "items": [
        pv("ebs-csi", {"csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-0abc1234"}}),
        pv("ebs-tree", {"awsElasticBlockStore": {"volumeID": "aws://us-east-1b/vol-0def5678"}}),
        pv("pd-csi", {"csi": {"driver": "pd.csi.storage.gke.io", "volumeHandle": GCE_CSI}}),
        pv("pd-tree", {"gcePersistentDisk": {"pdName": "gke-disk-1"}}),
        pv("azure-csi", {"csi": {"driver": "disk.csi.azure.com", "volumeHandle": AZURE_DISK}}),
        pv("azure-tree", {"azureDisk": {"diskName": "d", "diskURI": AZURE_DISK.upper()}}),
        pv("nfs", {"nfs": {"server": "10.0.0.2", "path": "/x"}}, claim=None),
    ]}
    batch = parse_volumes(doc, source="pv.json")
    assert (batch.rows_in, batch.accepted, batch.quarantined) == (7, 7, 0)
    keys = {r["volume"]: (r["driver"], r["volume_key"]) for r in batch.rows.iter_rows(named=True)}
    azure = "azure:" + AZURE_DISK.lower()
    assert keys == {
        "ebs-csi": ("ebs.csi.aws.com", "aws:vol-0abc1234"),
        "ebs-tree": ("kubernetes.io/aws-ebs", "aws:vol-0def5678"),
        "pd-csi": ("pd.csi.storage.gke.io", "gce-disk:av-fleet/us-central1-a/pvc-0c1d"),
        "pd-tree": ("kubernetes.io/gce-pd", None),  # a bare disk name: matched by ResourceName
        "azure-csi": ("disk.csi.azure.com", azure),
        "azure-tree": ("kubernetes.io/azure-disk", azure),  # ARM ids differ in case between tools
        "nfs": (None, None),
    }
    # the bill's ResourceId of each volume gives the same key
    assert provider_key("arn:aws:ec2:us-east-1:111122223333:volume/vol-0abc1234")[1] == "aws:vol-0abc1234"
    assert provider_key("//compute.googleapis.com/" + GCE_CSI)[1] == keys["pd-csi"][1]
    assert provider_key(AZURE_DISK)[1] == azure
    # a node's instance id is never taken for a volume
    assert volume_key("i-0abc1234") == (None, None)


def test_bad_volume_items_are_quarantined_with_item_and_field():
    doc = {"apiVersion": "v1", "kind": "PersistentVolumeList", "items": [
        pv("ok", {"csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-1"}}),
        pv("no-handle", {"csi": {"driver": "ebs.csi.aws.com"}}),
        pv("bad-size", {"csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-2"}}) | {},
        pv("bad-claim", {"awsElasticBlockStore": {"volumeID": "vol-3"}}),
    ]}
    doc["items"][2]["spec"]["capacity"]["storage"] = "lots"
    doc["items"][3]["spec"]["claimRef"] = "team-a/data"
    batch = parse_volumes(doc, source="pv.json")
    assert (batch.rows_in, batch.accepted, batch.quarantined) == (4, 1, 3)
    assert batch.quarantine["reason"].to_list() == [
        "item 2: spec.csi.volumeHandle: missing",
        "item 3: spec.capacity.storage: 'lots' is not a Kubernetes quantity",
        "item 4: spec.claimRef: expected an object",
    ]


def test_pods_list_the_claims_they_mount_including_generic_ephemeral_volumes():
    batch = parse_pods((FIX / "kubectl-get-pods.json").read_text(), source="pods.json")
    claims = {r["pod"]: r["volume_claims"] for r in batch.rows.iter_rows(named=True)}
    assert json.loads(claims["dagster-step-1a2b3c4d5e6f-train"]) == ["train-data"]
    assert json.loads(claims["dagster-step-3c4d5e6f7a8b-replay"]) == ["dagster-step-3c4d5e6f7a8b-replay-scratch"]
    assert claims["coredns-7db6d8ff4d-9xk2w"] is None  # projected service-account volumes are no claims
    doc = json.loads((FIX / "kubectl-get-pods.json").read_text())
    doc["items"][0]["spec"]["volumes"][0]["persistentVolumeClaim"] = {}
    bad = parse_pods(doc, source="pods.json")
    assert bad.quarantine["reason"].to_list() == [
        "item 1: spec.volumes[0].persistentVolumeClaim.claimName: missing"]


def test_persistent_volumes_are_read_through_the_api_like_kubectl_prints_them():
    """The kubernetes client's own models and serialiser (no cluster needed)."""
    from kubernetes import client

    doc = json.loads((FIX / "kubectl-get-pv.json").read_text())
    api_client = client.ApiClient()

    class Resp:
        def __init__(self, body):
            self.data = json.dumps(body)

    class FakeCoreV1:
        def __init__(self):
            self.api_client = api_client

        def list_persistent_volume(self, **kwargs):
            body = {"apiVersion": "v1", "kind": "PersistentVolumeList", "metadata": {}, "items": doc["items"]}
            return api_client.deserialize(Resp(body), "V1PersistentVolumeList")

    listed = read_cluster("PersistentVolume", api=FakeCoreV1())
    batch = parse_volumes(listed, source="cluster:volumes")
    from_file = parse_volumes(doc, source="cluster:volumes", snapshot_at=batch.rows["snapshot_at"][0])
    assert batch.rows.drop("snapshot_at").equals(from_file.rows.drop("snapshot_at"))


def test_saved_volume_snapshots_load_under_their_day(tmp_path):
    from datetime import date

    from gpu_platform.finops.feeds.ingest import load_inventory_day
    from gpu_platform.finops.feeds.load import ensure_tables

    day = date(2026, 11, 28)
    folder = tmp_path / "volumes" / day.isoformat()
    folder.mkdir(parents=True)
    (folder / "pv.json").write_bytes((FIX / "kubectl-get-pv.json").read_bytes())
    (folder / "broken.json").write_text('{"kind": "List", "items": [')
    con = duckdb.connect()
    ensure_tables(con)
    report = load_inventory_day(con, tmp_path, day, "volumes")
    assert (report.rows_in, report.accepted, report.files_in, len(report.quarantined_files)) == (4, 4, 2, 1)
    rows = con.execute("select volume, volume_key, day from raw_volumes order by volume").fetchall()
    assert [k for _, k, _ in rows].count(None) == 1 and {d for _, _, d in rows} == {day}
