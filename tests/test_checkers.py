"""Checkers and the rollback guard on simulated metric series (pure Python, no Spark)."""

from __future__ import annotations

import json
import random
import sys
import types
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace

import pytest

from sparkscale_listener.checking import (
    BUILTIN_CHECKER_CLASSES,
    CheckContext,
    CheckResult,
    ExecutorFailuresChecker,
    GcPressureChecker,
    HeapUsageChecker,
    QueryFailureChecker,
    RollbackGuard,
    ScalingChecker,
    TaskFailuresChecker,
    ThroughputRegressionChecker,
    build_checkers,
)
from sparkscale_listener.config import BUILTIN_CHECKERS, AutoscalerConfig, ConfigError, ModuleConfig
from sparkscale_listener.decisions import ScalingRecord
from sparkscale_listener.metrics import ClusterMetrics, ExecutorInfo, MetricSample, QueryMetrics

QID = "q1"
T0 = 1_000.0  # time of the scaling in every scenario


def cfg(**keys: str) -> AutoscalerConfig:
    return AutoscalerConfig.from_keys(keys)


def make(cls: type[ScalingChecker], config: AutoscalerConfig | None = None) -> ScalingChecker:
    config = config or cfg()
    return cls(config, config.module(f"checker.{cls.name}."))


# ----------------------------------------------------------------------------------------------
# A tiny simulator: cumulative counters advanced tick by tick
# ----------------------------------------------------------------------------------------------


@dataclass
class Sim:
    """Produces MetricSamples with cumulative counters, like the collector does."""

    time: float = 0.0
    interval: float = 10.0
    cores: int = 4
    rows: int = 0
    finished: int = 0
    failed: int = 0
    run_ms: float = 0.0
    gc_ms: float = 0.0
    batches: int = 0
    batch_ms: float = 0.0
    failed_batches: int = 0
    executors: dict[str, ExecutorInfo] = field(default_factory=dict)
    next_id: int = 1

    def add_executors(self, n: int) -> list[str]:
        ids = []
        for _ in range(n):
            eid = str(self.next_id)
            self.next_id += 1
            self.executors[eid] = ExecutorInfo(eid, cores=self.cores, added_time=self.time)
            ids.append(eid)
        return ids

    def remove(self, eid: str, reason: str | None) -> None:
        self.executors[eid] = replace(self.executors[eid], removed_time=self.time,
                                      removed_reason=reason)

    def live(self) -> list[str]:
        return [e for e, info in self.executors.items() if info.removed_time is None]

    def tick(self, rate: float = 1000.0, backlog: float | None = 0.0, tasks: int = 200,
             failures: int = 0, fail_on: str | None = None, gc_ratio: float = 0.05,
             heap: float | None = 0.5, exception: str | None = None, new_failed_batches: int = 0,
             trigger_ms: float | None = None, batch_ms: float | None = None) -> MetricSample:
        self.time += self.interval
        self.rows += int(rate * self.interval)
        self.finished += tasks
        self.failed += failures
        if failures:
            eid = fail_on or self.live()[0]
            info = self.executors[eid]
            self.executors[eid] = replace(info, tasks_failed=info.tasks_failed + failures)
        run = tasks * 100.0
        self.run_ms += run
        self.gc_ms += run * gc_ratio
        self.batches += 1
        self.batch_ms += batch_ms if batch_ms is not None else self.interval * 500.0
        self.failed_batches += new_failed_batches
        live = self.live()
        query = QueryMetrics(
            QID, name="orders", batches=self.batches, input_rows=self.rows,
            batch_duration_ms=self.batch_ms, backlog=backlog, trigger_interval_ms=trigger_ms,
            active=exception is None, exception=exception, failed_batches=self.failed_batches)
        cluster = ClusterMetrics(
            live_executors=len(live), cores_per_executor=self.cores,
            executors=tuple(self.executors.values()), tasks_finished=self.finished,
            tasks_failed=self.failed, gc_ms=self.gc_ms, run_ms=self.run_ms,
            heap_used_ratio=heap)
        return MetricSample(self.time, cluster, {QID: query})


def noisy(rng: random.Random, value: float, spread: float = 0.2) -> float:
    return value * rng.uniform(1 - spread, 1 + spread)


def warm_sim(executors: int = 2, until: float = T0) -> tuple[Sim, list[MetricSample]]:
    """A sim that ran steadily up to the scaling; returns it and its history."""
    sim = Sim(time=until - 100.0)
    sim.add_executors(executors)
    history = [sim.tick() for _ in range(10)]
    return sim, history


