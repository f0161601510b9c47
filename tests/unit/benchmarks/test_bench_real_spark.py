"""The real-Spark benchmark's reading of an event log, on a small hand-written one (no Spark).

``tests/data/bench_real_eventlog.jsonl`` holds, in Spark's own JSON format: one executor before
the measured window, two added 2 s apart (one scale-up) and one removed (a scale-down 4 s later:
a flap), one removed after the window; task ends before and inside the window (one failed, one
killed); four micro-batches whose query progress gives offsets as JSON text and as objects; an
applied ScalingEvent and an AutoscalerEvent. The window is t0 = 1010 s for 20 s, 10 rows/s then
40 rows/s from 10 s.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[3] / "benchmarks"
FIXTURE = Path(__file__).resolve().parents[2] / "data" / "bench_real_eventlog.jsonl"


def _load_bench():
    sys.path.insert(0, str(BENCH))  # bench_real_spark imports figures.py from its own folder
    spec = importlib.util.spec_from_file_location("bench_real_spark", BENCH / "bench_real_spark.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_real_spark"] = module
    spec.loader.exec_module(module)
    return module


bench = _load_bench()
T0 = 1010.0
SCHEDULE = ((0.0, 10.0), (10.0, 40.0))
LOAD = bench.Load("fixture", "fixture", 20.0, SCHEDULE, SCHEDULE, (10.0,))
COST = 0.05  # slot-s per row: 10 rows/s -> 1 executor, 40 rows/s -> 3 at utilization 0.7


@pytest.fixture(scope="module")
def log():
    return bench.parse_event_log(bench.read_event_lines(FIXTURE))


def test_parses_executors_tasks_batches_and_scaling_events(log) -> None:
    assert [(t, d, e) for t, d, e in log.executor_changes] == [
        (1000.5, 1, "1"), (1021.0, 1, "2"), (1023.0, 1, "3"), (1027.0, -1, "3"), (1031.0, -1, "2")]
    assert len(log.tasks) == 4
    assert sum(t.failed for t in log.tasks) == 1 and sum(t.killed for t in log.tasks) == 1
    # Offsets as JSON text and as objects alike; a first batch's null start offset is its end.
    assert [(b.start_offset, b.end_offset, b.latest_offset) for b in log.batches] == [
        (90, 90, 90), (90, 100, 100), (100, 110, 110), (110, 150, 150)]
    assert log.batches[2].start == pytest.approx(1011.0) and log.batches[2].end == pytest.approx(1015.0)
    assert len(log.scaling_events) == 1 and log.app_start == 1000.0


def test_actions_merge_registrations_of_one_request(log) -> None:
    assert bench.merged_actions(log.executor_changes, T0, T0 + 20) == [(11.0, 1, 3), (17.0, 3, 2)]
    # Farther apart than the merge gap, the two registrations are two actions.
    assert bench.merged_actions(log.executor_changes, T0, T0 + 20, merge_s=1.0) == [
        (11.0, 1, 2), (13.0, 2, 3), (17.0, 3, 2)]


def test_lag_is_how_long_the_oldest_row_not_committed_has_waited(log) -> None:
    run = bench.timeline(log, LOAD, T0)
    lag = dict(zip(run.t, run.lag_s, strict=True))
    # t=0: 90 committed (batch 0 ended at -0.5), and 90 had arrived by batch 0's start at -1.
    assert lag[0.0] == pytest.approx(1.0)
    # t=4: 100 committed; the source had 100 at batch 1's start (t=0).
    assert lag[4.0] == pytest.approx(4.0)
    assert lag[6.0] == pytest.approx(1.0)  # batch 3 (latest 150, started t=5) ended at t=6
    # t=12: still 150 committed: the rows after t=5 wait, whatever the rate (10, then 40 rows/s).
    # Rows waiting over the rate in force said (150 + 50 + 80 - 150) / 40 = 3.25 s.
    assert lag[12.0] == pytest.approx(7.0)


def test_figures_from_the_event_log(log) -> None:
    run, figs = bench.run_figures(log, LOAD, T0, COST)
    assert run.t[0] == 0.0 and run.t[-1] == 20.0
    assert figs["executor_s"] == pytest.approx(1 * 11 + 2 * 2 + 3 * 4 + 2 * 3)
    assert figs["oracle_executor_s"] == pytest.approx(1 * 10 + 3 * 10)
    assert figs["actions"] == 2 and figs["scale_ups"] == 1 and figs["scale_downs"] == 1
    assert figs["flaps"] == 1  # up at 11 s, down at 17 s: within scaleDownInterval (30 s)
    assert figs["failed_tasks"] == 1  # the killed task and the one before t0 are not failures
    # No batch after t=6: the lag grows by 1 s each second from 1 s at t=6; over 6 s from t=11.
    assert figs["max_lag_s"] == pytest.approx(15.0)
    assert figs["lag_over_threshold_share"] == pytest.approx(9 / 20)
    assert figs["slot_s_per_row"] == pytest.approx((0.5 + 0.4 + 0.1) / 60)
    assert figs["scaling_events"] == 1


def test_schedules_are_deterministic_and_integrate_exactly() -> None:
    assert bench.rows_between(SCHEDULE, 5.0, 12.0) == pytest.approx(5 * 10 + 2 * 40)
    assert bench.rows_between(SCHEDULE, 12.0, 5.0) == pytest.approx(-130)
    assert bench.rate_at(SCHEDULE, 9.99) == 10 and bench.rate_at(SCHEDULE, 10.0) == 40
    day = bench.day_load(240.0)
    assert day == bench.day_load(240.0)  # the same arrivals for every policy
    clean = [rate for _, rate in day.clean]
    assert min(clean) == pytest.approx(15, abs=0.1) and max(clean) == pytest.approx(120, abs=0.1)
    assert all(r > 0 for _, r in day.schedule) and len(day.schedule) == 120
    step = bench.step_load(150.0)
    assert step.schedule == ((0.0, 30.0), (30.0, 120.0), (90.0, 30.0)) and step.steps == (30.0, 90.0)
    fall = bench.fall_load(240.0)
    assert fall.schedule == ((0.0, 120.0), (72.0, 30.0)) and fall.steps == (72.0,)
    assert bench.rows_between(fall.schedule, 0.0, 240.0) == pytest.approx(72 * 120 + 168 * 30)


def test_oracle_sizes_for_the_utilization_target() -> None:
    assert bench.oracle_executors(40.0, COST) == 3  # 2 busy slots / 0.7
    assert bench.oracle_executors(14.0, COST) == 1  # exactly 1.0 slot: not 2
    assert bench.oracle_executors(1000.0, COST) == bench.MAX_EXECUTORS
    assert bench.oracle_executors(0.0, COST) == 1


def test_markdown_reports_every_policy(log) -> None:
    _, figs = bench.run_figures(log, LOAD, T0, COST)
    result = bench.RunResult("fixture", "sparkscale", T0, 150, 150, True, True, 60.0, figs, {},
                             load_avg="0.50 / 1.20")
    meta = {"quick": True, "date": "today", "wall_min": 1.0, "spark": "4.3.0", "cost_s_per_row": COST,
            "static_executors": 3, "calibration": {"executors": 3, "rate": 90.0}}
    text = bench.markdown([result], [LOAD], meta)
    assert "| 1 | sparkscale | 0.50 / 1.20 | 33 |" in text and "150 / 150, yes" in text
    assert "Median" not in text
    # A second round: each run's row, and the median and range per policy.
    again = bench.RunResult("fixture", "sparkscale", T0, 150, 150, True, True, 60.0,
                            {**figs, "executor_s": 37.0}, {}, run=2, load_avg="0.40 / 0.90")
    text = bench.markdown([result, again], [LOAD], meta)
    assert "| 2 | sparkscale | 0.40 / 0.90 | 37 |" in text
    assert "- sparkscale: executor-s 35 (33-37)" in text
    assert not math.isnan(figs["executor_s_vs_oracle"])


def test_occupancy_policy_is_sparkscale_with_the_rule_as_its_evaluator() -> None:
    """The occupancy run's configuration is sparkscale's plus the evaluator, and it loads as the
    driver loads it (``alternatives`` importable from the benchmark's folder)."""
    from sparkscale_listener.config.core import AutoscalerConfig
    from sparkscale_listener.config.plugins import PluginContext, construct, load_class
    from sparkscale_listener.evaluator import MetricEvaluator

    rule, plain = bench.policy_conf(bench.OCCUPANCY, 5), bench.policy_conf("sparkscale", 5)
    assert {k: v for k, v in rule.items() if k not in bench.OCCUPANCY_CONF} == plain
    # A load that starts sized starts every dynamic policy on the same executors.
    assert plain["spark.sparkscale.initialExecutors"] == "1"
    assert bench.policy_conf("sparkscale", 5, 4)["spark.sparkscale.initialExecutors"] == "4"
    assert bench.policy_conf("dynamic-allocation", 5, 4)["spark.dynamicAllocation.initialExecutors"] == "4"
    cfg = AutoscalerConfig.from_spark_conf(rule)
    cls = load_class("evaluator", cfg.evaluator_class, MetricEvaluator, ("evaluate",))
    evaluator = construct(cls, PluginContext(cfg, cfg.module("evaluator.")))
    assert type(evaluator).__name__ == "OccupancyEvaluator" and evaluator.interval_s == 6.0


def test_sparkscale_at_another_target_is_sparkscale_with_that_target_and_reported_beside_it(log) -> None:
    """``sparkscale-u0.8``: sparkscale's configuration with utilization.target 0.8 (scale-ups still
    above the default utilization.max), valid as the driver reads it; its ratios to the other
    policies are in the report like sparkscale's; a target out of (0, 1] is refused."""
    from sparkscale_listener.config.core import AutoscalerConfig

    conf = bench.policy_conf("sparkscale-u0.8", 5)
    plain = bench.policy_conf("sparkscale", 5)
    assert {k: v for k, v in conf.items() if not k.startswith("spark.sparkscale.utilization.")} == plain
    cfg = AutoscalerConfig.from_spark_conf(conf)
    assert (cfg.utilization_target, cfg.utilization_max) == (0.8, AutoscalerConfig().utilization_max)
    assert bench.runs_sparkscale("sparkscale-u0.8") and not bench.runs_sparkscale("dynamic-allocation")
    with pytest.raises(ValueError, match="in \\(0, 1\\]"):
        bench.other_target("sparkscale-u1.5")
    _, figs = bench.run_figures(log, LOAD, T0, COST)
    meta = {"quick": True, "date": "today", "wall_min": 1.0, "spark": "4.3.0", "cost_s_per_row": COST,
            "static_executors": 3, "calibration": {"executors": 3, "rate": 90.0}}
    runs = [bench.RunResult("fixture", policy, T0, 150, 150, True, True, 60.0,
                            {**figs, "executor_s": seconds}, {})
            for policy, seconds in (("sparkscale-u0.8", 30.0), ("dynamic-allocation", 40.0))]
    assert "- sparkscale-u0.8 / dynamic-allocation executor-seconds, medians: **0.75x**" in bench.markdown(
        runs, [LOAD], meta)


def test_the_reports_command_line_keeps_the_options_that_change_what_ran() -> None:
    argv = ["--cost", "0.0236", "--repeat", "2", "--out", "somewhere", "--loads", "fall", "--keep",
            "--out=elsewhere", "--quick"]
    assert bench.report_options(argv) == "--cost 0.0236 --repeat 2 --loads fall"
    assert bench.report_options([]) == ""
