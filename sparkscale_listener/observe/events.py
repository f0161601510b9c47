"""Events: what the autoscaler reports, and the handlers that deliver it (interface first, then the
built-in handlers, the throttling dispatcher and the configuration-driven factory)."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import numbers
import os
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from ..config.core import AutoscalerConfig
from ..config.options import PREFIX, ConfigError, Option, Text
from ..config.plugins import PluginContext, accepted_text, construct, load_class
from ..config.spelling import closest, did_you_mean
from ..decisions import Outcome, ScalingRecord

# Event kinds. "scaling" is an applied scale_up / scale_down; "recommendation" a decision that was
# published but not applied (recommend mode, excluded period); "rollback", "pause", "resume",
# "stopped" (too many rollbacks), "blocked" (ineffective scale-up, parallelism cap), "capacity"
# (the cluster gave fewer executors than requested), "outcome" (what an applied change did, against
# what the model predicted), "error" (an exception in our code), "notice" (anything else worth a line
# in the log).
EVENT_KINDS = ("scaling", "recommendation", "rollback", "pause", "resume", "stopped", "blocked",
               "capacity", "outcome", "error", "notice")
# Kinds of applied changes: each is its own event, never throttled as a repeat.
_PER_CHANGE_KINDS = ("scaling", "rollback")


@dataclass(frozen=True)
class AutoscalerEvent:
    """One thing worth reporting. ``situation`` names what kind of situation it is (for example
    ``cluster-manager-unavailable``): repeats of one situation within the throttle interval are
    reported once, whatever numbers their reasons carry. Every event names it, but applied changes
    (``scaling``, ``rollback``), which are never repeats."""

    time: float  # epoch seconds (simulated seconds in the simulator)
    kind: str
    reason: str
    action: str = "none"  # scale_up | scale_down | rollback | none
    from_executors: int | None = None
    to_executors: int | None = None
    severity: str = "info"  # info | warning | error
    details: dict[str, Any] = field(default_factory=dict)
    situation: str = ""

    def __post_init__(self) -> None:
        if self.kind not in EVENT_KINDS:
            raise ValueError(f"event kind {self.kind!r} is not one of {', '.join(EVENT_KINDS)}")
        if not self.situation and self.kind not in _PER_CHANGE_KINDS:
            raise ValueError(f"a {self.kind!r} event must name its situation (the throttling key)")

    def throttle_key(self) -> tuple[Any, ...]:
        """Events with the same key within the throttle interval are reported once. An applied
        change (scaling, rollback) is never a repeat: 3 -> 2, 2 -> 3, 3 -> 2 within a minute are
        three actions, each reported (only the very same event twice is)."""
        if self.kind in _PER_CHANGE_KINDS:
            return (self.kind, self.action, self.from_executors, self.to_executors, self.time, self.reason)
        return (self.kind, self.action, self.severity, self.situation)

    def published_details(self) -> dict[str, Any]:
        """The details as handlers publish them: with the situation, when there is one."""
        return {"situation": self.situation, **self.details} if self.situation else dict(self.details)


def outcome_event(now: float, scaling: ScalingRecord, outcomes: Mapping[str, Outcome],
                  details: dict[str, Any]) -> AutoscalerEvent:
    """The ``outcome`` of a change, once measured: what each query's batches did against what the
    change's decision predicted (a warning when some query's outcome fell short)."""
    verdict = "; ".join(o.verdict for o in outcomes.values())
    return AutoscalerEvent(
        now, "outcome", f"{scaling.action} {scaling.from_executors} -> {scaling.to_executors}: {verdict}",
        situation=f"outcome:{scaling.time}",
        severity="warning" if any(not o.effective for o in outcomes.values()) else "info",
        from_executors=scaling.from_executors, to_executors=scaling.to_executors,
        details=details | {
            "scalingTime": scaling.time,
            "queries": {q: {"prediction": p.summary() if (p := scaling.predictions.get(q)) else None,
                            "outcome": o.summary()} for q, o in outcomes.items()}})


def events_lost_event(now: float, lost: int, newly: int) -> AutoscalerEvent:
    """Listener events were lost (``newly`` since the last tick, ``lost`` in all)."""
    return AutoscalerEvent(
        now, "notice", f"{newly} listener event(s) lost (Spark's listener bus dropped them "
        "or a task's end never arrived; raise spark.scheduler.listenerbus.eventqueue.capacity): "
        "the metrics of the last window are incomplete, measuring afresh before any decision",
        situation="events-lost", severity="warning", details={"eventsLost": lost})


def concurrent_run_event(now: float, app_name: str, own_scope: str) -> AutoscalerEvent:
    """Another live run of the application holds its state: this run keeps its own."""
    return AutoscalerEvent(
        now, "notice", f"another run of application '{app_name}' is alive and uses its state: this run "
        f"keeps its own state under '{own_scope}'", situation="concurrent-run", severity="warning")


def resume_event(now: float, was_paused: bool, details: dict[str, Any]) -> AutoscalerEvent:
    """The user called ``resume()``: whether it lifted anything."""
    return AutoscalerEvent(now, "resume", "automatic scaling resumed by the user" if was_paused else
                           "resume() called, but nothing was paused", situation="resume", details=details)


class EventHandler(ABC):
    """Delivers events somewhere (log, Spark listener bus, a file...). Must not raise for long:
    the control loop logs and swallows handler exceptions."""

    @abstractmethod
    def handle(self, event: AutoscalerEvent) -> None: ...

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources (files, connections) when the autoscaler stops."""


