"""The built-in checkers and checker loading, on simulated metric series (pure Python, no Spark)."""

from __future__ import annotations

import random
import sys
import types
from collections.abc import Iterator
from dataclasses import replace

import pytest

from harness import QID, all_results, cfg, context, contexts, noisy, record, scale_up, warm_sim
from sparkscale_listener.check.builtin import (
    BUILTIN_CHECKER_CLASSES,
    ExecutorFailuresChecker,
    GcPressureChecker,
    HeapUsageChecker,
    QueryFailureChecker,
    TaskFailuresChecker,
    ThroughputRegressionChecker,
)
from sparkscale_listener.check.checker import CheckContext, CheckResult, ScalingChecker
from sparkscale_listener.check.guard import RollbackGuard
from sparkscale_listener.check.loading import build_checkers
from sparkscale_listener.config.core import BUILTIN_CHECKERS, AutoscalerConfig
from sparkscale_listener.config.options import ConfigError
from sparkscale_listener.config.plugins import PluginContext


def make(cls: type[ScalingChecker], config: AutoscalerConfig | None = None) -> ScalingChecker:
    config = config or cfg()
    return cls(PluginContext(config, config.module(f"checkers.{cls.name}.")))


# ----------------------------------------------------------------------------------------------
# taskFailures
# ----------------------------------------------------------------------------------------------


def test_task_failures_quiet_on_noise_and_a_single_retry() -> None:
    sim, history = warm_sim()
    before = history[-1]
    scale_up(sim)
    rng = random.Random(1)
    ticks = (sim.tick(rate=noisy(rng, 1000), tasks=int(noisy(rng, 200)), failures=1 if i == 3 else 0)
             for i in range(30))
    results = all_results(make(TaskFailuresChecker), contexts(record(), before, ticks))
    assert all(r.healthy for r in results), [r.reason for r in results if not r.healthy]
    assert any("1 task failures" in r.reason for r in results)


def test_task_failures_fire_on_repeated_failures() -> None:
    sim, history = warm_sim()
    scale_up(sim)
    ticks = (sim.tick(tasks=40, failures=8) for _ in range(3))
    results = all_results(make(TaskFailuresChecker), contexts(record(), history[-1], ticks))
    assert not results[-1].healthy
    assert "task failures" in results[-1].reason and "maxFailures=3" in results[-1].reason


def test_task_failures_among_many_tasks_are_tolerated() -> None:
    sim, history = warm_sim()
    ticks = (sim.tick(tasks=2000, failures=2) for _ in range(6))  # 12 of 12000: 0.1 %
    results = all_results(make(TaskFailuresChecker), contexts(record(), history[-1], ticks))
    assert all(r.healthy for r in results)


def test_task_failures_concentrated_on_new_executors() -> None:
    sim, history = warm_sim()
    new = scale_up(sim)
    ticks = (sim.tick(tasks=2000, failures=2, fail_on=new[0]) for _ in range(6))
    results = all_results(make(TaskFailuresChecker), contexts(record(), history[-1], ticks))
    assert not results[-1].healthy
    assert "new executors" in results[-1].reason


def test_task_failures_outside_window_are_forgotten() -> None:
    sim, history = warm_sim()
    ticks = [sim.tick(tasks=40, failures=8) for _ in range(2)] + [sim.tick() for _ in range(15)]
    checker = make(TaskFailuresChecker)
    assert not checker.check(context(record(), history[-1], ticks[:2])).healthy
    assert checker.check(context(record(), history[-1], ticks)).healthy  # 2 min later


# ----------------------------------------------------------------------------------------------
# executorFailures
# ----------------------------------------------------------------------------------------------


def test_executor_failures_quiet_on_deliberate_removals_and_one_loss() -> None:
    sim, history = warm_sim(executors=4)
    before = history[-1]
    scaling = record("scale_down", 4, 2)
    samples = [sim.tick()]
    sim.remove("1", "Executor killed by driver.")
    sim.remove("2", "Executor decommission: spark scale down")
    samples.append(sim.tick())
    sim.add_executors(1)  # the lost one below is replaced
    sim.remove("3", "Command exited with code 137")
    samples += [sim.tick() for _ in range(5)]
    result = make(ExecutorFailuresChecker).check(context(scaling, before, samples))
    assert result.healthy, result.reason


