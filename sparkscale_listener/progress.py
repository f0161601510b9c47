"""The StreamingQueryListener side of metric collection: record progress, never act on it.

:class:`ProgressRecorder` is registered with ``spark.streams.addListener``. Its callbacks run on
py4j callback threads and block Spark's ``streams`` listener queue until they return, so they only
parse the event and update in-memory counters under a short lock: no cluster calls, no I/O.
The control loop reads everything at once through :meth:`ProgressRecorder.snapshot`.

Backlog parsing (:func:`source_backlog`) is pure and handles every source shape Spark reports:
numeric offsets, nested per-partition offsets (Kafka, Python data sources), Kafka's
``*OffsetsBehindLatest`` metrics, file/Delta ``numFilesOutstanding``; anything else gives ``None``.
A Kafka lag that cannot be true (negative, larger than the log, a partition gone) gives ``None``
with the reason. :func:`query_backlog` turns each source's backlog into rows, the unit of the
arrival rate, with the rows per offset (or file) the source's batches read, which the recorder
learns per query.
"""

from __future__ import annotations

import json
import logging
import math
import re
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    StreamingQueryListener,
)

from sparkscale_listener.metrics import SourceBacklog, finite_float

log = logging.getLogger("sparkscale")

# Batch ids remembered per query: enough to attribute per-batch busy time for several control
# intervals (the JVM keeps the last 64 batches), while staying bounded.
MAX_BATCH_IDS = 128
# Terminated queries are kept (checkers look at how they ended) but only this many.
MAX_TERMINATED_QUERIES = 64
# Batches per source over which rows per offset (or file) are learned: enough to smooth one odd
# batch, few enough to follow a producer that starts or stops writing transactions.
UNIT_SAMPLES = 32

# ---------------------------------------------------------------------------------------------
# Backlog parsing (pure)

# Generators, not queues: their latest offset is whatever they were asked for, so no backlog.
_RATE_SOURCE = re.compile(r"^\s*Rate(StreamV2|Source|PerMicroBatchStream)\b")
_KAFKA_SOURCE = re.compile(r"Kafka", re.IGNORECASE)
# Delta offsets are table versions plus file indexes: their differences are not a backlog.
_DELTA_SOURCE = re.compile(r"^\s*DeltaSource\b")
_KAFKA_METRICS = ("avgOffsetsBehindLatest", "maxOffsetsBehindLatest", "minOffsetsBehindLatest")


