"""Event handlers, throttling dispatcher and the configuration-driven factory."""

from __future__ import annotations

import dataclasses
import json
import logging
import multiprocessing
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sparkscale_listener.config.core import AutoscalerConfig
from sparkscale_listener.config.options import ConfigError
from sparkscale_listener.observe.events import (
    AutoscalerEvent,
    EventDispatcher,
    EventHandler,
    JsonLinesEventHandler,
    ListenerBusEventHandler,
    LoggingEventHandler,
    build_event_handlers,
    format_event,
)


def scale_up(reason: str = "query 'q1' backlog 12000 rows growing 300 rows/s", **details: Any,
             ) -> AutoscalerEvent:
    return AutoscalerEvent(time=1_700_000_000.5, kind="scaling", reason=reason, action="scale_up",
                           from_executors=2, to_executors=4, details=dict(details))


class Recorder(EventHandler):
    def __init__(self) -> None:
        self.events: list[AutoscalerEvent] = []
        self.closed = False

    def handle(self, event: AutoscalerEvent) -> None:
        self.events.append(event)

    def close(self) -> None:
        self.closed = True


class Broken(EventHandler):
    def handle(self, event: AutoscalerEvent) -> None:
        raise RuntimeError("handler is broken")

    def close(self) -> None:
        raise RuntimeError("close is broken")


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


# -- dispatcher -----------------------------------------------------------------------------------

def test_identical_event_suppressed_within_interval_and_count_carried() -> None:
    rec, clock = Recorder(), FakeClock()
    d = EventDispatcher([rec], throttle_s=60, clock=clock)
    assert d.emit(scale_up()) is True
    clock.now = 10
    assert d.emit(scale_up()) is False
    clock.now = 59
    assert d.emit(scale_up()) is False
    assert len(rec.events) == 1 and "suppressed" not in rec.events[0].details
    clock.now = 60.5  # interval since the last *delivered* one has passed
    assert d.emit(scale_up(mode="autoscale")) is True
    assert rec.events[-1].details == {"mode": "autoscale", "suppressed": 2}
    clock.now = 200
    assert d.emit(scale_up()) is True
    assert "suppressed" not in rec.events[-1].details  # the count was reset once reported


def test_different_events_pass() -> None:
    rec = Recorder()
    d = EventDispatcher([rec], throttle_s=60, clock=FakeClock())
    d.emit(scale_up())
    d.emit(scale_up(reason="another reason"))
    d.emit(AutoscalerEvent(time=0, kind="scaling", reason="query 'q1' backlog 12000 rows growing "
                           "300 rows/s", action="scale_up", from_executors=4, to_executors=8))
    d.emit(AutoscalerEvent(time=0, kind="recommendation", situation="test", reason="x"))
    assert len(rec.events) == 4


def test_same_situation_with_other_numbers_is_throttled() -> None:
    rec, clock = Recorder(), FakeClock()
    d = EventDispatcher([rec], throttle_s=60, clock=clock)
    first = AutoscalerEvent(time=0, kind="recommendation", reason="utilization 0.93 above 0.9: "
                            "recommend 4 -> 6 (backlog 1200 rows)", action="scale_up",
                            from_executors=4, to_executors=6, situation="recommendation-scale_up")
    assert d.emit(first) is True
    clock.now = 10  # the next tick: the same situation measured with other numbers
    assert d.emit(dataclasses.replace(first, reason="utilization 0.95 above 0.9: recommend 4 -> 7 "
                                      "(backlog 1350.5 rows)", to_executors=7)) is False
    assert d.emit(dataclasses.replace(first, reason="utilization 0.2 below 0.4: recommend 4 -> 2",
                                      action="scale_down", to_executors=2)) is True
    named = AutoscalerEvent(time=0, kind="notice", reason="a", situation="capacity")
    assert d.emit(named) is True
    assert d.emit(dataclasses.replace(named, reason="b")) is False
    clock.now = 75
    assert d.emit(dataclasses.replace(first, to_executors=8)) is True
    assert rec.events[-1].details == {"suppressed": 1}


def test_every_event_but_an_applied_change_names_its_situation() -> None:
    with pytest.raises(ValueError, match="must name its situation"):
        AutoscalerEvent(time=0, kind="notice", reason="a")
    AutoscalerEvent(time=0, kind="scaling", reason="a", action="scale_up")  # each one its own


