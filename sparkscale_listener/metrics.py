"""The data model shared by collection, evaluation, checking and realization.

A collector produces one :class:`MetricSample` per control tick. Counters are cumulative
(monotonic since the autoscaler started), so any two samples give exact rates over the time
between them; gauges (backlog, live executors, heap) are the value at the sample's instant.
Everything here is plain, immutable data so that recorded or simulated series can drive the
evaluator and the checkers without Spark.
"""

from __future__ import annotations

import math
import operator
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

# Arrivals this much above those before them mean the load is rising: the evaluator holds off any
# scale-down and sizes the step, and the progress recorder wakes the control loop for it.
RISING = 0.5


def finite_float(value: Any, default: float = 0.0) -> float:
    """A number from a snapshot or a progress event; missing, null, text or non-finite ->
    ``default`` (the JVM and Spark's JSON use -1, null and "NaN" for "unknown")."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return default
    return number if math.isfinite(number) else default


def executor_id_order(executor_id: str) -> tuple[int, int | str]:
    """Sort key: numeric ids in numeric order ("2" before "10"), others after. Every cluster
    manager Spark ships uses numeric ids, but nothing guarantees it."""
    return (0, int(executor_id)) if executor_id.isdigit() else (1, executor_id)


@dataclass(frozen=True)
class SourceBacklog:
    """What one source of a query still has to read, in the unit its progress reports.

    The autoscaler works in rows (the unit of the arrival rate), so a backlog in another unit is
    converted with ``rows_per_unit``, learned from the source's own batches (rows read / offsets or
    files read). A backlog without a known conversion is kept here for people to see but is not
    counted in the query's backlog; ``problem`` says why, as it does for a lag that makes no sense.
    """

    description: str
    backlog: float | None  # in `unit`; None: no backlog (e.g. the `rate` source) or none usable
    unit: str = "rows"  # "rows", "offsets" (Kafka), "files" (file and Delta sources)
    rows_per_unit: float | None = None  # None: not known (always 1 for rows)
    problem: str | None = None  # why this source gives no usable backlog in rows, if it does not

    @property
    def rows(self) -> float | None:
        """The backlog in rows, or None when there is none or it cannot be converted."""
        if self.backlog is None:
            return None
        if self.unit == "rows":
            return self.backlog
        return None if self.rows_per_unit is None else self.backlog * self.rows_per_unit

    @property
    def nonsense(self) -> bool:
        """The source reported a lag, but one that cannot be true (negative, larger than the log,
        partitions gone): the query's backlog is then unknown, not this source's part left out."""
        return self.backlog is None and self.problem is not None


@dataclass(frozen=True)
class BatchRecord:
    """One completed micro-batch of a query: what its progress and its tasks tell.

    A batch reads what arrived since the previous batch started (unless a read limit binds), so
    each one gives the arrival rate (:meth:`arrival_rate`) and the time the batch took with the
    executors it ran on, without waiting for a window. ``None``: not known (an older bridge, a
    replayed log without task events).
    """

    batch_id: int
    start: float  # seconds, same clock as MetricSample.time: when its trigger started it
    duration_s: float  # triggerExecution: driver and executors, start to commit
    rows: int  # numInputRows
    since_previous_s: float | None = None  # its start minus the previous batch's start
    backlog: float | None = None  # rows its sources had left when it was planned (latest - end)
    task_s: float | None = None  # task time of its tasks, slot-seconds
    tasks: int | None = None  # tasks it ran
    task_wall_s: float | None = None  # first task launch to last task end: what executors shorten
    executors_used: int | None = None  # distinct executors its tasks ran on
    executors: int | None = None  # executors live when it started
    fresh_executors: bool = False  # an executor joined just before or during it (its first batch)
    # Task time and tasks of other queries' batches that ran alongside it (filled in by the evaluator).
    concurrent_task_s: float = 0.0
    concurrent_tasks: int = 0

    @property
    def end(self) -> float:
        return self.start + self.duration_s

    def arrivals(self, previous_backlog: float | None) -> float:
        """Rows that arrived between the previous batch's start and this one's (:func:`rows_arrived`)."""
        return rows_arrived(self.rows, self.backlog, previous_backlog)


@dataclass(frozen=True)
class InFlightBatch:
    """The batch a query is running now, as far as its ended tasks tell: its progress comes only
    at its end, but each task that ends says how much work it read."""

    batch_id: int
    first_launch: float  # seconds, same clock as MetricSample.time: its first task launched
    tasks_ended: int
    task_s: float  # slot-seconds of its ended tasks


@dataclass(frozen=True)
class LatestOffsets:
    """The sum of the latest offsets of a query's sources when it was read, between batches (Kafka
    only; see the bridge's ``SourceOffsets``). Two readings over the same partitions tell the rows
    that arrived between them."""

    time: float  # seconds, same clock as MetricSample.time
    offsets: float
    partitions: int


def same_objects(batches: Sequence[Any], before: Sequence[Any] | None) -> tuple[int, int]:
    """(where ``batches`` start among ``before``, what was given last time; how many leading
    ``batches`` are the very objects at the same places there). Records are immutable and the
    collector hands over an unchanged batch's record as the same object, tick after tick: those
    need no second look."""
    if not before or not batches:
        return 0, 0
    for k, b in enumerate(before):  # past the batches dropped since: a few
        if b is batches[0]:
            same = list(map(operator.is_, batches, before[k:]))
            return k, same.index(False) if False in same else len(same)
    return 0, 0


def rows_arrived(rows: float, backlog: float | None, previous_backlog: float | None) -> float:
    """Rows that arrived between a batch's predecessor's start and its own: what it read plus what
    its sources' backlog grew by (nothing grows when no read limit binds)."""
    if backlog is not None and previous_backlog is not None:
        return max(0.0, rows + backlog - previous_backlog)
    return float(rows)


