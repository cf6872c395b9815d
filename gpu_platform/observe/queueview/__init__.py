"""The queue as people and dashboards read it: per-lane snapshots (the `gpu_queue` asset), the
fast demand aggregate behind `/metrics` and `autoscale plan`, queue rows with estimated starts
(`gpu-platform queue`) and one request's decision history (`gpu-platform explain`).

Pure Python over the ledger and the admission engine's results; nothing here imports Dagster.
"""

from __future__ import annotations

from gpu_platform.observe.queueview.demand import Demand, LaneDemand, demand_flavor, load_demand
from gpu_platform.observe.queueview.explain import Explanation, Step, explain, rule_for
from gpu_platform.observe.queueview.rows import QueueRow, dry_run, queue_rows
from gpu_platform.observe.queueview.snapshot import (
    LaneSnapshot,
    WaitingRow,
    eta_text,
    flavor_rows,
    lane_row,
    lane_snapshots,
    lane_summary,
    plotted_metadata,
    queue_digest,
    waiting_request_text,
)
from gpu_platform.observe.queueview.store import read_gate_snapshot, write_gate_snapshot

__all__ = [
    "Demand",
    "Explanation",
    "LaneDemand",
    "LaneSnapshot",
    "QueueRow",
    "Step",
    "WaitingRow",
    "demand_flavor",
    "dry_run",
    "eta_text",
    "explain",
    "flavor_rows",
    "lane_snapshots",
    "load_demand",
    "lane_row",
    "lane_summary",
    "plotted_metadata",
    "queue_digest",
    "queue_rows",
    "read_gate_snapshot",
    "rule_for",
    "waiting_request_text",
    "write_gate_snapshot",
]
