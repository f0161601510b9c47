"""The tick summaries the Autoscaler tab is built from: every tick posted for the live tab, some
kept by the event log for the History Server's, each one conforming to the schema the JVM side
reads (no Spark; the document the JVM builds from them is tested by TabDocumentTest.java, the tabs
on real jobs in tests/integration/test_ui_and_metrics.py and test_history_server.py)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import tab_schema

from harness import cfg, query, sample
from sparkscale_listener.config.core import AutoscalerConfig
from sparkscale_listener.decisions import Decision, Evaluation, QueryEvaluation
from sparkscale_listener.forecast.forecasts import QueryForecast
from sparkscale_listener.metrics import MetricSample
from sparkscale_listener.observe.ui import UiPublisher
from sparkscale_listener.sim import SimQuery, Simulation

DAY = 86_400.0
T0 = 1_767_225_600.0  # epoch seconds, as the control loop's clock gives them
# A line of the event log adds Spark's envelope to the summary:
# {"Event":"io.sparkscale.bridge.AutoscalerTick",<summary>,"timestampMs":1767225600000}
ENVELOPE_BYTES = 80


class _Sink:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.posted: list[tuple[dict[str, Any], bool]] = []
        self.logged_bytes = 0
        self.live_bytes = 0

    def post_tick_event(self, summary_json: str, logged: bool) -> None:
        if self.fail:
            raise RuntimeError("the JVM is gone")
        self.posted.append((json.loads(summary_json), logged))
        if logged:
            self.logged_bytes += len(summary_json.encode())
        else:
            self.live_bytes += len(summary_json.encode())

    @property
    def logged(self) -> list[dict[str, Any]]:
        return [s for s, logged in self.posted if logged]


@dataclass
class _FakeAutoscaler:
    # The publisher reads the interval, the window, the limits and the event settings of the configuration.
    config: AutoscalerConfig = field(default_factory=lambda: AutoscalerConfig(
        interval_s=2.0, metrics_window_s=10.0, max_executors=3))
    target: int = 1
    paused: bool = False
    blocked: dict[str, str] = field(default_factory=dict)
    forecasts: dict[str, dict[str, Any]] = field(default_factory=dict)  # as status() has them

    def status(self, brief: bool = False) -> dict[str, Any]:
        assert brief, "the summary of every tick asks for the brief status"
        return {"mode": "autoscale", "target_executors": self.target, "initial_executors": 1,
                "live_executors": 1, "pending_executors": 0, "paused": self.paused,
                "pause_reason": "checker taskFailures: 9 failed tasks" if self.paused else None,
                "stopped": False, "errors": 0, "provisioning_time_s": 5.0, "blocked_queries": self.blocked,
                "forecasts": self.forecasts}


def _sample(t: float, rows: int, backlog: float, name: str | None = "q<1>") -> MetricSample:
    return sample(t, live=1, cores=1,
                  queries=[query("id-1", name=name, input_rows=rows, backlog=backlog, input_rate=10.0)])


def _none(t: float, reason: str = "within the band") -> Decision:
    return Decision(t, "none", 1, 1, reason)


def _evaluated(t: float, utilization: float, ready: bool = True) -> Evaluation:
    q = QueryEvaluation(query_id="id-1", name="q<1>", input_rate=10.0, backlog=0.0, backlog_growth_rate=0.0,
                        target_rate=10.0, catch_up_rate=0.0, slot_seconds_per_row=0.01,
                        required_slots=0.123456, utilization=utilization, parallelism_cap=None, capped=False,
                        backlog_mode=False)
    return Evaluation(time=t, ready=ready, current_executors=1, recommended_executors=1,
                      required_slots=0.123456, utilization=utilization, backlog_mode=False,
                      queries={"id-1": q})


def _conforms(sink: _Sink) -> None:
    for summary, _ in sink.posted:
        assert tab_schema.errors(summary, "tick") == [], summary


def test_every_tick_is_posted_for_the_live_tab_with_rates_over_the_window() -> None:
    sink = _Sink()
    publisher = UiPublisher(sink)
    scaler = _FakeAutoscaler()
    for i in range(8):
        publisher.observe(scaler, _sample(T0 + i, rows=100 * i, backlog=10.0 * i), [_none(T0 + i)])  # type: ignore[arg-type]
    assert len(sink.posted) == publisher.posted == 8
    _conforms(sink)
    last = sink.posted[-1][0]
    # 100 rows/s processed and 10 rows/s of backlog growth, over the 10 s metrics window (7 s so far).
    point = last["point"]
    assert math.isclose(point["processed_rate"], 100.0) and math.isclose(point["arrival_rate"], 110.0)
    assert last["point"]["backlog"] == 70.0 and last["point"]["t"] == T0 + 7
    assert last["queries"] == [{"name": "q<1>", "backlog": 70.0, "input_rate": 10.0, "processed_rate": 0.0,
                                "arrival_rate": None, "utilization": None, "required_slots": None,
                                "id": "id-1"}]
    assert "config" in sink.posted[0][0] and all("config" not in s for s, _ in sink.posted[1:])


def test_summaries_for_the_event_log_are_throttled_but_every_change_of_executors_or_pause_is_kept() -> None:
    sink = _Sink()
    scaler = _FakeAutoscaler(config=AutoscalerConfig(interval_s=2.0, metrics_window_s=10.0, max_executors=3,
                                                     event_tick_interval_s=10.0))
    publisher = UiPublisher(sink)
    for i in range(16):  # ticks every 2 s
        t = T0 + 2.0 * i
        scaler.target = 2 if i >= 7 else 1  # a scale-up at t=14
        scaler.paused = i >= 12  # a pause at t=24
        decision = Decision(t, "scale_up", 1, 2, "up", applied=True) if i == 7 else _none(t, f"idle {i}")
        publisher.observe(scaler, _sample(t, rows=10 * i, backlog=0.0), [decision])  # type: ignore[arg-type]
    _conforms(sink)
    assert len(sink.posted) == 16  # every tick, for the live tab
    kept = sink.logged
    # The first tick, every 10 s after, and the ticks that changed the target (14) or paused (24).
    assert [s["point"]["t"] - T0 for s in kept] == [0.0, 10.0, 14.0, 24.0]  # times exact, not cut
    assert kept[0]["config"]["max_executors"] == 3 and all("config" not in s for s in kept[1:])
    # Each kept summary stands for the "none" decisions since the previous one: none is lost.
    runs = [s["decision"] for s in kept]
    assert [r["count"] for r in runs] == [1, 5, 1, 5]
    assert runs[1] == {"action": "none", "count": 5, "first_time": T0 + 2, "time": T0 + 10, "executors": 1,
                       "reason": "idle 5"}
    assert runs[2]["time"] == T0 + 12  # the run before the scale-up at 14, not the scale-up itself
    # The summaries in between carry the run so far: the live tab updates one row with them.
    between = [s["decision"] for s, logged in sink.posted[1:5]]
    assert [r["count"] for r in between] == [1, 2, 3, 4] and {r["first_time"] for r in between} == {T0 + 2}
    assert kept[3]["status"]["paused"] and "taskFailures" in kept[3]["status"]["pause_reason"]
    assert kept[2]["point"]["target"] == 2 and kept[2]["queries"][0]["name"] == "q<1>"
    assert publisher.summaries is not None and publisher.summaries.bytes == sink.logged_bytes


def test_the_event_log_keeps_summaries_with_the_listener_bus_handler_only() -> None:
    sink = _Sink()
    publisher = UiPublisher(sink)
    publisher.observe(_FakeAutoscaler(config=cfg(eventHandlers="logging", interval="2s")),  # type: ignore[arg-type]
                      _sample(T0, 10, 0.0), [_none(T0)])
    assert [logged for _, logged in sink.posted] == [False]


def test_without_a_driver_ui_only_the_summaries_the_event_log_keeps_are_posted() -> None:
    sink = _Sink()
    publisher = UiPublisher(sink, live_tab=False)
    scaler = _FakeAutoscaler()
    for i in range(5):
        publisher.observe(scaler, _sample(T0 + 2 * i, 10, 0.0), [_none(T0 + 2 * i)])  # type: ignore[arg-type]
    assert [logged for _, logged in sink.posted] == [True]  # the first; the next one is due in a minute


def test_queries_keep_their_latest_evaluation_and_say_when_it_was() -> None:
    sink = _Sink()
    publisher = UiPublisher(sink)
    scaler = _FakeAutoscaler(blocked={"id-1": "scale-up 1 -> 2 did not help"})
    ready = Decision(T0, "none", 1, 1, "ok", evaluation=_evaluated(T0, 0.61234))
    waiting = Decision(T0 + 2, "none", 1, 1, "waiting", evaluation=_evaluated(T0 + 2, 0.9, ready=False))
    publisher.observe(scaler, _sample(T0, 10, 0.0, name=None), [ready])  # type: ignore[arg-type]
    publisher.observe(scaler, _sample(T0 + 2, 20, 0.0, name=None), [waiting])  # type: ignore[arg-type]
    _conforms(sink)
    first, second = (s for s, _ in sink.posted)
    assert first["queries"][0]["utilization"] == 0.6123 and "evaluated_at" not in first["queries"][0]
    assert first["queries"][0]["required_slots"] == 0.1235  # 4 significant digits
    # Not ready (waiting for a full window): the last evaluation, and when it was made.
    assert second["queries"][0]["utilization"] == 0.6123 and second["queries"][0]["evaluated_at"] == T0
    assert second["point"]["utilization"] == 0.6123  # no hole in the chart
    assert second["queries"][0]["name"] is None and second["queries"][0]["id"] == "id-1"
    assert second["status"]["blocked_queries"] == {"id-1": "scale-up 1 -> 2 did not help"}


def _forecast(qid: str, rate_now: float, applied: bool) -> dict[str, Any]:
    """A query's forecast as status()["forecasts"] has it."""
    state = "applied" if applied else "shadow (forecast.mode=shadow)"
    return QueryForecast(query_id=qid, period_s=600.0, detected=False, rate_now=rate_now, horizon_s=40.0,
                         peak_rate=rate_now, peak_at=T0, return_rate=rate_now, return_at=T0,
                         settled_rate=rate_now, settled_at=T0, error=0.05, checked_periods=3.0,
                         applied=applied, state=state).to_dict()


