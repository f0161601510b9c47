"""The control loop's sequencing, through the harness: a scripted collector, a recording
realizer and a manual clock. Each test is one behaviour."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace

import pytest

from harness import QID, LoopHarness, SteadyQuery, cfg, sample
from sparkscale_listener.check.checker import CheckContext, CheckResult, ScalingChecker
from sparkscale_listener.config.options import ModuleConfig
from sparkscale_listener.config.plugins import PluginContext
from sparkscale_listener.decisions import Evaluation, ScalingContext, ScalingRecord
from sparkscale_listener.evaluator import MetricEvaluator
from sparkscale_listener.metrics import ExecutorInfo, MetricSample
from sparkscale_listener.spark.session import with_start_target


class Verdict(ScalingChecker):
    """Healthy until the test says otherwise."""

    name = "verdict"

    def __init__(self) -> None:
        super().__init__(PluginContext(cfg(), ModuleConfig("checkers.verdict.", {})))
        self.window_s = 600.0
        self.healthy_now = True

    def check(self, context: CheckContext) -> CheckResult:
        return self.healthy("ok") if self.healthy_now else self.unhealthy("tasks fail")


def test_the_first_cluster_call_is_an_absolute_request() -> None:
    h = LoopHarness(cfg(initialExecutors="3", maxExecutors="5"))
    [decision] = h.tick(sample(10, live=2))
    assert "waiting for the requested executors" in decision.reason
    assert h.realizer.calls == [("baseline", 3)]
    assert h.autoscaler.status()["target_executors"] == 3


def test_in_recommend_mode_the_status_shows_no_target_below_min_executors() -> None:
    # On local[*] the driver runs the tasks and no executor is listed; recommend mode requests
    # nothing and its target follows the executors that run: it read 0, below minExecutors.
    h = LoopHarness(cfg(mode="recommend", minExecutors="2", maxExecutors="4", provisioningTimeout="30s"))
    for t in (10, 20, 30, 40):
        h.tick(sample(t, live=0))
    status = h.autoscaler.status()
    assert status["initial_executors"] == 0  # the baseline is set: what runs
    assert status["target_executors"] == 2 and status["mode"] == "recommend"
    assert h.realizer.calls == []  # nothing requested
    h.tick(sample(50, live=3))
    assert h.autoscaler.status()["target_executors"] == 3  # above it, the executors that run


def test_the_brief_status_is_the_status_without_the_last_decision_and_scaling() -> None:
    h = LoopHarness(cfg(initialExecutors="3", maxExecutors="5"))
    h.tick(sample(10, live=2))
    full, brief = h.autoscaler.status(), h.autoscaler.status(brief=True)
    assert full["last_decision"] is not None
    assert brief == {k: v for k, v in full.items() if k not in ("last_decision", "last_scaling")}


def test_without_a_start_target_the_baseline_waits_for_the_count_to_settle_then_for_the_timeout() -> None:
    # Executors still arriving: no baseline (it would cancel those not registered yet) until three
    # ticks see one count; a count that never settles is taken after provisioningTimeout, counted
    # from the first tick (the last three counts alone never span it).
    h = LoopHarness(cfg(provisioningTimeout="60s"))
    for t, live in ((10, 1), (20, 2), (30, 3), (40, 4), (50, 5), (60, 6)):
        h.tick(sample(t, live=live))
    assert h.realizer.calls == []
    h.tick(sample(70, live=7))
    assert h.realizer.calls == [("baseline", 7)]
    settled = LoopHarness(cfg())
    for t in (10, 20, 30):
        settled.tick(sample(t, live=4))
    assert settled.realizer.calls == [("baseline", 4)]


def test_the_start_target_is_the_executors_the_application_asked_for() -> None:
    # Kubernetes starts the pods that fit at once and the rest minutes later, on new nodes: a count
    # settled on the first wave would cancel the others. What was asked for is the start instead.
    asked = {"spark.executor.instances": "16"}
    assert with_start_target(cfg(maxExecutors="20"), asked).initial_executors == 16
    assert with_start_target(cfg(maxExecutors="10"), asked).initial_executors == 10
    assert with_start_target(cfg(maxExecutors="20", minExecutors="18"), asked).initial_executors == 18
    assert with_start_target(cfg(initialExecutors="2", maxExecutors="20"), asked).initial_executors == 2
    assert with_start_target(cfg(mode="recommend", maxExecutors="20"), asked).initial_executors is None
    assert with_start_target(cfg(), {}).initial_executors is None
    h = LoopHarness(with_start_target(cfg(maxExecutors="20"), asked))
    h.tick(sample(10, live=4))
    assert h.realizer.calls == [("baseline", 16)]


def test_extra_executors_at_start_are_removed_by_the_converge_step() -> None:
    h = LoopHarness(cfg(initialExecutors="2"))
    h.tick(sample(10, live=4))
    assert h.realizer.calls == [("baseline", 4), ("realize", 2, ())]


def test_executors_beyond_the_target_are_not_measured_on_until_they_have_left() -> None:
    # The baseline settles on the first executor; a standalone master's extras register after it.
    # Batches meanwhile run on executors leaving: measuring restarts once they are gone.
    h = LoopHarness(cfg(initialExecutors="1", stabilizationInterval="30s"))
    h.tick(sample(10, live=1))
    h.realizer.removing = ("2", "3", "4")
    [leaving] = h.tick(sample(20, live=4))
    assert h.realizer.calls[-1] == ("realize", 1, ())
    assert "waiting for the executors beyond the target to leave" in leaving.reason
    h.realizer.removing = ()
    assert "waiting for the executors beyond the target" in h.tick(sample(30, live=4))[0].reason
    h.tick(sample(40, live=1))
    assert h.autoscaler.executor.targets.window_start == 70.0  # gone at 40, + stabilizationInterval


def test_the_executors_the_autoscaler_removed_are_its_own_in_a_later_scale_ups_wait() -> None:
    # The converge step decommissioned executor 2 (the realizer's result names it); its removal
    # lands during a scale-up's wait. It is no loss from outside (no replacement is on its way):
    # the 2 of 3 at the timeout are the cluster's room.
    h = LoopHarness(cfg(initialExecutors="1", provisioningTimeout="60s",
                        **{"scaleDown.decommission": "true"}))
    h.tick(sample(10, live=1))
    h.realizer.removing = ("2",)
    h.tick(sample(20, live=2))
    tracker = h.autoscaler.executor.provisioning
    tracker.start(ScalingRecord(25.0, "scale_up", 1, 3, "test"), 3, 25.0)
    gone = ExecutorInfo("2", added_time=15.0, removed_time=30.0, removed_reason="Executor decommission: x")
    executors = [ExecutorInfo("1", added_time=5.0), gone, ExecutorInfo("3", added_time=40.0)]
    settled = tracker.settle(85.0, live=2, target=3, executors=executors)
    assert settled is not None and settled.shortfall is not None


def test_a_failing_collector_skips_the_tick_and_is_reported() -> None:
    h = LoopHarness()
    h.tick(sample(10, live=2))
    assert h.tick(RuntimeError("bridge gone")) == []
    assert h.autoscaler.status()["errors"] == 1
    last = h.recorded.events[-1]
    assert last.kind == "error" and "bridge gone" in last.reason
    assert len(h.tick(sample(30, live=2))) == 1  # the next tick runs as usual


def test_a_tick_failing_because_the_application_ended_is_no_error(caplog: pytest.LogCaptureFixture) -> None:
    # spark.stop() during a tick: the bridge's calls fail; that is the application's end, and an
    # error event (and ERROR log line) at such shutdowns only alarmed the user.
    h = LoopHarness()
    h.tick(sample(10, live=2))
    h.autoscaler.application_ended = lambda: True
    with caplog.at_level(logging.INFO, logger="sparkscale"):
        assert h.tick(RuntimeError("SparkContext was shut down")) == []
    assert h.autoscaler.status()["errors"] == 0
    assert not any(e.kind == "error" for e in h.recorded.events)
    assert "the application ended during a tick" in caplog.text
    assert not any(r.levelno >= logging.ERROR for r in caplog.records)

    def broken() -> bool:
        raise AttributeError("'NoneType' object has no attribute 'sc'")

    h.autoscaler.application_ended = broken  # no telling: reported (a bug there must not hide every error)
    assert h.tick(RuntimeError("Connection refused")) == []
    assert h.autoscaler.status()["errors"] == 1


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
    assert [d["action"] for d in h.autoscaler.decisions(applied_only=True)] == ["scale_up", "rollback"]


def test_lost_listener_events_restart_the_window_and_are_reported() -> None:
    h = LoopHarness(cfg(initialExecutors="2", metricsWindow="30s", stabilizationInterval="0s"))
    q = SteadyQuery(QID, rate=100.0, cost=0.01, trigger_s=5.0, batch_s=1.0)
    for t in range(10, 60, 10):
        h.tick(with_query(sample(t, live=2, events_lost=3), q))  # lost before we started: no news
    assert not [e for e in h.recorded.events if e.situation == "events-lost"]
    [decision] = h.tick(with_query(sample(60, live=2, events_lost=5), q))
    assert decision.reason.startswith("not ready: listener events were lost 0s ago")
    assert "fresh 30s metrics window (30s left)" in decision.reason
    (event,) = [e for e in h.recorded.events if e.situation == "events-lost"]
    assert event.severity == "warning" and event.reason.startswith("2 listener event(s) lost")
    assert h.autoscaler.status()["events_lost"] == 5
    # The whole window is waited out, though the query confirms its batches within 10 s.
    for t in range(65, 90, 5):
        assert "lost" in h.tick(with_query(sample(t, live=2, events_lost=5), q), dt=5)[0].reason
    assert "not ready" not in h.tick(with_query(sample(90, live=2, events_lost=5), q), dt=5)[0].reason


def test_no_decision_rests_on_a_window_with_lost_events_even_with_no_query_reading() -> None:
    # The real-Spark failure: a burst job's tasks held the slots, the streaming query read nothing
    # (idle, so no per-query gate applied), and a scale-up was sized on the other job's tasks.
    h = LoopHarness(cfg(initialExecutors="1", maxExecutors="4", metricsWindow="30s",
                        stabilizationInterval="0s"))
    for t in range(10, 60, 10):
        h.tick(sample(t, live=1, events_lost=0))
    during = [h.tick(sample(t, live=1, events_lost=7, other_tasks=40), dt=10 if t == 60 else 5)[0]
              for t in range(60, 90, 5)]
    assert all(d.action == "none" and "events were lost" in d.reason for d in during), during
    [after] = h.tick(sample(90, live=1, events_lost=7, other_tasks=40), dt=5)
    assert after.action == "scale_up" and after.applied


def with_query(s: MetricSample, q: SteadyQuery) -> MetricSample:
    return replace(s, queries={q.qid: q.at(s.time)})


def test_a_batch_job_beside_no_streaming_query_keeps_the_executors_it_uses() -> None:
    # No streaming query, but a batch job with 20 pending or running tasks (4 slots an executor):
    # as Spark's own allocation would, it keeps 5 executors, not minExecutors.
    h = LoopHarness(cfg(initialExecutors="2", maxExecutors="10", metricsWindow="30s",
                        stabilizationInterval="0s"))
    decisions = [h.tick(sample(t, live=2, other_tasks=20))[0] for t in range(10, 60, 10)]
    up = [d for d in decisions if d.action == "scale_up" and d.applied]
    assert [(d.from_executors, d.to_executors) for d in up] == [(2, 5)]
    assert "other jobs (not streaming) have up to 20 pending or running tasks" in up[0].details
    # The batch job ends: executors go back after scaleDownInterval like any scale-down.
    later = [h.tick(sample(t, live=5, other_tasks=0))[0] for t in range(60, 500, 10)]
    downs = [d for d in later if d.action == "scale_down" and d.applied]
    assert downs and downs[0].time - 60 >= h.config.scale_down_interval_s


def test_the_loop_steps_when_woken_not_only_every_interval() -> None:
    import threading
    import time

    from sparkscale_listener.control_loop import ControlLoop

    class CountingAutoscaler:
        def __init__(self) -> None:
            self.steps = 0
            self.stepped = threading.Condition()

        def step(self) -> list:
            with self.stepped:
                self.steps += 1
                self.stepped.notify_all()
            return []

        def close(self) -> None:
            pass

    scaler = CountingAutoscaler()
    loop = ControlLoop(scaler, interval_s=3600.0)  # the next interval would be an hour away

    def wait_for_steps(n: int) -> bool:
        with scaler.stepped:
            return scaler.stepped.wait_for(lambda: scaler.steps >= n, timeout=30)

    loop.start()
    try:
        assert wait_for_steps(1)
        loop.wake()
        assert wait_for_steps(2), "a wake must bring the next step forward"
        loop.wake()
        loop.wake()  # two wakes before the step: one step
        assert wait_for_steps(3)
    finally:
        started = time.monotonic()
        loop.stop()
    assert not loop.running and time.monotonic() - started < 30  # stop does not wait out the interval
