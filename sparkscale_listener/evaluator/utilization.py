"""How busy a number of executors keeps a query, and how many slots its task time keeps busy: for
one query at a few sizes (numbers or arrays) and for many queries at every size at once (the
:class:`Scan`, on the queries' :class:`~sparkscale_listener.model.CostColumns`): the same functions
either way, so the figures are the same."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import numpy as np

from ..model import NONE_CONCURRENT, BatchCost, Concurrent, CostColumns, CostFormulas, Size, ops
from .demand import Demand

# Utilization figures in reasons and gauges are bounded: a query that cannot keep up at all is
# "at least this" busy, never 170x.
MAX_UTILIZATION = 10.0
_EPS = 1e-9


def query_utilization(d: Demand, cost: BatchCost, executors: Size, target: float,
                 concurrent: Concurrent = NONE_CONCURRENT) -> Size:
    """How busy ``executors`` (a count or an array of counts) keep the query, on the scale of
    ``utilization.target``: the arrivals over what the executors can do.

    With a trigger: a batch period's worth of arrivals (the period below) over the rows a batch
    can read and still end within the period (within driver time / ``utilization.target`` when
    the driver alone takes longer). At the target, a batch of ``rate / utilization.target`` rows (Flink's
    headroom, in rows) ends exactly within the interval. The headroom is in rows, not in time:
    what a batch pays whatever its rows (the driver, a fixed cost per task) does not grow with
    the load, and asking for it to fit in 70 % of the interval held executors that only
    shortened a fast query's batches. For the same reason the reading is not the batch's
    share of the interval: with large fixed costs that share stays low while the rows a batch
    can still take are nearly used up (a real query read 0.84 on that scale with batches as
    long as the trigger, and its scale-up came as lag built). (A read-limited query is sized
    the same way on the limit: the same size whether its batches show the limit or not.)

    The interval is the query's batch period (:attr:`Demand.period_s`): its trigger, or half of
    ``backlogThreshold`` where that is longer or there is no trigger. A short trigger with large
    fixed costs per batch otherwise held executors that only shortened batches no user waits
    for (a stateful batch's fixed cost can exceed a 1 s trigger at any size): back to back, a
    batch reads what arrived during the previous one, and at the target's arrivals a row waits
    at most two periods, ``backlogThreshold``. At the arrivals themselves the lag's peaks must
    stay within half of it (:attr:`Demand.fresh_period_s`, a quarter of it, where longer than
    the trigger): a batch of those arrivals over a quarter of ``backlogThreshold``, without the
    headroom, must end within it too, and the reading is the higher of the two. The room
    between is for bursts and provisioning. Batches of the other queries with the same trigger
    are taken as running at that period too (their task time scaled to it). Without a trigger
    and without a period (``backlogThreshold`` 0): the rate over the rows/s the executors can
    do."""
    rows = d.rows_per_period()
    if d.idle or (rows is not None and rows <= 0):
        return 0.0 * executors
    period = d.period_s or d.trigger_s
    if rows is not None and period:
        within = _fraction_of_period(cost, executors, rows / target, period, d.trigger_s, target,
                                     concurrent)
        if d.fresh_period_s:
            fresh = _fraction_of_period(cost, executors, d.rows_per_fresh_period(), d.fresh_period_s,
                                        d.trigger_s, target, concurrent)
            within = ops(within).maximum(within, fresh)
        if not d.limit_binds:
            return within
        # Batches of the limit back to back can do no more than the limit per batch time: a
        # bigger batch would spread its fixed costs thinner, but none reads more. (Sized on the
        # trigger instead, a real 120 rows/s with a backlog went to 6 executors; 3 did 158.)
        back_to_back = cost.throughput(executors, d.read_limit, None, concurrent)
        return ops(within).maximum(within, d.sized_rate / back_to_back)
    # Batch after batch of at most the read limit (0 when the capacity is unbounded).
    return d.sized_rate / cost.throughput(executors, d.read_limit, None, concurrent)

def query_busy_slots(d: Demand, cost: BatchCost, executors: Size) -> Size:
    """Slots the query's task time keeps busy on average: the share of the executors it takes
    from the other queries."""
    if d.idle or d.target <= 0:
        return 0.0 * executors
    xp = ops(executors)
    rows = d.rows_per_period()
    allowed = d.period_s or d.trigger_s
    if rows is not None and allowed:
        # At the period sized for: a fixed cost per batch repeated more often than the lag
        # needs holds no slot (batches lengthen and take more rows each when slots are short).
        # Where a read limit caps a batch's rows, those rows come sooner, and batches of the
        # limit follow one another that often (at the period, a query whose limit binds read
        # as using a fraction of the slots it kept busy: a backlog grew behind it, in the band).
        return _busy_fraction(cost, executors, rows, d.arrival_span(rows, allowed))
    period = cost.steady_batch_time(d.sized_rate, executors, None)
    unbounded = xp.isinf(period)
    finite = xp.where(unbounded, 1.0, period)
    return xp.where(unbounded, executors * cost.cores,
                    cost.task_time(d.sized_rate * finite, executors) / xp.maximum(finite, _EPS))


def _fraction_of_period(cost: CostFormulas, executors: Size, rows: Size, period: Size,
                        trigger_s: Size | None, target: float, concurrent: Concurrent) -> Size:
    """How much of ``period`` a batch of ``rows`` takes beyond its part that no rows pay, over what
    is left of the period beside that part, on the scale of ``target``: at ``target`` the batch ends
    exactly within the period (within driver time / ``target`` when the driver alone takes
    longer). Where not even a batch without rows ends within it, sizes rank above every size where
    one does, by their batch time. Other queries' batches beside it (``concurrent``, at the trigger)
    are taken as running at that period too. One query (numbers) or many (columns: the scan)."""
    trigger = 0.0 if trigger_s is None else trigger_s
    xp = ops(executors, rows, period, trigger)
    stretch = xp.where((trigger > 0) & (period > trigger), period / xp.maximum(trigger, _EPS), 1.0)
    concurrent = Concurrent(concurrent.task_s * stretch, concurrent.tasks)
    allowed = xp.maximum(period, cost.driver_s / target)
    # Batch time is a fixed part plus a part per row: the rows a batch can take within ``allowed``
    # follow from two points, its time with none and with ``rows``.
    fixed = cost.batch_time(0.0, executors, concurrent)
    loaded = cost.batch_time(rows, executors, concurrent)
    spare = allowed - fixed
    fits = xp.minimum(target * (loaded - fixed) / xp.maximum(spare, _EPS), MAX_UTILIZATION)
    return xp.where(spare > _EPS, fits, MAX_UTILIZATION * loaded / allowed)


def _busy_fraction(cost: CostFormulas, executors: Size, rows: Size, arrive: Size) -> Size:
    """Slots a query's batches of ``rows`` keep busy on average when their rows come ``arrive``
    seconds apart: their task time over the longer of that and their batch time. One query or
    many, as :func:`_fraction_of_period`."""
    period = ops(executors, arrive).maximum(arrive, cost.batch_time(rows, executors))
    return cost.task_time(rows, executors) / period


class ScanQueries:
    """The per-query figures a :class:`Scan` reads: the rows of a period, its period, its trigger
    (placeholders off the scan's path) and its cost, one per query (made once a tick: two scans
    read them)."""

    def __init__(self, known: Sequence[tuple[Demand, BatchCost]], target: float) -> None:
        self.target = target
        self.common: list[bool] = []
        self.rows: list[float] = []
        self.period: list[float] = []
        self.trigger: list[float] = []
        # At the arrivals themselves, where a fresh period applies (else no rows: they read 0).
        self.fresh_rows: list[float] = []
        self.fresh_period: list[float] = []
        self.arrive: list[float] = []
        for d, _ in known:
            rows = d.rows_per_period()
            period = d.period_s or d.trigger_s
            common = (not d.idle and d.target > 0 and bool(period) and rows is not None and rows > 0
                      and not d.limit_binds)
            self.common.append(common)
            self.rows.append(rows if common and rows is not None else 0.0)
            self.period.append((period or 1.0) if common else 1.0)
            # (No trigger: the period itself, so that nothing is scaled to it: no batch runs beside.)
            self.trigger.append((d.trigger_s or period or 1.0) if common else 1.0)
            fresh = common and bool(d.fresh_period_s)
            self.fresh_rows.append(d.rows_per_fresh_period() if fresh else 0.0)
            self.fresh_period.append((d.fresh_period_s or 1.0) if fresh else 1.0)
            # How soon a period's rows come (sooner where a read limit caps them): see query_busy_slots.
            self.arrive.append(d.arrival_span(self.rows[-1], self.period[-1]) if common else self.period[-1])
        self.has_fresh = np.array([r > 0 for r in self.fresh_rows], dtype=bool).reshape(-1, 1)
        self.costs = [c for _, c in known]


def _column(values: Iterable[float]) -> np.ndarray:
    return np.array(list(values), dtype=float).reshape(-1, 1)


# The scan computes this many figures (queries x sizes) at a time: a block's matrices, at most 128
# KB each, are reused by the C library from one operation to the next. The whole scan's at once
# (0.8 MB each at 100 queries x 1,000 sizes) were given back to the system as each was freed and
# faulted in again at the next, and the scan took three times as long.
BLOCK_FIGURES = 16384


class Scan:
    """:func:`query_utilization` and :func:`query_busy_slots` of
    many queries at every size at once, on their common path (a period, rows to read, no binding
    read limit): one row per query, one column per size, through the same functions on the
    queries' :class:`~.model.CostColumns`, a block of queries at a time. Rows off that path
    (:attr:`ScanQueries.common` false) hold placeholders: the evaluator computes them one by
    one."""

    def __init__(self, queries: ScanQueries, executors: np.ndarray,
                 efficiency: Sequence[Sequence[float] | np.ndarray]) -> None:
        self.queries = q = queries
        self.shape = (len(q.costs), executors.size)
        step = max(1, BLOCK_FIGURES // max(1, executors.size))
        self.blocks = [(slice(i, i + step),
                        CostColumns(q.costs[i:i + step], executors, efficiency[i:i + step]))
                       for i in range(0, len(q.costs), step)]
        self.headroom_rows = _column(r / q.target for r in q.rows)
        self.rows, self.period, self.trigger = _column(q.rows), _column(q.period), _column(q.trigger)
        self.fresh_rows, self.fresh_period = _column(q.fresh_rows), _column(q.fresh_period)
        self.arrive = _column(q.arrive)

    def _each(self, block_figures: Callable[[slice, CostColumns], np.ndarray]) -> np.ndarray:
        """A matrix of the scan's shape, its rows computed block by block."""
        figures = np.empty(self.shape)
        for rows, costs in self.blocks:
            figures[rows] = block_figures(rows, costs)
        return figures

    def task_time(self, rows: Sequence[float]) -> np.ndarray:
        """:meth:`~.model.CostFormulas.task_time` of each query's ``rows`` at every size."""
        column = _column(rows)
        return self._each(lambda b, costs: costs.task_time(column[b], costs.sizes))

    def steady_batch_time(self, rates: Sequence[float], triggers: Sequence[float | None],
                          column: int) -> list[float]:
        """:meth:`~.model.CostFormulas.steady_batch_time` of each query at ``rates`` on the size of
        ``column``, alone on the executors."""
        rate, trigger = _column(rates), _column(t or 0.0 for t in triggers)
        times: list[float] = []
        for b, costs in self.blocks:
            at = costs.at(column)
            times.extend(at.steady_batch_time(rate[b], at.sizes, trigger[b]).ravel().tolist())
        return times

    def utilization(self, beside_s: np.ndarray, beside_tasks: np.ndarray) -> np.ndarray:
        """:func:`query_utilization`, other batches running alongside: their task
        time (a row per query, a column per size) and tasks (one per query). The higher of the
        headroom's rows over the period and, where a fresh period applies, the arrivals over it."""
        target, has_fresh, tasks = self.queries.target, self.queries.has_fresh, _column(beside_tasks)

        def block(b: slice, costs: CostColumns) -> np.ndarray:
            concurrent = Concurrent(beside_s[b], tasks[b])
            utilization = _fraction_of_period(costs, costs.sizes, self.headroom_rows[b], self.period[b],
                                              self.trigger[b], target, concurrent)
            if has_fresh[b].any():
                fresh = _fraction_of_period(costs, costs.sizes, self.fresh_rows[b], self.fresh_period[b],
                                            self.trigger[b], target, concurrent)
                utilization = np.where(has_fresh[b], np.maximum(utilization, fresh), utilization)
            return utilization

        return self._each(block)

    def busy_slots(self) -> np.ndarray:
        """:func:`query_busy_slots`."""
        return self._each(lambda b, costs: _busy_fraction(costs, costs.sizes, self.rows[b], self.arrive[b]))