def _parse_offset(value: Any) -> Any:
    """An offset as reported (JSON value, or its JSON text) -> Python value; unparsable -> None."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return None
    return value


def _isfinite_float(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _numeric_leaves(value: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], float]]:
    if _isfinite_float(value):
        yield path, float(value)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _numeric_leaves(item, (*path, str(key)))


def offset_difference(end: Any, latest: Any) -> float | None:
    """``latest - end`` for numeric offsets or objects with numeric leaves; None if not comparable.

    Per key path (e.g. Kafka ``{"topic": {"0": 120, "1": 98}}``) the differences are summed, each
    clamped at 0 so that one odd partition cannot cancel another's backlog. Paths present in only
    one of the two offsets (a partition that just appeared) are ignored.
    """
    if end is None or latest is None:
        return None
    if _isfinite_float(end) and _isfinite_float(latest):
        return max(0.0, float(latest) - float(end))
    if not (isinstance(end, Mapping) and isinstance(latest, Mapping)):
        return None
    end_leaves = dict(_numeric_leaves(end))
    total, matched = 0.0, False
    for path, latest_value in _numeric_leaves(latest):
        if path in end_leaves:
            matched = True
            total += max(0.0, latest_value - end_leaves[path])
    return total if matched else None


def _metric(metrics: Mapping[str, Any], name: str) -> float | None:
    value = metrics.get(name)
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def source_backlog(source: Mapping[str, Any]) -> SourceBacklog:
    """What one source (an entry of a progress's ``sources``) still has to read, in the unit it
    reports (not yet converted to rows: see :func:`query_backlog`). Never raises."""
    description = str(source.get("description") or "") if isinstance(source, Mapping) else ""
    try:
        return _source_backlog(source, description)
    except Exception:  # a malformed progress must never break collection
        log.debug("cannot parse the backlog of source %r", description, exc_info=True)
        return SourceBacklog(description, None)


def _is_kafka(description: str, metrics: Mapping[str, Any]) -> bool:
    return bool(_KAFKA_SOURCE.search(description)) or any(k in metrics for k in _KAFKA_METRICS)


def _metrics_of(source: Mapping[str, Any]) -> Mapping[str, Any]:
    metrics = source.get("metrics") or {}
    return metrics if isinstance(metrics, Mapping) else {}


def _source_backlog(source: Mapping[str, Any], description: str) -> SourceBacklog:
    if _RATE_SOURCE.match(description):
        return SourceBacklog(description, None)
    metrics = _metrics_of(source)

    # File and Delta sources count what is left in files; their offsets are log/table versions.
    files = _metric(metrics, "numFilesOutstanding")
    if files is not None:
        if files < 0:
            return SourceBacklog(description, None, "files",
                                 problem=f"reported {files:.0f} files outstanding, a negative backlog")
        return SourceBacklog(description, files, "files")
    if _DELTA_SOURCE.match(description):
        return SourceBacklog(description, None, "files")

    end = _parse_offset(source.get("endOffset"))
    latest = _parse_offset(source.get("latestOffset"))
    if not _is_kafka(description, metrics):
        diff = offset_difference(end, latest)
        return SourceBacklog(description, diff, "rows")

    lag, problem = kafka_lag(end, latest)
    if lag is not None or problem is not None:
        return SourceBacklog(description, lag, "offsets", problem=problem)
    # No comparable offsets: avg x partitions is the exact sum; max is a lower bound of it.
    avg = _metric(metrics, "avgOffsetsBehindLatest")
    partitions = sum(1 for _ in _numeric_leaves(end)) if isinstance(end, Mapping) else 0
    candidates = [(avg * partitions, "avgOffsetsBehindLatest")] if avg is not None and partitions else []
    for name in ("maxOffsetsBehindLatest", "avgOffsetsBehindLatest"):
        value = _metric(metrics, name)
        if value is not None:
            candidates.append((value, name))
    if candidates:
        value, name = candidates[0]
        if value < 0:
            return SourceBacklog(description, None, "offsets",
                                 problem=f"{name}={_metric(metrics, name):g} is a negative lag")
        return SourceBacklog(description, value, "offsets")
    return SourceBacklog(description, None, "offsets")


def _partition_name(path: tuple[str, ...]) -> str:
    return "-".join(path)  # Kafka's own topic-partition spelling


def kafka_lag(end: Any, latest: Any) -> tuple[float | None, str | None]:
    """A Kafka source's lag in offsets, summed over partitions: ``(lag, None)``; ``(None, why)``
    when the offsets make no sense; ``(None, None)`` when they are not there to compare.

    Unlike :func:`offset_difference` nothing is clamped: a partition whose latest offset is behind
    the query's end offset (the topic was deleted and made again, or truncated), a negative offset,
    or a partition that vanished from the latest offsets means the lag is unknown. A lag larger
    than the log (more offsets behind than the partition ever held) shows as a negative end offset.
    Partitions only in the latest offsets (just added) are not counted: the query has not
    reached them yet.
    """
    if not (isinstance(end, Mapping) and isinstance(latest, Mapping)):
        return None, None
    end_leaves = dict(_numeric_leaves(end))
    latest_leaves = dict(_numeric_leaves(latest))
    if not end_leaves or not latest_leaves:
        return None, None
    total = 0.0
    for path, end_offset in end_leaves.items():
        name = _partition_name(path)
        latest_offset = latest_leaves.get(path)
        if latest_offset is None:
            return None, f"partition {name} is missing from the latest offsets (topic deleted?)"
        if latest_offset < 0:
            return None, f"partition {name} has a negative latest offset ({latest_offset:.0f})"
        if end_offset < 0:
            return None, (f"partition {name} lag {latest_offset - end_offset:.0f} is larger than its log "
                          f"({latest_offset:.0f} offsets): end offset {end_offset:.0f}")
        if latest_offset < end_offset:
            return None, (f"partition {name} has a negative lag: latest offset {latest_offset:.0f} is "
                          f"behind the query's end offset {end_offset:.0f} (topic recreated or "
                          "truncated?)")
        total += latest_offset - end_offset
    return total, None


def source_units_read(source: Mapping[str, Any]) -> float | None:
    """How many of its own units (Kafka offsets, Delta files) a batch read from this source, from
    the batch's start and end offsets; None when they do not tell (first batch, offsets that went
    backwards, a Delta batch spanning table versions, a source counted in rows)."""
    try:
        description = str(source.get("description") or "")
        start = _parse_offset(source.get("startOffset"))
        end = _parse_offset(source.get("endOffset"))
        if not (isinstance(start, Mapping) and isinstance(end, Mapping)):
            return None
        if _DELTA_SOURCE.match(description):
            # Within one table version the offset's index counts the version's files read so far.
            same_version = start.get("reservoirVersion") == end.get("reservoirVersion")
            i0, i1 = start.get("index"), end.get("index")
            if same_version and _isfinite_float(i0) and _isfinite_float(i1) and i1 >= i0:
                return float(i1 - i0)
            return None
        if not _is_kafka(description, _metrics_of(source)):
            return None
        start_leaves = dict(_numeric_leaves(start))
        end_leaves = dict(_numeric_leaves(end))
        if not end_leaves:
            return None
        total = 0.0
        for path, end_offset in end_leaves.items():
            start_offset = start_leaves.get(path)
            if start_offset is None or start_offset < 0 or end_offset < start_offset:
                return None
            total += end_offset - start_offset
        return total
    except Exception:  # malformed progress: no measurement, never an error
        return None


def batch_rows_per_unit(source: Mapping[str, Any]) -> float | None:
    """Rows per unit (offset, file) one batch of this source read; None if it does not tell.

    A Kafka offset holds at most one record (transaction markers and compacted records leave
    offsets without one), so a batch reporting more rows than offsets is not a measurement.
    """
    units = source_units_read(source)
    rows = _metric(source, "numInputRows") if isinstance(source, Mapping) else None
    if units is None or units <= 0 or rows is None or rows < 0:
        return None
    ratio = rows / units
    kafka = _is_kafka(str(source.get("description") or ""), _metrics_of(source))
    return None if kafka and ratio > 1.0 else ratio


# Before any batch of a source was measured: one row per Kafka offset, an upper bound (see
# batch_rows_per_unit). Files hold any number of rows, so they have no default.
DEFAULT_ROWS_PER_UNIT: dict[str, float] = {"offsets": 1.0}


def in_rows(backlog: SourceBacklog, rows_per_unit: float | None) -> SourceBacklog:
    """The source's backlog with its conversion to rows (``rows_per_unit``, learned from its
    batches; else the unit's default), or with a problem saying why it cannot be converted."""
    if backlog.backlog is None or backlog.unit == "rows":
        return backlog
    rate = rows_per_unit if rows_per_unit is not None else DEFAULT_ROWS_PER_UNIT.get(backlog.unit)
    if rate is None:
        unit = backlog.unit[:-1] if backlog.unit.endswith("s") else backlog.unit
        return replace(backlog, rows_per_unit=None, problem=(
            f"{backlog.backlog:.0f} {backlog.unit} behind, not counted: rows per {unit} not known until "
            "a batch shows how many it read"))
    return replace(backlog, rows_per_unit=rate, problem=None)


