"""Wiring the autoscaler into a SparkSession: the user's one line.

Order matters: every ``spark.sparkscale.*`` key is validated and the dynamic-allocation conflict
refused *before* the session (and its executors) start, with the settings the driver will start with
(``spark-defaults.conf`` and ``PYSPARK_SUBMIT_ARGS`` included: :mod:`.launch_conf`). The bridge must
be on the driver's class path before the SparkContext starts (plugins load then): it is added to the
builder, and, when the driver JVM already runs (spark-submit, the pyspark shell), to the driver's
class loader too.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from pyspark.sql import SparkSession

from ..check.loading import build_checkers
from ..collect.collector import MetricCollector, SparkMetricCollector
from ..collect.jvm_feed import JvmProgressFeed
from ..collect.progress import ProgressRecorder
from ..config.core import AutoscalerConfig, Mode, misspelt_prefix_warning
from ..config.options import PREFIX, ConfigError, parse_duration
from ..config.plugins import PluginContext, construct, load_class
from ..control_loop import Autoscaler, ControlLoop, wire
from ..evaluator import MetricEvaluator, MicroBatchEvaluator
from ..observe.events import (
    AutoscalerEvent,
    EventDispatcher,
    LoggingEventHandler,
    build_event_handlers,
    event_handler_choices,
)
from ..observe.gauges import GaugePublisher
from ..observe.logs import LOGGER_NAME, show_lines_until_configured
from ..observe.ui import UiPublisher
from ..realize.provisioning import AllocationBatches
from ..realize.realizer import ExecutorRealizer, ScalingRealizer
from ..state.loading import build_state_store, state_store_choice
from . import jars as bridge_jars
from .backend import SparkClusterBackend
from .bridge import PLUGIN_CLASS, BridgeNotInstalledError, JvmBridge
from .launch_conf import launch_conf

log = logging.getLogger(LOGGER_NAME)

_running: dict[str, tuple[Autoscaler, ControlLoop]] = {}
_lock = threading.Lock()
_sessions_started = 0  # autoscalers started in this process (a later session's JVM has leftovers)


class UnsupportedSessionError(RuntimeError):
    """The session gives no access to the driver JVM (Spark Connect, shared-access notebooks)."""


NO_JVM_ADVICE = (
    "sparkscale runs inside the driver: it needs the driver JVM (a SparkContext) to read scheduler "
    "events and to add and remove executors, and a Spark Connect client has neither. It works with a "
    "classic session: spark-submit, the pyspark shell, a notebook on a single-user (dedicated) "
    "cluster, or a job that builds its own SparkSession")


def autoscale(session_or_builder: Any) -> SparkSession:
    refuse_connect(session_or_builder)
    if isinstance(session_or_builder, SparkSession):
        return attach(session_or_builder)
    builder = session_or_builder
    options: dict[str, str] = {k: str(v) for k, v in getattr(builder, "_options", {}).items()}
    jvm = JvmBridge.running_jvm()
    if jvm is not None and _sessions_started:
        # pyspark launched this process's driver JVM with the first session's settings as system
        # properties; this session's autoscaler takes its settings from its own builder, not from
        # those leftovers (say, a test's maxRollbacks).
        JvmBridge.clear_system_properties(PREFIX, options)
    # Under spark-submit, --conf values and spark-defaults.conf wait in the JVM's system properties;
    # without a JVM yet, they wait in the files and PYSPARK_SUBMIT_ARGS it will start with. The
    # builder wins over both.
    started_with = JvmBridge.submitted_conf(jvm) if jvm is not None else launch_conf()
    submitted = {**started_with, **options}
    config = check_before_start(submitted)  # fail before anything starts
    if not config.enabled:
        return builder.getOrCreate()
    jar = bridge_jars.bridge_jar(jvm)  # the jar of the Spark that runs (or will run) the driver
    if jvm is not None:
        # spark-submit, the pyspark shell, or an earlier session started the driver JVM before this
        # code: spark.jars would reach the executors but not the driver, so add the jar to the
        # driver's class loader here (Spark loads plugins, and py4j finds classes, through it).
        JvmBridge.add_to_driver_classpath(jvm, jar)
    # Executors load every spark.plugins class too (an executor without it exits): they get the
    # jar through spark.jars. The builder's spark.jars replaces the driver JVM's when the session
    # starts, so it must hold the jars the JVM already has: those spark-submit put there from
    # --jars and from --packages / spark.jars.packages, which it resolves when it starts.
    jars = _append_csv(submitted.get("spark.jars"), str(jar))
    plugins = _append_csv(submitted.get("spark.plugins"), PLUGIN_CLASS)
    if jvm is None and submitted.get("spark.jars.packages"):
        # Start the driver JVM now, with this builder's settings, and read back what spark-submit
        # resolved the packages into.
        jvm = JvmBridge.launch_driver_jvm({**options, "spark.jars": jars, "spark.plugins": plugins})
        jars = _append_csv(JvmBridge.submitted_conf(jvm).get("spark.jars"), str(jar))
    builder.config("spark.jars", jars)
    builder.config("spark.plugins", plugins)
    return attach(_start_session(builder, jar), config)


def _start_session(builder: Any, jar: Any) -> SparkSession:
    """``getOrCreate()``, with a bridge that does not load (not on the driver's class path, or
    built for another Spark) reported as what to do, not as a JVM stack trace."""
    try:
        return builder.getOrCreate()
    except Exception as err:
        text = str(err)
        broken = ("io.sparkscale.bridge" in text
                  and any(e in text for e in ("ClassNotFoundException", "NoClassDefFoundError",
                                              "NoSuchMethodError", "LinkageError", "AbstractMethodError")))
        if not broken:
            raise
        first = next((line.strip() for line in text.splitlines() if "io.sparkscale.bridge" in line), text)
        raise BridgeNotInstalledError(
            f"the sparkscale JVM bridge did not load into the driver ({first[:300]}). The jar picked "
            f"for this Spark is {jar}. If the driver was started by a tool that fixes its class path, "
            f"start it with `--jars {jar} --conf spark.plugins={PLUGIN_CLASS}`; if the jar is from "
            "another sparkscale-listener install, reinstall it for this Spark") from None


def refuse_connect(session_or_builder: Any) -> None:
    """Raise :class:`UnsupportedSessionError` for a Spark Connect session or builder."""
    options = getattr(session_or_builder, "_options", None) or {}
    module = type(session_or_builder).__module__ or ""
    remote = (module.startswith("pyspark.sql.connect") or "spark.remote" in options
              or (not isinstance(session_or_builder, SparkSession)
                  and (os.environ.get("SPARK_CONNECT_MODE_ENABLED") == "1" or "SPARK_REMOTE" in os.environ)))
    if remote:
        raise UnsupportedSessionError(f"this is a Spark Connect session; {NO_JVM_ADVICE}")


def autoscaler(spark: SparkSession) -> Autoscaler:
    app_id = spark.sparkContext.applicationId
    with _lock:
        entry = _running.get(app_id)
    if entry is None:
        raise RuntimeError(
            f"no sparkscale autoscaler runs for application {app_id}; create the session with "
            "sparkscale_listener.autoscale(SparkSession.builder...) (or set spark.sparkscale.enabled=true)")
    return entry[0]


def stop_autoscaler(spark: SparkSession) -> None:
    with _lock:
        entry = _running.pop(spark.sparkContext.applicationId, None)
    if entry is not None:
        entry[1].stop()


def check_before_start(conf: Mapping[str, str]) -> AutoscalerConfig:
    """Every check that needs no SparkContext, before the application starts: the keys, dynamic
    allocation left on, decommission without Spark's, the modules. Raises :class:`ConfigError`
    naming the key; the agent's launch runs the same (``agent --check``, from the driver plugin)."""
    config = AutoscalerConfig.from_spark_conf(conf)
    if config.enabled:
        refuse_dynamic_allocation(conf)
        refuse_decommission_without_spark(config, conf)
        validate_modules(config)
    return config