def test_applied_changes_are_never_throttled_as_repeats() -> None:
    rec = Recorder()
    d = EventDispatcher([rec], throttle_s=60, clock=FakeClock())
    down = AutoscalerEvent(time=100.0, kind="scaling", reason="scale down 3 -> 2 after 16s",
                           action="scale_down", from_executors=3, to_executors=2)
    up = AutoscalerEvent(time=130.0, kind="scaling", reason="scale up 2 -> 3 (backlog)",
                         action="scale_up", from_executors=2, to_executors=3)
    assert d.emit(down) and d.emit(up)
    assert d.emit(dataclasses.replace(down, time=150.0, reason="scale down 3 -> 2 after 18s"))
    assert len(rec.events) == 3


def test_throttle_zero_disables() -> None:
    rec = Recorder()
    d = EventDispatcher([rec], throttle_s=0, clock=FakeClock())
    for _ in range(3):
        d.emit(scale_up())
    assert len(rec.events) == 3


def test_failing_handler_isolated(caplog: pytest.LogCaptureFixture) -> None:
    before, after = Recorder(), Recorder()
    d = EventDispatcher([before, Broken(), after], throttle_s=60, clock=FakeClock())
    with caplog.at_level(logging.ERROR, logger="sparkscale"):
        assert d.emit(scale_up()) is True
    assert len(before.events) == 1 and len(after.events) == 1
    assert "handler is broken" in caplog.text and "Broken" in caplog.text


def test_emit_never_raises_on_bad_event(caplog: pytest.LogCaptureFixture) -> None:
    class Weird(AutoscalerEvent):
        def throttle_key(self) -> tuple[Any, ...]:
            raise ValueError("no key")

    rec = Recorder()
    d = EventDispatcher([rec], throttle_s=60, clock=FakeClock())
    with caplog.at_level(logging.ERROR, logger="sparkscale"):
        assert d.emit(Weird(time=0, kind="notice", reason="r", situation="test")) is True
    assert len(rec.events) == 1 and "no key" in caplog.text


def test_close_closes_every_handler_and_drops_later_events(caplog: pytest.LogCaptureFixture) -> None:
    first, last = Recorder(), Recorder()
    d = EventDispatcher([first, Broken(), last], throttle_s=60, clock=FakeClock())
    with caplog.at_level(logging.ERROR, logger="sparkscale"):
        d.close()
    assert first.closed and last.closed and "close is broken" in caplog.text
    assert d.emit(scale_up()) is False and not first.events
    d.close()  # idempotent


def test_many_distinct_keys_stay_bounded() -> None:
    d = EventDispatcher([], throttle_s=1, clock=FakeClock())
    d.MAX_KEYS = 100  # type: ignore[misc]
    for i in range(1000):
        d.emit(scale_up(reason=f"r{i}"))
    assert len(d._last) <= 100


# -- logging --------------------------------------------------------------------------------------

def test_logging_line_and_levels(caplog: pytest.LogCaptureFixture) -> None:
    handler = LoggingEventHandler()
    with caplog.at_level(logging.DEBUG, logger="sparkscale"):
        handler.handle(scale_up(suppressed=3))
        handler.handle(AutoscalerEvent(time=0, kind="blocked", situation="test",
                                       reason="scale-up was ineffective",
                                       severity="warning"))
        handler.handle(AutoscalerEvent(time=0, kind="error", situation="test", reason="collector failed",
                                       severity="error"))
    records = caplog.records
    assert [r.levelno for r in records] == [logging.INFO, logging.WARNING, logging.ERROR]
    assert all(r.name == "sparkscale" for r in records)
    assert records[0].getMessage() == ("scale_up 2 -> 4: query 'q1' backlog 12000 rows "
                                       "growing 300 rows/s (3 identical events suppressed before this one)")
    assert records[1].getMessage() == "blocked: scale-up was ineffective"


def test_format_recommendation_and_rollback() -> None:
    rec = AutoscalerEvent(time=0, kind="recommendation", situation="test", reason="r", action="scale_down",
                          from_executors=6, to_executors=3)
    assert format_event(rec) == "recommendation scale_down 6 -> 3 (not applied): r"
    rb = AutoscalerEvent(time=0, kind="rollback", reason="gc", action="rollback", from_executors=4,
                         to_executors=2)
    assert format_event(rb) == "rollback 4 -> 2: gc"


# -- listener bus ---------------------------------------------------------------------------------

class FakeBridge:
    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def post_scaling_event(self, action: str, from_executors: int, to_executors: int, reason: str,
                           applied: bool, mode: str, details: dict[str, Any]) -> None:
        self.calls.append(("scaling", (action, from_executors, to_executors, reason, applied, mode, details)))

    def post_autoscaler_event(self, kind: str, severity: str, reason: str, details: dict[str, Any]) -> None:
        self.calls.append(("autoscaler", (kind, severity, reason, details)))


