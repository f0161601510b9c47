"""MicroBatchEvaluator on hand-built batch series (no Spark, no simulator): arrivals from the
batches, sizing on the performance model, readiness, and the outcome of a change."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, replace
from types import MethodType, SimpleNamespace

import numpy as np
import pytest

from harness import CFG, CORES, scaling_context
from sparkscale_listener.config.core import AutoscalerConfig
from sparkscale_listener.decisions import Evaluation, Prediction, ScalingContext, ScalingRecord
from sparkscale_listener.evaluator import MetricEvaluator, MicroBatchEvaluator
from sparkscale_listener.evaluator.demand import Demand, _in_flight_rate, _task_spread
from sparkscale_listener.evaluator.utilization import Scan, ScanQueries, query_busy_slots, query_utilization
from sparkscale_listener.metrics import (
    BatchRecord,
    ClusterMetrics,
    InFlightBatch,
    LatestOffsets,
    MetricSample,
    QueryMetrics,
)
from sparkscale_listener.model import BatchCost, Concurrent, ideal_task_phase
from sparkscale_listener.policy import ScaleUpBlocks, ScalingPolicy, within_bounds

# backlogThreshold of two 1 s trigger intervals: the batch period sized for is the trigger itself.
AT_TRIGGER = replace(CFG, backlog_threshold_s=2.0)


@dataclass
class Stream:
    """A query whose batches follow known costs exactly: ``rate(t)`` rows/s arrive, a batch starts
    every ``trigger_s`` (at once when the last one ends, without a trigger) and reads what arrived
    since the previous one started (at most ``limit``), pays ``driver_s`` on the driver and
    ``fixed_s + per_row_s x rows`` of task time over ``tasks`` tasks on the executors live."""

    qid: str
    rate: float | Callable[[float], float]
    per_row_s: float = 0.001
    fixed_s: float = 0.0
    driver_s: float = 0.2
    tasks: int = 16
    trigger_s: float | None = 10.0
    limit: float | None = None
    backlog0: float = 0.0  # rows waiting at the start
    reports_backlog: bool = True
    name: str | None = None
    # Each batch's driver time varies by this share (-, 0, + in turn), as planning and commits do.
    jitter: float = 0.0
    # No batch runs while nothing waits (a file source with no new file; the next look at the
    # next trigger, or a second later without one). False: batches of no rows, at every trigger.
    skip_empty: bool = False
    # Rows come in files of this many: a batch reads whole files only (None: rows one by one).
    rows_per_file: float | None = None

    def arriving(self, t: float) -> float:
        return self.rate(t) if callable(self.rate) else self.rate

    def run(self, until: float, executors: Callable[[float], int] | int = 4,
            running: bool = False) -> list[BatchRecord]:
        """The batches completed by ``until``, and with ``running`` the one in progress then."""
        out: list[BatchRecord] = []
        waiting, start, previous = self.backlog0, 0.0, None
        i = 0
        while True:
            live = executors(start) if callable(executors) else executors
            files = self.rows_per_file
            rows = waiting if not files else files * math.floor(waiting / files)
            rows = rows if self.limit is None else min(rows, self.limit)
            if self.skip_empty and rows < 1.0 and previous is not None:
                if start >= until:
                    break
                later = start + (self.trigger_s or 1.0)
                waiting += sum(self.arriving(start + (k + 0.5) * (later - start) / 20) for k in range(20)) \
                    * (later - start) / 20
                start = later
                continue
            task_s = self.fixed_s + self.per_row_s * rows
            wall = ideal_task_phase(task_s, self.tasks, self.tasks, live * CORES)
            duration = self.driver_s * (1.0 + self.jitter * (i % 3 - 1)) + wall
            if start >= until or (start + duration > until and not running):
                break
            waiting -= rows
            out.append(BatchRecord(
                batch_id=i, start=start, duration_s=duration, rows=round(rows),
                since_previous_s=None if previous is None else start - previous,
                backlog=waiting if self.reports_backlog else None, task_s=task_s, tasks=self.tasks,
                task_wall_s=wall, executors_used=min(live, self.tasks), executors=live))
            if start + duration > until:
                break  # the batch in progress at until
            i += 1
            previous = start
            nxt = start + duration if not self.trigger_s else max(start + duration, start + self.trigger_s)
            width = (nxt - start) / 20
            waiting += sum(self.arriving(start + (k + 0.5) * width) for k in range(20)) * width
            start = nxt
        return out

    def metrics(self, batches: list[BatchRecord], busy_ms: float | None = None) -> QueryMetrics:
        """The query's metrics once ``batches`` completed; ``busy_ms`` is theirs unless given."""
        last = batches[-1] if batches else None
        return QueryMetrics(
            self.qid, name=self.name, batches=len(batches), input_rows=sum(b.rows for b in batches),
            backlog=last.backlog if last else None, max_stage_tasks=self.tasks,
            trigger_interval_ms=self.trigger_s * 1000.0 if self.trigger_s else None,
            last_progress_time=last.end if last else None, recent_batches=tuple(batches[-64:]),
            busy_ms=sum(b.task_s or 0.0 for b in batches) * 1000.0 if busy_ms is None else busy_ms)


def history_of(streams: list[Stream], until: float, live: int = 4, step: float = 10.0,
               executors: Callable[[float], int] | int | None = None, other_tasks: int = 0,
               external: dict[str, float] | None = None) -> list[MetricSample]:
    runs = {s.qid: s.run(until, executors if executors is not None else live, running=True) for s in streams}
    samples = []
    times = [step * i for i in range(1, int(until / step + 1e-9) + 1)]
    for t in [*times, until] if not times or times[-1] < until else times:
        queries = {s.qid: s.metrics([b for b in runs[s.qid] if b.end <= t], busy_ms(runs[s.qid], t))
                   for s in streams}
        samples.append(MetricSample(t, ClusterMetrics(live, CORES, other_tasks=other_tasks), queries,
                                    external=external or {}))
    return samples


def busy_ms(batches: list[BatchRecord], t: float) -> float:
    """Task time by ``t`` as the collector counts it: finished tasks and the elapsed part of
    running ones (a batch's tasks taken as busy evenly over its duration)."""
    return 1000.0 * sum((b.task_s or 0.0) * min(1.0, max(0.0, (t - b.start) / b.duration_s))
                        for b in batches if b.duration_s > 0)


def evaluate(streams: list[Stream], until: float = 300.0, evaluator: MetricEvaluator | None = None,
             **kw: object) -> Evaluation:
    live = int(kw.pop("live", 4))  # type: ignore[call-overload]
    history = history_of(streams, until, live=live, **{k: v for k, v in kw.items()
                                                       if k in ("executors", "other_tasks", "external")})
    context_kw = {k: v for k, v in kw.items() if k not in ("executors", "other_tasks", "external")}
    context = scaling_context(until, target=int(context_kw.pop("target", live)), live=live, **context_kw)  # type: ignore[arg-type]
    return (evaluator or MicroBatchEvaluator()).evaluate(history, context)


def test_the_default_evaluator_implements_the_interface() -> None:
    assert isinstance(MicroBatchEvaluator(), MetricEvaluator)
    with pytest.raises(TypeError):
        MetricEvaluator()  # type: ignore[abstract]


def test_arrivals_come_from_the_batches_and_the_size_from_the_model() -> None:
    # 2000 rows/s on a 10 s trigger: 20000 rows a batch, 0.2 s + 20 s of task time over 16 tasks.
    # On 4 executors (16 slots) a batch takes 0.2 + 1.25 s. The target 0.7 asks a batch of
    # 20000 / 0.7 rows (28.6 s of task time) to end within the 10 s interval.
    ev = evaluate([Stream("a", 2000.0)])
    assert ev.ready
    qe = ev.queries["a"]
    assert qe.target_rate == pytest.approx(2000.0, rel=1e-3)
    assert qe.input_rate == pytest.approx(2000.0, rel=1e-3)
    assert qe.batch_time_s == pytest.approx(0.2 + 20.0 / 16)
    assert qe.rows_per_batch == pytest.approx(20_000, rel=1e-3)
    # 1 executor: 4 slots, 4 waves: 0.2 + 28.6 / 4 = 7.3 s <= 10 s.
    assert (qe.required_executors, ev.recommended_executors) == (1, 1)
    # Utilization on the live 4 executors: the arrivals over the rows a batch can take within the
    # batch period, on the target's scale. The period is 30 s, half of backlogThreshold (60 s), longer
    # than the trigger: the headroom's rows of 30 s (60000 / 0.7, 85.7 s of task time) cost 85.7 / 16 s
    # of the 30 - 0.2 s left beside the driver's fixed 0.2 s. (The arrivals themselves over 15 s, a
    # quarter of it, read less: 30 s of task time, 0.7 x 1.9 / 14.8.)
    assert ev.utilization == pytest.approx(0.7 * (60.0 / 0.7 / 16) / (30.0 - 0.2), rel=1e-3)
    assert qe.cost is not None and qe.cost.per_row_s == pytest.approx(0.001)


def test_each_querys_predicted_batch_time_is_its_model_on_the_live_executors() -> None:
    # 20 tasks on 4 executors' 16 slots run in 2 waves: 0.2 s + 2 x 20 s / 20 tasks (on 5
    # executors, 1 wave: 1.2 s).
    ev = evaluate([Stream("a", 2000.0, tasks=20)])
    qe = ev.queries["a"]
    assert qe.cost is not None and qe.predicted_batch_time_s == pytest.approx(2.2, rel=1e-3)
    assert qe.predicted_batch_time_s == qe.cost.steady_batch_time(qe.target_rate, 4, 10.0)


def test_a_step_is_sized_once_two_batches_show_it_and_one_batch_only_blocks_scale_downs() -> None:
    step = Stream("a", lambda t: 500.0 if t < 200 else 5000.0)
    # One batch of the new rate: not a step yet, sized on the window before it; but the load is
    # rising (no scale-down).
    one = evaluate([step], until=215.0)
    assert one.rising and one.queries["a"].rising and "arrivals rising" in one.queries["a"].note
    assert "sized once the next batch confirms it" in one.queries["a"].note
    assert one.queries["a"].target_rate == pytest.approx(500.0, rel=0.01)
    # Two: the lower of the two is the rate, whatever the window says.
    two = evaluate([step], until=225.0)
    assert two.queries["a"].target_rate == pytest.approx(5000.0, rel=0.01)
    assert two.recommended_executors > one.recommended_executors


