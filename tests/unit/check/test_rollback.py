"""The rollback guard: one decision path (``observe``), on scripted checkers and on simulated
metric series with the built-in checkers (pure Python, no Spark)."""

from __future__ import annotations

import json
import random

import pytest

from harness import QID, T0, cfg, context, noisy, record, scale_up, warm_sim
from sparkscale_listener.check.checker import CheckContext, CheckResult, ScalingChecker
from sparkscale_listener.check.guard import GuardOutcome, RollbackGuard
from sparkscale_listener.check.loading import build_checkers
from sparkscale_listener.config.core import AutoscalerConfig
from sparkscale_listener.config.options import ModuleConfig
from sparkscale_listener.config.plugins import PluginContext
from sparkscale_listener.metrics import MetricSample


class Scripted(ScalingChecker):
    """Healthy or not as the test says."""

    name = "scripted"

    def __init__(self, window_s: float = 60.0, name: str = "scripted") -> None:
        super().__init__(PluginContext(cfg(), ModuleConfig("checkers.scripted.", {})))
        self.name = name
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
        super().__init__(PluginContext(cfg(), ModuleConfig("checkers.exploding.", {})))

    def check(self, context: CheckContext) -> CheckResult:
        raise RuntimeError("bug")


def guard_with(config: AutoscalerConfig | None = None,
               window_s: float = 60.0) -> tuple[RollbackGuard, Scripted]:
    checker = Scripted(window_s)
    return RollbackGuard(config or cfg(), [checker]), checker


def observe_at(guard: RollbackGuard, now: float, initial: int = 2) -> GuardOutcome:
    """One tick of the control loop while the guard watches (the current target is the watched
    action's)."""
    assert guard.watching is not None
    ctx = context(guard.watching, None, [], config=guard.config, now=now)
    return guard.observe(ctx, initial_target=initial, current_target=guard.watching.to_executors)


def roll_back(guard: RollbackGuard, checker: Scripted, now: float) -> GuardOutcome:
    """Drive the guard to a rollback at ``now``: a scale-up 2 -> 4 judged unhealthy."""
    guard.watch(record("scale_up", 2, 4, time=now - 1), 2)
    checker.healthy_now = False
    outcome = observe_at(guard, now)
    checker.healthy_now = True
    assert outcome.action == "rollback", outcome
    return outcome


def restarted(guard: RollbackGuard, config: AutoscalerConfig) -> RollbackGuard:
    """A new guard loaded from the state the old one stored (JSON round trip)."""
    fresh = RollbackGuard(config, [])
    fresh.load_state(json.loads(json.dumps(guard.to_state())))
    return fresh


def test_guard_confirms_a_healthy_scaling_after_one_window() -> None:
    guard, _ = guard_with()
    guard.watch(record("scale_up", 2, 4), healthy_target_before=2)
    assert guard.healthy_target == 2
    assert observe_at(guard, T0 + 30).action == "watching"
    outcome = observe_at(guard, T0 + 60)
    assert outcome.action == "healthy" and outcome.target == 4
    assert guard.healthy_target == 4 and guard.watching is None
    assert guard.observe(context(record(), None, []), 2, 4).action == "none"


def test_guard_waits_for_pending_checkers_but_not_forever() -> None:
    guard, checker = guard_with()
    checker.pending_now = True
    guard.watch(record("scale_up", 2, 4), 2)
    assert observe_at(guard, T0 + 70).action == "watching"
    assert observe_at(guard, T0 + 120).action == "healthy"


@pytest.mark.parametrize(("target_mode", "expected"), [("last", 4), ("initial", 2)])
def test_guard_rollback_target_last_or_initial(target_mode: str, expected: int) -> None:
    guard, checker = guard_with(cfg(**{"rollback.target": target_mode}))
    guard.watch(record("scale_up", 2, 4), 2)
    observe_at(guard, T0 + 60)  # 4 is healthy now
    guard.watch(record("scale_up", 4, 8, time=T0 + 100), 4)
    checker.healthy_now = False
    outcome = observe_at(guard, T0 + 110, initial=2)
    assert outcome.action == "rollback" and outcome.target == expected
    assert outcome.unhealthy is not None and outcome.unhealthy.checker == "scripted"
    assert "checker scripted found the scaling unhealthy: broken" == outcome.reason
    assert guard.watching is None  # the failed scaling is not judged again
    assert guard.pause.active(T0 + 111)  # the rollback pauses scaling


