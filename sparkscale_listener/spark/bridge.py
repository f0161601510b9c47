"""Python side of the JVM bridge (``jvm-bridge/``): executor counters, executor actions, events and gauges.

The Java plugin aggregates scheduler events inside the driver JVM (one py4j round trip per event would cost
far too much) and this wrapper polls it: :meth:`JvmBridge.snapshot` returns cumulative counters, from which
the collector derives rates by differencing two snapshots.

Enabling it: ``autoscale(builder)`` adds the jar of the running Spark line (see :mod:`.bridge_jars`) to
``spark.jars`` and the plugin to ``spark.plugins``.

Classpath caveat: pyspark starts ONE driver JVM per Python process. When it starts it for this session,
``spark.jars`` is on the driver's classpath. When the JVM already runs (spark-submit and the pyspark shell
start it before the user's code; an earlier session may have left it), ``spark.jars`` only reaches the
executors, so :meth:`JvmBridge.add_to_driver_classpath` adds the jar to the driver's class loader first.

The snapshot: :meth:`JvmBridge.poll` returns it as a :class:`BridgeSnapshot` of frozen records
(:class:`ExecutorSnapshot`, :class:`ListenerTotals`, :class:`QuerySnapshot`, :class:`BatchTasks`,
:class:`SourceOffsets`).
Its objects, fields, types and meanings are declared once, in
``jvm-bridge/src/main/resources/io/sparkscale/bridge/snapshot-schema.json`` (packaged in every bridge
jar); a JUnit test holds the JVM's JSON to it and ``tests/test_bridge_snapshot.py`` these records.
A record's attribute is the JSON field in snake case (``busyMs`` -> ``busy_ms``). The executors come as a
table, a row of values in the declared order each (the field names were most of a poll at 1,000
executors); a map of objects by id parses the same (the tests' fakes write that). A poll carries only
the batches that changed since the previous one; :class:`RecentBatches` keeps the others.

Why one module of ~560 lines: the snapshot's records, their parsing, the batches kept between polls
and the py4j wrapper that polls are the Python side of one contract with the JVM, and change together.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import pathlib
import threading
import types
import typing
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from py4j.java_gateway import JavaClass
from py4j.protocol import Py4JError

log = logging.getLogger("sparkscale")

PLUGIN_CLASS = "io.sparkscale.bridge.SparkscalePlugin"
BRIDGE_CLASS = "io.sparkscale.bridge.SparkscaleBridge"
# Where the snapshot's declaration is: in each bridge jar, and in the source tree under jvm-bridge/.
SNAPSHOT_SCHEMA = "io/sparkscale/bridge/snapshot-schema.json"


# --- the snapshot's records (declared in SNAPSHOT_SCHEMA; the defaults stand for absent fields) ---------

@dataclass(frozen=True, slots=True)
class ExecutorSnapshot:
    """One executor, live or removed."""

    host: str = ""
    cores: int = 1
    added_ms: int = 0
    removed_ms: int | None = None  # None while it lives
    removed_reason: str | None = None
    running_tasks: int = 0
    live_shuffle_jobs: int = 0  # running jobs whose shuffle map output it holds
    busy_ms: float = 0.0  # ended tasks plus the elapsed part of running ones
    tasks_finished: int = 0
    tasks_failed: int = 0
    gc_ms: float = 0.0
    run_ms: float = 0.0
    heap_used_bytes: int = -1  # -1 before any heartbeat or task end reported it
    heap_max_bytes: int = -1

    @property
    def live(self) -> bool:
        return self.removed_ms is None


@dataclass(frozen=True, slots=True)
class ListenerTotals:
    """Counters over every executor the listener saw, removed ones included."""

    slot_ms: float = 0.0
    busy_ms: float = 0.0
    tasks_finished: int = 0
    tasks_failed: int = 0
    tasks_killed: int = 0
    tasks_aged_out: int = 0  # running tasks whose end event was lost
    gc_ms: float = 0.0
    run_ms: float = 0.0
    executors_added: int = 0
    executors_removed: int = 0


@dataclass(frozen=True, slots=True)
class BatchTasks:
    """What the tasks of one micro-batch did."""

    busy_ms: float = 0.0  # task time of its ended tasks
    tasks: int = 0  # its ended tasks (succeeded, failed or killed)
    executors: int = 0  # distinct executors its tasks ran on
    first_launch_ms: int | None = None  # None before its first task launched
    last_end_ms: int | None = None  # None before its first task ended
    stages: int = 0  # stage attempts submitted for it


@dataclass(frozen=True, slots=True)
class QuerySnapshot:
    """One streaming query's jobs (attributed through the job property ``sql.streaming.queryId``)."""

    busy_ms: float = 0.0  # ended tasks plus the elapsed part of running ones
    tasks_finished: int = 0
    tasks_failed: int = 0
    run_ms: float = 0.0
    jobs_failed: int = 0
    max_stage_tasks: int = 0  # widest of its latest submitted stages; 0 before any
    batches: Mapping[str, BatchTasks] = field(default_factory=dict)  # its latest batches, by batch id


