"""Per-batch fixed task cost is told apart from per-row cost, so small batches do not look
expensive (a real effect on Spark: every task pays for its scheduling, Python worker and sink)."""

from __future__ import annotations

import dataclasses

import pytest

from harness import scaling_context
from sparkscale_listener.config.core import AutoscalerConfig
from sparkscale_listener.decisions import ScalingContext
from sparkscale_listener.evaluator import WARMUP_BATCHES, BatchCostModel, BusyTimeEvaluator
from sparkscale_listener.metrics import ClusterMetrics, MetricSample, QueryMetrics

SIZES = [400, 25, 30, 200, 60, 120, 300, 45, 90, 250, 35, 150]


def model_of(sizes: list[int], alpha: float, beta: float, batches: int = 2) -> BatchCostModel:
    model = BatchCostModel()
    for size in sizes:
        model.add(batches, batches * size, batches * (alpha + beta * size))
    return model


def test_fit_recovers_fixed_and_marginal_cost() -> None:
    alpha, beta = model_of(SIZES, alpha=1.8, beta=0.01).fit()
    assert alpha == pytest.approx(1.8, rel=1e-6)
    assert beta == pytest.approx(0.01, rel=1e-6)


def test_fit_refuses_when_batch_sizes_do_not_vary() -> None:
    assert model_of([50] * 10, alpha=1.8, beta=0.01).fit() is None


def test_one_odd_batch_does_not_carry_the_fit() -> None:
    # 59 windows of 100 rows at about 1.0 s and one of 160 rows at 1.02 s: a line through them says
    # 0.00045 s/row, 22x less than the 0.01 s/row these batches cost on average.
    model = BatchCostModel(max_points=60)
    for i in range(59):
        model.add(1, 100, 1.0 + (0.004 if i % 2 else -0.004))
    model.add(1, 160, 1.02)
    assert model.fit() is None  # sizes vary in one point only: the plain average is used
    assert model.average_cost() == pytest.approx(0.01, rel=0.01)


def test_a_batch_whose_task_ends_land_a_tick_late_is_left_out() -> None:
    model = BatchCostModel()
    for size in SIZES:
        model.add(1, size, 1.8 + 0.01 * size)
    # Half of one interval's task time is counted in the next one.
    model.add(1, 100, 0.5 * (1.8 + 1.0))
    model.add(1, 100, 1.5 * (1.8 + 1.0))
    alpha, beta = model.fit()
    assert beta == pytest.approx(0.01, rel=0.02)
    assert alpha == pytest.approx(1.8, rel=0.02)


def test_busy_time_that_does_not_depend_on_rows_gives_no_fit_tick_after_tick() -> None:
    # Each batch costs 1 s whatever its rows (noise only): no line explains it, on every tick.
    model = BatchCostModel()
    fits = []
    for i, size in enumerate(SIZES * 3):
        model.add(1, size, 1.0 + 0.02 * ((i * 7) % 5 - 2))
        fits.append(model.fit())
    assert fits == [None] * len(fits)


def test_the_marginal_cost_is_at_least_a_quarter_of_the_average() -> None:
    # A fixed part 100x the marginal one: the fit is right, but a fit that trusted it fully
    # would size a query from a cost 30x below what its batches cost.
    _, beta = model_of(SIZES, alpha=10.0, beta=0.001).fit()
    average = model_of(SIZES, alpha=10.0, beta=0.001).average_cost()
    assert beta == pytest.approx(0.25 * average)


def _series(rows_per_batch: list[int], alpha: float, beta: float, live: int,
            trigger_ms: float) -> list[MetricSample]:
    samples, batches, rows, busy = [], 0, 0, 0.0
    for i, size in enumerate(rows_per_batch):
        t = 2.0 * i
        if i:
            batches += 2
            rows += 2 * size
            busy += 2 * (alpha + beta * size) * 1000.0
        q = QueryMetrics("q", batches=batches, input_rows=rows, batch_busy_ms=busy, backlog=0.0,
                         last_progress_time=t, last_batch_duration_ms=500.0,
                         busy_ms=busy, trigger_interval_ms=trigger_ms)
        samples.append(MetricSample(t, ClusterMetrics(live, 1, busy_ms=busy), {"q": q}))
    return samples