def test_listener_bus_mapping() -> None:
    bridge = FakeBridge()
    handler = ListenerBusEventHandler(bridge)
    handler.handle(scale_up(mode="autoscale", rate=float("nan")))
    handler.handle(AutoscalerEvent(time=0, kind="recommendation", situation="test", reason="rec",
                                   action="scale_down", from_executors=6, to_executors=3,
                                   details={"mode": "recommend"}))
    handler.handle(AutoscalerEvent(time=0, kind="rollback", reason="gc pressure", action="none",
                                   from_executors=4, to_executors=2))
    handler.handle(AutoscalerEvent(time=0, kind="pause", situation="test", reason="paused",
                                   severity="warning",
                                   details={"until": (1, 2)}))
    assert bridge.calls == [
        ("scaling", ("scale_up", 2, 4, "query 'q1' backlog 12000 rows growing 300 rows/s", True,
                     "autoscale", {"mode": "autoscale", "rate": None})),
        ("scaling", ("scale_down", 6, 3, "rec", False, "recommend", {"situation": "test",
                                                                      "mode": "recommend"})),
        ("scaling", ("rollback", 4, 2, "gc pressure", True, "", {})),
        ("autoscaler", ("pause", "warning", "paused", {"situation": "test", "until": [1, 2]})),
    ]


def test_listener_bus_missing_counts() -> None:
    bridge = FakeBridge()
    ListenerBusEventHandler(bridge).handle(AutoscalerEvent(time=0, kind="scaling", reason="r",
                                                           action="scale_up"))
    assert bridge.calls[0][1][1:3] == (-1, -1)


# -- jsonl ----------------------------------------------------------------------------------------