def query_backlog(sources: Any, rows_per_unit: Mapping[str, float] | None = None,
                  ) -> tuple[float | None, tuple[SourceBacklog, ...]]:
    """(the query's backlog in rows, or None; per-source backlogs with their conversion to rows).

    ``rows_per_unit`` maps a source's description to what its batches showed (the recorder learns
    it over recent batches); a source not in it uses its own batch, then the unit's default. The
    query's backlog sums the sources known in rows; a source in a unit that cannot be converted is
    left out (its ``problem`` says so); a source whose lag makes no sense makes the whole query's
    backlog unknown (None), so no decision is taken on it.
    """
    learned = rows_per_unit or {}
    per_source = []
    for source in sources or ():
        if not isinstance(source, Mapping):
            continue
        backlog = source_backlog(source)
        rate = learned.get(backlog.description)
        per_source.append(in_rows(backlog, rate if rate is not None else batch_rows_per_unit(source)))
    if any(s.nonsense for s in per_source):
        return None, tuple(per_source)
    known = [s.rows for s in per_source if s.rows is not None]
    return (sum(known) if known else None), tuple(per_source)


def backlog_problem(per_source: tuple[SourceBacklog, ...]) -> str | None:
    """One line for people: why a query has no backlog signal, or what its backlog leaves out."""
    nonsense = [s for s in per_source if s.nonsense]
    if nonsense:
        return "no backlog signal: " + "; ".join(f"{s.description}: {s.problem}" for s in nonsense)
    partial = [s for s in per_source if s.problem]
    return "; ".join(f"{s.description}: {s.problem}" for s in partial) or None