# ---------------------------------------------------------------------------------------------
# Implementations
# ---------------------------------------------------------------------------------------------

log = logging.getLogger("sparkscale")

BUILTIN_EVENT_HANDLERS = ("logging", "listenerBus", "jsonl")
KEYS_PREFIX = "eventHandlers."  # each handler's keys: eventHandlers.<name>.<key>
_LEVELS = {"error": logging.ERROR, "warning": logging.WARNING}


def jsonable(value: Any) -> Any:
    """A copy of ``value`` that ``json.dumps`` accepts and that parses as strict JSON: non-finite
    floats become None, tuples/sets/arrays lists, dataclasses dicts, anything else its ``str``."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):  # also numpy integers, which json cannot encode
        return int(value)
    if isinstance(value, numbers.Real):
        number = float(value)
        return number if math.isfinite(number) else None
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return jsonable(dataclasses.asdict(value))
    if callable(getattr(value, "tolist", None)):  # numpy arrays and scalars
        return jsonable(value.tolist())
    return str(value)


def _executors(n: int | None) -> str:
    return "?" if n is None else str(n)


def format_event(event: AutoscalerEvent) -> str:
    """One readable line, e.g. ``scale_up 2 -> 4: query 'q1' backlog ...`` (no "sparkscale": the
    logger's name says where the line comes from)."""
    moves = event.from_executors is not None or event.to_executors is not None
    change = f" {_executors(event.from_executors)} -> {_executors(event.to_executors)}" if moves else ""
    if event.kind == "scaling":
        head = f"{event.action}{change}"
    elif event.kind == "recommendation":
        head = f"recommendation {event.action}{change} (not applied)"
    elif event.kind == "rollback":
        head = f"rollback{change}"
    else:
        action = f" {event.action}" if event.action not in ("none", "") else ""
        head = f"{event.kind}{action}{change}"
    line = f"{head}: {event.reason}"
    suppressed = event.details.get("suppressed")
    if suppressed:
        line += f" ({suppressed} identical event{'s' if suppressed != 1 else ''} suppressed before this one)"
    return line


class LoggingEventHandler(EventHandler):
    """One line per event on the ``sparkscale`` logger, at the event's severity (the default
    handler, like Flink's LoggingEventHandler)."""

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self.logger = logger or log

    def handle(self, event: AutoscalerEvent) -> None:
        self.logger.log(_LEVELS.get(event.severity, logging.INFO), "%s", format_event(event))


class ListenerBusEventHandler(EventHandler):
    """Posts events on Spark's listener bus through the JVM bridge, so they reach the event log,
    the history server and any SparkListener. ``bridge`` is duck-typed: it needs
    ``post_scaling_event(action, from_executors, to_executors, reason, applied, mode, details)`` and
    ``post_autoscaler_event(kind, severity, reason, details)``. ``details`` is passed as a dict of
    JSON values; missing executor counts as -1 (the JVM side takes ints)."""

    def __init__(self, bridge: Any) -> None:
        self.bridge = bridge

    def handle(self, event: AutoscalerEvent) -> None:
        details = jsonable(event.published_details())
        if event.kind in ("scaling", "recommendation", "rollback"):
            self.bridge.post_scaling_event(
                "rollback" if event.kind == "rollback" else event.action,
                -1 if event.from_executors is None else event.from_executors,
                -1 if event.to_executors is None else event.to_executors,
                event.reason,
                event.kind != "recommendation",
                str(event.details.get("mode", "")),
                details,
            )
        else:
            self.bridge.post_autoscaler_event(event.kind, event.severity, event.reason, details)


def event_record(event: AutoscalerEvent) -> dict[str, Any]:
    """The JSON object the jsonl handler writes for an event."""
    return {
        "time": datetime.fromtimestamp(event.time, tz=timezone.utc).isoformat(timespec="milliseconds"),
        "epoch": event.time,
        "kind": event.kind,
        "action": event.action,
        "from": event.from_executors,
        "to": event.to_executors,
        "reason": event.reason,
        "severity": event.severity,
        "details": jsonable(event.published_details()),
    }


class JsonLinesEventHandler(EventHandler):
    """Appends one JSON object per line to ``path``.

    The file is opened with O_APPEND for every event and each line goes out in a single
    ``os.write``: several processes can append to one file without interleaving, nothing sits in a
    buffer, and a rotated or removed file is simply recreated.
    """

    options = (Option("path", Text(), "", "file the jsonl event handler appends to (needed when "
                      "`eventHandlers` includes jsonl)"),)

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        if not self.path:
            raise ValueError("JsonLinesEventHandler needs a file path")
        self._lock = threading.Lock()
        self._make_parent()
        # Found at startup, not at the first event: a directory, a file we may not write, a
        # read-only file system. The file is created the owner's alone (0600): decisions and query
        # names can be sensitive.
        if os.path.isdir(self.path):
            raise IsADirectoryError(f"{self.path} is a directory")
        os.close(os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600))

    def _make_parent(self) -> None:
        parent = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(parent, exist_ok=True)

    def handle(self, event: AutoscalerEvent) -> None:
        line = (json.dumps(event_record(event), allow_nan=False, separators=(",", ":")) + "\n").encode()
        with self._lock:
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            except FileNotFoundError:  # the directory was removed since we started
                self._make_parent()
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                view = memoryview(line)
                while view:  # a regular file takes it in one write; loop only for a short write
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)


