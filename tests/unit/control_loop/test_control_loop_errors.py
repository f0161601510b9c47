"""An exception in our code never stops the loop: it is logged, reported as an event, and the
next tick runs as usual (the user's query must never suffer for a bug of ours)."""

from __future__ import annotations

from sparkscale_listener.config.core import AutoscalerConfig
from sparkscale_listener.sim import SimQuery, Simulation


class FlakyEvaluator:
    """Wraps the simulation's evaluator and raises on every third call."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.calls = 0

    def evaluate(self, history, context):
        self.calls += 1
        if self.calls % 3 == 0:
            raise RuntimeError("boom in a plugin")
        return self.inner.evaluate(history, context)


def test_exceptions_are_reported_and_the_loop_goes_on() -> None:
    cfg = AutoscalerConfig(max_executors=20)
    sim = Simulation(cfg, [SimQuery("q", lambda t: 800.0 if t < 300 else 3200.0, cost_per_row=0.01)],
                     2, seed=1, strict=False)
    flaky = FlakyEvaluator(sim.autoscaler.evaluator)
    sim.autoscaler.evaluator = flaky
    result = sim.run(1200)

    errors = result.events_of("error")
    assert errors and all("boom in a plugin" in e.reason for e in errors)
    assert sim.autoscaler.status()["errors"] >= len(errors)
    assert "boom in a plugin" in sim.autoscaler.status()["last_error"]
    # Ticks after each failure still evaluate, and the load step still gets its scale-up.
    assert flaky.calls >= 6
    assert [a for a in result.actions if a.action == "scale_up" and a.time > 300]


def test_a_failing_collector_skips_the_tick_only() -> None:
    cfg = AutoscalerConfig(max_executors=20)
    sim = Simulation(cfg, [SimQuery("q", lambda t: 800.0, cost_per_row=0.01)], 2, seed=1, strict=False)
    real_collect = sim.autoscaler.collector.collect
    failures = {"n": 0}

    def collect(now: float):
        if 100 <= now < 160:
            failures["n"] += 1
            raise ConnectionError("py4j gateway hiccup")
        return real_collect(now)

    sim.autoscaler.collector.collect = collect
    result = sim.run(600)
    assert failures["n"] > 0
    assert len(result.events_of("error")) >= 1  # identical errors are throttled, not lost
    assert result.decisions[-1].time >= 590, "ticks continue after the failures"
