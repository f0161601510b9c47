"""What a Spark event log says an application did: typed, immutable records (pure data).

:func:`sparkscale_listener.replay.eventlog.read_event_log` builds a :class:`RecordedApplication`
from a log; the replay reads only these records, never the log's JSON. Times are epoch seconds
(floats), durations milliseconds (as Spark reports them), as in :mod:`sparkscale_listener.metrics`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..metrics import ExecutorTimeline, SourceBacklog


class EventLogError(Exception):
    """A file that cannot be read as a Spark event log: it names the file and where (the line, or
    the byte offset in the compressed file) and says what was found there."""

    def __init__(self, path: str, what: str, line: int | None = None, offset: int | None = None) -> None:
        self.path, self.what, self.line, self.offset = path, what, line, offset
        where = f"line {line}" if line is not None else f"byte {offset}" if offset is not None else None
        super().__init__(f"{path}: {where}: {what}" if where else f"{path}: {what}")


@dataclass(frozen=True)
class ExecutorRecord:
    """One executor (``SparkListenerExecutorAdded`` / ``Removed``)."""

    executor_id: str
    host: str | None
    cores: int | None  # None: never announced in the log (see the application's assumptions)
    added_time: float | None  # None: it ran tasks but its addition is not in the log
    removed_time: float | None = None  # None: still alive when the log ends
    removed_reason: str | None = None


@dataclass(frozen=True)
class TaskTime:
    """The tasks of one batch (or job): what they occupied of the executors.

    ``task_ms`` sums each task's finish minus launch time: the time its slot was taken, which is
    what the autoscaler's busy time measures (``SparkscaleListener``), including deserialization
    and result sending. ``run_ms`` sums Spark's ``Executor Run Time`` (the task body only), kept
    beside it for comparison.
    """

    task_ms: float
    run_ms: float
    tasks: int
    failed_tasks: int  # ended other than Success (killed ones included); their time is counted
    executors: tuple[str, ...]  # distinct executor ids, sorted
    first_launch: float
    last_finish: float


@dataclass(frozen=True)
class SourceRecord:
    """One source of a batch, as its progress reports it; offsets are JSON values (parsed)."""

    description: str
    start_offset: Any
    end_offset: Any
    latest_offset: Any
    num_input_rows: int
    input_rows_per_second: float | None
    processed_rows_per_second: float | None
    metrics: Mapping[str, Any]
    backlog: SourceBacklog  # what it had left to read after the batch, with its rows per unit


@dataclass(frozen=True)
class BatchRecord:
    """One micro-batch that ran (a ``QueryProgressEvent`` whose ``durationMs`` has ``addBatch``),
    or a trigger that found no data (``idle_reports`` of its query)."""

    batch_id: int
    timestamp: float  # the progress ``timestamp``: when the trigger started
    duration_ms: Mapping[str, float]  # all of ``durationMs``: triggerExecution, addBatch, ...
    num_input_rows: int
    input_rows_per_second: float | None
    processed_rows_per_second: float | None
    sources: tuple[SourceRecord, ...]
    backlog_rows: float | None  # rows left to read after the batch, as the autoscaler counts them
    backlog_problem: str | None  # why the backlog is unknown or partial, if it is
    sink: str | None
    tasks: TaskTime | None  # None: no task event of this batch in the log

    @property
    def trigger_ms(self) -> float | None:
        return self.duration_ms.get("triggerExecution")

    @property
    def end_time(self) -> float | None:
        """When the batch finished: its start plus ``triggerExecution``."""
        trigger = self.trigger_ms
        return None if trigger is None else self.timestamp + trigger / 1000.0


@dataclass(frozen=True)
class QueryRecord:
    """One run of a streaming query (a restart from its checkpoint is a new run, same ``query_id``)."""

    query_id: str
    run_id: str
    name: str | None
    start_time: float | None  # ``QueryStartedEvent``; None when the log has none (see assumptions)
    # ``QueryTerminatedEvent``, which carries no time: the latest time of the events before it.
    end_time: float | None  # None: still running when the log ends
    exception: str | None
    batches: tuple[BatchRecord, ...]  # in batch order
    idle_reports: tuple[BatchRecord, ...]  # progress of triggers that ran no batch (older Spark)
    idle_times: tuple[float, ...]  # ``QueryIdleEvent`` timestamps (Spark 3.5+ posts these instead)
    trigger_interval_s: float | None  # from the batch start spacing: the log does not record it
    # Tasks of the query's jobs outside its batches: jobs without a batch id, and a batch without
    # a progress event (the query stopped, or the log ends, inside it).
    other_task_time: TaskTime | None


@dataclass(frozen=True)
class JobRecord:
    """A job outside any streaming query (a batch report, an ML fit sharing the executors)."""

    job_id: int
    description: str | None  # ``spark.job.description``, else the job group
    submission_time: float | None
    completion_time: float | None  # None: still running when the log ends
    succeeded: bool | None
    tasks: TaskTime | None


@dataclass(frozen=True)
class RecordedScaling:
    """An ``io.sparkscale.bridge.ScalingEvent``: an executor change sparkscale decided."""

    time: float
    action: str
    from_executors: int
    to_executors: int
    reason: str
    applied: bool
    mode: str | None
    details: Mapping[str, Any]


@dataclass(frozen=True)
class RecordedAutoscalerEvent:
    """An ``io.sparkscale.bridge.AutoscalerEvent`` (pause, rollback, blocked scale-up, error...)."""

    time: float
    kind: str
    severity: str | None
    reason: str
    details: Mapping[str, Any]


@dataclass(frozen=True)
class RecordedTick:
    """An ``io.sparkscale.bridge.AutoscalerTick``: one control tick's summary (schema: ``$defs/tick``
    in ``jvm-bridge/src/main/resources/io/sparkscale/bridge/tab/autoscaler-tab.schema.json``)."""

    time: float
    point: Mapping[str, Any]
    decision: Mapping[str, Any]
    status: Mapping[str, Any]
    queries: tuple[Mapping[str, Any], ...]
    config: Mapping[str, Any]  # in the first tick event only


@dataclass(frozen=True)
class RecordedApplication:
    """Everything the replay needs from one application's event log."""

    path: str
    app_id: str | None
    name: str | None
    attempt_id: str | None
    spark_version: str | None
    user: str | None
    start_time: float | None
    end_time: float | None  # ``SparkListenerApplicationEnd``; None: the log ends without it
    last_event_time: float | None  # the latest time any event carries
    conf: Mapping[str, str]  # "Spark Properties" of ``SparkListenerEnvironmentUpdate``
    executors: tuple[ExecutorRecord, ...]  # in order of addition
    queries: tuple[QueryRecord, ...]  # in order of start
    jobs: tuple[JobRecord, ...]  # outside streaming queries, in job order
    scalings: tuple[RecordedScaling, ...]
    autoscaler_events: tuple[RecordedAutoscalerEvent, ...]
    ticks: tuple[RecordedTick, ...]
    assumptions: tuple[str, ...]  # what the log lacks and what was assumed instead
    truncated: bool  # the log ends mid-line or mid-block (still being written, or cut)
    _timeline: ExecutorTimeline = field(default_factory=ExecutorTimeline, repr=False, compare=False)

    @property
    def sparkscale_conf(self) -> dict[str, str]:
        return {k: v for k, v in self.conf.items() if k.startswith("spark.sparkscale.")}

    @property
    def dynamic_allocation_conf(self) -> dict[str, str]:
        return {k: v for k, v in self.conf.items() if k.startswith("spark.dynamicAllocation.")}

    @property
    def executor_cores(self) -> int | None:
        """``spark.executor.cores``; None when unset (the cluster manager's default applies)."""
        return _int_or_none(self.conf.get("spark.executor.cores"))

    @property
    def task_cpus(self) -> int:
        return _int_or_none(self.conf.get("spark.task.cpus")) or 1

    @property
    def ran_sparkscale(self) -> bool:
        """sparkscale's bridge was loaded (its plugin configured, or it wrote events)."""
        return bool(self.scalings or self.ticks or self.autoscaler_events) or (
            "io.sparkscale.bridge.SparkscalePlugin" in self.conf.get("spark.plugins", ""))

    def executors_at(self, t: float) -> int:
        """Executors alive at time ``t`` (added at or before it, not yet removed)."""
        return self._timeline.live_at(t)

    def job_task_ms(self, start: float, end: float) -> float:
        """Task time of the jobs outside streaming queries within [start, end): each job's task
        time spread evenly from its first task's launch to its last task's finish (coarse)."""
        total = 0.0
        for job in self.jobs:
            tasks = job.tasks
            if tasks is None:
                continue
            span = tasks.last_finish - tasks.first_launch
            if span <= 0:
                total += tasks.task_ms if start <= tasks.first_launch < end else 0.0
                continue
            overlap = min(end, tasks.last_finish) - max(start, tasks.first_launch)
            total += tasks.task_ms * max(0.0, overlap) / span
        return total

    def query(self, name_or_id: str) -> QueryRecord:
        """The latest run of the query with this name or id."""
        runs = [q for q in self.queries if name_or_id in (q.name, q.query_id, q.run_id)]
        if not runs:
            raise KeyError(f"no query named {name_or_id!r}; the log has "
                           f"{sorted({q.name or q.query_id for q in self.queries})}")
        return runs[-1]


def _int_or_none(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None
