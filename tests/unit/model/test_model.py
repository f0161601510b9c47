"""The micro-batch performance model: fitted from batches, it predicts batch time, throughput and
drain time at any size (sparkscale_listener.model)."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import numpy as np
import pytest

from sparkscale_listener.metrics import BatchRecord
from sparkscale_listener.model import (
    WARMUP_BATCHES,
    BatchCost,
    BatchCostLearner,
    Concurrent,
    fit_all,
    ideal_task_phase,
    waves,
)

CORES = 2


def batch(i: int, rows: int, executors: int, *, driver: float = 0.5, fixed: float = 1.6,
          per_executor: float = 0.1, per_row: float = 0.002, tasks: int = 32, efficiency: float = 1.0,
          noise: float = 0.0, rng: random.Random | None = None, fresh: bool = False,
          concurrent: Concurrent | None = None) -> BatchRecord:
    """A batch as the collector reports it, made from known costs."""
    used = min(executors, math.ceil(tasks / CORES))
    task_s = fixed + per_executor * used + per_row * rows
    if rng is not None:
        task_s *= rng.uniform(1 - noise, 1 + noise)
    wall = efficiency * ideal_task_phase(task_s, tasks, tasks, executors * CORES, concurrent or Concurrent())
    return BatchRecord(batch_id=WARMUP_BATCHES + i, start=10.0 * i, duration_s=driver + wall, rows=rows,
                       since_previous_s=10.0, task_s=task_s, tasks=tasks, task_wall_s=wall,
                       executors_used=used, executors=executors, fresh_executors=fresh,
                       concurrent_task_s=(concurrent or Concurrent()).task_s,
                       concurrent_tasks=(concurrent or Concurrent()).tasks)


def learner_of(batches: list[BatchRecord]) -> BatchCostLearner:
    """A learner that saw the query's warm-up batches, then these."""
    learner = BatchCostLearner()
    learner.add([batch(i - WARMUP_BATCHES, 1, 1, efficiency=9.0) for i in range(WARMUP_BATCHES)])
    learner.add(batches)
    return learner


def test_waves_count_rounds_of_tasks_per_stage() -> None:
    assert waves(32, 32, 8) == 4 and waves(32, 32, 10) == 4  # 10 slots finish 32 tasks no sooner
    assert waves(32, 32, 32) == 1 and waves(32, 32, 64) == 1  # more slots than tasks do nothing
    assert waves(12, 8, 4) == pytest.approx(1.5 * 2)  # 1.5 stages of 8 tasks, 2 rounds each


def test_the_fit_recovers_driver_fixed_per_executor_and_per_row_costs() -> None:
    rng = random.Random(1)
    pts = [batch(i, rows=rng.randint(5_000, 40_000), executors=rng.choice([2, 4, 8])) for i in range(40)]
    cost = learner_of(pts).fit(CORES)
    assert cost is not None and cost.row_cost_trusted
    assert cost.driver_s == pytest.approx(0.5, abs=1e-6)
    assert cost.fixed_task_s == pytest.approx(1.6, abs=1e-6)
    assert cost.per_executor_s == pytest.approx(0.1, abs=1e-6)
    assert cost.per_row_s == pytest.approx(0.002, rel=1e-6)
    assert cost.efficiency == pytest.approx(1.0) and cost.executor_counts == (2, 4, 8)
    assert cost.error < 1e-6
    # Predictions at a size it never ran: 20000 rows on 16 executors (32 slots: one wave).
    assert cost.batch_time(20_000, 16) == pytest.approx(0.5 + (1.6 + 1.6 + 40.0) / 32)


def test_nothing_is_fitted_before_three_warm_batches_or_two_that_agree() -> None:
    learner = BatchCostLearner()
    learner.add([batch(i - WARMUP_BATCHES, 10_000, 4) for i in range(WARMUP_BATCHES)])  # warm-up
    # Still getting cheaper: 6.0 then 4.6 s of task time for the same rows (23 % apart).
    learner.add([batch(0, 10_000, 4, per_row=0.0004), batch(1, 10_000, 4, per_row=0.00026)])
    assert learner.fit(CORES) is None
    learner.add([batch(2, 10_000, 4)])
    assert learner.fit(CORES) is not None
    # Two warm batches that agree within 20 % on a row's task time are enough.
    agreeing = BatchCostLearner()
    agreeing.add([batch(i - WARMUP_BATCHES, 10_000, 4) for i in range(WARMUP_BATCHES)])
    agreeing.add([batch(0, 10_000, 4)])
    assert agreeing.fit(CORES) is None
    agreeing.add([batch(1, 12_000, 4)])
    assert agreeing.fit(CORES) is not None