# History: a backlog drained in big batches of varied size, then a quiet load of 25 rows/s in
# small ones. Per row the quiet batches cost 0.01 + 1.8/25 = 0.082 s: averaged, 2.05 slots.
def one_core_context(now: float) -> ScalingContext:
    return dataclasses.replace(scaling_context(now, target=3, cfg=CONFIG), cores_per_executor=1)


QUIET = [400, 300, 200, 150, 120, 90, 60, 45] + [25] * 12
CONFIG = AutoscalerConfig(max_executors=3, metrics_window_s=10.0)


def test_small_batches_with_fixed_task_cost_do_not_ask_for_executors() -> None:
    # The fixed part of a batch is elastic (paid per executor its tasks land on, spread over
    # more rows as batches grow): sized on the marginal cost, no lower than a quarter of the
    # average.
    history = _series(QUIET, alpha=1.8, beta=0.01, live=3, trigger_ms=1000.0)
    evaluation = BusyTimeEvaluator().evaluate(history, one_core_context(history[-1].time))
    assert evaluation.ready
    assert evaluation.queries["q"].slot_seconds_per_row == pytest.approx(0.25 * 0.082, rel=0.05)
    assert evaluation.utilization < CONFIG.utilization_min  # it may scale down
    assert evaluation.recommended_executors == 1


def test_the_first_batches_of_a_query_are_not_measured() -> None:
    # A cold start: the first two batches pay for Python workers and class loading (50x the cost);
    # then a steady 0.01 s/row. Rows 20/s, 1 slot.
    samples, batches, rows, busy = [], 0, 0, 0.0
    for i in range(12):
        t = 2.0 * i
        if i:
            batches += 1
            rows += 40
            busy += 40 * (0.5 if batches <= WARMUP_BATCHES else 0.01) * 1000.0
        q = QueryMetrics("q", batches=batches, input_rows=rows, batch_busy_ms=busy, backlog=0.0,
                         last_progress_time=t, last_batch_duration_ms=400.0,
                         busy_ms=busy, trigger_interval_ms=2000.0)
        samples.append(MetricSample(t, ClusterMetrics(1, 1, busy_ms=busy), {"q": q}))
    config = AutoscalerConfig(max_executors=4, metrics_window_s=20.0)
    context = scaling_context(samples[-1].time, target=1, live=1, cfg=config)
    evaluation = BusyTimeEvaluator().evaluate(samples, context)
    assert evaluation.queries["q"].slot_seconds_per_row == pytest.approx(0.01)
    assert evaluation.recommended_executors == 1


def test_a_trustworthy_fit_outlives_a_steady_load() -> None:
    # Varied batches once, then a long steady load of same-size batches: the points no longer
    # identify the fit, but the marginal cost of a row has not changed; the fixed part is not
    # charged to the rows again (which made the autoscaler hold, or flap 3 -> 2 -> 3, at a trickle).
    evaluator = BusyTimeEvaluator()
    history = _series(QUIET + [25] * 80, alpha=1.8, beta=0.01, live=3, trigger_ms=1000.0)
    for end in range(20, len(history) + 1, 5):
        window = history[:end]
        evaluation = evaluator.evaluate(window, one_core_context(window[-1].time))
    assert evaluation.queries["q"].slot_seconds_per_row == pytest.approx(0.25 * 0.082, rel=0.05)
    assert BusyTimeEvaluator().evaluate(history, one_core_context(history[-1].time)) \
        .queries["q"].slot_seconds_per_row == pytest.approx(0.082, rel=0.01)  # never fitted: average
