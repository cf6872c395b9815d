"""A prometheus-client collector that reads the ledger on every scrape.

Each scrape asks the ledger for the events since the last one (one indexed range) and applies
only the requests they touched to the figures it keeps (`DemandCache`): the figures are as fresh
as the ledger, an unchanged ledger costs almost nothing to scrape, and a changed one what changed
(`make bench` measures both). The clock is applied on every scrape (oldest waits grow between
events). Counters (`*_total`) count append-only ledger events, so they never go down.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from gpu_platform.gate.tick import budget_period_start
from gpu_platform.observe.autoscale import plan_pools
from gpu_platform.observe.queueview.demand import DemandCache, percentile
from gpu_platform.observe.queueview.store import read_gate_snapshot
from gpu_platform.policy import Policy
from gpu_platform.requests.ledger import Ledger

P = "gpu_platform_"
METRIC_NAMES = (
    P + "requests_pending",
    P + "requests_admitted",
    P + "requests_running",
    P + "queue_wait_p95_seconds",
    P + "queue_oldest_wait_seconds",
    P + "gpus_in_use",
    P + "gpus_pending",
    P + "lane_budget",
    P + "lane_budget_reserved",
    P + "lane_budget_used_ratio",
    P + "preemptions",
    P + "rejections",
    P + "gate_last_tick_timestamp_seconds",
    P + "autoscale_desired_nodes",
    P + "autoscale_warm_gpus",
)
"""Every family the collector yields (counters without their `_total` suffix)."""


class QueueCollector(Collector):
    """Gauges and counters of the queue, computed from the ledger at scrape time.

    wait_window: the p95 of queue wait covers requests first admitted within this window.
    clock: the time of a scrape (tests pass a fixed one).
    """

    def __init__(
        self,
        ledger: Ledger,
        policy: Policy,
        wait_window: timedelta = timedelta(hours=1),
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ):
        self.ledger = ledger
        self.policy = policy
        self.wait_window = wait_window
        self.clock = clock
        self.demand = DemandCache()

    def describe(self) -> list:
        return []  # collected lazily: no ledger query at registration

    def collect(self) -> Iterator:
        pol = self.policy
        now = self.clock()
        d = self.demand.load(
            self.ledger,
            pol,
            now,
            wait_window=self.wait_window,
            budget_since=budget_period_start(pol.budget_period, now),
        )
        gate = read_gate_snapshot(self.ledger.engine)
        window = int(self.wait_window.total_seconds())

        pending = GaugeMetricFamily(P + "requests_pending", "Requests waiting for admission.", labels=["lane"])
        admitted = GaugeMetricFamily(
            P + "requests_admitted", "Requests holding quota (QuotaReserved and Admitted), running or starting.", labels=["lane"]
        )
        running = GaugeMetricFamily(
            P + "requests_running", "Admitted requests with a live run, as of the gate's last tick.", labels=["lane"]
        )
        p95 = GaugeMetricFamily(
            P + "queue_wait_p95_seconds",
            f"p95 of submission-to-admission wait of requests first admitted in the last {window} s.",
            labels=["lane"],
        )
        oldest = GaugeMetricFamily(
            P + "queue_oldest_wait_seconds", "Seconds the oldest pending request has waited (0: none pending).", labels=["lane"]
        )
        in_use = GaugeMetricFamily(P + "gpus_in_use", "GPUs held by admitted requests.", labels=["lane", "flavor"])
        gpus_pending = GaugeMetricFamily(
            P + "gpus_pending",
            "GPUs requested by pending requests, on the first flavor each may use.",
            labels=["flavor", "node_pool"],
        )
        budget = GaugeMetricFamily(P + "lane_budget", f"Lane budget per {pol.budget_period} ({pol.currency}).", labels=["lane"])
        reserved = GaugeMetricFamily(
            P + "lane_budget_reserved",
            f"max_cost reserved by requests admitted this {pol.budget_period} ({pol.currency}).",
            labels=["lane"],
        )
        ratio = GaugeMetricFamily(P + "lane_budget_used_ratio", "Reserved / budget (0 when the budget is 0).", labels=["lane"])
        preemptions = CounterMetricFamily(P + "preemptions", "Preemptions of this lane's requests.", labels=["lane"])
        rejections = CounterMetricFamily(P + "rejections", "Requests of this lane rejected by admission.", labels=["lane"])
        for name, ld in d.lanes.items():
            pending.add_metric([name], ld.pending)
            admitted.add_metric([name], ld.admitted)
            g = gate.get(name)
            running.add_metric([name], g.running if g is not None else 0)
            p95.add_metric([name], percentile(d.waits_s.get(name, []), 95))
            oldest.add_metric([name], (now - ld.oldest_submitted).total_seconds() if ld.oldest_submitted else 0.0)
            lane = pol.lanes[name]
            flavor_names = lane.flavor_names  # a property that walks the lane's quotas: read once
            for f in flavor_names:
                in_use.add_metric([name, f], ld.gpus_in_use.get(f, 0))
            for f in sorted(ld.gpus_in_use.keys() - set(flavor_names)):
                in_use.add_metric([name, f], ld.gpus_in_use[f])
            budget.add_metric([name], float(lane.budget))
            reserved.add_metric([name], float(ld.budget_reserved))
            ratio.add_metric([name], float(ld.budget_reserved / lane.budget) if lane.budget else 0.0)
            preemptions.add_metric([name], ld.preemptions_total)
            rejections.add_metric([name], ld.rejections_total)
        by_flavor = d.gpus_pending_by_flavor()
        for f in pol.flavors:
            gpus_pending.add_metric([f.name, f.node_pool], by_flavor.get(f.name, 0))
        if by_flavor.get("unknown"):
            gpus_pending.add_metric(["unknown", "unknown"], by_flavor["unknown"])
        yield from (pending, admitted, running, p95, oldest, in_use, gpus_pending, budget, reserved, ratio)
        yield from (preemptions, rejections)
        tick = GaugeMetricFamily(
            P + "gate_last_tick_timestamp_seconds", "Unix time of the admission gate's last tick (0: never)."
        )
        tick.add_metric([], max((g.at.timestamp() for g in gate.values()), default=0.0))
        yield tick
        desired = GaugeMetricFamily(
            P + "autoscale_desired_nodes", "Nodes the pool should have (gpu-platform autoscale plan).", labels=["node_pool"]
        )
        warm = GaugeMetricFamily(P + "autoscale_warm_gpus", "GPUs the policy keeps free in the pool.", labels=["node_pool"])
        for plan in plan_pools(pol, d, now):
            desired.add_metric([plan.node_pool], plan.desired_nodes)
            warm.add_metric([plan.node_pool], sum(plan.warm_gpus.values()))
        yield desired
        yield warm
        yield retrospectives_gauge(pol, self.ledger, now)


def retrospectives_gauge(pol: Policy, ledger: Ledger, now) -> GaugeMetricFamily:
    """Open retrospectives of break-glass grants (used or expired), by team and kind: what
    `gpu-platform approve --due` lists (`approvals.retrospectives`)."""
    from gpu_platform.requests.approvals import retrospectives

    due = GaugeMetricFamily(
        P + "break_glass_retrospectives_due",
        "Break-glass grants used or expired whose retrospective is not recorded done (gpu-platform approve --due).",
        labels=["team", "kind", "why"],
    )
    counts: dict[tuple[str, str, str], int] = {}
    for r in retrospectives(pol, ledger.approved_states(), now):
        key = (r.team, r.kind, r.why)
        counts[key] = counts.get(key, 0) + 1
    for key, n in sorted(counts.items()):
        due.add_metric(list(key), n)
    return due


def registry_for(ledger: Ledger, policy: Policy, warehouse: str | Path | None = None, **kwargs) -> CollectorRegistry:
    """A registry holding the queue collector, the services' (`gpu_platform.observe.metrics.services`)
    and, with a warehouse file, the cost forecast's (`gpu_platform.observe.metrics.forecast`); no
    process or platform collectors."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(QueueCollector(ledger, policy, **kwargs))
    from gpu_platform.observe.metrics.services import ServiceCollector

    # inference services: replicas now and, with a warehouse, cost per 1,000 requests
    registry.register(ServiceCollector(ledger, warehouse))
    if warehouse is not None:
        from gpu_platform.observe.metrics.forecast import ForecastCollector

        registry.register(ForecastCollector(warehouse))
    return registry