def test_guard_rollback_target_is_clamped_and_defaults_to_initial() -> None:
    guard, _ = guard_with(cfg(minExecutors="2", maxExecutors="6"))
    assert guard.rollback_target(initial_target=1) == 2  # nothing healthy known yet
    guard.healthy_target = 9
    assert guard.rollback_target(initial_target=1) == 6


def test_guard_unconfirmed_target_does_not_become_healthy_but_a_rollback_undoes_one_action() -> None:
    guard, checker = guard_with()
    guard.watch(record("scale_up", 2, 4), 2)
    # Scaled again before 4 was confirmed: 2 stays the last healthy target...
    guard.watch(record("scale_up", 4, 8, time=T0 + 20), 4)
    assert guard.healthy_target == 2
    checker.healthy_now = False
    # ...but nothing was found wrong with 4: the rollback undoes the action judged, 4 -> 8.
    assert observe_at(guard, T0 + 30).target == 4


def test_a_bad_scale_up_after_unwatched_scale_downs_is_rolled_back_not_only_paused() -> None:
    # 3 at the start; 3 -> 2 -> 1 within minutes (each watch cut short by the next action); then
    # 1 -> 3 under load and every task fails. The last *confirmed* target is 3, the current one:
    # rolling back there would change nothing. The scale-up is undone: back to 1.
    guard, checker = guard_with()
    guard.watch(record("scale_down", 3, 2, time=T0), 3)
    guard.watch(record("scale_down", 2, 1, time=T0 + 30), 2)
    guard.watch(record("scale_up", 1, 3, time=T0 + 200), 1)
    checker.healthy_now = False
    outcome = observe_at(guard, T0 + 210, initial=3)
    assert (outcome.action, outcome.target) == ("rollback", 1)


def test_a_rollback_never_returns_to_a_target_judged_unhealthy() -> None:
    guard, checker = guard_with(cfg(**{"rollback.target": "last"}))
    guard.watch(record("scale_up", 2, 4), 2)
    checker.healthy_now = False
    failed = guard.observe(context(guard.watching, None, [], config=guard.config, now=T0 + 10),
                           initial_target=2, current_target=2)  # rolled back to 2 elsewhere
    assert failed.action == "failed"  # already at 2: paused, 4 judged unhealthy
    guard.pause.resume(T0 + 20)
    # 4 is in force again (say, set by hand) and judged unhealthy; the next action from 4 fails.
    guard._current_judged_unhealthy = True
    guard.watch(record("scale_up", 4, 6, time=T0 + 100), 4)
    outcome = observe_at(guard, T0 + 110)
    assert (outcome.action, outcome.target) == ("rollback", 2)  # the last healthy, not 4


def test_guard_pause_expires() -> None:
    guard, checker = guard_with(cfg(**{"rollback.pauseDuration": "10min"}))
    roll_back(guard, checker, T0 + 10)
    assert guard.pause.active(T0 + 11)
    assert "rolled back after scripted: broken" in (guard.pause.reason(T0 + 11) or "")
    assert guard.pause.active(T0 + 609)
    assert not guard.pause.active(T0 + 611) and guard.pause.reason(T0 + 611) is None
    assert not guard.pause.stopped and guard.to_state()["rollback_times"] == [T0 + 10]


def test_guard_pause_until_restart() -> None:
    config = cfg(**{"rollback.pauseDuration": "untilRestart"})
    guard, checker = guard_with(config)
    roll_back(guard, checker, T0)
    assert guard.pause.active(T0 + 10 * 86400)
    after = restarted(guard, config)
    assert not after.pause.active(T0 + 20)  # a restart ends it
    assert after.to_state()["rollback_times"] == [T0]  # but the rollback still counts


