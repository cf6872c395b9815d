"""The one Definitions object of the gpu_platform code location (loaded by workspace.yaml).

Built by a function so the environment is read when Dagster loads the code, not at import.
"""

from __future__ import annotations

import dagster as dg

from resources.build import build_resources


def build_definitions(env_name: str | None = None) -> dg.Definitions:
    return dg.Definitions(
        assets=[],
        resources=build_resources(env_name),
    )


@dg.definitions
def defs() -> dg.Definitions:
    return build_definitions()