def test_jsonl_lines_parse(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "dir" / "events.jsonl"  # parent directories are created
    handler = JsonLinesEventHandler(path)
    handler.handle(scale_up(mode="autoscale", rate=float("inf"), obj=object(), nested={"t": (1, 2)},
                            np_int=np.int64(3), np_nan=np.float64("nan"), array=np.arange(3)))
    handler.handle(AutoscalerEvent(time=0, kind="error", situation="test", reason='quote " and\nnewline',
                                   severity="error"))
    lines = path.read_text().splitlines()
    assert len(lines) == 2
    first, second = (json.loads(line, parse_constant=pytest.fail) for line in lines)  # strict JSON
    assert first["time"] == "2023-11-14T22:13:20.500+00:00" and first["epoch"] == 1_700_000_000.5
    assert (first["kind"], first["action"], first["from"], first["to"], first["severity"]) == \
        ("scaling", "scale_up", 2, 4, "info")
    assert first["reason"].startswith("query 'q1'")
    assert first["details"]["mode"] == "autoscale" and first["details"]["rate"] is None
    assert first["details"]["nested"] == {"t": [1, 2]} and isinstance(first["details"]["obj"], str)
    assert (first["details"]["np_int"], first["details"]["np_nan"], first["details"]["array"]) == \
        (3, None, [0, 1, 2])
    assert second["reason"] == 'quote " and\nnewline' and second["from"] is None


def test_jsonl_recreates_removed_directory(tmp_path: Path) -> None:
    path = tmp_path / "d" / "events.jsonl"
    handler = JsonLinesEventHandler(path)
    handler.handle(scale_up())
    path.unlink()
    path.parent.rmdir()
    handler.handle(scale_up())
    assert len(path.read_text().splitlines()) == 1


def test_jsonl_file_is_the_owners_alone(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    JsonLinesEventHandler(path).handle(scale_up())
    assert path.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("where", ["directory", "parent is a file"])
def test_jsonl_path_that_cannot_be_written_is_a_startup_error_naming_the_key(tmp_path: Path,
                                                                             where: str) -> None:
    (tmp_path / "file").write_text("x")
    path = tmp_path if where == "directory" else tmp_path / "file" / "events.jsonl"
    config = AutoscalerConfig.from_spark_conf({"spark.sparkscale.eventHandlers": "jsonl",
                                               "spark.sparkscale.eventHandlers.jsonl.path": str(path)})
    with pytest.raises(ConfigError, match=r"jsonl\.path=.*cannot be written.*writable file path"):
        build_event_handlers(config)


class _Recording(EventHandler):
    def __init__(self) -> None:
        self.events: list[AutoscalerEvent] = []

    def handle(self, event: AutoscalerEvent) -> None:
        self.events.append(event)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_full_disk_under_the_jsonl_file_is_logged_and_the_other_handlers_still_get_events(
        caplog: pytest.LogCaptureFixture) -> None:
    recording = _Recording()
    dispatcher = EventDispatcher([JsonLinesEventHandler("/dev/full"), recording])  # every write: ENOSPC
    with caplog.at_level(logging.ERROR, logger="sparkscale"):
        assert dispatcher.emit(scale_up())
    assert len(recording.events) == 1
    assert "No space left on device" in caplog.text


LINES_PER_PROCESS = 300


def _append(path: str, n: int) -> None:
    handler = JsonLinesEventHandler(path)
    for i in range(LINES_PER_PROCESS):
        handler.handle(scale_up(reason="x" * 500, writer=n, i=i))


def test_jsonl_several_processes_append(tmp_path: Path) -> None:
    path = str(tmp_path / "events.jsonl")
    # spawn, not fork: a fork copies locks the pytest process's other threads may hold at that instant.
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_append, args=(path, n)) for n in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    rows = [json.loads(line) for line in Path(path).read_text().splitlines()]  # none interleaved
    assert len(rows) == 4 * LINES_PER_PROCESS
    for n in range(4):
        mine = [r["details"]["i"] for r in rows if r["details"]["writer"] == n]
        assert mine == list(range(LINES_PER_PROCESS))


# -- build_event_handlers -------------------------------------------------------------------------

def test_build_defaults_without_bridge(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="sparkscale"):
        handlers = build_event_handlers(AutoscalerConfig.from_keys({}), bridge=None)
    assert [type(h) for h in handlers] == [LoggingEventHandler]
    assert "listenerBus" in caplog.text and "bridge" in caplog.text


def test_build_all_builtins(tmp_path: Path) -> None:
    config = AutoscalerConfig.from_keys({"eventHandlers": "logging, listenerbus,jsonl,logging",
                                         "eventHandlers.jsonl.path": str(tmp_path / "e.jsonl")})
    bridge = FakeBridge()
    handlers = build_event_handlers(config, bridge)
    assert [type(h) for h in handlers] == [LoggingEventHandler, ListenerBusEventHandler,
                                           JsonLinesEventHandler]
    EventDispatcher(handlers, 0).emit(scale_up())
    assert len(bridge.calls) == 1 and (tmp_path / "e.jsonl").exists()


def test_build_unknown_name() -> None:
    config = AutoscalerConfig.from_keys({"eventHandlers": "logging,slack"})
    with pytest.raises(ConfigError) as err:
        build_event_handlers(config, None)
    message = str(err.value)
    assert "spark.sparkscale.eventHandlers='logging,slack'" in message and "'slack'" in message
    assert "logging, listenerBus, jsonl" in message and "Python class path" in message


def test_build_bad_class_path() -> None:
    config = AutoscalerConfig.from_keys({"eventHandlers": "no_such_pkg_e.Handler"})
    with pytest.raises(ConfigError, match=r"spark\.sparkscale\.eventHandlers='no_such_pkg_e\.Handler'"):
        build_event_handlers(config, None)


def test_build_rejects_keys_no_handler_reads() -> None:
    config = AutoscalerConfig.from_keys({"eventHandlers.slack.url": "http://x"})
    with pytest.raises(ConfigError, match=r"spark\.sparkscale\.eventHandlers\.slack\.url"):
        build_event_handlers(config, None)


def test_build_custom_classes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "sparkscale_test_handlers.py").write_text(textwrap.dedent("""
        from sparkscale_listener.observe.events import EventHandler

        SEEN = []

        class WithConfig(EventHandler):
            def __init__(self, context):
                self.url = context.options.string("url", "")
            def handle(self, event):
                SEEN.append(("with_config", self.url, event.kind))

        class Duck:
            closed = False
            def handle(self, event):
                SEEN.append(("duck", event.kind))
            def close(self):
                Duck.closed = True
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    config = AutoscalerConfig.from_keys({
        "eventHandlers": "sparkscale_test_handlers.WithConfig,sparkscale_test_handlers.Duck",
        "eventHandlers.WithConfig.url": "http://hook",
    })
    handlers = build_event_handlers(config, None)
    assert all(isinstance(h, EventHandler) for h in handlers)
    d = EventDispatcher(handlers, 60)
    d.emit(scale_up())
    d.close()
    import sparkscale_test_handlers as mod  # type: ignore[import-not-found]

    assert mod.SEEN == [("with_config", "http://hook", "scaling"), ("duck", "scaling")]
    assert mod.Duck.closed
