"""Small tables for Dagster metadata, shared by the cost report and the forecast (so neither
imports the other back). Imports the standard library only."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

__all__ = ["markdown_table"]


def markdown_table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    """A small markdown table (for Dagster metadata)."""
    if not rows:
        return "_no rows_"
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for r in rows:
        cells = []
        for c in columns:
            v = r.get(c)
            cells.append(f"{v:.2f}" if isinstance(v, Decimal | float) else str(v))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
