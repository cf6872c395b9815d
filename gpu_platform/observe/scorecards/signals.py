"""The capacity signals: their catalogue, the vars the SQL marts bind, and reading what fired."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Any

from gpu_platform.policy.scale import (
    SIGNAL_ROWS,
    enabled_signals,
    error_lanes,
    error_signals,
    scorecard_rows,
)


@dataclass(frozen=True)
class Signal:
    """One row of the capacity-planning table. `threshold`: the `capacity_signals:` key."""

    name: str
    subject: str
    threshold: str
    fires_when: str


SIGNALS: tuple[Signal, ...] = (
    Signal("queue_wait_exceeds_training_time", "lane", "queue_wait_ratio",
           "lane p95 queue wait / median run time of its attempts > threshold"),
    Signal("pool_utilization_low", "node_pool", "pool_utilization_min",
           "node pool busy GPU-hours / capacity GPU-hours < threshold"),
    Signal("oom_retries_high", "lane", "oom_retry_rate_max",
           "OOM-failed attempts that were retried / attempts > threshold"),
    Signal("release_replay_delayed_by_research", "lane", "release_delay_s",
           "longest release-lane wait while the research lane held GPUs (s) > threshold"),
    Signal("incident_waiting_for_capacity", "lane", "incident_wait_s",
           "longest incident-lane wait for admission (s) > threshold"),
    Signal("spot_failures_erasing_work", "flavor", "spot_lost_share_max",
           "GPU-hours lost on a spot flavor (failed + preempted attempts) / its GPU-hours > threshold"),
    Signal("site_dominating_spend", "site", "site_spend_share_max",
           "one site's share of the day's allocated cost > threshold"),
    Signal("image_pull_dominating_runtime", "image", "image_pull_share_max",
           "image pull + setup seconds / run seconds of an image > threshold"),
    Signal("lane_wait_target_missed", "lane", "lanes.<lane>.targets.wait_p95",
           "lane p95 queue wait of the day's admissions (s) > the lane's own target (only lanes with one)"),
    Signal("whole_gpu_fits_slice", "request", "slice_memory_gib",
           "a whole-GPU request's peak FB_USED (GiB) <= threshold and mean engine activity <= slice_engine_active_max"),
    Signal("gang_blocked_by_fragmentation", "flavor", "fragmented_gpu_hours_max",
           "GPU-hours of a flavor free but on no whole nodes while a multi-node request waited for whole nodes > threshold"),
    Signal("cost_day_over_unreconciled_threshold", "currency", "unreconciled_threshold (cost build var)",
           "a built day's unreconciled money (chargeback's (unreconciled) row) > unreconciled_threshold x the day's cost"),
)
assert {s.name for s in SIGNALS} == set(SIGNAL_ROWS), "every signal has its scorecard row in policy/scale.py"


def flavor_catalog(policy: Any) -> list[str]:
    """`name|node_pool|sharing mode|spot` per flavor: the policy facts the marts need, as one
    bound list (DuckDB splits it), so no policy value is ever formatted into SQL."""
    return [f"{f.name}|{f.node_pool}|{f.sharing.mode}|{'true' if f.spot else 'false'}" for f in policy.flavors]


def team_namespaces(policy: Any) -> list[str]:
    """`team|namespace|cost_center|site` per team (`teams.<team>.namespace`; site '' when unset):
    who owns each namespace, so the cost models charge a namespace's pods without a request id
    (bypass) to its team. One bound list, like :func:`flavor_catalog`."""
    out = [f"{name}|{t.namespace}|{t.cost_center}|{t.site or ''}" for name, t in sorted(policy.teams.items())]
    # a namespace the team moved out of (an alias that is no namespace of its own) is still its
    out += [f"{name}|{a}|{t.cost_center}|{t.site or ''}" for name, t in sorted(policy.teams.items())
            for a in dict.fromkeys(getattr(t, "aliases", ())) if a != t.namespace]
    return out


def team_aliases(policy: Any) -> list[str]:
    """`alias|team` per alias of a team (`teams.<team>.aliases`: a former name): the cost models
    charge a request recorded under the alias to the team (bound as one list)."""
    return [f"{a}|{name}" for name, t in sorted(policy.teams.items()) for a in dict.fromkeys(getattr(t, "aliases", ()))]


def lane_wait_targets(policy: Any) -> list[str]:
    """`lane|seconds` per lane with a `targets.wait_p95` (bound as one list, never formatted into SQL)."""
    return [
        f"{lane.name}|{lane.targets.wait_p95.total_seconds():g}"
        for lane in policy.lanes_by_priority()
        if lane.targets is not None and lane.targets.wait_p95 is not None
    ]


def budgets(policy: Any) -> list[str]:
    """`scope|subject|amount` per lane budget (`lanes.<lane>.budget`) and team budget
    (`teams.<team>.budget`, when set), bound as one list for the budget-burn model."""
    out = [f"lane|{lane.name}|{lane.budget}" for lane in policy.lanes_by_priority()]
    out += [f"team|{name}|{t.budget}" for name, t in sorted(policy.teams.items()) if t.budget is not None]
    return out


def model_vars(policy: Any) -> dict[str, Any]:
    """The bound vars of the scorecard and capacity-signal models, from the policy: every
    threshold as `cs_<key>`, the scale's rows / signals / ERROR lanes and signals, the flavors, and
    which team owns which namespace (`team_namespaces`), and the budgets the cost forecast judges
    (`budgets`, `budget_period`, `budget_currency`)."""
    cs = policy.capacity_signals
    out: dict[str, Any] = {f"cs_{k}": getattr(cs, k) for k in type(cs).model_fields}  # every threshold and lane
    out.update(
        scorecard_rows=list(scorecard_rows(policy.scale)),
        enabled_signals=list(enabled_signals(policy.scale)),
        error_lanes=list(error_lanes(policy.scale, policy)),
        error_signals=list(error_signals(policy.scale)),
        flavor_catalog=flavor_catalog(policy),
        team_namespaces=team_namespaces(policy),
        team_aliases=team_aliases(policy),
        lane_wait_targets=lane_wait_targets(policy),
        budgets=budgets(policy),
        budget_period=policy.budget_period,
        budget_currency=policy.currency,
    )
    return out


@dataclass(frozen=True)
class FiredSignal:
    """One row of `capacity_signals` (fired or not)."""

    day: date
    signal: str
    subject: str
    lane: str | None
    value: float | None
    threshold: float | None
    fired: bool
    severity: str
    action: str


_COLUMNS = "day, signal, subject, lane, value, threshold, fired, severity, action"


def signal_rows(con: Any, day_from: str | date, day_to: str | date, only_fired: bool = False) -> list[FiredSignal]:
    """Rows of `capacity_signals` for the days (inclusive), ERROR first, then by signal and subject."""
    sql = (f"select {_COLUMNS} from capacity_signals where day between $f and $t"
           + (" and fired" if only_fired else "")
           + " order by day, severity = 'WARN', signal, subject")
    return [FiredSignal(*row) for row in con.execute(sql, {"f": day_from, "t": day_to}).fetchall()]


def fired(con: Any, day_from: str | date, day_to: str | date) -> list[FiredSignal]:
    """The signals that fired on the days (inclusive)."""
    return signal_rows(con, day_from, day_to, only_fired=True)
