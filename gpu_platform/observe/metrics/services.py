"""`/metrics` gauges of inference services: replicas now (the ledger) and cost per 1,000 requests
(the warehouse, newest day `unit_cost_inference_request` was built for).

The cost figures are `service_rows`, the query `cost report` prints. A scrape never waits for the
warehouse: while a pricing run writes it, or before it exists, the cost families are empty and
`gpu_platform_service_cost_up` is 0. Labels go through the Prometheus client (escaped there).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, time
from pathlib import Path

import duckdb
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from gpu_platform.finops.sqlmodels.report import service_rows
from gpu_platform.finops.warehouse import WarehouseBusy
from gpu_platform.finops.warehouse import connect as warehouse_connect
from gpu_platform.observe.serving.replicas import latest_service_day, service_views
from gpu_platform.requests.ledger import Ledger

P = "gpu_platform_"
SERVICE_METRIC_NAMES = (
    P + "service_replicas",
    P + "service_replicas_min",
    P + "service_replicas_max",
    P + "service_cost_up",
    P + "service_cost_day_timestamp_seconds",
    P + "service_requests",
    P + "service_cost",
    P + "service_idle_cost",
    P + "service_cost_per_1k_requests",
)


class ServiceCollector(Collector):
    """Replicas of each running service (ledger) and the newest day's cost per 1,000 requests (the
    warehouse file `warehouse`, read-only, never waited for; None: no cost families)."""

    def __init__(self, ledger: Ledger, warehouse: str | Path | None = None):
        self.ledger = ledger
        self.warehouse = Path(warehouse) if warehouse is not None else None

    def describe(self) -> list:
        return []  # collected lazily

    def collect(self) -> Iterator:
        labels = ["service", "request_id"]
        replicas = GaugeMetricFamily(P + "service_replicas", "Replicas a running service has now (the ledger's view).",
                                     labels=labels)
        low = GaugeMetricFamily(P + "service_replicas_min", "The service's min replicas.", labels=labels)
        high = GaugeMetricFamily(P + "service_replicas_max", "The service's max replicas.", labels=labels)
        for v in service_views(self.ledger):
            replicas.add_metric([v.service, v.request_id], float(v.current_replicas))
            low.add_metric([v.service, v.request_id], float(v.min_replicas))
            high.add_metric([v.service, v.request_id], float(v.max_replicas))
        yield from (replicas, low, high)
        if self.warehouse is None:
            return
        up = GaugeMetricFamily(P + "service_cost_up", "1 when the warehouse could be read for service costs.")
        stamp = GaugeMetricFamily(P + "service_cost_day_timestamp_seconds",
                                  "Unix time (00:00 UTC) of the day the service cost figures are of.")
        requests = GaugeMetricFamily(P + "service_requests", "Requests the service answered that day.",
                                     labels=["service"])
        cost = GaugeMetricFamily(P + "service_cost", "The service's replica GPU cost that day.",
                                 labels=["service", "currency"])
        idle = GaugeMetricFamily(P + "service_idle_cost", "The part of it the replicas held while not busy.",
                                 labels=["service", "currency"])
        per_1k = GaugeMetricFamily(P + "service_cost_per_1k_requests", "Replica GPU cost per 1,000 requests that day.",
                                   labels=["service", "currency"])
        rows, day = [], None
        if self.warehouse.exists():
            try:
                con = warehouse_connect(self.warehouse, read_only=True, wait_s=0)
            except (WarehouseBusy, duckdb.Error):
                con = None
            if con is not None:
                try:
                    day = latest_service_day(con)
                    rows = service_rows(con, day) if day is not None else []
                finally:
                    con.close()
                up.add_metric([], 1.0)
        if not up.samples:
            up.add_metric([], 0.0)
        if day is not None:
            stamp.add_metric([], datetime.combine(day, time(), UTC).timestamp())
        counted: set[str] = set()
        for r in rows:
            if r["service"] not in counted:
                requests.add_metric([r["service"]], float(r["requests"] or 0))
                counted.add(r["service"])
            if r["currency"] is None:
                continue
            key = [r["service"], r["currency"]]
            if r["allocated_cost"] is not None:
                cost.add_metric(key, float(r["allocated_cost"]))
            if r["idle_cost"] is not None:
                idle.add_metric(key, float(r["idle_cost"]))
            if r["cost_per_1k_requests"] is not None:
                per_1k.add_metric(key, float(r["cost_per_1k_requests"]))
        yield from (up, stamp, requests, cost, idle, per_1k)
