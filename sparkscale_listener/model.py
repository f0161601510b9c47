"""The micro-batch performance model: what one query's batch costs at a given size, learned online
from every completed batch.

A micro-batch is not a continuous operator. Each batch pays

* driver time no executor shortens (planning, offset and state commits, the sink's commit):
  ``driver_s``;
* task time ``W = fixed_task_s + per_executor_s x E + per_row_s x rows``: a fixed part paid per task
  (scheduling, deserializing, the sink's file per task), a part per executor its tasks land on
  (``E``: a Python worker, a connection) and the work of its rows;
* spread over its tasks: the widest stage's ``T`` tasks on ``P = min(slots, T)`` slots run in
  ``ceil(T / P)`` waves, so the task phase lasts ``efficiency x waves x W / tasks``. ``efficiency``
  is 1 for perfectly even tasks; skew and stragglers make it larger.

So the batch time is ``driver_s + efficiency x waves(P) x W / tasks``: only the second part falls
with more executors, and only while ``P`` is below ``T``. Queries of one application share its
executors: batches that run at the same time (Spark starts the batches of queries with one trigger
interval at the same instant) split the slots, so a batch's task phase lasts at least the joint
task time of it and its :class:`Concurrent` batches over all the slots. :class:`BatchCostLearner` fits the
coefficients from the query's recent batches (the executor counts it ran on give ``per_executor_s``
and the efficiency; batches of different sizes give ``per_row_s``), and :class:`BatchCost` answers
what a size would do: batch time, throughput, time to drain a backlog.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from statistics import median
from typing import Any, overload

import numpy as np

from .metrics import RISING, BatchRecord, same_objects

# A query's first batches pay for starting Python workers, loading classes, opening the sink:
# they say nothing about the steady cost.
WARMUP_BATCHES = 2
# Batches kept per query for the fit: a few minutes of 1-10 s batches.
KEPT_BATCHES = 120
# Fewest warm batches with rows before the model is trusted at all (the average cost of a row).
MIN_BATCHES = 3
# Two warm batches whose task time per row agree within this share are trusted before the third:
# a query that starts under a heavy load is sized a batch sooner. Batches still warming up get
# cheaper from one to the next, so they seldom agree.
EARLY_AGREEMENT = 0.2
# The coefficient of a row is trusted when its standard error is at most this share of it;
# otherwise the last trusted split of task time into fixed and per-row parts is kept.
MAX_ROW_COST_ERROR = 0.25
OUTLIER_MADS = 3.0
# New warm batches after which the model is fitted again (sooner on a new size or a correction).
REFIT_EVERY = 5
MIN_EFFICIENCY, MAX_EFFICIENCY = 0.5, 5.0
_EPS = 1e-9


@overload
def executors_for(slots: float, slots_per_executor: int) -> int: ...
@overload
def executors_for(slots: np.ndarray, slots_per_executor: int) -> np.ndarray: ...
def executors_for(slots: float | np.ndarray, slots_per_executor: int) -> int | np.ndarray:
    """The fewest executors whose task slots hold ``slots`` (0 for none; an array: each of them):
    the one conversion of slots into executors, for the model, the evaluator and the policy."""
    if isinstance(slots, np.ndarray):
        return np.where(slots > 0, np.ceil(slots / max(1, slots_per_executor) - _EPS), 0.0)
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


def ideal_task_phase(task_s: Size, tasks: Size, widest: int, slots: Size,
                     concurrent: Concurrent = NONE_CONCURRENT) -> Size:
    """Seconds ``task_s`` of task time in ``tasks`` even tasks take on ``slots`` slots, in waves, and
    at least as long as it and the concurrent task time together take on all of them."""
    xp = ops(task_s, tasks, slots, concurrent.task_s, concurrent.tasks)
    alone = waves(tasks, widest, slots) * task_s / xp.maximum(1, tasks)
    joint = (task_s + concurrent.task_s) / xp.maximum(1, xp.minimum(slots, tasks + concurrent.tasks))
    return xp.where(concurrent.task_s > 0, xp.maximum(alone, joint), alone)


def waves(tasks: Size, widest: int, slots: Size) -> Size:
    """Rounds of tasks a batch of ``tasks`` tasks (its widest stage ``widest`` wide) runs in on
    ``slots`` slots: ``ceil(widest / slots)`` per stage, for ``tasks / widest`` stages."""
    xp = ops(tasks, slots)
    widest = max(1, widest)
    parallel = xp.maximum(1, xp.minimum(slots, widest))
    return xp.maximum(1, tasks) / widest * xp.ceil(widest / parallel - _EPS)


@dataclass(frozen=True)
class BatchCost:
    """The fitted cost of one query's batches (see the module docstring). Its methods take one
    executor count or an array of them."""

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

    def executors_used(self, executors: Size) -> Size:
        """Executors a batch's tasks land on: as many as its widest stage fills."""
        xp = ops(executors)
        return xp.maximum(1, xp.minimum(executors, executors_for(self.widest, self.cores)))

    def task_time(self, rows: Size, executors: Size) -> Size:
        """Slot-seconds of task time a batch of ``rows`` pays on ``executors`` executors."""
        return (self.fixed_task_s + self.per_executor_s * self.executors_used(executors)
                + self.per_row_s * ops(rows).maximum(0.0, rows))

    def efficiency_at(self, executors: Size) -> Size:
        """The efficiency seen at this size, else at the nearest size seen (the smaller of two as
        near), else the overall one."""
        seen = self.efficiency_by_executors
        if not seen:
            return np.full(np.shape(executors), self.efficiency) if isinstance(executors, np.ndarray) \
                else self.efficiency
        if not isinstance(executors, np.ndarray):
            if executors in seen:
                return seen[executors]
            return seen[min(seen, key=lambda k: (abs(k - executors), k))]
        known, values = self._efficiency_table
        above = np.clip(np.searchsorted(known, executors), 0, len(known) - 1)
        below = np.clip(above - 1, 0, len(known) - 1)
        nearer_below = np.abs(executors - known[below]) <= np.abs(known[above] - executors)
        return np.where(nearer_below, values[below], values[above])

    def efficiency_upto(self, count: int) -> np.ndarray:
        """:meth:`efficiency_at` of 1, 2, ..., ``count`` executors, kept for the last ``count``: a fit
        stands for many ticks, and each tick the evaluator scans the same sizes for every query."""
        cached: tuple[int, np.ndarray] | None = self.__dict__.get("_efficiency_upto")
        if cached is None or cached[0] != count:
            cached = (count, np.asarray(self.efficiency_at(np.arange(1.0, count + 1)), dtype=float))
            self.__dict__["_efficiency_upto"] = cached  # frozen: cached like a cached_property
        return cached[1]

    @cached_property
    def _efficiency_table(self) -> tuple[np.ndarray, np.ndarray]:
        """The sizes seen, ascending, and the efficiency at each (built once per fit: the
        evaluator asks for every size of every query each tick)."""
        known = sorted(self.efficiency_by_executors)
        return (np.array(known, dtype=float),
                np.array([self.efficiency_by_executors[k] for k in known], dtype=float))

    def task_phase(self, rows: Size, executors: Size, concurrent: Concurrent = NONE_CONCURRENT) -> Size:
        """Seconds its tasks take on ``executors`` executors: what more executors shorten."""
        slots = ops(executors).maximum(1, executors) * self.cores
        work = self.task_time(rows, executors)
        return self.efficiency_at(executors) * ideal_task_phase(work, self.tasks, self.widest, slots,
                                                                concurrent)

    def batch_time(self, rows: Size, executors: Size, concurrent: Concurrent = NONE_CONCURRENT) -> Size:
        """Seconds a batch of ``rows`` takes on ``executors`` executors, driver time included."""
        return self.driver_s + self.task_phase(rows, executors, concurrent)

    def row_seconds(self, executors: Size) -> Size:
        """Seconds each further row adds to a batch on ``executors`` executors."""
        slots = ops(executors).maximum(1, executors) * self.cores
        return (self.efficiency_at(executors) * waves(self.tasks, self.widest, slots)
                * self.per_row_s / max(1, self.tasks))

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

    def steady_batch_time(self, rate: float, executors: Size, trigger_s: float | None) -> Size:
        """Seconds a batch takes when rows arrive at ``rate``: with a trigger each batch reads a
        trigger interval's rows (more once batches run longer than it); without one the next
        batch starts at once and reads what arrived meanwhile. ``inf`` when the executors cannot
        keep up."""
        # Period = batch time: d = fixed + per_row x rate x d.
        busy = self.row_seconds(executors) * rate
        xp = ops(busy)
        back_to_back = xp.where(busy >= 1.0 - _EPS, math.inf,
                                self.batch_time(0.0, executors) / xp.maximum(1.0 - busy, _EPS))
        if not trigger_s:
            return back_to_back
        within = self.batch_time(rate * trigger_s, executors)
        return xp.where(within <= trigger_s, within, back_to_back)

    def drain_seconds(self, backlog: float, rate: float, executors: int, read_limit: float | None,
                      trigger_s: float | None) -> float:
        """Seconds to work ``backlog`` rows off while rows keep arriving at ``rate``: batches run
        back to back, each reading at most ``read_limit`` rows. ``inf`` if it never drains."""
        if backlog <= 0:
            return 0.0
        spare = float(self.throughput(executors, read_limit, trigger_s)) - rate
        return math.inf if spare <= _EPS else backlog / spare