@dataclass(frozen=True)
class QueryMetrics:
    """One streaming query at one instant: cumulative counters plus latest gauges."""

    query_id: str
    name: str | None = None
    # --- from StreamingQueryListener progress events (cumulative over completed batches)
    batches: int = 0  # micro-batches completed (with or without data)
    input_rows: int = 0  # rows read by the completed batches
    batch_busy_ms: float = 0.0  # executor task time of exactly those completed batches
    batch_duration_ms: float = 0.0  # sum of their triggerExecution durations (driver + executors)
    # --- latest gauges
    # Rows: the sum over sources whose backlog is known in rows; None if none is, or if a source
    # reported a lag that makes no sense (see SourceBacklog.nonsense).
    backlog: float | None = None
    backlog_sources: tuple[SourceBacklog, ...] = ()
    backlog_problem: str | None = None  # why the backlog is missing or partial, for people
    input_rate: float = 0.0  # last progress inputRowsPerSecond
    processed_rate: float = 0.0  # last progress processedRowsPerSecond
    last_batch_duration_ms: float | None = None
    trigger_interval_ms: float | None = None  # None: default trigger (next batch at once)
    # Spark's real-time mode (trigger(realTime=...)): each batch's tasks hold their slots for the
    # whole batch (trigger_interval_ms is its duration), whatever the load.
    real_time: bool = False
    last_progress_time: float | None = None  # seconds, same clock as MetricSample.time
    # --- from the JVM listener, attributed through the job property sql.streaming.queryId
    busy_ms: float = 0.0  # task time, finished tasks plus the elapsed part of running ones
    tasks_finished: int = 0
    tasks_failed: int = 0
    max_stage_tasks: int | None = None  # widest recent stage: the useful-parallelism cap
    # --- the latest completed batches, oldest first (a few dozen at most)
    recent_batches: tuple[BatchRecord, ...] = ()
    in_flight: InFlightBatch | None = None  # the batch after the latest completed one, if running
    latest_offsets: LatestOffsets | None = None  # its sources' latest offsets, read between batches
    # --- lifecycle
    active: bool = True
    exception: str | None = None  # set when the query terminated with an error
    failed_batches: int = 0


# Removal reasons of executors the driver itself removed (Spark's "Executor killed by driver.",
# "Executor decommission: ..."): not losses. (A decommission may also be the cluster's, a node
# drained: where that matters, see realize/provisioning.py.)
KILLED_BY_DRIVER = "killed by driver"
DECOMMISSIONED = "decommission"
DELIBERATE_REMOVALS = (KILLED_BY_DRIVER, DECOMMISSIONED)


@dataclass(frozen=True)
class ExecutorInfo:
    executor_id: str
    host: str = ""
    cores: int = 1
    running_tasks: int = 0
    added_time: float = 0.0
    removed_time: float | None = None  # None while alive
    removed_reason: str | None = None
    tasks_failed: int = 0
    heap_used_ratio: float | None = None

    def lost_since(self, since: float, deliberate: Sequence[str] = DELIBERATE_REMOVALS) -> bool:
        """Removed at or after ``since`` for a reason that is not the driver's own (a killed JVM, a
        lost host, a preempted container): none of ``deliberate`` in it. A removal without a
        reason is not counted: it cannot be told from one of ours."""
        reason = self.removed_reason
        return (self.removed_time is not None and self.removed_time >= since and reason is not None
                and not any(r in reason.lower() for r in deliberate))