@dataclass(frozen=True, slots=True)
class SourceOffsets:
    """The latest offsets of a query's Kafka sources, read between batches (``SourceOffsets.java``)."""

    time_ms: int = 0  # when the brokers answered (the middle of its requests)
    offsets: float = 0.0  # the sum of the latest offsets of the partitions the sources last planned
    partitions: int = 0  # how many partitions the sum is over


@dataclass(frozen=True, slots=True)
class BridgeSnapshot:
    """The listener's counters at one instant (times epoch ms, durations ms, counters cumulative)."""

    time_ms: int = 0  # 0: no snapshot (the plugin is not running)
    app_id: str = ""
    cores_per_executor: int = 0
    executors: Mapping[str, ExecutorSnapshot] = field(default_factory=dict)  # by executor id
    totals: ListenerTotals = field(default_factory=ListenerTotals)
    queries: Mapping[str, QuerySnapshot] = field(default_factory=dict)  # by query id
    other_tasks: int = 0  # pending or running tasks of jobs outside every streaming query
    listener_events_dropped: int = 0  # events Spark's listener bus dropped so far (a queue was full)
    listener_id: str = ""  # change counts of another listener (a new SparkContext) are not comparable
    changes: int = 0  # changes to batches the listener has seen
    batches_since: int = -1  # the batches are those changed after this change count; -1: all of them
    batches_per_query: int = 0  # how many of a query's latest batches the listener keeps
    source_offsets: Mapping[str, SourceOffsets] = field(default_factory=dict)  # by query id

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> BridgeSnapshot:
        """The records of a snapshot as the JVM sends it (``{}`` gives the empty snapshot). Absent
        fields take the records' defaults and unknown ones are ignored, so a mismatch shows in the
        contract tests rather than as a failing tick."""
        return _parse(cls, document)


R = TypeVar("R")


def json_name(attribute: str) -> str:
    """The JSON field of a record attribute: ``first_launch_ms`` -> ``firstLaunchMs``."""
    head, *rest = attribute.split("_")
    return head + "".join(part.title() for part in rest)


def record_fields(record: type) -> dict[str, Any]:
    """A record's JSON fields and their Python types (resolved annotations)."""
    hints = typing.get_type_hints(record)
    return {json_name(f.name): hints[f.name] for f in dataclasses.fields(record)}


def _converter(kind: Any) -> Callable[[Any], Any]:
    """From a JSON value to a value of the annotated type; None (null or absent) is left to the caller."""
    if kind is int:
        return lambda v: int(v) if isinstance(v, int) else int(_number(v))
    if kind is float:
        return _number
    if kind is str:
        return str
    origin = typing.get_origin(kind)
    if origin in (types.UnionType, typing.Union):  # X | None
        (inner,) = [a for a in typing.get_args(kind) if a is not type(None)]
        return _converter(inner)
    if origin is not None and issubclass(origin, Mapping):  # Mapping[str, Record]: a map or a table
        _, value = typing.get_args(kind)
        parse = _converter(value)

        def by_id(v: Any) -> dict[str, Any]:
            if isinstance(v, list):
                return {str(row[0]): _parse_row(value, row) for row in v if isinstance(row, list) and row}
            return {str(k): parse(x) for k, x in v.items() if isinstance(x, Mapping)} \
                if isinstance(v, Mapping) else {}
        return by_id
    if dataclasses.is_dataclass(kind):
        return lambda v: _parse(kind, v) if isinstance(v, Mapping) else kind()
    raise TypeError(f"no JSON conversion for {kind!r}")


