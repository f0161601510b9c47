"""The data model shared by collection, evaluation, checking and realization.

A collector produces one :class:`MetricSample` per control tick. Counters are cumulative
(monotonic since the autoscaler started), so any two samples give exact rates over the time
between them; gauges (backlog, live executors, heap) are the value at the sample's instant.
Everything here is plain, immutable data so that recorded or simulated series can drive the
evaluator and the checkers without Spark.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


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
    """What one source of a query still has to read, as its progress reports it."""

    description: str
    backlog: float | None  # None: this source reports no backlog (e.g. the `rate` source)
    unit: str = "rows"  # "rows", "offsets" (Kafka), "files"


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
    backlog: float | None = None  # sum over sources that report one; None if none does
    backlog_sources: tuple[SourceBacklog, ...] = ()
    input_rate: float = 0.0  # last progress inputRowsPerSecond
    processed_rate: float = 0.0  # last progress processedRowsPerSecond
    last_batch_duration_ms: float | None = None
    trigger_interval_ms: float | None = None  # None: default trigger (next batch at once)
    last_progress_time: float | None = None  # seconds, same clock as MetricSample.time
    # --- from the JVM listener, attributed through the job property sql.streaming.queryId
    busy_ms: float = 0.0  # task time, finished tasks plus the elapsed part of running ones
    tasks_finished: int = 0
    tasks_failed: int = 0
    max_stage_tasks: int | None = None  # widest recent stage: the useful-parallelism cap
    # --- lifecycle
    active: bool = True
    exception: str | None = None  # set when the query terminated with an error
    failed_batches: int = 0


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

    @property
    def total_slots(self) -> int:
        return self.live_executors * self.cores_per_executor

    def live(self) -> tuple[ExecutorInfo, ...]:
        return tuple(e for e in self.executors if e.removed_time is None)


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
            if key and f"backlog.{key}" in self.external:
                return self.external[f"backlog.{key}"], f"backlog.{key}"
        return None, ""