def test_executor_failures_excuse_reasonless_removals_of_a_scale_down() -> None:
    sim, history = warm_sim(executors=4)
    scaling = record("scale_down", 4, 2)
    sim.time += 1
    sim.remove("1", None)
    sim.remove("2", None)
    samples = [sim.tick() for _ in range(3)]
    assert make(ExecutorFailuresChecker).check(context(scaling, history[-1], samples)).healthy
    sim.add_executors(2)
    sim.remove("3", None)
    sim.remove("4", None)  # two more without a reason: beyond what the scale-down explains
    samples.append(sim.tick())
    assert not make(ExecutorFailuresChecker).check(context(scaling, history[-1], samples)).healthy


def test_executor_failures_fire_on_repeated_losses() -> None:
    sim, history = warm_sim()
    new = scale_up(sim)
    samples = [sim.tick()]
    sim.remove(new[0], "Container killed by YARN for exceeding memory limits")
    samples.append(sim.tick())
    sim.remove(new[1], "Command exited with code 137")
    samples.append(sim.tick())
    result = make(ExecutorFailuresChecker).check(context(record(), history[-1], samples))
    assert not result.healthy
    assert "2 executors lost" in result.reason and "code 137" in result.reason


def test_executors_that_never_arrive_are_not_a_failed_scaling() -> None:
    # A full queue or a quota: the control loop reports a capacity limit, the checker stays healthy.
    sim, history = warm_sim()
    config = cfg(provisioningTimeout="60s")
    checker = make(ExecutorFailuresChecker, config)
    samples = [sim.tick() for _ in range(12)]  # 120 s, 2 of 4 requested executors live
    assert checker.check(context(record("scale_up", 2, 4), history[-1], samples, config=config)).healthy


# ----------------------------------------------------------------------------------------------
# queryFailure
# ----------------------------------------------------------------------------------------------


def test_query_failure_on_exception() -> None:
    sim, history = warm_sim()
    samples = [sim.tick(), sim.tick(exception="org.apache.spark.SparkException: Job aborted\n at ...")]
    result = make(QueryFailureChecker).check(context(record(), history[-1], samples))
    assert not result.healthy
    assert "'orders' terminated: org.apache.spark.SparkException: Job aborted" in result.reason


def test_query_failure_on_failed_batches() -> None:
    sim, history = warm_sim()
    samples = [sim.tick(), sim.tick(new_failed_batches=1)]
    result = make(QueryFailureChecker).check(context(record(), history[-1], samples))
    assert not result.healthy and "1 failed batches" in result.reason


def test_query_failure_quiet_when_stopped_or_already_failed() -> None:
    sim, history = warm_sim()
    stopped = replace(sim.tick(), queries={QID: replace(sim.tick().queries[QID], active=False)})
    assert make(QueryFailureChecker).check(context(record(), history[-1], [stopped])).healthy
    failed_before = sim.tick(exception="boom")
    after = sim.tick(exception="boom")
    assert make(QueryFailureChecker).check(context(record(), failed_before, [after])).healthy


# ----------------------------------------------------------------------------------------------
# gcPressure
# ----------------------------------------------------------------------------------------------


def test_gc_pressure_quiet_on_one_spike() -> None:
    sim, history = warm_sim(executors=4)
    scaling = record("scale_down", 4, 2)
    ticks = (sim.tick(gc_ratio=0.9 if i == 5 else 0.05) for i in range(30))
    results = all_results(make(GcPressureChecker), contexts(scaling, history[-1], ticks))
    assert all(r.healthy for r in results), [r.reason for r in results if not r.healthy]


def test_gc_pressure_fires_when_sustained_after_scale_down() -> None:
    sim, history = warm_sim(executors=4)
    scaling = record("scale_down", 4, 2)
    ticks = (sim.tick(gc_ratio=0.45) for _ in range(12))
    results = all_results(make(GcPressureChecker), contexts(scaling, history[-1], ticks))
    assert results[0].healthy  # not enough run time yet
    assert "minRunTime" in results[0].reason
    assert not results[-1].healthy and "GC took 45%" in results[-1].reason


def test_gc_pressure_ignores_scale_ups_unless_asked() -> None:
    sim, history = warm_sim()
    samples = [sim.tick(gc_ratio=0.6) for _ in range(12)]
    assert make(GcPressureChecker).check(context(record(), history[-1], samples)).healthy
    checker = make(GcPressureChecker, cfg(**{"checkers.gcPressure.scaleUps": "true"}))
    assert not checker.check(context(record(), history[-1], samples)).healthy


