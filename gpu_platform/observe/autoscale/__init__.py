"""Autoscaling demand: desired node counts per node pool from the queue's GPU demand and the
policy's `autoscaling` block (`gpu-platform autoscale plan`, `gpu_platform_autoscale_*` gauges).

The platform does not add nodes itself: Cluster Autoscaler, Karpenter or KEDA do, reading these
figures (docs/observability.md).
"""

from __future__ import annotations

from gpu_platform.observe.autoscale.plan import PoolPlan, plan_pools

__all__ = ["PoolPlan", "plan_pools"]
