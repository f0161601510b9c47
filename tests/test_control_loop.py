"""The control loop's sequencing, through the harness: a scripted collector, a recording
realizer and a manual clock. Each test is one behaviour."""

from __future__ import annotations

from collections.abc import Sequence

from harness import LoopHarness, cfg, sample
from sparkscale_listener.checking import CheckContext, CheckResult, ScalingChecker
from sparkscale_listener.config import ModuleConfig
from sparkscale_listener.decisions import Evaluation, ScalingContext
from sparkscale_listener.evaluation import MetricEvaluator
from sparkscale_listener.metrics import MetricSample
from sparkscale_listener.plugins import PluginContext


class Verdict(ScalingChecker):
    """Healthy until the test says otherwise."""

    name = "verdict"

    def __init__(self) -> None:
        super().__init__(PluginContext(cfg(), ModuleConfig("checker.verdict.", {})))
        self.window_s = 600.0
        self.healthy_now = True

    def check(self, context: CheckContext) -> CheckResult:
        return self.healthy("ok") if self.healthy_now else self.unhealthy("tasks fail")


def test_the_first_cluster_call_is_an_absolute_request() -> None:
    h = LoopHarness(cfg(initialExecutors="3", maxExecutors="5"))
    [decision] = h.tick(sample(10, live=2))
    assert "waiting for requested executors" in decision.reason
    assert h.realizer.calls == [("baseline", 3)]
    assert h.autoscaler.status()["target_executors"] == 3


def test_extra_executors_at_start_are_removed_by_the_converge_step() -> None:
    h = LoopHarness(cfg(initialExecutors="2"))
    h.tick(sample(10, live=4))
    assert h.realizer.calls == [("baseline", 4), ("realize", 2, ())]


def test_a_failing_collector_skips_the_tick_and_is_reported() -> None:
    h = LoopHarness()
    h.tick(sample(10, live=2))
    assert h.tick(RuntimeError("bridge gone")) == []
    assert h.autoscaler.status()["errors"] == 1
    last = h.recorded.events[-1]
    assert last.kind == "error" and "bridge gone" in last.reason
    assert len(h.tick(sample(30, live=2))) == 1  # the next tick runs as usual


class ScriptedEvaluator(MetricEvaluator):
    """Recommends what the test says, at a utilization above the band."""

    def __init__(self) -> None:
        self.recommend = 2

    def evaluate(self, history: Sequence[MetricSample], context: ScalingContext) -> Evaluation:
        return Evaluation(context.now, ready=True, current_executors=context.current_target,
                          recommended_executors=self.recommend, required_slots=4.0 * self.recommend,
                          utilization=0.95, backlog_mode=False, reason="scripted")


def test_a_rollback_is_the_first_decision_of_its_tick() -> None:
    checker, evaluator = Verdict(), ScriptedEvaluator()
    h = LoopHarness(cfg(initialExecutors="2", maxExecutors="8"), checkers=[checker], evaluator=evaluator)
    h.tick(sample(10, live=2))
    evaluator.recommend = 4
    [scale_up] = h.tick(sample(20, live=2))
    assert scale_up.action == "scale_up" and scale_up.applied and h.realizer.calls[-1] == ("realize", 4, ())
    checker.healthy_now = False
    tick = h.tick(sample(30, live=4))
    assert [d.action for d in tick] == ["rollback", "none"]
    assert tick[0].to_executors == 2 and "checker verdict found the scaling unhealthy" in tick[0].reason
    assert tick[1].reason.startswith("paused: rolled back after verdict: tasks fail")
    assert [e.kind for e in h.recorded.events][-2:] == ["rollback", "pause"]
    assert h.realizer.calls[-1][:2] == ("realize", 2)
    assert [d["action"] for d in h.autoscaler.decisions()][-2:] == ["rollback", "none"]
