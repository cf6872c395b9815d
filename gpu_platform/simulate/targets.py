"""The policy's lane targets (`lanes.<lane>.targets`) judged on a simulation: met, missed, or not
judged (and why), per lane and target.

- `wait_p95`: the lane's p95 wait (policy scenario) <= the target;
- `wait_p95_vs_fifo`: <= the share times the same lane's p95 wait under `fifo-backfill` (only
  when that baseline ran: `--compare` must name it);
- `max_lost_gpu_hours_share`: GPU-hours lost to preemption / GPU-hours held <= the share.
A lane none of whose jobs was admitted cannot be judged on waits (it is named, not passed).
"""

from __future__ import annotations

from typing import Any

from gpu_platform.policy import Policy

BASELINE = "fifo-backfill"


def _row(target: str, limit: float | None, value: float | None, unit: str, why: str | None = None) -> dict[str, Any]:
    if why is None and (limit is None or value is None):
        why = "no value"
    met = None if why is not None else value <= limit + 1e-9  # type: ignore[operator]
    return {"target": target, "limit": limit, "value": value, "unit": unit, "met": met, "not_judged": why}


def judge(policy: Policy, scenarios: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """`{"lanes": {lane: [row, ...]}, "met": n, "missed": n, "not_judged": n}` for the policy
    scenario of a `simulate` document's `scenarios`."""
    lanes_out: dict[str, list[dict[str, Any]]] = {}
    report = scenarios.get("policy")
    if report is None:
        return {"lanes": {}, "met": 0, "missed": 0, "not_judged": 0}
    base = scenarios.get(BASELINE)
    for lane in policy.lanes_by_priority():
        t = lane.targets
        if t is None:
            continue
        fig = report["lanes"].get(lane.name)
        rows: list[dict[str, Any]] = []
        if fig is None:
            for name in ("wait_p95", "wait_p95_vs_fifo", "max_lost_gpu_hours_share"):
                if getattr(t, name) is not None:
                    rows.append(_row(name, None, None, "", "the trace has no job of this lane"))
            lanes_out[lane.name] = rows
            continue
        p95 = fig["wait_s"]["p95"]
        no_wait = "no job of the lane was admitted" if p95 is None else None
        if t.wait_p95 is not None:
            rows.append(_row("wait_p95", t.wait_p95.total_seconds(), p95, "s", no_wait))
        if t.wait_p95_vs_fifo is not None:
            if base is None:
                rows.append(_row("wait_p95_vs_fifo", None, p95, "s", f"needs the {BASELINE} baseline (--compare {BASELINE})"))
            else:
                b = (base["lanes"].get(lane.name) or {}).get("wait_s", {}).get("p95")
                why = no_wait or (f"no job of the lane was admitted under {BASELINE}" if b is None else None)
                rows.append(_row("wait_p95_vs_fifo", None if b is None else t.wait_p95_vs_fifo * b, p95, "s", why))
        if t.max_lost_gpu_hours_share is not None:
            held = fig["gpu_hours"]
            share = fig["gpu_hours_lost_to_preemption"] / held if held > 0 else None
            rows.append(_row("max_lost_gpu_hours_share", t.max_lost_gpu_hours_share, share, "share",
                             None if held > 0 else "the lane held no GPU-hours"))
        lanes_out[lane.name] = rows
    flat = [r for rows in lanes_out.values() for r in rows]
    return {
        "lanes": lanes_out,
        "met": sum(1 for r in flat if r["met"] is True),
        "missed": sum(1 for r in flat if r["met"] is False),
        "not_judged": sum(1 for r in flat if r["met"] is None),
    }


def shown(row: dict[str, Any]) -> tuple[str, str, str]:
    """(limit, value, verdict) as text for tables."""

    def fmt(v: float | None) -> str:
        if v is None:
            return "-"
        if row["unit"] == "s":
            return f"{v:,.0f} s" if v < 3600 else f"{v / 3600:,.2f} h"
        return f"{100 * v:.2f}%"

    verdict = "met" if row["met"] is True else "MISSED" if row["met"] is False else f"not judged: {row['not_judged']}"
    return fmt(row["limit"]), fmt(row["value"]), verdict