def test_the_running_batchs_ended_tasks_confirm_a_step_a_batch_sooner() -> None:
    # One batch of the new rate completed (started at 210 s, 50,000 rows); the next started at
    # 220 s and reads as many, 3,125 rows a task over 16 tasks. Its progress comes at its end; its
    # ended tasks are known before.
    step = Stream("a", lambda t: 500.0 if t < 200 else 5000.0)
    history = history_of([step], 222.0)
    latest = history[-1].queries["a"].recent_batches[-1]
    assert latest.start == 210.0

    def running(tasks_ended: int, batch_id: int = latest.batch_id + 1) -> Evaluation:
        flight = InFlightBatch(batch_id=batch_id, first_launch=220.2, tasks_ended=tasks_ended,
                               task_s=tasks_ended * 3125 * step.per_row_s)
        q = replace(history[-1].queries["a"], in_flight=flight)
        samples = [*history[:-1], replace(history[-1], queries={"a": q})]
        return MicroBatchEvaluator().evaluate(samples, scaling_context(222.0, target=4, live=4))

    # Half its tasks ended: 25,000 rows arrived in the 10.2 s before it, a rate far above the
    # window's: the step is confirmed, sized on the latest batch.
    confirmed = running(8).queries["a"]
    assert "the batch running now confirms it" in confirmed.note
    assert confirmed.target_rate == pytest.approx(5000.0, rel=0.01)
    # The step at 205 s: the latest batch read across it (2,750 rows/s); the running one is sized
    # on all of its tasks at the pace of those that ended, 2 x 2,451 rows/s.
    across = Stream("a", lambda t: 500.0 if t < 205 else 5000.0)
    across_history = history_of([across], 222.0)
    flight = InFlightBatch(batch_id=latest.batch_id + 1, first_launch=220.2, tasks_ended=8,
                           task_s=8 * 3125 * across.per_row_s)
    q = replace(across_history[-1].queries["a"], in_flight=flight)
    samples = [*across_history[:-1], replace(across_history[-1], queries={"a": q})]
    sized = MicroBatchEvaluator().evaluate(samples, scaling_context(222.0, target=4, live=4)).queries["a"]
    assert sized.target_rate == pytest.approx(2 * 25_000 / 10.2, rel=0.01)
    # One task ended is 306 rows/s at least: no confirmation yet; nor from another batch's tasks.
    for unconfirmed in (running(1), running(8, batch_id=latest.batch_id + 2)):
        qe = unconfirmed.queries["a"]
        assert "sized once the next batch confirms it" in qe.note
        assert qe.target_rate == pytest.approx(500.0, rel=0.01)
        assert unconfirmed.recommended_executors < running(8).recommended_executors


def test_a_running_batch_that_read_more_than_the_window_blocks_scale_downs() -> None:
    # Steady at 500 rows/s on more executors than it needs; the batch running now has read 3,000
    # rows/s at least (it alone: no completed batch shows it yet).
    steady = Stream("a", 500.0)
    history = history_of([steady], 222.0, live=8)
    latest = history[-1].queries["a"].recent_batches[-1]
    flight = InFlightBatch(batch_id=latest.batch_id + 1, first_launch=220.2, tasks_ended=8,
                           task_s=8 * 2000 * steady.per_row_s)
    context = scaling_context(222.0, target=8, live=8)
    quiet = MicroBatchEvaluator().evaluate(history, context)
    assert not quiet.rising and quiet.recommended_executors < 8
    q = replace(history[-1].queries["a"], in_flight=flight)
    rising = MicroBatchEvaluator().evaluate([*history[:-1], replace(history[-1], queries={"a": q})], context)
    assert rising.rising and rising.queries["a"].rising
    assert rising.queries["a"].target_rate == pytest.approx(500.0, rel=0.01)


def test_the_running_batchs_lower_bound_holds_where_the_model_errs() -> None:
    # A steady 50 rows/s on a 2 s trigger: 100 rows a batch over 8 tasks whose time is mostly fixed
    # (0.25 s each, 5 ms a row). The running batch's 4 ended tasks ran half again as long as the
    # model says (a busy machine), its error 25 %: no sign of more rows than before.
    cost = BatchCost(driver_s=0.3, fixed_task_s=2.0, per_executor_s=0.0, per_row_s=0.005, tasks=8, widest=8,
                     cores=1, efficiency=1.0, error=0.25, batches=30, row_cost_trusted=True)
    latest = BatchRecord(batch_id=10, start=100.0, duration_s=1.4, rows=100, since_previous_s=2.0,
                         backlog=0.0, task_s=2.5, tasks=8)
    slow = 1.5 * (0.25 + 12.5 * 0.005)
    q = QueryMetrics(query_id="a", in_flight=InFlightBatch(batch_id=11, first_launch=102.1, tasks_ended=4,
                                                           task_s=4 * slow))
    at_least, _ = _in_flight_rate(q, [latest], cost, 4) or (0.0, 0.0)
    assert at_least < 1.5 * 50.0  # not a rise (RISING: 50 % above the window)
    # Without the error, the same tasks would have read more than 75 rows/s: a rise.
    exact = replace(cost, error=0.0)
    assert (_in_flight_rate(q, [latest], exact, 4) or (0.0, 0.0))[0] > 75.0
    # A real step stays one: 10x the rows in the same tasks.
    stepped = replace(q, in_flight=replace(q.in_flight, task_s=4 * (0.25 + 125 * 0.005)))
    assert (_in_flight_rate(stepped, [latest], cost, 4) or (0.0, 0.0))[0] > 75.0


def test_the_running_batchs_lower_bound_allows_for_how_slow_recent_tasks_ran() -> None:
    # As above, but the machine slower still: every task 1.95x the model's time (a real Kafka tail
    # on a busy machine), beyond the batch error of 25 %. The batches before ran as slow.
    cost = BatchCost(driver_s=0.3, fixed_task_s=2.0, per_executor_s=0.0, per_row_s=0.005, tasks=8, widest=8,
                     cores=1, efficiency=1.0, error=0.25, batches=30, row_cost_trusted=True)
    slow = 1.95
    latest = BatchRecord(batch_id=10, start=100.0, duration_s=1.4, rows=100, since_previous_s=2.0,
                         backlog=0.0, task_s=slow * 2.5, tasks=8, executors=4)
    assert _task_spread([latest], cost) == pytest.approx(slow)
    q = QueryMetrics(query_id="a", in_flight=InFlightBatch(batch_id=11, first_launch=102.1, tasks_ended=4,
                                                           task_s=4 * slow * (0.25 + 12.5 * 0.005)))
    # On the batch error alone, its tasks read more than 75 rows/s: a rise that is not one.
    assert (_in_flight_rate(q, [latest], cost, 4) or (0.0, 0.0))[0] > 75.0
    at_least, _ = _in_flight_rate(q, [latest], cost, 4, [latest]) or (0.0, 0.0)
    assert at_least == pytest.approx(50 / 2.1, rel=0.01)  # the rows it read, as slow as the others
    # A step is still one: 10x the rows, the tasks as slow.
    stepped = replace(q, in_flight=replace(q.in_flight, task_s=4 * slow * (0.25 + 125 * 0.005)))
    assert (_in_flight_rate(stepped, [latest], cost, 4, [latest]) or (0.0, 0.0))[0] > 75.0
    # A batch on a fresh executor (its first tasks start Python) is not a measure of the spread.
    assert _task_spread([replace(latest, fresh_executors=True)], cost) == 1.0


def with_source_offsets(history: list[MetricSample], stream: Stream, partitions: int = 8,
                        times: Callable[[float], float] = lambda t: t) -> list[MetricSample]:
    """``history`` with the stream's latest offsets read at each sample (at ``times(sample time)``):
    every row arrived by then, as a Kafka source's log end offsets sum them."""
    out = []
    for sample in history:
        t = times(sample.time)
        arrived = sum(stream.arriving((k + 0.5) * 0.01) for k in range(int(t / 0.01))) * 0.01
        q = replace(sample.queries[stream.qid], latest_offsets=LatestOffsets(t, arrived, partitions))
        out.append(replace(sample, queries={**sample.queries, stream.qid: q}))
    return out


def test_a_step_the_sources_latest_offsets_show_twice_is_sized_before_a_batch_reads_it() -> None:
    # A 10 s trigger; the batch at 200 s read the rate before the step at 201 s, and the next starts
    # at 210 s. The source's offsets, read every 2 s, show 2,750 rows/s over 200-202 s and 5,000
    # rows/s over 202-204 s and 204-206 s.
    step = Stream("a", lambda t: 500.0 if t < 201 else 5000.0)
    context = scaling_context(206.0, target=4, live=4)
    history = history_of([step], 206.0, step=2.0)
    assert history[-1].queries["a"].recent_batches[-1].start == 200.0
    unread = MicroBatchEvaluator().evaluate(history, context)
    assert unread.queries["a"].target_rate == pytest.approx(500.0, rel=0.01) and not unread.rising
    sized = MicroBatchEvaluator().evaluate(with_source_offsets(history, step), context)
    qe = sized.queries["a"]
    assert "its source's latest offsets show 5,000 rows/s then 5,000 rows/s arriving" in qe.note
    assert qe.target_rate == pytest.approx(5000.0, rel=0.01) and qe.rising
    assert sized.recommended_executors > unread.recommended_executors
    # One span of it (200-202 s, read at the batch's start and 2 s later) is not a rise until the
    # next confirms it: a single span of a second or two on a steady load read over 1.5x its rate
    # at times (when the producer flushed, when the offsets were read), and held a due scale-down.
    once = MicroBatchEvaluator().evaluate(with_source_offsets(history[:-2], step),
                                          scaling_context(202.0, target=4, live=4))
    assert not once.rising and once.queries["a"].target_rate == pytest.approx(500.0, rel=0.01)
    assert "latest offsets show" not in once.queries["a"].note
    twice = MicroBatchEvaluator().evaluate(with_source_offsets(history[:-1], step),
                                           scaling_context(204.0, target=4, live=4))
    assert twice.rising
    # Readings from before the latest batch started tell what it read: not a second sighting.
    late = Stream("a", lambda t: 500.0 if t < 199 else 5000.0)
    before = history_of([late], 202.0, step=2.0)
    seen = MicroBatchEvaluator().evaluate(with_source_offsets(before, late),
                                          scaling_context(202.0, target=4, live=4)).queries["a"]
    assert "latest offsets show" not in seen.note