def refuse_dynamic_allocation(conf: Mapping[str, str]) -> None:
    if conf.get("spark.dynamicAllocation.enabled", "false").strip().lower() == "true":
        raise ConfigError(
            "spark.dynamicAllocation.enabled=true: Spark's allocation manager would overwrite the "
            "autoscaler's executor target and refuse its kills. Set spark.dynamicAllocation.enabled="
            f"false (sparkscale replaces it for streaming), or {PREFIX}enabled=false to keep dynamic "
            "allocation")


def refuse_decommission_without_spark(config: AutoscalerConfig, conf: Mapping[str, str]) -> None:
    if config.decommission and conf.get("spark.decommission.enabled", "false").lower() != "true":
        raise ConfigError(f"{PREFIX}scaleDown.decommission=true needs spark.decommission.enabled=true "
                          "(graceful decommission is off in this application)")


def with_start_target(config: AutoscalerConfig, conf: Mapping[str, str]) -> AutoscalerConfig:
    """``initialExecutors`` unset: the executors the application asked its cluster manager for
    (``spark.executor.instances``), within [minExecutors, maxExecutors]. Counting those registered
    once their number settled took the first wave where executors come in waves (Kubernetes pods
    waiting for new nodes, a YARN queue freeing containers), and the baseline request then cancelled
    the rest. Without the key (local-cluster, standalone), the settled count stays the start."""
    if config.initial_executors is not None or config.mode is not Mode.AUTOSCALE:
        return config
    try:
        asked = int(str(conf.get("spark.executor.instances", "")).strip())
    except ValueError:
        return config  # unset (or Spark refused it already)
    if asked < 1:
        return config
    return replace(config, initial_executors=config.bounded(asked))