def test_guard_max_rollbacks_stop_until_resume() -> None:
    guard, checker = guard_with(cfg(**{"rollback.maxRollbacks": "2", "rollback.pauseDuration": "1min"}))
    roll_back(guard, checker, T0)
    assert not guard.pause.stopped and not guard.pause.active(T0 + 61)
    roll_back(guard, checker, T0 + 600)
    assert guard.pause.stopped and guard.pause.active(T0 + 10_000)
    assert "2 rollbacks within 3600s" in (guard.pause.reason(T0 + 601) or "")
    assert guard.pause.resume(T0 + 601)
    assert not guard.pause.stopped and not guard.pause.active(T0 + 601)
    assert guard.pause.reason(T0 + 601) is None
    assert not guard.pause.resume(T0 + 602)  # nothing was in force
    roll_back(guard, checker, T0 + 700)  # resume forgot the earlier rollbacks
    assert not guard.pause.stopped


def test_guard_rollbacks_outside_window_do_not_stop() -> None:
    guard, checker = guard_with(cfg(**{"rollback.maxRollbacks": "2", "rollback.window": "10min"}))
    roll_back(guard, checker, T0)
    roll_back(guard, checker, T0 + 601)
    assert not guard.pause.stopped


def test_guard_never_rolls_back_a_rollback() -> None:
    guard, checker = guard_with()
    guard.watch(record("scale_down", 4, 2), 4)
    checker.healthy_now = False
    outcome = observe_at(guard, T0 + 10, initial=4)
    assert outcome.action == "rollback" and outcome.target == 4 and outcome.unhealthy
    guard.watch_rollback(record("rollback", 2, 4, time=T0 + 12))
    assert guard.watching is not None and guard.healthy_target == 4
    outcome = observe_at(guard, T0 + 30, initial=4)
    assert outcome.action == "failed" and outcome.target is None
    assert "still unhealthy after the rollback" in outcome.reason
    assert guard.watching is None and guard.pause.active(T0 + 31)
    assert "still unhealthy after the rollback" in (guard.pause.reason(T0 + 31) or "")
    assert guard.observe(context(record(), None, [], now=T0 + 40), 4, 4).action == "none"


def test_guard_confirms_a_healthy_rollback() -> None:
    guard, _ = guard_with()
    guard.watch_rollback(record("rollback", 8, 4))
    outcome = observe_at(guard, T0 + 60)
    assert outcome.action == "healthy" and guard.healthy_target == 4


def test_guard_no_rollback_when_target_is_current() -> None:
    guard, checker = guard_with(cfg(**{"rollback.target": "initial"}))
    guard.watch(record("scale_up", 2, 4), 2)
    checker.healthy_now = False
    outcome = observe_at(guard, T0 + 10, initial=4)
    assert outcome.action == "failed" and "already at the rollback target 4" in outcome.reason
    assert guard.pause.active(T0 + 11)


def test_guard_checker_errors_are_healthy() -> None:
    guard = RollbackGuard(cfg(), [Exploding(), Scripted()])
    guard.watch(record(), 2)
    outcome = observe_at(guard, T0 + 10)
    assert outcome.action == "watching"
    assert outcome.results[0].healthy and outcome.results[0].reason == "checker error: RuntimeError: bug"


def test_guard_acts_on_the_first_unhealthy_checker() -> None:
    first, second = Scripted(name="a"), Scripted(name="b")
    guard = RollbackGuard(cfg(), [Scripted(name="ok"), first, second])
    first.healthy_now = second.healthy_now = False
    guard.watch(record(), 2)
    outcome = observe_at(guard, T0 + 10)
    assert outcome.unhealthy is not None and outcome.unhealthy.checker == "a"


