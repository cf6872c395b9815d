"""Prometheus exposition of the queue (`gpu-platform metrics serve`).

Low cardinality by design: labels are lane, flavor and node_pool only (8 x 3 x 3 in the default
policy), never team, request or run ids; per-request detail belongs to `gpu-platform explain`.

The names below are imported from their modules on first use: `server` (the endpoint's limits,
which `metrics serve --help` shows) does not bring in the collector's SQLAlchemy (issue 40).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpu_platform.observe.metrics.collector import METRIC_NAMES, QueueCollector, registry_for
    from gpu_platform.observe.metrics.server import ServerLimits, serve

_HOME = {
    "METRIC_NAMES": "collector",
    "QueueCollector": "collector",
    "registry_for": "collector",
    "ServerLimits": "server",
    "serve": "server",
}

__all__ = ["METRIC_NAMES", "QueueCollector", "ServerLimits", "registry_for", "serve"]


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
