"""Opening the warehouse file: DuckDB lets one process write a file at a time, and while it
writes no other process may open the file at all, not even read-only.

The demo's pricing runs, a UI backfill, `feeds ingest` and `cost build` write it; `cost report`,
`scorecard` and `report` only read. Rather than fail with DuckDB's lock traceback, a command
waits for the writer (polling, `GPU_PLATFORM_WAREHOUSE_WAIT_S` seconds, default 15) and, if the
file is still held, stops with one line that names the file and the process holding it (the
writers `feeds ingest` and `cost build` with exit 2, `gpu_platform.cli.common.WarehouseBusyExit`).
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import duckdb

DEFAULT_WAIT_S = 15.0
_LOCK = "Could not set lock on file"


class WarehouseBusy(RuntimeError):
    """The warehouse stayed locked by another process for the whole wait."""

    def __init__(self, path: str | Path, holder: str, waited_s: float):
        self.path, self.holder, self.waited_s = str(path), holder, waited_s
        super().__init__(
            f"{path} is being written by another process ({holder}), still after {waited_s:g} s: "
            "a pricing run (the demo's seed or backfill, the finops_daily job), `gpu-platform feeds ingest` "
            "or `gpu-platform cost build`; "
            "try again when it finishes (or raise GPU_PLATFORM_WAREHOUSE_WAIT_S)"
        )


def wait_seconds() -> float:
    try:
        return max(0.0, float(os.environ.get("GPU_PLATFORM_WAREHOUSE_WAIT_S", DEFAULT_WAIT_S)))
    except ValueError:
        return DEFAULT_WAIT_S


def connect(
    path: str | Path, read_only: bool = True, wait_s: float | None = None, poll_s: float = 0.25, **kwargs
) -> duckdb.DuckDBPyConnection:
    """`duckdb.connect(path, read_only=...)`, waiting up to `wait_s` while another process holds
    the file's lock; then `WarehouseBusy`. Other errors propagate unchanged."""
    wait_s = wait_seconds() if wait_s is None else wait_s
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return duckdb.connect(str(path), read_only=read_only, **kwargs)
        except duckdb.IOException as exc:
            if _LOCK not in str(exc):
                raise
            if time.monotonic() >= deadline:
                m = re.search(r"Conflicting lock is held in (.*?) \(PID (\d+)\)", str(exc))
                holder = f"PID {m.group(2)}, {Path(m.group(1)).name}" if m else "unknown process"
                raise WarehouseBusy(path, holder, wait_s) from None
            time.sleep(poll_s)
