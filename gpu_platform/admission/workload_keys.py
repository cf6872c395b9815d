"""What the admission engine reads off a workload: Kueue's queue order, the GPUs it counts
against a team limit, its scheduling-equivalence key, the flavors it may run on, and the text of
a quantity in a reason. Pure functions and two small caches.

May import `admission/model.py` and `devices/` only.
"""

from __future__ import annotations

import operator

from gpu_platform.admission.model import Workload
from gpu_platform.devices.sharing import is_gpu_resource

EPS = 1e-9
"""Tolerance of every quota and budget comparison."""


def qty(v: float) -> str:
    """A quantity as the reasons print it (`%g`)."""
    # messages format the same few quantities over and over: remembered by value (zero and NaN
    # aside: -0.0 equals 0.0 but prints "-0"); an int and its equal float print the same
    text = _N_TEXT.get(v)
    if text is None:
        text = f"{v:g}"
        if v != 0 and v == v:
            if len(_N_TEXT) >= 4096:
                _N_TEXT.clear()
            _N_TEXT[v] = text
    return text


_N_TEXT: dict[float, str] = {}


def gpu_units(w: Workload) -> float:
    """What a workload counts against a team's GPU limit: every GPU resource, one per unit."""
    return sum(v for r, v in w.requests.items() if v > 0 and is_gpu_resource(r))


def queue_key(w: Workload):
    """Kueue's queue order (cache/queue/cluster_queue.go `queueOrderingFunc`): priority desc,
    then creation time, then the UID (`Workload.uid`; the name where none is known)."""
    return (-w.priority, w.created_at, w.name if w.uid is None else w.uid)


_ORDERS: dict[str, tuple[list[Workload], list[Workload]]] = {}
"""Per cluster queue name, the last pending list in_queue_order sorted and its sorted order."""


def in_queue_order(name: str, pending: list[Workload]) -> list[Workload]:
    """`pending` sorted by queue_key (a new list). The gate's engine is built anew every tick on
    mostly the same (frozen, kept) Workload objects in the same order: the same objects in the
    same order as the last list of this queue name sort to the same order (a stable sort of the
    same sequence), which is handed out again rather than sorting 50,000 keys."""
    hit = _ORDERS.get(name)
    if hit is not None and len(hit[0]) == len(pending) and all(map(operator.is_, hit[0], pending)):
        return list(hit[1])
    ordered = sorted(pending, key=queue_key)
    if len(_ORDERS) >= 256:
        _ORDERS.clear()
    _ORDERS[name] = (pending, ordered)
    return list(ordered)


def equivalence(w: Workload) -> tuple:
    """What Kueue's scheduling hash covers (priority, pod shape, requests) plus the platform's
    per-request admission inputs."""
    return (
        w.priority,
        tuple(sorted((r, v) for r, v in w.requests.items() if v > 0)),
        w.flavor,
        w.allowed_flavors,
        w.safety_approval,
        w.evidence,
        w.max_cost,
        w.cost_approval,
        w.team,
        w.pods,
        w.topology,
        w.topology_level,
    )


def flavor_set(w: Workload) -> frozenset[str] | None:
    """The flavors `w` may run on (its pinned flavor, or its allowed set); None: any."""
    if w.flavor is not None:
        return frozenset((w.flavor,))
    return None if w.allowed_flavors is None else frozenset(w.allowed_flavors)