def test_gc_pressure_uses_configured_threshold() -> None:
    sim, history = warm_sim(executors=4)
    samples = [sim.tick(gc_ratio=0.45) for _ in range(12)]
    checker = make(GcPressureChecker, cfg(**{"checkers.gcPressure.threshold": "0.5"}))
    assert checker.check(context(record("scale_down", 4, 2), history[-1], samples)).healthy


# ----------------------------------------------------------------------------------------------
# heapUsage
# ----------------------------------------------------------------------------------------------


def test_heap_usage_quiet_on_one_spike() -> None:
    sim, history = warm_sim(executors=4)
    scaling = record("scale_down", 4, 2)
    rng = random.Random(2)
    ticks = (sim.tick(heap=0.99 if i == 4 else noisy(rng, 0.6)) for i in range(30))
    results = all_results(make(HeapUsageChecker), contexts(scaling, history[-1], ticks))
    assert all(r.healthy for r in results), [r.reason for r in results if not r.healthy]
    assert results[0].pending  # fewer than minSamples readings


def test_heap_usage_fires_when_sustained() -> None:
    sim, history = warm_sim(executors=4)
    scaling = record("scale_down", 4, 2)
    ticks = (sim.tick(heap=0.97 if i % 4 else 0.7) for i in range(12))  # 3 of 4 samples high
    results = all_results(make(HeapUsageChecker), contexts(scaling, history[-1], ticks))
    assert not results[-1].healthy and "heap above 95%" in results[-1].reason


# ----------------------------------------------------------------------------------------------
# throughputRegression
# ----------------------------------------------------------------------------------------------


def test_throughput_quiet_on_noise() -> None:
    sim, history = warm_sim()
    rng = random.Random(3)
    scale_up(sim)
    ticks = (sim.tick(rate=noisy(rng, 1000), backlog=noisy(rng, 2000)) for _ in range(40))
    checker = make(ThroughputRegressionChecker)
    results = all_results(checker, contexts(record(rate_before={QID: 1000.0}), history[-1], ticks))
    assert all(r.healthy for r in results), [r.reason for r in results if not r.healthy]
    assert results[0].pending and not results[-1].pending


def test_throughput_drop_after_scale_down_is_fine_while_keeping_up() -> None:
    sim, history = warm_sim(executors=4)
    scaling = record("scale_down", 4, 2, rate_before={QID: 1000.0})
    ticks = (sim.tick(rate=400.0, backlog=100.0) for _ in range(40))  # the input fell
    results = all_results(make(ThroughputRegressionChecker), contexts(scaling, history[-1], ticks))
    assert all(r.healthy for r in results)
    assert "keeps up" in results[-1].reason


def test_throughput_regression_fires_when_falling_behind() -> None:
    sim, history = warm_sim(executors=4)
    scaling = record("scale_down", 4, 2, rate_before={QID: 1000.0})
    ticks = (sim.tick(rate=500.0, backlog=5000.0 * i) for i in range(40))
    results = all_results(make(ThroughputRegressionChecker), contexts(scaling, history[-1], ticks))
    bad = [r for r in results if not r.healthy]
    assert bad and "backlog grew" in bad[0].reason and "50% lower" in bad[0].reason
    # Judged only after settle (30 s) + a full window (180 s).
    first_bad = results.index(bad[0])
    assert (first_bad + 1) * 10 >= 210


def test_throughput_regression_rate_before_from_history() -> None:
    sim, history = warm_sim()
    scaling = record("scale_up", 2, 4)  # no rate_before in the record
    samples = [sim.tick(rate=300.0, backlog=3000.0 * i) for i in range(25)]
    checker = make(ThroughputRegressionChecker)
    result = checker.check(context(scaling, history[-1], samples, history=history))
    assert not result.healthy and "1000.0 rows/s before" in result.reason
    # Without history or a recorded rate there is nothing to compare with.
    result = checker.check(context(scaling, history[-1], samples))
    assert result.healthy and "no rate before" in result.reason