def _number(value: Any) -> float:
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"not a finite number: {value!r}")
    return number


_PLANS: dict[type, list[tuple[str, str, Callable[[Any], Any]]]] = {}


def _plan(record: type) -> list[tuple[str, str, Callable[[Any], Any]]]:
    """(attribute, JSON field, converter) of each of a record's fields, in their declared order."""
    plan = _PLANS.get(record)
    if plan is None:
        plan = _PLANS[record] = [(f.name, json_name(f.name), _converter(t))
                                 for f, t in zip(dataclasses.fields(record),  # type: ignore[arg-type]
                                                 record_fields(record).values(), strict=True)]
    return plan


def _parse(record: type[R], document: Mapping[str, Any]) -> R:
    values = {}
    for attribute, key, convert in _plan(record):
        value = document.get(key)
        if value is not None:
            try:
                values[attribute] = convert(value)
            except (TypeError, ValueError):
                pass  # a value of the wrong type: the default, as for an absent field
    return record(**values)


def _parse_row(record: type[R], row: Sequence[Any]) -> R:
    """A table's row: the id, then the record's fields in their declared order (a short row leaves
    the last ones at their defaults). A value already of its field's type is taken as it is (a
    table has a row per executor: a thousand rows a poll); a row whose every value is, or is null
    where the default is None, goes to the record as it is, once its floats are finite."""
    shape = (record, tuple(map(type, row)))
    floats = _ROW_SHAPES.get(shape, _UNSEEN)
    if floats is _UNSEEN:
        floats = _positional_floats(record, shape[1])
        if len(_ROW_SHAPES) < _MAX_ROW_SHAPES:
            _ROW_SHAPES[shape] = floats
    if isinstance(floats, tuple) and math.isfinite(sum(row[i] for i in floats)):
        return record(*row[1:])
    values = {}
    fields = zip(_plan(record), _exact_types(record), row[1:], strict=False)
    for (attribute, _, convert), exact, value in fields:
        if value is None:
            continue
        if type(value) is exact and (exact is not float or math.isfinite(value)):
            values[attribute] = value
            continue
        try:
            values[attribute] = convert(value)
        except (TypeError, ValueError):
            pass
    return record(**values)


# Per record and row shape (each value's type): the positions of its float values when the row
# can go to the record as it is (see _parse_row), else None.
_ROW_SHAPES: dict[tuple[type, tuple[type, ...]], tuple[int, ...] | None] = {}
_MAX_ROW_SHAPES = 256
_UNSEEN = object()


def _positional_floats(record: type, shape: tuple[type, ...]) -> tuple[int, ...] | None:
    """For a row of this shape (the id's type first): where its floats are when every value has
    its field's exact type or is null where the default is None, else None (convert each)."""
    defaults = [f.default for f in dataclasses.fields(record)]
    if len(shape) - 1 > len(defaults):
        return None
    floats = []
    columns = zip(shape[1:], _exact_types(record), defaults, strict=False)  # a short row: defaults
    for i, (kind, exact, default) in enumerate(columns, start=1):
        if kind is type(None) and default is None:
            continue
        if exact is None or kind is not exact:
            return None
        if kind is float:
            floats.append(i)
    return tuple(floats)


_EXACT: dict[type, tuple[type | None, ...]] = {}