# Spark's default spark.kubernetes.allocation.batch.size by line: 5 up to 3.5, 10 in 4.0 and 4.1, 20 from 4.2.
_DEFAULT_POD_BATCH = ((4, 2, 20), (4, 0, 10), (0, 0, 5))


def allocation_batches(conf: Mapping[str, str], spark_version: str) -> AllocationBatches | None:
    """How Spark's Kubernetes backend creates the pods of a request (None on other cluster
    managers): ``spark.kubernetes.allocation.batch.size`` pods, then ``batch.delay`` (1 s; a bare
    number is milliseconds there) before the next batch. Spark refused bad values before this runs."""
    if not str(conf.get("spark.master", "")).startswith("k8s://"):
        return None
    major, minor = (int(p) if p.isdigit() else 0 for p in [*spark_version.split("."), "0", "0"][:2])
    default = next(size for a, b, size in _DEFAULT_POD_BATCH if (major, minor) >= (a, b))
    size = int(conf.get("spark.kubernetes.allocation.batch.size", default))
    delay = str(conf.get("spark.kubernetes.allocation.batch.delay", "1s")).strip().lower()
    delay_s = float(delay) / 1000 if delay.replace(".", "", 1).isdigit() \
        else parse_duration("spark.kubernetes.allocation.batch.delay", delay)
    return AllocationBatches(size, delay_s)


def _append_csv(existing: str | None, item: str) -> str:
    items = [x.strip() for x in (existing or "").split(",") if x.strip()]
    # spark-submit hands local jars back as file: URIs: the same jar must not be added twice.
    if item not in items and item not in (_local_path(x) for x in items):
        items.append(item)
    return ",".join(items)


def _local_path(uri: str) -> str:
    return uri[len("file://"):] if uri.startswith("file://") else uri[len("file:"):] \
        if uri.startswith("file:") else uri


