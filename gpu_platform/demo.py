"""Seed a realistic demo under GPU_PLATFORM_HOME and DAGSTER_HOME.

The domain half of the demo seed (`make demo` runs `python -m assets.demo_seed seed`):
- writes `$DAGSTER_HOME/dagster.yaml` from the policy (queued runs limited per lane);
- submits a request for every lane, plus a release chain, to the ledger; the admission sensor
  (running in `dagster dev`'s daemon) admits and launches them as the policy allows;
- writes a week of demo DCGM telemetry, FOCUS billing and finished requests (ending yesterday)
  and materializes the ingest and cost assets for each day, so the UI opens on priced days
  (`gpu_platform.demo_costs`).
Seeding is idempotent: what is already there is left as it is.
"""

from __future__ import annotations

import os
from pathlib import Path

from gpu_platform.instance_config import dagster_instance_yaml, render_instance_yaml
from gpu_platform.ledger import Ledger, default_ledger_url
from gpu_platform.policy import load_policy
from gpu_platform.requests import validate_request_file

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "requests"


def write_instance_yaml(dagster_home: Path) -> Path:
    policy = load_policy(os.environ.get("GPU_PLATFORM_POLICY") or None)
    dagster_home.mkdir(parents=True, exist_ok=True)
    path = dagster_home / "dagster.yaml"
    path.write_text(render_instance_yaml(dagster_instance_yaml(policy), policy))
    return path


def seed_ledger(examples: Path = EXAMPLES) -> list[str]:
    policy = load_policy(os.environ.get("GPU_PLATFORM_POLICY") or None)
    ledger = Ledger(default_ledger_url())
    if ledger.count()[0]:
        print(f"demo: ledger {ledger.url} already seeded ({ledger.count()[0]} requests)")
        return []
    files = sorted(examples.glob("*.yaml")) + sorted((examples / "release_chain").glob("*.yaml"))
    ids = [ledger.submit(validate_request_file(p, policy)) for p in files]
    print(f"demo: submitted {len(ids)} requests to {ledger.url}")
    return ids