def test_guard_state_round_trip() -> None:
    config = cfg(**{"rollback.maxRollbacks": "2"})
    guard, checker = guard_with(config)
    roll_back(guard, checker, T0)
    guard.healthy_target = 5
    state = json.loads(json.dumps(guard.to_state()))
    after = restarted(guard, config)
    assert after.healthy_target == 5
    assert after.pause.active(T0 + 60) and state["paused_until"] == T0 + 1800
    assert after.pause.reason(T0 + 60) == guard.pause.reason(T0 + 60)
    assert after.to_state() == state
    after.checkers = [checker]
    roll_back(after, checker, T0 + 100)
    assert after.pause.stopped  # the rollback before the restart counted
    again = restarted(after, config)
    assert again.pause.stopped and again.pause.active(T0 + 99_999)
    assert "2 rollbacks" in (again.pause.reason(T0 + 99_999) or "")
    empty = RollbackGuard(config, [])
    empty.load_state({})
    assert empty.to_state()["healthy_target"] is None


def test_guard_load_state_tolerates_garbage() -> None:
    guard, _ = guard_with()
    guard.load_state({"healthy_target": "x", "rollback_times": "nope", "paused_until": float("nan"),
                      "stopped": "yes", "last_rollback": 3})
    assert guard.to_state() == {"version": 1, "healthy_target": None, "rollback_times": [],
                                "last_rollback": None, "paused_until": None, "pause_reason": None,
                                "stopped": False, "stop_reason": None}


def test_guard_on_simulated_bad_scale_down() -> None:
    """End to end: a scale-down that leaves the query behind is rolled back to the last healthy
    target by the built-in checkers, and the rollback itself is then confirmed."""
    config = cfg(interval="10s")
    guard = RollbackGuard(config, build_checkers(config))
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
        outcome = guard.observe(context(scaling, history[-1], samples, config=config, history=history),
                                initial_target=4, current_target=2)
        if outcome.action != "watching":
            break
    assert outcome is not None and outcome.action == "rollback", outcome
    assert outcome.target == 4 and outcome.unhealthy is not None
    assert outcome.unhealthy.checker == "throughputRegression"
    now = samples[-1].time
    rollback = record("rollback", 2, 4, time=now + 1)
    guard.watch_rollback(rollback)
    before = samples[-1]
    sim.add_executors(2)
    after: list[MetricSample] = []
    for _ in range(40):
        after.append(sim.tick(rate=1000.0, backlog=1000.0))
        outcome = guard.observe(context(rollback, before, after, config=config), 4, 4)
        if outcome.action != "watching":
            break
    assert outcome.action == "healthy", outcome
    assert guard.healthy_target == 4 and guard.pause.active(after[-1].time)


def test_guard_confirms_a_noisy_but_healthy_scale_up_with_all_builtins() -> None:
    """Every built-in checker at its defaults stays quiet through ordinary noise: ±20 % rates and
    task counts, one task failure retried, one GC spike, one heap spike, then confirms."""
    config = cfg()
    guard = RollbackGuard(config, build_checkers(config))
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
        outcome = guard.observe(context(scaling, history[-1], samples, config=config), 2, 4)
        outcomes.append(outcome)
        if outcome.action != "watching":
            break
    assert [o.action for o in outcomes][-1] == "healthy", [o.reason for o in outcomes]
    assert guard.watching is None and guard.healthy_target == 4
    assert samples[-1].time - T0 >= 300


def _climb(early_before: bool, early_after: bool, initial: int = 1, last_to: int = 3,
           last_arrived: int = 1, **keys: str) -> tuple[GuardOutcome, RollbackGuard]:
    """1 -> 2 -> ``last_to`` in two quick steps (a scale-up cut short, arrivals that outgrew it),
    the second made while the first is watched, ``last_arrived`` of its executors registered;
    those fail every task. The first step's executor fails tasks before the second step (just
    under the thresholds: the second step starts a new count) when ``early_before``, and after it
    when ``early_after``. Ticks with the built-in checkers until the guard acts."""
    config = cfg(interval="10s", **keys)
    guard = RollbackGuard(config, build_checkers(config))
    sim, history = warm_sim(executors=1)
    first = record("scale_up", 1, 2, time=sim.time + 1, rate_before={QID: 1000.0})
    guard.watch(first, healthy_target_before=1)
    sim.time += 2
    (early,) = scale_up(sim, 1)
    samples: list[MetricSample] = [sim.tick(failures=3 if early_before else 0, fail_on=early)]
    outcome = guard.observe(context(first, history[-1], samples, config=config), initial, 2)
    assert outcome.action == "watching", outcome  # 3 failures: not more than maxFailures
    second = record("scale_up", 2, last_to, time=sim.time + 1, rate_before={QID: 1000.0})
    guard.watch(second, healthy_target_before=2)
    before = samples[-1]
    sim.time += 2
    lates = scale_up(sim, last_arrived)
    after: list[MetricSample] = []
    for _ in range(10):
        for late in lates:
            sim.tick(tasks=10, failures=3, fail_on=late)
        after.append(sim.tick(tasks=10, failures=3 if early_after else 0, fail_on=early))
        outcome = guard.observe(context(second, before, after, config=config), initial, last_to)
        if outcome.action != "watching":
            break
    return outcome, guard


