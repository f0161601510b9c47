"""How queries' tasks share and use the cluster's slots: max-min fair shares, tasks in waves.

Both the simulation's step and the oracle (:mod:`.oracle`) use these, so the oracle sizes on the
rules the simulation runs by."""

from __future__ import annotations

import math

from .tolerance import EPS
from .workload import SimQuery


def _waves_parallelism(q: SimQuery, slots: float) -> float:
    """Slots' worth of progress a query's tasks make on ``slots`` slots (see
    ``_QueryState.parallelism``)."""
    usable = min(float(q.partitions), slots)
    if not q.waves or usable < 1.0:
        return usable
    return q.partitions / math.ceil(q.partitions / math.floor(usable + EPS))


def _fair_share(demand: dict[str, float], slots: float) -> dict[str, float]:
    """Max-min fair allocation of ``slots`` to the demands."""
    alloc = {k: 0.0 for k in demand}
    active = {k: d for k, d in demand.items() if d > 0}
    remaining = float(slots)
    while active and remaining > EPS:
        fair = remaining / len(active)
        satisfied = {k: d for k, d in active.items() if d <= fair + EPS}
        if not satisfied:
            for k in active:
                alloc[k] = fair
            break
        for k, d in satisfied.items():
            alloc[k] = d
            remaining -= d
            del active[k]
    return alloc
