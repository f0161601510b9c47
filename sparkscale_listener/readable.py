"""How figures read in decisions, events and logs: rounded, with their units, never in exponent
notation or as raw epoch times."""

from __future__ import annotations

import math


def number(value: float) -> str:
    """3 significant digits, thousands separated: 0.052, 7.3, 512, 3,570, 1,200,000."""
    if not math.isfinite(value):
        return "unbounded" if value > 0 else "-unbounded"
    if abs(value) >= 100:
        return f"{round(value, -max(0, int(math.log10(abs(value))) - 2)):,.0f}"
    if value == 0:
        return "0"
    return f"{value:.3g}"


def rate(rows_per_s: float) -> str:
    return f"{number(rows_per_s)} rows/s"


def rows(count: float) -> str:
    return f"{number(count)} rows"


def seconds(value: float) -> str:
    """``0.35 s``, ``9.7 s``, ``45 s``, ``4.5 min``, ``2.1 h``."""
    if not math.isfinite(value):
        return "never"
    if value < 10:
        return f"{value:.2g} s" if value < 1 else f"{value:.1f} s"
    if value < 180:
        return f"{value:.0f} s"
    if value < 7200:
        return f"{value / 60:.1f} min"
    return f"{value / 3600:.1f} h"


def executors(count: int) -> str:
    return f"{count} executor" if count == 1 else f"{count} executors"


def query(name: str | None, query_id: str) -> str:
    """A query as people know it: its name, else the start of its id."""
    return f"query '{name}'" if name else f"query {query_id[:8]}"
