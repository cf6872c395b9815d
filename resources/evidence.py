"""The evidence store as a Dagster resource."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from gpu_platform.gate.checkpoints import safe_name
from gpu_platform.lineage.evidence import EvidenceStore


class EvidenceStoreResource(dg.ConfigurableResource):
    """Content-addressed, write-once evidence files (logs, results, manifests) under `root`.

    root: a local directory (in production, the object-store bucket mounted there; see
    docs/lineage-and-evidence.md). work_root: where workloads keep checkpoints and scratch
    outputs between attempts; empty means `<root>/../work`. Checkpoints are not evidence: they
    are rewritten and pruned, so they never live under `root`.
    """

    root: str
    work_root: str = ""

    def store(self) -> EvidenceStore:
        return EvidenceStore(self.root)

    def work_dir(self, request_id: str) -> Path:
        base = Path(self.work_root) if self.work_root else Path(self.root).resolve().parent / "work"
        return base / safe_name(request_id)
