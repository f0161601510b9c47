"""The StreamingQueryListener side of metric collection: record progress, never act on it.

:class:`ProgressRecorder` is registered with ``spark.streams.addListener``. Its callbacks run on
py4j callback threads and block Spark's ``streams`` listener queue until they return, so they only
parse the event and update in-memory counters under a short lock: no cluster calls, no I/O.
The control loop reads everything at once through :meth:`ProgressRecorder.snapshot`. The backlog
of each source is parsed by :mod:`.backlog`.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import statistics
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    StreamingQueryListener,
)

from ..metrics import RISING, SourceBacklog, finite_float, rows_arrived
from .backlog import (
    backlog_problem,
    batch_rows_per_unit,
    is_finite_number,
    learned_rows_per_unit,
    query_backlog,
    source_backlog,
    source_units_read,
)

log = logging.getLogger("sparkscale")

# Batch ids remembered per query: enough to attribute per-batch busy time for several control
# intervals (the JVM keeps the last 64 batches), while staying bounded.
MAX_BATCH_IDS = 128
# Terminated queries are kept (checkers look at how they ended) but only this many.
MAX_TERMINATED_QUERIES = 64
# Completed batches a query's progress keeps for the performance model (a few minutes of them).
RECENT_BATCHES = 64
# Batches per source over which rows per offset (or file) are learned: enough to smooth one odd
# batch, few enough to follow a producer that starts or stops writing transactions.
UNIT_SAMPLES = 32
# A batch whose arrivals exceed (1 + RISING) x the median of the WAKE_BASELINE batches before it
# wakes the control loop at once.
WAKE_BASELINE = 5


def arrivals_rose(batches: Sequence[BatchProgress]) -> bool:
    """Whether the latest batch shows arrivals well above the batches before it: the rows it read
    plus what the backlog grew by, per second since the previous batch started, against the median
    of up to :data:`WAKE_BASELINE` such rates before it."""
    rates: list[float] = []
    for previous, b in itertools.pairwise(batches[-(WAKE_BASELINE + 2):]):
        since = b.start - previous.start
        if b.batch_id != previous.batch_id + 1 or since <= 0:
            rates = []  # a gap (a restart, a missed event): compare only what follows it
            continue
        rates.append(rows_arrived(b.rows, b.backlog, previous.backlog) / since)
    if len(rates) < 3:
        return False
    before = statistics.median(rates[:-1])
    return rates[-1] > (1.0 + RISING) * before and rates[-1] - before >= 1.0

# ---------------------------------------------------------------------------------------------
# Recorded state


@dataclass(frozen=True)
class BatchProgress:
    """One completed batch as its progress event tells it (task figures come from the JVM)."""

    batch_id: int
    start: float  # epoch seconds: the progress ``timestamp``, when the trigger started the batch
    duration_s: float  # triggerExecution
    rows: int
    backlog: float | None  # rows its sources had left when it was planned

    @property
    def end(self) -> float:
        return self.start + self.duration_s


@dataclass(frozen=True)
class QueryProgress:
    """What the recorder knows about one query: an immutable copy handed to the collector."""

    query_id: str
    name: str | None = None
    run_id: str | None = None
    batches: int = 0  # completed micro-batches (each batch id counted once)
    input_rows: int = 0
    batch_duration_ms: float = 0.0  # sum of triggerExecution over those batches
    batch_ids: tuple[int, ...] = ()  # the most recent completed batch ids, oldest first
    last_batch_id: int | None = None
    input_rate: float = 0.0
    processed_rate: float = 0.0
    backlog: float | None = None  # rows (see query_backlog)
    backlog_sources: tuple[SourceBacklog, ...] = ()
    backlog_problem: str | None = None
    last_batch_duration_ms: float | None = None
    last_progress_time: float | None = None  # progress or idle event: liveness
    trigger_interval_ms: float | None = None  # None: unknown, or the default trigger
    real_time: bool = False  # trigger(realTime=...): trigger_interval_ms is its batch duration
    active: bool = True
    exception: str | None = None
    failed_batches: int = 0
    started_time: float | None = None
    terminated_time: float | None = None
    recent_batches: tuple[BatchProgress, ...] = ()  # the latest completed batches, oldest first


@dataclass
class _QueryState:
    query_id: str
    name: str | None = None
    run_id: str | None = None
    batches: int = 0
    input_rows: int = 0
    batch_duration_ms: float = 0.0
    batch_ids: deque[int] = field(default_factory=lambda: deque(maxlen=MAX_BATCH_IDS))
    last_batch_id: int | None = None
    input_rate: float = 0.0
    processed_rate: float = 0.0
    backlog: float | None = None
    backlog_sources: tuple[SourceBacklog, ...] = ()
    backlog_problem: str | None = None
    # Per source description: (rows, units) read by recent batches, to convert its backlog to rows.
    unit_samples: dict[str, deque[tuple[float, float]]] = field(default_factory=dict)
    last_batch_duration_ms: float | None = None
    last_progress_time: float | None = None
    trigger_interval_ms: float | None = None
    real_time: bool = False
    active: bool = True
    exception: str | None = None
    failed_batches: int = 0
    started_time: float | None = None
    terminated_time: float | None = None
    recent_batches: deque[BatchProgress] = field(default_factory=lambda: deque(maxlen=RECENT_BATCHES))

    def freeze(self) -> QueryProgress:
        return QueryProgress(
            query_id=self.query_id, name=self.name, run_id=self.run_id, batches=self.batches,
            input_rows=self.input_rows, batch_duration_ms=self.batch_duration_ms,
            batch_ids=tuple(self.batch_ids), last_batch_id=self.last_batch_id,
            input_rate=self.input_rate, processed_rate=self.processed_rate, backlog=self.backlog,
            backlog_sources=self.backlog_sources, backlog_problem=self.backlog_problem,
            last_batch_duration_ms=self.last_batch_duration_ms,
            last_progress_time=self.last_progress_time, trigger_interval_ms=self.trigger_interval_ms,
            real_time=self.real_time, active=self.active, exception=self.exception,
            failed_batches=self.failed_batches,
            started_time=self.started_time, terminated_time=self.terminated_time,
            recent_batches=tuple(self.recent_batches))


class ProgressRecorder(StreamingQueryListener):
    """Records streaming query progress for the collector. Register with :meth:`attach`.

    The ``record_*`` methods are the pure core (tests call them with recorded JSON); the
    ``onQuery*`` callbacks convert Spark's events and delegate, swallowing every error so that a
    surprise in one event can never stall Spark's listener queue or kill the listener.
    """

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._queries: OrderedDict[str, _QueryState] = OrderedDict()
        # Ends what feeds the recorder (the Python listener or the JVM feed); None: nothing yet.
        self._detach: Callable[[], None] | None = None
        # Called (on the listener's thread: it must return at once) when a batch shows arrivals
        # rising (:func:`arrivals_rose`): the control loop evaluates then, not at its next tick.
        self.on_rise: Callable[[], None] | None = None

    # --- registration ------------------------------------------------------------------------

    def attach(self, spark: Any) -> None:
        """Add this listener to ``spark.streams`` (once; later calls do nothing): the queries of
        that session, the in-job launch's source."""
        with self._lock:
            if self._detach is not None:
                return
            self._detach = lambda: _remove_listener(spark, self)
        spark.streams.addListener(self)

    def fed_by(self, stop: Callable[[], None]) -> None:
        """Another source calls the ``record_*`` methods from now on (the JVM's events of every
        session, :mod:`.jvm_feed`); ``stop`` ends it. Once: later calls do nothing."""
        with self._lock:
            if self._detach is None:
                self._detach = stop

    def detach(self) -> None:
        """Stop the source that feeds this recorder, if any. Never raises."""
        with self._lock:
            detach, self._detach = self._detach, None
        if detach is None:
            return
        try:
            detach()
        except Exception:  # the session may already be stopped
            log.debug("could not stop the progress source", exc_info=True)

    @property
    def attached(self) -> bool:
        return self._detach is not None

    # --- pure core ---------------------------------------------------------------------------

    def _state(self, query_id: str) -> _QueryState:
        state = self._queries.get(query_id)
        if state is None:
            state = self._queries[query_id] = _QueryState(query_id)
        return state

    def record_started(self, query_id: str, name: str | None, run_id: str | None,
                       now: float) -> None:
        with self._lock:
            state = self._state(str(query_id))
            state.name = name
            state.run_id = run_id
            state.active = True
            state.exception = None  # a restart clears it; failed_batches keeps the history
            state.started_time = now
            state.terminated_time = None
            state.last_progress_time = now
            state.trigger_interval_ms = None  # the new run may use another trigger
            state.real_time = False
            self._queries.move_to_end(state.query_id)

    def rows_per_unit(self, query_id: str) -> dict[str, float]:
        """Per source description of the query: rows per offset (or file) its recent batches read."""
        with self._lock:
            state = self._queries.get(str(query_id))
            return learned_rows_per_unit(state.unit_samples) if state else {}

    def record_progress(self, progress_json: Mapping[str, Any], now: float) -> None:
        """Record one ``StreamingQueryProgress.json`` (already parsed into a dict)."""
        query_id = str(progress_json.get("id"))
        raw_sources = progress_json.get("sources")
        sources = [s for s in raw_sources if isinstance(s, Mapping)] if isinstance(raw_sources, list) else []
        # What each source's batch read, in its own unit (parsed outside the lock).
        measured = [(source_backlog(s).description, s.get("numInputRows"), source_units_read(s),
                     batch_rows_per_unit(s)) for s in sources]
        durations = progress_json.get("durationMs") or {}
        duration = finite_float(durations.get("triggerExecution"), math.nan) if isinstance(
            durations, Mapping) else math.nan
        batch_id_raw = progress_json.get("batchId")
        batch_id = int(batch_id_raw) if is_finite_number(batch_id_raw) else None
        with self._lock:
            state = self._state(query_id)
            if progress_json.get("name") is not None:
                state.name = progress_json.get("name")
            if progress_json.get("runId") is not None:
                state.run_id = str(progress_json.get("runId"))
            # Without a listener start event (attached late) the query is evidently running.
            if state.terminated_time is None:
                state.active = True
            state.last_progress_time = now
            state.input_rate = finite_float(progress_json.get("inputRowsPerSecond"))
            state.processed_rate = finite_float(progress_json.get("processedRowsPerSecond"))
            if not math.isnan(duration):
                state.last_batch_duration_ms = duration
            # A batch is counted once: progress for an already seen batch id (older Spark's
            # no-data reports, a replay) updates the gauges but not the counters.
            new_batch = batch_id is None or batch_id not in state.batch_ids
            if new_batch:
                for description, rows, units, ratio in measured:
                    if ratio is not None and units:
                        samples = state.unit_samples.setdefault(description, deque(maxlen=UNIT_SAMPLES))
                        samples.append((finite_float(rows), float(units)))
            learned = learned_rows_per_unit(state.unit_samples)
            state.backlog, state.backlog_sources = query_backlog(sources, learned)
            state.backlog_problem = backlog_problem(state.backlog_sources)
            if not new_batch:
                return
            state.batches += 1
            state.input_rows += int(finite_float(progress_json.get("numInputRows")))
            if not math.isnan(duration):
                state.batch_duration_ms += duration
            if batch_id is not None:
                state.batch_ids.append(batch_id)
                state.last_batch_id = batch_id
                started = _epoch_seconds(progress_json.get("timestamp"))
                if started is not None and not math.isnan(duration):
                    rows = int(finite_float(progress_json.get("numInputRows")))
                    state.recent_batches.append(BatchProgress(batch_id, started, duration / 1000.0, rows,
                                                              state.backlog))
            latest = list(itertools.islice(reversed(state.recent_batches), WAKE_BASELINE + 2))[::-1]
            rose = arrivals_rose(latest)
        if rose and self.on_rise is not None:
            try:
                self.on_rise()
            except Exception:
                log.warning("could not wake the control loop", exc_info=True)

    def record_idle(self, query_id: str, now: float) -> None:
        """An idle event: the query is alive and has nothing to read (so no backlog, no input)."""
        with self._lock:
            state = self._state(str(query_id))
            state.last_progress_time = now
            if state.terminated_time is None:
                state.active = True
            state.input_rate = 0.0
            state.processed_rate = 0.0
            # Only a usable backlog becomes 0: idling says nothing about a lag that made no sense.
            if state.backlog is not None:
                state.backlog = 0.0
                state.backlog_sources = tuple(
                    s if s.backlog is None else replace(s, backlog=0.0, problem=None)
                    for s in state.backlog_sources)
                state.backlog_problem = backlog_problem(state.backlog_sources)

    def record_terminated(self, query_id: str, exception: str | None, now: float) -> None:
        with self._lock:
            state = self._state(str(query_id))
            state.active = False
            state.exception = exception
            state.terminated_time = now
            if exception:
                state.failed_batches += 1  # the batch that was running when it failed
            self._queries.move_to_end(state.query_id)
            self._evict_terminated()

    def _evict_terminated(self) -> None:
        terminated = [q for q, s in self._queries.items() if not s.active]
        for query_id in terminated[:max(0, len(terminated) - MAX_TERMINATED_QUERIES)]:
            del self._queries[query_id]

    def set_trigger_interval(self, query_id: str, ms: float | None, real_time: bool = False) -> None:
        """The query's trigger interval (0 or None: the default trigger); ``real_time``: a
        real-time-mode trigger, ``ms`` its batch duration."""
        with self._lock:
            state = self._state(str(query_id))
            state.trigger_interval_ms = float(ms) if ms else None
            state.real_time = real_time

    def snapshot(self) -> dict[str, QueryProgress]:
        """Immutable copies of every known query's state, keyed by query id."""
        with self._lock:
            return {qid: state.freeze() for qid, state in self._queries.items()}

    def get(self, query_id: str) -> QueryProgress | None:
        with self._lock:
            state = self._queries.get(str(query_id))
            return state.freeze() if state else None

    # --- listener callbacks (py4j threads: record and return) --------------------------------

    def onQueryStarted(self, event: QueryStartedEvent) -> None:
        try:
            self.record_started(str(event.id), event.name, str(event.runId), time.time())
        except Exception:
            log.warning("could not record a query start", exc_info=True)

    def onQueryProgress(self, event: QueryProgressEvent) -> None:
        try:
            self.record_progress(json.loads(event.progress.json), time.time())
        except Exception:
            log.warning("could not record a query progress", exc_info=True)

    def onQueryIdle(self, event: QueryIdleEvent) -> None:
        try:
            self.record_idle(str(event.id), time.time())
        except Exception:
            log.warning("could not record a query idle event", exc_info=True)

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:
        try:
            self.record_terminated(str(event.id), event.exception, time.time())
        except Exception:
            log.warning("could not record a query termination", exc_info=True)


def _remove_listener(spark: Any, listener: StreamingQueryListener) -> None:
    spark.streams.removeListener(listener)


def _epoch_seconds(timestamp: Any) -> float | None:
    """A progress ``timestamp`` ("2024-06-12T10:00:00.000Z") as epoch seconds, or None."""
    if not isinstance(timestamp, str):
        return None
    try:
        return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
