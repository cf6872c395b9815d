"""Small tables for Dagster metadata, shared by the cost report and the forecast (so neither
imports the other back). Every cell goes through `gpu_platform.safeload.text.md`: a team, currency
or request id from outside cannot become a link, an image, HTML or a new column."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from gpu_platform.safeload.text import md

__all__ = ["markdown_table"]


def markdown_table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    """A small markdown table (for Dagster metadata)."""
    if not rows:
        return "_no rows_"
    lines = ["| " + " | ".join(md(c) for c in columns) + " |", "|" + "---|" * len(columns)]
    for r in rows:
        cells = []
        for c in columns:
            v = r.get(c)
            cells.append(f"{v:.2f}" if isinstance(v, Decimal | float) else md(v))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