def test_the_point_carries_the_forecast_beside_the_load() -> None:
    """The chart's forecast line: the queries' forecast rows/s for now, summed; null while none has a
    forecast; forecast_applied only while one of them is applied (the chart draws shadow apart)."""
    sink = _Sink()
    publisher = UiPublisher(sink)
    scaler = _FakeAutoscaler()

    def tick(t: float) -> dict[str, Any]:
        queries = [query("id-1", name="a", input_rows=int(10 * t), input_rate=10.0),
                   query("id-2", name="b", input_rows=int(30 * t), input_rate=30.0)]
        publisher.observe(scaler, sample(t, live=1, cores=1, queries=queries), [_none(t)])  # type: ignore[arg-type]
        return sink.posted[-1][0]["point"]

    without = tick(T0)
    scaler.forecasts = {"id-1": _forecast("id-1", 12.34567, applied=False),
                        "id-2": _forecast("id-2", 30.0, applied=False)}
    shadow = tick(T0 + 2)
    scaler.forecasts["id-2"] = _forecast("id-2", 30.0, applied=True)
    applied = tick(T0 + 4)
    _conforms(sink)
    assert without["forecast_rate"] is None and "forecast_applied" not in without
    assert shadow["forecast_rate"] == 42.35 and "forecast_applied" not in shadow  # 4 significant digits
    assert applied["forecast_rate"] == 42.35 and applied["forecast_applied"] is True