def test_the_sources_offsets_confirm_a_batchs_jump_and_tell_nothing_across_a_partition_change() -> None:
    # The batch at 210 s read the step at 205 s; the source shows the new rate since it started.
    step = Stream("a", lambda t: 500.0 if t < 205 else 5000.0)
    history = history_of([step], 214.0, step=2.0)
    assert history[-1].queries["a"].recent_batches[-1].start == 210.0
    context = scaling_context(214.0, target=4, live=4)
    confirmed = MicroBatchEvaluator().evaluate(with_source_offsets(history, step), context).queries["a"]
    assert "its source confirms it: 5,000 rows/s arrived since" in confirmed.note
    assert confirmed.target_rate == pytest.approx(5000.0, rel=0.01)
    # A partition came at the reading between the other two since, and went: no rate across either
    # change, and the batch waits for the next.
    read = with_source_offsets(history, step)
    middle = read[-2].queries["a"]
    assert middle.latest_offsets is not None and middle.latest_offsets.time == 212.0
    moved = replace(middle, latest_offsets=replace(middle.latest_offsets, partitions=9))
    changed = [*read[:-2], replace(read[-2], queries={"a": moved}), read[-1]]
    unconfirmed = MicroBatchEvaluator().evaluate(changed, context).queries["a"]
    assert "sized once the next batch confirms it" in unconfirmed.note
    assert unconfirmed.target_rate == pytest.approx(500.0, rel=0.01)


def test_a_step_between_two_batch_starts_is_sized_on_the_newer_batch() -> None:
    # The step at 205 s: the batch started at 210 s read 5 s of each rate (2,750 rows/s), the one
    # at 220 s only the new rate. Sized on the lower, the scale-up fell short and needed two more.
    step = Stream("a", lambda t: 500.0 if t < 205 else 5000.0)
    two = evaluate([step], until=225.0)
    assert two.queries["a"].target_rate == pytest.approx(5000.0, rel=0.01)
    # Noise is no step: two batches apart by 20 % are sized on the lower.
    noisy = Stream("a", lambda t: 1000.0 if t < 210 else (1250.0 if t < 220 else 1500.0))
    assert evaluate([noisy], until=235.0).queries["a"].target_rate == pytest.approx(1250.0, rel=0.01)


def test_not_ready_before_three_warm_batches_of_a_query_or_two_that_agree() -> None:
    # 4 batches, 2 of them warm-up; the warm ones read 10,000 and 20,000 rows and pay 10 s of task
    # time each besides their rows: 2 and 1.5 ms a row, 25 % apart.
    rising = Stream("a", lambda t: 1000.0 if t < 25 else 3000.0, fixed_s=10.0)
    ev = evaluate([rising], until=35.0, target=5)
    assert not ev.ready and ev.recommended_executors == 5
    assert "learning the cost of query" in ev.headline
    assert evaluate([rising], until=45.0, target=5).ready  # a third
    assert evaluate([Stream("a", 1000.0)], until=35.0, target=5).ready  # two that agree


def test_after_a_change_it_waits_for_two_batches_at_the_new_size() -> None:
    q = Stream("a", 1000.0)
    history = history_of([q], 300.0)
    change = ScalingRecord(280.0, "scale_up", 2, 4, "r")
    not_yet = MicroBatchEvaluator().evaluate(
        history, replace(scaling_context(300.0, window_start=285.0), last_scaling=change))
    assert not not_yet.ready and "1 of 2 batches of query" in not_yet.headline
    scaled = replace(scaling_context(300.0, window_start=math.inf), last_scaling=change)
    waiting = MicroBatchEvaluator().evaluate(history, scaled)
    assert not waiting.ready and "waiting for the requested executors to register" in waiting.headline
    leaving = MicroBatchEvaluator().evaluate(history, replace(scaled, live_executors=6))
    assert "waiting for the executors beyond the target to leave" in leaving.headline


def test_executors_beyond_the_target_do_not_hide_a_load_the_target_cannot_hold() -> None:
    # 6,000 rows/s of 16 tasks: within the band on 2 executors (0.76), far above it on 1. With the
    # target at 1 and a second executor live (started unasked by a Master back from a restart),
    # judged on both, the policy held 1 and the second was removed, to be asked for again later.
    load = [Stream("a", 6000.0)]
    assert CFG.utilization_target < evaluate(load, live=2, target=2).utilization < CFG.utilization_max
    ev = evaluate(load, live=2, target=1)
    assert ev.utilization == pytest.approx(evaluate(load, live=1, target=1).utilization)
    assert ev.utilization > CFG.utilization_max
    assert ev.queries["a"].utilization == pytest.approx(ev.utilization)  # the query's, read there too
    assert "on 1 executor (the target; 2 live)" in ev.reason
    decision = ScalingPolicy().decide(ev, scaling_context(300.0, target=1, live=2))
    assert decision.action == "scale_up" and decision.to_executors > 1, decision.reason


def test_the_batches_of_the_start_up_settling_are_not_fitted() -> None:
    # Before any scaling, measuring starts once the start-up's executors settled (here at 200 s):
    # the batches before, on executors registering or leaving, are no size's cost.
    q = Stream("a", 1000.0)
    history = history_of([q], 300.0)
    evaluator = MicroBatchEvaluator()
    assert not evaluator.evaluate(history[:20], scaling_context(200.0, window_start=math.inf)).ready
    evaluator.evaluate(history, scaling_context(300.0, window_start=200.0))
    cost = evaluator.cost("a")
    after = [b for b in history[-1].queries["a"].recent_batches if b.start >= 200.0]
    assert cost is not None and cost.batches == len(after)


@pytest.mark.parametrize("action, before, after", [("scale_up", 1, 4), ("scale_down", 8, 4)])
def test_arrivals_beyond_what_the_last_change_was_sized_for_need_no_stabilization(action: str, before: int,
                                                                                  after: int) -> None:
    """A step after a change is sized at once, a scale-down's included (a step while its executors
    go); arrivals as the change expected wait for the new size's batches."""
    step = Stream("a", lambda t: 1000.0 if t < 200 else 20_000.0, tasks=64)
    cost = BatchCost(0.2, 0.0, 0.0, 0.001, 64, 64, CORES, 1.0, 0.0, 10, True)
    sized_for_1000 = ScalingRecord(205.0, action, before, after, "r", predictions={
        "a": Prediction("a", 1000.0, 10_000.0, 1, 2.7, 0.9, 64_000.0, None, cost)})
    context = replace(scaling_context(240.0, window_start=math.inf), last_scaling=sized_for_1000)
    ev = MicroBatchEvaluator().evaluate(history_of([step], 240.0), context)
    assert ev.ready and ev.recommended_executors > after
    name = action.replace("_", "-")
    assert f"outgrew the 1,000 rows/s the last {name} was sized for" in ev.queries["a"].note
    steady = history_of([Stream("a", 1000.0, tasks=64)], 240.0)
    assert not MicroBatchEvaluator().evaluate(steady, context).ready


@pytest.mark.parametrize("after_step, resized", [(1350.0, True), (1200.0, False)])
def test_arrivals_past_the_band_of_what_a_scale_up_was_sized_for_resize_it_at_once(after_step: float,
                                                                                    resized: bool) -> None:
    """A scale-up sized on 1,000 rows/s (e.g. a running batch's lower bound): 35 % more is past what
    the band holds (utilization.max over the target, 0.9 / 0.7), so the rest comes now; 20 % more
    waits for the new size's batches, as the band would hold it."""
    step = Stream("a", lambda t: 1000.0 if t < 200 else after_step, tasks=64)
    cost = BatchCost(0.2, 0.0, 0.0, 0.001, 64, 64, CORES, 1.0, 0.0, 10, True)
    sized_for_1000 = ScalingRecord(205.0, "scale_up", 1, 2, "r", predictions={
        "a": Prediction("a", 1000.0, 10_000.0, 2, 2.7, 0.9, 64_000.0, None, cost)})
    context = replace(scaling_context(240.0, window_start=math.inf), last_scaling=sized_for_1000)
    ev = MicroBatchEvaluator().evaluate(history_of([step], 240.0), context)
    assert ev.ready is resized
    if resized:
        assert "outgrew the 1,000 rows/s the last scale-up was sized for" in ev.queries["a"].note


def test_a_scale_up_cut_short_by_the_max_factor_continues_once_its_executors_registered() -> None:
    # 1 -> 4 of the 16 needed (scaleUp.maxFactor 4): with the 4 registered, the rest follows
    # without waiting for two batches on them; before they register, it waits.
    q = Stream("a", 16_000.0, tasks=64)
    cost = BatchCost(0.2, 0.0, 0.0, 0.001, 64, 64, CORES, 1.0, 0.0, 10, True)
    cut_short = ScalingRecord(295.0, "scale_up", 1, 4, "r", predictions={
        "a": Prediction("a", 16_000.0, 160_000.0, 16, 40.0, 10.0, 18_000.0, None, cost)})
    history = history_of([q], 300.0)
    registered = replace(scaling_context(300.0, window_start=299.0), last_scaling=cut_short)
    ev = MicroBatchEvaluator().evaluate(history, registered)
    assert ev.ready and ev.recommended_executors > 4
    assert "the last scale-up, to 4, was cut short of the 16 executors it needed" in ev.queries["a"].note
    requested = replace(registered, window_start=math.inf)
    assert not MicroBatchEvaluator().evaluate(history, requested).ready
    # A scale-up that got what it needed waits for the new size's batches, as any change.
    enough = replace(registered, last_scaling=replace(cut_short, to_executors=16))
    assert not MicroBatchEvaluator().evaluate(history, enough).ready


