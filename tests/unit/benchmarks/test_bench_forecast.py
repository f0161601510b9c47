"""benchmarks/bench_forecast.py: its loads have the shapes it says, and its targets read the figures
right (met, missed, shadow against off). No run is timed here: the benchmark is run on purpose."""

from __future__ import annotations

import math
from dataclasses import replace

from benchmarks.bench_forecast import PERIOD_S, SHIFT, Result, day_rate, loads, random_steps, targets


def test_the_day_recurs_and_the_shifted_day_is_the_same_a_fraction_of_the_period_later() -> None:
    for t in (0.0, 0.27 * PERIOD_S, 0.45 * PERIOD_S, 0.8 * PERIOD_S):
        assert day_rate(t) == day_rate(t + 3 * PERIOD_S)
        shifted_from = 2 * PERIOD_S
        later = shifted_from + t + SHIFT * PERIOD_S
        assert math.isclose(day_rate(later, shifted_from), day_rate(t))
    assert day_rate(0.3 * PERIOD_S) == 10 * day_rate(0.2 * PERIOD_S), "a x10 morning ramp"


def test_the_load_without_a_pattern_holds_random_levels() -> None:
    load = random_steps(3600.0, seed=1)
    levels = {round(load(t)) for t in range(0, 3600, 30)}
    assert len(levels) > 10 and all(500 <= x <= 7000 for x in levels)
    assert load(100.0) == random_steps(3600.0, seed=1)(100.0), "deterministic"


def _result(load: str, config: str, lag: float, cost: float, executor_s: float = 100.0) -> Result:
    chosen = next(ld for ld in loads(3) if ld.name == load)
    figures = {"lag_over_threshold_share": lag, "executor_s_vs_oracle": cost, "executor_s": executor_s,
               "max_lag_s": 5.0}
    return Result(chosen, config, figures, 0, 0.0)


def test_the_targets_are_met_or_missed_by_the_figures() -> None:
    met = targets([_result("day", "on", 0.005, 1.08), _result("no-pattern", "off", 0.02, 1.1),
                   _result("no-pattern", "on", 0.02, 1.1)])
    assert met[0].endswith("**met**") and met[1].endswith("**met**")
    missed = targets([_result("day", "on", 0.02, 1.08), _result("no-pattern", "off", 0.02, 1.1),
                      _result("no-pattern", "on", 0.02, 1.1, executor_s=120.0)])
    assert missed[0].endswith("**missed**") and missed[1].endswith("**missed**")


def test_shadow_is_told_identical_to_off_only_when_every_figure_is() -> None:
    off = _result("day", "off", 0.05, 1.04)
    assert targets([off, replace(off, config="shadow")]) == ["- day: shadow identical to off"]
    moved = replace(off, config="shadow", figures={**off.figures, "executor_s": 101.0})
    assert targets([off, moved]) == ["- day: shadow DIFFERS from off"]