def test_warm_up_batches_and_batches_on_fresh_executors_are_not_measured() -> None:
    pts = [batch(i, 10_000 + 100 * i, 4) for i in range(10)]
    slow_first = batch(10, 10_000, 8, fresh=True, efficiency=3.0)  # new executors' first batch
    learner = BatchCostLearner()
    learner.add([batch(-2, 10_000, 4, efficiency=5.0), batch(-1, 10_000, 4, efficiency=5.0)])  # warm-up
    learner.add([*pts, slow_first])
    assert len(learner.batches) == 10
    cost = learner.fit(CORES)
    assert cost is not None and cost.efficiency == pytest.approx(1.0)


def test_a_batch_first_seen_before_its_task_ends_is_measured_when_they_come() -> None:
    # Task ends reach the listener after the batch's progress: seen first with no task time (not
    # warm), each batch was then marked seen and never measured, so the query stayed "learning"
    # for good when the listener lagged every time.
    learner = BatchCostLearner()
    full = [BatchRecord(batch_id=i, start=10.0 * i, duration_s=2.0, rows=1000 * (1 + i % 3),
                        since_previous_s=10.0, task_s=1.0 * (1 + i % 3), tasks=4, executors=1)
            for i in range(12)]
    for n in range(1, len(full) + 1):
        learner.add([*full[:n - 1], replace(full[n - 1], task_s=None, tasks=None)])
        learner.add(full[:n])
    assert [b.batch_id for b in learner.batches] == list(range(2, 12))  # all but the warm-up
    assert learner.fit(4) is not None


def test_a_batch_overlapping_a_change_of_executors_is_not_measured() -> None:
    pts = [batch(i, 10_000, 4) for i in range(-WARMUP_BATCHES, 6)]
    learner = BatchCostLearner()
    learner.add(pts, exclude=(pts[5].start + 1.0, pts[6].start + 1.0))
    assert [b.batch_id for b in learner.batches] == [b.batch_id for b in pts[WARMUP_BATCHES:]
                                                     if b not in (pts[5], pts[6])]


def test_steady_load_keeps_the_last_trusted_split_of_fixed_and_per_row_cost() -> None:
    rng = random.Random(2)
    learner = BatchCostLearner(max_batches=30)
    learner.add([batch(i, rng.randint(5_000, 40_000), 4) for i in range(30)])
    first = learner.fit(CORES)
    assert first is not None and first.row_cost_trusted
    # Then 30 batches of the same size: rows do not vary, the per-row cost cannot be told from the
    # fixed part; the earlier split holds instead of charging every second to the rows.
    learner.add([batch(30 + i, 20_000, 4, noise=0.02, rng=rng) for i in range(30)])
    steady = learner.fit(CORES)
    assert steady is not None and not steady.row_cost_trusted
    assert steady.per_row_s == pytest.approx(0.002, rel=0.05)
    assert steady.fixed_task_s == pytest.approx(1.6 + 0.1 * 4, rel=0.5)


def test_before_any_trusted_split_every_second_of_task_time_is_charged_to_the_rows() -> None:
    cost = learner_of([batch(i, 20_000, 4) for i in range(10)]).fit(CORES)
    assert cost is not None and not cost.row_cost_trusted
    assert cost.fixed_task_s == 0.0 and cost.per_row_s == pytest.approx((2.0 + 40.0) / 20_000)