def test_throughput_regression_uses_trigger_interval_without_backlog() -> None:
    sim, history = warm_sim()
    scaling = record("scale_up", 2, 4, rate_before={QID: 1000.0})
    slow = [sim.tick(rate=500.0, backlog=None, trigger_ms=5000.0, batch_ms=8000.0) for _ in range(25)]
    result = make(ThroughputRegressionChecker).check(context(scaling, history[-1], slow))
    assert not result.healthy and "trigger interval" in result.reason
    sim2, history2 = warm_sim()
    unknown = [sim2.tick(rate=500.0, backlog=None) for _ in range(25)]
    result = make(ThroughputRegressionChecker).check(context(scaling, history2[-1], unknown))
    assert result.healthy and "not judged" in result.reason


def test_throughput_regression_reads_external_backlog() -> None:
    sim, history = warm_sim()
    scaling = record("scale_up", 2, 4, rate_before={QID: 1000.0})
    samples = [replace(sim.tick(rate=500.0, backlog=None), external={"backlog.orders": 4000.0 * i})
               for i in range(25)]
    assert not make(ThroughputRegressionChecker).check(context(scaling, history[-1], samples)).healthy


# ----------------------------------------------------------------------------------------------
# build_checkers and configuration errors


def test_a_rollback_is_not_blamed_for_failures_on_the_executors_it_removes() -> None:
    sim, hist = warm_sim(2)
    bad = scale_up(sim, 2)
    before = hist[-1]
    checker = make(TaskFailuresChecker)
    rollback = record("rollback", 4, 2)
    # The bad executors go on failing until they are gone: the rollback is pending, not failed.
    s1 = sim.tick(failures=20, fail_on=bad[0])
    s2 = sim.tick(failures=20, fail_on=bad[1])
    result = checker.check(context(rollback, before, [s1, s2]))
    assert result.healthy and result.pending
    sim.remove(bad[0], "Executor killed by driver.")
    sim.remove(bad[1], "Executor killed by driver.")
    s3, s4 = sim.tick(), sim.tick()
    result = checker.check(context(rollback, before, [s1, s2, s3, s4]))
    assert result.healthy and not result.pending
    # Failures after it took effect do count.
    s5 = sim.tick(failures=50)
    assert not checker.check(context(rollback, before, [s1, s2, s3, s4, s5])).healthy
    # A scale-up with the same failures is judged as before.
    assert not checker.check(context(record("scale_up", 2, 4), before, [s1, s2])).healthy


def test_throughput_regression_needs_enough_batches_to_judge() -> None:
    # The falling-behind case above, but a batch every 10 s is too few for minBatches=30 in the
    # 3-min window: with so few batches, one more or less looks like a large change in rate.
    sim, history = warm_sim(executors=4)
    scaling = record("scale_down", 4, 2, rate_before={QID: 1000.0})
    ticks = (sim.tick(rate=500.0, backlog=5000.0 * i) for i in range(40))
    config = AutoscalerConfig.from_keys({"checkers.throughputRegression.minBatches": "30"})
    results = all_results(make(ThroughputRegressionChecker, config), contexts(scaling, history[-1], ticks))
    assert all(r.healthy for r in results)
    assert "fewer than minBatches=30" in results[-1].reason


# ----------------------------------------------------------------------------------------------


class _Custom(ScalingChecker):
    name = "custom"

    def __init__(self, context: PluginContext) -> None:
        super().__init__(context)
        self.limit = context.options.integer("limit", 5, minimum=0)
        self.window_s = context.options.duration("window", 42.0)

    def check(self, context: CheckContext) -> CheckResult:
        return self.healthy(f"limit {self.limit}")


class _Duck:
    window_s = 7.0

    def check(self, context: CheckContext) -> CheckResult:
        return CheckResult("_Duck", True, "quack")


class _NotAChecker:
    pass


class _Abstract(ScalingChecker):  # forgot check()
    name = "abstract"


@pytest.fixture
def plugins() -> Iterator[str]:
    module = types.ModuleType("sparkscale_test_plugins")
    module.Custom = _Custom  # type: ignore[attr-defined]
    module.Duck = _Duck  # type: ignore[attr-defined]
    module.NotAChecker = _NotAChecker  # type: ignore[attr-defined]
    module.Abstract = _Abstract  # type: ignore[attr-defined]
    module.not_a_class = lambda: None  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    yield module.__name__
    del sys.modules[module.__name__]


