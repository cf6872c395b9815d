"""Prometheus exposition of the queue (`gpu-platform metrics serve`).

Low cardinality by design: labels are lane, flavor and node_pool only (8 x 3 x 3 in the default
policy), never team, request or run ids; per-request detail belongs to `gpu-platform explain`.
"""

from __future__ import annotations

from gpu_platform.observe.metrics.collector import METRIC_NAMES, QueueCollector, registry_for
from gpu_platform.observe.metrics.server import ServerLimits, serve

__all__ = ["METRIC_NAMES", "QueueCollector", "ServerLimits", "registry_for", "serve"]