def test_a_climb_whose_first_step_failed_too_is_undone_to_where_it_began() -> None:
    # Undoing only the last step (back to 2) would keep executor 2, which fails every task.
    outcome, _ = _climb(early_before=True, early_after=True)
    assert (outcome.action, outcome.target) == ("rollback", 1), outcome
    assert outcome.unhealthy is not None and outcome.unhealthy.checker == "taskFailures"
    assert outcome.suspects == {"2", "3"}
    assert "tasks failed on executors 2, 3, added since the scale-up from 1 began: down to 1, not 2" \
        in outcome.reason


def test_a_climb_whose_last_step_alone_failed_undoes_only_that_step() -> None:
    outcome, _ = _climb(early_before=False, early_after=False)
    assert (outcome.action, outcome.target, outcome.suspects) == ("rollback", 2, {"3"}), outcome
    assert "added since" not in outcome.reason


def test_a_climb_whose_last_step_came_short_still_removes_every_failing_executor() -> None:
    # 1 -> 2 -> 4, one of the last step's two executors registered: undoing it (to 2) removes
    # one executor of 3, and both 2 and 3 fail every task.
    outcome, _ = _climb(early_before=True, early_after=True, last_to=4, last_arrived=1)
    assert (outcome.action, outcome.target, outcome.suspects) == ("rollback", 1, {"2", "3"}), outcome


def test_failures_of_an_earlier_step_that_stopped_do_not_lower_the_target() -> None:
    # Executor 2 failed a few tasks before the second step and none after: only 3 is a suspect.
    outcome, _ = _climb(early_before=True, early_after=False)
    assert (outcome.action, outcome.target, outcome.suspects) == ("rollback", 2, {"3"}), outcome


def test_a_climb_rolled_back_to_the_initial_target_goes_there() -> None:
    # rollback.target=initial: the target the autoscaler started with (2 here, above where the
    # climb began after a scale-down), however many executors of the climb failed.
    outcome, _ = _climb(early_before=True, early_after=True, initial=2, **{"rollback.target": "initial"})
    assert (outcome.action, outcome.target, outcome.suspects) == ("rollback", 2, {"2", "3"}), outcome


def test_a_scale_up_after_a_confirmed_one_is_a_climb_of_its_own() -> None:
    # The first step's watch ended healthy: its executors are not the next scale-up's suspects.
    config = cfg(interval="10s")
    guard = RollbackGuard(config, build_checkers(config))
    sim, history = warm_sim(executors=1)
    first = record("scale_up", 1, 2, time=sim.time + 1)
    guard.watch(first, healthy_target_before=1)
    sim.time += 2
    (early,) = scale_up(sim, 1)
    guard._end_watch(confirmed=True)  # as after a full window without a fault
    second = record("scale_up", 2, 3, time=sim.time + 1)
    guard.watch(second, healthy_target_before=2)
    sim.time += 2
    (late,) = scale_up(sim, 1)
    samples = []
    for _ in range(5):
        sim.tick(tasks=10, failures=3, fail_on=late)
        samples.append(sim.tick(tasks=10, failures=3, fail_on=early))
    outcome = guard.observe(context(second, history[-1], samples, config=config), 1, 3)
    assert (outcome.action, outcome.target, outcome.suspects) == ("rollback", 2, {"3"}), outcome
