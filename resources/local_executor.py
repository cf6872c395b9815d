"""Local GPU execution: a workload step runs the request's command as a dagster-pipes subprocess.

One machine, no Kubernetes. GPUs come from NVML (`pynvml`) when it initializes, else from the
configured inventory (`GPU_PLATFORM_LOCAL_GPUS`), and the step log says which. The step holds its
GPUs through `LocalGpuAllocator` (a file lock), so concurrent steps never share a device. The
request's timeout is enforced: the subprocess runs in its own process group, which is terminated
(SIGTERM, then SIGKILL after a grace period) when the timeout passes, and the step fails with a
`dg.Failure` naming the timeout.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import warnings
from collections.abc import Iterator, Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import dagster as dg

from gpu_platform.cluster.jobs import ENV_CHECKPOINT_DIR, ENV_REQUEST_ID
from gpu_platform.devices.gang import GroupFailed, free_port, gpu_groups, rendezvous_env, run_group
from gpu_platform.devices.gpus import ENV_LOCAL_GPUS, GpusBusy, Inventory, LocalGpuAllocator, local_inventory
from gpu_platform.requests.model import JobRequest
from gpu_platform.units import format_duration

WORKLOAD_ENV_ALLOWLIST: tuple[str, ...] = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TMPDIR",
    "PYTHONPATH",
    "VIRTUAL_ENV",
    "LD_LIBRARY_PATH",
    "CUDA_HOME",
    "CUDA_PATH",
    "NVIDIA_DRIVER_CAPABILITIES",
    "XDG_CACHE_HOME",
    "GPU_PLATFORM_HOME",
)
"""The variables of the orchestrator's environment a workload inherits (when set); nothing else
passes (no ledger URL, no `DAGSTER_PG_PASSWORD`, no cloud credentials). A request adds its own
`env`; `LocalGpuExecutor.pass_env` names more variables for a site that needs them."""


def workload_environment(extra_names: Sequence[str] = (), source: Mapping[str, str] | None = None) -> dict[str, str]:
    """The allow-listed part of `source` (default: this process's environment)."""
    source = os.environ if source is None else source
    names = (*WORKLOAD_ENV_ALLOWLIST, *extra_names)
    return {name: source[name] for name in names if name in source}


def _kill_group(process: subprocess.Popen, grace_seconds: float, first: int = signal.SIGTERM) -> None:
    """Signal the whole process group, then SIGKILL whatever is left of it after the grace."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, first)
    try:
        process.wait(timeout=grace_seconds)
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


class DeadlinePipesSubprocessClient(dg.PipesSubprocessClient):
    """`PipesSubprocessClient` whose subprocess runs in its own process group under a deadline.

    The stock client waits without a limit and shares the orchestrator's process group; a GPU job
    must not outlive its timeout, nor leave children behind.
    """

    # Dagster's own pipes session reads a preview property of its message reader on every run and
    # warns each time; no user of this platform can act on that, so it is silenced here only.
    _PIPES_PREVIEW = r"Function `PipesMessageReader\.expected_writer_count` is currently in preview"

    @contextlib.contextmanager
    def _session(
        self, context: dg.OpExecutionContext | dg.AssetExecutionContext, extras: dict[str, Any] | None
    ) -> Iterator[Any]:
        """A pipes session of this client, with Dagster's preview warning silenced."""
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=self._PIPES_PREVIEW, category=dg.PreviewWarning)
            with dg.open_pipes_session(
                context=context,
                context_injector=self.context_injector,
                message_reader=self.message_reader,
                extras=extras,
            ) as session:
                yield session

    def run_with_deadline(
        self,
        *,
        context: dg.OpExecutionContext | dg.AssetExecutionContext,
        command: Sequence[str],
        timeout_seconds: float,
        kill_grace_seconds: float = 10.0,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        extras: dict[str, Any] | None = None,
        description: str = "command",
        pass_env: Sequence[str] = (),
    ) -> dg.PipesClientCompletedInvocation:
        """Run the command in a pipes session, in its own process group, killed at the deadline."""
        with self._session(context, extras) as session:
            process = subprocess.Popen(
                list(command),
                cwd=cwd or self.cwd,
                env={
                    **workload_environment(pass_env),
                    **(self.env or {}),
                    **(env or {}),
                    **session.get_bootstrap_env_vars(),
                },
                start_new_session=True,
            )
            try:
                returncode = process.wait(timeout=timeout_seconds)
            except subprocess.TimeoutExpired:
                context.log.error(
                    f"{description}: timeout of {timeout_seconds:g}s passed; killing process group {process.pid}"
                )
                _kill_group(process, kill_grace_seconds)
                raise dg.Failure(
                    description=(
                        f"{description} exceeded its timeout of {_human(timeout_seconds)}; "
                        f"its process group {process.pid} was killed"
                    ),
                    metadata={"timeout_seconds": timeout_seconds, "pid": process.pid},
                    allow_retries=False,
                ) from None
            except BaseException:
                # Interrupted (run terminated) or anything else: never leave the job running.
                if self.forward_termination:
                    _kill_group(process, self.termination_timeout_seconds, first=signal.SIGINT)
                raise
            if returncode != 0:
                raise dg.Failure(
                    description=f"{description} exited with code {returncode}",
                    metadata={"exit_code": returncode},
                )
        return dg.PipesClientCompletedInvocation(session)

    def run_group_with_deadline(
        self,
        *,
        context: dg.OpExecutionContext | dg.AssetExecutionContext,
        command: Sequence[str],
        rank_envs: Sequence[Mapping[str, str]],
        log_dir: Path,
        timeout_seconds: float,
        kill_grace_seconds: float = 10.0,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        extras: dict[str, Any] | None = None,
        description: str = "command",
        pass_env: Sequence[str] = (),
    ) -> dg.PipesClientCompletedInvocation:
        """One process per GPU group in a pipes session: rank 0 reports through it (its
        materialization is the step's); every rank's output goes to `log_dir/rank-<i>.log`. One
        failure stops the others."""
        with self._session(context, extras) as session:
            base = {**workload_environment(pass_env), **(self.env or {}), **(env or {})}
            envs = [
                {**base, **rank_env, **(session.get_bootstrap_env_vars() if i == 0 else {})}
                for i, rank_env in enumerate(rank_envs)
            ]
            try:
                run_group(command, envs, log_dir, timeout_seconds, cwd=cwd or self.cwd,
                          grace_seconds=kill_grace_seconds)
            except GroupFailed as exc:
                context.log.error(f"{description}: {exc}; logs of every rank in {log_dir}")
                metadata: dict[str, Any] = {"log_dir": str(log_dir)}
                if exc.rank is not None:
                    metadata.update({"rank": exc.rank, "exit_code": exc.exit_code})
                raise dg.Failure(
                    description=(f"{description} exceeded its timeout of {_human(timeout_seconds)}; every process "
                                 "was stopped" if exc.timed_out else f"{description}: {exc}"),
                    metadata=metadata,
                    allow_retries=not exc.timed_out,
                ) from None
        return dg.PipesClientCompletedInvocation(session)