def _exact_types(record: type) -> tuple[type | None, ...]:
    """Each field's type where a JSON value of it needs no conversion (int, float, str), else None."""
    exact = _EXACT.get(record)
    if exact is None:
        scalars = (int, float, str)
        exact = _EXACT[record] = tuple(
            next((t for t in scalars if kind is t or kind == t | None), None)
            for kind in record_fields(record).values())
    return exact


def with_tables_by_id(document: dict[str, Any]) -> dict[str, Any]:
    """A snapshot's JSON with its tables (the executors) as maps of objects by id, each row's values
    under their JSON names: how tests and tools read one field of one executor."""
    if not isinstance(document.get("executors"), list):
        return document
    names = [key for _, key, _ in _plan(ExecutorSnapshot)]
    executors = {str(row[0]): dict(zip(names, row[1:], strict=False)) for row in document["executors"]}
    return {**document, "executors": executors}


class RecentBatches:
    """The queries' latest batches, kept across polls that carry only the batches that changed.

    At 100 queries the listener's 64 batches each are most of a snapshot's JSON, and between two
    polls a second apart a few of them change: :meth:`JvmBridge.poll` asks for those (the change
    count of the previous poll, :attr:`since`) and :meth:`merge` puts them with the others, keeping
    what the listener keeps (its ``batchesPerQuery`` latest per query, oldest first out).
    """

    def __init__(self) -> None:
        self._listener_id = ""
        self._changes = -1
        self._by_query: dict[str, dict[str, BatchTasks]] = {}

    @property
    def since(self) -> int:
        """The change count to ask the listener for the batches changed after; -1: all of them."""
        return self._changes

    def continues(self, snapshot: BridgeSnapshot) -> bool:
        """Whether ``snapshot`` completes what is kept: a whole one, or the changes of the same listener
        since :attr:`since` (a new SparkContext's listener counts from 0 again)."""
        return snapshot.batches_since == -1 or (
            snapshot.listener_id == self._listener_id and snapshot.batches_since == self._changes)

    def merge(self, snapshot: BridgeSnapshot) -> BridgeSnapshot:
        """``snapshot`` with every query's latest batches: its changed ones on top of those kept."""
        if snapshot.time_ms == 0:  # no plugin running: nothing to keep
            self._listener_id, self._changes, self._by_query = "", -1, {}
            return snapshot
        whole = snapshot.batches_since == -1
        keep = snapshot.batches_per_query
        kept: dict[str, dict[str, BatchTasks]] = {}
        queries = {}
        for query_id, query in snapshot.queries.items():
            batches = {} if whole else self._by_query.get(query_id, {})
            batches.update(query.batches)  # a changed batch keeps its place, a new one goes last
            while keep and len(batches) > keep:
                del batches[next(iter(batches))]
            kept[query_id] = batches
            queries[query_id] = dataclasses.replace(query, batches=dict(batches))
        # Queries the listener no longer tracks are forgotten here too.
        self._by_query, self._listener_id, self._changes = kept, snapshot.listener_id, snapshot.changes
        return dataclasses.replace(snapshot, queries=queries)


class BridgeNotInstalledError(RuntimeError):
    """The bridge jar is not on the driver classpath (or the plugin is not enabled)."""


