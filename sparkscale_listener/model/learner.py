"""Learning a query's :class:`~.cost.BatchCost` online from its completed batches: robust fits of
the task time's parts and the efficiency at each size, for one query or every query due at once."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Sequence
from itertools import islice

import numpy as np

from ..metrics import RISING, BatchRecord, same_objects
from .cost import BatchCost, Concurrent, executors_for, ideal_task_phase

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
# Relative size below which a fit's figures are rounding, not data.
_ROUNDING = 1e-9


class BatchCostLearner:
    """Fits one query's :class:`BatchCost` from its batches, online: :meth:`add` each completed
    batch once (warm-up ones are told apart here), :meth:`fit` when a figure is needed. Refits when
    a batch at a size not seen yet came, or :data:`REFIT_EVERY` batches did, or one was corrected;
    the coefficients move slowly otherwise, and a fit is the costly part of a tick."""

    def __init__(self, max_batches: int = KEPT_BATCHES) -> None:
        self._batches: deque[BatchRecord] = deque(maxlen=max_batches)
        # Each kept batch's figures as the fit reads them (:func:`_columns`), in the same order:
        # converted once when it comes, not at every fit.
        self._columns = _Rows(max_batches)
        self._seen: dict[int, float] = {}  # batch id -> task time when last seen (insertion order)
        self._first_batch: int | None = None
        self._fit: BatchCost | None = None
        self._fit_cores = 0
        self._stale = True  # something the cached fit does not reflect came
        self._since_fit = 0  # warm batches added since the cached fit
        self._sizes: set[float | None] = set()  # executor counts of the kept batches (None: not known)
        self._split: tuple[float, float] | None = None  # last trusted (fixed share, per-row cost)
        self._given: tuple[BatchRecord | tuple[BatchRecord, float, int], ...] = ()  # given to the last add()
        self._rows_fitted = (0.0, 0.0)  # fewest and most rows of the batches the cached fit saw

    def add(self, batches: Iterable[BatchRecord | tuple[BatchRecord, float, int]],
            exclude: tuple[float, float] | None = None) -> int:
        """Take the batches not seen yet; those overlapping ``exclude`` (start, end: a change of
        executors settling), warm-up batches and batches with fresh executors only count as seen.
        A batch comes as a record, or as (record, task time and tasks of other queries' batches
        that ran alongside it: :func:`~.concurrency.with_concurrency`'s). Returns how many were kept."""
        kept = 0
        given = tuple(batches)
        # The leading batches that are the very objects given last time were taken then: seen
        # again unchanged, they change nothing (a record, or a tuple of one, is immutable).
        _, taken = same_objects(given, self._given)
        self._given = given
        most_seen = 4 * (self._batches.maxlen or KEPT_BATCHES)
        # Rows far outside those fitted split the task time into fixed and per-row parts as no
        # batch before could (a low phase's batches all read the same rows): the step that brought
        # them is then sized on that split, not on the last one.
        low, high = self._rows_fitted
        above = (1.0 + RISING) * high
        for item in given[taken:]:
            b, alongside_s, alongside_tasks = (item if isinstance(item, tuple)
                                               else (item, item.concurrent_task_s, item.concurrent_tasks))
            seen = self._seen.get(b.batch_id)
            if seen is not None:
                # Task ends can reach the listener after the batch's progress: a batch seen again
                # with more task time replaces the first sight of it, or, first seen with none
                # (not kept then: every batch, when the listener lags), is judged now.
                if (b.task_s or 0.0) <= seen:
                    continue
                self._seen[b.batch_id] = b.task_s or 0.0
                if self._update(b, alongside_s, alongside_tasks) or seen > 0:
                    continue
            else:
                self._seen[b.batch_id] = b.task_s or 0.0
                while len(self._seen) > most_seen:
                    del self._seen[next(iter(self._seen))]
                if self._first_batch is None or b.batch_id < self._first_batch:
                    self._first_batch = b.batch_id
            if not self.warm(b, exclude):
                continue
            self._batches.append(b)
            self._columns.append(_columns(b, alongside_s, alongside_tasks))
            self._since_fit += 1
            size = b.executors or b.executors_used or None
            if size not in self._sizes:
                self._sizes.add(size)
                self._stale = True
            if b.rows > above or (1.0 + RISING) * b.rows < low:
                self._stale = True
            kept += 1
        if self._since_fit >= max(REFIT_EVERY, len(self._batches) // 4):
            self._stale = True
        return kept

    def _update(self, b: BatchRecord, alongside_s: float, alongside_tasks: int) -> bool:
        """Replace the kept record of ``b``'s batch (what ran alongside: the most either saw);
        False if none is kept."""
        for i in range(len(self._batches) - 1, -1, -1):
            if self._batches[i].batch_id == b.batch_id:
                row = self._columns[i]
                self._batches[i] = b
                self._columns[i] = _columns(b, max(alongside_s, row[_ALONGSIDE_S]),
                                            max(alongside_tasks, int(row[_ALONGSIDE_TASKS])))
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
        """The kept batches' records as given (what ran alongside each is in the fit's columns)."""
        return tuple(self._batches)

    def fit(self, cores: int, widest_hint: int | None = None) -> BatchCost | None:
        """The fitted cost, or None before :data:`MIN_BATCHES` warm batches with rows (two that
        agree on the cost of a row, :data:`EARLY_AGREEMENT`, do)."""
        return fit_all([(self, cores, widest_hint)])[0]

    def _due(self, cores: int) -> bool | None:
        """True when a new fit is due, False when the last one stands, None when none can be made."""
        if len(self._batches) < MIN_BATCHES and not _agree(list(self._batches)):
            return None
        return self._fit is None or self._stale or cores != self._fit_cores

    def _fitted(self, cost: BatchCost, split: tuple[float, float] | None, table: np.ndarray,
                cores: int) -> None:
        executors, used = table[:, _COLUMNS.index("executors")], table[:, _COLUMNS.index("executors_used")]
        self._sizes = {size or None for size in np.where(executors > 0, executors, used).tolist()}
        self._fit, self._split = cost, split
        self._rows_fitted = (float(table[:, 0].min()), float(table[:, 0].max()))
        self._fit_cores, self._stale, self._since_fit = cores, False, 0


def fit_all(requests: Sequence[tuple[BatchCostLearner, int, int | None]]) -> list[BatchCost | None]:
    """:meth:`BatchCostLearner.fit` of each (learner, cores, widest hint): the learners due a new fit
    are fitted together, one array pass over all of their batches (fitted one by one, 100 queries
    spent a refit tick in numpy's per-call overhead on tables of a hundred rows)."""
    out: list[BatchCost | None] = []
    due: list[int] = []
    for i, (learner, cores, _) in enumerate(requests):
        state = learner._due(cores)
        out.append(learner._fit if state is False else None)
        if state:
            due.append(i)
    if due:
        tables = [requests[i][0]._columns.array() for i in due]
        fitted = _fit_tables(tables, [max(1, requests[i][1]) for i in due], [requests[i][2] for i in due],
                             [requests[i][0]._split for i in due])
        for i, table, (cost, split) in zip(due, tables, fitted, strict=True):
            learner, cores, _ = requests[i]
            learner._fitted(cost, split, table, cores)
            out[i] = cost
    return out


Split = tuple[float, float]  # a trusted split of task time: (fixed part at the mean size, per row)


def _fit_tables(tables: Sequence[np.ndarray], cores: Sequence[int], hints: Sequence[int | None],
                splits: Sequence[Split | None]) -> list[tuple[BatchCost, Split | None]]:
    """The cost of each table (one row per kept batch, the columns of :data:`_COLUMNS`), all of them
    as one padded array (a row of it per query); with the split of task time each leaves trusted
    (``splits``: the last ones, kept where a table cannot tell it)."""
    k_count, width = len(tables), max(len(t) for t in tables)
    data = np.zeros((k_count, width, len(_COLUMNS)))
    valid = np.zeros((k_count, width), dtype=bool)
    for k, t in enumerate(tables):
        data[k, :len(t)] = t
        valid[k, :len(t)] = True
    rows, task, n_tasks, live_at_start, used_by_tasks, other_task, other_tasks, durations, wall = (
        data.transpose(2, 0, 1))
    per_query_cores = np.array(cores, dtype=float)[:, None]

    # Tasks per batch (the median of those known) and the widest stage, per query.
    medians = _masked_median(n_tasks, valid & (n_tasks > 0)).tolist()
    tasks_each, widest_each = [], []
    for median_tasks, hint in zip(medians, hints, strict=True):
        tasks = int(median_tasks) if not math.isnan(median_tasks) else 0
        widest = hint or tasks or 1
        tasks = tasks or widest
        tasks_each.append(tasks)
        widest_each.append(min(widest, tasks))
    tasks_col = np.array(tasks_each, dtype=float)[:, None]
    widest_col = np.array(widest_each, dtype=float)[:, None]
    most_used = executors_for(widest_col, per_query_cores)

    live = _available(live_at_start, used_by_tasks, n_tasks, per_query_cores)
    used = np.where(used_by_tasks > 0, used_by_tasks, np.minimum(np.where(live > 0, live, 1.0), most_used))
    fixed, per_exec, per_row, trusted, new_splits = _task_times(rows, used, task, valid, splits)

    # The split of each batch between its task phase and the rest.
    sizes = np.maximum(1.0, live)
    n_tasks = np.where(n_tasks > 0, n_tasks, tasks_col)
    alongside = Concurrent(other_task, other_tasks)
    slots = sizes * per_query_cores
    ideal = ideal_task_phase(task, n_tasks, widest_col, slots, alongside)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.clip(wall / np.maximum(ideal, _EPS), MIN_EFFICIENCY, MAX_EFFICIENCY)
    timed = ~(np.isnan(wall) & valid).any(axis=1)  # every batch's task phase known
    wide = n_tasks >= widest_col
    # A batch narrower than the widest stage (a few rows: a few partitions) tells nothing of how
    # that stage spreads over the slots: one task on 1 of 3 executors read as an efficiency of 3
    # at 3 executors.
    wide_kept = valid & wide
    measured = np.where(wide_kept.any(axis=1)[:, None], wide_kept, valid)
    efficiency = np.where(timed, _masked_median(ratio, measured), 1.0)
    driver = np.where(timed, _masked_median(np.maximum(0.0, durations - wall), valid),
                      _masked_median(np.maximum(0.0, durations - ideal), valid))
    seen = valid & (live > 0)
    by_size = _group_medians(ratio, live, seen & wide & timed[:, None])
    counts = _group_medians(live, live, seen)

    # How far the model is off the batches it is fitted on: the spread of its predictions.
    used_at = np.minimum(sizes, most_used)
    work = (np.array(fixed)[:, None] + np.array(per_exec)[:, None] * used_at
            + np.array(per_row)[:, None] * rows)
    phases = ideal_task_phase(work, n_tasks, widest_col, slots, alongside)
    predicted = driver[:, None] + _efficiency_at(by_size, efficiency, sizes) * phases
    relative = np.abs(predicted - durations) / np.maximum(durations, _EPS)
    errors = (_masked_median(relative, valid) * 1.4826).tolist()
    return [(BatchCost(driver_s=float(driver[k]), fixed_task_s=fixed[k], per_executor_s=per_exec[k],
                       per_row_s=per_row[k], tasks=tasks_each[k], widest=widest_each[k], cores=cores[k],
                       efficiency=float(efficiency[k]), error=errors[k], batches=len(tables[k]),
                       row_cost_trusted=trusted[k], executor_counts=tuple(int(c) for c in counts[k]),
                       efficiency_by_executors={int(c): m for c, m in by_size[k].items()}), new_splits[k])
            for k in range(k_count)]


def _efficiency_at(by_size: Sequence[dict[float, float]], overall: np.ndarray,
                   sizes: np.ndarray) -> np.ndarray:
    """:meth:`BatchCost.efficiency_at` of each row's sizes, for rows of fits (``by_size``: each one's
    efficiency by size seen, ascending; ``overall``: each one's overall efficiency)."""
    most = max((len(seen) for seen in by_size), default=0)
    if not most:
        return np.broadcast_to(overall[:, None], sizes.shape)
    known = np.full((len(by_size), most), np.inf)
    values = np.zeros((len(by_size), most))
    for k, seen in enumerate(by_size):
        known[k, :len(seen)] = list(seen)
        values[k, :len(seen)] = list(seen.values())
    # The nearest size seen, the smaller of two as near (argmin takes the first, and they ascend).
    with np.errstate(invalid="ignore"):
        nearest = np.abs(sizes[:, :, None] - known[:, None, :]).argmin(axis=2)
    at = np.take_along_axis(values, nearest, axis=1)
    return np.where(np.array([bool(seen) for seen in by_size])[:, None], at, overall[:, None])


def _task_times(rows: np.ndarray, used: np.ndarray, task: np.ndarray, valid: np.ndarray,
                splits: Sequence[Split | None]
                ) -> tuple[list[float], list[float], list[float], list[bool], list[Split | None]]:
    """Per query (a row of the arrays): (fixed, per executor, per row, trusted) for task time = fixed
    + per_exec x E + per_row x rows, by least squares with outliers dropped; the per-executor term
    only when the executors used varied and it comes out sane (else the fit without it), the
    per-row term only when it is well determined; and the split of task time trusted after it."""
    ones = np.ones_like(rows)
    varied = (np.where(valid, used, -np.inf).max(axis=1)
              != np.where(valid, used, np.inf).min(axis=1)).tolist()
    attempts = [(_robust_fit(np.stack([ones, rows, used], axis=2), task, valid), varied),
                (_robust_fit(np.stack([ones, rows], axis=2), task, valid), [True] * len(splits))]
    # A term that adds less than rounding to any batch's task time is 0 (exact figures, e.g. a
    # constant task time, left signs and standard errors to rounding, and the fit to chance).
    largest = [np.where(valid, np.abs(column), 0.0).max(axis=1)[:, None] for column in (ones, rows, used)]
    floor = _ROUNDING * np.where(valid, np.abs(task), 0.0).max(axis=1)[:, None]
    for (coef, _, _, _), _ in attempts:
        terms = len(coef[0])
        coef[np.abs(coef) * np.hstack(largest[:terms]) <= floor] = 0.0
    # The figures the choice below reads, for every query at once.
    listed = [(coef.tolist(), se.tolist(), ok.tolist(), _kept_mean(used, keep).tolist(), tried)
              for (coef, se, ok, keep), tried in attempts]
    keep = attempts[1][0][3]  # the points the fit without executors kept (tried last)
    fallback = zip(np.where(keep, rows, 0.0).sum(axis=1).tolist(),
                   np.where(keep, task, 0.0).sum(axis=1).tolist(), keep.sum(axis=1).tolist(), strict=True)
    out: tuple[list[float], list[float], list[float], list[bool], list[Split | None]] = ([], [], [], [], [])
    for k, (split, (total_rows, total_task, n)) in enumerate(zip(splits, fallback, strict=True)):
        found = None
        for coef, se, ok, used_mean, tried in listed:
            if not (tried[k] and ok[k]):
                continue
            fixed, per_row = coef[k][0], coef[k][1]
            per_exec = coef[k][2] if len(coef[k]) > 2 else 0.0
            well_determined = per_row > 0 and se[k][1] <= MAX_ROW_COST_ERROR * per_row
            if well_determined and fixed >= 0 and per_exec >= 0:
                found = (fixed, per_exec, per_row, True, (fixed + per_exec * used_mean[k], per_row))
                break
        if found is None:
            # Not identifiable from these batches (steady load, rows hardly varied): keep the last
            # trusted per-row cost, with the fixed part whatever the batches' mean leaves; before
            # any, the plain average (every second of task time charged to the rows).
            if split is not None:
                mean_rows, mean_task = total_rows / n, total_task / n
                per_row = min(split[1], mean_task / max(mean_rows, _EPS))
                found = (max(0.0, mean_task - per_row * mean_rows), 0.0, per_row, False, split)
            else:
                found = (0.0, 0.0, total_task / max(total_rows, _EPS), False, None)
        for column, value in zip(out, found, strict=True):
            column.append(value)  # type: ignore[attr-defined]
    return out


def _kept_mean(values: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """The mean of each row's ``keep`` values (NaN where none)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(keep, values, 0.0).sum(axis=1) / keep.sum(axis=1)


# What a fit reads of each batch, in this order; 0 stands for "not known", NaN for an unknown task phase.
_COLUMNS = ("rows", "task_s", "tasks", "executors", "executors_used", "concurrent_task_s",
            "concurrent_tasks", "duration_s", "task_wall_s")
_ALONGSIDE_S, _ALONGSIDE_TASKS = _COLUMNS.index("concurrent_task_s"), _COLUMNS.index("concurrent_tasks")


class _Rows:
    """A learner's kept batches' figures (:data:`_COLUMNS`), oldest first, at most ``size`` of them,
    and as an array for a fit: each row converted once, at the first fit after it came."""

    def __init__(self, size: int) -> None:
        self._rows: deque[tuple[float, ...]] = deque(maxlen=size)
        self._array: np.ndarray | None = None  # the rows when last asked for, less the `_new` since
        self._new = 0

    def append(self, row: tuple[float, ...]) -> None:
        self._rows.append(row)
        self._new += 1

    def __getitem__(self, i: int) -> tuple[float, ...]:
        return self._rows[i]

    def __setitem__(self, i: int, row: tuple[float, ...]) -> None:
        self._rows[i] = row
        self._array = None

    def array(self) -> np.ndarray:
        """The rows, oldest first (read-only)."""
        count = len(self._rows)
        if self._array is None or self._new >= count:
            table = np.array(self._rows, dtype=float).reshape(-1, len(_COLUMNS))
        else:
            new = np.array(list(islice(self._rows, count - self._new, None)), dtype=float)
            kept = self._array[len(self._array) + self._new - count:]
            table = np.concatenate([kept, new.reshape(-1, len(_COLUMNS))])
        table.flags.writeable = False
        self._array, self._new = table, 0
        return table


def _columns(b: BatchRecord, alongside_s: float, alongside_tasks: int) -> tuple[float, ...]:
    """A batch's figures as :data:`_COLUMNS` name them, with what ran alongside it."""
    return (b.rows, b.task_s or 0.0, b.tasks or 0, b.executors or 0, b.executors_used or 0,
            alongside_s, alongside_tasks, b.duration_s,
            math.nan if b.task_wall_s is None else b.task_wall_s)


def _available(executors: np.ndarray, used: np.ndarray, tasks: np.ndarray,
               cores: int | np.ndarray) -> np.ndarray:
    """The executors each batch ran on as far as its speed goes (0: not known): the live ones,
    except where its tasks could have spread over more of them than they did. An executor being
    removed (the autoscaler's first convergence, a scale-down) or lost runs no task however long
    its removal takes to be announced, and a few short tasks may all land on one executor;
    counting the others gave such a batch slots it never used, and one batch of 4 tasks on 1 of 5
    executors an efficiency of 3 at 5 executors, against which no scale-up looked useful (real
    Spark). Columns as :func:`_fit_tables` reads them (0 for not known)."""
    spread = executors_for(tasks, cores)
    narrower = (executors > 0) & (used > 0) & (tasks > 0) & (used < np.minimum(executors, spread))
    return np.where(narrower, used, np.where(executors > 0, executors, used))


def _agree(pts: Sequence[BatchRecord]) -> bool:
    """Two batches whose task time per row is within :data:`EARLY_AGREEMENT` of each other."""
    if len(pts) != 2 or not all(b.rows > 0 and b.task_s for b in pts):
        return False
    a, b = ((x.task_s or 0.0) / x.rows for x in pts)
    return abs(a - b) <= EARLY_AGREEMENT * max(a, b)


def _robust_fit(x: np.ndarray, y: np.ndarray, valid: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Least squares, then again without the points far off the first fit, for each row of the
    arrays (``x``: query x batch x column, ``valid``: the batches there are): (coefficients,
    standard errors, whether a fit was made, the points kept)."""
    keep = valid.copy()
    k_count, _, p = x.shape
    coef, se = np.zeros((k_count, p)), np.zeros((k_count, p))
    fitted = np.zeros(k_count, dtype=bool)
    going = np.ones(k_count, dtype=bool)
    for _ in range(2):
        attempt, errors, ok = _least_squares(x, y, keep)
        ok &= going
        coef = np.where(ok[:, None], attempt, coef)
        se = np.where(ok[:, None], errors, se)
        fitted |= ok
        going &= ok
        residual = y - (x @ attempt[:, :, None])[:, :, 0]
        spread = _masked_median(np.abs(residual - _masked_median(residual, keep)[:, None]), keep)
        # Residuals of exact figures (a constant task time) are rounding: no point is off the fit.
        spread = np.where(spread > _ROUNDING * np.where(valid, np.abs(y), 0.0).max(axis=1), spread, 0.0)
        with np.errstate(invalid="ignore"):
            near = np.abs(residual) <= OUTLIER_MADS * 1.4826 * spread[:, None]
            inliers = np.where((spread > 0)[:, None], near, keep) & valid
        going &= (inliers.sum(axis=1) >= MIN_BATCHES) & ~(inliers == keep).all(axis=1)
        keep = np.where(going[:, None], inliers, keep)
        if not going.any():
            break
    return coef, se, fitted, keep


def _least_squares(x: np.ndarray, y: np.ndarray,
                   keep: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Coefficients and their standard errors over the ``keep`` points of each row, and whether
    there is a fit (no: the columns do not vary enough to tell them apart). Columns are scaled to
    unit size first (rows run to thousands, the intercept is 1), so the conditioning test is about
    the data, not its units."""
    _, _, p = x.shape
    n = keep.sum(axis=1)
    kept = np.where(keep[:, :, None], x, 0.0)
    # (Over the last axis of a copy: numpy reduces over the middle axis of (query, batch, 3) ten
    # times slower. The same maxima.)
    scale = np.maximum(np.ascontiguousarray(np.abs(kept).transpose(0, 2, 1)).max(axis=2), _EPS)
    xs = kept / scale[:, None, :]
    gram = xs.transpose(0, 2, 1) @ xs
    ok = n > p
    gram = np.where(ok[:, None, None], gram, np.eye(p))  # (a placeholder where there is no fit)
    singular = np.linalg.svd(gram, compute_uv=False)  # the condition number: largest over smallest
    with np.errstate(invalid="ignore", divide="ignore"):
        ok &= singular[:, 0] / singular[:, -1] <= 1e10
    inverse = np.linalg.inv(np.where(ok[:, None, None], gram, np.eye(p)))
    coef = ((inverse @ xs.transpose(0, 2, 1)) @ np.where(keep, y, 0.0)[:, :, None])[:, :, 0]
    residual = np.where(keep, y - (xs @ coef[:, :, None])[:, :, 0], 0.0)
    variance = (residual * residual).sum(axis=1) / np.maximum(n - p, 1)
    se = np.sqrt(np.maximum(np.diagonal(inverse, axis1=1, axis2=2) * variance[:, None], 0.0))
    return coef / scale, se / scale, ok


def _masked_median(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The median of each row's ``mask`` values (NaN where there is none): the middle one, or the
    mean of the two middle ones, as :func:`statistics.median` takes it."""
    ordered = np.sort(np.where(mask, values, np.inf), axis=1)
    n = mask.sum(axis=1)
    each = np.arange(len(ordered))
    low = ordered[each, np.maximum(n - 1, 0) // 2]
    high = ordered[each, np.minimum(n // 2, ordered.shape[1] - 1)]
    return np.where(n > 0, (low + high) / 2, np.nan)


def _group_medians(values: np.ndarray, groups: np.ndarray, mask: np.ndarray) -> list[dict[float, float]]:
    """Per row: the median of its ``mask`` values in each group (the value of ``groups`` there),
    ascending by group."""
    # Each row's values sorted by value, then stably by group, the masked-out ones last: sorts of
    # rows of a hundred (np.lexsort of all the rows' values at once took a millisecond). Values
    # that tie are equal, so the first sort need not be stable.
    by_value = np.argsort(np.where(mask, values, np.inf), axis=1)
    g = np.take_along_axis(np.where(mask, groups, np.inf), by_value, axis=1)
    by_group = np.take_along_axis(by_value, np.argsort(g, axis=1, kind="stable"), axis=1)
    counts = mask.sum(axis=1)
    kept = np.arange(mask.shape[1]) < counts[:, None]
    row = np.repeat(np.arange(len(counts)), counts)
    g, v = (np.take_along_axis(column, by_group, axis=1)[kept] for column in (groups, values))
    out: list[dict[float, float]] = [{} for _ in range(values.shape[0])]
    if not len(row):
        return out
    starts = np.flatnonzero(np.concatenate([[True], (row[1:] != row[:-1]) | (g[1:] != g[:-1])]))
    sizes = np.diff(np.append(starts, len(row)))
    middle = ((v[starts + (sizes - 1) // 2] + v[starts + sizes // 2]) / 2).tolist()
    for r, group, m in zip(row[starts].tolist(), g[starts].tolist(), middle, strict=True):
        out[r][group] = m
    return out
