"""`/metrics` gauges of the cost forecast and budget burn, read from the warehouse at scrape time.

The figures are those of the newest day `cost_forecast` was built for (`gpu_platform.finops.forecast`,
the same queries `cost report` prints). A scrape never waits for the warehouse: while a pricing
run writes it (DuckDB lets no other process open the file then), or before it exists, the
families are empty and `gpu_platform_forecast_up` is 0.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, time
from pathlib import Path

import duckdb
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from gpu_platform.finops import forecast
from gpu_platform.finops.warehouse import WarehouseBusy
from gpu_platform.finops.warehouse import connect as warehouse_connect

P = "gpu_platform_"
FORECAST_METRIC_NAMES = (
    P + "forecast_up",
    P + "forecast_day_timestamp_seconds",
    P + "forecast_month_end_cost",
    P + "forecast_month_to_date_cost",
    P + "budget_month",
    P + "budget_burn_fired",
    P + "budget_burn_days_left",
)


class ForecastCollector(Collector):
    """Gauges of the newest forecast in the warehouse file `path` (read-only, never waited for)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def describe(self) -> list:
        return []  # collected lazily: no warehouse read at registration

    def collect(self) -> Iterator:
        up = GaugeMetricFamily(P + "forecast_up", "1 when the warehouse could be read for the forecast.")
        stamp = GaugeMetricFamily(
            P + "forecast_day_timestamp_seconds", "Unix time (00:00 UTC) of the day the forecast was made at.")
        cost = GaugeMetricFamily(P + "forecast_month_end_cost",
                                 "Forecast month-end spend: month to date + pending queue + run rate.",
                                 labels=["team", "lane", "currency"])
        mtd = GaugeMetricFamily(P + "forecast_month_to_date_cost", "Spend so far this month (chargeback).",
                                labels=["team", "lane", "currency"])
        budget = GaugeMetricFamily(P + "budget_month", "Lane or team budget for the month.",
                                   labels=["scope", "subject", "currency"])
        fired = GaugeMetricFamily(P + "budget_burn_fired",
                                  "1 when the month-end forecast is over the budget.",
                                  labels=["scope", "subject", "currency"])
        left = GaugeMetricFamily(P + "budget_burn_days_left",
                                 "Days until spend is projected to pass the budget (0: over already; +Inf: not this month).",
                                 labels=["scope", "subject", "currency"])
        rows, burn, day = [], [], None
        if self.path.exists():
            try:
                con = warehouse_connect(self.path, read_only=True, wait_s=0)
            except (WarehouseBusy, duckdb.Error):
                con = None
            if con is not None:
                try:
                    day = forecast.latest_day(con)
                    if day is not None:
                        rows, burn = forecast.forecast_rows(con, day), forecast.budget_rows(con, day)
                finally:
                    con.close()
                up.add_metric([], 1.0)
        if not up.samples:
            up.add_metric([], 0.0)
        if day is not None:
            stamp.add_metric([], datetime.combine(day, time(), UTC).timestamp())
        for r in rows:
            labels = [r["team"], r["lane"], r["currency"]]
            cost.add_metric(labels, float(r["forecast_month_end_cost"]))
            mtd.add_metric(labels, float(r["month_to_date_cost"]))
        for r in burn:
            labels = [r["scope"], r["subject"], r["currency"]]
            budget.add_metric(labels, float(r["month_budget"]))
            fired.add_metric(labels, 1.0 if r["fired"] else 0.0)
            left.add_metric(labels, forecast.days_left_value(r["days_left"]))
        yield from (up, stamp, cost, mtd, budget, fired, left)
