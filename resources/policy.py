"""The policy file as a Dagster resource."""

from __future__ import annotations

import dagster as dg

from gpu_platform.policy import Policy, load_policy_cached


class PolicyResource(dg.ConfigurableResource):
    """path: policy YAML; empty means the packaged default policy."""

    path: str = ""

    def load(self) -> Policy:
        """The policy, parsed again only when the file changed (the sensor reads it every tick)."""
        return load_policy_cached(self.path or None)