class _DuckEventHandler(EventHandler):
    """Wraps a user handler that has ``handle`` but does not subclass EventHandler."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def handle(self, event: AutoscalerEvent) -> None:
        self.inner.handle(event)

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if callable(close):
            close()

    def __repr__(self) -> str:
        return repr(self.inner)


class EventDispatcher:
    """Sends each event to every handler, throttling repeats.

    An event with the same :meth:`AutoscalerEvent.throttle_key` as one delivered less than
    ``throttle_s`` ago is suppressed; the next delivered one carries ``details["suppressed"]`` (how
    many were dropped), so nothing disappears silently. A failing handler is logged and the others
    still get the event: ``emit`` never raises into the control loop.
    """

    # Bound on remembered keys (situations named by custom emitters can be many).
    MAX_KEYS = 10_000

    def __init__(self, handlers: Sequence[EventHandler], throttle_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.handlers = list(handlers)
        self.throttle_s = throttle_s
        self.clock = clock
        self._lock = threading.Lock()
        self._last: dict[tuple[Any, ...], float] = {}  # key -> when last delivered
        self._suppressed: dict[tuple[Any, ...], int] = {}
        self._closed = False

    def emit(self, event: AutoscalerEvent) -> bool:
        """Deliver ``event`` (True) or suppress it as a repeat (False)."""
        try:
            with self._lock:
                if self._closed:
                    log.debug("event after close dropped: %s", format_event(event))
                    return False
                now = self.clock()
                key = event.throttle_key()
                last = self._last.get(key)
                if self.throttle_s > 0 and last is not None and now - last < self.throttle_s:
                    self._suppressed[key] = self._suppressed.get(key, 0) + 1
                    return False
                count = self._suppressed.pop(key, 0)
                self._last[key] = now
                self._prune(now)
            if count:
                event = dataclasses.replace(event, details={**event.details, "suppressed": count})
        except Exception:
            log.exception("throttling an event failed; delivering it anyway")
        # Outside the lock: a slow handler must not block other threads' throttle checks, and a
        # handler that emits (re-entrantly) must not deadlock.
        for handler in self.handlers:
            try:
                handler.handle(event)
            except Exception:
                log.exception("event handler %r failed on a %s event", handler,
                              getattr(event, "kind", "?"))
        return True

    def _prune(self, now: float) -> None:
        if len(self._last) <= self.MAX_KEYS:
            return
        # Expired keys with nothing suppressed can be forgotten without losing a count.
        for key, when in list(self._last.items()):
            if now - when >= self.throttle_s and key not in self._suppressed:
                del self._last[key]
        while len(self._last) > self.MAX_KEYS:  # still too many: drop the oldest
            key = next(iter(self._last))
            del self._last[key]
            self._suppressed.pop(key, None)

    def close(self) -> None:
        """Close every handler (errors logged); later events are dropped."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for handler in self.handlers:
            try:
                handler.close()
            except Exception:
                log.exception("closing event handler %r failed", handler)


