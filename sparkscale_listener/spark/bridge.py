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

The snapshot: :meth:`JvmBridge.poll` returns it as a
:class:`~sparkscale_listener.collect.snapshot.BridgeSnapshot`, whose records and parsing are
declared with the collection that reads them (:mod:`sparkscale_listener.collect.snapshot`).
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
import threading
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from py4j.java_gateway import JavaClass
from py4j.protocol import Py4JError

from ..collect.snapshot import BridgeSnapshot, RecentBatches, with_tables_by_id

log = logging.getLogger("sparkscale")

PLUGIN_CLASS = "io.sparkscale.bridge.SparkscalePlugin"
BRIDGE_CLASS = "io.sparkscale.bridge.SparkscaleBridge"


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

    def query_events(self, seen: int, wait_ms: int) -> dict[str, Any]:
        """The streaming-query events of every SparkSession of the driver numbered after ``seen``
        (the ``last`` of an earlier reply; 0: all the JVM keeps), waiting up to ``wait_ms`` for one:
        ``{"last": n, "missed": n, "events": [...]}``; ``{}`` when the plugin is not running."""
        return dict(json.loads(self._bridge().queryEventsJson(int(seen), int(wait_ms))))

    def agent_state(self) -> str | None:
        """What the agent's memory state store saved last in the driver's heap (JSON), or None."""
        text = self._bridge().agentState()
        return None if text is None else str(text)

    def save_agent_state(self, text: str) -> None:
        """Keep the agent's memory state store (JSON) in the driver's heap, for a restarted agent."""
        self._bridge().saveAgentState(text)

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
