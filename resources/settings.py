"""Platform-wide settings as a Dagster resource."""

from __future__ import annotations

from pathlib import Path

import dagster as dg


class PlatformSettings(dg.ConfigurableResource):
    """home: local state directory (checkpoints, evidence, warehouse) — GPU_PLATFORM_HOME.
    executor: `local` (subprocesses on this machine) or `k8s` (one Kubernetes Job per step, Kueue-labelled).
    """

    home: str
    executor: str = "local"

    def home_path(self) -> Path:
        path = Path(self.home)
        path.mkdir(parents=True, exist_ok=True)
        return path