def test_a_backlog_asks_for_catch_up_capacity_and_sets_backlog_mode() -> None:
    # 1000000 rows wait (at most 50000 read a batch), 1000 rows/s arrive. The live executors do
    # more than 1000 rows/s: while new ones start, the backlog does not grow (Spark keeps the
    # query running through a scale-up, unlike Flink's restart), so only the backlog is caught up.
    q = Stream("a", 1000.0, backlog0=1_000_000.0, limit=50_000.0)
    ev = evaluate([q], until=60.0, provisioning=30.0)
    qe = ev.queries["a"]
    assert qe.backlog is not None and qe.backlog > 200_000
    excess = qe.backlog - 1000.0 * 10.0
    assert qe.catch_up_rate == pytest.approx(excess / 300.0, rel=0.01)
    assert qe.backlog_mode and "backlog mode" in qe.note and ev.backlog_mode
    # A batch must read a trigger interval of the arrivals plus the catch-up (at most the read limit).
    assert qe.rows_per_batch == pytest.approx(min(50_000.0, (qe.target_rate + qe.catch_up_rate) * 10.0))

    # Sized as Flink's target capacity: the arrivals over the target, the catch-up as it is (a
    # backlog is worked off once). Without a trigger, the utilization is then (arrivals + 0.7 x
    # catch-up) / throughput: 0.74 on 1 executor here, where all of it over the target read 0.95.
    free = Stream("b", 1000.0, backlog0=1_000_000.0, limit=50_000.0, trigger_s=None)
    ev = evaluate([free], until=60.0, live=1)
    qe = ev.queries["b"]
    cost = qe.cost
    assert cost is not None and qe.catch_up_rate > 1000.0
    throughput = float(cost.throughput(1, 50_000.0))
    assert qe.utilization == pytest.approx((1000.0 + 0.7 * qe.catch_up_rate) / throughput, rel=0.01)


def test_what_the_live_executors_fall_short_of_while_new_ones_start_is_caught_up_too() -> None:
    # 5,000 rows/s on 1 executor of 4 slots, 1 ms a row: it does 4,000 rows/s at most, and its
    # batches read all there is (no backlog reported). While new executors start (30 s), 1,000
    # rows/s pile up; they are worked off within catchUpDuration (300 s).
    ev = evaluate([Stream("a", 5000.0, trigger_s=None)], until=120.0, live=1, target=1, provisioning=30.0)
    qe = ev.queries["a"]
    assert qe.backlog == 0.0
    assert qe.catch_up_rate == pytest.approx((5000.0 - 4000.0) * 30.0 / 300.0, rel=0.05)
    # Where the live executors keep up, nothing piles up.
    assert evaluate([Stream("a", 3000.0, trigger_s=None)], until=120.0, live=1, target=1,
                    provisioning=30.0).queries["a"].catch_up_rate == 0.0
    # With a backlog reported, what they fall short of adds to its catch-up: a batch reads at
    # most 40,000 rows, and 1 executor reads them in 10.2 s, 3,900 rows/s of the 5,000.
    behind = Stream("a", 5000.0, trigger_s=None, backlog0=2_000_000.0, limit=40_000.0)
    qe = evaluate([behind], until=120.0, live=1, target=1, provisioning=30.0).queries["a"]
    assert qe.backlog is not None and qe.backlog > 1_000_000
    excess = qe.backlog - 5000.0 * qe.batch_time_s
    assert qe.catch_up_rate == pytest.approx(excess / 300.0 + (5000.0 - 40_000.0 / 10.2) * 30.0 / 300.0,
                                             rel=0.02)


def test_a_binding_read_limit_is_sized_on_batches_of_the_limit_back_to_back() -> None:
    # 2,000 rows/s and a backlog; batches read at most 6,000 rows, a 1 s trigger, 0.6 s of each
    # batch on the driver. Back to back, batches of the limit take 1.6 s on 2 executors: 3,750
    # rows/s: (2,000 + 0.7 x the 610 rows/s of catch-up) / 3,750 = 0.65 (the catch-up counts at
    # 0.7: Flink's target capacity gives the arrivals the headroom and the catch-up none). Sized to
    # read 2,000 rows (and the headroom) within each trigger interval, the driver's 0.6 s left
    # room for too few rows: 4.
    q = Stream("a", 2000.0, per_row_s=0.001, fixed_s=2.0, driver_s=0.6, tasks=16, trigger_s=1.0,
               limit=6000.0, backlog0=400_000.0)
    ev = evaluate([q], until=120.0, live=2)
    qe = ev.queries["a"]
    assert qe.backlog is not None and qe.backlog > 100_000 and qe.backlog_mode
    assert ev.recommended_executors == 2
    assert qe.utilization == pytest.approx((2000.0 + 0.7 * qe.catch_up_rate) * 1.6 / 6000.0, rel=0.01)


def test_batch_time_executors_cannot_shorten_is_no_reason_to_hold_them() -> None:
    # A stateful query on a 1 s trigger: 1.2 s of each batch on the driver, a little task time.
    # Its batches run past the trigger whatever the executors: one executor does what four do.
    q = Stream("dedup", 200.0, per_row_s=0.0005, fixed_s=0.4, driver_s=1.2, tasks=4, trigger_s=1.0)
    ev = evaluate([q], until=120.0)
    assert ev.ready and ev.recommended_executors == 1
    assert ScalingPolicy().decide(ev, scaling_context(120.0)).action == "none"  # the delay first
    qe = ev.queries["dedup"]
    assert qe.cost is not None and qe.cost.driver_s == pytest.approx(1.2)


def test_the_widest_stage_caps_what_executors_can_do() -> None:
    # 8 tasks: more than 2 executors of 4 slots shorten nothing; the load wants more than that.
    q = Stream("a", 8000.0, tasks=8, trigger_s=10.0)
    ev = evaluate([q], until=300.0)
    qe = ev.queries["a"]
    assert qe.capped and qe.parallelism_cap == 8
    assert ev.recommended_executors == 2
    assert "capped at 8 parallel tasks" in ev.reason


def test_an_idle_query_needs_nothing_but_only_on_evidence() -> None:
    busy = Stream("a", 2000.0)
    idle = Stream("b", 0.0)
    ev = evaluate([busy, idle])
    assert "idle" in ev.queries["b"].note and ev.queries["b"].required_executors == 1


def test_queries_with_one_trigger_start_together_and_share_the_slots() -> None:
    # Alone each needs 2 executors; their batches start together and split the slots.
    a, b = Stream("a", 4000.0, tasks=8), Stream("b", 4000.0, tasks=8)
    alone = evaluate([a])
    together = evaluate([a, b])
    assert together.recommended_executors > alone.recommended_executors


def test_a_backlog_from_the_external_metrics_hook_or_reported_missing() -> None:
    q = Stream("a", 1000.0, name="clicks", reports_backlog=False)
    ev = evaluate([q])
    assert ev.queries["a"].backlog is None and "no backlog reported" in ev.queries["a"].note
    seen = evaluate([q], external={"backlog.clicks": 130_000.0})
    qe = seen.queries["a"]
    assert qe.backlog == 130_000.0 and "backlog.clicks" in qe.note
    assert qe.catch_up_rate > 0


def test_a_read_limit_that_binds_where_no_backlog_is_reported_is_seen_in_the_batches() -> None:
    # A source without a backlog reads at most 2000 rows a 5 s trigger; from 40 s on, 1000 rows/s
    # arrive, the rest waits unseen. Every batch then reads the same 2000 rows, back to back, past
    # the trigger, while the spans between them vary with the driver's time, and none read more:
    # the limit binds. Sized so that batches of the limit do the arrivals they show (2000 rows
    # per batch time) at the target: more than 1.
    files = Stream("files", lambda t: 150.0 if t < 40.0 else 1000.0, per_row_s=0.02, tasks=8, trigger_s=5.0,
                   limit=2000.0, reports_backlog=False, driver_s=1.0, jitter=0.2)
    ev = evaluate([files], until=190.0, live=1)
    qe = ev.queries["files"]
    assert "a read limit binds" in qe.note and qe.rising, qe.note
    assert qe.rows_per_batch == 2000.0
    assert ev.recommended_executors > 1
    assert ev.utilization is not None and ev.utilization > CFG.utilization_max
    # The same batches to the microsecond, spans and all: no telling a limit from arrivals that
    # keep pace (a steady source read back to back), so taken as keeping up.
    steady = evaluate([replace(files, jitter=0.0)], until=190.0, live=1)
    assert "a read limit binds" not in steady.queries["files"].note
    # Every batch of the same rows from the first on: a limit, or a file of that many rows each
    # time (a batch of one file reads one file): no telling, taken as keeping up.
    ones = evaluate([replace(files, rate=1000.0)], until=150.0, live=1)
    assert "a read limit binds" not in ones.queries["files"].note


def test_batches_longer_than_a_short_trigger_are_no_demand_while_the_query_keeps_up() -> None:
    # A stateful query on a file source (no backlog): 1 s trigger, 1.2 s on the driver and 0.4 s
    # of fixed task time over 4 tasks whatever its rows, so no size brings a batch under the
    # trigger. 60 rows/s at 4 ms a row keep a fraction of one slot busy. Batches run back to back,
    # each reading what arrived during the one before: the query keeps up on one executor, with a
    # lag of two batches (about 3 s), far within half of backlogThreshold. The files come one at a
    # time: each batch reads one, 200 rows, as if a limit of 200 bound (read from its batches alike
    # past the trigger, this query was held at the most it could use).
    files = Stream("files", 60.0, per_row_s=0.004, fixed_s=0.4, tasks=4, driver_s=1.2, trigger_s=1.0,
                   reports_backlog=False, jitter=0.1, rows_per_file=200.0, skip_empty=True)
    ev = evaluate([files], until=120.0, live=4, target=4)
    qe = ev.queries["files"]
    assert qe.batch_time_s is not None and qe.batch_time_s > 1.0  # past the trigger, every batch
    assert ev.recommended_executors == 1 and qe.required_executors == 1, qe.note
    assert not qe.capped and not qe.rising and not ev.rising, qe.note
    assert "a read limit binds" not in qe.note
    # At 1 executor the lag at the load sized for, two batch periods, stays within half of
    # backlogThreshold.
    assert qe.cost is not None
    period = qe.cost.steady_batch_time(qe.target_rate / CFG.utilization_target, 1, qe.trigger_s)
    assert 2 * period <= CFG.backlog_threshold_s / 2


