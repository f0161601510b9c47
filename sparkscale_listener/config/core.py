"""The core ``spark.sparkscale.*`` keys (:class:`AutoscalerConfig`), and the keys meant for them that
a near-miss prefix hides (:func:`misspelt_prefix_warning`).

Everything is checked once, at startup, before the autoscaler touches the cluster.

Pluggable modules follow one naming rule: a module kind is named once, and that name is both the key
that chooses the module(s) and the prefix of their own keys. A kind the application has one of is
singular and names a built-in or a class path (``stateStore=sqlite``, its keys
``stateStore.sqlite.path``...), like Spark's ``spark.serializer``; a kind it has several of is plural
and lists them (``checkers=taskFailures,...``), each one's keys under ``<kind>.<name>.``
(``checkers.taskFailures.window``), like Spark's ``spark.sql.catalog.<name>.*``. The modules read
their keys through :class:`~sparkscale_listener.config.options.ModuleConfig`.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from enum import Enum

from .options import (
    PREFIX,
    Boolean,
    Choice,
    ConfigError,
    DailyWindows,
    Duration,
    Integer,
    ModuleConfig,
    Names,
    Number,
    Option,
    Text,
    option,
    render_duration,
)
from .spelling import CLOSE_RATIO, did_you_mean

# Upper bounds of the duration keys (seconds): far above any useful value, so that one beyond is a
# mistake (a wrong unit, an extra zero) refused at startup, not an 83-hour wait found days later.
MINUTE, HOUR, DAY = 60.0, 3600.0, 86400.0
WEEK = 7 * DAY

# The module kinds (see the rule above); their keys are validated by the modules themselves.
MODULE_KINDS = ("collector", "evaluator", "realizer", "stateStore", "checkers", "eventHandlers")
MODULE_PREFIXES = tuple(kind + "." for kind in MODULE_KINDS)

BUILTIN_CHECKERS = (
    "taskFailures",
    "executorFailures",
    "queryFailure",
    "gcPressure",
    "heapUsage",
    "throughputRegression",
)


class Mode(str, Enum):
    """What the autoscaler does with its decisions (``spark.sparkscale.mode``). A string too: it
    prints, logs and serializes as the key's value (enum.StrEnum, which does that, needs 3.11)."""

    AUTOSCALE = "autoscale"  # apply them
    RECOMMEND = "recommend"  # compute and publish them, never apply; the target follows what runs
    REACTIVE = "reactive"  # take every executor the cluster gives, up to maxExecutors

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