def _human(seconds: float) -> str:
    if seconds >= 60 and seconds == int(seconds):
        return f"{format_duration(timedelta(seconds=seconds))} ({seconds:g}s)"
    return f"{seconds:g}s"


class LocalGpuExecutor(dg.ConfigurableResource):
    """Runs a request's command on this machine's GPUs through dagster-pipes.

    The subprocess's environment is built, not inherited: the allow-listed variables of this
    process (`WORKLOAD_ENV_ALLOWLIST`, plus `pass_env`), then `CUDA_VISIBLE_DEVICES` (the allocated NVML indices, with
    `CUDA_DEVICE_ORDER=PCI_BUS_ID` so CUDA numbers them as NVML does), `GPU_PLATFORM_REQUEST_ID`,
    `GPU_PLATFORM_CHECKPOINT_DIR`, and the request's own `env`. The same values are in the pipes
    extras (`request_id`, `gpu_indices`, `checkpoint_dir`).
    """

    state_dir: str | None = None
    """Allocator state directory. None: `$GPU_PLATFORM_STATE_DIR/gpus` or a per-user temp dir."""
    local_gpus: str | None = None
    """Configured inventory used when NVML is unavailable. None: `$GPU_PLATFORM_LOCAL_GPUS`."""
    use_nvml: bool = True
    """False: never ask NVML; use the configured inventory."""
    default_timeout_seconds: float = 6 * 3600
    """Timeout for a request without one (requests validated by the policy always carry one)."""
    kill_grace_seconds: float = 10.0
    """After SIGTERM on timeout, how long the job gets to write a last checkpoint before SIGKILL."""
    allocation_wait_seconds: float = 0.0
    """How long a step waits for busy GPUs to free up before failing."""
    cwd: str | None = None
    pass_env: list[str] = []
    """Variables of this process's environment passed to workloads beyond
    `WORKLOAD_ENV_ALLOWLIST` (e.g. `HF_TOKEN` where a site wants it); none by default."""
    nvml_feeds_dir: str | None = None
    """Where NVML samples of each run's GPUs are written as DCGM history (`feeds/`, so the
    `raw_dcgm_samples` asset loads them); None: not recorded. Only with an NVML inventory."""

    def inventory(self, nvml_module: Any = None) -> Inventory:
        """This machine's GPUs. `nvml_module`: a stand-in for `pynvml` (tests pass `FakeNvml`)."""
        return local_inventory(nvml_module=nvml_module, configured=self.local_gpus, use_nvml=self.use_nvml)

    def _recorder(self, context: Any, request_id: str, devices: list[int], inventory: Inventory,
                  extras: Mapping[str, Any] | None, nvml_module: Any) -> Any:
        """An NVML recorder of this run's GPUs, started; None without NVML, GPUs or a feeds dir."""
        if not self.nvml_feeds_dir or inventory.source != "nvml" or not devices:
            return None
        from gpu_platform.finops.feeds.nvml_recorder import NvmlRecorder
        from gpu_platform.finops.snapshot import pod_name

        attempt = int((getattr(context, "run", None) and context.run.tags.get("gpu-platform/attempt")) or 1)
        return NvmlRecorder(self.nvml_feeds_dir, devices, (extras or {}).get("namespace"),
                            pod_name(request_id, attempt), run_id=context.run_id, nvml_module=nvml_module).start()

    def run(
        self,
        context: dg.OpExecutionContext | dg.AssetExecutionContext,
        request: JobRequest,
        checkpoint_dir: str | os.PathLike[str],
        extras: Mapping[str, Any] | None = None,
        *,
        nvml_module: Any = None,
    ) -> dg.PipesClientCompletedInvocation:
        """Run `request.command` with its GPUs; raise `dg.Failure` on timeout, exit != 0, no GPUs."""
        if not request.command:
            raise dg.Failure(description=f"request {request.request_id}: no command to run")
        request_id = request.request_id or context.run_id
        inventory = self.inventory(nvml_module)
        if inventory.source == "nvml":
            context.log.info(inventory.detail)
        else:
            context.log.warning(inventory.detail)
        gpu_count = request.gpu_count or 0
        resource = request.gpu_resource or "nvidia.com/gpu"
        try:
            allocatable = inventory.allocatable(resource)
        except ValueError as exc:
            raise dg.Failure(description=f"request {request_id}: {exc}") from exc
        allocator = LocalGpuAllocator(allocatable, self.state_dir)
        timeout = (
            request.timeout.total_seconds() if request.timeout is not None else self.default_timeout_seconds
        )
        ckpt = Path(checkpoint_dir)
        ckpt.mkdir(parents=True, exist_ok=True)
        try:
            with allocator.allocated(
                request_id, gpu_count, wait_seconds=self.allocation_wait_seconds
            ) as devices:
                # Whole GPUs by index (CUDA_DEVICE_ORDER=PCI_BUS_ID matches NVML's order); MIG devices
                # by their MIG-... UUID, the only way CUDA addresses a MIG device.
                visible = ",".join(str(i) for i in devices)
                source = "NVML" if inventory.source == "nvml" else "configured inventory"
                context.log.info(
                    f"request {request_id}: CUDA_VISIBLE_DEVICES={visible or '(none)'} from {source}; "
                    f"timeout {_human(timeout)}; checkpoints in {ckpt}"
                )
                env = {
                    **request.env,
                    "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
                    "CUDA_VISIBLE_DEVICES": visible,
                    ENV_REQUEST_ID: request_id,
                    ENV_CHECKPOINT_DIR: str(ckpt),
                }
                recorder = (
                    self._recorder(context, request_id, list(devices), inventory, extras, nvml_module)
                    if resource == "nvidia.com/gpu"
                    else None  # MIG devices are sampled by DCGM on clusters; NVML sampling here is per GPU
                )
                try:
                    nodes = request.nodes or 1
                    if nodes > 1 and resource == "nvidia.com/gpu":
                        return self._run_gang(context, request, request_id, list(devices), env, timeout, extras,
                                              ckpt, nodes)
                    return DeadlinePipesSubprocessClient(cwd=self.cwd).run_with_deadline(
                        context=context,
                        command=request.command,
                        timeout_seconds=timeout,
                        kill_grace_seconds=self.kill_grace_seconds,
                        env=env,
                        extras={
                            **(extras or {}),
                            "request_id": request_id,
                            "gpu_indices": list(devices),
                            "gpu_source": inventory.source,
                            "checkpoint_dir": str(ckpt),
                        },
                        description=f"request {request_id}",
                        pass_env=self.pass_env,
                    )
                finally:
                    if recorder is not None:
                        files = recorder.stop()
                        context.log.info(f"request {request_id}: NVML samples in {', '.join(map(str, files)) or 'none'}"
                                         + (f"; sampling errors: {recorder.errors[:3]}" if recorder.errors else ""))
        except GpusBusy as exc:
            hint = (
                ""
                if inventory.source == "nvml"
                else f" (set {ENV_LOCAL_GPUS} to declare this machine's GPUs)"
            )
            raise dg.Failure(
                description=f"request {request_id}: cannot get {gpu_count} GPU(s): {exc}{hint}"
            ) from exc

    def _run_gang(self, context: Any, request: JobRequest, request_id: str, devices: list[int], env: dict[str, str],
                  timeout: float, extras: Mapping[str, Any] | None, ckpt: Path, nodes: int
                  ) -> dg.PipesClientCompletedInvocation:
        """A multi-node request here: one process per group of `gpus_per_node` GPUs, with the
        rendezvous env of `gpu_platform.devices.gang` (MASTER_ADDR=127.0.0.1, a free port)."""
        per = request.gpus_per_pod
        port = free_port()
        rank_envs = [rendezvous_env(nodes, per, i, port, group)
                     for i, group in enumerate(gpu_groups(devices, nodes, per))]
        log_dir = Path((extras or {}).get("out_dir") or ckpt.parent) / "ranks"
        context.log.info(
            f"request {request_id}: {nodes} processes x {per} GPUs, rendezvous 127.0.0.1:{port}; "
            + "; ".join(f"rank {i}: CUDA_VISIBLE_DEVICES={e['CUDA_VISIBLE_DEVICES']}" for i, e in enumerate(rank_envs))
            + f"; logs in {log_dir}"
        )
        return DeadlinePipesSubprocessClient(cwd=self.cwd).run_group_with_deadline(
            context=context,
            command=request.command,
            rank_envs=rank_envs,
            log_dir=log_dir,
            timeout_seconds=timeout,
            kill_grace_seconds=self.kill_grace_seconds,
            env=env,
            extras={**(extras or {}), "request_id": request_id, "gpu_indices": devices, "checkpoint_dir": str(ckpt),
                    "nodes": nodes, "gpus_per_node": per, "master_port": port},
            description=f"request {request_id}",
            pass_env=self.pass_env,
        )
