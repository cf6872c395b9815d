"""The pool report: one HTML page with plots (queue wait by lane, utilization by pool, cost by
team, unit costs, capacity signals that fired) and the same plots as PNG (`gpu-platform report`)."""

from __future__ import annotations

from gpu_platform.report.build import Report, build_report

__all__ = ["Report", "build_report"]
