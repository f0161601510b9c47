"""The oracle the benchmarks and tests score against: the fewest executors that keep steady,
noise-free loads within a utilization target, as the simulation runs them."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from .slots import _fair_share, _waves_parallelism
from .workload import SimQuery


def smallest_sufficient_executors(queries: Sequence[SimQuery], load: Mapping[str, float],
                                  cores_per_executor: int, utilization_target: float,
                                  max_executors: int = 1000,
                                  backlog_threshold_s: float | None = None) -> int:
    """The oracle: the fewest executors on which the steady, noise-free ``load`` (rows/s per query
    name) keeps within ``utilization_target``, as the simulator runs it. A query with a trigger
    reads a trigger interval's rows per batch; its batch (the driver part, then its task time on
    the slots it gets, in waves) must take at most the target share of the interval, the batches
    of queries with one trigger interval starting together and sharing the slots
    (:func:`aligned_batch_times`). A query without one runs batch after batch: the share of its
    tasks' slots its rows keep busy must stay at most the target.

    With ``backlog_threshold_s`` (the lag a user accepts), a query without a trigger or with one
    shorter than half of it is sized on its lag instead, as sparkscale sizes it: batches may run
    back to back, a row waiting at most two batch periods. Alone on the slots (at most its
    partitions, in waves), a batch of half the threshold's arrivals over the target must end within
    half of it (the lag within the threshold at the headroom's load), and where a quarter of it is
    longer than the trigger, a batch of a quarter's arrivals within a quarter (the lag within half
    of it at the load); batches of its read limit, back to back, must do the arrivals over the
    target where a period's rows exceed the limit; and all queries' task time must fit in the
    slots. Where no size keeps it within the target, a slot per partition does."""
    half = backlog_threshold_s / 2.0 if backlog_threshold_s else None

    def period_of(q: SimQuery) -> float | None:
        """The longest batch period a query sized on its lag may run at, at the headroom's load;
        None for one sized on its trigger."""
        if half is None or (q.trigger_interval_s or 0.0) >= half:
            return None
        return half

    def fresh_of(q: SimQuery) -> float | None:
        """... and at the load itself, where that is longer than its trigger."""
        quarter = half / 2.0 if half else None
        return quarter if quarter and (q.trigger_interval_s or 0.0) < quarter else None

    def fits(executors: int) -> bool:
        slots = executors * cores_per_executor
        used_by = {q.name: min(executors, math.ceil(q.partitions / cores_per_executor)) for q in queries}
        fixed_of = {q.name: q.partitions * q.task_overhead_s + used_by[q.name] * q.executor_overhead_s
                    for q in queries}
        on_trigger = [q for q in queries if period_of(q) is None]
        triggers = {q.trigger_interval_s for q in on_trigger if q.trigger_interval_s and load[q.name] > 0}
        for trigger in triggers:
            group = [q for q in on_trigger if q.trigger_interval_s == trigger]
            times = aligned_batch_times(group, load, executors, cores_per_executor)
            if any(time_s > utilization_target * trigger + 1e-9 for time_s in times.values()):
                return False
        free = [q for q in on_trigger if not q.trigger_interval_s and load[q.name] > 0]
        for q in free:
            usable = _waves_parallelism(q, min(float(q.partitions), float(slots) / len(free)))
            if load[q.name] * q.cost_per_row > utilization_target * usable + 1e-9:
                return False
        # All of them together: their task time must leave the slots that much idle.
        busy = sum(load[q.name] * q.cost_per_row for q in queries)
        for q in queries:
            period = period_of(q) or q.trigger_interval_s
            if load[q.name] <= 0:
                continue
            if period:
                busy += fixed_of[q.name] / period
            lagged = period_of(q)
            if lagged is not None and executors < math.ceil(q.partitions / cores_per_executor):
                # (Past a slot per partition no executor shortens its batches: where none of these
                # sizes keeps it within the target, it needs what its partitions can use.)
                parallel = _waves_parallelism(q, float(slots))
                fresh = fresh_of(q)
                periods = [(load[q.name] / utilization_target, lagged)]
                periods += [(load[q.name], fresh)] if fresh is not None else []
                for rate, period in periods:
                    rows = rate * period
                    limit = q.max_rows_per_batch
                    if limit is not None and rows > limit:
                        # Batches of the limit back to back must do these arrivals.
                        batch = q.batch_overhead_s + (limit * q.cost_per_row + fixed_of[q.name]) / parallel
                        if rate * batch > limit + 1e-9:
                            return False
                        rows = limit
                    work = rows * q.cost_per_row + fixed_of[q.name]
                    if q.batch_overhead_s + work / parallel > period + 1e-9:
                        return False
        return busy <= utilization_target * slots + 1e-9

    for executors in range(1, max_executors + 1):
        if fits(executors):
            return executors
    return max_executors


def aligned_batch_times(queries: Sequence[SimQuery], load: Mapping[str, float], executors: int,
                        cores_per_executor: int) -> dict[str, float]:
    """How long each query's batch takes when all of them start together (Spark aligns
    processing-time triggers to multiples of the interval, so queries with one trigger start their
    batches at the same instant) on ``executors`` executors, for the steady ``load``: the driver
    part first, then the tasks, the slots shared max-min fairly and used in waves, as the
    simulator runs them."""
    slots = float(executors * cores_per_executor)
    left: dict[str, float] = {}
    ready: dict[str, float] = {}
    done: dict[str, float] = {}
    by_name = {q.name: q for q in queries}
    for q in queries:
        rate = load[q.name]
        if rate <= 0 or not q.trigger_interval_s:
            continue
        used = min(executors, math.ceil(q.partitions / cores_per_executor))
        left[q.name] = (rate * q.trigger_interval_s * q.cost_per_row + q.partitions * q.task_overhead_s
                        + used * q.executor_overhead_s)
        ready[q.name] = q.batch_overhead_s
    now = 0.0
    while left:
        running = [n for n in left if ready[n] <= now + 1e-12]
        if not running:
            now = min(ready[n] for n in left)
            continue
        share = _fair_share({n: min(float(by_name[n].partitions), slots) for n in running}, slots)
        speed = {n: _waves_parallelism(by_name[n], share[n]) for n in running}
        waits = [left[n] / speed[n] for n in running if speed[n] > 0]
        later = [ready[n] - now for n in left if ready[n] > now + 1e-12]
        step = min(waits + later)
        for n in running:
            left[n] -= speed[n] * step
        now += step
        for n in [n for n in running if left[n] <= 1e-9]:
            done[n] = now
            del left[n]
    return done