def test_build_default_checkers() -> None:
    checkers = build_checkers(cfg())
    assert [c.name for c in checkers] == list(BUILTIN_CHECKERS)
    assert set(BUILTIN_CHECKER_CLASSES) == set(BUILTIN_CHECKERS)
    assert build_checkers(cfg(checkers="")) == []


def test_build_custom_and_duck_checkers(plugins: str) -> None:
    config = cfg(checkers=f"taskFailures,{plugins}.Custom,{plugins}.Duck",
                 **{"checkers.custom.limit": "9", "checkers.taskFailures.maxFailures": "5"})
    checkers = build_checkers(config)
    assert [c.name for c in checkers] == ["taskFailures", "custom", "Duck"]
    assert checkers[0].max_failures == 5  # type: ignore[attr-defined]
    assert checkers[1].limit == 9 and checkers[1].window_s == 42.0  # type: ignore[attr-defined]
    assert checkers[2].window_s == 7.0
    assert RollbackGuard(config, checkers).window_s() == 120.0


@pytest.mark.parametrize(("value", "expected"), [
    ("taskFailures,taskFailure", "'taskFailure' is not a built-in checker nor a class path; did you mean "
                                 "taskFailures?"),
    ("taskFailures,gcpresure", "'gcpresure' is not a built-in checker nor a class path; did you mean "
                               "gcPressure?"),
    ("taskFailures,latency", "'latency' is not a built-in checker"),
    ("nosuch_module_xyz.Checker", "no module named 'nosuch_module_xyz'"),
    ("{plugins}.Missing", "has no attribute 'Missing'"),
    ("{plugins}.NotAChecker", "does not subclass sparkscale_listener.check.checker.ScalingChecker"),
    ("{plugins}.not_a_class", "is a function, not a class"),
    ("{plugins}.Abstract", "is abstract"),
    ("heapUsage,heapUsage", "names checker 'heapUsage' twice"),
])
def test_bad_checker_names_fail_clearly(plugins: str, value: str, expected: str) -> None:
    value = value.format(plugins=plugins)
    with pytest.raises(ConfigError) as error:
        build_checkers(cfg(checkers=value))
    message = str(error.value)
    assert expected in message
    assert f"spark.sparkscale.checkers={value!r}" in message
    if "twice" not in expected and "did you mean" not in expected:  # else the one likely name is enough
        assert "taskFailures, executorFailures" in message and "class path" in message


def test_checker_constructor_errors_fail_clearly(plugins: str) -> None:
    class Fragile(ScalingChecker):
        name = "fragile"

        def __init__(self, context: PluginContext) -> None:
            raise RuntimeError("needs a database")

        def check(self, context: CheckContext) -> CheckResult:
            raise AssertionError

    sys.modules[plugins].Fragile = Fragile  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=r"checker 'fragile'.*could not be constructed: "
                                          r"RuntimeError: needs a database"):
        build_checkers(cfg(checkers=f"{plugins}.Fragile"))


@pytest.mark.parametrize(("keys", "expected"), [
    ({"checkers.taskFailures.maxFailure": "5"},
     "spark.sparkscale.checkers.taskFailures.maxFailure='5' is not a known key"),
    ({"checkers.taskFailures.maxFailures": "many"},
     "spark.sparkscale.checkers.taskFailures.maxFailures='many' is not an integer"),
    ({"checkers.heapUsage.window": "soon"}, "spark.sparkscale.checkers.heapUsage.window='soon'"),
    ({"checkers.throughputRegression.maxDrop": "1.5"}, "out of range"),
    # keys of a disabled built-in are still validated
    ({"checkers": "taskFailures", "checkers.gcPressure.minRuntime": "1s"}, "minRuntime"),
    # keys of a checker that does not exist (misspelt name)
    ({"checkers.taskFailure.maxFailures": "5"}, "configures checker 'taskFailure'"),
    ({"checkers.taskFailures": "5"}, "is not a checker key"),
])
def test_bad_checker_keys_fail_clearly(keys: dict[str, str], expected: str) -> None:
    with pytest.raises(ConfigError, match=r"spark\.sparkscale\.checker") as error:
        build_checkers(cfg(**keys))
    assert expected in str(error.value)


def test_disabled_builtin_keys_are_accepted_when_valid() -> None:
    checkers = build_checkers(cfg(checkers="taskFailures", **{"checkers.gcPressure.window": "5min"}))
    assert [c.name for c in checkers] == ["taskFailures"]