def test_the_lag_at_the_load_sized_for_stays_within_half_of_backlog_threshold() -> None:
    # Without a trigger or with a short one, batches run back to back. The size given keeps them at
    # most a quarter of backlogThreshold apart at the arrivals (a row waits two of them at most:
    # half of it) and at most half of it apart at the arrivals over the target (the lag within all
    # of it: the room for a burst); one executor fewer fails one of the two. A fixed task time of
    # 30 s a batch over 128 tasks: 7 executors.
    quarter, half = CFG.backlog_threshold_s / 4, CFG.backlog_threshold_s / 2
    for trigger_s in (None, 1.0):
        stream = Stream("a", lambda t: 3000.0 if int(t / 5) % 2 else 3300.0, per_row_s=0.004, fixed_s=30.0,
                        tasks=128, driver_s=1.5, trigger_s=trigger_s)
        ev = evaluate([stream], until=200.0, live=8, target=8)
        qe = ev.queries["a"]
        k = ev.recommended_executors
        assert qe.cost is not None and 1 < k < CFG.max_executors, qe.note
        rate, headroom = qe.target_rate, qe.target_rate / CFG.utilization_target
        assert qe.cost.steady_batch_time(rate, k, trigger_s) <= quarter + 1e-6
        assert qe.cost.steady_batch_time(headroom, k, trigger_s) <= half + 1e-6
        assert (qe.cost.steady_batch_time(rate, k - 1, trigger_s) > quarter
                or qe.cost.steady_batch_time(headroom, k - 1, trigger_s) > half)


def test_a_query_gone_quiet_is_idle_once_its_batches_leave_the_window() -> None:
    # A file source: one file of 200 rows a batch, every 2 s, each batch 1.5 s past a 1 s trigger;
    # then the files stop and no batch runs. The batches it ran say nothing of now: once they are
    # older than the window, it is idle, nothing rises, and it needs the fewest executors. (Read
    # from its last three batches whatever their age, it was "falling behind its trigger",
    # rising, for as long as the application ran.)
    batches = [BatchRecord(batch_id=i, start=2.0 * i, duration_s=1.5, rows=200,
                           since_previous_s=2.0 if i else None, task_s=0.9, tasks=5, task_wall_s=0.6,
                           executors_used=1, executors=4) for i in range(40)]
    last_end = batches[-1].end
    q = QueryMetrics("files", trigger_interval_ms=1000.0, max_stage_tasks=4, recent_batches=tuple(batches),
                     busy_ms=sum(b.task_s or 0.0 for b in batches) * 1000.0)
    evaluator = MicroBatchEvaluator()
    history = [MetricSample(t, ClusterMetrics(4, CORES), {"files": replace(
        q, recent_batches=tuple(b for b in batches if b.end <= t))})
        for t in range(10, int(last_end) + 70, 2)]
    for i, sample in enumerate(history):
        ev = evaluator.evaluate(history[:i + 1], scaling_context(sample.time, target=4, live=4))
    qe = ev.queries["files"]
    assert history[-1].time > last_end + CFG.metrics_window_s
    assert "idle" in qe.note and not qe.rising and not ev.rising, qe.note
    assert ev.recommended_executors == CFG.min_executors
    decision = ScalingPolicy().decide(ev, scaling_context(history[-1].time, target=4, live=4))
    assert decision.reason.startswith("hold 4, scale-down to 1 in"), decision.reason


def test_a_source_that_reports_its_backlog_is_sized_on_it_not_on_its_batches_alike() -> None:
    # Kafka at its maxOffsetsPerTrigger: batches of the same rows back to back, the rest reported
    # waiting. Sized on the reported backlog (catch-up) and the limit; no guess at an unseen one.
    kafka = Stream("kafka", 1000.0, per_row_s=0.02, tasks=8, trigger_s=5.0, limit=2000.0, driver_s=1.0,
                   jitter=0.2)
    ev = evaluate([kafka], until=150.0, live=1)
    qe = ev.queries["kafka"]
    assert qe.backlog is not None and qe.backlog > 0
    assert "a read limit binds" not in qe.note and "no backlog" not in qe.note, qe.note
    assert qe.catch_up_rate > 0 and ev.recommended_executors > 1


def test_the_recommendation_is_what_the_load_needs_and_the_policy_bounds_it() -> None:
    big = Stream("a", 100_000.0, tasks=512)
    ev = evaluate([big], until=200.0, live=20, target=20)
    assert ev.recommended_executors > CFG.max_executors and "bounded" not in ev.reason
    bounded = within_bounds(ev, scaling_context(200.0, target=20, live=20))
    assert bounded.recommended_executors == CFG.max_executors
    assert bounded.reason.endswith("bounded to 20 by min/maxExecutors")
    tiny = Stream("a", 1.0)
    cfg = AutoscalerConfig(min_executors=2, max_executors=20)
    small = evaluate([tiny], cfg=cfg)
    assert small.recommended_executors == 1
    assert within_bounds(small, scaling_context(small.time, cfg=cfg)).recommended_executors == 2


def test_spark_task_cpus_divides_the_slots_of_an_executor() -> None:
    q = Stream("a", 6000.0, tasks=32)
    history = history_of([q], 300.0)
    one = MicroBatchEvaluator().evaluate(history, scaling_context(300.0))
    two = MicroBatchEvaluator().evaluate(history, replace(scaling_context(300.0), task_cpus=2))
    assert two.recommended_executors > one.recommended_executors


def test_other_jobs_keep_a_slot_per_pending_or_running_task() -> None:
    ev = evaluate([Stream("a", 1.0)], other_tasks=18)
    assert ev.recommended_executors == 5  # 18 slots, 4 an executor
    assert "other jobs (not streaming) have up to 18 pending or running tasks" in ev.reason


def _scaled_up(evaluator: MicroBatchEvaluator, after: Callable[[float], int],
               rate: float = 8000.0) -> tuple[Evaluation, ScalingContext]:
    q = Stream("a", rate, tasks=32)
    history = history_of([q], 400.0, executors=after, live=8)
    cost = BatchCost(0.2, 0.0, 0.0, 0.001, 32, 32, CORES, 1.0, 0.02, 20, True)
    record = ScalingRecord(200.0, "scale_up", 2, 8, "r", predictions={
        "a": Prediction("a", rate, rate * 10, 8, cost.batch_time(rate * 10, 2), cost.batch_time(rate * 10, 8),
                        cost.capacity(8), None, cost)})
    context = replace(scaling_context(400.0, target=8, live=8, window_start=250.0), last_scaling=record)
    return evaluator.evaluate(history, context), context


def test_the_outcome_of_a_scale_up_is_its_new_executors_batches_against_the_prediction() -> None:
    evaluator = MicroBatchEvaluator()
    good, context = _scaled_up(evaluator, lambda t: 2 if t < 230 else 8)
    (outcome,) = good.outcomes.values()
    # Measured by the evaluator; the verdict is the policy's.
    assert outcome.executors == 8 and outcome.batches >= 2 and outcome.effective is None
    assert outcome.batch_time_s == pytest.approx(outcome.predicted_s, rel=0.01)
    (outcome,) = ScaleUpBlocks.judged(good, context).outcomes.values()
    assert outcome.effective and "effective" in outcome.verdict
    # Once per change: the control loop reports it, the policy judges it, on that evaluation.
    assert not _scaled_up(evaluator, lambda t: 2 if t < 230 else 8)[0].outcomes
    # Executors that never came (a capacity limit held 2): nothing to judge the scale-up on.
    held, context = _scaled_up(MicroBatchEvaluator(), lambda t: 2)
    (outcome,) = ScaleUpBlocks.judged(held, context).outcomes.values()
    assert outcome.effective and "on 2 executors" in outcome.verdict


def test_the_task_time_beside_a_batch_is_each_overlapping_batchs_share_of_its_own() -> None:
    """One sweep gives what the pairwise definition gives: for every other query's batch that
    overlaps a batch's task phase, its task time (and tasks) times the share of its phase inside."""
    import random

    from sparkscale_listener.concurrency import with_concurrency

    rng = random.Random(3)
    queries = []
    for n in range(4):
        batches, start = [], rng.uniform(0, 5)
        for i in range(12):
            duration = rng.uniform(0.5, 6.0)
            wall = duration * rng.uniform(0.3, 1.0)
            batches.append(BatchRecord(batch_id=i, start=start, duration_s=duration, rows=100,
                                       task_s=rng.uniform(0.1, 20.0), tasks=rng.randint(1, 16),
                                       task_wall_s=wall if i % 5 else None))
            start += duration + rng.choice([0.0, 0.0, rng.uniform(0, 3)])
        queries.append(QueryMetrics(query_id=f"q{n}", recent_batches=tuple(batches)))

    def phase(b: BatchRecord) -> tuple[float, float]:
        return (b.end - b.task_wall_s if b.task_wall_s is not None else b.start), b.end

    result = with_concurrency(queries)
    for q in queries:
        for b, got in zip(q.recent_batches, result[q.query_id].records(), strict=True):
            b0, b1 = phase(b)
            task_s = tasks = 0.0
            for other in queries:
                if other is q:
                    continue
                for o in other.recent_batches:
                    o0, o1 = phase(o)
                    share = max(0.0, min(b1, o1) - max(b0, o0)) / (o1 - o0)
                    task_s += o.task_s * share
                    tasks += o.tasks * share
            assert got.concurrent_task_s == pytest.approx(task_s, abs=1e-6)
            assert got.concurrent_tasks == round(tasks) or abs(tasks - round(tasks)) > 0.499


def test_batches_swept_again_each_tick_give_what_one_sweep_over_all_gives() -> None:
    """Tick after tick (new batches, and a task end that came late to an earlier one), the records
    kept from the last tick and the ones swept again are what sweeping every batch gives."""
    import random

    from sparkscale_listener.concurrency import with_concurrency

    rng = random.Random(5)
    series: list[list[BatchRecord]] = []
    for _ in range(3):
        batches, start = [], rng.uniform(0, 3)
        for i in range(40):
            duration = rng.uniform(0.5, 4.0)
            batches.append(BatchRecord(batch_id=i, start=start, duration_s=duration, rows=100,
                                       task_s=rng.uniform(0.1, 9.0), tasks=rng.randint(1, 8),
                                       task_wall_s=duration * rng.uniform(0.3, 1.0)))
            start += duration + rng.choice([0.0, rng.uniform(0, 2)])
        series.append(batches)
    known: dict[str, dict[int, BatchRecord]] = {}
    for now in range(10, 120, 7):
        queries = []
        for n, batches in enumerate(series):
            done = [b for b in batches if b.end <= now]
            if now == 52 and len(done) > 5:  # a late task end raises an earlier batch's task time
                late = replace(done[-5], task_s=(done[-5].task_s or 0.0) + 3.0)
                series[n] = [late if b.batch_id == late.batch_id else b for b in batches]
                done = [b for b in series[n] if b.end <= now]
            queries.append(QueryMetrics(query_id=f"q{n}", recent_batches=tuple(done)))
        swept = with_concurrency(queries, known)
        everything = with_concurrency(queries)
        for q in queries:
            got = [(b.batch_id, round(s, 6), n) for b, s, n in swept[q.query_id].batches]
            want = [(b.batch_id, round(s, 6), n) for b, s, n in everything[q.query_id].batches]
            assert got == want, (now, q.query_id)