def test_the_schema_check_finds_what_does_not_conform() -> None:
    """The check above must be able to fail: a misspelt, a missing and a mistyped member."""
    sink = _Sink()
    UiPublisher(sink).observe(_FakeAutoscaler(), _sample(T0, 10, 0.0), [_none(T0)])  # type: ignore[arg-type]
    summary = sink.posted[0][0]
    summary["point"]["backlogg"] = summary["point"].pop("backlog")
    summary["queries"][0]["utilization"] = "high"
    del summary["status"]["mode"]
    found = tab_schema.errors(summary, "tick")
    assert len(found) == 4, found  # backlog missing, backlogg undeclared, the string, the mode


def test_publisher_never_raises() -> None:
    publisher = UiPublisher(_Sink(fail=True))
    publisher.observe(_FakeAutoscaler(), _sample(T0, 1, 1.0), [])  # type: ignore[arg-type]
    publisher.observe(object(), None, [])  # type: ignore[arg-type]
    assert publisher.posted == 0


def test_a_day_of_tick_summaries_adds_about_a_megabyte_to_the_event_log() -> None:
    """What a day-long job adds to its event log, at the default interval (10 s) and tick-summary
    interval (1 min): the real control loop over a simulated day of load that rises and falls,
    with noise and two bursts. The live tab gets every tick; the event log only the ones kept."""

    def load(t: float) -> float:
        daily = 600 + 400 * math.sin(2 * math.pi * t / DAY)
        return daily * (3 if 30_000 <= t < 31_800 or 60_000 <= t < 60_600 else 1)

    sink = _Sink()
    simulation = Simulation(AutoscalerConfig(max_executors=20),
                            [SimQuery("orders", load, cost_per_row=0.004, noise=0.2, noise_period_s=60)],
                            initial_executors=2, step_s=10.0)
    publisher = UiPublisher(sink)
    simulation.autoscaler.observers.append(publisher)
    result = simulation.run(DAY)
    changes = len(result.actions)
    kept = sink.logged
    _conforms(sink)
    assert len(sink.posted) == len(result.decisions)  # every tick, for the live tab
    # One summary a minute, and one more per change of the executors (target, then live).
    assert 1440 <= len(kept) <= 1440 + 3 * changes + 10
    logged = sink.logged_bytes + len(kept) * ENVELOPE_BYTES
    every_tick = logged + sink.live_bytes + (len(sink.posted) - len(kept)) * ENVELOPE_BYTES
    print(f"a simulated day: {len(result.decisions)} ticks, {changes} scaling actions; event log: "
          f"{len(kept)} tick summaries, {logged} bytes ({logged / len(kept):.0f} per summary); "
          f"{every_tick} bytes if every tick were logged")
    assert changes >= 4  # the load moved the executors: changes are part of what was measured
    assert logged < 1_500_000  # about 1 MB: docs/observability.md, "In the Spark History Server"
    assert every_tick > 5 * logged  # what keeping the live-only ticks out of the log saves
