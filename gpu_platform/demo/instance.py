"""Demo helpers shared by `gpu-platform demo` (gpu_platform/cli/demo.py): the instance config.

`write_instance_yaml` writes `$DAGSTER_HOME/dagster.yaml` from the policy (queued runs limited per
lane); `history_release_stages` lists the seeded history's release-chain stages, which the demo
registers as partitions of the workload assets (`assets/demo_seed.py`), so a link to a past
release opens that release. The history lives in `gpu_platform.demo.history`, the supervisor of
`dagster dev` in `gpu_platform.demo.supervisor`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

from gpu_platform.gate.instance_config import dagster_instance_yaml, render_instance_yaml
from gpu_platform.lineage.graph import RELEASE_KINDS, LineageStore, Parent, WorkloadRun
from gpu_platform.policy import Policy, load_policy
from gpu_platform.requests.ledger import Ledger
from gpu_platform.requests.model import JobRequest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = Path(str(files(__package__) / "examples" / "requests")).resolve()
"""The example requests shipped in the package (`examples/` beside this module: in a checkout a link
to the top-level `examples/`, in an installed wheel its copy); the demo's own are in `../demo`."""


DEMO_INSTANCE_SETTINGS = {"nux": {"enabled": False}}
"""The demo's instance only: no first-visit dialog ("Join the Dagster community") over every page
of a fresh demo (Dagster's `nux: enabled: false`)."""


def write_instance_yaml(dagster_home: Path) -> Path:
    policy = load_policy(os.environ.get("GPU_PLATFORM_POLICY") or None)
    dagster_home.mkdir(parents=True, exist_ok=True)
    path = dagster_home / "dagster.yaml"
    path.write_text(render_instance_yaml({**dagster_instance_yaml(policy), **DEMO_INSTANCE_SETTINGS}, policy))
    return path


HISTORY_PREFIX = "hist-"
"""Request ids of the seeded history (`gpu_platform.demo.history`): `hist-<day>-...`."""


@dataclass(frozen=True)
class HistoryStage:
    """One stage of a seeded history release chain as the UI can show it: the request (a partition
    of its workload kind's set), the stage kind it ran (a release request runs two: its evidence
    pack, then the release), its recorded run (None: it never finished) and its upstream."""

    request_id: str
    workload: str
    stage: str
    request: JobRequest
    run: WorkloadRun | None
    parents: tuple[Parent, ...]


def history_release_stages(ledger: Ledger, policy: Policy) -> list[HistoryStage]:
    """Every stage of the seeded history's release chains (the `hist-...` requests with lineage
    edges, as child or parent), oldest request first, each with its latest recorded run. These are
    the history's partitions the UI can open: a release, its evidence pack, and every upstream
    stage its lineage links to."""
    lineage = LineageStore(ledger.engine)
    edges = {k: v for k, v in lineage.edges().items() if k[0].startswith(HISTORY_PREFIX)}
    ids = {child for child, _ in edges} | {
        p.request_id for parents in edges.values() for p in parents if p.request_id.startswith(HISTORY_PREFIX)
    }
    if not ids:
        return []
    requests = ledger.requests(sorted(ids))
    runs = {(r.request_id, r.kind): r for r in lineage.runs() if r.request_id in ids}
    out = []
    for rid in sorted(requests):
        req = requests[rid]
        workload = req.workload or policy.lane(req.lane or "").default_workload
        stages = ("evidence_pack", workload) if workload in RELEASE_KINDS else (workload,)
        for stage in stages:
            out.append(HistoryStage(rid, workload, stage, req, runs.get((rid, stage)),
                                    tuple(edges.get((rid, stage), ()))))
    return out