def real_time_query(qid: str = "rt", partitions: int = 6, batch_s: float = 10.0, until: float = 300.0,
                    rate: float = 50.0) -> QueryMetrics:
    """A query in Spark 4's real-time mode, as recorded here (tests/data/realtime): a batch every
    ``batch_s``, one task per partition running for the whole batch, whatever the load."""
    batches = []
    for i in range(int(until // (batch_s + 0.3))):
        start = i * (batch_s + 0.3)
        batches.append(BatchRecord(batch_id=i, start=start, duration_s=batch_s + 0.1,
                                   rows=round(rate * batch_s), since_previous_s=batch_s + 0.3 if i else None,
                                   task_s=partitions * batch_s, tasks=partitions, task_wall_s=batch_s,
                                   executors_used=partitions, executors=4))
    return QueryMetrics(query_id=qid, name=qid, trigger_interval_ms=batch_s * 1000, real_time=True,
                        max_stage_tasks=partitions, input_rate=rate, processed_rate=rate,
                        recent_batches=tuple(batches))


def test_a_real_time_mode_query_needs_a_slot_per_task_whatever_its_busy_time() -> None:
    """Its tasks are busy 100 % of the time at any load: sized on the slots they hold (6 tasks:
    2 executors of 4 cores), never from busy time; no model to learn first."""
    for rate in (5.0, 5000.0):
        q = real_time_query(rate=rate)
        history = [MetricSample(t, ClusterMetrics(4, CORES), {"rt": replace(
            q, recent_batches=tuple(b for b in q.recent_batches if b.end <= t))})
            for t in range(100, 310, 10)]
        ev = MicroBatchEvaluator().evaluate(history, scaling_context(300.0, target=4, live=4))
        assert ev.ready and ev.recommended_executors == 2, ev.headline
        assert ev.queries["rt"].required_slots == 6 and "real-time mode" in ev.queries["rt"].note
        assert "6 real-time-mode tasks need 2 executors" in ev.headline


def test_a_micro_batch_query_beside_a_real_time_one_is_sized_as_usual_on_the_slots_left() -> None:
    alone = evaluate([Stream("a", 2000.0)])
    q = real_time_query(partitions=8)
    streams = [Stream("a", 2000.0)]
    history = history_of(streams, 300.0)
    history = [replace(s, queries={**s.queries, "rt": replace(
        q, recent_batches=tuple(b for b in q.recent_batches if b.end <= s.time))}) for s in history]
    both = MicroBatchEvaluator().evaluate(history, scaling_context(300.0, target=4, live=4))
    assert both.ready and both.queries["a"].required_executors == alone.queries["a"].required_executors
    # Its task time at the target plus 8 held slots (2 executors of 4 cores) more than alone.
    assert both.recommended_executors >= alone.recommended_executors + 2


def test_a_batch_that_ended_in_the_window_is_not_one_running_now() -> None:
    # The load stops at 100 s. The last batch with rows starts 5 s before the window of the
    # evaluation at 125 s (20 s) and ends inside it; its tasks' busy time grows until then, as
    # the collector counts running tasks. Nothing runs after it: idle, not "a batch running".
    stream = Stream("a", lambda t: 2000.0 if t < 100.0 else 0.0, per_row_s=0.004)
    batches = [b for b in stream.run(130.0) if b.rows > 0]
    last_batch = batches[-1]
    assert last_batch.start < 105.0 < last_batch.end < 125.0, last_batch
    cfg20 = AutoscalerConfig(max_executors=20, metrics_window_s=20.0)

    def at(t: float, running_after: float | None = None) -> MetricSample:
        done = [b for b in batches if b.end <= t]
        extra = 1000.0 * (t - running_after) if running_after is not None and t > running_after else 0.0
        q = stream.metrics(done, busy_ms(batches, t) + extra)
        return MetricSample(t, ClusterMetrics(4, CORES), {"a": q})

    quiet = [at(float(t)) for t in range(60, 126)]
    ev = MicroBatchEvaluator().evaluate(quiet, scaling_context(125.0, target=4, cfg=cfg20))
    assert "idle" in ev.queries["a"].note and "running" not in ev.queries["a"].note, ev.queries["a"].note
    # A batch that did start after it (its tasks busy from 118 s on, no progress yet) is running.
    busy = [at(float(t), running_after=118.0) for t in range(60, 126)]
    ev = MicroBatchEvaluator().evaluate(busy, scaling_context(125.0, target=4, cfg=cfg20))
    assert "a batch has been running" in ev.queries["a"].note, ev.queries["a"].note


def test_the_headroom_is_in_rows_so_a_batchs_fixed_costs_are_not_held_against_it() -> None:
    # A 1 s trigger, 16 tasks of 0.1 s each whatever their rows, 15 ms a row, 0.25 s on the driver:
    # at 30 rows/s a batch on 1 executor (4 slots, 4 waves) takes 0.25 + (1.6 + 0.45) / 4 = 0.76 s.
    # With 1 / 0.7 of the rows (43) it still ends within the 1 s interval: 1 executor keeps up
    # with the target's headroom. (Asking today's batch to end within 0.7 s held a second one.)
    def rate(t: float) -> float:
        return 20.0 if int(t / 5) % 2 else 40.0  # rows that vary: the fixed part is identifiable

    stream = Stream("a", rate, per_row_s=0.015, fixed_s=1.6, driver_s=0.25, trigger_s=1.0)
    ev = evaluate([stream], until=120.0, live=1, target=1)
    qe = ev.queries["a"]
    assert qe.cost is not None and qe.cost.row_cost_trusted
    assert qe.cost.fixed_task_s == pytest.approx(1.6, rel=0.05)
    assert (qe.required_executors, ev.recommended_executors) == (1, 1), qe.note


def test_utilization_is_the_arrivals_over_what_a_batch_can_take_within_the_interval() -> None:
    # A 1 s trigger, 0.3 s on the driver, 8 tasks of 0.1 s each whatever their rows, 10 ms a row:
    # on 1 executor (4 slots, 2 waves) a batch of R rows takes 0.5 + 0.0025 R s, so at most 200
    # rows end within the interval. At 190 rows/s a batch takes 0.975 s: the executor is nearly
    # used up, and the reading says so (0.7 x 190 / 0.7 / 200 = 0.95, above utilization.max 0.9).
    # The batch's share of the interval, times the target, read 0.7 x 1.18 = 0.82: inside the
    # band, no scale-up until the lag grew.
    def rate(t: float) -> float:
        return 170.0 if int(t / 5) % 2 else 210.0  # rows that vary: the fixed part is identifiable

    stream = Stream("a", rate, per_row_s=0.01, fixed_s=0.8, tasks=8, driver_s=0.3, trigger_s=1.0)
    # A lag budget of two trigger intervals (backlogThreshold 2 s): the period is the trigger.
    ev = evaluate([stream], until=120.0, live=1, target=1, cfg=AT_TRIGGER)
    qe = ev.queries["a"]
    assert qe.cost is not None and qe.cost.row_cost_trusted, qe.note
    assert ev.utilization == pytest.approx(0.95, abs=0.03)
    assert ev.utilization > CFG.utilization_max
    # 2 executors (8 slots, one wave): 0.4 + 271 rows x 10 ms / 8 = 0.74 s for the headroom's rows.
    assert ev.recommended_executors == 2, qe.note
    # Idle arrivals read 0, whatever the fixed costs.
    assert evaluate([Stream("b", 0.0, fixed_s=0.8, tasks=8, driver_s=0.3, trigger_s=1.0)],
                    until=120.0, live=1, target=1, cfg=AT_TRIGGER).utilization in (0.0, None)


def test_where_no_batch_ends_within_the_interval_the_fewest_near_the_shortest_are_chosen() -> None:
    # A 1 s trigger, 8 tasks of 1 s each whatever their rows: no size ends even an empty batch
    # within the interval. On 1 executor (4 slots) a batch takes two waves, about 2.3 s; from 2
    # executors on (8 slots) one wave, about 1.3 s, and more executors shorten nothing.
    def rate(t: float) -> float:
        return 20.0 if int(t / 5) % 2 else 40.0

    stream = Stream("a", rate, per_row_s=0.001, fixed_s=8.0, tasks=8, driver_s=0.3, trigger_s=1.0)
    ev = evaluate([stream], until=120.0, live=4, target=4, cfg=AT_TRIGGER)
    qe = ev.queries["a"]
    assert qe.cost is not None, qe.note
    assert ev.recommended_executors == 2 and qe.capped, qe.note
    assert ev.utilization == pytest.approx(10.0)  # bounded: "more than the executors can do"


def test_a_whole_wave_of_executors_is_not_bought_for_a_few_percent_of_headroom() -> None:
    # 24 tasks on 4-core executors: two waves on 3, 4 or 5 executors, one from 6 on. Batches of
    # the arrivals over the target take 0.73 of the trigger on 3 (more executors up to 5 shorten
    # nothing) and 0.35 on 6: the target asks for 3 x 0.73 / 0.7 = 3.1 executors, nearer 3.
    def rate(t: float) -> float:
        return 1000.0 if int(t / 5) % 2 else 1100.0

    def stream(per_row_s: float, tasks: int = 24) -> Stream:
        return Stream("a", rate, per_row_s=per_row_s, fixed_s=0.5, tasks=tasks, driver_s=0.15, trigger_s=1.0)

    ev = evaluate([stream(0.0067)], until=120.0, live=3, target=3, cfg=AT_TRIGGER)
    assert ev.utilization == pytest.approx(0.73, abs=0.01)
    assert ev.recommended_executors == 3, ev.queries["a"].note
    assert ev.queries["a"].required_executors == 3
    # Past a quarter of the way from the target to utilization.max (0.75), the wave is bought.
    ev = evaluate([stream(0.0075)], until=120.0, live=3, target=3, cfg=AT_TRIGGER)
    assert ev.utilization == pytest.approx(0.81, abs=0.01)
    assert ev.recommended_executors == 6
    # Where the next executor does shorten the batches (12 tasks: two waves on 2, one on 3), the
    # target holds as it is, 0.73 or not.
    ev = evaluate([stream(0.0032, tasks=12)], until=120.0, live=2, target=2, cfg=AT_TRIGGER)
    assert ev.utilization == pytest.approx(0.73, abs=0.01)
    assert ev.recommended_executors == 3


def test_batches_may_run_past_a_short_trigger_within_the_lag_backlog_threshold_allows() -> None:
    # The query above with the default backlogThreshold (60 s): batches back to back 30 s apart at
    # most keep a row waiting at most 60 s. On 1 executor a batch takes two waves of its 8 fixed
    # tasks, 2.3 s, and a 30 s period's headroom rows (at most 40 rows/s / 0.7 x 30 = 1,714 rows,
    # 1.7 s of task time in two waves) add 0.43 s: it fits. Executors that would only shorten the
    # fixed part of batches nobody waits for are not held.
    def rate(t: float) -> float:
        return 20.0 if int(t / 5) % 2 else 40.0

    stream = Stream("a", rate, per_row_s=0.001, fixed_s=8.0, tasks=8, driver_s=0.3, trigger_s=1.0)
    ev = evaluate([stream], until=120.0, live=4, target=4)
    qe = ev.queries["a"]
    assert qe.cost is not None, qe.note
    assert ev.recommended_executors == 1 and not qe.capped, qe.note
    assert ev.utilization < 0.1
    # Rows per batch are still a trigger interval's (what the batches read at the arrivals).
    assert qe.rows_per_batch == pytest.approx(qe.target_rate * 1.0)

    # A read limit that binds caps a batch's rows: a longer batch reads no more, and the query is
    # sized on its trigger (the limit every trigger interval), whatever backlogThreshold allows.
    limited = Stream("b", 1000.0, per_row_s=0.02, tasks=8, trigger_s=5.0, limit=2000.0, backlog0=20_000.0)
    lenient = evaluate([limited], until=150.0, live=1, cfg=replace(CFG, backlog_threshold_s=600.0))
    strict = evaluate([limited], until=150.0, live=1, cfg=replace(CFG, backlog_threshold_s=10.0))
    assert lenient.recommended_executors == strict.recommended_executors > 1


def test_arrivals_kept_between_ticks_are_what_reading_every_batch_gives() -> None:
    """The collector hands unchanged batches over as the same objects and drops the oldest; a
    batch may come again as a new record (a late task end), ids may skip (a restart). Each tick,
    the arrivals kept from the last one plus those read anew are what reading all of them gives."""
    import random

    from sparkscale_listener.concurrency import BatchColumns

    rng = random.Random(3)
    records, start = [], 0.0
    for i in range(80):
        batch_id = i + (5 if i >= 50 else 0)  # ids skip at 50
        records.append(BatchRecord(batch_id=batch_id, start=start, duration_s=1.0, rows=rng.randint(0, 500),
                                   since_previous_s=rng.choice([None, 0.0, 2.0, 2.5]),
                                   backlog=rng.choice([None, float(rng.randint(0, 900))])))
        start += 2.0
    kept = BatchColumns()
    for end in range(1, 81, 3):
        window = records[max(0, end - 16):end]
        if end == 40:  # a late task end: the record of an earlier batch is replaced
            records[end - 6] = replace(records[end - 6], rows=records[end - 6].rows + 7)
            window = records[max(0, end - 16):end]
        assert kept.of("q", tuple(window)) == BatchColumns().of("q", tuple(window)), end
    kept.forget("q")
    assert kept.of("q", tuple(records[:3])) == BatchColumns().of("q", tuple(records[:3]))


def test_the_queries_figures_are_added_row_after_row_whatever_their_number() -> None:
    # One order of addition, so the same figures at every number of queries and sizes (numpy
    # sums a single column pairwise).
    from sparkscale_listener.evaluator.sizing import _sum_rows

    rng = np.random.default_rng(5)
    for rows, columns in ((0, 3), (1, 1), (9, 1), (40, 1), (40, 2), (100, 7)):
        matrix = rng.standard_normal((rows, columns)) * 10.0 ** rng.integers(-8, 8, size=(rows, 1))
        looped = np.zeros(columns)
        for row in matrix:
            looped = looped + row
        assert _sum_rows(matrix).tobytes() == looped.tobytes(), (rows, columns)


def test_fewest_of_every_query_at_once_is_each_query_s_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """The one-pass answer for all queries is :func:`_fewest` of each, including rows where a
    size before the fewest within the target is within the quarter band, and rows none fits."""
    import numpy as np

    from sparkscale_listener.evaluator import sizing
    from sparkscale_listener.evaluator.sizing import _fewest, _fewest_each

    rng = np.random.default_rng(7)
    rows = [np.sort(rng.uniform(0.1, 3.0, 40))[::-1] for _ in range(30)]
    rows += [np.full(40, 0.705), np.linspace(2.0, 0.9, 40), rng.uniform(0.5, 0.9, 40)]
    stepped = np.repeat([1.4, 0.702, 0.702, 0.35], 10)  # two sizes of the same waves, then a shorter one
    rows.append(stepped)
    # Sizes of as many waves near the target, some within the quarter band (0.7125), some not.
    waves = [1.4, 0.72, 0.71, 0.705, 0.702, 0.69, 0.35]
    rows += [np.repeat(rng.choice(waves, size=40), rng.integers(1, 5))[:40] for _ in range(40)]
    rows += [np.repeat([0.705, 0.69], 20)]  # a long stretch of sizes within the band
    utilization = np.array(rows)
    each = [_fewest(r, 0.7, 0.75) for r in utilization]
    assert _fewest_each(utilization, 0.7, 0.75) == each
    # (Some rows get a size before their fewest within the target.)
    sooner = [size < int(np.argmax(r <= 0.7)) + 1 for r, (size, _) in zip(utilization, each, strict=True)]
    assert sum(sooner) > 5
    monkeypatch.setattr(sizing, "_CANDIDATES_AT_ONCE", 3)  # in blocks of a few candidates
    assert _fewest_each(utilization, 0.7, 0.75) == each
    # At a hundred executors a size within the band asks for the next one that helps when that
    # is only a size or two away: what the target asks for is then nearer it.
    wide = []
    for _ in range(40):
        at, stretch = int(rng.integers(40, 150)), int(rng.integers(1, 4))
        row = np.full(200, 1.4)
        row[at:at + stretch] = rng.uniform(0.7001, 0.7125)  # sizes of as many waves, within the band
        row[at + stretch:] = rng.uniform(0.5, 0.7)
        wide.append(row)
    wide_each = [_fewest(r, 0.7, 0.75) for r in wide]
    assert len(set(wide_each)) > 10
    for per_row in (0, 10**6):  # every row through _fewest, every row in the array passes
        monkeypatch.setattr(sizing, "_CANDIDATES_PER_ROW", per_row)
        assert _fewest_each(utilization, 0.7, 0.75) == each
        assert _fewest_each(np.array(wide), 0.7, 0.75) == wide_each
    assert _fewest_each(np.empty((0, 5)), 0.7, 0.75) == []


# -- inputs a simulator does not make ------------------------------------------------------------


def test_a_trigger_longer_than_the_window_is_not_idle_between_its_batches() -> None:
    # 2,000 rows/s all the time, a 10 min trigger: between two batches no batch started in the
    # 60 s window. Read as idle, the query was sized at nothing and scaled down between each two.
    s = Stream("a", 2000.0, trigger_s=600.0, per_row_s=0.002, tasks=32)
    running = evaluate([s], 3050.0, live=8)
    between = evaluate([s], 3300.0, live=8)
    assert running.ready and running.recommended_executors > 1
    assert "idle" not in between.queries["a"].note
    assert between.recommended_executors >= running.recommended_executors


def test_a_load_beyond_every_size_gets_the_most_not_the_fewest() -> None:
    # Far beyond what any size does, every size's utilization is at the cap: tied, and the tie
    # went to 1 executor, fewer than a smaller backlog got.
    def recommended(backlog: float) -> int:
        return evaluate([Stream("a", 2000.0, reports_backlog=False)], 300.0, live=1,
                        external={"backlog.a": backlog}).recommended_executors
    smaller, bigger = recommended(6e7), recommended(1e8)
    assert smaller > 1
    assert bigger >= smaller


@pytest.mark.parametrize("value", [math.inf, math.nan, -5.0])
def test_an_external_backlog_that_is_no_number_is_no_reading(value: float) -> None:
    # A custom collector's figure: inf made every size's utilization NaN, and the tick raised.
    ev = evaluate([Stream("a", 2000.0, reports_backlog=False)], 300.0, external={"backlog.a": value})
    assert ev.ready
    assert "backlog from external metric" not in ev.queries["a"].note


def test_a_batch_starting_before_the_last_one_does_not_stop_the_sweep() -> None:
    # The driver's clock stepped back 6 s (NTP): a batch starts before its predecessor ended, ends
    # come out of order, and the concurrency sweep looked up a record it never made, every tick.
    a, b = Stream("a", 2000.0, trigger_s=5.0), Stream("b", 500.0, trigger_s=5.0, tasks=8)
    evaluator = MicroBatchEvaluator()
    evaluator.evaluate(history_of([a, b], 290.0), scaling_context(290.0, target=4, live=4))
    history = history_of([a, b], 300.0)
    last = history[-1]
    batches = list(last.queries["a"].recent_batches)
    batches[-1] = replace(batches[-1], start=batches[-1].start - 6.0, since_previous_s=None)
    history[-1] = replace(last, queries={**last.queries, "a": replace(last.queries["a"],
                                                                      recent_batches=tuple(batches))})
    for t in (300.0, 310.0):
        assert evaluator.evaluate(history, scaling_context(t, target=4, live=4)).ready


def test_other_jobs_tasks_are_sized_while_every_query_still_learns_its_cost() -> None:
    # A batch job beside a query that has not learnt its cost yet (its batches wait behind the
    # job's tasks): the job's slots need no cost; nothing is given back meanwhile.
    learning = Stream("a", lambda t: 1000.0 if t < 25 else 3000.0, fixed_s=10.0)  # 2 warm batches that differ
    alone = evaluate([learning], until=35.0, target=2, live=2)
    assert not alone.ready and "learning the cost of query" in alone.headline
    beside = evaluate([learning], until=35.0, target=2, live=2, other_tasks=18)
    # 18 slots and those a's tasks keep busy (at the target), 4 an executor.
    assert beside.ready and beside.recommended_executors == 6, beside.headline
    assert "1 query still learning and other jobs' 18 pending or running tasks" in beside.headline
    quiet = evaluate([learning], until=35.0, target=8, live=8, other_tasks=1)
    assert quiet.ready and quiet.recommended_executors == 2 and quiet.still_learning == ("query a",)
    held = ScalingPolicy().decide(quiet, scaling_context(35.0, target=8, live=8))  # held while a learns
    assert held.action == "none" and held.reason.endswith("held at 8: query a still learning"), held.reason


def test_a_query_still_learning_holds_no_decision_of_the_others_only_their_scale_down() -> None:
    # b's batches carry no task figures (never measured): "not ready: learning the cost of query b"
    # held every decision, for the application's life. Now a is sized, b's busy slots counted, and
    # nothing is given back while b is unmeasured.
    a, b = Stream("a", 3000.0, trigger_s=10.0), Stream("b", 100.0, trigger_s=10.0, tasks=4)

    def unmeasured_b(live: int) -> Evaluation:
        history = [replace(s, queries={**s.queries, "b": replace(s.queries["b"], recent_batches=tuple(
            replace(x, task_s=None, tasks=None) for x in s.queries["b"].recent_batches))})
            for s in history_of([a, b], 300.0, live=live)]
        return MicroBatchEvaluator().evaluate(history, scaling_context(300.0, target=live, live=live))

    short = unmeasured_b(1)
    assert short.ready and short.recommended_executors == 2
    assert "1 query still learning" in short.headline
    ample = unmeasured_b(4)
    assert ample.ready and ample.recommended_executors == 2 and ample.still_learning == ("query b",)
    held = ScalingPolicy().decide(ample, scaling_context(300.0, target=4, live=4))  # the policy holds
    assert held.action == "none" and held.reason.endswith("held at 4: query b still learning"), held.reason


def test_a_trigger_longer_than_the_window_holds_no_decision_after_a_change() -> None:
    # After a change every query confirms the new size with two batches: with a 10 min trigger
    # beside a 10 s one, no decision for 20 minutes after each change.
    fast = Stream("a", 3000.0, trigger_s=10.0)
    slow = Stream("b", 50.0, trigger_s=600.0, tasks=4)
    history = history_of([fast, slow], 4300.0, live=2)  # b's cost learned (7 batches)
    change = ScalingRecord(4260.0, "scale_up", 1, 2, "r")

    def after(window_start: float) -> Evaluation:
        return MicroBatchEvaluator().evaluate(history, replace(
            scaling_context(4300.0, target=2, live=2, window_start=window_start), last_scaling=change))

    confirmed = after(4270.0)  # a: batches at 4270, 4280, 4290; b: none since 3600
    assert confirmed.ready, confirmed.headline
    assert confirmed.queries["b"].cost is not None
    waiting = after(4285.0)
    assert not waiting.ready and "query a" in waiting.headline  # the fast one still confirms


def test_the_size_scan_reads_each_querys_figures_as_the_one_query_path_does(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The formulas are written once (model.CostFormulas, _fraction_of_period, _busy_fraction) and
    # the scan applies them to columns of all queries; what is left to hold is the scan's columns:
    # each query's rows, periods, trigger and arrivals as the one-query path reads them from its
    # demand. The same figures, exactly, with and without a trigger, a fresh period, batches beside,
    # in blocks of a few queries (a block's rows are not all of the scan's).
    monkeypatch.setattr("sparkscale_listener.evaluator.utilization.BLOCK_FIGURES", 37)
    rng = random.Random(11)
    compared = 0
    for _ in range(40):
        costs = []
        for _ in range(rng.randint(1, 6)):
            seen = rng.sample(range(1, 40), rng.randint(0, 3))
            tasks = rng.choice([1, 4, 32, 200])
            costs.append(BatchCost(rng.uniform(0, 2), rng.uniform(0, 3), rng.uniform(0, 0.2),
                                   rng.choice([0.0, 1e-4, 2e-3]), tasks, rng.randint(1, tasks),
                                   rng.choice([1, 2, 4]), rng.uniform(1, 1.6), 0.1, 20, True, tuple(seen),
                                   {k: rng.uniform(1, 2) for k in seen}))
        demands = [SimpleNamespace(idle=False, target=rng.uniform(0, 5000), limit_binds=False,
                                   read_limit=None, sized_rate=rng.choice([0.0, 2.0, 50.0, 800.0]),
                                   trigger_s=rng.choice([None, 0.0, 1.0, 10.0]),
                                   period_s=rng.choice([None, 30.0]), fresh_period_s=rng.choice([None, 15.0]),
                                   rows_per_period=lambda: 100.0, rows_per_fresh_period=lambda: 60.0)
                   for _ in costs]
        for d in demands:
            d.arrival_span = MethodType(Demand.arrival_span, d)  # the demand's own rule
        sizes = np.arange(1.0, rng.randint(1, 80) + 1.0)
        queries = ScanQueries(list(zip(demands, costs, strict=True)), 0.7)  # type: ignore[arg-type]
        scan = Scan(queries, sizes, [c.efficiency_upto(len(sizes)) for c in costs])
        utilization = scan.utilization(np.zeros((len(costs), len(sizes))), np.zeros(len(costs)))
        busy = scan.busy_slots()
        for column in (0, len(sizes) // 2, len(sizes) - 1):
            got = scan.steady_batch_time([d.target for d in demands], [d.trigger_s for d in demands], column)
            assert got == [c.steady_batch_time(d.target, column + 1, d.trigger_s)
                           for d, c in zip(demands, costs, strict=True)]
        # Other queries' batches alongside (their task time at each size, none at some sizes).
        beside = np.array([[rng.choice([0.0, rng.uniform(0, 50)]) for _ in sizes] for _ in costs])
        beside_tasks = np.array([float(rng.randint(0, 100)) for _ in costs])
        shared = scan.utilization(beside, beside_tasks)
        compared += sum(queries.common)
        for i, (d, c) in enumerate(zip(demands, costs, strict=True)):
            if queries.common[i]:
                assert np.array_equal(query_utilization(d, c, sizes, 0.7), utilization[i])  # type: ignore[arg-type]
                assert np.array_equal(query_busy_slots(d, c, sizes), busy[i])  # type: ignore[arg-type]
                alongside = Concurrent(beside[i], int(beside_tasks[i]))
                assert np.array_equal(query_utilization(d, c, sizes, 0.7, alongside),  # type: ignore[arg-type]
                                      shared[i])
    assert compared > 40


def test_a_query_alone_gets_its_unchanged_batches_back_as_the_same_objects() -> None:
    # The learner skips, unread, the leading batches that are the very objects it was given last
    # time; a query alone got new ones every tick, and a learner that had forgotten the oldest ids
    # took them again as new batches.
    from sparkscale_listener.concurrency import with_concurrency
    from sparkscale_listener.model import BatchCostLearner

    batches = tuple(BatchRecord(batch_id=i, start=float(i), duration_s=0.5, rows=100 + i, task_s=1.0 + i / 10,
                                tasks=4, task_wall_s=0.4, executors=2) for i in range(12))
    q = QueryMetrics(query_id="q", recent_batches=batches)
    known: dict = {}
    given: dict = {}
    learner = BatchCostLearner(max_batches=2)  # remembers the ids of the last 8 batches it saw
    first = with_concurrency([q], known, given)["q"].batches
    assert learner.add(first) == 10  # all but the first two (warm-up)
    again = with_concurrency([q], known, given)["q"].batches
    assert all(a is b for a, b in zip(first, again, strict=True))
    assert learner.add(again) == 0
    later = QueryMetrics(query_id="q",
                         recent_batches=(*batches[2:], replace(batches[-1], batch_id=12, start=12.0)))
    swept = with_concurrency([later], known, given)["q"].batches
    assert all(a is b for a, b in zip(swept[:-1], first[2:], strict=True)) and swept[-1][0].batch_id == 12


def test_a_tick_alone_changes_nothing_the_sweep_had_found() -> None:
    # b is inactive for a tick: a is alone, then b comes back with a new batch, its old one gone
    # from its window. a's first batch keeps the share of b's old batch found before, as it does
    # without the tick alone.
    from sparkscale_listener.concurrency import with_concurrency

    def batch(i: int, start: float, duration: float, task_s: float) -> BatchRecord:
        return BatchRecord(batch_id=i, start=start, duration_s=duration, rows=10, task_s=task_s, tasks=4,
                           task_wall_s=duration)

    a0, a1, a2 = batch(0, 0.0, 2.0, 4.0), batch(1, 2.0, 2.0, 4.0), batch(2, 4.0, 2.0, 4.0)
    b0, b1 = batch(0, 0.5, 1.0, 3.0), batch(1, 10.0, 1.0, 3.0)
    first = [QueryMetrics("a", recent_batches=(a0, a1)), QueryMetrics("b", recent_batches=(b0,))]
    alone = [QueryMetrics("a", recent_batches=(a0, a1, a2))]
    back = [QueryMetrics("a", recent_batches=(a0, a1, a2)), QueryMetrics("b", recent_batches=(b1,))]
    figures = []
    for ticks in ([first, alone, back], [first, back]):
        known: dict = {}
        given: dict = {}
        for queries in ticks:
            swept = with_concurrency(queries, known, given)
        figures.append([(b.batch_id, s, n) for b, s, n in swept["a"].batches])
    assert figures[0] == figures[1] and figures[0][0] == (0, 3.0, 4)
