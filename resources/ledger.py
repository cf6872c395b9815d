"""The request ledger as a Dagster resource."""

from __future__ import annotations

from functools import cache

import dagster as dg

from gpu_platform.requests.ledger import Ledger
from resources.settings import resolved


@cache
def _ledger(url: str) -> Ledger:
    return Ledger(url)


class LedgerResource(dg.ConfigurableResource):
    """Append-only request ledger. url: SQLAlchemy URL (`sqlite:///...` or `postgresql+psycopg2://...`)."""

    url: str
    """A literal URL, or `dg.EnvVar("GPU_PLATFORM_LEDGER_URL")` when it carries a password."""

    def ledger(self) -> Ledger:
        return _ledger(resolved(self.url))

