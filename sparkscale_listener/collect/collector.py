"""Metric collection: one :class:`~sparkscale_listener.metrics.MetricSample` per control tick.

:class:`MetricCollector` is the pluggable interface; :class:`SparkMetricCollector` is the built-in
implementation. It merges two sources that are each cheap to read from the control-loop thread:

* the JVM listener's aggregate snapshot (``JvmBridge.poll()``, a typed
  :class:`~sparkscale_listener.collect.snapshot.BridgeSnapshot`): executors, task time, per-query and
  per-batch task figures, attributed through the job property ``sql.streaming.queryId``;
* the :class:`~sparkscale_listener.collect.progress.ProgressRecorder`: batches, rows, durations and
  backlog from the streaming progress events.

Custom collectors
-----------------
Set ``spark.sparkscale.collector`` to a class path. The simplest customization is to
subclass :class:`SparkMetricCollector` and override :meth:`MetricCollector.query_external_metrics`
to add metrics the autoscaler cannot see itself, for instance a backlog measured in an upstream
system::

    class QueueCollector(SparkMetricCollector):
        def query_external_metrics(self, now):
            return {"backlog.orders": float(my_queue.depth("orders"))}

Keys ``backlog.<query name or id>`` are read by the default evaluator as that query's backlog in
rows. Exceptions raised there are logged and the tick goes on without external metrics. A
collector written from scratch subclasses :class:`MetricCollector` and implements :meth:`collect`,
returning cumulative counters (see :mod:`sparkscale_listener.metrics`).
"""

from __future__ import annotations

import logging
import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import replace

from ..config.plugins import PluginContext
from ..metrics import (
    ClusterMetrics,
    ExecutorInfo,
    ExecutorTimeline,
    InFlightBatch,
    LatestOffsets,
    MetricSample,
    QueryMetrics,
    executor_id_order,
    finite_float,
)
from .batches import BatchRecords
from .progress import ProgressRecorder, QueryProgress
from .snapshot import BatchTasks, BridgeSnapshot, ExecutorSnapshot, QuerySnapshot, SourceOffsets

log = logging.getLogger("sparkscale")

# Removed executors stay in the sample this long (seconds), so checkers can see recent losses.
REMOVED_EXECUTOR_RETENTION_S = 600.0


class MetricCollector(ABC):
    """Produces the autoscaler's view of the application once per control tick.

    Implementations must be cheap enough to run every ``spark.sparkscale.interval`` on the
    control-loop thread, must not block on the cluster for long, and must return *cumulative*
    counters (monotonic since the autoscaler started) so that rates can be taken between any two
    samples. Gauges (backlog, live executors, heap) are the value at ``now``.
    """

    @abstractmethod
    def collect(self, now: float) -> MetricSample:
        """Build the sample for time ``now`` (seconds, the control loop's clock)."""

    def query_external_metrics(self, now: float) -> dict[str, float]:
        """Extra metrics to attach to the sample as ``MetricSample.external``.

        Override to feed the evaluator what Spark cannot report, e.g.
        ``{"backlog.<query name or id>": rows}`` for a source without a readable backlog.
        Default: none.
        """
        return {}

    def close(self) -> None:  # noqa: B027 - optional hook, deliberately not abstract
        """Release whatever the collector registered. Default: nothing."""


def _heap_ratio(executor: ExecutorSnapshot) -> float | None:
    if executor.heap_used_bytes < 0 or executor.heap_max_bytes <= 0:
        return None  # not reported yet (the JVM uses -1)
    return executor.heap_used_bytes / executor.heap_max_bytes


