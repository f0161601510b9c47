"""What the simulation runs: each query (:class:`SimQuery`: its load, cost, trigger, source and
faults) and load traces to build one with."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass
class SimQuery:
    """One simulated streaming query."""

    name: str
    load: Callable[[float], float]  # arrival rate, rows/s, at simulated time t
    cost_per_row: float  # executor slot-seconds per row
    batch_overhead_s: float = 0.5  # driver time per batch (planning, commit): no slots shrink it
    partitions: int = 64  # max parallel tasks of its widest stage
    trigger_interval_s: float | None = None  # None: the next batch starts when the last one ends
    max_rows_per_batch: float | None = None  # the source's read limit (ReadMaxRows)
    noise: float = 0.0  # arrivals are multiplied by uniform(1 - noise, 1 + noise)
    noise_period_s: float = 10.0  # how long one noise factor holds
    initial_backlog: float = 0.0  # rows waiting in the source at t = start
    reports_backlog: bool = True  # False: like the `rate` source (backlog None)
    # Fixed task time a batch pays whatever its rows (0: none, the original model). Every one of
    # its ``partitions`` tasks pays ``task_overhead_s`` slot-seconds (scheduling, deserializing,
    # the sink's file per task), and every executor its tasks land on, min(live executors,
    # ceil(partitions / cores)), pays ``executor_overhead_s`` (a Python worker, a connection), so a
    # batch spread over more executors costs more in total. Counted in the query's task time.
    task_overhead_s: float = 0.0
    executor_overhead_s: float = 0.0
    # Fault injection: the query terminates with an exception when fewer executors are live.
    query_fails_below_executors: int | None = None
    # Tasks run in waves, as Spark schedules them: T equal tasks on P slots take ceil(T / P)
    # rounds, so 5 slots finish 8 tasks no sooner than 4 do. False: a fluid model (any share of
    # a slot is used).
    waves: bool = True
    # Extra task time (slot-seconds) a batch pays per executor that runs its first task of the
    # query in it: new executors' first batch is slow (Python workers starting, classes loading).
    new_executor_warmup_s: float = 0.0
    # Opt-in, for replaying a recorded query (sparkscale_listener.replay). ``efficiency`` > 1
    # stretches every task phase by that factor at the same task time (skewed tasks and stragglers
    # leave slots idle: the model's BatchCost.efficiency). ``batch_work(t, n, rows, work)``: the
    # task time the query's batch number ``n`` (from 0) of ``rows`` rows, starting at ``t``, pays
    # instead of the modelled ``work`` (a recorded query's cold start, its costlier stretches).
    efficiency: float = 1.0
    batch_work: Callable[[float, int, float, float], float] | None = None
    # Its first trigger runs a batch even with nothing to read, as Spark's first batch of a source
    # that starts from its latest offsets does (a replayed query whose first batch read no rows).
    empty_first_batch: bool = False
    # Its source's latest offsets are read between batches, as sparkscale's bridge reads a Kafka
    # source's (every row that arrived, at each sample).
    latest_offsets: bool = False
    # Rows come in files of this many (a file source): a batch reads whole files only, and none
    # until a file is complete. None: rows one by one.
    rows_per_file: float | None = None
    # Each batch's driver time is scaled by uniform(1 - jitter, 1 + jitter): planning and commits
    # vary from batch to batch on a real driver. 0: every batch's the same.
    batch_jitter: float = 0.0


def loads_at(queries: Sequence[SimQuery], t: float) -> dict[str, float]:
    """Each query's (noise-free) arrival rate at time ``t``."""
    return {q.name: q.load(t) for q in queries}


def step_load(before: float, after: float, at: float) -> Callable[[float], float]:
    """A load trace that jumps from ``before`` to ``after`` rows/s at time ``at``."""
    return lambda t: before if t < at else after
