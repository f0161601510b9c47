"""What one query's batch costs at a given size: the formulas of the model (see the package's
docstring), for one size or, as columns, for many queries at many sizes at once."""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, overload

import numpy as np

_EPS = 1e-9


@overload
def executors_for(slots: float, slots_per_executor: int) -> int: ...
@overload
def executors_for(slots: np.ndarray, slots_per_executor: int | np.ndarray) -> np.ndarray: ...
def executors_for(slots: float | np.ndarray, slots_per_executor: int | np.ndarray) -> int | np.ndarray:
    """The fewest executors whose task slots hold ``slots`` (0 for none; an array: each of them, and
    ``slots_per_executor`` may be one too): the one conversion of slots into executors, for the
    model, the evaluator and the policy."""
    if isinstance(slots, np.ndarray):
        return np.where(slots > 0, np.ceil(slots / np.maximum(1, slots_per_executor) - _EPS), 0.0)
    return math.ceil(slots / max(1, slots_per_executor) - _EPS) if slots > 0 else 0


# A size: one executor count, or an array of them (the evaluator scans all sizes at once). Every
# formula below is written once for both: through ops(), with Python's own functions for numbers
# (fast) and numpy's for arrays.
Size = int | float | np.ndarray


@dataclass(frozen=True)
class Concurrent:
    """Task time other queries' batches put on the slots while a batch runs."""

    task_s: float | np.ndarray = 0.0  # arrays: one figure per size scanned
    tasks: float | np.ndarray = 0


NONE_CONCURRENT = Concurrent()


class _NumberOps:
    minimum = staticmethod(min)
    maximum = staticmethod(max)

    @staticmethod
    def ceil(x: float) -> float:
        return float(math.ceil(x))

    @staticmethod
    def where(condition: bool, a: float, b: float) -> float:
        return a if condition else b

    isinf = staticmethod(math.isinf)


def ops(*values: object) -> Any:
    """The functions (minimum, maximum, ceil, where, isinf) for these values: numpy's when one is
    an array, else Python's."""
    for v in values:  # a loop, not any() over a generator: called several times per formula
        if isinstance(v, np.ndarray):
            return np
    return _NumberOps


def ideal_task_phase(task_s: Size, tasks: Size, widest: Size, slots: Size,
                     concurrent: Concurrent = NONE_CONCURRENT, rounds: Size | None = None) -> Size:
    """Seconds ``task_s`` of task time in ``tasks`` even tasks take on ``slots`` slots, in waves, and
    at least as long as it and the concurrent task time together take on all of them. ``rounds``:
    :func:`waves` of these tasks on these slots, where the caller has it already."""
    xp = ops(task_s, tasks, slots, concurrent.task_s, concurrent.tasks)
    if rounds is None:
        rounds = waves(tasks, widest, slots)
    alone = rounds * task_s / xp.maximum(1, tasks)
    joint = (task_s + concurrent.task_s) / xp.maximum(1, xp.minimum(slots, tasks + concurrent.tasks))
    return xp.where(concurrent.task_s > 0, xp.maximum(alone, joint), alone)


def waves(tasks: Size, widest: Size, slots: Size) -> Size:
    """Rounds of tasks a batch of ``tasks`` tasks (its widest stage ``widest`` wide) runs in on
    ``slots`` slots: ``ceil(widest / slots)`` per stage, for ``tasks / widest`` stages."""
    xp = ops(tasks, slots, widest)
    widest = xp.maximum(1, widest)
    parallel = xp.maximum(1, xp.minimum(slots, widest))
    return xp.maximum(1, tasks) / widest * xp.ceil(widest / parallel - _EPS)


