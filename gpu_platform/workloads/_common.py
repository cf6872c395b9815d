"""What every demo program shares: where it writes, its immutable log, and how it reports."""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import stat
import sys
import tempfile
import zlib
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

CHECKPOINT_ENV = "GPU_PLATFORM_CHECKPOINT_DIR"
REQUEST_ENV = "GPU_PLATFORM_REQUEST_ID"
OUTPUT_ENV = "GPU_PLATFORM_OUTPUT_DIR"
RESULT_FILE = "result.json"
EXIT_PREEMPTED = 143
"""Exit status after a SIGTERM that was answered with a checkpoint (128 + SIGTERM)."""


def gang_rank(environ: Mapping[str, str] | None = None) -> tuple[int, int] | None:
    """(node rank, nodes) when this process is one of a multi-node gang's (`NNODES` > 1, from the
    rendezvous env a gang's pods and local processes get; torchrun's `PET_*` names too), else None."""
    env = os.environ if environ is None else environ
    try:
        nodes = int(env.get("NNODES") or env.get("PET_NNODES") or 1)
        rank = int(env.get("NODE_RANK") or env.get("PET_NODE_RANK") or 0)
    except ValueError:
        return None
    return (rank, nodes) if nodes > 1 and 0 <= rank < nodes else None


def base_parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--out-dir", default=None, help=f"outputs and logs (default ${OUTPUT_ENV}, else ./workload-out)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--request-id", default=None, help=f"default ${REQUEST_ENV}")
    return p


def csv_list(text: str | None) -> list[str]:
    return [x for x in (text or "").split(",") if x]


def stable_seed(*parts: object) -> int:
    """A seed that is the same in every process (unlike hash())."""
    return zlib.crc32("\x1f".join(map(str, parts)).encode())


def write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def file_digest(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


class Session:
    """One program run: an append-only log file sealed read-only at the end, and the report."""

    def __init__(self, program: str, out_dir: Path, request_id: str | None, pipes: Any | None,
                 rank: int | None = None):
        self.program = program
        self.out_dir = out_dir
        self.request_id = request_id
        self.pipes = pipes
        self.rank = rank
        """Node rank in a gang (None: not one). Only rank 0 writes `result.json`; rank i writes
        `result-rank<i>.json`, so the ranks of one output directory never overwrite each other."""
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        tag = f"-rank{rank}" if rank is not None else ""
        self.log_path = out_dir / "logs" / f"{program}{tag}-{stamp}-{os.getpid()}.log"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "x", encoding="utf-8")  # noqa: SIM115 - closed by seal()
        self.log(f"start {program} request={request_id or '-'} pid={os.getpid()} argv={sys.argv[1:]}")

    def log(self, message: str) -> None:
        line = f"{datetime.now(UTC).isoformat()} {message}"
        self._log.write(line + "\n")
        self._log.flush()
        if self.pipes is not None:
            self.pipes.log.info(message)
        else:
            print(line, file=sys.stderr)

    def seal(self) -> str:
        """Close the log, make it read-only, return its sha256 digest."""
        if not self._log.closed:
            self._log.close()
            os.chmod(self.log_path, stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
        return file_digest(self.log_path)

    def report(self, metadata: Mapping[str, Any], exit_status: int = 0) -> dict[str, Any]:
        """Seal the log, then report result metadata (pipes materialization and result.json)."""
        self.log(f"finish {self.program} exit_status={exit_status}")
        digest = self.seal()
        result = {
            "program": self.program,
            "request_id": self.request_id,
            "exit_status": exit_status,
            "log_path": str(self.log_path),
            "log_digest": digest,
            **metadata,
        }
        name = RESULT_FILE if not self.rank else f"result-rank{self.rank}.json"
        write_atomic(self.out_dir / name, json.dumps(result, indent=2, sort_keys=True, default=str).encode())
        if self.pipes is not None and exit_status == 0:
            self.pipes.report_asset_materialization(metadata={k: _pipes_value(v) for k, v in result.items()})
        elif self.pipes is None:
            print(json.dumps(result, sort_keys=True, default=str))
        return result


def _pipes_value(v: Any) -> Any:
    if v is None or isinstance(v, bool | int | float | str):
        return v
    return {"raw_value": json.loads(json.dumps(v, default=str)), "type": "json"}


@contextlib.contextmanager
def session(program: str, args: argparse.Namespace) -> Iterator[Session]:
    """Open a Session, inside a dagster-pipes connection when launched by Dagster."""
    out_dir = Path(args.out_dir or os.environ.get(OUTPUT_ENV) or "workload-out").resolve()
    request_id = args.request_id or os.environ.get(REQUEST_ENV)
    with contextlib.ExitStack() as stack:
        pipes = None
        if os.environ.get("DAGSTER_PIPES_CONTEXT"):
            from dagster_pipes import open_dagster_pipes

            pipes = stack.enter_context(open_dagster_pipes())
        gang = gang_rank()
        s = Session(program, out_dir, request_id, pipes, rank=gang[0] if gang else None)
        try:
            yield s
        finally:
            s.seal()


def checkpoint_dir(explicit: str | None, out_dir: Path) -> Path:
    d = Path(explicit or os.environ.get(CHECKPOINT_ENV) or out_dir / "checkpoints").resolve()
    d.mkdir(parents=True, exist_ok=True)
    return d
