"""The policy file as a Dagster resource."""

from __future__ import annotations

import dagster as dg

from gpu_platform.policy import Policy, load_policy


class PolicyResource(dg.ConfigurableResource):
    """path: policy YAML; empty means the packaged default policy."""

    path: str = ""

    def load(self) -> Policy:
        return load_policy(self.path or None)