def test_a_batch_of_far_more_rows_than_those_fitted_is_fitted_at_once() -> None:
    # Ten batches of one size tell no split; the first batch of a step (3x the rows) does, and
    # the step is sized on it, not on the cached fit (the next refit was 4 batches away).
    learner = learner_of([batch(i, 20_000, 4) for i in range(10)])
    assert learner.fit(CORES) is not None
    learner.add([batch(10, 60_000, 4)])
    cost = learner.fit(CORES)
    assert cost is not None and cost.row_cost_trusted
    assert cost.per_row_s == pytest.approx(0.002, rel=0.01)
    assert cost.fixed_task_s + cost.per_executor_s * 4 == pytest.approx(1.6 + 0.1 * 4, rel=0.01)


def test_outliers_do_not_carry_the_fit() -> None:
    rng = random.Random(3)
    pts = [batch(i, rng.randint(5_000, 40_000), 4) for i in range(40)]
    # Two batches whose task ends landed late: half their task time counted in the next one.
    pts[10] = BatchRecord(**{**pts[10].__dict__, "task_s": pts[10].task_s / 2})  # type: ignore[operator]
    pts[11] = BatchRecord(**{**pts[11].__dict__, "task_s": pts[11].task_s * 1.5})  # type: ignore[operator]
    cost = learner_of(pts).fit(CORES)
    assert cost is not None and cost.per_row_s == pytest.approx(0.002, rel=0.01)


def test_efficiency_is_learned_per_size_and_the_nearest_size_stands_for_unseen_ones() -> None:
    # Stragglers: on 8 executors the task phase takes 1.5x the even split; on 2 it is even.
    pts = [batch(i, 10_000 + 500 * i, 2 if i % 2 else 8, efficiency=1.0 if i % 2 else 1.5)
           for i in range(20)]
    cost = learner_of(pts).fit(CORES)
    assert cost is not None
    assert cost.efficiency_at(2) == pytest.approx(1.0) and cost.efficiency_at(8) == pytest.approx(1.5)
    assert cost.efficiency_at(7) == pytest.approx(1.5) and cost.efficiency_at(3) == pytest.approx(1.0)


def test_below_the_fewest_executors_seen_a_task_phase_is_as_long_as_there_or_its_ideal() -> None:
    # A file stage of one task beside four shuffle tasks on four 1-core executors: the task phase
    # is the one long task, 2.3x the even split. On fewer executors the short tasks queue behind
    # the long one: the phase is as long as on 4 or the ideal on the slots there, the longer.
    cost = BatchCost(0.3, 0.0, 0.0, 0.0122, 5, 4, 1, 2.3, 0.1, 10, False, (4,), {4: 2.3})
    ideal = {k: waves(5, 4, k) for k in (1, 2, 3, 4)}  # 5, 2.5, 2.5, 1.25 rounds of 1/5 of the work
    assert cost.efficiency_at(4) == pytest.approx(2.3) and cost.efficiency_at(6) == pytest.approx(2.3)
    for k in (1, 2, 3):
        assert cost.efficiency_at(k) == pytest.approx(max(1.0, 2.3 * ideal[4] / ideal[k]))
    assert cost.efficiency_at(1) == 1.0  # all of it on one slot: no faster than even
    assert cost.task_phase(200, 2) == pytest.approx(cost.task_phase(200, 4))  # the long task bounds both
    # An efficiency below 1 (faster than the even split) is not carried below either.
    fast = replace(cost, efficiency=0.8, efficiency_by_executors={4: 0.8})
    assert fast.efficiency_at(1) == pytest.approx(0.8)


def test_every_size_at_once_takes_the_nearest_size_seen_the_smaller_of_two_as_near() -> None:
    # The array form (every size the evaluator scans) against the one-size form, on tables of
    # sizes seen with ties at every midpoint; and a scan served from a longer one kept before.
    rng = random.Random(7)
    for _ in range(300):
        seen = rng.sample(range(1, 400), rng.randint(1, 6))
        cost = BatchCost(0.1, 0.1, 0.01, 0.002, 32, 32, CORES, 1.2, 0.1, 20, True, tuple(seen),
                         {k: rng.random() for k in seen})
        count = rng.randint(1, 450)
        sizes = np.arange(1.0, count + 1)
        expected = [cost.efficiency_at(int(k)) for k in sizes]
        assert cost.efficiency_at(sizes).tolist() == pytest.approx(expected, rel=1e-12)
        assert cost.efficiency_upto(count).tolist() == pytest.approx(expected, rel=1e-12)
        shorter = rng.randint(1, count)
        assert cost.efficiency_upto(shorter).tolist() == pytest.approx(expected[:shorter], rel=1e-12)