class ExecutorTimeline:
    """When an application's executors came and went, sorted once, so that asking how many were
    live at an instant, or whether one joined in a span, is a binary search: the collector asks it
    of every recent batch of every query (a pass over 1,000 executors per batch took 0.67 s of a
    collect() at 100 queries), the replay of every recorded batch and tick."""

    def __init__(self, added: Iterable[float] = (), removed: Iterable[float] = ()) -> None:
        self._added = sorted(added)
        self._removed = sorted(removed)

    @classmethod
    def of(cls, executors: Iterable[ExecutorInfo]) -> ExecutorTimeline:
        """From the collector's executors. A removal stamped before the addition (events lost)
        counts at the addition: such an executor was never live."""
        executors = list(executors)
        return cls((e.added_time for e in executors),
                   (max(e.removed_time, e.added_time) for e in executors if e.removed_time is not None))

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, ExecutorTimeline) and self._added == other._added
                and self._removed == other._removed)

    __hash__ = None  # type: ignore[assignment]  # equal by value and mutable-looking: no hashing

    def live_at(self, t: float) -> int:
        """Executors added at or before ``t`` and not removed by then."""
        return bisect_right(self._added, t) - bisect_right(self._removed, t)

    def joined_during(self, since: float, until: float) -> bool:
        """An executor added after ``since`` and by ``until``."""
        return bisect_right(self._added, until) > bisect_right(self._added, since)


@dataclass(frozen=True)
class ClusterMetrics:
    """The application's executors at one instant: shared supply for every query."""

    live_executors: int
    cores_per_executor: int
    executors: tuple[ExecutorInfo, ...] = ()  # live ones, plus recently removed ones
    slot_ms: float = 0.0  # cumulative sum over executors of cores x time alive
    busy_ms: float = 0.0  # cumulative task time of all jobs (incl. running tasks' elapsed part)
    tasks_finished: int = 0
    tasks_failed: int = 0
    executors_added: int = 0
    executors_removed: int = 0
    gc_ms: float = 0.0  # cumulative JVM GC time reported by finished tasks
    run_ms: float = 0.0  # cumulative executorRunTime of finished tasks (denominator for GC ratio)
    heap_used_ratio: float | None = None  # max over live executors of heap used / heap max
    # Pending + running tasks of active jobs outside every streaming query (a batch or ML job
    # sharing the application): demand counted as Spark's own dynamic allocation counts it.
    other_tasks: int = 0
    # Listener events known lost, cumulative: dropped by Spark's listener bus (full queue) plus
    # tasks whose end never arrived. A sample after a loss is incomplete.
    events_lost: int = 0

    def live(self) -> tuple[ExecutorInfo, ...]:
        return tuple(e for e in self.executors if e.removed_time is None)

    def live_slots(self, task_cpus: int) -> int | None:
        """Task slots of the live executors from each one's own cores (sizes may differ: a changed
        ``spark.executor.cores``, resource profiles), or None when the executors are not listed."""
        live = self.live()
        if not live or len(live) != self.live_executors:
            return None
        return sum(max(0, e.cores) // max(1, task_cpus) for e in live)


@dataclass(frozen=True)
class MetricSample:
    """Everything the autoscaler knows at one control tick."""

    time: float  # seconds; wall clock in Spark, simulated time in the simulator
    cluster: ClusterMetrics
    queries: dict[str, QueryMetrics] = field(default_factory=dict)
    # Extra metrics from a custom collector, for example {"backlog.<query name or id>": 1234.0};
    # the default evaluator and the checkers read "backlog.*" keys.
    external: dict[str, float] = field(default_factory=dict)

    def backlog_of(self, query: QueryMetrics) -> tuple[float | None, str]:
        """The query's backlog at this sample, and where it came from: "" when its sources
        reported it, else the ``backlog.<name|id>`` external metric a custom collector added."""
        if query.backlog is not None:
            return query.backlog, ""
        for key in (query.name, query.query_id):
            value = self.external.get(f"backlog.{key}") if key else None
            # A custom collector's figure, unchecked until here: inf or NaN is no reading (inf made
            # every size's utilization NaN, and the tick raised, every tick).
            if value is not None and math.isfinite(value) and value >= 0:
                return value, f"backlog.{key}"
        return None, ""


def processed_rates(history: Sequence[MetricSample], window_start: float,
                    window_s: float) -> dict[str, float]:
    """Rows/s each query processed over the last ``window_s`` (at or after ``window_start``),
    from the counters: what a scaling's effect is judged by."""
    last = history[-1]
    start = max(window_start, last.time - window_s)
    first = next((x for x in history if x.time >= start), None)
    if first is None or last.time - first.time <= 0:
        return {}
    dt = last.time - first.time
    return {qid: max(0, q.input_rows - first.queries[qid].input_rows) / dt
            for qid, q in last.queries.items() if qid in first.queries}
