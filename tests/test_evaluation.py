"""BusyTimeEvaluator on hand-built sample series (no Spark, no simulator)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from harness import CFG, CORES, SteadyQuery, scaling_context, series
from sparkscale_listener.config.core import AutoscalerConfig
from sparkscale_listener.evaluator import BusyTimeEvaluator, MetricEvaluator
from sparkscale_listener.metrics import ClusterMetrics, ExecutorInfo, MetricSample, QueryMetrics
from sparkscale_listener.policy import ScalingPolicy


def evaluate(queries: list[SteadyQuery], t1: float = 60.0, **kw: object):
    history = series(queries, t1=t1)
    return BusyTimeEvaluator().evaluate(history, scaling_context(t1, **kw))  # type: ignore[arg-type]


def test_default_evaluator_implements_the_interface() -> None:
    assert isinstance(BusyTimeEvaluator(), MetricEvaluator)
    with pytest.raises(TypeError):
        MetricEvaluator()  # type: ignore[abstract]


def test_rates_come_from_cumulative_counters_over_the_last_window() -> None:
    # 100 rows/s until t=60, then 300 rows/s: the window at t=120 sees only the new rate.
    q = SteadyQuery("a", rate=lambda s: 100.0 if s < 60 else 300.0, cost=0.02)
    history = series([q], t1=120)
    ev = BusyTimeEvaluator().evaluate(history, scaling_context(120))
    assert ev.ready
    qe = ev.queries["a"]
    assert qe.input_rate == pytest.approx(300.0, rel=1e-3)
    assert qe.slot_seconds_per_row == pytest.approx(0.02)
    assert qe.true_processing_rate_per_slot == pytest.approx(50.0)
    # work = 300 x 0.02 = 6 slots; at target 0.7 -> 8.57 slots -> 3 executors of 4 cores
    assert qe.required_slots == pytest.approx(6.0 / 0.7, rel=1e-3)
    assert ev.utilization == pytest.approx(6.0 / 16, rel=1e-3)
    assert ev.recommended_executors == 3


def test_rates_use_the_time_the_completed_batches_cover() -> None:
    # Batches of 25 s: in the 0..60 s window two complete (at 25 and 50 s) with 50 s of arrivals.
    # Dividing by the 60 s between samples would say 833 rows/s.
    q = SteadyQuery("a", rate=1000.0, cost=0.01, batch_s=25.0, whole_batches=True)
    qe = evaluate([q]).queries["a"]
    assert qe.input_rate == pytest.approx(1000.0)


def test_not_ready_before_a_full_window() -> None:
    history = series([SteadyQuery("a", rate=100.0)], t1=50)
    ev = BusyTimeEvaluator().evaluate(history, scaling_context(50, target=5))
    assert not ev.ready
    assert ev.recommended_executors == 5
    assert "50s of the 60s window" in ev.reason


def test_not_ready_after_a_change_until_a_window_after_window_start() -> None:
    # Before t=100 the query ran at a very different rate: those samples must be ignored.
    q = SteadyQuery("a", rate=lambda s: 1000.0 if s < 100 else 100.0, cost=0.01)
    history = series([q], t1=150)
    evaluator = BusyTimeEvaluator()
    early = evaluator.evaluate(history, scaling_context(150, window_start=100))
    assert not early.ready and "collecting metrics" in early.reason
    history = series([q], t1=160)
    ev = evaluator.evaluate(history, scaling_context(160, window_start=100))
    assert ev.ready
    assert ev.queries["a"].input_rate == pytest.approx(100.0, rel=1e-3)
    waiting = evaluator.evaluate(history, scaling_context(160, window_start=math.inf))
    assert not waiting.ready and "waiting for requested executors" in waiting.reason


def test_catch_up_rate_and_backlog_mode() -> None:
    # A steady 60 000-row backlog at 100 rows/s (batches of 1 s: 100 rows are in flight).
    q = SteadyQuery("a", rate=100.0, cost=0.05, backlog=60_000.0)
    ev = evaluate([q])
    qe = ev.queries["a"]
    assert qe.backlog_growth_rate == pytest.approx(0.0)
    assert qe.target_rate == pytest.approx(100.0)
    assert qe.catch_up_rate == pytest.approx((60_000 - 100) / 300.0)
    # The arrival rate at the target utilization; the catch-up rate at full speed (Flink's formula).
    assert qe.required_slots == pytest.approx(100.0 * 0.05 / 0.7 + qe.catch_up_rate * 0.05)
    assert qe.backlog_mode and ev.backlog_mode  # 599 s of input behind > 60 s
    assert "query a dominates (backlog)" in ev.reason


def test_provisioning_time_adds_capacity() -> None:
    q = SteadyQuery("a", rate=100.0, cost=0.05)
    without = evaluate([q]).queries["a"].required_slots
    with_prov = evaluate([q], provisioning=30.0).queries["a"].required_slots
    # target x provisioning / catchUpDuration more rows/s (10 % with 30 s of 300 s), at full speed
    assert without == pytest.approx(100.0 * 0.05 / 0.7)
    assert with_prov == pytest.approx(without + 0.1 * 100.0 * 0.05)


def test_backlog_growth_adds_to_the_target_rate() -> None:
    q = SteadyQuery("a", rate=100.0, cost=0.01, backlog=lambda t: 50.0 * t)
    qe = evaluate([q]).queries["a"]
    assert qe.backlog_growth_rate == pytest.approx(50.0)
    assert qe.target_rate == pytest.approx(150.0)


def test_parallelism_cap_is_reported() -> None:
    # 40 slots of work, but the widest stage has 8 tasks.
    q = SteadyQuery("a", rate=4000.0, cost=0.01, cap=8, name="orders")
    ev = evaluate([q])
    qe = ev.queries["a"]
    assert qe.capped and qe.parallelism_cap == 8
    assert qe.required_slots == 8.0
    assert ev.recommended_executors == 2
    assert "capped at 8" in qe.note and "capped at 8" in ev.reason


def test_idle_query_contributes_nothing() -> None:
    busy = SteadyQuery("busy", rate=500.0, cost=0.01)
    idle = SteadyQuery("idle", rate=0.0, cost=0.5, backlog=0.0)
    alone = evaluate([busy])
    both = evaluate([busy, idle])
    assert both.queries["idle"].required_slots == 0.0
    assert "idle" in both.queries["idle"].note
    assert both.required_slots == pytest.approx(alone.required_slots)


def test_two_queries_are_summed() -> None:
    a = SteadyQuery("a", rate=1000.0, cost=0.01)  # 10 slots of work
    b = SteadyQuery("b", rate=200.0, cost=0.04)  # 8 slots of work
    ev = evaluate([a, b], target=5)
    assert ev.required_slots == pytest.approx(18.0 / 0.7)
    assert ev.utilization == pytest.approx(18.0 / 20)
    assert ev.recommended_executors == math.ceil(18.0 / 0.7 / CORES)  # 7
    assert "query a dominates" in ev.reason


def test_driver_overhead_does_not_inflate_demand() -> None:
    lean = SteadyQuery("a", rate=1000.0, cost=0.01, batch_s=2.0)
    # Same rows and task time; each batch also spends 3 s on the driver (planning, commit).
    heavy = SteadyQuery("a", rate=1000.0, cost=0.01, batch_s=2.0, overhead_s=3.0)
    assert evaluate([heavy]).required_slots == pytest.approx(evaluate([lean]).required_slots)


def test_healthy_micro_batch_query_is_never_a_reason_to_scale_up() -> None:
    # Trigger 10 s, batches take 7 s; one trigger of arrivals waits in the source between batches.
    # Naively (backlog counted for catch-up, 5 s provisioning) this looks like utilization > 0.9.
    healthy = SteadyQuery("a", rate=1000.0, cost=0.0145, batch_s=7.0, trigger_s=10.0, backlog=10_000.0)
    ev = evaluate([healthy], provisioning=5.0)
    qe = ev.queries["a"]
    assert "healthy" in qe.note
    assert qe.catch_up_rate == 0.0 and not qe.backlog_mode
    assert ev.recommended_executors <= 4
    decision = ScalingPolicy().decide(ev, scaling_context(60, provisioning=5.0))
    assert decision.action != "scale_up"
    # The same query with batches overrunning the trigger is a reason to scale up.
    late = SteadyQuery("a", rate=1000.0, cost=0.0145, batch_s=12.0, trigger_s=10.0,
             backlog=lambda t: 10_000.0 + 20.0 * t)
    ev_late = evaluate([late], provisioning=5.0)
    assert "healthy" not in ev_late.queries["a"].note
    assert ScalingPolicy().decide(ev_late, scaling_context(60, provisioning=5.0)).action == "scale_up"


def test_backlog_from_the_external_metrics_hook_or_reported_missing() -> None:
    q = SteadyQuery("a", rate=100.0, cost=0.01, name="clicks")
    ev = evaluate([q])
    assert ev.queries["a"].backlog is None
    assert "no backlog reported" in ev.queries["a"].note
    assert ev.queries["a"].catch_up_rate == 0.0
    history = series([q], external=lambda t: {"backlog.clicks": 30_000.0})
    ev_ext = BusyTimeEvaluator().evaluate(history, scaling_context(60))
    qe = ev_ext.queries["a"]
    assert qe.backlog == 30_000.0
    assert "backlog.clicks" in qe.note
    assert qe.catch_up_rate == pytest.approx((30_000 - 100) / 300.0)


def test_backlog_without_any_cost_estimate_holds_its_share() -> None:
    stuck = SteadyQuery("stuck", rate=0.0, cost=0.0, backlog=50_000.0)  # no completed batch, no busy time
    ev = evaluate([stuck], target=3)
    qe = ev.queries["stuck"]
    assert ev.ready
    assert qe.slot_seconds_per_row is None
    assert "not ready" in qe.note
    assert qe.required_slots == pytest.approx(12.0)  # all of the 3 x 4 current slots
    assert ev.recommended_executors == 3
    assert ScalingPolicy().decide(ev, scaling_context(60, target=3)).action == "none"


def test_cost_is_remembered_for_a_window_without_rows() -> None:
    evaluator = BusyTimeEvaluator()
    q = SteadyQuery("a", rate=100.0, cost=0.03)
    evaluator.evaluate(series([q]), scaling_context(60))
    # Now nothing completes (stalled) but 9 000 rows wait: catch-up needs the remembered cost.
    stalled = [MetricSample(t, ClusterMetrics(4, CORES), {"a": QueryMetrics(
        "a", batches=60, input_rows=6000, batch_busy_ms=6000 * 30.0, backlog=9000.0,
        last_progress_time=60.0, last_batch_duration_ms=1000.0)}) for t in (60.0, 90.0, 120.0)]
    qe = evaluator.evaluate(stalled, scaling_context(120, window_start=60)).queries["a"]
    assert qe.slot_seconds_per_row == pytest.approx(0.03)
    assert qe.required_slots == pytest.approx(9000 / 300 * 0.03)  # catch-up at full speed


def test_saturated_query_without_backlog_uses_the_arrival_rate_gauge() -> None:
    # 16 slots fully busy at 1600 rows/s x 0.01; the last batch read 3000 rows/s of arrivals.
    q = SteadyQuery("a", rate=1600.0, cost=0.01, gauge_rate=3000.0)
    qe = evaluate([q]).queries["a"]
    assert qe.target_rate == pytest.approx(3000.0)
    assert "saturated" in qe.note
    # Not saturated: the gauge (one batch, noisy) is not used.
    calm = SteadyQuery("a", rate=800.0, cost=0.01, gauge_rate=1000.0)
    assert evaluate([calm]).queries["a"].target_rate == pytest.approx(800.0)


def test_recommendation_is_clamped_and_the_reason_says_so() -> None:
    big = SteadyQuery("a", rate=10_000.0, cost=0.01)  # 100 slots of work
    ev = evaluate([big])
    assert ev.recommended_executors == CFG.max_executors
    assert "clamped to maxExecutors=20" in ev.reason
    tiny = SteadyQuery("a", rate=1.0, cost=0.001)
    cfg = AutoscalerConfig(min_executors=2, max_executors=20)
    assert evaluate([tiny], cfg=cfg).recommended_executors == 2


def test_reason_names_the_dominant_query_signal_and_numbers() -> None:
    a = SteadyQuery("a", rate=100.0, cost=0.01, name="small")
    b = SteadyQuery("b", rate=100.0, cost=0.05, backlog=90_000.0, name="orders")
    ev = evaluate([a, b])
    assert "query 'orders' dominates (backlog)" in ev.reason
    assert "rows/s" in ev.reason and "slots" in ev.reason


def test_a_full_pool_saturates_every_query() -> None:
    # Two queries share 16 slots that are all busy: "a" gets 6 slots' worth although its last
    # batch saw 1000 rows/s arrive; "b" takes the rest.
    a = SteadyQuery("a", rate=600.0, cost=0.01, gauge_rate=1000.0)
    b = SteadyQuery("b", rate=250.0, cost=0.04, gauge_rate=250.0)
    calm = BusyTimeEvaluator().evaluate(series([a, b]), scaling_context(60))
    assert calm.queries["a"].target_rate == pytest.approx(600.0)  # a alone is not saturated
    full = BusyTimeEvaluator().evaluate(series([a, b], pool_busy=1.0), scaling_context(60))
    assert full.queries["a"].target_rate == pytest.approx(1000.0)
    assert "saturated" in full.queries["a"].note


def test_spark_task_cpus_divides_the_slots_of_an_executor() -> None:
    # 400 rows/s x 0.02 = 8 slots of work = 11.4 at target 0.7. With spark.task.cpus=2 an
    # executor of 4 cores runs 2 tasks at once: its 4 executors are full and it needs 6, not 3.
    q = SteadyQuery("a", rate=400.0, cost=0.02)
    history = series([q])
    one = BusyTimeEvaluator().evaluate(history, scaling_context(60))
    two = BusyTimeEvaluator().evaluate(history, replace(scaling_context(60), task_cpus=2))
    assert (one.recommended_executors, one.utilization) == (3, pytest.approx(8.0 / 16))
    assert (two.recommended_executors, two.utilization) == (6, pytest.approx(8.0 / 8))
    assert "spark.task.cpus=2" in two.reason
    decision = ScalingPolicy().decide(two, replace(scaling_context(60), task_cpus=2))
    assert (decision.action, decision.to_executors) == ("scale_up", 6)


def test_executors_of_unequal_size_count_their_own_slots() -> None:
    # 4 live executors of 8, 4, 2 and 2 cores (16 slots as 4 x 4 would say, but sized apart).
    cluster = ClusterMetrics(4, CORES, executors=tuple(
        ExecutorInfo(str(i), cores=c) for i, c in enumerate([8, 4, 2, 2])))
    assert cluster.live_slots(task_cpus=1) == 16 and cluster.live_slots(task_cpus=2) == 8
    assert cluster.live_slots(task_cpus=4) == 2 + 1  # a 2-core executor runs no 4-cpu task
    q = SteadyQuery("a", rate=300.0, cost=0.02)
    ev = BusyTimeEvaluator().evaluate(series([q]), replace(scaling_context(60), live_slots=10))
    assert ev.utilization == pytest.approx(6.0 / 10)
    assert "executors of unequal size" in ev.reason
