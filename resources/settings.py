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
    work_root: where requests' work directories (checkpoints) live, GPU_PLATFORM_WORK_ROOT;
    "" = `<home>/work`. On Kubernetes: the mount path of `work_claim` in this pod and in the step pods.
    work_claim: PersistentVolumeClaim (ReadWriteMany) holding the work root on Kubernetes,
    GPU_PLATFORM_WORK_CLAIM; "" = none (step pods then keep checkpoints on their own
    filesystem, lost with the pod: evidence jobs are never preemptible and a requeued job restarts).
    kubeconfig: kubeconfig file the gate reads Kueue's Workloads with; "" = the pod's in-cluster
    service account.
    gang_poll_seconds: how often the workload step of a multi-node request polls its Indexed
    Job and pods on the cluster.
    run_start_timeout_seconds: how long a workload run may stay NOT_STARTED or STARTING before the
    gate cancels it and relaunches the request under its next attempt.
    """

    home: str
    executor: str = "local"
    dcgm_endpoints: str = ""
    work_root: str = ""
    work_claim: str = ""
    kubeconfig: str = ""
    run_start_timeout_seconds: float = 600.0
    gang_poll_seconds: float = 10.0

    def home_path(self) -> Path:
        path = Path(self.home)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def work_root_path(self) -> Path:
        return Path(self.work_root) if self.work_root else Path(self.home) / "work"

    def work_volume(self):
        """The work volume step pods mount (`gpu_platform.cluster.jobs.WorkVolume`), None without a claim."""
        from gpu_platform.cluster.jobs import WorkVolume

        if not self.work_claim:
            return None
        return WorkVolume(claim_name=self.work_claim, mount_path=str(self.work_root_path()))

    def feeds_path(self, feed: str) -> Path:
        """Where saved feed files land: `$GPU_PLATFORM_HOME/feeds/<feed>/` (not created here)."""
        return Path(self.home) / "feeds" / feed

    def dcgm_endpoint_list(self) -> list[str]:
        return [u.strip() for u in resolved(self.dcgm_endpoints).split(",") if u.strip()]