class CostFormulas:
    """The batch-cost formulas, written once (see the package docstring). Their figures are numbers
    for one query (:class:`BatchCost`) or columns, one row per query (:class:`CostColumns`), and a
    size is one executor count or an array of them: numpy broadcasts the columns against a row of
    sizes, and :func:`ops` gives Python's own functions where everything is a number. One query or
    many, the same operations in the same order: the same figures."""

    driver_s: Any
    fixed_task_s: Any
    per_executor_s: Any
    per_row_s: Any
    tasks: Any  # tasks per batch, all stages
    widest: Any  # tasks of its widest stage: more slots than this do nothing
    cores: Any  # task slots per executor

    def efficiency_at(self, executors: Size) -> Size:
        """Observed task phase / the ideal one at ``executors`` (1: even tasks)."""
        raise NotImplementedError

    def executors_used(self, executors: Size) -> Size:
        """Executors a batch's tasks land on: as many as its widest stage fills."""
        xp = ops(executors, self.widest)
        return xp.maximum(1, xp.minimum(executors, executors_for(self.widest, self.cores)))

    def task_time(self, rows: Size, executors: Size) -> Size:
        """Slot-seconds of task time a batch of ``rows`` pays on ``executors`` executors."""
        return (self.fixed_task_s + self.per_executor_s * self.executors_used(executors)
                + self.per_row_s * ops(rows).maximum(0.0, rows))

    def waves_at(self, executors: Size) -> Size:
        """Rounds of tasks a batch runs in on ``executors`` executors (:func:`waves`)."""
        return waves(self.tasks, self.widest, ops(executors).maximum(1, executors) * self.cores)

    def task_phase(self, rows: Size, executors: Size, concurrent: Concurrent = NONE_CONCURRENT) -> Size:
        """Seconds its tasks take on ``executors`` executors: what more executors shorten."""
        slots = ops(executors).maximum(1, executors) * self.cores
        work = self.task_time(rows, executors)
        return self.efficiency_at(executors) * ideal_task_phase(work, self.tasks, self.widest, slots,
                                                                concurrent, self.waves_at(executors))

    def batch_time(self, rows: Size, executors: Size, concurrent: Concurrent = NONE_CONCURRENT) -> Size:
        """Seconds a batch of ``rows`` takes on ``executors`` executors, driver time included."""
        return self.driver_s + self.task_phase(rows, executors, concurrent)

    def row_seconds(self, executors: Size) -> Size:
        """Seconds each further row adds to a batch on ``executors`` executors."""
        return (self.efficiency_at(executors) * self.waves_at(executors)
                * self.per_row_s / ops(executors, self.tasks).maximum(1, self.tasks))

    def capacity(self, executors: Size) -> Size:
        """Rows/s the query processes at most on ``executors`` executors, batches back to back
        and large (the fixed costs spread thin): rows over the time each adds."""
        per_row = self.row_seconds(executors)
        xp = ops(per_row)
        return xp.where(per_row <= 0, math.inf, 1.0 / xp.maximum(per_row, _EPS))

    def throughput(self, executors: Size, read_limit: float | None = None, trigger_s: float | None = None,
                   concurrent: Concurrent = NONE_CONCURRENT) -> Size:
        """Rows/s the query processes at most on ``executors`` executors, batches back to back,
        each of at most ``read_limit`` rows and at least ``trigger_s`` apart; without a limit,
        :meth:`capacity` (a bigger batch spreads its fixed costs thinner)."""
        if not read_limit:
            return self.capacity(executors)
        batch = self.batch_time(read_limit, executors, concurrent)
        period = ops(batch).maximum(batch, trigger_s or 0.0)
        return ops(period).where(period > 0, read_limit / ops(period).maximum(period, _EPS), math.inf)

    def steady_batch_time(self, rate: Size, executors: Size, trigger_s: Size | None) -> Size:
        """Seconds a batch takes when rows arrive at ``rate``: with a trigger each batch reads a
        trigger interval's rows (more once batches run longer than it); without one (None or 0)
        the next batch starts at once and reads what arrived meanwhile. ``inf`` when the executors
        cannot keep up."""
        # Period = batch time: d = fixed + per_row x rate x d.
        busy = self.row_seconds(executors) * rate
        xp = ops(busy)
        back_to_back = xp.where(busy >= 1.0 - _EPS, math.inf,
                                self.batch_time(0.0, executors) / xp.maximum(1.0 - busy, _EPS))
        trigger = 0.0 if trigger_s is None else trigger_s
        within = self.batch_time(rate * trigger, executors)
        return xp.where((trigger > 0) & (within <= trigger), within, back_to_back)