@dataclass(frozen=True)
class AutoscalerConfig:
    """The core keys. Constructed from Spark's conf (:meth:`from_spark_conf`) or directly (tests,
    the simulator); either way every value is validated, so no invalid config exists."""

    enabled: bool = option("enabled", Boolean(), True,
                           "Master switch. false: the session starts without the autoscaler.")
    mode: Mode = option("mode", Choice(*Mode), Mode.AUTOSCALE,  # noqa: RUF009 (a field, made once)
                       "autoscale: apply decisions. recommend: compute and publish them, never apply. "
                       "reactive: take every executor the cluster gives, up to maxExecutors (FLIP-159).")
    min_executors: int = option("minExecutors", Integer(minimum=1), 1,
                                "Never scale below this. 1 keeps every query runnable.")
    initial_executors: int | None = option(
        "initialExecutors", Integer(minimum=1, optional=True), None,
        "Executor target set at startup (idle extras are removed). Empty: spark.executor.instances "
        "where set (what the cluster manager was asked for, even if some are still starting), else "
        "the executors running once their count settled.")
    max_executors: int = option("maxExecutors", Integer(minimum=1), 10,
                                "Never scale above this. Bounded by default so a mis-estimate cannot "
                                "flood a shared cluster; raise it for big jobs.")
    # At least half a second: a tick reads the bridge's snapshot over py4j and evaluates every query
    # (tens of ms at 100 queries); 1ms ticks ran back to back and took a core of the driver.
    interval_s: float = option("interval", Duration(at_least=0.5, at_most=10 * MINUTE), 10.0,
                               "Control-loop period: how often metrics are sampled and evaluated; "
                               "at most half of metricsWindow.")
    metrics_window_s: float = option("metricsWindow", Duration(positive=True, at_most=HOUR), 60.0,
                                     "The window of batches the arrival rate and batch times are read "
                                     "over (the latest two batches also count on their own: a step "
                                     "shows within two batches); cover several micro-batches.")
    stabilization_interval_s: float = option(
        "stabilizationInterval", Duration(at_most=HOUR), 30.0,
        "After a change, wait until requested executors registered plus this long, then for two "
        "batches at the new size, before deciding again (sooner when arrivals outgrow what the "
        "change was sized for); new executors' first batch is slow.")
    utilization_target: float = option(
        "utilization.target", Number(0.0, 1.0, low_open=True), 0.7,
        "Size for arrivals at this share of what the executors can do: the fewest executors on "
        "which, the model predicts, a batch of the arrivals divided by this still ends within the "
        "batch period (the trigger interval, or half of backlogThreshold where that is longer or there "
        "is no trigger: batches may run back to back, a row waiting at most backlogThreshold; and at "
        "the arrivals themselves a quarter of it, the lag within half of it). 0.7: 43 % more load is "
        "absorbed, for bursts and jitter. "
        "A size a few percent over it is kept where the next size would add executors that run "
        "no fewer waves of tasks (docs/how-it-decides.md).")
    utilization_max: float = option(
        "utilization.max", Number(0.0, 1.0, low_open=True), 0.9,
        "Scale up once the arrivals use more than this share of what the current executors can "
        "do (at 1.0 a batch of the arrivals just ends within the batch period; the scale of "
        "utilization.target); a scale-down comes once fewer executors were recommended for all of "
        "scaleDownInterval.")
    catch_up_duration_s: float = option("catchUpDuration", Duration(positive=True, at_most=DAY), 300.0,
                                        "A backlog should be worked off within this time; sets how "
                                        "much extra capacity a backlog asks for.")
    scale_down_interval_s: float = option("scaleDownInterval", Duration(at_most=DAY), 300.0,
                                          "A scale-down must be recommended this long before it is "
                                          "applied, at the largest recommendation seen; stops "
                                          "flapping. It is applied once a batch started after "
                                          "that still agrees.")
    scale_up_max_factor: float = option("scaleUp.maxFactor", Number(1.0, None, low_open=True), 4.0,
                                        "One scale-up multiplies executors by at most this; the "
                                        "rest follows once they registered.")
    scale_down_max_factor: float = option("scaleDown.maxFactor", Number(0.0, 1.0, low_open=True), 0.5,
                                          "One scale-down removes at most this fraction of executors.")
    backlog_threshold_s: float = option("backlogThreshold", Duration(at_most=DAY), 60.0,
                                        "The lag accepted, a bound, not a target: batches are sized to "
                                        "run back to back at most a quarter of it apart at the "
                                        "arrivals (the lag's peaks within half of it) and half of it "
                                        "apart at the arrivals over utilization.target (within all of "
                                        "it): the room between is for bursts and new executors. While "
                                        "the backlog exceeds this many seconds of input, never scale "
                                        "down. Set it to 2x the trigger interval or less to keep "
                                        "batches within the trigger.")
    ineffective_scale_up_threshold: float = option(
        "scaleUp.ineffectiveThreshold", Number(0.0, 1.0), 0.1,
        "If a scale-up shortened the query's batches by less than this fraction of what the model "
        "predicted (measured on the new executors' warm batches, within the model's own error), "
        "block further scale-ups for that query until its load moves by half. 0 disables.")
    excluded_periods: tuple[tuple[int, int], ...] = option(
        "excludedPeriods", DailyWindows(), (),
        "Daily HH:MM-HH:MM windows (local time, comma-separated) in which decisions are published "
        "but not applied.")
    provisioning_timeout_s: float = option("provisioningTimeout", Duration(positive=True, at_most=HOUR),
                                           120.0, "Requested executors that have not registered after "
                                           "this long count as failed to launch.")
    provisioning_time_s: float = option(
        "provisioningTime", Duration(at_most=HOUR), 10.0,
        "Executor provisioning time (request -> registered) assumed until measured; then the 90th "
        "percentile of the last 20 scale-ups (timeouts included) is used, at most "
        "provisioningTimeout. Sets the extra capacity that covers arrivals during a scale-up.")
    capacity_retry_s: float = option(
        "capacityRetryInterval", Duration(positive=True, at_most=DAY), 600.0,
        "When the cluster gives fewer executors than requested within provisioningTimeout (a full "
        "queue, a quota), the target is held at what it gave for this long before asking for more "
        "again. A shortfall is a capacity limit, not a failed scaling: no rollback, no pause.")
    decommission: bool = option("scaleDown.decommission", Boolean(), False,
                                "true: remove executors by graceful decommission (needs "
                                "spark.decommission.enabled=true); false: kill idle executors.")
    kafka_latest_offsets: bool = option(
        "kafka.latestOffsets", Boolean(), True,
        "true: read the latest offsets of each query's Kafka sources every second between batches (a "
        "Kafka admin client made from the source's own kafka.* options), so a rise in the "
        "arrivals counts before the batch that reads it completes; false: arrivals are known from "
        "completed batches only.")
    launch: str = option(
        "launch", Choice("job", "agent"), "job",
        "Where the autoscaler runs. job: in the application's own Python process, started by "
        "autoscale(builder). agent: in a Python process the driver plugin starts beside the driver "
        "(spark.plugins=io.sparkscale.bridge.SparkscalePlugin), for drivers with no Python of the "
        "user's: a Spark Connect server, JVM jobs; it sees the streaming queries of every session.")
    launch_python: str = option(
        "launch.python", Text(), "",
        "With launch=agent: the Python that runs the agent (with sparkscale-listener and pyspark "
        "installed). Empty: the driver's Python as PySpark picks it (spark.pyspark.driver.python, "
        "spark.pyspark.python, PYSPARK_DRIVER_PYTHON, PYSPARK_PYTHON), else python3.")
    checkers: tuple[str, ...] = option("checkers", Names(), BUILTIN_CHECKERS,
                                       "Checkers run after each scaling: built-in names or Python class "
                                       "paths, comma-separated; each one's keys are under "
                                       "`checkers.<name>`. Empty disables rollback.")
    rollback_target: str = option("rollback.target", Choice("last", "initial"), "last",
                                  "last: roll back to the last healthy target. initial: to the target "
                                  "the autoscaler started with.")
    rollback_pause_s: float | None = option("rollback.pauseDuration",
                                            Duration(until="untilRestart", at_most=WEEK), 1800.0,
                                            "After a rollback, do not scale for this long; "
                                            "'untilRestart' pauses until the application restarts.")
    rollback_max: int = option("rollback.maxRollbacks", Integer(minimum=1), 3,
                               "This many rollbacks within rollback.window stop automatic scaling until "
                               "resume() is called.")
    rollback_window_s: float = option("rollback.window", Duration(positive=True, at_most=WEEK), 3600.0,
                                      "Window for rollback.maxRollbacks.")
    collector_class: str = option("collector", Text(), "",
                                  "Python class path of a custom MetricCollector (its keys under "
                                  "collector.); empty: built-in.")
    evaluator_class: str = option("evaluator", Text(), "",
                                  "Python class path of a custom MetricEvaluator (its keys under "
                                  "evaluator.); empty: built-in.")
    realizer_class: str = option("realizer", Text(), "",
                                 "Python class path of a custom ScalingRealizer (its keys under "
                                 "realizer.); empty: built-in.")
    state_store: str = option("stateStore", Text(), "memory",
                              "memory, sqlite, kubernetes (a ConfigMap per application), or a Python "
                              "class path of a StateStore (its keys under stateStore.).")
    event_handlers: tuple[str, ...] = option("eventHandlers", Names(), ("logging", "listenerBus"),
                                             "Event handlers: logging, listenerBus, jsonl, or Python "
                                             "class paths, comma-separated; each one's keys are under "
                                             "`eventHandlers.<name>`.")
    event_throttle_s: float = option("events.throttleInterval", Duration(at_most=DAY), 60.0,
                                     "Identical repeated events are reported at most once per this "
                                     "interval.")
    event_tick_interval_s: float = option("events.tickInterval", Duration(at_most=HOUR), 60.0,
                                          "With listenerBus: a summary of the control tick (load, "
                                          "backlog, utilization, executors) goes to the event log at "
                                          "most this often, and at every change of executors or pause; "
                                          "the History Server's Autoscaler tab draws its chart from "
                                          "them. 0: every tick.")
    forecast_mode: str = option(
        "forecast.mode", Choice("off", "shadow", "on"), "shadow",
        "Pre-scaling on each query's forecast arrivals (a recurring profile with level and trend, learnt "
        "from its history). off: no forecast. shadow: forecast, checked and shown, never applied. on: "
        "size for the forecast load a provisioning time plus a batch ahead, hold a scale-down when "
        "the load returns within scaleDownInterval and make it without waiting scaleDownInterval out when "
        "the load stays low through it, while its recent error is within forecast.maxError.")
    forecast_period_s: float | None = option(
        "forecast.period", Duration(positive=True, at_most=5 * WEEK, until="detect"), None,
        "The period the load recurs with (1d for a daily pattern, 7d for a weekly one). detect: found "
        "in each query's history (its autocorrelation), once 2.5 periods of it are seen.")
    forecast_max_error: float = option(
        "forecast.maxError", Number(0.0, None, low_open=True), 0.2,
        "The forecast is applied only while its recent error (each forecast made a horizon ahead "
        "checked against the arrivals that came: the misses over the arrivals, over the last 3 periods "
        "and over the newest tenth of a period alike) is at most this; above it, it runs in shadow and "
        "says so.")
    # Every spark.sparkscale.* key as given (prefix stripped), for the
    # modules' own keys.
    raw: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        problems = []
        for f in fields(self):
            declared = f.metadata.get("option")
            if declared is not None:
                try:
                    declared.check(getattr(self, f.name))
                except ConfigError as e:
                    problems.append(str(e))
        # Relations between keys are checked on valid values only (one bad value would raise others).
        problems = problems or self._relation_problems()
        if problems:
            raise ConfigError("\n".join(problems))
        object.__setattr__(self, "mode", Mode(self.mode))  # the key's text, parsed once

    def bounded(self, executors: int) -> int:
        """``executors`` within minExecutors and maxExecutors: the one clamp every target passes."""
        return min(max(executors, self.min_executors), self.max_executors)

    def module(self, prefix: str) -> ModuleConfig:
        """The keys under ``prefix`` (e.g. ``"checkers.taskFailures."``), for a module to read."""
        return ModuleConfig(prefix, {k[len(prefix):]: v for k, v in self.raw.items()
                                     if k.startswith(prefix) and k not in _CORE_BY_KEY})

    @classmethod
    def from_spark_conf(cls, conf: Mapping[str, str]) -> AutoscalerConfig:
        """Build from every Spark conf entry; entries outside the prefix are ignored."""
        raw = {k[len(PREFIX):]: str(v) for k, v in conf.items() if k.startswith(PREFIX)}
        return cls.from_keys(raw)

    @classmethod
    def from_keys(cls, raw: Mapping[str, str]) -> AutoscalerConfig:
        """Build from keys with the prefix stripped: {"minExecutors": "2", ...}."""
        raw = dict(raw)
        # Every mistake at once, a line each, in the order of the keys: a user fixes them in one go.
        problems = {key: unknown_key_message(key, value) for key, value in raw.items()
                    if key not in _CORE_BY_KEY and not key.startswith(MODULE_PREFIXES)}
        values = {}
        for name, opt in _CORE_OPTIONS.items():
            if opt.key in raw:
                try:
                    values[name] = opt.parse(raw[opt.key])
                except ConfigError as e:
                    problems[opt.key] = str(e)
        if problems:
            raise ConfigError("\n".join(problems[key] for key in sorted(problems)))
        return cls(**values, raw=dict(raw))

    def _relation_problems(self) -> list[str]:
        p = PREFIX
        problems = []
        if self.min_executors > self.max_executors:
            problems.append(
                f"{p}minExecutors={self.min_executors} is greater than {p}maxExecutors="
                f"{self.max_executors}; expected minExecutors <= maxExecutors")
        if self.initial_executors is not None and not (
                self.min_executors <= self.initial_executors <= self.max_executors):
            problems.append(
                f"{p}initialExecutors={self.initial_executors} is outside [{p}minExecutors="
                f"{self.min_executors}, {p}maxExecutors={self.max_executors}]; expected a value in "
                "that range")
        if self.interval_s > self.metrics_window_s / 2:
            # A window with fewer than two samples cannot tell a batch running all along (its
            # tasks' busy time grows between samples) from nothing arriving: an overloaded
            # query's long batch read as idle, and scaled down.
            problems.append(
                f"{p}interval={render_duration(self.interval_s)}, {p}metricsWindow="
                f"{render_duration(self.metrics_window_s)}: expected interval <= metricsWindow / 2 "
                "(at least two samples in each window)")
        if not self.utilization_target <= self.utilization_max:
            problems.append(
                f"{p}utilization.target={self.utilization_target:g}, {p}utilization.max="
                f"{self.utilization_max:g}: expected utilization.target <= utilization.max")
        return problems


