"""The request ledger as a Dagster resource."""

from __future__ import annotations

from functools import cache

import dagster as dg

from gpu_platform.ledger import Ledger


@cache
def _ledger(url: str) -> Ledger:
    return Ledger(url)


class LedgerResource(dg.ConfigurableResource):
    """Append-only request ledger. url: SQLAlchemy URL (`sqlite:///...` or `postgresql+psycopg2://...`)."""

    url: str

    def ledger(self) -> Ledger:
        return _ledger(self.url)
