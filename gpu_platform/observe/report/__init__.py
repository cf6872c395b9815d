"""The pool report: one HTML page with plots (queue wait by lane, utilization by pool, cost by
team, unit costs, capacity signals that fired) and the same plots as PNG (`gpu-platform report`).

`build_report` and `Report` live in `gpu_platform.observe.report.build`; they are imported on first use,
so the CLI does not load matplotlib unless a report is built."""

from __future__ import annotations

from typing import Any

__all__ = ["Report", "build_report"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from gpu_platform.observe.report import build

        return getattr(build, name)
    raise AttributeError(name)
