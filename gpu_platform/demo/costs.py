"""Small cost fixtures: DCGM telemetry, FOCUS billing and finished requests on four nodes.

Used by the ingest and cost-model tests (and the shapes and constants that
`gpu_platform.demo.history`, the demo's month of history, shares). For each of the last `days`
UTC days ending yesterday it can write:

- `$GPU_PLATFORM_HOME/feeds/dcgm/<day>/<host>.parquet`: 15 s history (dcgm-exporter's collect
  interval, which the cost models' integration rule assumes) of `DCGM_FI_PROF_GR_ENGINE_ACTIVE`
  and `DCGM_FI_DEV_GPU_UTIL` for 2 nodes x 8 H100 (on demand), 1 x 8 L4 and 1 x 8 A100 (spot),
  00:00-23:55, with the `namespace`/`pod` labels of the pod holding each GPU (none when idle);
  the L4 node reports GPU_UTIL only (no profiling module), so it exercises the fallback;
- `feeds/dcgm/<day>/scrape-2355.prom`: the last five minutes as Prometheus text with
  timestamps, plus two blank sentinels and one malformed line, so the quarantine has rows;
- `feeds/focus/demo-billing-<first>-<last>.csv`: FOCUS 1.2 rows: one per node and hour
  (ResourceId = the DCGM hostname), daily EBS volumes, the EKS control plane, support, and one
  credit;
- the ledger: about ten finished requests a day (`hist-<day>-<n>`, submitted/admitted/finished
  events in the past, one failed first attempt every few days), placed on those nodes' GPUs,
  with their workload results (accepted/rejected labels, replay hours) in `workload_runs`.
  Their ids and artifact ids carry a `-h<day>` suffix so they never satisfy or feed the live
  demo requests that the admission sensor launches.

"""

from __future__ import annotations

import csv
import json
import uuid
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from gpu_platform.demo.instance import EXAMPLES
from gpu_platform.finops.snapshot import pod_name
from gpu_platform.lineage.graph import SUCCEEDED, LineageStore, WorkloadRun
from gpu_platform.policy import Policy
from gpu_platform.requests.ledger import Ledger
from gpu_platform.requests.model import ID_LIST_FIELDS, JobRequest, validate_request_file

MARKER = ".demo_costs_seeded"
STEP_S = 15
SCRAPE_FROM = timedelta(hours=23, minutes=55)
"""History covers [00:00, 23:55); the text scrape file the last five minutes."""

ENGINE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
UTIL = "DCGM_FI_DEV_GPU_UTIL"


@dataclass(frozen=True)
class Node:
    hostname: str
    model_name: str
    flavor: str
    profiling: bool
    hourly: tuple[str, str, str]
    """(ListCost, ContractedCost = BilledCost = EffectiveCost, PricingCategory) per hour, USD."""
    sku: str


NODES = (
    Node("gpu-h100-a", "NVIDIA H100 80GB HBM3", "h100-ondemand", True, ("98.32", "63.908", "Committed"), "p5.48xlarge"),
    Node("gpu-h100-b", "NVIDIA H100 80GB HBM3", "h100-ondemand", True, ("98.32", "63.908", "Committed"), "p5.48xlarge"),
    Node("gpu-l4-a", "NVIDIA L4", "l4-inference", False, ("13.3504", "13.3504", "Standard"), "g6.48xlarge"),
    Node("gpu-a100-spot-a", "NVIDIA A100-SXM4-40GB", "a100-spot", True, ("32.7726", "9.8318", "Dynamic"), "p4d.24xlarge"),
)


@dataclass(frozen=True)
class Slot:
    """One request of a demo day: example file, node, GPUs, window (hours), busy level, outcome."""

    example: str
    node: str
    gpus: tuple[int, ...]
    start_h: float
    end_h: float
    busy: float
    failed_first_h: float | None = None
    """Hours the failed first attempt ran (the retry starts half an hour after it failed)."""
    results: tuple[tuple[str, Any], ...] = ()