class JvmBridge:
    """Thin py4j wrapper around the static ``SparkscaleBridge`` class.

    When the class is not on the driver classpath, :meth:`installed` is False and every other method
    raises :class:`BridgeNotInstalledError`. When the class is there but the plugin is not running (not in
    ``spark.plugins``, or the SparkContext stopped), the Java side answers "nothing": ``{}``, False, ``[]``,
    no-op. Errors Spark raises (e.g. killing executors while dynamic allocation is on) come through as
    ``py4j.protocol.Py4JJavaError``.
    """

    def __init__(self, spark_context: Any) -> None:
        self._sc = spark_context
        self._jvm = spark_context._jvm
        self._gateway = spark_context._gateway
        cls: Any = self._jvm
        for part in BRIDGE_CLASS.split("."):
            cls = getattr(cls, part)
        # py4j answers an unknown class with a JavaPackage, not an error.
        self._cls: Any = cls if isinstance(cls, JavaClass) else None
        self._batches = RecentBatches()
        self._poll_lock = threading.Lock()  # one poll at a time: each continues from the previous one
        self._replies_without_delay = False

    @staticmethod
    def running_jvm() -> Any | None:
        """The py4j view of a driver JVM that runs with no active SparkContext yet (spark-submit
        and the pyspark shell start it before the user's code; an earlier session may have left
        it), or None when pyspark will launch a fresh one."""
        from pyspark import SparkContext

        if SparkContext._gateway is None and "PYSPARK_GATEWAY_PORT" not in os.environ:
            return None  # no JVM yet: pyspark passes spark.jars to the spark-submit it launches
        SparkContext._ensure_initialized()  # connects to the running JVM; never launches one here
        return SparkContext._jvm

    @staticmethod
    def launch_driver_jvm(conf: Mapping[str, str]) -> Any:
        """Start the driver JVM (pyspark's spark-submit) with ``conf`` and return its py4j view,
        as ``getOrCreate()`` would; spark-submit resolves ``spark.jars.packages`` on the way."""
        from pyspark import SparkConf, SparkContext

        spark_conf = SparkConf()
        for key, value in conf.items():
            spark_conf.set(key, value)
        SparkContext._ensure_initialized(conf=spark_conf)
        return SparkContext._jvm

    @staticmethod
    def submitted_conf(jvm: Any) -> dict[str, str]:
        """The ``spark.*`` settings a running driver JVM holds as system properties (spark-submit's
        ``--conf`` and ``spark-defaults.conf``), which the next SparkConf will read."""
        properties = jvm.java.lang.System.getProperties()
        return {str(k): str(properties.getProperty(k)) for k in properties.stringPropertyNames()
                if str(k).startswith("spark.")}

    @staticmethod
    def add_to_driver_classpath(jvm: Any, jar: pathlib.Path) -> None:
        """Add the bridge jar to the class loader spark-submit gave the driver (Spark's
        ``MutableURLClassLoader``, the context class loader of the py4j threads): Spark loads
        ``spark.plugins`` classes and py4j looks classes up through it. Idempotent."""
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        mutable = jvm.org.apache.spark.util.MutableURLClassLoader._java_lang_class
        if not mutable.isInstance(loader):
            raise BridgeNotInstalledError(
                f"the driver JVM was started before this code and its class loader "
                f"({loader.getClass().getName()}) cannot take the sparkscale bridge jar; start the "
                f"application with `--jars {jar} --conf spark.plugins={PLUGIN_CLASS}`")
        url = jvm.java.io.File(str(jar)).toURI().toURL()
        if url.toString() not in [u.toString() for u in loader.getURLs()]:
            loader.addURL(url)

    def installed(self) -> bool:
        """The class is on the driver classpath AND the plugin initialised with a live SparkContext."""
        return self._cls is not None and bool(self._cls.isInstalled())

    def poll(self) -> BridgeSnapshot:
        """The listener's counters, typed; empty (``time_ms == 0``) when the class is loaded but the
        plugin is not running. Only the batches that changed since the previous poll cross py4j; the
        others are this object's from before (see :class:`RecentBatches`)."""
        with self._poll_lock:
            snapshot = self._snapshot_since(self._batches.since)
            if not self._batches.continues(snapshot):  # another listener since the previous poll
                snapshot = self._snapshot_since(-1)
            return self._batches.merge(snapshot)

    def _snapshot_since(self, batches_since: int) -> BridgeSnapshot:
        return BridgeSnapshot.from_json(json.loads(self._bridge().snapshotJson(batches_since)))

    def snapshot(self) -> dict[str, Any]:
        """The counters as the JVM's JSON (declared in ``SNAPSHOT_SCHEMA``), its executors by id
        (:func:`with_tables_by_id`); ``{}`` when the class is loaded but the plugin is not running.
        For tests and diagnostics: the collector reads :meth:`poll`."""
        return with_tables_by_id(json.loads(self._bridge().snapshotJson()))

    def watch_source_offsets(self, query_id: str, streaming_query: Any) -> None:
        """Read the latest offsets of a pyspark ``StreamingQuery``'s Kafka sources every second from
        now on (the snapshots' ``source_offsets``)."""
        self._bridge().watchSourceOffsets(query_id, streaming_query._jsq)

    def request_total_executors(self, total: int) -> bool:
        """Absolute target; False when the cluster manager refused (e.g. local mode)."""
        return bool(self._bridge().requestTotalExecutors(int(total)))

    def kill_executors(self, ids: Sequence[str]) -> list[str]:
        """Kill without replacement; returns the ids Spark accepted (all or none)."""
        return list(self._bridge().killExecutors(self._string_array(ids)))

    def decommission_executors(self, ids: Sequence[str]) -> list[str]:
        """Graceful decommission; returns the ids accepted. Returns ``[]`` unless
        ``spark.decommission.enabled=true`` (without it Spark would stop scheduling on the executors while
        they never exit)."""
        return list(self._bridge().decommissionExecutors(self._string_array(ids)))

    def post_scaling_event(
        self,
        action: str,
        from_executors: int,
        to_executors: int,
        reason: str,
        applied: bool,
        mode: str,
        details: dict[str, Any],
    ) -> None:
        """Post an ``io.sparkscale.bridge.ScalingEvent`` on the listener bus (and so into the event log)."""
        self._bridge().postScalingEvent(
            action, int(from_executors), int(to_executors), reason, bool(applied), mode, _to_json(details)
        )

    def post_autoscaler_event(self, kind: str, severity: str, reason: str, details: dict[str, Any]) -> None:
        """Post an ``io.sparkscale.bridge.AutoscalerEvent`` on the listener bus."""
        self._bridge().postAutoscalerEvent(kind, severity, reason, _to_json(details))

    def post_tick_event(self, summary_json: str, logged: bool) -> None:
        """Post an ``io.sparkscale.bridge.AutoscalerTick`` (a tick summary; see
        :mod:`sparkscale_listener.observe.ui`) on the listener bus; ``logged``: the event log keeps it."""
        self._bridge().postTickEvent(summary_json, bool(logged))

    def publish_gauges(self, values: Mapping[str, float], removed: Sequence[str], text: str) -> None:
        """A tick's driver metric gauges in one call: ``values`` set (a name seen for the first
        time, e.g. ``query.<name>.backlogRows``, is registered), ``removed`` unregistered (a stopped
        query's: they leave every metrics sink), and ``text`` the Prometheus text that
        ``/autoscaler/metrics`` serves (see :mod:`sparkscale_listener.observe.gauges`)."""
        self._bridge().publishGauges(json.dumps({k: float(v) for k, v in values.items()}),
                                     json.dumps(list(removed)), text)

    def latest_metrics(self) -> str:
        """The Prometheus text last given to :meth:`publish_gauges` ("" before the first)."""
        return str(self._bridge().latestMetrics())

    def tab_document(self) -> str | None:
        """The live Autoscaler tab's document (JSON, built in the JVM from the autoscaler's events), or
        None without a tab or before the first event."""
        text = self._bridge().tabDocument()
        return None if text is None else str(text)

    def ui_tab_attached(self) -> bool:
        """The Autoscaler tab is on the driver UI (False with ``spark.ui.enabled=false``)."""
        return bool(self._bridge().uiTabAttached())

    def metrics_endpoint_attached(self) -> bool:
        """``/autoscaler/metrics`` is served (with the tab)."""
        return bool(self._bridge().metricsEndpointAttached())

    # --- SparkContext calls that need no bridge class (plain py4j, kept here so that the bridge is
    # --- the only way into the JVM)

    def executor_ids(self) -> list[str]:
        """The scheduler's own list of executors it can schedule on (driver excluded)."""
        text = self._sc._jsc.sc().getExecutorIds().mkString(",")
        return [e for e in text.split(",") if e]

    def kill_idle_executors(self, ids: Sequence[str]) -> list[str]:
        """Kill the idle ones of these executors; returns the ids killed. The scheduler itself
        skips an executor that picked up a task since we looked (its task would be re-run), and the
        bridge skips one holding shuffle output of a running job (its next stage would fail)."""
        return list(self._bridge().killIdleExecutors(self._string_array(ids)))

    def remove_when_idle(self, ids: Sequence[str], target: int) -> None:
        """Remove these busy executors the moment their running tasks end (the bridge's listener
        sees the last one end; the same checks as :meth:`kill_idle_executors`) while more than
        ``target`` are live, replacing the ones named before; none cancels. The target is not
        lowered: it is set already."""
        self._bridge().removeWhenIdle(self._string_array(ids), int(target))

    def removed_when_idle(self) -> list[str]:
        """The executors :meth:`remove_when_idle` removed since the last call."""
        return list(self._bridge().removedWhenIdle())

    def shuffle_holders(self) -> set[str]:
        """Executors holding shuffle map output of a job still running: not to be removed yet."""
        return set(self._bridge().shuffleHolders())

    @staticmethod
    def trigger_interval_ms(streaming_query: Any) -> tuple[float, bool]:
        """(the trigger interval in ms, real-time mode) of a pyspark ``StreamingQuery``: its
        processing-time interval, or the batch duration of Spark 4's real-time mode (neither is
        in the progress JSON); raises for other triggers."""
        trigger = streaming_query._jsq.streamingQuery().trigger()
        if trigger.getClass().getSimpleName() == "RealTimeTrigger":
            return float(trigger.batchDurationMs()), True
        return float(trigger.intervalMs()), False

    def context_stopped(self) -> bool:
        """The SparkContext is gone or stopped (the application ended), or the JVM is gone (py4j
        cannot reach it). Any other failure raises."""
        try:
            return self._sc._jsc is None or bool(self._sc._jsc.sc().isStopped())
        except Py4JError:
            return True

    @staticmethod
    def clear_system_properties(prefix: str, keep: Collection[str]) -> None:
        """Before a new SparkContext in a process whose driver JVM already ran one: drop the JVM
        system properties under ``prefix`` that the new session does not set. PySpark launches
        the driver JVM with the first session's conf as system properties, which a new SparkConf
        would inherit."""
        from pyspark import SparkContext

        jvm = SparkContext._jvm
        if jvm is None or SparkContext._active_spark_context is not None:
            return  # no JVM yet, or getOrCreate() will return the running session as it is
        system = jvm.java.lang.System
        for key in list(system.getProperties().stringPropertyNames()):
            if key.startswith(prefix) and key not in keep:
                system.clearProperty(key)

    def _bridge(self) -> Any:
        if self._cls is None:
            raise BridgeNotInstalledError(
                f"{BRIDGE_CLASS} is not on the driver classpath: create the session with "
                "sparkscale_listener.autoscale(SparkSession.builder...)"
            )
        if not self._replies_without_delay:
            self._replies_without_delay = True
            self._without_delay(self._cls)
        return self._cls

    def _without_delay(self, cls: Any) -> None:
        """Once: py4j's replies of more than 8 KB (a poll at hundreds of executors, the tab's
        document) wait 44 ms each for a delayed TCP acknowledgement unless the JVM's sockets send
        at once (``Py4jReplies`` in the bridge says why). Best effort: a bridge or py4j without it
        is only slower."""
        try:
            cls.repliesWithoutDelay(self._gateway.java_gateway_server)
        except Exception:
            log.debug("could not turn off the delay of py4j's replies", exc_info=True)

    def _string_array(self, ids: Sequence[str]) -> Any:
        array = self._gateway.new_array(self._jvm.java.lang.String, len(ids))
        for i, executor_id in enumerate(ids):
            array[i] = str(executor_id)
        return array


def _to_json(details: dict[str, Any] | None) -> str:
    # default=str: a stray datetime or numpy value must not make event posting fail. NaN/Infinity tokens
    # are accepted by the Java side and written to the event log as strings.
    return json.dumps(details or {}, default=str)