class BatchCostLearner:
    """Fits one query's :class:`BatchCost` from its batches, online: :meth:`add` each completed
    batch once (warm-up ones are told apart here), :meth:`fit` when a figure is needed. Refits when
    a batch at a size not seen yet came, or :data:`REFIT_EVERY` batches did, or one was corrected;
    the coefficients move slowly otherwise, and a fit is the costly part of a tick."""

    def __init__(self, max_batches: int = KEPT_BATCHES) -> None:
        self._batches: deque[BatchRecord] = deque(maxlen=max_batches)
        # Each kept batch's figures as the fit reads them (:func:`_columns`), in the same order:
        # read once when it comes, not at every fit.
        self._columns: deque[tuple[float, ...]] = deque(maxlen=max_batches)
        self._seen: dict[int, float] = {}  # batch id -> task time when last seen (insertion order)
        self._first_batch: int | None = None
        self._fit: BatchCost | None = None
        self._fit_cores = 0
        self._stale = True  # something the cached fit does not reflect came
        self._since_fit = 0  # warm batches added since the cached fit
        self._sizes: set[int | None] = set()  # executor counts of the kept batches
        self._split: tuple[float, float] | None = None  # last trusted (fixed share, per-row cost)
        self._given: tuple[BatchRecord, ...] = ()  # the batches given to the last add()
        self._rows_fitted = (0.0, 0.0)  # fewest and most rows of the batches the cached fit saw

    def add(self, batches: Iterable[BatchRecord], exclude: tuple[float, float] | None = None) -> int:
        """Take the batches not seen yet; those overlapping ``exclude`` (start, end: a change of
        executors settling), warm-up batches and batches with fresh executors only count as seen.
        Returns how many were kept."""
        kept = 0
        given = tuple(batches)
        # The leading batches that are the very records given last time were taken then: seen
        # again unchanged, they change nothing (a record is immutable).
        _, taken = same_objects(given, self._given)
        self._given = given
        for b in given[taken:]:
            seen = self._seen.get(b.batch_id)
            if seen is not None:
                # Task ends can reach the listener after the batch's progress: a batch seen again
                # with more task time replaces the first sight of it, or, first seen with none
                # (not kept then: every batch, when the listener lags), is judged now.
                if (b.task_s or 0.0) <= seen:
                    continue
                self._seen[b.batch_id] = b.task_s or 0.0
                if self._update(b) or seen > 0:
                    continue
            else:
                self._seen[b.batch_id] = b.task_s or 0.0
                while len(self._seen) > 4 * (self._batches.maxlen or KEPT_BATCHES):
                    del self._seen[next(iter(self._seen))]
                if self._first_batch is None or b.batch_id < self._first_batch:
                    self._first_batch = b.batch_id
            if not self.warm(b, exclude):
                continue
            self._batches.append(b)
            self._columns.append(_columns(b))
            self._since_fit += 1
            size = b.executors or b.executors_used
            if size not in self._sizes:
                self._sizes.add(size)
                self._stale = True
            # Rows far outside those fitted split the task time into fixed and per-row parts as
            # no batch before could (a low phase's batches all read the same rows): the step that
            # brought them is then sized on that split, not on the last one.
            low, high = self._rows_fitted
            if b.rows > (1.0 + RISING) * high or (1.0 + RISING) * b.rows < low:
                self._stale = True
            kept += 1
        if self._since_fit >= max(REFIT_EVERY, len(self._batches) // 4):
            self._stale = True
        return kept

    def _update(self, b: BatchRecord) -> bool:
        """Replace the kept record of ``b``'s batch; False if none is kept."""
        for i in range(len(self._batches) - 1, -1, -1):
            kept = self._batches[i]
            if kept.batch_id == b.batch_id:
                self._batches[i] = replace(
                    b, concurrent_task_s=max(b.concurrent_task_s, kept.concurrent_task_s),
                    concurrent_tasks=max(b.concurrent_tasks, kept.concurrent_tasks))
                self._columns[i] = _columns(self._batches[i])
                self._stale = True
                return True
        return False

    def warm(self, b: BatchRecord, exclude: tuple[float, float] | None = None) -> bool:
        """Whether a batch tells the steady cost: past the query's first batches, no executor
        running its first tasks in it, not overlapping a change of executors, with rows and
        task time."""
        first = self._first_batch if self._first_batch is not None else b.batch_id
        if b.batch_id < first + WARMUP_BATCHES or b.fresh_executors:
            return False
        if exclude is not None and b.end > exclude[0] and b.start < exclude[1]:
            return False
        return b.rows > 0 and b.task_s is not None and b.task_s > 0

    @property
    def batches(self) -> Sequence[BatchRecord]:
        return tuple(self._batches)

    def fit(self, cores: int, widest_hint: int | None = None) -> BatchCost | None:
        """The fitted cost, or None before :data:`MIN_BATCHES` warm batches with rows (two that
        agree on the cost of a row, :data:`EARLY_AGREEMENT`, do)."""
        if len(self._batches) < MIN_BATCHES and not _agree(list(self._batches)):
            return None
        if self._fit is not None and not self._stale and cores == self._fit_cores:
            return self._fit
        self._sizes = {b.executors or b.executors_used for b in self._batches}
        table = np.array(self._columns, dtype=float).reshape(-1, len(_COLUMNS))
        self._fit = self._fit_now(table, max(1, cores), widest_hint)
        self._rows_fitted = (float(table[:, 0].min()), float(table[:, 0].max()))
        self._fit_cores, self._stale, self._since_fit = cores, False, 0
        return self._fit

    # -- the fit ---------------------------------------------------------------------------------

    def _fit_now(self, table: np.ndarray, cores: int, widest_hint: int | None) -> BatchCost:
        # One row per kept batch, the columns of _COLUMNS.
        rows, task, n_tasks, live_at_start, used_by_tasks, other_task, other_tasks, durations, wall = table.T
        known_tasks = n_tasks[n_tasks > 0]
        tasks = int(median(known_tasks.tolist())) if known_tasks.size else 0
        widest = widest_hint or tasks or 1
        tasks = tasks or widest
        widest = min(widest, tasks)
        live = _available(live_at_start, used_by_tasks, n_tasks, cores)
        used = np.where(used_by_tasks > 0, used_by_tasks,
                        np.minimum(np.where(live > 0, live, 1.0), executors_for(widest, cores)))
        fixed, per_exec, per_row, trusted = self._task_time(rows, used, task)

        # The split of each batch between its task phase and the rest.
        sizes = np.maximum(1.0, live)
        n_tasks = np.where(n_tasks > 0, n_tasks, float(tasks))
        alongside = Concurrent(other_task, other_tasks)
        ideal = ideal_task_phase(task, n_tasks, widest, sizes * cores, alongside)
        counts = [int(k) for k in np.unique(live[live > 0])]
        by_size: dict[int, float] = {}
        if not np.isnan(wall).any():
            ratio = np.clip(wall / np.maximum(ideal, _EPS), MIN_EFFICIENCY, MAX_EFFICIENCY)
            # A batch narrower than the widest stage (a few rows: a few partitions) tells nothing
            # of how that stage spreads over the slots: one task on 1 of 3 executors read as an
            # efficiency of 3 at 3 executors.
            wide = n_tasks >= widest
            efficiency = median((ratio[wide] if wide.any() else ratio).tolist())
            for k in counts:
                mask = (live == k) & wide
                if mask.any():
                    by_size[k] = median(ratio[mask].tolist())
            driver = median(np.maximum(0.0, durations - wall).tolist())
        else:
            efficiency = 1.0
            driver = median(np.maximum(0.0, durations - ideal).tolist())
        cost = BatchCost(driver_s=driver, fixed_task_s=fixed, per_executor_s=per_exec, per_row_s=per_row,
                         tasks=tasks, widest=widest, cores=cores, efficiency=efficiency, error=0.0,
                         batches=len(table), row_cost_trusted=trusted,
                         executor_counts=tuple(counts),
                         efficiency_by_executors=by_size)
        used_at = np.minimum(sizes, executors_for(widest, cores))
        work = fixed + per_exec * used_at + per_row * rows
        phases = ideal_task_phase(work, n_tasks, widest, sizes * cores, alongside)
        predicted = driver + cost.efficiency_at(sizes) * phases
        relative = np.abs(predicted - durations) / np.maximum(durations, _EPS)
        error = median(relative.tolist()) * 1.4826 if len(relative) else 0.0
        return replace(cost, error=error)

    def _task_time(self, rows: np.ndarray, used: np.ndarray,
                   task: np.ndarray) -> tuple[float, float, float, bool]:
        """(fixed, per executor, per row, trusted) for task time = fixed + per_exec x E + per_row x
        rows, by least squares with outliers dropped; the per-executor term only when the executors
        used varied and it comes out sane (else the fit without it), the per-row term only when it
        is well determined."""
        varied_executors = len(set(used.tolist())) > 1
        keep = np.ones(len(rows), dtype=bool)
        for with_executors in ((True, False) if varied_executors else (False,)):
            columns = [np.ones_like(rows), rows, *([used] if with_executors else [])]
            fitted, keep = _robust_fit(np.column_stack(columns), task)
            if fitted is None:
                continue
            coef, se = fitted
            fixed, per_row = float(coef[0]), float(coef[1])
            per_exec = float(coef[2]) if with_executors else 0.0
            well_determined = per_row > 0 and se[1] <= MAX_ROW_COST_ERROR * per_row
            if well_determined and fixed >= 0 and per_exec >= 0:
                self._split = (fixed + per_exec * float(np.mean(used[keep])), per_row)
                return fixed, per_exec, per_row, True
        # Not identifiable from these batches (steady load, rows hardly varied): keep the last
        # trusted per-row cost, with the fixed part whatever the batches' mean leaves; before any,
        # the plain average (every second of task time charged to the rows).
        mean_rows = float(np.mean(rows[keep]))
        mean_task = float(np.mean(task[keep]))
        if self._split is not None:
            per_row = min(self._split[1], mean_task / max(mean_rows, _EPS))
            return max(0.0, mean_task - per_row * mean_rows), 0.0, per_row, False
        return 0.0, 0.0, float(task[keep].sum() / max(rows[keep].sum(), _EPS)), False


# What a fit reads of each batch, in this order; 0 stands for "not known", NaN for an unknown task phase.
_COLUMNS = ("rows", "task_s", "tasks", "executors", "executors_used", "concurrent_task_s",
            "concurrent_tasks", "duration_s", "task_wall_s")


def _columns(b: BatchRecord) -> tuple[float, ...]:
    """A batch's figures as :data:`_COLUMNS` name them."""
    return (b.rows, b.task_s or 0.0, b.tasks or 0, b.executors or 0, b.executors_used or 0,
            b.concurrent_task_s, b.concurrent_tasks, b.duration_s,
            math.nan if b.task_wall_s is None else b.task_wall_s)


def _available(executors: np.ndarray, used: np.ndarray, tasks: np.ndarray, cores: int) -> np.ndarray:
    """The executors each batch ran on as far as its speed goes (0: not known): the live ones,
    except where its tasks could have spread over more of them than they did. An executor being
    removed (the autoscaler's first convergence, a scale-down) or lost runs no task however long
    its removal takes to be announced, and a few short tasks may all land on one executor;
    counting the others gave such a batch slots it never used, and one batch of 4 tasks on 1 of 5
    executors an efficiency of 3 at 5 executors, against which no scale-up looked useful (real
    Spark). Columns as :meth:`BatchCostLearner._fit_now` reads them (0 for not known)."""
    spread = executors_for(tasks, cores)
    narrower = (executors > 0) & (used > 0) & (tasks > 0) & (used < np.minimum(executors, spread))
    return np.where(narrower, used, np.where(executors > 0, executors, used))


def _agree(pts: Sequence[BatchRecord]) -> bool:
    """Two batches whose task time per row is within :data:`EARLY_AGREEMENT` of each other."""
    if len(pts) != 2 or not all(b.rows > 0 and b.task_s for b in pts):
        return False
    a, b = ((x.task_s or 0.0) / x.rows for x in pts)
    return abs(a - b) <= EARLY_AGREEMENT * max(a, b)


def _robust_fit(x: np.ndarray, y: np.ndarray) -> tuple[tuple[np.ndarray, np.ndarray] | None, np.ndarray]:
    """Least squares, then again without the points far off the first fit: ((coefficients,
    standard errors) or None, the points kept)."""
    keep = np.ones(len(y), dtype=bool)
    fitted = None
    for _ in range(2):
        attempt = _least_squares(x[keep], y[keep])
        if attempt is None:
            break
        fitted = attempt
        residual = y - x @ fitted[0]
        mad = median(np.abs(residual[keep] - median(residual[keep].tolist())).tolist())
        inliers = np.abs(residual) <= OUTLIER_MADS * 1.4826 * mad if mad > 0 else keep
        if inliers.sum() < MIN_BATCHES or (inliers == keep).all():
            break
        keep = inliers
    return fitted, keep


def _least_squares(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Coefficients and their standard errors, or None when the columns do not vary enough to
    tell them apart. Columns are scaled to unit size first (rows run to thousands, the intercept
    is 1), so the conditioning test is about the data, not its units."""
    n, p = x.shape
    if n <= p:
        return None
    scale = np.maximum(np.abs(x).max(axis=0), _EPS)
    xs = x / scale
    gram = xs.T @ xs
    if np.linalg.cond(gram) > 1e10:
        return None
    inverse = np.linalg.inv(gram)
    coef = inverse @ xs.T @ y
    residual = y - xs @ coef
    variance = float(residual @ residual) / (n - p)
    se = np.sqrt(np.maximum(np.diag(inverse) * variance, 0.0))
    return coef / scale, se / scale