def record(action: str = "scale_up", frm: int = 2, to: int = 4, time: float = T0,
           rate_before: dict[str, float] | None = None) -> ScalingRecord:
    return ScalingRecord(time, action, frm, to, "test", rate_before=rate_before or {})  # type: ignore[arg-type]


def context(scaling: ScalingRecord, before: MetricSample | None, samples: Sequence[MetricSample],
            config: AutoscalerConfig | None = None, requested_total: int | None = None,
            requested_at: float | None = None, history: Sequence[MetricSample] = (),
            now: float | None = None) -> CheckContext:
    return CheckContext(
        now=now if now is not None else (samples[-1].time if samples else scaling.time),
        config=config or cfg(), scaling=scaling, before=before, samples=list(samples),
        requested_total=scaling.to_executors if requested_total is None else requested_total,
        requested_at=scaling.time if requested_at is None else requested_at, history=history)


def contexts(scaling: ScalingRecord, before: MetricSample, ticks: Iterator[MetricSample],
             **kw: object) -> Iterator[CheckContext]:
    """One context per tick, as the control loop builds them while watching."""
    samples: list[MetricSample] = []
    for sample in ticks:
        samples.append(sample)
        yield context(scaling, before, samples, **kw)  # type: ignore[arg-type]


def all_results(checker: ScalingChecker, ctxs: Iterator[CheckContext]) -> list[CheckResult]:
    return [checker.check(c) for c in ctxs]


def scale_up(sim: Sim, n: int = 2) -> list[str]:
    return sim.add_executors(n)


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


def test_executor_failures_fire_when_requested_executors_never_arrive() -> None:
    sim, history = warm_sim()
    config = cfg(provisioningTimeout="60s")
    checker = make(ExecutorFailuresChecker, config)
    scaling = record("scale_up", 2, 4)
    samples = [sim.tick() for _ in range(5)]  # 50 s: still within the timeout
    assert checker.check(context(scaling, history[-1], samples, config=config)).healthy
    samples += [sim.tick() for _ in range(2)]  # 70 s
    result = checker.check(context(scaling, history[-1], samples, config=config))
    assert not result.healthy
    assert "2 of 4 requested executors not registered" in result.reason


def test_executor_failures_provisioning_clock_restarts_after_arrival() -> None:
    sim, history = warm_sim()
    config = cfg(provisioningTimeout="60s")
    checker = make(ExecutorFailuresChecker, config)
    scaling = record("scale_up", 2, 4)
    sim.time += 5
    new = scale_up(sim)
    samples = [sim.tick() for _ in range(6)]
    sim.remove(new[0], "Command exited with code 137")  # one loss, being replaced
    samples += [sim.tick() for _ in range(4)]  # short for 40 s only
    assert checker.check(context(scaling, history[-1], samples, config=config)).healthy
    samples += [sim.tick() for _ in range(3)]  # short for 70 s: the replacement never came
    assert not checker.check(context(scaling, history[-1], samples, config=config)).healthy


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
    checker = make(GcPressureChecker, cfg(**{"checker.gcPressure.scaleUps": "true"}))
    assert not checker.check(context(record(), history[-1], samples)).healthy


def test_gc_pressure_uses_configured_threshold() -> None:
    sim, history = warm_sim(executors=4)
    samples = [sim.tick(gc_ratio=0.45) for _ in range(12)]
    checker = make(GcPressureChecker, cfg(**{"memory.gcPressureThreshold": "0.5"}))
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
# ----------------------------------------------------------------------------------------------


class _Custom(ScalingChecker):
    name = "custom"

    def __init__(self, config: AutoscalerConfig, module_config: ModuleConfig) -> None:
        super().__init__(config, module_config)
        self.limit = module_config.integer("limit", 5, minimum=0)
        self.window_s = module_config.duration("window", 42.0)

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
                 **{"checker.custom.limit": "9", "checker.taskFailures.maxFailures": "5"})
    checkers = build_checkers(config)
    assert [c.name for c in checkers] == ["taskFailures", "custom", "Duck"]
    assert checkers[0].max_failures == 5  # type: ignore[attr-defined]
    assert checkers[1].limit == 9 and checkers[1].window_s == 42.0  # type: ignore[attr-defined]
    assert checkers[2].window_s == 7.0
    assert RollbackGuard(config).watch_duration_s == 120.0


