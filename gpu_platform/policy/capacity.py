"""The policy's `capacity_signals:` block: the threshold of every capacity signal.

Each field is the threshold of one signal of the `capacity_signals` mart (docs/scorecards.md
lists source, formula and action of each). The mart receives them as bound vars
(`gpu_platform.observe.scorecards.model_vars`), never as SQL text. Every field has a default, so a
policy without the block gets the defaults below.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class CapacitySignals(BaseModel):
    """Thresholds of the capacity signals (a signal fires when its value passes the threshold).

    queue_wait_ratio: a lane's p95 queue wait / its median run time ("queue wait > training time").
    pool_utilization_min: a node pool's busy / capacity GPU-hours below this fires.
    oom_retry_rate_max: OOM-failed attempts that were retried / attempts, per lane.
    release_delay_s: a release_lane wait while research_lane held GPUs, longer than this.
    incident_wait_s: an incident_lane wait longer than this.
    spot_lost_share_max: GPU-hours lost on a spot flavor (failed + preempted attempts) / its GPU-hours.
    site_spend_share_max: one site's share of the day's allocated cost (per currency).
    image_pull_share_max: image pull + setup time / run time, per image.
    slice_memory_gib / slice_engine_active_max: a whole-GPU pod whose peak framebuffer use
    (DCGM_FI_DEV_FB_USED) stays within slice_memory_gib and whose mean engine activity stays
    within slice_engine_active_max would fit a MIG slice (right-sizing).
    fragmented_gpu_hours_max: GPU-hours of a flavor free but on no whole nodes while a multi-node
    request waited for whole nodes, per day, above this fires (8: one node-hour of 8 GPUs).
    min_attempts: rate signals need at least this many attempts (or runs) on the day.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    queue_wait_ratio: float = Field(default=1.0, gt=0)
    pool_utilization_min: float = Field(default=0.30, ge=0, le=1)
    oom_retry_rate_max: float = Field(default=0.10, ge=0, le=1)
    release_delay_s: float = Field(default=900.0, ge=0)
    incident_wait_s: float = Field(default=300.0, ge=0)
    spot_lost_share_max: float = Field(default=0.20, ge=0, le=1)
    site_spend_share_max: float = Field(default=0.60, gt=0, le=1)
    image_pull_share_max: float = Field(default=0.25, ge=0, le=1)
    slice_memory_gib: float = Field(default=10.0, gt=0)
    slice_engine_active_max: float = Field(default=0.15, ge=0, le=1)
    fragmented_gpu_hours_max: float = Field(default=8.0, ge=0)
    min_attempts: int = Field(default=1, ge=1)
    release_lane: str = "release_eval"
    research_lane: str = "research_best_effort"
    incident_lane: str = "incident_response"


def capacity_signal_errors(raw: dict) -> list[str]:
    """The block's lane names must name lanes of the policy."""
    block = raw.get("capacity_signals")
    lanes = raw.get("lanes")
    if not isinstance(block, dict) or not isinstance(lanes, dict):
        return []
    return [
        f"capacity_signals.{key}: unknown lane {block[key]!r} (one of: {', '.join(sorted(map(str, lanes)))})"
        for key in ("release_lane", "research_lane", "incident_lane")
        if isinstance(block.get(key), str) and block[key] not in lanes
    ]