def day_slots(index: int) -> list[Slot]:
    """The requests of demo day `index` (0 = the oldest)."""
    slots = [
        Slot("baseline_rebuild.yaml", "gpu-h100-b", tuple(range(8)), 0, 6, 0.62),
        Slot("candidate_train.yaml", "gpu-h100-a", tuple(range(8)), 1, 11 + index % 3, 0.81,
             failed_first_h=1.5 if index % 3 == 1 else None),
        Slot("release_eval.yaml", "gpu-h100-b", (0, 1, 2, 3), 8, 12, 0.55,
             results=(("replay_hours", 40.0 + 5 * index),)),
        Slot("platform_maintenance.yaml", "gpu-h100-b", (6, 7), 13, 13.5, 0.3),
        Slot("labeler_batch.yaml", "gpu-l4-a", (0, 1), 2, 3.5, 0.45,
             results=(("accepted", 18_000 + 900 * index), ("rejected", 1_200 + 37 * index))),
        Slot("labeler_batch.yaml", "gpu-l4-a", (2, 3), 9, 10.5, 0.48,
             results=(("accepted", 16_500 + 700 * index), ("rejected", 2_100 - 45 * index))),
        Slot("map_semantic_batch.yaml", "gpu-l4-a", (4, 5, 6, 7), 6, 10, 0.66),
        Slot("research_best_effort.yaml", "gpu-a100-spot-a", (0, 1, 2, 3), 0, 9, 0.38),
        Slot("release_chain/evidence_pack.yaml", "gpu-l4-a", (0,), 18, 18.75, 0.2),
    ]
    if index % 2 == 0:
        slots.append(Slot("incident_response.yaml", "gpu-h100-a", (4, 5, 6, 7), 15, 17, 0.72))
    return slots


def gpu_uuid(hostname: str, gpu: int) -> str:
    return f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{hostname}.gpu{gpu}')}"


def demo_days(days: int, today: date | None = None) -> list[date]:
    """The last `days` UTC days, oldest first, ending yesterday."""
    today = today or datetime.now(UTC).date()
    return [today - timedelta(days=n) for n in range(days, 0, -1)]


# ledger --------------------------------------------------------------------------------------


def _suffixed(req: JobRequest, suffix: str) -> dict[str, Any]:
    update: dict[str, Any] = {f: tuple(f"{x}{suffix}" for x in getattr(req, f)) for f in ID_LIST_FIELDS}
    for f in ("candidate_id", "release_packet_id", "incident_id", "experiment_id", "baseline_id"):
        if getattr(req, f):
            update[f] = f"{getattr(req, f)}{suffix}"
    return update


@dataclass(frozen=True)
class Placement:
    """A pod of the demo: namespace, pod, node, GPUs, window, busy level."""

    namespace: str
    pod: str
    node: str
    gpus: tuple[int, ...]
    start: datetime
    end: datetime
    busy: float


def seed_history(ledger: Ledger, lineage: LineageStore, policy: Policy, day: date, index: int) -> list[Placement]:
    """Submit, admit and finish the day's requests in the ledger; return their pods."""
    d0 = datetime(day.year, day.month, day.day, tzinfo=UTC)
    out: list[Placement] = []
    for n, slot in enumerate(day_slots(index)):
        node = next(x for x in NODES if x.hostname == slot.node)
        base = validate_request_file(EXAMPLES / slot.example, policy)
        rid = f"hist-{day:%Y%m%d}-{n:02d}"
        req = base.model_copy(update={**_suffixed(base, f"-h{day:%Y%m%d}"), "request_id": rid,
                                      "gpu_type": node.flavor, "gpu_count": len(slot.gpus)})
        start, end = d0 + timedelta(hours=slot.start_h), d0 + timedelta(hours=slot.end_h)
        ledger.submit(req, at=start - timedelta(minutes=7))
        namespace = policy.team(req.team or "").namespace
        windows = [(start, end, "finished")]
        if slot.failed_first_h is not None:
            failed_at = start + timedelta(hours=slot.failed_first_h)
            windows = [(start, failed_at, "failed"), (failed_at + timedelta(minutes=30), end, "finished")]
        for attempt, (s, e, outcome) in enumerate(windows, start=1):
            details = {"run_key": f"{rid}#{attempt}", "attempt": attempt, "hostname": node.hostname,
                       "gpu_uuids": [gpu_uuid(node.hostname, g) for g in slot.gpus]}
            ledger.record(rid, "admitted", f"QuotaReserved on {node.flavor}", flavor=node.flavor, details=details, at=s)
            ledger.record(rid, outcome, f"demo run {outcome}", flavor=node.flavor, at=e)
            out.append(Placement(namespace, pod_name(rid, attempt), node.hostname, slot.gpus, s, e, slot.busy))
        hours = (end - start).total_seconds() / 3600 * len(slot.gpus)
        lineage.record_run(WorkloadRun.for_request(
            req, req.workload or policy.lane(req.lane or "").default_workload, SUCCEEDED,
            results=dict(slot.results), gpu_hours=round(hours, 6), exit_status=0, recorded_at=end))
    return out


