"""Fixtures for the workload assets: a real SQLite ledger, a real evidence store and the real
demo programs run by the local executor (CPU only; the executor gets a configured inventory of
GPU indices because these tests need no GPU)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from gpu_platform.lineage.graph import LineageStore
from gpu_platform.policy import load_policy
from gpu_platform.requests.ledger import Ledger
from gpu_platform.requests.model import JobRequest, validate_request_file
from resources.evidence import EvidenceStoreResource
from resources.ledger import LedgerResource
from resources.local_executor import LocalGpuExecutor
from resources.policy import PolicyResource
from resources.settings import PlatformSettings
from resources.warehouse import Warehouse

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "requests"
CHAIN = EXAMPLES / "release_chain"


@dataclass
class Platform:
    tmp: Path
    ledger: Ledger
    resources: dict[str, Any]

    @property
    def lineage(self) -> LineageStore:
        return LineageStore(self.ledger.engine)

    @property
    def store(self):
        return self.resources["evidence"].store()

    def submit(self, path: Path, request_id: str | None = None, **changes: Any) -> str:
        req = validate_request_file(path, load_policy())
        req = req.model_copy(update={"request_id": request_id or f"req-{path.stem.replace('_', '-')}", **changes})
        return self.ledger.submit(JobRequest.model_validate(req.model_dump()))


def priced_warehouse(path: Path, costs: dict[str, float] | None = None, through: date | None = None) -> Path:
    """A warehouse whose cost models have priced through `through` (default yesterday): the cost
    mart the cost check reads, with `costs` (request id -> cost) on that day and one other
    request's row, so the day counts as priced. Stages of today then await pricing."""
    import duckdb

    day = through or datetime.now(UTC).date() - timedelta(days=1)
    with duckdb.connect(str(path)) as con:
        con.execute("create table fct_gpu_cost_by_request (day date, request_id varchar, currency varchar, "
                    "allocated_cost decimal(18, 6))")
        rows = [(day, "req-priced-elsewhere", "USD", 1.0)] + [(day, rid, "USD", c) for rid, c in (costs or {}).items()]
        con.executemany("insert into fct_gpu_cost_by_request values (?, ?, ?, ?)", rows)
    return path


@pytest.fixture
def platform(tmp_path: Path) -> Platform:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    priced_warehouse(tmp_path / "warehouse.duckdb")
    resources = {
        "ledger": LedgerResource(url=url),
        "policy": PolicyResource(),
        "evidence": EvidenceStoreResource(root=str(tmp_path / "evidence"), work_root=str(tmp_path / "work")),
        "executor": LocalGpuExecutor(use_nvml=False, local_gpus="8", state_dir=str(tmp_path / "gpus")),
        "warehouse": Warehouse(path=str(tmp_path / "warehouse.duckdb")),
        "settings": PlatformSettings(home=str(tmp_path)),
    }
    return Platform(tmp_path, Ledger(url), resources)


@pytest.fixture
def instance():
    with dg.instance_for_test() as inst:
        yield inst