def test_batches_of_other_queries_running_alongside_share_the_slots() -> None:
    # Two queries' batches start together on 16 slots: each batch's 16 tasks alone would take one
    # wave; together their tasks take as long as all of their task time over the 16 slots.
    alongside = Concurrent(task_s=32.0, tasks=16)
    alone = ideal_task_phase(32.0, 16, 16, 16)
    shared = ideal_task_phase(32.0, 16, 16, 16, alongside)
    assert (alone, shared) == (2.0, 4.0)
    # The model learns the real efficiency when the batches say who ran alongside.
    pts = [batch(i, 10_000 + 700 * i, 8, tasks=16, concurrent=Concurrent(30.0, 16)) for i in range(12)]
    cost = learner_of(pts).fit(CORES)
    assert cost is not None and cost.efficiency == pytest.approx(1.0)


def test_predictions_throughput_and_drain_time() -> None:
    cost = BatchCost(driver_s=0.5, fixed_task_s=1.6, per_executor_s=0.0, per_row_s=0.002, tasks=32,
                     widest=32, cores=2, efficiency=1.0, error=0.0, batches=20, row_cost_trusted=True)
    # 8 executors = 16 slots: 2 waves of 32 tasks; each row adds 2 x 0.002 / 32 s.
    assert cost.row_seconds(8) == pytest.approx(2 * 0.002 / 32)
    assert cost.capacity(8) == pytest.approx(8000.0)
    # With a 10 s trigger at 2000 rows/s: 20000 rows, 0.5 + 2 x 41.6 / 32 s.
    assert cost.steady_batch_time(2000.0, 8, 10.0) == pytest.approx(0.5 + 2 * 41.6 / 32)
    # Without a trigger the batch absorbs what arrives while it runs: d = fixed / (1 - busy).
    fixed = cost.batch_time(0.0, 8)
    assert cost.steady_batch_time(4000.0, 8, None) == pytest.approx(fixed / (1 - 0.5))
    assert math.isinf(cost.steady_batch_time(9000.0, 8, None))  # beyond its capacity
    # A backlog of 600000 rows drains at what the capacity leaves over the arrivals.
    assert cost.drain_seconds(600_000, 2000.0, 8, None, 10.0) == pytest.approx(600_000 / 6000.0)
    # With a read limit, batches back to back read at most that: 20000 rows per batch time.
    assert cost.drain_seconds(600_000, 2000.0, 8, 20_000, None) == pytest.approx(
        600_000 / (20_000 / cost.batch_time(20_000, 8) - 2000.0))
    # ... and with a trigger no faster than one limit per trigger interval: it never drains.
    assert math.isinf(cost.drain_seconds(600_000, 2000.0, 8, 20_000, 10.0))
    assert math.isinf(cost.drain_seconds(1.0, 9000.0, 8, None, None))


def test_batches_narrower_than_the_widest_stage_or_on_fewer_executors_than_live_set_no_efficiency() -> None:
    pts = [batch(i, 10_000 + 500 * (i % 4), 4) for i in range(8)]
    # A batch of a few rows: 1 task, run on 1 of 8 live executors in its own time (its ideal on
    # the full width would be an eighth of that).
    task_s = 1.6 + 0.1 + 0.002 * 3
    narrow = replace(batch(8, 3, 8), tasks=1, executors_used=1, task_s=task_s, task_wall_s=task_s)
    # A full-width batch while 4 of 8 live executors were being removed: it ran on the other 4,
    # at their speed.
    leaving = replace(batch(9, 10_000, 4), batch_id=WARMUP_BATCHES + 9, executors=8)
    cost = learner_of([*pts, narrow, leaving]).fit(CORES)
    assert cost is not None
    assert 8 not in cost.efficiency_by_executors, cost.efficiency_by_executors
    assert cost.efficiency_at(8) == pytest.approx(1.0, abs=0.05)
    assert cost.efficiency_by_executors[4] == pytest.approx(1.0, abs=0.05)