_CORE_OPTIONS: dict[str, Option] = {f.name: f.metadata["option"] for f in fields(AutoscalerConfig)
                                    if "option" in f.metadata}
CORE_OPTIONS: tuple[Option, ...] = tuple(_CORE_OPTIONS.values())
_CORE_BY_KEY = {o.key: o for o in CORE_OPTIONS}


def unknown_key_message(key: str, value: str) -> str:
    """One line for a key that is neither a core key nor under a module kind's prefix, with the key
    it most likely misspells (``checker.x.window`` -> ``checkers.x.window`` too)."""
    _, dot, rest = key.partition(".")
    candidates = [*_CORE_BY_KEY, *(prefix + rest for prefix in MODULE_PREFIXES if dot)]
    hint = did_you_mean(key, candidates, PREFIX)
    return (f"{PREFIX}{key}={value!r} is not a known key; "
            f"{hint or 'no known key is close (docs/configuration.md lists them all)'}")


# -- keys meant for sparkscale but outside its prefix ----------------------------------------------
# No validation sees them (they are not under spark.sparkscale.), so without this they would be
# ignored silently: spark.sparkScale.maxExecutors=20 and a job that never goes above 10.

_NAMESPACE = PREFIX.split(".")[1]  # "sparkscale"


def _normalized(component: str) -> str:
    return component.lower().replace("-", "").replace("_", "")