def event_handler_choices(config: AutoscalerConfig) -> list[tuple[str, Any]]:
    """The handlers ``spark.sparkscale.eventHandlers`` names, each once and in order, checked
    without constructing or opening anything (it runs before the session starts too):
    ("logging", None), ("listenerBus", None), ("jsonl", its path) or ("class", (the name, the
    class))."""
    key = f"{PREFIX}eventHandlers"
    value = ",".join(config.event_handlers)
    canonical = {name.lower(): name for name in BUILTIN_EVENT_HANDLERS}
    names = list(dict.fromkeys(canonical.get(item.lower(), item) for item in config.event_handlers))
    # First the keys under eventHandlers.<name>.: one of a handler not listed is a typo, and its
    # message says more than the one a listed handler would give for missing its key.
    _check_handler_keys(config, {_short_name(name) for name in names}, key, value)
    chosen: list[tuple[str, Any]] = []
    for name in names:  # each once: "logging,logging" would print every line twice
        if name in ("logging", "listenerBus"):
            chosen.append((name, None))
        elif name == "jsonl":
            options = config.module(f"{KEYS_PREFIX}jsonl.")
            path = options.read(JsonLinesEventHandler.options)["path"]
            options.check_all_read()
            if not path:
                raise ConfigError(f"{key} includes jsonl but {PREFIX}{KEYS_PREFIX}jsonl.path is empty; "
                                  "expected the file to append events to")
            chosen.append((name, path))
        elif "." in name:
            chosen.append(("class", (name, load_class("eventHandlers", name, EventHandler, ("handle",),
                                                      accepted_names=BUILTIN_EVENT_HANDLERS))))
        else:
            hint = did_you_mean(name, BUILTIN_EVENT_HANDLERS)
            raise ConfigError(
                f"{key}={value!r}: {name!r} is not accepted; "
                + (hint or f"expected a comma-separated list of "
                   f"{accepted_text(EventHandler, ('handle',), BUILTIN_EVENT_HANDLERS)}"))
    return chosen


def build_event_handlers(config: AutoscalerConfig, bridge: Any = None) -> list[EventHandler]:
    """The handlers named by ``spark.sparkscale.eventHandlers``: logging, listenerBus, jsonl or
    Python class paths (a class with ``handle(event)``, constructed as every plugin is: with a
    :class:`~sparkscale_listener.config.plugins.PluginContext` whose options are its keys under
    ``eventHandlers.<class name>.``).

    listenerBus without a bridge (pure-Python tests, no JVM) is skipped with a warning.
    """
    handlers: list[EventHandler] = []
    for kind, chosen in event_handler_choices(config):
        if kind == "logging":
            handlers.append(LoggingEventHandler())
        elif kind == "listenerBus":
            if bridge is None:
                log.warning("%seventHandlers includes listenerBus but there is no JVM bridge; events "
                            "will not be posted on the listener bus", PREFIX)
                continue
            handlers.append(ListenerBusEventHandler(bridge))
        elif kind == "jsonl":
            try:
                handlers.append(JsonLinesEventHandler(chosen))
            except OSError as err:
                raise ConfigError(f"{PREFIX}{KEYS_PREFIX}jsonl.path={chosen!r}: cannot be written "
                                  f"({err}); expected a writable file path") from err
        else:
            name, cls = chosen
            options = config.module(f"{KEYS_PREFIX}{_short_name(name)}.")
            context = PluginContext(config, options, bridge=bridge)
            handler = construct(cls, context, "eventHandlers")
            handlers.append(handler if isinstance(handler, EventHandler) else _DuckEventHandler(handler))
    return handlers


def _short_name(name: str) -> str:
    """The name a handler's keys go under: a built-in's name, a class path's class name."""
    return name.replace(":", ".").rpartition(".")[2]


def _check_handler_keys(config: AutoscalerConfig, configured: set[str], key: str, value: str) -> None:
    for raw_key in sorted(config.raw):
        if not raw_key.startswith(KEYS_PREFIX):
            continue
        owner = raw_key[len(KEYS_PREFIX):].partition(".")[0]
        if owner in ("logging", "listenerBus") and owner in configured:
            config.module(f"{KEYS_PREFIX}{owner}.").check_all_read()  # they have no keys: all unknown
        if owner in configured:
            continue
        meant = closest(owner, configured | set(BUILTIN_EVENT_HANDLERS))
        if meant is None:
            hint = f"{key}={value!r}"
        elif meant == owner:
            hint = f"add {owner} to {key} to use it"
        else:
            hint = (f"did you mean {PREFIX}{KEYS_PREFIX}{meant}{raw_key[len(KEYS_PREFIX + owner):]}?"
                    + ("" if meant in configured else f" (and add {meant} to {key})"))
        raise ConfigError(f"{PREFIX}{raw_key}={config.raw[raw_key]!r} configures event handler "
                          f"{owner!r}, which is not in {key}; {hint}")
