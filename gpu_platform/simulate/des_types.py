"""What the discrete-event loop reports: `JobRun` (what happened to one job), `SimResult` (a run's
jobs, engine calls, usage events and stranded GPU-seconds), the queue order of a workload and its
GPUs.

May import `admission/`, `policy/`, `simulate/scenario.py`, `trace.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpu_platform.admission import Workload
from gpu_platform.policy import GPU
from gpu_platform.simulate.scenario import Scenario
from gpu_platform.simulate.trace import TraceJob


@dataclass(slots=True)
class JobRun:
    """What happened to one job. first_admit/last_admit/end=None: never."""

    job: TraceJob
    wl: Workload | None
    key: tuple = ()
    shape: tuple = ()
    state: str = "future"  # future | pending | running | done | failed | rejected
    reason: str = ""
    saved_s: float = 0.0  # work saved by checkpoints (resumed from)
    start: float = 0.0  # start of the current run
    flavor: str | None = None
    first_admit: float | None = None
    last_admit: float | None = None
    end: float | None = None
    queued_since: float = 0.0
    queued_s: float = 0.0
    preemptions: int = 0
    lost_gpu_s: float = 0.0
    used_gpu_s: float = 0.0
    seq: int = 0
    wait_reason: str = ""  # the engine's message the last time it was shown and still waited
    placement: dict | None = None  # the nodes of its current (or last) run ({node: GPUs})
    idx: int = 0  # its place in the trace's arrival order (ties in the report); -1: not a trace job


@dataclass(slots=True)
class SimResult:
    scenario: Scenario
    runs: list[JobRun]
    start: float
    end: float
    engine_calls: int = 0
    cycles: int = 0
    # (time, lane, change in GPUs held) for plots
    usage_events: list[tuple[float, str, float]] = field(default_factory=list)
    checkpoint_interval_s: float = 0.0
    tick_s: float = 0.0
    # GPU-seconds stranded by fragmentation (see `_Sim._stranded`); None: no node model
    stranded_gpu_s: float | None = None
    # the per-lane aggregates of every job (`outcome.Outcome`); None: `lane_report` folds `runs`
    outcome: Any = None
    # the most jobs the run held at once (queued, running, or finished but not yet folded);
    # with keep_runs=False this bounds its memory, whatever the trace's length
    peak_live: int = 0
    # GPU-seconds a serving lane's lending rule kept idle from waiting heads (see
    # `_Sim._withheld_idle`); None: no serving lane
    withheld_gpu_s: float | None = None


def _queue_key(w: Workload) -> tuple:
    return (-w.priority, w.created_at, w.name)



def gpus_of(w: Workload) -> float:
    return w.requests.get(GPU, 0.0)
