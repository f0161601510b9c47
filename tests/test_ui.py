"""The UI publisher: the document the Autoscaler tab renders, and the tick summaries the History
Server's tab is rebuilt from (no Spark; the tabs themselves are tested on real jobs in
tests/integration/test_ui_and_metrics.py and test_history_server.py)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from harness import cfg, query, sample
from sparkscale_listener.config.core import AutoscalerConfig
from sparkscale_listener.decisions import Decision
from sparkscale_listener.metrics import MetricSample
from sparkscale_listener.observe.ui import UiPublisher
from sparkscale_listener.testing.sim import SimQuery, Simulation

DAY = 86_400.0
T0 = 1_767_225_600.0  # epoch seconds, as the control loop's clock gives them


class _Sink:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.documents: list[str] = []
        self.ticks: list[dict[str, Any]] = []
        self.tick_bytes = 0

    def publish_status(self, json_text: str) -> None:
        if self.fail:
            raise RuntimeError("the JVM is gone")
        self.documents.append(json_text)

    def post_tick_event(self, summary_json: str) -> None:
        if self.fail:
            raise RuntimeError("the JVM is gone")
        self.ticks.append(json.loads(summary_json))
        self.tick_bytes += len(summary_json.encode())


@dataclass
class _FakeAutoscaler:
    # The publisher reads only the interval, the window and the limits of the configuration.
    config: AutoscalerConfig = field(default_factory=lambda: AutoscalerConfig(
        interval_s=2.0, metrics_window_s=10.0, max_executors=3))
    app_name: str = "app"
    history: list[dict[str, Any]] = field(default_factory=list)
    target: int = 1

    paused: bool = False

    def status(self) -> dict[str, Any]:
        return {"mode": "autoscale", "target_executors": self.target, "initial_executors": 1,
                "live_executors": 1, "pending_executors": 0, "paused": self.paused,
                "pause_reason": "checker taskFailures: 9 failed tasks" if self.paused else None,
                "stopped": False, "last_decision": None, "last_scaling": None, "errors": 0,
                "provisioning_time_s": 5.0}

    def decisions(self) -> list[dict[str, Any]]:
        return list(self.history)


def _sample(t: float, rows: int, backlog: float, name: str = "q<1>") -> MetricSample:
    return sample(t, live=1, cores=1,
                  queries=[query("id-1", name=name, input_rows=rows, backlog=backlog, input_rate=10.0)])


def test_publisher_collapses_idle_decisions_and_bounds_the_timeline() -> None:
    sink = _Sink()
    scaler = _FakeAutoscaler()
    publisher = UiPublisher(sink, max_points=5)
    for i in range(8):
        action = "scale_up" if i == 4 else "none"
        decision = Decision(float(i), action, 1, 2 if action != "none" else 1, f"reason {i} <b>&",
                            applied=action != "none")
        publisher.observe(scaler, _sample(float(i), rows=100 * i, backlog=10.0 * i), [decision])  # type: ignore[arg-type]
    doc = json.loads(sink.documents[-1])
    collapsed = [(d["action"], d["count"]) for d in doc["decisions"]]
    assert collapsed == [("none", 4), ("scale_up", 1), ("none", 3)]
    assert doc["decisions"][0]["first_time"] == 0.0 and doc["decisions"][0]["reason"] == "reason 3 <b>&"
    assert [p["t"] for p in doc["timeline"]] == [3.0, 4.0, 5.0, 6.0, 7.0]
    last = doc["timeline"][-1]
    # 100 rows/s processed and 10 rows/s of backlog growth, over the 10 s metrics window (7 s so far).
    assert math.isclose(last["processed_rate"], 100.0) and math.isclose(last["arrival_rate"], 110.0)
    assert last["backlog"] == 70.0 and doc["queries"][0]["name"] == "q<1>"


def test_publisher_never_raises() -> None:
    publisher = UiPublisher(_Sink(fail=True))
    scaler = _FakeAutoscaler()
    publisher.observe(scaler, _sample(1.0, 1, 1.0), [])  # type: ignore[arg-type]
    publisher.observe(object(), None, [])  # type: ignore[arg-type]
    assert publisher.published == 0


def _none(t: float, reason: str = "within the band") -> Decision:
    return Decision(t, "none", 1, 1, reason)


def test_tick_events_are_throttled_but_every_change_of_executors_or_pause_is_posted() -> None:
    sink = _Sink()
    scaler = _FakeAutoscaler(config=AutoscalerConfig(interval_s=2.0, metrics_window_s=10.0, max_executors=3,
                                                     event_tick_interval_s=10.0))
    publisher = UiPublisher(sink)
    posted = []
    for i in range(16):  # ticks every 2 s
        t = T0 + 2.0 * i
        scaler.target = 2 if i >= 7 else 1  # a scale-up at t=14
        scaler.paused = i >= 12  # a pause at t=24
        decision = Decision(t, "scale_up", 1, 2, "up", applied=True) if i == 7 else _none(t, f"idle {i}")
        publisher.observe(scaler, _sample(t, rows=10 * i, backlog=0.0), [decision])  # type: ignore[arg-type]
        if publisher.ticks is not None and publisher.ticks.posted > len(posted):
            posted.append(t)
    # The first tick, every 10 s after, and the ticks that changed the target (14) or paused (24).
    assert [t - T0 for t in posted] == [0.0, 10.0, 14.0, 24.0]
    assert [e["point"]["t"] for e in sink.ticks] == posted  # times exact, not cut like the figures
    assert sink.ticks[0]["config"]["max_executors"] == 3 and all("config" not in e for e in sink.ticks[1:])
    # Each event stands for the "none" decisions since the previous one: none is lost.
    idle = [e["decision"] for e in sink.ticks]
    assert [d["count"] for d in idle] == [1, 5, 1, 5]
    assert idle[1] == {"action": "none", "count": 5, "first_time": T0 + 2, "time": T0 + 10, "executors": 1,
                       "reason": "idle 5"}
    assert idle[2]["time"] == T0 + 12  # the run before the scale-up at 14, not the scale-up itself
    assert sink.ticks[3]["status"]["paused"] and "taskFailures" in sink.ticks[3]["status"]["pause_reason"]
    assert sink.ticks[2]["point"]["target"] == 2 and sink.ticks[2]["queries"][0]["name"] == "q<1>"
    assert publisher.ticks.bytes == sink.tick_bytes  # type: ignore[union-attr]


def test_tick_events_go_with_the_listener_bus_handler_only() -> None:
    sink = _Sink()
    scaler = _FakeAutoscaler(config=cfg(eventHandlers="logging", interval="2s"))
    publisher = UiPublisher(sink)
    publisher.observe(scaler, _sample(1.0, 10, 0.0), [_none(1.0)])  # type: ignore[arg-type]
    assert sink.documents and not sink.ticks


def test_without_a_driver_ui_only_the_tick_events_are_posted() -> None:
    sink = _Sink()
    publisher = UiPublisher(sink, live_tab=False)
    publisher.observe(_FakeAutoscaler(), _sample(1.0, 10, 0.0), [_none(1.0)])  # type: ignore[arg-type]
    assert not sink.documents and len(sink.ticks) == 1 and publisher.published == 0


def test_a_day_of_tick_events_stays_small() -> None:
    """What a day-long job adds to its event log, at the default interval (10 s) and tick-summary
    interval (1 min): the real control loop over a simulated day of load that rises and falls,
    with noise and two bursts."""

    def load(t: float) -> float:
        daily = 600 + 400 * math.sin(2 * math.pi * t / DAY)
        return daily * (3 if 30_000 <= t < 31_800 or 60_000 <= t < 60_600 else 1)

    sink = _Sink()
    simulation = Simulation(AutoscalerConfig(max_executors=20),
                            [SimQuery("orders", load, cost_per_row=0.004, noise=0.2, noise_period_s=60)],
                            initial_executors=2, step_s=10.0)
    publisher = UiPublisher(sink, live_tab=False)
    simulation.autoscaler.observers.append(publisher)
    result = simulation.run(DAY)
    changes = len(result.actions)
    # One summary a minute, and one more per change of the executors (target, then live).
    assert 1440 <= len(sink.ticks) <= 1440 + 3 * changes + 10
    # A line of the event log adds Spark's envelope to the summary:
    # {"Event":"io.sparkscale.bridge.AutoscalerTick",<summary>,"timestampMs":1767225600000}
    line_bytes = sink.tick_bytes + len(sink.ticks) * 80
    print(f"a simulated day: {len(result.decisions)} ticks, {changes} scaling actions, "
          f"{len(sink.ticks)} tick events, {line_bytes} bytes ({line_bytes / len(sink.ticks):.0f} per event)")
    assert changes >= 4  # the load moved the executors: changes are part of what was measured
    assert line_bytes < 1_500_000  # about 1 MB: README, "In the Spark History Server"