def _learned_rates(samples: Mapping[str, deque[tuple[float, float]]]) -> dict[str, float]:
    rates = {}
    for description, batches in samples.items():
        units = sum(u for _, u in batches)
        if units > 0:
            rates[description] = sum(r for r, _ in batches) / units
    return rates


# ---------------------------------------------------------------------------------------------
# Recorded state


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
    active: bool = True
    exception: str | None = None
    failed_batches: int = 0
    started_time: float | None = None
    terminated_time: float | None = None


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
    active: bool = True
    exception: str | None = None
    failed_batches: int = 0
    started_time: float | None = None
    terminated_time: float | None = None

    def freeze(self) -> QueryProgress:
        return QueryProgress(
            query_id=self.query_id, name=self.name, run_id=self.run_id, batches=self.batches,
            input_rows=self.input_rows, batch_duration_ms=self.batch_duration_ms,
            batch_ids=tuple(self.batch_ids), last_batch_id=self.last_batch_id,
            input_rate=self.input_rate, processed_rate=self.processed_rate, backlog=self.backlog,
            backlog_sources=self.backlog_sources, backlog_problem=self.backlog_problem,
            last_batch_duration_ms=self.last_batch_duration_ms,
            last_progress_time=self.last_progress_time, trigger_interval_ms=self.trigger_interval_ms,
            active=self.active, exception=self.exception, failed_batches=self.failed_batches,
            started_time=self.started_time, terminated_time=self.terminated_time)


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
        self._spark: Any = None

    # --- registration ------------------------------------------------------------------------

    def attach(self, spark: Any) -> None:
        """Add this listener to ``spark.streams`` (once; later calls do nothing)."""
        with self._lock:
            if self._spark is not None:
                return
            self._spark = spark
        spark.streams.addListener(self)

    def detach(self) -> None:
        """Remove this listener from the session it was attached to, if any. Never raises."""
        with self._lock:
            spark, self._spark = self._spark, None
        if spark is None:
            return
        try:
            spark.streams.removeListener(self)
        except Exception:  # the session may already be stopped
            log.debug("could not remove the progress listener", exc_info=True)

    @property
    def attached(self) -> bool:
        return self._spark is not None

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
            self._queries.move_to_end(state.query_id)

    def rows_per_unit(self, query_id: str) -> dict[str, float]:
        """Per source description of the query: rows per offset (or file) its recent batches read."""
        with self._lock:
            state = self._queries.get(str(query_id))
            return _learned_rates(state.unit_samples) if state else {}

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
        batch_id = int(batch_id_raw) if _isfinite_float(batch_id_raw) else None
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
            state.backlog, state.backlog_sources = query_backlog(sources, _learned_rates(state.unit_samples))
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

    def set_trigger_interval(self, query_id: str, ms: float | None) -> None:
        """The query's processing-time trigger interval; 0 or None: the default trigger."""
        with self._lock:
            self._state(str(query_id)).trigger_interval_ms = float(ms) if ms else None

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
            log.warning("sparkscale: could not record a query start", exc_info=True)

    def onQueryProgress(self, event: QueryProgressEvent) -> None:
        try:
            self.record_progress(json.loads(event.progress.json), time.time())
        except Exception:
            log.warning("sparkscale: could not record a query progress", exc_info=True)

    def onQueryIdle(self, event: QueryIdleEvent) -> None:
        try:
            self.record_idle(str(event.id), time.time())
        except Exception:
            log.warning("sparkscale: could not record a query idle event", exc_info=True)

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:
        try:
            self.record_terminated(str(event.id), event.exception, time.time())
        except Exception:
            log.warning("sparkscale: could not record a query termination", exc_info=True)