def attach(spark: SparkSession, asked: AutoscalerConfig | None = None, agent: bool = False) -> SparkSession:
    """Start the autoscaler of ``spark``'s application, once; ``asked``: the keys of the
    ``autoscale(builder)`` call that got it (a session already running keeps its own). ``agent``:
    this process is the agent beside the driver (:mod:`.agent`), which reads the queries of every
    session from the JVM; otherwise, with ``launch=agent``, the driver plugin's agent runs it and
    this process starts nothing."""
    try:
        sc = spark.sparkContext
        sc._jsc.sc()
    except Exception as err:  # shared-access clusters refuse JVM access with their own error
        raise UnsupportedSessionError(f"this session gives no access to the driver JVM ({err}); "
                                      f"{NO_JVM_ADVICE}") from err
    conf = {k: v for k, v in sc.getConf().getAll()}
    config = AutoscalerConfig.from_spark_conf(conf)
    if not config.enabled:
        return spark
    refuse_dynamic_allocation(conf)
    refuse_decommission_without_spark(config, conf)
    if config.launch == "agent" and not agent:
        log.info("%slaunch=agent: the autoscaler runs beside the driver, started by its plugin", PREFIX)
        return spark
    config = with_start_target(config, conf)
    with _lock:
        running = _running.get(sc.applicationId)
    if running is not None:
        # getOrCreate() handed back the session already running (a notebook cell run again): its
        # autoscaler keeps the keys it started with; say so rather than ignore the new ones.
        raw, started = (asked or config).raw, running[0].config.raw
        if raw != started:
            changed = sorted(k for k in {*raw, *started} if raw.get(k) != started.get(k))
            _warn(running[0], "the autoscaler of this application is already running with its own "
                  f"{PREFIX}* keys; changed ones are ignored until the SparkSession is stopped and "
                  "created again: " + ", ".join(f"{PREFIX}{k}" for k in changed), "keys-ignored")
        return spark
    show_lines_until_configured()
    bridge = JvmBridge(sc)
    if not bridge.installed():
        jar = bridge_jars.bridge_jar(sc._jvm)
        raise BridgeNotInstalledError(
            "this SparkSession was started without the sparkscale JVM bridge (plugins load only when "
            "the SparkContext starts). Either let sparkscale create the session: stop it and call "
            "sparkscale_listener.autoscale(SparkSession.builder...); or start the application with "
            f"`--jars {jar} --conf spark.plugins={PLUGIN_CLASS}` (spark-submit, pyspark, or the "
            "notebook kernel's PYSPARK_SUBMIT_ARGS)")

    master = sc.master or ""
    fallback_note = None
    local = master.startswith("local") and not master.startswith("local-cluster")
    if local and config.mode is not Mode.RECOMMEND:
        fallback_note = (f"master {master} cannot add or remove executors; falling back to recommend "
                         f"mode (decisions are published, never applied)")
        config = replace(config, mode=Mode.RECOMMEND)

    scaler, recorder = build_autoscaler(spark, config, bridge, queries_from_jvm=agent)
    if fallback_note:
        _warn(scaler, fallback_note, "local-master")
    misspelt = misspelt_prefix_warning(conf)
    if misspelt:
        _warn(scaler, misspelt, "misspelt-prefix")

    def alive() -> bool:
        return not bridge.context_stopped()

    loop = ControlLoop(scaler, config.interval_s, alive)
    recorder.on_rise = loop.wake  # a step is evaluated when its batches show it, not at the next tick
    global _sessions_started
    with _lock:
        _running[sc.applicationId] = (scaler, loop)
        _sessions_started += 1
    loop.start()
    log.info("autoscaler started (mode=%s, executors %d..%d, interval %gs)",
             config.mode, config.min_executors, config.max_executors, config.interval_s)
    return spark


def _warn(scaler: Autoscaler, text: str, situation: str) -> None:
    """A startup warning, reported once as a notice event; it reaches the log through the logging
    event handler, or directly when that handler is not configured (never twice)."""
    scaler.events.emit(AutoscalerEvent(scaler.clock(), "notice", text, situation=situation,
                                       severity="warning", details={"mode": scaler.config.mode}))
    if not any(isinstance(h, LoggingEventHandler) for h in scaler.events.handlers):
        log.warning("%s", text)