@pytest.mark.parametrize(("value", "expected"), [
    ("taskFailures,taskFailure", "'taskFailure' is not a built-in checker"),
    ("nosuch_module_xyz.Checker", "no module named 'nosuch_module_xyz'"),
    ("{plugins}.Missing", "has no attribute 'Missing'"),
    ("{plugins}.NotAChecker", "does not subclass sparkscale_listener.checking.ScalingChecker"),
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
    if "twice" not in expected:
        assert "taskFailures, executorFailures" in message and "class path" in message


def test_checker_constructor_errors_fail_clearly(plugins: str) -> None:
    class Fragile(ScalingChecker):
        name = "fragile"

        def __init__(self, config: AutoscalerConfig, module_config: ModuleConfig) -> None:
            raise RuntimeError("needs a database")

        def check(self, context: CheckContext) -> CheckResult:
            raise AssertionError

    sys.modules[plugins].Fragile = Fragile  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=r"checker 'fragile'.*could not be constructed: "
                                          r"RuntimeError: needs a database"):
        build_checkers(cfg(checkers=f"{plugins}.Fragile"))


@pytest.mark.parametrize(("keys", "expected"), [
    ({"checker.taskFailures.maxFailure": "5"},
     "spark.sparkscale.checker.taskFailures.maxFailure='5' is not a known key"),
    ({"checker.taskFailures.maxFailures": "many"},
     "spark.sparkscale.checker.taskFailures.maxFailures='many' is not an integer"),
    ({"checker.heapUsage.window": "soon"}, "spark.sparkscale.checker.heapUsage.window='soon'"),
    ({"checker.throughputRegression.maxDrop": "1.5"}, "out of range"),
    # keys of a disabled built-in are still validated
    ({"checkers": "taskFailures", "checker.gcPressure.minRuntime": "1s"}, "minRuntime"),
    # keys of a checker that does not exist (misspelt name)
    ({"checker.taskFailure.maxFailures": "5"}, "configures checker 'taskFailure'"),
    ({"checker.taskFailures": "5"}, "is not a checker key"),
])
def test_bad_checker_keys_fail_clearly(keys: dict[str, str], expected: str) -> None:
    with pytest.raises(ConfigError, match=r"spark\.sparkscale\.checker") as error:
        build_checkers(cfg(**keys))
    assert expected in str(error.value)


def test_disabled_builtin_keys_are_accepted_when_valid() -> None:
    checkers = build_checkers(cfg(checkers="taskFailures", **{"checker.gcPressure.window": "5min"}))
    assert [c.name for c in checkers] == ["taskFailures"]


# ----------------------------------------------------------------------------------------------
# RollbackGuard
# ----------------------------------------------------------------------------------------------


class Scripted(ScalingChecker):
    """Healthy or not as the test says."""

    name = "scripted"

    def __init__(self, window_s: float = 60.0) -> None:
        super().__init__(cfg(), ModuleConfig("checker.scripted.", {}))
        self.window_s = window_s
        self.healthy_now = True
        self.pending_now = False

    def check(self, context: CheckContext) -> CheckResult:
        if self.healthy_now:
            return self.healthy("fine", pending=self.pending_now)
        return self.unhealthy("broken")


class Exploding(ScalingChecker):
    name = "exploding"

    def __init__(self) -> None:
        super().__init__(cfg(), ModuleConfig("checker.exploding.", {}))

    def check(self, context: CheckContext) -> CheckResult:
        raise RuntimeError("bug")


def guard_with(config: AutoscalerConfig | None = None,
               window_s: float = 60.0) -> tuple[RollbackGuard, Scripted]:
    checker = Scripted(window_s)
    return RollbackGuard(config or cfg(), [checker]), checker


def ctx_at(guard: RollbackGuard, now: float) -> CheckContext:
    assert guard.watching is not None
    return context(guard.watching, None, [], config=guard.config, now=now)


def test_guard_confirms_a_healthy_scaling_after_one_window() -> None:
    guard, _ = guard_with()
    guard.watch(record("scale_up", 2, 4), healthy_target_before=2)
    assert guard.healthy_target == 2
    assert guard.observe(ctx_at(guard, T0 + 30), initial_target=2).action == "watching"
    outcome = guard.observe(ctx_at(guard, T0 + 60), initial_target=2)
    assert outcome.action == "healthy" and outcome.target == 4
    assert guard.healthy_target == 4 and guard.watching is None
    assert guard.observe(context(record(), None, []), initial_target=2).action == "none"


def test_guard_waits_for_pending_checkers_but_not_forever() -> None:
    guard, checker = guard_with()
    checker.pending_now = True
    guard.watch(record("scale_up", 2, 4), 2)
    assert guard.observe(ctx_at(guard, T0 + 70), 2).action == "watching"
    assert guard.observe(ctx_at(guard, T0 + 120), 2).action == "healthy"


@pytest.mark.parametrize(("target_mode", "expected"), [("last", 4), ("initial", 2)])
def test_guard_rollback_target_last_or_initial(target_mode: str, expected: int) -> None:
    guard, checker = guard_with(cfg(**{"rollback.target": target_mode}))
    guard.watch(record("scale_up", 2, 4), 2)
    guard.observe(ctx_at(guard, T0 + 60), 2)  # 4 is healthy now
    guard.watch(record("scale_up", 4, 8, time=T0 + 100), 4)
    checker.healthy_now = False
    outcome = guard.observe(ctx_at(guard, T0 + 110), initial_target=2)
    assert outcome.action == "rollback" and outcome.target == expected
    assert outcome.unhealthy is not None and outcome.unhealthy.checker == "scripted"
    assert guard.watching is None  # the failed scaling is not judged again


def test_guard_rollback_target_is_clamped_and_defaults_to_initial() -> None:
    guard, _ = guard_with(cfg(minExecutors="2", maxExecutors="6"))
    assert guard.rollback_target(initial_target=1) == 2  # nothing healthy known yet
    guard.healthy_target = 9
    assert guard.rollback_target(initial_target=1) == 6


def test_guard_unconfirmed_target_does_not_become_healthy() -> None:
    guard, checker = guard_with()
    guard.watch(record("scale_up", 2, 4), 2)
    # Scaled again before 4 was confirmed: 2 stays the last healthy target.
    guard.watch(record("scale_up", 4, 8, time=T0 + 20), 4)
    assert guard.healthy_target == 2
    checker.healthy_now = False
    assert guard.observe(ctx_at(guard, T0 + 30), 2).target == 2


def test_guard_pause_expires() -> None:
    guard, checker = guard_with(cfg(**{"rollback.pauseDuration": "10min"}))
    guard.watch(record("scale_up", 2, 4), 2)
    checker.healthy_now = False
    outcome = guard.observe(ctx_at(guard, T0 + 10), 2)
    assert outcome.unhealthy is not None
    guard.record_rollback(T0 + 10, outcome.unhealthy)
    assert guard.paused(T0 + 11) and "rolled back after scripted: broken" in (guard.pause_reason or "")
    assert guard.paused(T0 + 609)
    assert not guard.paused(T0 + 611) and guard.pause_reason is None
    assert not guard.stopped and guard.rollbacks_in_window(T0 + 611) == 1


def test_guard_pause_until_restart() -> None:
    config = cfg(**{"rollback.pauseDuration": "untilRestart"})
    guard, _ = guard_with(config)
    guard.record_rollback(T0, CheckResult("scripted", False, "broken"))
    assert guard.paused(T0 + 10 * 86400)
    restarted = RollbackGuard.from_state(json.loads(json.dumps(guard.to_state())), config, [])
    assert not restarted.paused(T0 + 20)  # a restart ends it
    assert restarted.rollbacks_in_window(T0 + 20) == 1  # but the rollback still counts


def test_guard_max_rollbacks_stop_until_resume() -> None:
    guard, _ = guard_with(cfg(**{"rollback.maxRollbacks": "2", "rollback.pauseDuration": "1min"}))
    bad = CheckResult("scripted", False, "broken")
    guard.record_rollback(T0, bad)
    assert not guard.stopped and not guard.paused(T0 + 61)
    guard.record_rollback(T0 + 600, bad)
    assert guard.stopped and guard.paused(T0 + 10_000)
    assert "2 rollbacks within 3600s" in (guard.pause_reason or "")
    guard.resume()
    assert not guard.stopped and not guard.paused(T0 + 601) and guard.pause_reason is None
    guard.record_rollback(T0 + 700, bad)  # resume forgot the earlier rollbacks
    assert not guard.stopped


def test_guard_rollbacks_outside_window_do_not_stop() -> None:
    guard, _ = guard_with(cfg(**{"rollback.maxRollbacks": "2", "rollback.window": "10min"}))
    bad = CheckResult("scripted", False, "broken")
    guard.record_rollback(T0, bad)
    guard.record_rollback(T0 + 601, bad)
    assert not guard.stopped


def test_guard_never_rolls_back_a_rollback() -> None:
    guard, checker = guard_with()
    guard.watch(record("scale_down", 4, 2), 4)
    checker.healthy_now = False
    outcome = guard.observe(ctx_at(guard, T0 + 10), initial_target=4)
    assert outcome.action == "rollback" and outcome.target == 4 and outcome.unhealthy
    guard.record_rollback(T0 + 10, outcome.unhealthy)
    guard.watch(record("rollback", 2, 4, time=T0 + 12), healthy_target_before=2)
    assert guard.watching_rollback and guard.healthy_target == 4
    outcome = guard.observe(ctx_at(guard, T0 + 30), initial_target=4)
    assert outcome.action == "failed" and outcome.target is None
    assert "did not restore health" in outcome.reason
    assert guard.watching is None and guard.paused(T0 + 31)
    assert "did not restore health" in (guard.pause_reason or "")
    assert guard.observe(context(record(), None, [], now=T0 + 40), 4).action == "none"


def test_guard_confirms_a_healthy_rollback() -> None:
    guard, _ = guard_with()
    guard.watch(record("rollback", 8, 4), healthy_target_before=8)
    outcome = guard.observe(ctx_at(guard, T0 + 60), initial_target=2)
    assert outcome.action == "healthy" and guard.healthy_target == 4


def test_guard_no_rollback_when_target_is_current() -> None:
    guard, checker = guard_with(cfg(**{"rollback.target": "initial"}))
    guard.watch(record("scale_up", 2, 4), 2)
    checker.healthy_now = False
    outcome = guard.observe(ctx_at(guard, T0 + 10), initial_target=4)
    assert outcome.action == "failed" and "nothing to roll back to" in outcome.reason
    assert guard.paused(T0 + 11)


def test_guard_checker_errors_are_healthy() -> None:
    guard = RollbackGuard(cfg(), [Exploding(), Scripted()])
    guard.watch(record(), 2)
    results = guard.evaluate(ctx_at(guard, T0 + 10))
    assert results[0].healthy and results[0].reason == "checker error: RuntimeError: bug"
    assert guard.verdict(results) is None


def test_guard_verdict_is_first_unhealthy() -> None:
    results = [CheckResult("a", True, ""), CheckResult("b", False, "x"), CheckResult("c", False, "y")]
    assert RollbackGuard.verdict(results) == results[1]


def test_guard_state_round_trip() -> None:
    config = cfg(**{"rollback.maxRollbacks": "2"})
    guard, _ = guard_with(config)
    guard.healthy_target = 5
    guard.record_rollback(T0, CheckResult("scripted", False, "broken"))
    state = json.loads(json.dumps(guard.to_state()))
    restored = RollbackGuard.from_state(state, config, [])
    assert restored.healthy_target == 5
    assert restored.paused(T0 + 60) and restored.paused_until == T0 + 1800
    assert restored.pause_reason == guard.pause_reason
    assert restored.to_state() == state
    restored.record_rollback(T0 + 100, CheckResult("scripted", False, "again"))
    assert restored.stopped  # the rollback before the restart counted
    again = RollbackGuard.from_state(json.loads(json.dumps(restored.to_state())), config, [])
    assert again.stopped and again.paused(T0 + 99_999) and "2 rollbacks" in (again.pause_reason or "")
    assert RollbackGuard.from_state({}, config, []).to_state()["healthy_target"] is None


def test_guard_on_simulated_bad_scale_down() -> None:
    """End to end: a scale-down that leaves the query behind is rolled back to the last healthy
    target by the built-in checkers, and the rollback itself is then confirmed."""
    config = cfg(interval="10s")
    guard = RollbackGuard(config)
    sim, history = warm_sim(executors=4)
    scaling = record("scale_down", 4, 2, rate_before={QID: 1000.0})
    guard.watch(scaling, healthy_target_before=4)
    sim.time += 1
    sim.remove("3", "Executor killed by driver.")
    sim.remove("4", "Executor killed by driver.")
    samples: list[MetricSample] = []
    outcome = None
    for i in range(40):
        samples.append(sim.tick(rate=600.0, backlog=4000.0 * i))
        outcome = guard.observe(context(scaling, history[-1], samples, config=config,
                                        history=history), initial_target=4)
        if outcome.action != "watching":
            break
    assert outcome is not None and outcome.action == "rollback", outcome
    assert outcome.target == 4 and outcome.unhealthy is not None
    assert outcome.unhealthy.checker == "throughputRegression"
    now = samples[-1].time
    guard.record_rollback(now, outcome.unhealthy)
    rollback = record("rollback", 2, 4, time=now + 1)
    guard.watch(rollback, healthy_target_before=2)
    before = samples[-1]
    sim.add_executors(2)
    after: list[MetricSample] = []
    for _ in range(40):
        after.append(sim.tick(rate=1000.0, backlog=1000.0))
        outcome = guard.observe(context(rollback, before, after, config=config), initial_target=4)
        if outcome.action != "watching":
            break
    assert outcome.action == "healthy", outcome
    assert guard.healthy_target == 4 and guard.paused(after[-1].time)


def test_guard_evaluate_verdict_flow_moves_the_watch() -> None:
    """The control loop's own flow: evaluate() + verdict(), no observe()."""
    guard, checker = guard_with(window_s=60.0)
    assert guard.window_s() == 60.0
    guard.watch(record("scale_up", 2, 4), 2)
    assert guard.verdict(guard.evaluate(ctx_at(guard, T0 + 30))) is None
    assert guard.watching is not None
    assert guard.verdict(guard.evaluate(ctx_at(guard, T0 + 60))) is None
    assert guard.watching is None and guard.healthy_target == 4
    # An unhealthy result ends the watch at once: the same failure is acted on once only.
    guard.watch(record("scale_up", 4, 8, time=T0 + 100), 4)
    checker.healthy_now = False
    verdict = guard.verdict(guard.evaluate(ctx_at(guard, T0 + 110)))
    assert verdict is not None and guard.watching is None
    assert guard.last_judged is not None and guard.last_judged.to_executors == 8
    assert not guard.last_judged_rollback
    assert guard.rollback_target(initial_target=2) == 4
    guard.record_rollback(T0 + 110, verdict)
    guard.watch_rollback(record("rollback", 8, 4, time=T0 + 111))
    assert guard.watching_rollback
    assert guard.verdict(guard.evaluate(ctx_at(guard, T0 + 120))) is not None
    assert guard.last_judged_rollback and guard.watching is None  # report, do not chain


def test_guard_load_state_tolerates_garbage() -> None:
    guard, _ = guard_with()
    guard.load_state({"healthy_target": "x", "rollback_times": "nope", "paused_until": float("nan"),
                      "stopped": "yes", "last_rollback": 3})
    assert guard.to_state() == {"version": 1, "healthy_target": None, "rollback_times": [],
                                "last_rollback": None, "paused_until": None, "pause_reason": None,
                                "stopped": False, "stop_reason": None}


def test_guard_confirms_a_noisy_but_healthy_scale_up_with_all_builtins() -> None:
    """Every built-in checker at its defaults stays quiet through ordinary noise: ±20 % rates and
    task counts, one task failure retried, one GC spike, one heap spike, then confirms."""
    config = cfg()
    guard = RollbackGuard(config)
    assert guard.window_s() == 300.0
    sim, history = warm_sim()
    scaling = record("scale_up", 2, 4, rate_before={QID: 1000.0})
    guard.watch(scaling, healthy_target_before=2)
    sim.time += 6
    scale_up(sim)
    rng = random.Random(7)
    samples: list[MetricSample] = []
    outcomes = []
    for i in range(40):
        samples.append(sim.tick(rate=noisy(rng, 1000), backlog=noisy(rng, 1500),
                                tasks=int(noisy(rng, 200)), failures=1 if i == 2 else 0,
                                gc_ratio=0.8 if i == 5 else 0.05, heap=0.99 if i == 8 else 0.6))
        results = guard.evaluate(context(scaling, history[-1], samples, config=config))
        outcomes.append(guard.verdict(results))
        if guard.watching is None:
            break
    assert not any(outcomes), [o for o in outcomes if o]
    assert guard.watching is None and guard.healthy_target == 4
    assert samples[-1].time - T0 >= 300


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
    config = AutoscalerConfig.from_keys({"checker.throughputRegression.minBatches": "30"})
    results = all_results(make(ThroughputRegressionChecker, config), contexts(scaling, history[-1], ticks))
    assert all(r.healthy for r in results)
    assert "fewer than minBatches=30" in results[-1].reason