class SparkMetricCollector(MetricCollector):
    """The built-in collector: the JVM bridge's snapshot plus the progress recorder.

    Constructed like every plugin, from a :class:`~sparkscale_listener.config.plugins.PluginContext`:
    ``context.bridge`` is anything with ``poll() -> BridgeSnapshot`` (epoch ms), as
    :class:`~sparkscale_listener.spark.bridge.JvmBridge` has; ``context.recorder`` (a new one if
    None) is attached to ``spark.streams`` here if it is not already, and detached by :meth:`close`.
    """

    def __init__(self, context: PluginContext) -> None:
        self.spark = context.spark
        self.bridge = context.bridge
        self.recorder: ProgressRecorder = context.recorder or ProgressRecorder()
        self.config = context.config
        spark, recorder = self.spark, self.recorder
        # Per query: the JVM's batch id -> (its tasks as last counted, the busy ms added to the
        # running total), and the total. Running totals keep batches that aged out of the JVM's
        # last-64 window.
        self._batch_busy_added: dict[str, dict[str, tuple[BatchTasks, float]]] = {}
        self._batch_busy_total: dict[str, float] = {}
        # (query id, run id) pairs whose trigger interval was looked up, so a failing lookup
        # (e.g. an AvailableNow trigger) is tried once per run, not every tick.
        self._trigger_looked_up: set[tuple[str, str | None]] = set()
        # (query id, run id) pairs whose sources' latest offsets the bridge was asked to read.
        self._offsets_watched: set[tuple[str, str | None]] = set()
        self._records = BatchRecords()  # each query's batch records, kept between ticks
        # Per query: the backlog problem last logged, so each change is logged once, not every tick.
        self._backlog_problems: dict[str, str | None] = {}
        if spark is not None and not recorder.attached:
            recorder.attach(spark)

    # --- MetricCollector ---------------------------------------------------------------------

    def collect(self, now: float) -> MetricSample:
        """Read the bridge and the recorder. A failing bridge raises: a stale sample would read
        as an idle cluster, so the caller should skip the tick instead."""
        snapshot: BridgeSnapshot = self.bridge.poll()
        progress = self.recorder.snapshot()
        if self._fill_trigger_intervals(progress):
            progress = self.recorder.snapshot()
        self._watch_source_offsets(progress)
        # Forget queries the recorder has evicted (bounded memory).
        for qid in [q for q in self._batch_busy_total if q not in progress]:
            self._batch_busy_total.pop(qid, None)
            self._batch_busy_added.pop(qid, None)
        self._trigger_looked_up = {k for k in self._trigger_looked_up if k[0] in progress}
        self._offsets_watched = {k for k in self._offsets_watched if k[0] in progress}
        self._records.keep_only(progress)
        self._report_backlog_problems(progress)
        cluster = replace(self._cluster(snapshot), other_tasks=snapshot.other_tasks,
                          events_lost=self._events_lost(snapshot))
        no_jobs = QuerySnapshot()
        timeline = ExecutorTimeline.of(cluster.executors)
        queries = {qid: self._query(p, snapshot.queries.get(qid, no_jobs), timeline,
                                    snapshot.source_offsets.get(qid))
                   for qid, p in progress.items()}
        return MetricSample(time=now, cluster=cluster, queries=queries,
                            external=self._external(now))

    def close(self) -> None:
        self.recorder.detach()

    # --- pieces ------------------------------------------------------------------------------

    def _cluster(self, snapshot: BridgeSnapshot) -> ClusterMetrics:
        # The age of a removal is measured on the snapshot's clock (unknown without a snapshot).
        now_ms = snapshot.time_ms or None
        retention_ms = REMOVED_EXECUTOR_RETENTION_S * 1000.0
        executors = []
        for executor_id, e in snapshot.executors.items():
            removed = e.removed_ms
            if removed is not None and now_ms is not None and now_ms - removed > retention_ms:
                continue
            executors.append(ExecutorInfo(
                executor_id=executor_id,
                host=e.host,
                cores=e.cores,
                running_tasks=e.running_tasks,
                added_time=e.added_ms / 1000.0,
                removed_time=None if removed is None else removed / 1000.0,
                removed_reason=e.removed_reason,
                tasks_failed=e.tasks_failed,
                heap_used_ratio=_heap_ratio(e)))
        live = [e for e in executors if e.removed_time is None]
        cores = snapshot.cores_per_executor
        if cores <= 0:  # unknown in the conf (e.g. standalone default: all worker cores)
            cores = max((e.cores for e in live), default=1)
        ratios = [e.heap_used_ratio for e in live if e.heap_used_ratio is not None]
        totals = snapshot.totals
        return ClusterMetrics(
            live_executors=len(live),
            cores_per_executor=cores,
            executors=tuple(sorted(executors, key=lambda e: executor_id_order(e.executor_id))),
            slot_ms=totals.slot_ms,
            busy_ms=totals.busy_ms,
            tasks_finished=totals.tasks_finished,
            tasks_failed=totals.tasks_failed,
            executors_added=totals.executors_added,
            executors_removed=totals.executors_removed,
            gc_ms=totals.gc_ms,
            run_ms=totals.run_ms,
            heap_used_ratio=max(ratios) if ratios else None)

    @staticmethod
    def _events_lost(snapshot: BridgeSnapshot) -> int:
        """Listener events known lost so far: dropped by Spark's listener bus, plus tasks the
        bridge aged out because their end never came. Those only once the bus dropped some:
        otherwise an aged-out task was not lost but slow (a zombie task of a failed stage attempt,
        a killed task slow to stop: its end comes later), and no window needs measuring afresh."""
        dropped = snapshot.listener_events_dropped
        return dropped + snapshot.totals.tasks_aged_out if dropped else 0

    def _batch_busy(self, progress: QueryProgress, jvm_batches: Mapping[str, BatchTasks]) -> float:
        """Running total of the JVM busy time of batches the recorder has seen complete. (A task
        that ends after its batch left the JVM's window comes back as a batch of that task alone:
        added once what was counted of the batch is forgotten, a tick after it left.)"""
        qid = progress.query_id
        added = self._batch_busy_added.setdefault(qid, {})
        total = self._batch_busy_total.get(qid, 0.0)
        window: set[str] | None = None  # the completed batches' ids as the JVM writes them
        for key, batch in jvm_batches.items():
            counted = added.get(key)
            if counted is not None and counted[0] is batch:
                continue  # the same object as when counted (the poll hands unchanged ones over so)
            if window is None:
                window = {str(b) for b in progress.batch_ids}
            if key not in window:
                continue  # not completed in the recorder's view (yet): counted once it is
            # The JVM listener queue can lag the streams queue: a batch's last task ends may land
            # after its progress. Add what grew since it was last counted, never subtract.
            before = counted[1] if counted is not None else 0.0
            grew = batch.busy_ms - before
            if grew > 0:
                total += grew
            added[key] = (batch, max(before, batch.busy_ms))
        if len(added) > len(jvm_batches):  # bounded like the listener's batches
            for key in [k for k in added if k not in jvm_batches]:
                del added[key]
        self._batch_busy_total[qid] = total
        return total

    def _query(self, p: QueryProgress, jvm: QuerySnapshot, executors: ExecutorTimeline,
               offsets: SourceOffsets | None) -> QueryMetrics:
        return QueryMetrics(
            query_id=p.query_id,
            name=p.name,
            batches=p.batches,
            input_rows=p.input_rows,
            batch_busy_ms=self._batch_busy(p, jvm.batches),
            batch_duration_ms=p.batch_duration_ms,
            backlog=p.backlog,
            backlog_sources=p.backlog_sources,
            backlog_problem=p.backlog_problem,
            input_rate=p.input_rate,
            processed_rate=p.processed_rate,
            last_batch_duration_ms=p.last_batch_duration_ms,
            trigger_interval_ms=p.trigger_interval_ms,
            real_time=p.real_time,
            last_progress_time=p.last_progress_time,
            busy_ms=jvm.busy_ms,
            tasks_finished=jvm.tasks_finished,
            tasks_failed=jvm.tasks_failed,
            max_stage_tasks=jvm.max_stage_tasks if jvm.max_stage_tasks > 0 else None,
            active=p.active,
            exception=p.exception,
            failed_batches=p.failed_batches,
            recent_batches=self._records.of(p.query_id, p.recent_batches, jvm.batches, executors),
            in_flight=_in_flight(p, jvm.batches),
            latest_offsets=None if offsets is None or not p.active else LatestOffsets(
                time=offsets.time_ms / 1000.0, offsets=offsets.offsets, partitions=offsets.partitions))

    def _report_backlog_problems(self, progress: Mapping[str, QueryProgress]) -> None:
        """Say once, on the control-loop thread, when a query's sources stop giving a usable backlog
        (a lag that makes no sense, a unit that cannot be turned into rows) and when they resume.
        The query's own error, if it fails, is Spark's to report; this only explains why the
        autoscaler sizes the query without a backlog meanwhile."""
        for qid in [q for q in self._backlog_problems if q not in progress]:
            del self._backlog_problems[qid]
        for qid, p in progress.items():
            problem = p.backlog_problem if p.active else None
            before = self._backlog_problems.get(qid)
            if problem == before:
                continue
            self._backlog_problems[qid] = problem
            label = f"'{p.name}'" if p.name else qid
            if problem is not None:
                effect = ("it is sized on its processed rate until its sources report a usable lag"
                          if p.backlog is None else "its backlog counts the other sources only")
                log.warning("query %s: %s; %s", label, problem, effect)
            elif before is not None:
                log.info("query %s reports a usable backlog again", label)

    def _fill_trigger_intervals(self, progress: Mapping[str, QueryProgress]) -> bool:
        """Best effort: the trigger interval is not in the progress JSON, so ask the JVM query.
        True if any was set."""
        found = False
        if self.spark is None:
            return found
        for qid, p in progress.items():
            key = (qid, p.run_id)
            if not p.active or p.trigger_interval_ms is not None or key in self._trigger_looked_up:
                continue
            self._trigger_looked_up.add(key)
            try:
                query = self.spark.streams.get(qid)
                if query is None:
                    continue
                self.recorder.set_trigger_interval(qid, *self.bridge.trigger_interval_ms(query))
                found = True
            except Exception:  # not a processing-time trigger, Connect, or the query just ended
                log.debug("no trigger interval for query %s", qid, exc_info=True)
        return found

    def _watch_source_offsets(self, progress: Mapping[str, QueryProgress]) -> None:
        """Best effort, once per run of a query: have the bridge read its Kafka sources' latest
        offsets between batches (``kafka.latestOffsets``)."""
        if self.spark is None or not self.config.kafka_latest_offsets:
            return
        for qid, p in progress.items():
            key = (qid, p.run_id)
            if not p.active or key in self._offsets_watched:
                continue
            self._offsets_watched.add(key)
            try:
                query = self.spark.streams.get(qid)
                if query is not None:
                    self.bridge.watch_source_offsets(qid, query)
            except Exception:  # Connect, an older bridge jar, or the query just ended
                log.debug("no latest offsets for query %s", qid, exc_info=True)

    def _external(self, now: float) -> dict[str, float]:
        try:
            raw = self.query_external_metrics(now) or {}
            items = list(raw.items())
        except Exception:
            log.warning("query_external_metrics failed; continuing without external "
                        "metrics", exc_info=True)
            return {}
        external = {}
        for key, value in items:
            number = finite_float(value, math.nan)
            if math.isnan(number):
                log.warning("external metric %r=%r is not a number; ignored", key, value)
                continue
            external[str(key)] = number
        return external


def _in_flight(p: QueryProgress, jvm_batches: Mapping[str, BatchTasks]) -> InFlightBatch | None:
    """The batch after the latest completed one, once some of its tasks ended; else None."""
    if not p.active or not p.batch_ids:
        return None
    batch_id = p.batch_ids[-1] + 1
    tasks = jvm_batches.get(str(batch_id))
    if tasks is None or tasks.tasks <= 0 or tasks.first_launch_ms is None:
        return None
    return InFlightBatch(batch_id=batch_id, first_launch=tasks.first_launch_ms / 1000.0,
                         tasks_ended=tasks.tasks, task_s=tasks.busy_ms / 1000.0)