def validate_modules(config: AutoscalerConfig) -> None:
    """Check every module choice and module key that can be checked without a SparkContext."""
    build_checkers(config)
    state_store_choice(config)
    event_handler_choices(config)
    for key, value, base, methods in _custom_modules(config):
        if value:
            load_class(key, value, base, methods)
    # Built-in collector/evaluator/realizer have no keys of their own: any key under their
    # prefix is a typo (a custom class reads and checks its own).
    for prefix, custom in (("collector.", config.collector_class), ("evaluator.", config.evaluator_class),
                           ("realizer.", config.realizer_class)):
        if not custom:
            config.module(prefix).check_all_read()


def _custom_modules(config: AutoscalerConfig) -> tuple[tuple[str, str, type, tuple[str, ...]], ...]:
    return (("collector", config.collector_class, MetricCollector, ("collect",)),
            ("evaluator", config.evaluator_class, MetricEvaluator, ("evaluate",)),
            ("realizer", config.realizer_class, ScalingRealizer, ("realize", "baseline")))


def task_cpus(value: str | None) -> int:
    """``spark.task.cpus`` as Spark reads it (Spark itself refuses a bad value at startup)."""
    try:
        return max(1, int(str(value).strip()))
    except ValueError:
        return 1


def build_autoscaler(spark: SparkSession, config: AutoscalerConfig, bridge: JvmBridge,
                     queries_from_jvm: bool = False) -> tuple[Autoscaler, ProgressRecorder]:
    """Construct every module from the configuration; any misfit fails here, at startup. Returns
    the autoscaler and the progress recorder its collectors read (the loop wakes on it).
    ``queries_from_jvm``: the recorder reads the queries of every session of the driver from the
    bridge (the agent beside the driver); otherwise a listener on ``spark``'s own session."""
    sc = spark.sparkContext
    validate_modules(config)
    recorder = ProgressRecorder()
    if queries_from_jvm:
        JvmProgressFeed(recorder, bridge).start()
    backend = SparkClusterBackend(bridge)

    def plugin(key: str, value: str, base: type, methods: tuple[str, ...], default: Any) -> Any:
        """The module named by ``key`` (constructed by the plugin convention), else ``default``."""
        context = PluginContext(config, config.module(key + "."), spark=spark,
                                bridge=bridge, backend=backend, recorder=recorder)
        if not value:
            return default(context)
        return construct(load_class(key, value, base, methods), context, key)

    collector = plugin("collector", config.collector_class, MetricCollector, ("collect",),
                       SparkMetricCollector)
    evaluator = plugin("evaluator", config.evaluator_class, MetricEvaluator, ("evaluate",),
                       lambda _: MicroBatchEvaluator())
    realizer = plugin("realizer", config.realizer_class, ScalingRealizer, ("realize", "baseline"),
                      lambda _: ExecutorRealizer(backend, config.min_executors, config.decommission))
    events = EventDispatcher(build_event_handlers(config, bridge), config.event_throttle_s)

    def store_fell_back(why: str) -> None:
        events.emit(AutoscalerEvent(time.time(), "notice", f"state store problem, continuing with a fresh "
                                    f"in-memory store: {why}", situation="state-store-fallback",
                                    severity="warning",
                                    details={"mode": config.mode}))

    spark_conf = dict(sc.getConf().getAll())
    store = build_state_store(config, on_fallback=store_fell_back, spark_conf=spark_conf,
                              memory_kept_by=(bridge.agent_state, bridge.save_agent_state)
                              if queries_from_jvm else None)
    scaler = wire(config, collector, realizer, events, sc.appName, evaluator=evaluator, state_store=store,
                  gauges=GaugePublisher(bridge),
                  observers=[UiPublisher(bridge, live_tab=bridge.ui_tab_attached())],
                  task_cpus=task_cpus(spark_conf.get("spark.task.cpus", "1")), run_id=sc.applicationId,
                  application_ended=bridge.context_stopped,
                  allocation_batches=allocation_batches(spark_conf, sc.version))
    return scaler, recorder