# DCGM ----------------------------------------------------------------------------------------


def _busy_grid(node: Node, placements: list[Placement], d0: datetime, rng: np.random.Generator):
    """(busy fraction, holder index) per 15 s step x GPU; holder -1 = idle."""
    steps = 86400 // STEP_S
    busy = np.zeros((steps, 8))
    holder = np.full((steps, 8), -1, dtype=np.int32)
    for i, p in enumerate(placements):
        if p.node != node.hostname:
            continue
        a = max(0, int((p.start - d0).total_seconds()) // STEP_S)
        b = min(steps, int((p.end - d0).total_seconds()) // STEP_S)
        for g in p.gpus:
            level = np.clip(rng.normal(p.busy, 0.12, b - a), 0.02, 1.0)
            busy[a:b, g] = level
            holder[a:b, g] = i
    return busy, holder


def _labels(node: Node, placements: list[Placement], holder: np.ndarray) -> tuple[pl.Series, pl.Series]:
    names = [p.namespace for p in placements] + [None]
    pods = [p.pod for p in placements] + [None]
    idx = pl.Series(np.where(holder < 0, len(placements), holder).ravel())
    return (pl.Series(names, dtype=pl.String).gather(idx), pl.Series(pods, dtype=pl.String).gather(idx))


def node_frame(node: Node, placements: list[Placement], day: date, rng: np.random.Generator) -> pl.DataFrame:
    """Every 15 s sample of a node-day in the `raw_dcgm_samples` history schema."""
    d0 = datetime(day.year, day.month, day.day, tzinfo=UTC)
    busy, holder = _busy_grid(node, placements, d0, rng)
    steps = busy.shape[0]
    ts = pl.datetime_range(d0, d0 + timedelta(seconds=STEP_S * (steps - 1)), f"{STEP_S}s", eager=True,
                           time_zone="UTC").cast(pl.Datetime("ms", "UTC"))
    namespace, pod = _labels(node, placements, holder)
    base = pl.DataFrame({
        "ts": ts.gather(np.repeat(np.arange(steps), 8)),
        "gpu": pl.Series(np.tile(np.arange(8, dtype=np.int32), steps)),
        "namespace": namespace,
        "pod": pod,
        "busy": busy.ravel(),
    }).with_columns(
        hostname=pl.lit(node.hostname),
        uuid=pl.format("GPU-{}", pl.col("gpu")).replace_strict(
            {f"GPU-{g}": gpu_uuid(node.hostname, g) for g in range(8)}),
        model_name=pl.lit(node.model_name),
        pci_bus_id=pl.format("00000000:{}:00.0", (pl.col("gpu") + 0x18).cast(pl.String)),
        device=pl.format("nvidia{}", pl.col("gpu")),
        gpu_instance_profile=pl.lit(None, dtype=pl.String),
        gpu_instance_id=pl.lit(None, dtype=pl.String),
        container=pl.when(pl.col("pod").is_not_null()).then(pl.lit("main")),
    ).filter(pl.col("ts") < d0 + SCRAPE_FROM)
    util = base.with_columns(metric=pl.lit(UTIL), value=(pl.col("busy") * 100 + 8 * (pl.col("busy") > 0)).clip(0, 100).round(0))
    frames = [util]
    if node.profiling:
        frames.append(base.with_columns(metric=pl.lit(ENGINE), value=pl.col("busy").round(3)))
    cols = ["ts", "metric", "value", "hostname", "gpu", "uuid", "model_name", "pci_bus_id", "device",
            "gpu_instance_profile", "gpu_instance_id", "namespace", "pod", "container"]
    return pl.concat([f.select(cols) for f in frames])


def scrape_text(placements: list[Placement], day: date, rng: np.random.Generator) -> str:
    """The last five minutes of every node as Prometheus text (millisecond timestamps)."""
    d0 = datetime(day.year, day.month, day.day, tzinfo=UTC)
    lines = [f"# HELP {UTIL} GPU utilization (in %).", f"# TYPE {UTIL} gauge",
             f"# HELP {ENGINE} Ratio of time the graphics engine is active.", f"# TYPE {ENGINE} gauge"]
    for node in NODES:
        for k in range(int((timedelta(days=1) - SCRAPE_FROM).total_seconds()) // STEP_S):
            at = d0 + SCRAPE_FROM + timedelta(seconds=STEP_S * k)
            ms = int(at.timestamp() * 1000)
            for g in range(8):
                holder = next((p for p in placements if p.node == node.hostname and g in p.gpus
                               and p.start <= at < p.end), None)
                pod = f'container="main",namespace="{holder.namespace}",pod="{holder.pod}"' if holder else \
                    'container="",namespace="",pod=""'
                labels = (f'gpu="{g}",UUID="{gpu_uuid(node.hostname, g)}",pci_bus_id="00000000:{g + 0x18}:00.0",'
                          f'device="nvidia{g}",modelName="{node.model_name}",Hostname="{node.hostname}",'
                          f'DCGM_FI_DRIVER_VERSION="570.133.20",{pod}')
                b = float(np.clip(rng.normal(holder.busy, 0.1), 0.02, 1.0)) if holder else 0.0
                lines.append(f"{UTIL}{{{labels}}} {round(b * 100)} {ms}")
                if node.profiling:
                    lines.append(f"{ENGINE}{{{labels}}} {b:.3f} {ms}")
    # what a real scrape sometimes carries: blank sentinels and a truncated line
    ms = int((d0 + SCRAPE_FROM).timestamp() * 1000)
    node = NODES[0]
    lines.append(f'{ENGINE}{{gpu="3",UUID="{gpu_uuid(node.hostname, 3)}",Hostname="{node.hostname}"}} '
                 f"9223372036854775794 {ms + 1}")
    lines.append(f'{UTIL}{{gpu="5",UUID="{gpu_uuid(node.hostname, 5)}",Hostname="{node.hostname}"}} '
                 f"140737488355328.0 {ms + 1}")
    lines.append(f'{UTIL}{{gpu="6",UUID="{gpu_uuid(node.hostname, 6)}",Hostname="{node.hostname}" 41 {ms + 1}')
    return "\n".join(lines) + "\n"


def write_dcgm(feeds: Path, day: date, placements: list[Placement], seed: int) -> int:
    """Write the day's history files and scrape file; return bytes written."""
    rng = np.random.default_rng(seed)
    directory = feeds / "dcgm" / day.isoformat()
    directory.mkdir(parents=True, exist_ok=True)
    for node in NODES:
        frame = node_frame(node, placements, day, rng)
        frame.write_parquet(directory / f"{node.hostname}.parquet", compression="zstd", compression_level=9)
    (directory / "scrape-2355.prom").write_text(scrape_text(placements, day, rng))
    return sum(p.stat().st_size for p in directory.iterdir())


# FOCUS ---------------------------------------------------------------------------------------

FOCUS_HEADER = (
    "BilledCost", "BillingAccountId", "BillingAccountName", "BillingAccountType", "BillingCurrency",
    "BillingPeriodEnd", "BillingPeriodStart", "ChargeCategory", "ChargeClass", "ChargeDescription",
    "ChargeFrequency", "ChargePeriodEnd", "ChargePeriodStart", "ConsumedQuantity", "ConsumedUnit",
    "ContractedCost", "ContractedUnitPrice", "EffectiveCost", "InvoiceId", "InvoiceIssuerName", "ListCost",
    "ListUnitPrice", "PricingCategory", "PricingQuantity", "PricingUnit", "ProviderName", "PublisherName",
    "RegionId", "RegionName", "ResourceId", "ResourceName", "ResourceType", "ServiceCategory", "ServiceName",
    "ServiceSubcategory", "SkuId", "SubAccountId", "SubAccountName", "Tags",
)


def _iso(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class BilledNode:
    """One GPU node as a FOCUS export bills it: its instance hours and its volume."""

    resource_id: str
    """FOCUS ResourceId: the cloud's id (an instance id or ARN), or a hostname for on-prem."""
    resource_name: str
    instance_type: str
    hourly: tuple[str, str, str]
    """(ListCost, BilledCost = EffectiveCost, PricingCategory) per hour, USD."""
    flavor: str
    volume_id: str


def focus_bill(days: list[date], nodes: list[BilledNode]) -> list[dict[str, str]]:
    """FOCUS 1.2 rows of `days`: each node's instance hours and volume, the cluster's control plane,
    support, and one credit on the last day; each row in the billing period (month) of its start."""
    rows: list[dict[str, str]] = []
    common = {
        "BillingAccountId": "111122223333", "BillingAccountName": "av-fleet-payer", "BillingAccountType": "Payer",
        "BillingCurrency": "USD", "ChargeClass": "", "InvoiceIssuerName": "Amazon Web Services",
        "ProviderName": "Amazon Web Services", "PublisherName": "Amazon Web Services", "RegionId": "us-west-2",
        "RegionName": "US West (Oregon)", "SubAccountId": "444455556666", "SubAccountName": "gpu-platform-prod",
    }

    def period(start: datetime) -> dict[str, str]:
        ps = datetime(start.year, start.month, 1, tzinfo=UTC)
        pe = (ps + timedelta(days=32)).replace(day=1)
        return {"BillingPeriodStart": _iso(ps), "BillingPeriodEnd": _iso(pe), "InvoiceId": f"INV-{ps:%Y%m}-0042"}

    def row(start: datetime, end: datetime, cost: str, list_cost: str, **kw: str) -> None:
        rows.append({**common, **period(start), "ChargeCategory": "Usage", "ChargeFrequency": "Usage-Based",
                     "ChargePeriodStart": _iso(start), "ChargePeriodEnd": _iso(end), "BilledCost": cost,
                     "EffectiveCost": cost, "ContractedCost": cost, "ListCost": list_cost, **kw})

    for day in days:
        d0 = datetime(day.year, day.month, day.day, tzinfo=UTC)
        for node in nodes:
            list_price, price, category = node.hourly
            tags = json.dumps({"gpu-platform-flavor": node.flavor, "cluster": "av-gpu-west"}, sort_keys=True)
            for h in range(24):
                s = d0 + timedelta(hours=h)
                row(s, s + timedelta(hours=1), price, list_price, ChargeDescription=f"{node.instance_type} instance hour",
                    ConsumedQuantity="1", ConsumedUnit="Hours", PricingQuantity="1", PricingUnit="Hours",
                    ContractedUnitPrice=price, ListUnitPrice=list_price, PricingCategory=category,
                    ResourceId=node.resource_id, ResourceName=node.resource_name, ResourceType="Instance",
                    ServiceCategory="Compute", ServiceName="Amazon Elastic Compute Cloud",
                    ServiceSubcategory="Virtual Machines", SkuId=node.instance_type, Tags=tags)
            row(d0, d0 + timedelta(days=1), "9.60", "9.60", ChargeDescription="gp3 volume 2 TiB, 1 day",
                ConsumedQuantity="2048", ConsumedUnit="GiB-Days", PricingQuantity="2048", PricingUnit="GiB-Days",
                ResourceId=node.volume_id, ResourceType="Volume", ServiceCategory="Storage",
                ServiceName="Amazon Elastic Block Store", ServiceSubcategory="Block Storage", SkuId="gp3", Tags=tags)
        row(d0, d0 + timedelta(days=1), "2.40", "2.40", ChargeDescription="EKS cluster hours",
            ConsumedQuantity="24", ConsumedUnit="Hours", PricingQuantity="24", PricingUnit="Hours",
            ResourceId="arn:aws:eks:us-west-2:444455556666:cluster/av-gpu-west", ResourceType="Cluster",
            ServiceCategory="Compute", ServiceName="Amazon Elastic Kubernetes Service",
            ServiceSubcategory="Containers", SkuId="eks-hours")
        row(d0, d0 + timedelta(days=1), "85.00", "85.00", ChargeDescription="Business support, daily share",
            ServiceCategory="Management and Governance", ServiceName="AWS Support",
            ServiceSubcategory="Support", SkuId="support-business")
    d0 = datetime(days[-1].year, days[-1].month, days[-1].day, tzinfo=UTC)
    rows.append({**common, **period(d0), "ChargeCategory": "Credit", "ChargeFrequency": "One-Time",
                 "ChargePeriodStart": _iso(d0), "ChargePeriodEnd": _iso(d0 + timedelta(days=1)),
                 "BilledCost": "-250.00", "EffectiveCost": "-250.00", "ContractedCost": "-250.00",
                 "ListCost": "-250.00", "ChargeDescription": "AWS Activate credit", "ServiceCategory": "Other",
                 "ServiceName": "AWS Credits", "ServiceSubcategory": "Other (Other)"})
    return rows


def focus_rows(days: list[date]) -> list[dict[str, str]]:
    """FOCUS 1.2 rows of the four fixture nodes (billed under their hostnames, as on-prem)."""
    return focus_bill(days, [BilledNode(n.hostname, n.hostname, n.sku, n.hourly, n.flavor, f"vol-{n.hostname}")
                             for n in NODES])


def write_focus(feeds: Path, days: list[date]) -> Path:
    path = feeds / "focus" / f"demo-billing-{days[0]}-{days[-1]}.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FOCUS_HEADER, restval="")
        writer.writeheader()
        writer.writerows(focus_rows(days))
    return path
