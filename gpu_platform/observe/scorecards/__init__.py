"""Scorecards and capacity signals: what the policy hands the SQL marts, and what the marts say.

The marts live in `dbt_like_sql/marts/` (`scorecard_*`, `capacity_signals`); this package is the
plain-Python side: `model_vars(policy)` turns the policy's `scale` and `capacity_signals:` block
into the bound vars those models read (never SQL text), and `fired(con, ...)` reads the signals
that fired, for the asset checks and the `scorecard` command. docs/scorecards.md describes every
row and signal.
"""

from gpu_platform.observe.scorecards.signals import (
    SIGNALS,
    FiredSignal,
    Signal,
    fired,
    model_vars,
    signal_rows,
)

__all__ = ["SIGNALS", "FiredSignal", "Signal", "fired", "model_vars", "signal_rows"]
