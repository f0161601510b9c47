"""Per-batch fixed task cost is told apart from per-row cost, so small batches do not look
expensive (a real effect on Spark: every task pays for its scheduling, Python worker and sink)."""

from __future__ import annotations

import pytest

from harness import scaling_context
from sparkscale_listener.config import AutoscalerConfig
from sparkscale_listener.evaluation import WARMUP_BATCHES, BatchCostModel, BusyTimeEvaluator
from sparkscale_listener.metrics import ClusterMetrics, MetricSample, QueryMetrics


def test_fit_recovers_fixed_and_marginal_cost() -> None:
    model = BatchCostModel()
    for batches, rows_per_batch in [(2, 400), (2, 400), (2, 25), (2, 30), (2, 200), (1, 60)]:
        rows = batches * rows_per_batch
        model.add(batches, rows, batches * 1.8 + rows * 0.01)
    alpha, beta = model.fit()
    assert alpha == pytest.approx(1.8, rel=1e-6)
    assert beta == pytest.approx(0.01, rel=1e-6)


def test_fit_refuses_when_batch_sizes_do_not_vary() -> None:
    model = BatchCostModel()
    for _ in range(10):
        model.add(2, 50, 2 * 1.8 + 50 * 0.01)
    assert model.fit() is None


def _series(rows_per_batch: list[int], alpha: float, beta: float, live: int) -> list[MetricSample]:
    samples, batches, rows, busy = [], 0, 0, 0.0
    for i, size in enumerate(rows_per_batch):
        t = 2.0 * i
        if i:
            batches += 2
            rows += 2 * size
            busy += 2 * (alpha + beta * size) * 1000.0
        q = QueryMetrics("q", batches=batches, input_rows=rows, batch_busy_ms=busy, backlog=0.0,
                         last_progress_time=t, last_batch_duration_ms=500.0,
                         busy_ms=busy, trigger_interval_ms=1000.0)
        samples.append(MetricSample(t, ClusterMetrics(live, 1, busy_ms=busy), {"q": q}))
    return samples


def test_small_batches_with_fixed_task_cost_do_not_ask_for_executors() -> None:
    # History: a backlog drained in big batches, then a quiet load of 12.5 rows/s in small ones.
    # Per row the quiet batches cost 0.01 + 1.8/25 = 0.082 s: averaged, 1.0 slot of "work"; the
    # marginal cost says 0.125 slot.
    sizes = [400] * 6 + [25] * 12
    config = AutoscalerConfig(max_executors=3, metrics_window_s=10.0)
    history = _series(sizes, alpha=1.8, beta=0.01, live=3)
    context = scaling_context(history[-1].time, target=3, cfg=config)
    evaluation = BusyTimeEvaluator().evaluate(history, context)
    assert evaluation.ready
    q = evaluation.queries["q"]
    assert q.slot_seconds_per_row == pytest.approx(0.01, rel=0.05)
    assert evaluation.utilization < config.utilization_min  # it may scale down
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
