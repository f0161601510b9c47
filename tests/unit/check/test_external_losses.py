"""An executor lost from outside (its JVM killed, its host gone) while a scale-up is judged: the
dip it causes is not the scaling's doing. throughputRegression does not judge a window holding
such a loss (executorFailures judges losses, one by default being tolerated), so a single loss
with its replacement arriving leaves the scale-up healthy; more losses still fail it."""

from __future__ import annotations

from collections.abc import Iterator

from harness import QID, all_results, cfg, contexts, record, scale_up, warm_sim
from sparkscale_listener.check.builtin import ThroughputRegressionChecker
from sparkscale_listener.check.checker import CheckContext, ScalingChecker
from sparkscale_listener.check.guard import RollbackGuard
from sparkscale_listener.check.loading import build_checkers
from sparkscale_listener.config.core import AutoscalerConfig
from sparkscale_listener.config.plugins import PluginContext
from sparkscale_listener.metrics import MetricSample

KILLED = "Command exited with code 137"
WINDOWS = {f"checkers.{c}.window": "30s" for c in ("taskFailures", "executorFailures", "queryFailure",
                                                   "throughputRegression", "gcPressure", "heapUsage")}
CONFIG = cfg(**WINDOWS, **{"checkers.throughputRegression.settle": "0s", "provisioningTimeout": "20s",
                           "checkers.throughputRegression.minBatches": "2"})


def make(cls: type[ScalingChecker], config: AutoscalerConfig = CONFIG) -> ScalingChecker:
    return cls(PluginContext(config, config.module(f"checkers.{cls.name}.")))


def scale_up_with_losses(losses: int) -> tuple[list[MetricSample], Iterator[MetricSample], MetricSample]:
    """2 -> 4 executors at 1000 rows/s; 30 s after, ``losses`` original executors are killed from
    outside: 30 s at 400 rows/s with a growing backlog, then replacements and the rate back."""
    sim, history = warm_sim(executors=2)
    scale_up(sim, 2)

    def ticks() -> Iterator[MetricSample]:
        for _ in range(3):
            yield sim.tick(rate=1000.0)
        for eid in ["1", "2"][:losses]:
            sim.remove(eid, KILLED)
        for i in range(1, 4):
            yield sim.tick(rate=400.0, backlog=6000.0 * i, failures=1 if i == 1 else 0)
        sim.add_executors(losses)  # the cluster manager's replacements
        for i in range(12):
            yield sim.tick(rate=1000.0, backlog=max(0.0, 18000.0 - 3000.0 * i))

    return history, ticks(), history[-1]


def test_throughput_is_not_judged_over_a_window_with_a_loss_from_outside() -> None:
    _, ticks, before = scale_up_with_losses(losses=1)
    scaling = record("scale_up", 2, 4, rate_before={QID: 1000.0})
    results = all_results(make(ThroughputRegressionChecker), contexts(scaling, before, ticks))
    assert all(r.healthy for r in results), [r.reason for r in results if not r.healthy]
    skipped = [r for r in results if "lost from outside" in r.reason]
    assert skipped and all(r.pending for r in skipped) and KILLED in skipped[0].reason
    assert len(skipped) >= 5  # from the loss until a window starts after the replacement
    assert "lost from outside" not in results[-1].reason  # judged again once the loss left the window


def test_the_same_dip_without_a_loss_is_a_regression() -> None:
    # The control: the dip and the backlog alone (no executor lost) fail the scale-up.
    sim, history = warm_sim(executors=2)
    scale_up(sim, 2)
    ticks = [sim.tick(rate=1000.0) for _ in range(3)]
    ticks += [sim.tick(rate=400.0, backlog=6000.0 * i) for i in range(1, 4)]
    scaling = record("scale_up", 2, 4, rate_before={QID: 1000.0})
    results = all_results(make(ThroughputRegressionChecker), contexts(scaling, history[-1], iter(ticks)))
    assert not results[-1].healthy and "backlog grew" in results[-1].reason


def _guard_outcomes(losses: int) -> list[str]:
    history, ticks, before = scale_up_with_losses(losses)
    scaling = record("scale_up", 2, 4, rate_before={QID: 1000.0})
    guard = RollbackGuard(CONFIG, build_checkers(CONFIG))
    guard.healthy_target = 2
    guard.watch(scaling, 2)
    outcomes = []
    for context in contexts(scaling, before, ticks, config=CONFIG):
        outcome = guard.observe(CheckContext(**{**context.__dict__, "history": history}), 2, 4)
        outcomes.append(f"{outcome.action}: {outcome.reason}")
        if outcome.action not in ("watching", "none"):
            break
    return outcomes


def test_a_single_loss_with_its_replacement_leaves_the_scale_up_healthy() -> None:
    outcomes = _guard_outcomes(losses=1)
    assert outcomes[-1].startswith("healthy"), outcomes


def test_two_losses_within_the_watch_still_fail_the_scale_up() -> None:
    outcomes = _guard_outcomes(losses=2)
    assert outcomes[-1].startswith("rollback") and "executorFailures" in outcomes[-1], outcomes
