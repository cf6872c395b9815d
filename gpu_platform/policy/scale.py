"""The scale ladder S0..S5: what the policy's `scale:` turns on.

One table (`LEVELS`) says per level which request metadata the platform expects, which
scorecard rows the scorecard marts compute, and which capacity signals are ERROR rather than
WARN. Each level includes everything below it. Request validation reads it
(`scale_metadata_problems`): from S4 a request missing a field of its level is refused
(fails closed) even where the policy's own `common_required_fields` leave the field out; below
S4 the level's list is what `policy check` shows as expected and what the allocation-coverage
scorecard measures, and nothing is refused for it. The policy's `common_required_fields` and
lanes' `required_fields` are enforced at every level.

The shipped default policy is S4: every field of the ladder is in its `common_required_fields`,
it has evidence lanes (release_eval, incident_response) behind a Kubernetes cluster with Kueue,
and its release gate needs reproducible, attributed jobs. S5 adds no metadata; it makes the
fleet-wide signals (spot losses, one site's share of spend) ERROR and raises every evidence
lane's signals to ERROR.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Scale = Literal["S0", "S1", "S2", "S3", "S4", "S5"]
SCALES: tuple[str, ...] = Scale.__args__
DEFAULT_SCALE: Scale = "S4"
FAIL_CLOSED_FROM = 4
"""From this level a request missing its level's metadata is refused."""

SCORECARD_ROWS: tuple[str, ...] = (
    "queue_wait",
    "utilization",
    "failure_retry",
    "allocation_coverage",
    "preemption_impact",
    "oom_retries",
    "cache_efficiency",
    "sharing_utilization",
    "bypass_rate",
)
"""Every scorecard row; docs/scorecards.md describes each (source, formula)."""

SIGNAL_ROWS: dict[str, str] = {
    "queue_wait_exceeds_training_time": "queue_wait",
    "pool_utilization_low": "utilization",
    "oom_retries_high": "oom_retries",
    "release_replay_delayed_by_research": "queue_wait",
    "incident_waiting_for_capacity": "queue_wait",
    "spot_failures_erasing_work": "preemption_impact",
    "site_dominating_spend": "allocation_coverage",
    "image_pull_dominating_runtime": "cache_efficiency",
    "whole_gpu_fits_slice": "sharing_utilization",
    "lane_wait_target_missed": "queue_wait",
    "gang_blocked_by_fragmentation": "queue_wait",
    "cost_day_over_unreconciled_threshold": "allocation_coverage",
}
"""Each capacity signal and the scorecard row it is computed from: a signal is computed at a
scale only when its row is."""


@dataclass(frozen=True)
class Level:
    """One rung of the ladder. Tuples list what this level adds to the one below."""

    name: str
    title: str
    adds_metadata: tuple[str, ...]
    adds_rows: tuple[str, ...]
    error_for: str
    """Which signals are ERROR, in words (`error_lanes` / `error_signals` compute it)."""


LEVELS: tuple[Level, ...] = (
    Level("S0", "one machine, one team", ("owner", "team", "lane", "gpu_type", "gpu_count"),
          ("queue_wait", "utilization"), "none (every signal WARN)"),
    Level("S1", "a shared pool, several teams", ("cost_center", "max_cost", "expected_duration", "timeout"),
          ("failure_retry", "allocation_coverage"), "none (every signal WARN)"),
    Level("S2", "lanes with quotas and preemption", ("preemption_policy", "retention_policy"),
          ("preemption_impact", "oom_retries"), "none (every signal WARN)"),
    Level("S3", "a Kubernetes cluster behind Kueue", ("site", "data_access_scope", "output_artifact_ids"),
          ("cache_efficiency", "sharing_utilization", "bypass_rate"),
          "signals of the release and incident lanes"),
    Level("S4", "release evidence: reproducible, attributed jobs (fails closed)", ("source_commit", "container_digest"),
          (), "signals of the release and incident lanes"),
    Level("S5", "a multi-site fleet", (), (),
          "signals of every evidence lane, plus spot_failures_erasing_work and site_dominating_spend"),
)

_INDEX = {lv.name: i for i, lv in enumerate(LEVELS)}


def level_index(scale: str) -> int:
    return _INDEX[scale]


def required_metadata(scale: str) -> tuple[str, ...]:
    """Request fields expected at `scale` (cumulative)."""
    return tuple(f for lv in LEVELS[: level_index(scale) + 1] for f in lv.adds_metadata)


def fails_closed(scale: str) -> bool:
    return level_index(scale) >= FAIL_CLOSED_FROM


def scorecard_rows(scale: str) -> tuple[str, ...]:
    """Scorecard rows computed at `scale` (cumulative)."""
    return tuple(r for lv in LEVELS[: level_index(scale) + 1] for r in lv.adds_rows)


def enabled_signals(scale: str) -> tuple[str, ...]:
    rows = set(scorecard_rows(scale))
    return tuple(s for s, row in SIGNAL_ROWS.items() if row in rows)


def error_lanes(scale: str, policy: Any) -> tuple[str, ...]:
    """Lanes whose signals are ERROR at `scale`: none below S3; the policy's release and incident
    lanes (`capacity_signals.release_lane` / `incident_lane`) from S3; every evidence lane at S5."""
    i = level_index(scale)
    if i < 3:
        return ()
    cs = policy.capacity_signals
    lanes = [cs.release_lane, cs.incident_lane]
    if i >= 5:
        lanes += [lane.name for lane in policy.lanes_by_priority() if lane.evidence]
    return tuple(dict.fromkeys(lanes))


def error_signals(scale: str) -> tuple[str, ...]:
    """Signals that are ERROR whatever their subject."""
    return ("spot_failures_erasing_work", "site_dominating_spend") if level_index(scale) >= 5 else ()


def scale_metadata_problems(raw: dict[str, Any], policy: Any, already: set[str]) -> list[str]:
    """Fields the scale requires that `raw` lacks, one problem each naming field and scale; empty
    below S4 (where the list is advisory). `already`: fields reported missing or bad already."""
    scale = policy.scale
    if not fails_closed(scale):
        return []
    out = []
    for name in required_metadata(scale):
        value = raw.get(name)
        if name in already:
            continue
        if value is None or value == "" or (isinstance(value, list | tuple | dict) and len(value) == 0):
            out.append(f"{name}: required at scale {scale} (policy `scale`; missing metadata fails closed from "
                       f"S{FAIL_CLOSED_FROM})")
    return out


def describe(scale: str, policy: Any) -> list[tuple[str, str]]:
    """(what, value) lines `policy check` prints for the chosen scale."""
    lv = LEVELS[level_index(scale)]
    rows = scorecard_rows(scale)
    signals = enabled_signals(scale)
    lanes = error_lanes(scale, policy)
    errs = error_signals(scale)
    return [
        ("scale", f"{scale}: {lv.title}"),
        ("metadata " + ("required (fails closed)" if fails_closed(scale) else "expected (not enforced below S4)"),
         ", ".join(required_metadata(scale))),
        ("scorecard rows", ", ".join(rows)),
        ("scorecard rows off", ", ".join(r for r in SCORECARD_ROWS if r not in rows) or "none"),
        ("capacity signals", ", ".join(signals)),
        ("ERROR signals", (f"lanes {', '.join(lanes)}" if lanes else "none")
         + (f"; always: {', '.join(errs)}" if errs else "")),
    ]
