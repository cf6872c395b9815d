"""Policy simulator: replay a job trace through the admission engine (no Dagster).

`load_trace` reads a trace (lanes from a column or a lane map), `SCENARIOS` builds the policy
or a baseline (`fifo`, `fifo-backfill`, `fifo-flavors`,
`fifo-flavors-backfill`, `strict`) as an engine state, `simulate` runs the discrete-event loop
and `lane_report` turns it into per-lane figures; `kueue_scenario` replays Kueue's scheduler
performance generator files. See docs/simulator.md.
May import `admission/`, `policy/`, `requests/`.
"""

from __future__ import annotations

from gpu_platform.simulate.des import JobRun, SimResult, simulate
from gpu_platform.simulate.report import lane_report
from gpu_platform.simulate.scenarios import (
    SCENARIOS,
    Scenario,
    fifo_backfill_scenario,
    fifo_flavors_backfill_scenario,
    fifo_flavors_scenario,
    fifo_scenario,
    policy_scenario,
    strict_scenario,
)
from gpu_platform.simulate.trace import LaneMap, Trace, TraceError, TraceJob, load_lane_map, load_trace

__all__ = [
    "SCENARIOS",
    "JobRun",
    "LaneMap",
    "Scenario",
    "SimResult",
    "Trace",
    "TraceError",
    "TraceJob",
    "fifo_backfill_scenario",
    "fifo_flavors_backfill_scenario",
    "fifo_flavors_scenario",
    "fifo_scenario",
    "lane_report",
    "load_lane_map",
    "load_trace",
    "policy_scenario",
    "simulate",
    "strict_scenario",
]
