"""`spark.sparkscale.*` configuration: parsing, defaults and validation.

Everything is checked once, at startup, before the autoscaler touches the cluster: a bad value
raises :class:`ConfigError` naming the key, the value and what is accepted. Keys follow Spark's
style (camelCase after the prefix, durations such as ``30s`` / ``2min`` / ``1h``).

Pluggable modules (checkers, collector, evaluator, realizer, state store, event handlers) own the
keys under their own prefix (for example ``spark.sparkscale.checker.taskFailures.*``); they read
them through :class:`ModuleConfig`, which validates the same way and reports keys nobody read.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

PREFIX = "spark.sparkscale."
T = TypeVar("T")


class ConfigError(ValueError):
    """A `spark.sparkscale.*` value the autoscaler cannot accept."""


_DURATION_UNITS = {
    "ms": 0.001,
    "s": 1.0,
    "sec": 1.0,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
    "d": 86400.0,
}
_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$")
DURATION_ACCEPTS = "a non-negative duration such as 500ms, 30s, 2min, 1h or 1d (a bare number is seconds)"


def parse_duration(key: str, value: str) -> float:
    """Parse a Spark-style duration into seconds."""
    match = _DURATION_RE.match(str(value).lower())
    if not match or match.group(2) not in ("", *_DURATION_UNITS):
        raise ConfigError(f"{key}={value!r} is not a valid duration; expected {DURATION_ACCEPTS}")
    unit = match.group(2) or "s"
    return float(match.group(1)) * _DURATION_UNITS[unit]


def parse_bool(key: str, value: str) -> bool:
    lowered = str(value).strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise ConfigError(f"{key}={value!r} is not a boolean; expected true or false")


def parse_int(key: str, value: str, minimum: int | None = None) -> int:
    try:
        number = int(str(value).strip())
    except ValueError:
        raise ConfigError(f"{key}={value!r} is not an integer; expected a whole number"
                          + (f" >= {minimum}" if minimum is not None else "")) from None
    if minimum is not None and number < minimum:
        raise ConfigError(f"{key}={value!r} is out of range; expected an integer >= {minimum}")
    return number


def parse_float(key: str, value: str, low: float | None = None, high: float | None = None,
                low_open: bool = False, high_open: bool = False) -> float:
    accepted = _range_text(low, high, low_open, high_open)
    try:
        number = float(str(value).strip())
    except ValueError:
        raise ConfigError(f"{key}={value!r} is not a number; expected {accepted}") from None
    if number != number:  # NaN
        raise ConfigError(f"{key}={value!r} is not a number; expected {accepted}")
    too_low = low is not None and (number <= low if low_open else number < low)
    too_high = high is not None and (number >= high if high_open else number > high)
    if too_low or too_high:
        raise ConfigError(f"{key}={value!r} is out of range; expected {accepted}")
    return number


def _range_text(low: float | None, high: float | None, low_open: bool, high_open: bool) -> str:
    if low is None and high is None:
        return "a number"
    if high is None:
        return f"a number {'>' if low_open else '>='} {low:g}"
    if low is None:
        return f"a number {'<' if high_open else '<='} {high:g}"
    return f"a number in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"


def parse_list(value: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in str(value).split(",") if item.strip())


def parse_choice(key: str, value: str, choices: tuple[str, ...]) -> str:
    if value in choices:
        return value
    raise ConfigError(f"{key}={value!r} is not accepted; expected one of: {', '.join(choices)}")


_DAILY_WINDOW_RE = re.compile(r"^([01]?\d|2[0-3]):([0-5]\d)-([01]?\d|2[0-3]):([0-5]\d)$")


def parse_excluded_periods(key: str, value: str) -> tuple[tuple[int, int], ...]:
    """Daily windows ``HH:MM-HH:MM`` (local time), comma-separated; a window may wrap midnight.

    Returned as (start, end) minutes after midnight.
    """
    windows = []
    for item in parse_list(value):
        match = _DAILY_WINDOW_RE.match(item)
        if not match:
            raise ConfigError(
                f"{key}={value!r}: {item!r} is not a daily window; expected comma-separated "
                "HH:MM-HH:MM windows in local time, e.g. 22:00-06:00,12:00-12:30")
        h1, m1, h2, m2 = (int(g) for g in match.groups())
        windows.append((h1 * 60 + m1, h2 * 60 + m2))
    return tuple(windows)


# Prefixes under which pluggable modules own the keys (validated by the module itself).
MODULE_PREFIXES = ("checker.", "collector.", "evaluator.", "realizer.", "stateStore.", "eventHandler.")

BUILTIN_CHECKERS = (
    "taskFailures",
    "executorFailures",
    "queryFailure",
    "gcPressure",
    "heapUsage",
    "throughputRegression",
)


@dataclass(frozen=True)
class Key:
    name: str  # after the prefix
    default: str
    doc: str  # one line for the README table: what it does and why this default


# The single source of truth for the core keys: defaults, and the README table.
CORE_KEYS: tuple[Key, ...] = (
    Key("enabled", "true", "Master switch. false: the session starts without the autoscaler."),
    Key("mode", "autoscale", "autoscale: apply decisions. recommend: compute and publish them, never "
        "apply. reactive: take every executor the cluster gives, up to maxExecutors (FLIP-159)."),
    Key("minExecutors", "1", "Never scale below this. 1 keeps every query runnable."),
    Key("initialExecutors", "", "Executor target set at startup (idle extras are removed). Empty: "
        "whatever the cluster manager started with."),
    Key("maxExecutors", "10", "Never scale above this. Bounded by default so a mis-estimate cannot "
        "flood a shared cluster; raise it for big jobs."),
    Key("interval", "10s", "Control-loop period: how often metrics are sampled and evaluated."),
    Key("metricsWindow", "60s", "Rates are computed over this window of cumulative counters; long "
        "enough to cover several micro-batches."),
    Key("stabilizationInterval", "30s", "After a change, wait until requested executors registered "
        "plus this long before collecting a new window; new executors need a batch or two to warm up."),
    Key("utilization.target", "0.7", "Busy fraction of task slots to size for; 30 % headroom absorbs "
        "bursts and micro-batch jitter."),
    Key("utilization.min", "0.4", "Below this projected utilization, scale down (after "
        "scaleDownInterval)."),
    Key("utilization.max", "0.9", "Above this projected utilization, scale up."),
    Key("catchUpDuration", "5min", "A backlog should be worked off within this time; sets how much "
        "extra capacity a backlog asks for."),
    Key("scaleDownInterval", "5min", "A scale-down must be recommended this long before it is "
        "applied, at the largest recommendation seen; stops flapping."),
    Key("scaleUp.maxFactor", "4.0", "One scale-up multiplies executors by at most this."),
    Key("scaleDown.maxFactor", "0.5", "One scale-down removes at most this fraction of executors."),
    Key("backlogThreshold", "60s", "While the backlog exceeds this many seconds of input, never "
        "scale down: catching up needs the capacity."),
    Key("scaleUp.ineffectiveThreshold", "0.1", "If a scale-up delivered less than this fraction of "
        "the throughput it promised, block further scale-ups for that query. 0 disables."),
    Key("excludedPeriods", "", "Daily HH:MM-HH:MM windows (local time, comma-separated) in which "
        "decisions are published but not applied."),
    Key("provisioningTimeout", "2min", "Requested executors that have not registered after this "
        "long count as failed to launch."),
    Key("scaleDown.decommission", "false", "true: remove executors by graceful decommission "
        "(needs spark.decommission.enabled=true); false: kill idle executors."),
    Key("checkers", ",".join(BUILTIN_CHECKERS), "Checkers run after each scaling: built-in names or "
        "Python class paths, comma-separated. Empty disables rollback."),
    Key("memory.gcPressureThreshold", "0.3", "gcPressure checker: GC time / task run time above this "
        "after a scaling is unhealthy."),
    Key("memory.heapUsageThreshold", "0.95", "heapUsage checker: heap used / heap max on any executor "
        "above this after a scaling is unhealthy."),
    Key("rollback.target", "last", "last: roll back to the last healthy target. initial: to the "
        "target the autoscaler started with."),
    Key("rollback.pauseDuration", "30min", "After a rollback, do not scale for this long; "
        "'untilRestart' pauses until the application restarts."),
    Key("rollback.maxRollbacks", "3", "This many rollbacks within rollback.window stop automatic "
        "scaling until resume() is called."),
    Key("rollback.window", "1h", "Window for rollback.maxRollbacks."),
    Key("metrics.collector.class", "", "Python class path of a custom MetricCollector; empty: built-in."),
    Key("metrics.evaluator.class", "", "Python class path of a custom MetricEvaluator; empty: built-in."),
    Key("realizer.class", "", "Python class path of a custom ScalingRealizer; empty: built-in."),
    Key("stateStore.class", "memory", "memory, sqlite, or a Python class path of a StateStore."),
    Key("stateStore.path", "", "SQLite file for stateStore.class=sqlite."),
    Key("eventHandlers", "logging,listenerBus", "Event handlers: logging, listenerBus, jsonl, or Python "
        "class paths, comma-separated."),
    Key("eventHandlers.jsonl.path", "", "File the jsonl event handler appends to."),
    Key("events.throttleInterval", "60s", "Identical repeated events are reported at most once per "
        "this interval."),
)
_CORE_BY_NAME = {k.name: k for k in CORE_KEYS}


@dataclass(frozen=True)
class AutoscalerConfig:
    enabled: bool = True
    mode: str = "autoscale"
    min_executors: int = 1
    max_executors: int = 10
    initial_executors: int | None = None  # None: keep what the cluster manager started with
    interval_s: float = 10.0
    metrics_window_s: float = 60.0
    stabilization_interval_s: float = 30.0
    utilization_target: float = 0.7
    utilization_min: float = 0.4
    utilization_max: float = 0.9
    catch_up_duration_s: float = 300.0
    scale_down_interval_s: float = 300.0
    scale_up_max_factor: float = 4.0
    scale_down_max_factor: float = 0.5
    backlog_threshold_s: float = 60.0
    ineffective_scale_up_threshold: float = 0.1
    excluded_periods: tuple[tuple[int, int], ...] = ()
    provisioning_timeout_s: float = 120.0
    decommission: bool = False
    checkers: tuple[str, ...] = BUILTIN_CHECKERS
    gc_pressure_threshold: float = 0.3
    heap_usage_threshold: float = 0.95
    rollback_target: str = "last"
    rollback_pause_s: float | None = 1800.0  # None: until the application restarts
    rollback_max: int = 3
    rollback_window_s: float = 3600.0
    collector_class: str = ""
    evaluator_class: str = ""
    realizer_class: str = ""
    state_store: str = "memory"
    state_store_path: str = ""
    event_handlers: tuple[str, ...] = ("logging", "listenerBus")
    jsonl_path: str = ""
    event_throttle_s: float = 60.0
    # Every spark.sparkscale.* key as given (prefix stripped), for modules' own keys.
    raw: Mapping[str, str] = field(default_factory=dict)

    def module(self, prefix: str) -> ModuleConfig:
        """The keys under ``prefix`` (e.g. ``"checker.taskFailures."``), for a module to read."""
        return ModuleConfig(prefix, {k[len(prefix):]: v for k, v in self.raw.items()
                                     if k.startswith(prefix) and k not in _CORE_BY_NAME})

    @classmethod
    def from_spark_conf(cls, conf: Mapping[str, str]) -> AutoscalerConfig:
        """Build from every Spark conf entry; entries outside the prefix are ignored."""
        raw = {k[len(PREFIX):]: str(v) for k, v in conf.items() if k.startswith(PREFIX)}
        return cls.from_keys(raw)

    @classmethod
    def from_keys(cls, raw: Mapping[str, str]) -> AutoscalerConfig:
        """Build from keys with the prefix stripped: {"minExecutors": "2", ...}."""
        for key in raw:
            if key not in _CORE_BY_NAME and not key.startswith(MODULE_PREFIXES):
                known = ", ".join(sorted(_CORE_BY_NAME))
                raise ConfigError(
                    f"{PREFIX}{key}={raw[key]!r} is not a known key; accepted keys: {known}, and "
                    f"module keys under {', '.join(PREFIX + p + '*' for p in MODULE_PREFIXES)}")

        def get(name: str) -> tuple[str, str]:
            return PREFIX + name, raw.get(name, _CORE_BY_NAME[name].default)

        def dur(name: str, positive: bool = False) -> float:
            key, value = get(name)
            seconds = parse_duration(key, value)
            if positive and seconds <= 0:
                raise ConfigError(f"{key}={value!r} must be greater than zero; expected "
                                  f"{DURATION_ACCEPTS}, above zero")
            return seconds

        pause_key, pause_value = get("rollback.pauseDuration")
        pause = None if pause_value.strip() == "untilRestart" else parse_duration(
            pause_key, pause_value) if _DURATION_RE.match(pause_value.lower()) else None
        if pause is None and pause_value.strip() != "untilRestart":
            raise ConfigError(f"{pause_key}={pause_value!r} is not accepted; expected "
                              f"{DURATION_ACCEPTS}, or untilRestart")

        cfg = cls(
            enabled=parse_bool(*get("enabled")),
            mode=parse_choice(*get("mode"), ("autoscale", "recommend", "reactive")),
            min_executors=parse_int(*get("minExecutors"), minimum=1),
            max_executors=parse_int(*get("maxExecutors"), minimum=1),
            initial_executors=(parse_int(*get("initialExecutors"), minimum=1)
                               if get("initialExecutors")[1].strip() else None),
            interval_s=dur("interval", positive=True),
            metrics_window_s=dur("metricsWindow", positive=True),
            stabilization_interval_s=dur("stabilizationInterval"),
            utilization_target=parse_float(*get("utilization.target"), 0.0, 1.0, low_open=True),
            utilization_min=parse_float(*get("utilization.min"), 0.0, 1.0),
            utilization_max=parse_float(*get("utilization.max"), 0.0, 1.0, low_open=True),
            catch_up_duration_s=dur("catchUpDuration", positive=True),
            scale_down_interval_s=dur("scaleDownInterval"),
            scale_up_max_factor=parse_float(*get("scaleUp.maxFactor"), 1.0, None, low_open=True),
            scale_down_max_factor=parse_float(*get("scaleDown.maxFactor"), 0.0, 1.0, low_open=True),
            backlog_threshold_s=dur("backlogThreshold"),
            ineffective_scale_up_threshold=parse_float(*get("scaleUp.ineffectiveThreshold"), 0.0, 1.0),
            excluded_periods=parse_excluded_periods(*get("excludedPeriods")),
            provisioning_timeout_s=dur("provisioningTimeout", positive=True),
            decommission=parse_bool(*get("scaleDown.decommission")),
            checkers=parse_list(get("checkers")[1]),
            gc_pressure_threshold=parse_float(*get("memory.gcPressureThreshold"), 0.0, 1.0, low_open=True),
            heap_usage_threshold=parse_float(*get("memory.heapUsageThreshold"), 0.0, 1.0, low_open=True),
            rollback_target=parse_choice(*get("rollback.target"), ("last", "initial")),
            rollback_pause_s=pause,
            rollback_max=parse_int(*get("rollback.maxRollbacks"), minimum=1),
            rollback_window_s=dur("rollback.window", positive=True),
            collector_class=get("metrics.collector.class")[1].strip(),
            evaluator_class=get("metrics.evaluator.class")[1].strip(),
            realizer_class=get("realizer.class")[1].strip(),
            state_store=get("stateStore.class")[1].strip() or "memory",
            state_store_path=get("stateStore.path")[1].strip(),
            event_handlers=parse_list(get("eventHandlers")[1]),
            jsonl_path=get("eventHandlers.jsonl.path")[1].strip(),
            event_throttle_s=dur("events.throttleInterval"),
            raw=dict(raw),
        )
        cfg._check_relations()
        return cfg

    def _check_relations(self) -> None:
        p = PREFIX
        if self.min_executors > self.max_executors:
            raise ConfigError(
                f"{p}minExecutors={self.min_executors} is greater than {p}maxExecutors="
                f"{self.max_executors}; expected minExecutors <= maxExecutors")
        if self.initial_executors is not None and not (
                self.min_executors <= self.initial_executors <= self.max_executors):
            raise ConfigError(
                f"{p}initialExecutors={self.initial_executors} is outside [{p}minExecutors="
                f"{self.min_executors}, {p}maxExecutors={self.max_executors}]; expected a value in "
                "that range")
        if not self.utilization_min <= self.utilization_target <= self.utilization_max:
            raise ConfigError(
                f"{p}utilization.min={self.utilization_min:g}, {p}utilization.target="
                f"{self.utilization_target:g}, {p}utilization.max={self.utilization_max:g}: "
                "expected utilization.min <= utilization.target <= utilization.max")
        if self.state_store == "sqlite" and not self.state_store_path:
            raise ConfigError(f"{p}stateStore.class=sqlite needs {p}stateStore.path "
                              "(the SQLite file to use)")
        if "jsonl" in self.event_handlers and not self.jsonl_path:
            raise ConfigError(f"{p}eventHandlers includes jsonl but {p}eventHandlers.jsonl.path "
                              "is empty; expected the file to append events to")


class ModuleConfig:
    """The keys of one pluggable module (prefix stripped), read with validation.

    A module calls the typed getters for each key it knows; :meth:`check_all_read` then rejects
    any key under its prefix that it did not read, so typos fail at startup.
    """

    def __init__(self, prefix: str, values: Mapping[str, str]) -> None:
        self.prefix = prefix
        self.values = dict(values)
        self._read: set[str] = set()

    def _get(self, name: str, default: T, parse: Callable[[str, str], T]) -> T:
        self._read.add(name)
        if name not in self.values:
            return default
        return parse(PREFIX + self.prefix + name, self.values[name])

    def duration(self, name: str, default: float) -> float:
        return self._get(name, default, parse_duration)

    def integer(self, name: str, default: int, minimum: int | None = None) -> int:
        return self._get(name, default, lambda k, v: parse_int(k, v, minimum))

    def number(self, name: str, default: float, low: float | None = None,
               high: float | None = None) -> float:
        return self._get(name, default, lambda k, v: parse_float(k, v, low, high))

    def boolean(self, name: str, default: bool) -> bool:
        return self._get(name, default, parse_bool)

    def string(self, name: str, default: str) -> str:
        return self._get(name, default, lambda k, v: v)

    def parsed(self, name: str, default: T, parse: Callable[[str, str], T]) -> T:
        """A value with a parser of the module's own: ``parse(full_key, text)`` raises ConfigError."""
        return self._get(name, default, parse)

    def check_all_read(self) -> None:
        unknown = sorted(set(self.values) - self._read)
        if unknown:
            key = unknown[0]
            raise ConfigError(
                f"{PREFIX}{self.prefix}{key}={self.values[key]!r} is not a known key; accepted "
                f"keys under {PREFIX}{self.prefix}: {', '.join(sorted(self._read)) or '(none)'}")


def markdown_table() -> str:
    """The README's configuration table, generated from :data:`CORE_KEYS` so it cannot drift."""
    lines = ["| key | default | what it does, and why this default |", "|---|---|---|"]
    for key in CORE_KEYS:
        default = f"`{key.default}`" if key.default else "(empty)"
        lines.append(f"| `{PREFIX}{key.name}` | {default} | {key.doc} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown_table())