def _learners(seed: int) -> list[tuple[BatchCostLearner, int, int | None]]:
    """Queries of every kind a fit meets: steady and varied rows, one size and many, outliers, task
    phases not known, concurrent batches, tables of 3 to 150 batches (beyond what is kept)."""
    rng = random.Random(seed)
    made = []
    for q in range(24):
        kind = q % 6
        count = rng.randint(3, 150)
        pts = []
        for i in range(count):
            rows = 20_000 if kind == 0 else rng.randint(1_000, 40_000)
            executors = 4 if kind in (0, 1) else rng.choice([1, 2, 4, 8])
            b = batch(i, rows, executors, noise=0.05, rng=rng, tasks=rng.choice([8, 32]) if kind == 5 else 32,
                      concurrent=Concurrent(rng.uniform(0, 5), 8) if kind == 4 else None)
            if kind == 2 and rng.random() < 0.1:
                b = replace(b, task_s=(b.task_s or 0.0) * 5)  # an outlier
            if kind == 3 and i % 3 == 0:
                b = replace(b, task_wall_s=None, executors_used=None)
            pts.append(b)
        made.append((learner_of(pts), rng.choice([1, 2, 4]), rng.choice([None, 16, 64])))
    return made


def test_fitting_many_queries_at_once_gives_each_its_own_fit() -> None:
    # The fits of a tick are one array pass over every query's batches, padded to the longest:
    # the padding, and the other queries, must change nothing.
    together = fit_all(_learners(7))
    alone = [learner.fit(cores, hint) for learner, cores, hint in _learners(7)]
    assert sum(c is not None for c in alone) == len(alone)
    for a, b in zip(together, alone, strict=True):
        assert a is not None and b is not None
        for name, value in vars(a).items():
            if name.startswith("_"):
                continue  # cached views of the fields
            other = getattr(b, name)
            if isinstance(value, float):
                assert value == pytest.approx(other, rel=1e-12, abs=1e-15), name
            elif isinstance(value, dict):
                assert value.keys() == other.keys()
                assert list(value.values()) == pytest.approx(list(other.values()))
            else:
                assert value == other, name


def test_a_fit_reads_the_batches_kept_oldest_first_after_they_wrap_and_after_a_correction() -> None:
    learner = BatchCostLearner(max_batches=10)
    learner.add([batch(i, 1_000 * (i + 1), 2) for i in range(-WARMUP_BATCHES, 14)])  # 14 warm: 4 dropped
    assert learner.fit(CORES) is not None
    learner.add([batch(i, 1_000 * (i + 1), 2) for i in range(14, 17)])
    corrected = replace(batch(15, 16_000, 2), task_s=99.0)  # a late task end of a kept batch
    learner.add([corrected])
    table = learner._columns.array()
    assert table[:, 0].tolist() == [1_000.0 * (i + 1) for i in range(7, 17)]
    assert table[8, 1] == 99.0
    assert not table.flags.writeable


def test_exact_figures_fit_the_same_beside_any_query_and_rounding_is_no_cost_of_a_row() -> None:
    # A constant task time: the residuals are rounding, which decided the outliers, the signs and
    # the trust, so the fit depended on the queries fitted in the same pass (their padding changes
    # the rounding), and a cost of a row of 1e-18 was trusted (a capacity of 1e9 rows/s).
    rng = random.Random(4)
    for _ in range(20):
        constant = [batch(i, rng.randint(1, 50), 1, fixed=0.08, per_executor=0.0, per_row=0.0)
                    for i in range(rng.randint(5, 60))]
        alone = learner_of(constant).fit(4)
        assert alone is not None and not alone.row_cost_trusted
        for n in (10, 30, 120):
            other = learner_of([batch(i, rng.randint(1_000, 40_000), rng.choice([2, 4]), noise=0.05, rng=rng)
                                for i in range(n)])
            beside = fit_all([(learner_of(constant), 4, None), (other, 4, None)])[0]
            assert beside is not None
            assert (beside.per_row_s, beside.fixed_task_s, beside.row_cost_trusted) == pytest.approx(
                (alone.per_row_s, alone.fixed_task_s, alone.row_cost_trusted), rel=1e-9)