def _is_near_miss(component: str) -> bool:
    if component == _NAMESPACE:
        return False
    normal = _normalized(component)
    return (normal == _NAMESPACE or normal.startswith(_NAMESPACE[:-1])
            or difflib.SequenceMatcher(None, normal, _NAMESPACE).ratio() >= CLOSE_RATIO)


def misspelt_prefix_keys(conf: Mapping[str, str]) -> dict[str, str]:
    """Keys meant for sparkscale but outside ``spark.sparkscale.``: ``{key as given: key meant}``.

    A key counts when its namespace (the component after ``spark.``, or the first one when
    ``spark.`` is missing) differs from ``sparkscale`` only in case, in ``-``/``_``, or by a letter
    or two: ``spark.sparkScale.x``, ``spark.spark-scale.x``, ``spark.sparkscaler.x``,
    ``spark.sparkcale.x``, ``sparkscale.x``. No Spark namespace is that close to ``sparkscale``.
    """
    meant = {}
    for key in conf:
        parts = key.split(".")
        if len(parts) >= 3 and parts[0] == "spark" and _is_near_miss(parts[1]):
            meant[key] = PREFIX + ".".join(parts[2:])
        elif len(parts) >= 2 and parts[0] != "spark" and (parts[0] == _NAMESPACE or _is_near_miss(parts[0])):
            meant[key] = PREFIX + ".".join(parts[1:])
    return meant


def misspelt_prefix_warning(conf: Mapping[str, str]) -> str | None:
    """One warning naming every key :func:`misspelt_prefix_keys` finds, or None."""
    meant = misspelt_prefix_keys(conf)
    if not meant:
        return None
    if len(meant) == 1:
        ((key, right),) = meant.items()
        return (f"{key}={conf[key]!r} is ignored: did you mean {right}? sparkscale reads only the keys "
                f"that start with {PREFIX}")
    listed = "; ".join(f"{key}={conf[key]!r} (did you mean {right}?)" for key, right in sorted(meant.items()))
    return f"{len(meant)} keys are ignored, sparkscale reads only the keys that start with {PREFIX}: {listed}"