@dataclass(frozen=True)
class BatchCost(CostFormulas):
    """The fitted cost of one query's batches (see the package docstring). Its methods
    (:class:`CostFormulas`) take one executor count or an array of them."""

    driver_s: float
    fixed_task_s: float
    per_executor_s: float
    per_row_s: float
    tasks: int  # tasks per batch, all stages
    widest: int  # tasks of its widest stage: more slots than this do nothing
    cores: int  # task slots per executor
    efficiency: float  # observed task phase / the ideal one (1: even tasks)
    error: float  # relative spread of the batch-time predictions over the fitted batches
    batches: int  # batches the fit rests on
    row_cost_trusted: bool  # per_row_s came from rows that varied; else split from an earlier fit
    executor_counts: tuple[int, ...] = ()  # the sizes it has seen the query run at
    efficiency_by_executors: dict[int, float] = field(default_factory=dict)

    def efficiency_at(self, executors: Size) -> Size:
        """The efficiency seen at this size, else at the nearest size seen (the smaller of two as
        near), else the overall one. Below the fewest executors seen, a task phase lasts at least
        what it lasted there (fewer slots run no task sooner: a long task is as long) and at least
        its ideal on the slots there are, and no more: the efficiency seen, which a single long
        task among short ones raises with every slot added, is not carried down to sizes where
        the short tasks queue behind it (a file stage of one task beside four shuffle tasks read
        2.3 on 4 executors, and taken for 1 executor too, held 4 for a load one executor did)."""
        seen = self.efficiency_by_executors
        if not seen:
            return np.full(np.shape(executors), self.efficiency) if isinstance(executors, np.ndarray) \
                else self.efficiency
        fewest = min(seen)
        low = seen[fewest]
        if not isinstance(executors, np.ndarray):
            if executors in seen:
                return seen[executors]
            if executors < fewest:
                return self._below_seen(executors, fewest, low)
            return seen[min(seen, key=lambda k: (abs(k - executors), k))]
        midpoints, values = self._efficiency_table
        # Nearest of two sizes seen: up to the midpoint between them the smaller one's.
        nearest = values[np.searchsorted(midpoints, executors, side="left")]
        return np.where(executors < fewest, self._below_seen(executors, fewest, low), nearest)

    def _below_seen(self, executors: Size, fewest: int, efficiency: float) -> Size:
        """The efficiency at fewer executors than the fewest seen (``fewest``, at ``efficiency``):
        the task phase there, or the ideal one, whichever is longer, over the ideal one."""
        xp = ops(executors)
        ideal = waves(self.tasks, self.widest, xp.maximum(1, executors) * self.cores)
        there = efficiency * waves(self.tasks, self.widest, fewest * self.cores)
        return xp.maximum(min(efficiency, 1.0), there / ideal)

    def efficiency_upto(self, count: int) -> np.ndarray:
        """:meth:`efficiency_at` of 1, 2, ..., ``count`` executors (read-only): a fit stands for many
        ticks, and each tick the evaluator scans about the same sizes for every query. Kept for an
        eighth more sizes than asked, and a shorter scan served from it: the scan's width follows
        the load, and at 1,000 executors it changed by a few sizes on half the ticks, each time
        computing every query's again."""
        cached: np.ndarray | None = self.__dict__.get("_efficiency_upto")
        if cached is None or len(cached) < count:
            cached = np.asarray(self.efficiency_at(np.arange(1.0, count + count // 8 + 1)), dtype=float)
            cached.flags.writeable = False
            self.__dict__["_efficiency_upto"] = cached  # frozen: cached like a cached_property
        return cached[:count]

    @cached_property
    def _efficiency_table(self) -> tuple[np.ndarray, np.ndarray]:
        """The midpoints between the sizes seen, ascending, and the efficiency at each size seen
        (built once per fit: the evaluator asks for every size of every query each tick)."""
        known = sorted(self.efficiency_by_executors)
        sizes = np.array(known, dtype=float)
        return ((sizes[:-1] + sizes[1:]) / 2.0,
                np.array([self.efficiency_by_executors[k] for k in known], dtype=float))

    def drain_seconds(self, backlog: float, rate: float, executors: int, read_limit: float | None,
                      trigger_s: float | None) -> float:
        """Seconds to work ``backlog`` rows off while rows keep arriving at ``rate``: batches run
        back to back, each reading at most ``read_limit`` rows. ``inf`` if it never drains."""
        if backlog <= 0:
            return 0.0
        spare = float(self.throughput(executors, read_limit, trigger_s)) - rate
        return math.inf if spare <= _EPS else backlog / spare

class CostColumns(CostFormulas):
    """Many queries' costs at once, a row each, at a row of sizes: :class:`CostFormulas` on column
    figures, with each query's efficiency at each size given (a matrix). The evaluator's scan over
    all sizes of all queries; a tick at 100 queries spent most of its time in numpy's per-call
    overhead one query at a time."""

    def __init__(self, costs: Sequence[BatchCost], sizes: np.ndarray,
                 efficiency: Sequence[Sequence[float] | np.ndarray]) -> None:
        def column(values: Iterable[float]) -> np.ndarray:
            return np.array(list(values), dtype=float).reshape(-1, 1)

        self.sizes = sizes.reshape(1, -1)
        self.driver_s = column(c.driver_s for c in costs)
        self.fixed_task_s = column(c.fixed_task_s for c in costs)
        self.per_executor_s = column(c.per_executor_s for c in costs)
        self.per_row_s = column(c.per_row_s for c in costs)
        self.tasks = column(c.tasks for c in costs)
        self.widest = column(c.widest for c in costs)
        self.cores = column(c.cores for c in costs)
        self.efficiency = (np.stack([np.asarray(e, dtype=float) for e in efficiency]) if len(costs)
                           else np.empty((0, self.sizes.size)))
        # What depends on the sizes alone, made once: every formula of a scan asks for it again.
        self._at_sizes: dict[str, Any] = {}

    def efficiency_at(self, executors: Size) -> Size:
        self._check(executors)
        return self.efficiency

    def executors_used(self, executors: Size) -> Size:
        self._check(executors)
        if "used" not in self._at_sizes:
            self._at_sizes["used"] = super().executors_used(executors)
        return self._at_sizes["used"]

    def waves_at(self, executors: Size) -> Size:
        self._check(executors)
        if "waves" not in self._at_sizes:
            self._at_sizes["waves"] = super().waves_at(executors)
        return self._at_sizes["waves"]

    def _check(self, executors: Size) -> None:
        if executors is not self.sizes:
            raise ValueError("CostColumns answer for the sizes they were made for (their .sizes)")

    def at(self, column: int) -> CostColumns:
        """The same queries at the size of ``column`` alone."""
        one = copy.copy(self)
        one.sizes = self.sizes[:, column:column + 1]
        one.efficiency = self.efficiency[:, column:column + 1]
        one._at_sizes = {}
        return one
