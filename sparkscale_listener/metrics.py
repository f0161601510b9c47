"""The data model shared by collection, evaluation, checking and realization.

A collector produces one :class:`MetricSample` per control tick. Counters are cumulative
(monotonic since the autoscaler started), so any two samples give exact rates over the time
between them; gauges (backlog, live executors, heap) are the value at the sample's instant.
Everything here is plain, immutable data so that recorded or simulated series can drive the
evaluator and the checkers without Spark.
"""

from __future__ import annotations

from dataclasses import dataclass, field


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
    last_batch_start: float | None = None  # when the last completed batch started (progress timestamp)
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
    # Extra metrics from a custom collector (the seed's queryExternalMetrics), for example
    # {"backlog.<query name or id>": 1234.0}; the default evaluator reads "backlog.*" keys.
    external: dict[str, float] = field(default_factory=dict)
