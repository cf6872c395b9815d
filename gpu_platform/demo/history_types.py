"""What the demo history is made of: each admitted attempt (`Segment`: when, on which flavor and
nodes, how it ended), each job (`HistJob`) and the whole story (`History`: days, fleet, jobs, the
jobs never admitted, release-chain parents).

May import `lineage/graph.py`, `requests/model.py`, `demo/fleet.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date

from gpu_platform.demo.fleet import FleetNode
from gpu_platform.lineage.graph import (
    Parent,
)
from gpu_platform.requests.model import JobRequest


@dataclass
class Segment:
    """One admitted attempt: [start, end) on `flavor`, and how it ended."""

    attempt: int
    start: float
    end: float
    flavor: str
    outcome: str  # finished | failed | preempted | oom
    nodes: dict[str, int] = field(default_factory=dict)
    """The engine's placement: its node name (`<flavor>/node-<i>`) -> GPUs, one pod per node."""
    placement: list[tuple[str, tuple[int, ...]]] = field(default_factory=list)
    """(fleet node, GPU indices) per pod, from `nodes`."""


@dataclass
class HistJob:
    request: JobRequest
    submit: float
    segments: list[Segment]
    waited_s: float

    @property
    def request_id(self) -> str:
        return self.request.request_id or ""


@dataclass
class History:
    days: list[date]
    nodes: list[FleetNode]
    jobs: list[HistJob]
    never_admitted: list[HistJob]
    engine_calls: int
    parents: dict[str, list[Parent]] = field(default_factory=dict)
    """Release-chain requests -> the upstream requests whose outputs they read (by artifact id)."""
