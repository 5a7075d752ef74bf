"""How the report writes a number and a table in markdown (results.md, and the Prefect artifact made from it)."""

from __future__ import annotations

import math

MISSING = "—"


def fmt(value: float | None) -> str:
    """One decimal, as the paper's tables; MISSING for no value."""
    return (
        MISSING
        if value is None or (isinstance(value, float) and math.isnan(value))
        else f"{value:.1f}"
    )


def signed(value: float | None) -> str:
    """A difference: one decimal with its sign."""
    return MISSING if value is None else f"{value:+.1f}"


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """A table whose first column is text and the others right-aligned numbers."""
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|",
    ]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)
