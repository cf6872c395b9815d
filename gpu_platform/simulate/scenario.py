"""The simulator's unit of work: a `Scenario` (an engine state without workloads and how a trace
job becomes a pending workload) and `pods_for` (how a job splits into pods on nodes).

Below `des`, `baselines` and `scenarios`, which all use it; imports `admission/`, `policy/` and
`simulate.trace` only, so no module of the simulator imports another back.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gpu_platform.admission import ClusterState, Workload
from gpu_platform.policy import GPU
from gpu_platform.simulate.trace import TraceJob


@dataclass(frozen=True, slots=True)
class Scenario:
    """An engine state without workloads, and how a job becomes a pending workload.

    workload returns None when the job has no cluster queue here (e.g. an unknown lane).
    """

    name: str
    description: str
    base: ClusterState
    workload: Callable[[TraceJob], Workload | None]
    fast: Callable[..., Any] | None = None
    """A replay without the engine (`baselines.run_fifo`): called as fast(scenario, jobs, tick)."""
    node_gpus: Mapping[str, float] | None = None
    """GPUs per node of each flavor placed on nodes (`with_nodes`; base.nodes holds the nodes);
    None: quota only."""
    gang_split: str = "smallest"
    """How a job over one node splits into pods (`split_node_size`): by the smallest or the
    largest node size among the flavors it may use; the baselines split it the same way."""
    boosts: Mapping[str, tuple[float, int, int]] | None = None
    """Aging per cluster queue: (step seconds, boost per step, cap): a workload still waiting k
    steps after its submission has min(k x boost, cap) added to its priority (Kueue's
    `kueue.x-k8s.io/priority-boost`, KEP-7990, which an external controller sets); None: no aging."""

    @property
    def capacity(self) -> float:
        return sum((f.capacity or {}).get(GPU, 0.0) for f in self.base.flavors)

    def nominal(self) -> dict[str, float]:
        """GPU nominal quota per cluster queue (all flavors)."""
        return {
            c.name: sum(q.nominal for q in c.quotas if q.resource == GPU) for c in self.base.cluster_queues
        }


GANG_SPLITS = ("smallest", "largest")


def split_node_size(sizes, rule: str = "smallest") -> float | None:
    """The node size a trace job's gang is split by (`pods_for`), from the node sizes of the
    flavors it may use: the smallest (its pods then fit a node of any of them) or the largest (a
    gang of whole nodes of the largest shape, as jobs are written for 8-GPU nodes; smaller nodes
    then hold none of its pods). None: none of them has nodes."""
    if rule not in GANG_SPLITS:
        raise ValueError(f"gang split must be one of {', '.join(GANG_SPLITS)}, got {rule!r}")
    sizes = list(sizes)
    if not sizes:
        return None
    return max(sizes) if rule == "largest" else min(sizes)


def pods_for(gpus: float, node: float | None) -> int:
    """Pods of a job of `gpus` GPUs on nodes of `node` GPUs: 1 up to one node, else ceil(gpus /
    node), each asking for gpus / pods (whole nodes when gpus is a multiple of the node size)."""
    if node is None or node <= 0 or gpus <= node + 1e-9:
        return 1
    return math.ceil(gpus / node - 1e-9)
