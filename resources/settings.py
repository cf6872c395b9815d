"""Platform-wide settings as a Dagster resource."""

from __future__ import annotations

from pathlib import Path

import dagster as dg


def resolved(value: str) -> str:
    """A config value as the process sees it: an unresolved `dg.EnvVar` is read now."""
    if isinstance(value, dg.EnvVar):
        found = value.get_value()
        if found is None:
            raise RuntimeError(f"environment variable {value.env_var_name} is not set")
        return found
    return value


class PlatformSettings(dg.ConfigurableResource):
    """home: local state directory (checkpoints, evidence, warehouse) — GPU_PLATFORM_HOME.
    executor: `local` (subprocesses on this machine) or `k8s` (one Kubernetes Job per step, Kueue-labelled).
    dcgm_endpoints: comma-separated dcgm-exporter `/metrics` URLs scraped for today's partition
    (GPU_PLATFORM_DCGM_ENDPOINTS); "" = none, only saved files are loaded.
    run_start_timeout_seconds: how long a workload run may stay NOT_STARTED or STARTING before the
    gate cancels it and relaunches the request under its next attempt.
    """

    home: str
    executor: str = "local"
    dcgm_endpoints: str = ""
    run_start_timeout_seconds: float = 600.0

    def home_path(self) -> Path:
        path = Path(self.home)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def feeds_path(self, feed: str) -> Path:
        """Where saved feed files land: `$GPU_PLATFORM_HOME/feeds/<feed>/` (not created here)."""
        return Path(self.home) / "feeds" / feed

    def dcgm_endpoint_list(self) -> list[str]:
        return [u.strip() for u in resolved(self.dcgm_endpoints).split(",") if u.strip()]
