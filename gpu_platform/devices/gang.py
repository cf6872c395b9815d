"""A multi-node request on one machine: one process per GPU group, with torchrun's rendezvous env.

On a cluster a gang of `nodes x gpus_per_node` is one pod per node (`gpu_platform.cluster.jobs`).
Here the same gang is `nodes` processes, each with one node's worth of this machine's GPUs
(`CUDA_VISIBLE_DEVICES` per group) and the environment the Indexed Job's pods get, with
`MASTER_ADDR=127.0.0.1` and a free `MASTER_PORT`, so the training program runs the code path it
runs on the cluster. `run_group` starts them, keeps each one's output in its own log file, and
stops them all as soon as one fails.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

MASTER_ADDR = "127.0.0.1"


def free_port(host: str = MASTER_ADDR) -> int:
    """A TCP port free on `host` now (the kernel's choice for port 0). Another process may take
    it before rank 0 binds it; torchrun's own `--master_port` default has the same race."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def gpu_groups(devices: Sequence[int | str], nodes: int, gpus_per_node: int) -> list[list[int | str]]:
    """`devices` split into `nodes` groups of `gpus_per_node`, in order (rank i gets the i-th)."""
    if len(devices) != nodes * gpus_per_node:
        raise ValueError(f"{len(devices)} devices cannot form {nodes} groups of {gpus_per_node}")
    return [list(devices[i * gpus_per_node:(i + 1) * gpus_per_node]) for i in range(nodes)]


def rendezvous_env(nodes: int, gpus_per_node: int, node_rank: int, port: int,
                   group: Sequence[int | str]) -> dict[str, str]:
    """The env of process `node_rank`: what the gang's pods get on a cluster
    (`gpu_platform.cluster.jobs.rendezvous_env`, also as torchrun's `PET_*`), with
    `MASTER_ADDR=127.0.0.1`, `LOCAL_RANK=0` (the group's first process; torchrun sets its own
    workers') and the group's `CUDA_VISIBLE_DEVICES`."""
    plain = {
        "MASTER_ADDR": MASTER_ADDR,
        "MASTER_PORT": str(port),
        "NNODES": str(nodes),
        "NPROC_PER_NODE": str(gpus_per_node),
        "NODE_RANK": str(node_rank),
    }
    return {
        **plain,
        "WORLD_SIZE": str(nodes * gpus_per_node),
        "LOCAL_RANK": "0",
        "CUDA_VISIBLE_DEVICES": ",".join(str(d) for d in group),
        **{f"PET_{k}": v for k, v in plain.items()},
    }


class GroupFailed(Exception):
    """A process of the group failed (`rank`, `exit_code`) or the group ran past its timeout
    (`timed_out`, rank and exit_code None); the others were stopped."""

    def __init__(self, message: str, rank: int | None = None, exit_code: int | None = None, timed_out: bool = False):
        super().__init__(message)
        self.rank, self.exit_code, self.timed_out = rank, exit_code, timed_out


@dataclass(frozen=True)
class GroupResult:
    """Every process's exit code (rank order) and its log file."""

    exit_codes: tuple[int, ...]
    logs: tuple[Path, ...]


def _stop(process: subprocess.Popen, first: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, first)


def stop_all(processes: Sequence[subprocess.Popen], grace_seconds: float, first: int = signal.SIGTERM) -> None:
    """Signal every process group still running, then SIGKILL what is left after the grace."""
    live = [p for p in processes if p.poll() is None]
    for p in live:
        _stop(p, first)
    deadline = time.monotonic() + grace_seconds
    for p in live:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
    for p in processes:
        _stop(p, signal.SIGKILL)  # the whole group: children of a finished leader too
        p.wait()


def run_group(
    command: Sequence[str],
    envs: Sequence[Mapping[str, str]],
    log_dir: Path,
    timeout_seconds: float,
    *,
    cwd: str | None = None,
    grace_seconds: float = 10.0,
    poll_seconds: float = 0.05,
    on_interrupt_signal: int = signal.SIGINT,
) -> GroupResult:
    """Run `command` once per env (rank i gets `envs[i]`), each in its own process group, output
    to `log_dir/rank-<i>.log`. Returns when all exited 0; raises GroupFailed when one exits
    non-zero (the others get SIGTERM, then SIGKILL after `grace_seconds`) or the timeout passes.
    An interrupt (the run terminated) sends `on_interrupt_signal` to all, then re-raises."""
    log_dir.mkdir(parents=True, exist_ok=True)
    logs = tuple(log_dir / f"rank-{i}.log" for i in range(len(envs)))
    processes: list[subprocess.Popen] = []
    files = []
    try:
        for env, path in zip(envs, logs, strict=True):
            f = open(path, "ab")  # noqa: SIM115 - closed below
            files.append(f)
            processes.append(subprocess.Popen(list(command), cwd=cwd, env=dict(env), stdout=f,
                                              stderr=subprocess.STDOUT, start_new_session=True))
        deadline = time.monotonic() + timeout_seconds
        while True:
            codes = [p.poll() for p in processes]
            bad = next((i for i, c in enumerate(codes) if c not in (None, 0)), None)
            if bad is not None:
                others = sum(1 for c in codes if c is None)
                stop_all(processes, grace_seconds)
                raise GroupFailed(
                    f"process rank {bad} exited with code {codes[bad]}"
                    + (f"; the other {others} running process(es) were stopped" if others else ""),
                    rank=bad, exit_code=codes[bad],
                )
            if all(c == 0 for c in codes):
                return GroupResult(tuple(codes), logs)  # type: ignore[arg-type]
            if time.monotonic() > deadline:
                stop_all(processes, grace_seconds)
                raise GroupFailed(f"the {len(processes)} processes exceeded the timeout of {timeout_seconds:g}s "
                                  "and were stopped", timed_out=True)
            time.sleep(poll_seconds)
    except BaseException as exc:
        if not isinstance(exc, GroupFailed | Exception):
            stop_all(processes, grace_seconds, first=on_interrupt_signal)
        elif not isinstance(exc, GroupFailed):
            stop_all(processes, grace_seconds)
        raise
    finally:
        for f in files:
            f.close()
