"""Capacity signals as asset checks on the `capacity_signals` asset (one per signal).

Thin: the signals are computed by the `capacity_signals` model (dbt_like_sql/marts); after it is
built, each check reads its signal's fired rows for the partition's days and reports them. The
message is the signal's action text; severity is ERROR when a fired row is ERROR at the policy's
scale (the release and incident lanes' signals in the shipped policy), else WARN. Not blocking:
a signal asks a person to act, it does not stop the pipeline.
"""

from __future__ import annotations

from collections.abc import Iterator

import dagster as dg

from gpu_platform.finops.sqlmodels.report import markdown_table
from gpu_platform.observe.scorecards import SIGNALS, fired
from resources.warehouse import Warehouse

SIGNALS_MODEL = "capacity_signals"
MAX_ACTIONS = 5


def signal_check_specs(model: str) -> list[dg.AssetCheckSpec]:
    """One check per capacity signal, on the capacity_signals asset (none for other models)."""
    if model != SIGNALS_MODEL:
        return []
    return [
        dg.AssetCheckSpec(name=s.name, asset=dg.AssetKey([SIGNALS_MODEL]),
                          description=f"Capacity signal ({s.subject}): fires when {s.fires_when}. "
                          f"Threshold: policy capacity_signals.{s.threshold}. The message is the action.")
        for s in SIGNALS
    ]


def signal_check_results(model: str, warehouse: Warehouse, days: tuple[str, str]) -> Iterator[dg.AssetCheckResult]:
    """The checks' results for the days just built."""
    if model != SIGNALS_MODEL:
        return
    enabled = set(warehouse.variables()["enabled_signals"])
    con = warehouse.connect()
    try:
        rows = fired(con, days[0], days[1])
    finally:
        con.close()
    for s in SIGNALS:
        mine = [r for r in rows if r.signal == s.name]
        if s.name not in enabled:
            yield dg.AssetCheckResult(check_name=s.name, passed=True, severity=dg.AssetCheckSeverity.WARN,
                                      description="not computed at the policy's scale",
                                      metadata={"computed": False})
            continue
        error = any(r.severity == "ERROR" for r in mine)
        actions = [r.action for r in mine[:MAX_ACTIONS]]
        if len(mine) > MAX_ACTIONS:
            actions.append(f"(+{len(mine) - MAX_ACTIONS} more subjects)")
        table = [{"day": str(r.day), "subject": r.subject, "lane": r.lane or "", "value": r.value,
                  "threshold": r.threshold, "severity": r.severity} for r in mine]
        yield dg.AssetCheckResult(
            check_name=s.name,
            passed=not mine,
            severity=dg.AssetCheckSeverity.ERROR if error else dg.AssetCheckSeverity.WARN,
            description="\n\n".join(actions) or None,
            metadata={"computed": True, "fired": len(mine),
                      **({"subjects": dg.MetadataValue.md(markdown_table(table, list(table[0])))} if table else {})},
        )
