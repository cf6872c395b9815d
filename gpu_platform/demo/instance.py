"""Demo helpers shared by `gpu-platform demo` (gpu_platform/cli/demo.py): the instance config.

`write_instance_yaml` writes `$DAGSTER_HOME/dagster.yaml` from the policy (queued runs limited per
lane). The history lives in `gpu_platform.demo.history`, the supervisor of `dagster dev` in
`gpu_platform.demo.supervisor`.
"""

from __future__ import annotations

import os
from pathlib import Path

from gpu_platform.gate.instance_config import dagster_instance_yaml, render_instance_yaml
from gpu_platform.policy import load_policy

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "requests"


DEMO_INSTANCE_SETTINGS = {"nux": {"enabled": False}}
"""The demo's instance only: no first-visit dialog ("Join the Dagster community") over every page
of a fresh demo (Dagster's `nux: enabled: false`)."""


def write_instance_yaml(dagster_home: Path) -> Path:
    policy = load_policy(os.environ.get("GPU_PLATFORM_POLICY") or None)
    dagster_home.mkdir(parents=True, exist_ok=True)
    path = dagster_home / "dagster.yaml"
    path.write_text(render_instance_yaml({**dagster_instance_yaml(policy), **DEMO_INSTANCE_SETTINGS}, policy))
    return path
