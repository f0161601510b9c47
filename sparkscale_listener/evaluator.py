"""Evaluation: from each query's recent batches to the executors the application needs.

:class:`MetricEvaluator` is the pluggable interface (``spark.sparkscale.evaluator``);
:class:`MicroBatchEvaluator` is the default. It sizes on the micro-batch performance model
(:mod:`.model`): per query, the rate to follow is the arrival rate its batches show (each batch
reads what arrived since the previous one started, so two batches show a step, no window needed)
plus what a backlog asks for (Flink's catch-up and provisioning terms), and the size it needs is the
fewest executors whose predicted batch time for the rate over ``utilization.target`` keeps within
its batch period (its trigger interval, or half of ``backlogThreshold`` where longer or where there
is no trigger: batches may run back to back, a row waiting at most ``backlogThreshold``), and for
the rate itself within a quarter of ``backlogThreshold`` (the lag's peaks within half of it). Queries
share the executors: the application needs what its most demanding query needs, and enough slots
for all of their task time at the target.

Why one module of ~600 lines: it is one pass (each query's demand, then one size for all of them, then the
explanation of that size), and each step reads the previous one's figures; the model it sizes with
(:mod:`.model`) and the sweep of queries sharing executors (:mod:`.concurrency`) are modules of their own.
"""

from __future__ import annotations

import bisect
import itertools
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from statistics import median
from typing import Any

import numpy as np

from . import readable
from .concurrency import Alongside, BatchColumns, Given, Swept, with_concurrency
from .decisions import Evaluation, Outcome, QueryEvaluation, ScalingContext
from .metrics import RISING, BatchRecord, LatestOffsets, MetricSample, QueryMetrics
from .model import (
    MIN_BATCHES,
    NONE_CONCURRENT,
    BatchCost,
    BatchCostLearner,
    Concurrent,
    CostColumns,
    CostFormulas,
    Size,
    executors_for,
    fit_all,
    ops,
)

# Batches at the current size needed after a change before a decision (the arrival rate of one
# batch can be noise; two consecutive ones show a step).
CONFIRMING_BATCHES = 2
# The latest batch this much longer than the window's typical one: the load is rising, as with
# arrivals RISING above the window's (metrics.py), no scale-down.
LENGTHENING = 0.5
# The shortest span of a source's latest offsets read as an arrival rate: the bridge reads them every
# second, and a shorter span holds too few rows to tell a rise from jitter.
SOURCE_SPAN_S = 1.0
# Utilization figures in reasons and gauges are bounded: a query that cannot keep up at all is
# "at least this" busy, never 170x.
MAX_UTILIZATION = 10.0
# When no size keeps a query within the target, it gets the fewest executors within this share of
# the best utilization any size gives.
NEAR_BEST = 0.05
# backlogThreshold is the lag a user accepts, a bound and not the operating point. Back to back, a
# batch reads what arrived during the one before, so a row waits at most two batch periods. At the
# arrivals themselves, batches may run at most this share of it apart (the lag's peaks within half of
# it), where that is longer than the trigger or there is none; at the arrivals over
# utilization.target (the headroom for bursts), at most HEADROOM_PERIOD_SHARE of it apart (the lag
# within all of it). The room between is for bursts and for new executors to start.
FRESH_PERIOD_SHARE = 0.25
HEADROOM_PERIOD_SHARE = 0.5
# Batches of a source that reports no backlog, each started at most this long after the one before
# it ended, all of the same rows while the spans between their starts varied by LIMIT_EVIDENCE or
# more: a read limit binds, and what waits behind it is unseen. (Rows that come as they arrive
# follow the spans: a steady source read back to back gives batches of the same rows only while
# the spans are the same too, and then no telling is possible: it is taken as keeping up.)
BACK_TO_BACK_S = 0.25
LIMIT_EVIDENCE = 0.03
# Batches needed in the window to tell a binding limit from a few that happened to read alike.
LIMIT_BATCHES = 3
# Sizes whose utilization is within this share take as many waves of tasks (they differ by the
# per-executor cost and the efficiency fitted at each): more executors there shorten nothing.
SAME_WAVES = 0.01
# Sizes evaluated at most (the useful ones, up to the widest stage, are fewer).
MAX_SCANNED = 2000
# Sizes before a query's fewest within the target compared with every later size at once (a
# block of this many x the sizes scanned: 2 MB at 1,000 sizes), of queries with at most
# _CANDIDATES_PER_ROW of them (usually one or two).
_CANDIDATES_AT_ONCE = 256
_CANDIDATES_PER_ROW = 4
_EPS = 1e-9


class MetricEvaluator(ABC):
    """Turns the collected metric history into an :class:`Evaluation` (the pluggable evaluator).

    Implement :meth:`evaluate` and name the class in ``spark.sparkscale.evaluator``
    (``package.module.ClassName``); it is constructed like every plugin, ``cls(context)`` with a
    :class:`~sparkscale_listener.config.plugins.PluginContext` (or ``cls()``). Its own keys live under
    ``spark.sparkscale.evaluator.*``: declare them as ``options`` and read them with
    ``context.options.read(self.options)`` (keys it does not read fail at startup).

    Contract:

    * ``evaluate`` is called once per control tick, from the control-loop thread only (never
      concurrently), so an implementation may keep state between calls (the default keeps each
      query's cost model). It must be fast (well under the tick interval) and should not raise:
      an exception is logged and the tick is skipped.
    * ``history`` is ordered oldest first and ends with the sample of this tick. Samples and
      batches older than ``context.window_start`` ran on another number of executors (before the
      last change, or during stabilization). Each query's ``recent_batches`` carries its latest
      completed batches with their own executor counts.
    * Counters in :class:`~sparkscale_listener.metrics.QueryMetrics` and
      :class:`~sparkscale_listener.metrics.ClusterMetrics` are cumulative: take rates as
      ``(last - first) / (t_last - t_first)``. Gauges (backlog, live executors) are instants.
      ``sample.external`` carries extra metrics from a custom collector.
    * Return ``ready=False`` (with a reason, ``recommended_executors`` = ``context.current_target``)
      when there is not enough data; the policy then does nothing. Otherwise set
      ``recommended_executors`` within ``[config.min_executors, config.max_executors]`` and
      ``utilization`` = how busy the current executors are against the target (1 = all of the
      time the target allows); the policy applies the utilization band, the scale-up/down factors,
      the delayed scale-down and the ineffective-scale-up blocks. A recommendation above what
      ``required_slots`` explain is applied even inside the band (a floor, a forecast).
    * Fill ``queries`` for every active query when you can: the policy uses each query's
      ``input_rate`` (processed rows/s), ``target_rate``, ``catch_up_rate``, ``required_slots``,
      ``capped``, ``backlog_mode`` and ``rising``, and the UI shows them. Write reasons a person can
      act on.
    """

    @abstractmethod
    def evaluate(self, history: Sequence[MetricSample], context: ScalingContext) -> Evaluation:
        """Evaluate the latest sample (and what came before) and recommend an executor count."""


@dataclass
class _Demand:
    """One query's load, as its batches show it (working state of one evaluation)."""

    q: QueryMetrics
    window_rate: float  # arrivals over the metrics window, rows/s
    recent_rate: float  # the last two batches' arrival rate: the newer after a step, else the lower
    rate: float  # the arrival rate sized on: the higher of the two
    processed_rate: float  # rows/s its batches read over the window
    backlog: float | None
    growth: float  # rows/s the backlog grew by over the window
    catch_up: float  # rows/s that work the backlog off within catchUpDuration
    provisioning: float  # rows/s arriving while new executors start, spread over catchUpDuration
    read_limit: float | None  # rows a batch reads at most, when the source's limit binds
    saturated: bool  # a read limit binds where no backlog is reported: rows wait unseen
    trigger_s: float | None
    # The longest batch period sized for at the arrivals over the target: the trigger interval, or
    # half of backlogThreshold where that is longer or there is no trigger (batches back to back;
    # see :meth:`MicroBatchEvaluator._utilization`). None: neither (no trigger, backlogThreshold 0).
    period_s: float | None
    # At the arrivals themselves: a quarter of backlogThreshold where that is longer than the
    # trigger or there is none (the lag's peaks within half of it); None: the trigger sets it.
    fresh_period_s: float | None
    batch_time_s: float | None  # median of the window's batches
    rising: bool
    idle: bool
    backlog_mode: bool
    arrivals_seen: bool  # two consecutive batches came: the arrivals are measured
    measured_until: float | None  # the start of its latest completed batch
    utilization_target: float
    notes: list[str] = field(default_factory=list)
    signal: str = ""  # what, beside the arrivals, drives its size (for the decision's reason)

    @property
    def target(self) -> float:
        """Rows/s the batches read: the arrivals, the catch-up, the provisioning term."""
        return self.rate + self.catch_up + self.provisioning

    @property
    def sized_rate(self) -> float:
        """The rate sizing divides by ``utilization.target``: that quotient is Flink's target
        capacity, the arrivals with the headroom plus the catch-up and provisioning rows without
        it (a backlog is worked off once; it asks for no headroom of its own)."""
        return self.rate + self.utilization_target * (self.catch_up + self.provisioning)

    def rows_per_batch(self) -> float | None:
        """Rows a batch must read each trigger interval to follow the target rate (at most the
        read limit); None for a query without a trigger."""
        return self._per_trigger(self.target)

    def rows_per_period(self) -> float | None:
        """Rows a batch reads at :attr:`sized_rate` when batches run :attr:`period_s` apart."""
        if self.period_s and self.period_s > (self.trigger_s or 0.0):
            return self._capped(self.sized_rate * self.period_s)
        return self._per_trigger(self.sized_rate)

    def rows_per_fresh_period(self) -> float:
        """Rows a batch reads at :attr:`target` (no headroom) when batches run
        :attr:`fresh_period_s` apart (0 without one)."""
        if not self.fresh_period_s:
            return 0.0
        return self._capped(self.target * self.fresh_period_s)

    def arrival_span(self, rows: float, period: float) -> float:
        """Seconds ``rows`` take to arrive at :attr:`sized_rate`, at most ``period``: sooner than the
        period where a read limit caps a batch's rows, and batches of the limit follow one another
        that often."""
        return min(period, rows / self.sized_rate) if self.sized_rate > 0 else period

    def _capped(self, rows: float) -> float:
        return min(rows, self.read_limit) if self.read_limit else rows

    def _per_trigger(self, rate: float) -> float | None:
        if not self.trigger_s:
            return None
        if self.saturated and self.read_limit:
            return self.read_limit
        rows = rate * self.trigger_s
        return min(rows, self.read_limit) if self.read_limit else rows

    @property
    def limit_binds(self) -> bool:
        """Rows wait behind the read limit (a reported backlog, or an unseen one: :attr:`saturated`):
        batches of the limit, back to back."""
        return bool(self.read_limit)


class MicroBatchEvaluator(MetricEvaluator):
    """The default evaluator: sizes each query on its performance model (see the module docstring)."""

    def __init__(self) -> None:
        self._learners: dict[str, BatchCostLearner] = {}
        self._costs: dict[str, BatchCost | None] = {}
        self._batches: dict[str, dict[int, Alongside]] = {}  # the last batches, with concurrency
        self._given: dict[str, Given] = {}  # the batches they were made of
        self._columns = BatchColumns()
        self._measured: float | None = None  # the time of the change whose outcome was returned
        # Per query, the rows every batch it read came in multiples of (a file source's file; 1 for
        # rows one by one): the greatest common divisor of all its batches' rows so far.
        self._units: dict[str, int] = {}

    def cost(self, query_id: str) -> BatchCost | None:
        """The latest fitted cost of a query (for the UI and the replay), or None."""
        return self._costs.get(query_id)

    def evaluate(self, history: Sequence[MetricSample], context: ScalingContext) -> Evaluation:
        last = history[-1]
        active = [q for q in last.queries.values() if q.active and not q.real_time]
        # Real-time-mode queries are not sized on their busy time (always 100 %): each of their
        # batch's tasks holds a slot for the whole batch, so they need exactly those slots.
        held = {q.query_id: q for q in last.queries.values() if q.active and q.real_time}
        self._forget(last)
        # Batches overlapping a change of executors tell no size's cost; before any scaling, the
        # start-up's (executors registering, or leaving after the baseline).
        change = ((context.last_scaling.time if context.last_scaling else -math.inf), context.window_start)
        demands: list[_Demand] = []
        costs: dict[str, BatchCost | None] = {}
        waiting: list[str] = []
        stabilizing: list[str] = []
        learning: dict[str, float] = {}  # queries not sized yet: the slots their tasks keep busy
        concurrent = with_concurrency(active, self._batches, self._given)
        learners = []
        for q in active:
            learner = self._learners.get(q.query_id)
            if learner is None:
                learner = self._learners[q.query_id] = BatchCostLearner()
            learner.add(concurrent[q.query_id].batches, exclude=change)
            learners.append((learner, context.slots_per_executor, q.max_stage_tasks))
        # Every query due a new fit fitted at once (one array pass).
        for q, cost in zip(active, fit_all(learners), strict=True):
            costs[q.query_id] = self._costs[q.query_id] = cost
        for q, (learner, _, _) in zip(active, learners, strict=True):
            cost = costs[q.query_id]
            demand = self._demand(q, last, history, context, cost)
            demands.append(demand)
            if demand.idle:
                continue
            if cost is None or not demand.arrivals_seen:
                waiting.append(f"learning the cost of {readable.query(q.name, q.query_id)} "
                               f"({len(learner.batches)} of {MIN_BATCHES} warm batches)")
                learning[q.query_id] = _slots_kept_busy(q, history, context.config.metrics_window_s)
                continue
            if demand.trigger_s and demand.trigger_s > context.config.metrics_window_s:
                # Two batches of a trigger longer than the window are too far apart to wait for
                # (a 10 min one held every query's decision 20 min after each change): sized on
                # its model, which arrivals and a new size do not change, and checked when they come.
                continue
            confirmed = 0  # batches since the window start, newest first: the first few tell
            for b in reversed(q.recent_batches):
                if confirmed >= CONFIRMING_BATCHES or b.start < context.window_start:
                    break
                confirmed += 1
            if confirmed < CONFIRMING_BATCHES:
                stabilizing.append(f"stabilizing: {confirmed} of {CONFIRMING_BATCHES} batches of "
                                   f"{readable.query(q.name, q.query_id)} on the new size")
        # Every query still learning: not ready, unless other jobs' tasks (a batch job) or real-time
        # queries ask for slots, which need no cost. Held, a batch job could come and go unseen
        # while a query beside it learnt (its batches waiting behind the job's tasks).
        others = held or _other_tasks(history, context.config.metrics_window_s) > 0
        if len(learning) == sum(not d.idle for d in demands) and learning and not others:
            return self._not_ready(context, waiting)
        if stabilizing or math.isinf(context.window_start):
            # The new size is not measured yet; but arrivals do not depend on it: when two batches
            # confirm more than the last change was sized for, the model sizes for them now.
            if not self._outgrown(demands, context) and not self._cut_short(demands, context):
                settling = ("waiting for the executors beyond the target to leave"
                            if context.live_executors > context.current_target
                            else "waiting for the requested executors to register")
                whys = [settling] if math.isinf(context.window_start) else stabilizing
                return self._not_ready(context, whys)
        if not active:
            return self._size([], {}, history, context, "" if held else "no active streaming query", held)
        evaluation = self._size(demands, {qid: c for qid, c in costs.items() if qid not in learning},
                                history, context, "", held, learning)
        if learning and evaluation.recommended_executors < context.current_target:
            # A query still learning its cost blocked every decision before (for the application's
            # life when it never could learn): the others are sized, never below the current size.
            names = ", ".join(readable.query(last.queries[q].name, q) for q in learning)
            evaluation = replace(evaluation, recommended_executors=context.current_target,
                                 headline=f"{evaluation.headline}; held at {context.current_target}: "
                                          f"{names} still learning")
        outcomes = self._outcomes(last, context, concurrent)
        return replace(evaluation, outcomes=outcomes) if outcomes else evaluation

    @staticmethod
    def _outgrown(demands: list[_Demand], context: ScalingContext) -> bool:
        """Some query's confirmed arrivals exceed what the last change was sized for by more than
        the band allows (``utilization.max`` over the target: measured on the new size, the policy
        would scale up at once). A scale-down counts too: a step that comes while its executors go
        would otherwise wait for two batches on the smaller size, each longer than the one before
        (on a real Kafka log, 160 s). And a step sized on a running batch's lower bound gets the
        rest as soon as the next batch shows it (on real Spark, 1 -> 3 on 91 rows/s, then 120
        rows/s waited 13 s for two batches on 3 executors before 3 -> 6)."""
        rec = context.last_scaling
        if rec is None or rec.action not in ("scale_up", "scale_down") or not rec.predictions:
            return False
        band = context.config.utilization_max / context.config.utilization_target
        for d in demands:
            prediction = rec.predictions.get(d.q.query_id)
            if prediction is not None and d.recent_rate + d.catch_up > band * prediction.rate:
                d.notes.append(f"arrivals {readable.rate(d.recent_rate)} outgrew the "
                               f"{readable.rate(prediction.rate)} the last {rec.action.replace('_', '-')} "
                               "was sized for")
                return True
        return False

    @staticmethod
    def _cut_short(demands: list[_Demand], context: ScalingContext) -> bool:
        """The last scale-up gave a query fewer executors than it needed (``scaleUp.maxFactor``
        limited it) and they have registered: the rest follows now. The size is the model's and
        the arrivals', which the new executors' batches do not change; waiting for two of them,
        long while the backlog that made the need drains, only leaves the lag to grow (on real
        Spark, 9-11 s on 4 executors of the 6 a x4 step needed)."""
        rec = context.last_scaling
        if (rec is None or (short := rec.cut_short()) is None or math.isinf(context.window_start)
                or rec.to_executors >= context.config.max_executors):
            return False
        qid, needed = short
        for d in demands:
            if d.q.query_id == qid:
                d.notes.append(f"the last scale-up, to {rec.to_executors}, was cut short of the "
                               f"{needed} executors it needed")
        return True

    def _outcomes(self, last: MetricSample, context: ScalingContext,
                  batches: dict[str, Swept]) -> dict[str, Outcome]:
        """What the last change did, per query it predicted something for, once the new size has
        run :data:`CONFIRMING_BATCHES` warm batches: their median batch time against the
        prediction of the model the change rested on, for the rows they actually read.

        Once per change, at the first evaluation that measures it: the control loop reports that
        outcome and the policy judges the scale-up on it. (Measured again at every tick until the
        next change, nothing read it, and at 100 queries it took a third of each such tick.)"""
        rec = context.last_scaling
        if rec is None or not rec.predictions or rec.time == self._measured:
            return {}
        threshold = context.config.ineffective_scale_up_threshold
        out: dict[str, Outcome] = {}
        for qid, prediction in rec.predictions.items():
            q, learner = last.queries.get(qid), self._learners.get(qid)
            if q is None or learner is None:
                continue
            swept = batches.get(qid)
            warm = [(b, task_s, tasks) for b, task_s, tasks in (swept.batches if swept else ())
                    if b.start >= context.window_start and learner.warm(b)]
            if len(warm) < CONFIRMING_BATCHES:
                continue
            cost = prediction.cost
            rows = median(b.rows for b, _, _ in warm)
            observed = median(b.duration_s for b, _, _ in warm)
            # What the model said, for the rows and the other queries' batches that came, on the
            # executors that came (a capacity limit may have held the target below the request).
            arrived = [b.executors or rec.to_executors for b, _, _ in warm]
            size = round(median(arrived))
            # Every batch at once (the model's formulas take arrays: the same figures, one numpy
            # pass instead of two scalar ones per batch, every tick until the next change).
            read = np.array([float(b.rows) for b, _, _ in warm])
            alongside = Concurrent(np.array([task_s for _, task_s, _ in warm], dtype=float),
                                   np.array([float(tasks) for _, _, tasks in warm]))
            predicted = median(np.asarray(cost.batch_time(read, np.array(arrived, dtype=float),
                                                          alongside)).tolist())
            before = median(np.asarray(cost.batch_time(read, rec.from_executors,
                                                       alongside)).tolist())
            tolerance = cost.error * before
            gain = before - predicted
            judged = (rec.action == "scale_up" and size > rec.from_executors
                      and prediction.needed_executors > rec.from_executors and gain > tolerance)
            if judged:
                effective = before - observed >= threshold * gain - tolerance
                verdict = (f"batches of {rows:.0f} rows took {observed:.2f}s on {size} executors; the model "
                           f"expected {predicted:.2f}s (and {before:.2f}s on {rec.from_executors}, error "
                           f"{cost.error:.0%}): " + ("effective" if effective else
                                                    f"less than {threshold:.0%} of the expected gain"))
            else:
                effective = True
                verdict = (f"batches of {rows:.0f} rows took {observed:.2f}s on {size} executors; the model "
                           f"expected {predicted:.2f}s (error {cost.error:.0%})")
            out[qid] = Outcome(query_id=qid, batches=len(warm), rows_per_batch=rows, batch_time_s=observed,
                               predicted_s=predicted, predicted_before_s=before, effective=effective,
                               verdict=verdict)
        if out:
            self._measured = rec.time
        return out

    # -- one query's load --------------------------------------------------------------------------

    def _demand(self, q: QueryMetrics, last: MetricSample, history: Sequence[MetricSample],
                context: ScalingContext, cost: BatchCost | None = None) -> _Demand:
        cfg = context.config
        live = context.live_executors
        batches = list(q.recent_batches)
        trigger_s = q.trigger_interval_ms / 1000.0 if q.trigger_interval_ms else None
        # At least two trigger intervals: a shorter window holds no batch between two of a long
        # trigger's (10 min), and the query read as idle, and was scaled down, between each two.
        horizon = last.time - max(cfg.metrics_window_s, 2.0 * (trigger_s or 0.0))
        cols = self._columns.of(q.query_id, q.recent_batches)
        arrived = bool(cols.arrival_starts)  # two consecutive batches came
        # The window: the arrivals and the batches that started in it, as columns.
        rows_in, seconds_in = _since(horizon, cols.arrival_starts, cols.arrival_rows, cols.arrival_seconds)
        columns = (cols.starts, cols.rows, cols.durations, cols.backlogs, batches)
        window_starts, window_rows, durations, window_backlogs, window_batches = _since(
            horizon, cols.starts, *columns)
        notes: list[str] = []
        running = False
        if not rows_in and arrived:
            # No batch started in the window: nothing arrived (a source with nothing new starts no
            # batch), or one batch has been running all along; its tasks' busy time tells which.
            # Counted from a sample after the last batch's end where there is one: that batch's own
            # tasks, when it started before the window and ended in it, are no batch running now.
            after_end = [s for s in history if max(horizon, batches[-1].end) <= s.time < last.time]
            first = (after_end[0] if after_end else next((s for s in history if s.time >= horizon), last))
            running = q.busy_ms > first.queries.get(q.query_id, q).busy_ms
            if running:
                rows_in, seconds_in = cols.arrival_rows[-2:], cols.arrival_seconds[-2:]
                window_starts, window_rows, durations, window_backlogs, window_batches = (
                    c[-2:] for c in columns)
                notes.append(f"a batch has been running for {last.time - batches[-1].end:.0f}s")
        latest = ([r / t for r, t in zip(cols.arrival_rows[-2:], cols.arrival_seconds[-2:], strict=True)]
                  if rows_in else [])
        # A jump in the latest batch alone is not a step yet (noise, a burst): it counts neither
        # for a scale-up nor allows a scale-down until the next batch confirms or denies it, so a
        # step is sized in one action, on two batches.
        sized_on = len(rows_in)  # how many of the window's arrivals
        # The batch running now, from the work of its ended tasks: at least this rate arrived
        # before it started. It confirms a jump a batch sooner than its progress would; on one
        # executor after a x4 step, that batch alone ran 4-6 s.
        reading = _in_flight_rate(q, batches, cost, live, window_batches) if latest else None
        # What arrived since the latest batch started, by the source's latest offsets read between
        # batches (Kafka): the next batch's arrivals before it completes, or even starts.
        source_rates = _source_rates(history, q, batches[-1].start) if batches else []
        confirmed_by = None
        if len(latest) == 2 and len(rows_in) >= 2:
            before = sum(rows_in[:-1]) / max(sum(seconds_in[:-1]), _EPS)
            jump = (1.0 + RISING) * max(before, _EPS)
            if latest[1] > jump >= latest[0]:
                if reading is not None and reading[0] > jump:
                    confirmed_by = reading[1]
                    notes.append(f"the latest batch read {readable.rate(latest[1])}, the window before it "
                                 f"{readable.rate(before)}; the batch running now confirms it: its ended "
                                 f"tasks read at least {readable.rate(reading[0])}, all of its tasks "
                                 f"{readable.rate(reading[1])} at that pace")
                elif source_rates and source_rates[-1] > jump:
                    confirmed_by = source_rates[-1]
                    notes.append(f"the latest batch read {readable.rate(latest[1])}, the window before it "
                                 f"{readable.rate(before)}; its source confirms it: "
                                 f"{readable.rate(source_rates[-1])} arrived since, by its latest offsets")
                else:
                    sized_on = len(rows_in) - 1
                    notes.append(f"the latest batch read {readable.rate(latest[1])}, the window before it "
                                 f"{readable.rate(before)}: sized once the next batch confirms it")
        seconds = sum(seconds_in[:sized_on])
        window_rate = sum(rows_in[:sized_on]) / seconds if seconds > 0 else 0.0
        rise = (1.0 + RISING) * max(window_rate, _EPS)  # arrivals above this are rising
        # Two spans of the source's offsets since the latest batch started both above it: a rise
        # the source confirms (one span alone may be a burst, as one batch may).
        source_rose = len(source_rates) >= 2 and min(source_rates[-2:]) > rise
        recent = window_rate
        if len(latest) == 2 and sized_on == len(rows_in):
            # Two consecutive batches at a new rate confirm it: the lower of them, unless both
            # rose above the window before them (a step). Then the first of them read across the
            # step, part of it at the old rate, and the newer one alone tells the new rate (sized
            # on the lower, a real x10 step took three scale-ups).
            before_both = sum(rows_in[:-2]) / max(sum(seconds_in[:-2]), _EPS)
            stepped = len(rows_in) > 2 and min(latest) > (1.0 + RISING) * max(before_both, _EPS)
            recent = latest[1] if stepped else min(latest)
            if confirmed_by is not None:
                # The latest batch may have read across the step: the higher of it and the running
                # one's estimate; a later batch corrects it (see _outgrown). On the lower bound
                # alone, a real step took 1 -> 2 -> 3 -> 6.
                recent = max(latest[1], confirmed_by)
        if source_rose and source_rates[-1] > recent:
            # A step, confirmed without waiting for the batches that read it (at a 5 s trigger, the
            # first of them ran 12 s on the executors sized for the load before). The newer span
            # alone tells the new rate, as the newer batch does after a step.
            recent = source_rates[-1]
            notes.append(f"its source's latest offsets show {readable.rate(source_rates[-2])} then "
                         f"{readable.rate(source_rates[-1])} arriving since the latest batch started, "
                         f"the window {readable.rate(window_rate)}: sized on it now")
        rate = max(window_rate, recent)
        seconds = sum(seconds_in)
        processed = sum(window_rows) / seconds if seconds > 0 else 0.0
        batch_time = median(durations) if durations else None

        backlog, source = last.backlog_of(q)
        if backlog is None:
            notes.append(f"no backlog: {q.backlog_problem}" if q.backlog_problem else "no backlog reported")
        elif source:
            notes.append(f"backlog from external metric {source}")
        # The backlog's growth: from the first batch in the window that reported one to the last.
        reported = list(zip(window_starts, window_backlogs, strict=True))
        first = next(((t, b) for t, b in reported if b is not None), None)
        latest_backlog = next(((t, b) for t, b in reversed(reported) if b is not None), None)
        growth = 0.0
        if first is not None and latest_backlog is not None and latest_backlog[0] > first[0]:
            growth = (latest_backlog[1] - first[1]) / (latest_backlog[0] - first[0])
        period = max(trigger_s or 0.0, batch_time or 0.0)
        # Up to one batch period of arrivals is always waiting in a micro-batch system: only the
        # backlog beyond it needs catching up.
        excess = max(0.0, (backlog or 0.0) - rate * period)
        catch_up = excess / cfg.catch_up_duration_s
        read_limit = None
        if excess > 0:
            limited = [r for r, b in zip(window_rows, window_backlogs, strict=True)
                       if b is not None and b > 0]
            read_limit = float(max(limited)) if limited else None
        # While new executors start, the live ones keep working (unlike Flink's restart, which
        # stops the job): the backlog grows by what they fall short of the arrivals, batches of at
        # most the read limit, and that is caught up too. Counting all arrivals meanwhile, a real
        # 1 -> 3 -> 6 step went to 6 where 3 did 158 rows/s of the 120 arriving, and held 6 for a
        # minute after its 8 s catch-up; without the term, a step's batches read all there was and
        # reported no backlog, and the scale-up sized without it needed a second one.
        short = 0.0
        if cost is not None and live > 0:
            short = max(0.0, rate - float(cost.throughput(live, read_limit)))
        provisioning = short * context.provisioning_time_s / cfg.catch_up_duration_s
        # A source that reports no backlog hides a binding read limit: its batches read the same
        # rows, back to back, the whole window long. The rest waits unseen: the query is sized so
        # that batches of the limit do the arrivals at the target (each scale-up shows whether more
        # waits), and nothing is scaled down meanwhile. Only the window's batches count: the last
        # batches of a query that has gone quiet say nothing of now. (Batches that merely take
        # longer than the trigger are no sign: a stateful batch's fixed cost can exceed a short
        # trigger at any size, and its query keeps up all the same.)
        saturated = False
        signal = ""
        unit = self._units[q.query_id] = math.gcd(self._units.get(q.query_id, 0),
                                                  *(b.rows for b in batches if b.rows > 0))
        if backlog is None and _limit_binds_unseen(window_batches, batches, trigger_s, unit):
            read_limit, saturated = float(max(b.rows for b in window_batches)), True
            notes.append(f"a read limit binds: the window's {len(window_batches)} batches read the same "
                         f"{readable.rows(read_limit)} rows each, back to back, and no backlog is reported; "
                         "sized so that batches of the limit do the arrivals at the target")
            signal = "batches at their read limit back to back, no backlog reported"
        backlog_mode = (excess > cfg.backlog_threshold_s * rate) if rate > 0 else excess > 0
        # Batches back to back a period apart keep a row waiting at most two periods: at the
        # arrivals, a quarter of backlogThreshold keeps the lag's peaks within half of it; at the
        # arrivals over the target, half of it keeps the lag within it (where longer than the
        # trigger, or without one). A read limit that binds caps the rows of a batch, so longer
        # batches do not read more: the batches are then sized on what back-to-back batches of the
        # limit do too (see _utilization).
        period_s = trigger_s
        fresh_s = None
        headroom = cfg.backlog_threshold_s * HEADROOM_PERIOD_SHARE
        if headroom > (trigger_s or 0.0):
            period_s = headroom
            fresh = cfg.backlog_threshold_s * FRESH_PERIOD_SHARE
            fresh_s = fresh if fresh > (trigger_s or 0.0) else None
            fresh_note = (f"a row waits at most {readable.seconds(2 * fresh_s)} at the arrivals (half of "
                          "backlogThreshold), " if fresh_s else "")
            notes.append(f"sized for batches back to back: {fresh_note}at most "
                         f"{readable.seconds(2 * period_s)} at the arrivals over the target")
        if backlog_mode:
            notes.append(f"backlog mode: {readable.rows(excess)} behind")
            signal = signal or f"backlog {readable.rows(excess)} beyond a batch's worth"
        # Arrivals rising, each sign named in the note. The source's offsets count only over two
        # spans (source_rose): a steady Kafka load of 50 rows/s held a due scale-down for 80 s on
        # single spans of a second or two.
        rises: list[str] = []
        if latest:
            if max(latest) > rise:
                rises.append(f"the last batches read {readable.rate(max(latest))}")
            if reading is not None and reading[0] > rise:
                rises.append(f"the running batch's ended tasks read at least {readable.rate(reading[0])}")
            if source_rose:
                rises.append(f"its source's latest offsets show {readable.rate(source_rates[-2])} then "
                             f"{readable.rate(source_rates[-1])} arriving")
        rising = running or saturated or bool(rises)
        if (batch_time is not None and batches and batches[-1].duration_s > (1.0 + LENGTHENING) * batch_time
                and (trigger_s is None or batches[-1].duration_s > 0.5 * trigger_s)):
            rising = True
            notes.append(f"the last batch took {batches[-1].duration_s:.1f}s, the window's typical one "
                         f"{batch_time:.1f}s")
        if rises:
            notes.append(f"arrivals rising: {'; '.join(rises)}; the window {readable.rate(window_rate)}")
        if rising and latest:
            signal = signal or "rising"
        # Idle only on evidence: batches that read nothing, or none for the whole window. A query
        # with no two consecutive batches yet is not idle but unknown (learning).
        idle = arrived and window_rate <= 0 and (backlog or 0.0) <= 0 and not running
        if idle:
            notes.append("idle: nothing arrived in the window")
        return _Demand(q=q, window_rate=window_rate, recent_rate=recent, rate=rate,
                       processed_rate=processed, backlog=backlog, growth=growth, catch_up=catch_up,
                       provisioning=provisioning, read_limit=read_limit, saturated=saturated,
                       trigger_s=trigger_s, period_s=period_s, fresh_period_s=fresh_s, signal=signal,
                       batch_time_s=batch_time, rising=rising, idle=idle, backlog_mode=backlog_mode,
                       arrivals_seen=arrived, measured_until=batches[-1].start if batches else None,
                       utilization_target=cfg.utilization_target, notes=notes)

    # -- sizing ------------------------------------------------------------------------------------

    def _utilization(self, d: _Demand, cost: BatchCost, executors: Size, target: float,
                     concurrent: Concurrent = NONE_CONCURRENT) -> Size:
        """How busy ``executors`` (a count or an array of counts) keep the query, on the scale of
        ``utilization.target``: the arrivals over what the executors can do.

        With a trigger: a batch period's worth of arrivals (the period below) over the rows a batch
        can read and still end within the period (within driver time / ``utilization.target`` when
        the driver alone takes longer). At the target, a batch of ``rate / utilization.target`` rows (Flink's
        headroom, in rows) ends exactly within the interval. The headroom is in rows, not in time:
        what a batch pays whatever its rows (the driver, a fixed cost per task) does not grow with
        the load, and asking for it to fit in 70 % of the interval held executors that only
        shortened a fast query's batches. For the same reason the reading is not the batch's
        share of the interval: with large fixed costs that share stays low while the rows a batch
        can still take are nearly used up (a real query read 0.84 on that scale with batches as
        long as the trigger, and its scale-up came as lag built). (A read-limited query is sized
        the same way on the limit: the same size whether its batches show the limit or not.)

        The interval is the query's batch period (:attr:`_Demand.period_s`): its trigger, or half of
        ``backlogThreshold`` where that is longer or there is no trigger. A short trigger with large
        fixed costs per batch otherwise held executors that only shortened batches no user waits
        for (a stateful batch's fixed cost can exceed a 1 s trigger at any size): back to back, a
        batch reads what arrived during the previous one, and at the target's arrivals a row waits
        at most two periods, ``backlogThreshold``. At the arrivals themselves the lag's peaks must
        stay within half of it (:attr:`_Demand.fresh_period_s`, a quarter of it, where longer than
        the trigger): a batch of those arrivals over a quarter of ``backlogThreshold``, without the
        headroom, must end within it too, and the reading is the higher of the two. The room
        between is for bursts and provisioning. Batches of the other queries with the same trigger
        are taken as running at that period too (their task time scaled to it). Without a trigger
        and without a period (``backlogThreshold`` 0): the rate over the rows/s the executors can
        do."""
        rows = d.rows_per_period()
        if d.idle or (rows is not None and rows <= 0):
            return 0.0 * executors
        period = d.period_s or d.trigger_s
        if rows is not None and period:
            within = _fraction_of_period(cost, executors, rows / target, period, d.trigger_s, target,
                                         concurrent)
            if d.fresh_period_s:
                fresh = _fraction_of_period(cost, executors, d.rows_per_fresh_period(), d.fresh_period_s,
                                            d.trigger_s, target, concurrent)
                within = ops(within).maximum(within, fresh)
            if not d.limit_binds:
                return within
            # Batches of the limit back to back can do no more than the limit per batch time: a
            # bigger batch would spread its fixed costs thinner, but none reads more. (Sized on the
            # trigger instead, a real 120 rows/s with a backlog went to 6 executors; 3 did 158.)
            back_to_back = cost.throughput(executors, d.read_limit, None, concurrent)
            return ops(within).maximum(within, d.sized_rate / back_to_back)
        # Batch after batch of at most the read limit (0 when the capacity is unbounded).
        return d.sized_rate / cost.throughput(executors, d.read_limit, None, concurrent)

    def _busy_slots(self, d: _Demand, cost: BatchCost, executors: Size) -> Size:
        """Slots the query's task time keeps busy on average: the share of the executors it takes
        from the other queries."""
        if d.idle or d.target <= 0:
            return 0.0 * executors
        xp = ops(executors)
        rows = d.rows_per_period()
        allowed = d.period_s or d.trigger_s
        if rows is not None and allowed:
            # At the period sized for: a fixed cost per batch repeated more often than the lag
            # needs holds no slot (batches lengthen and take more rows each when slots are short).
            # Where a read limit caps a batch's rows, those rows come sooner, and batches of the
            # limit follow one another that often (at the period, a query whose limit binds read
            # as using a fraction of the slots it kept busy: a backlog grew behind it, in the band).
            return _busy_fraction(cost, executors, rows, d.arrival_span(rows, allowed))
        period = cost.steady_batch_time(d.sized_rate, executors, None)
        unbounded = xp.isinf(period)
        finite = xp.where(unbounded, 1.0, period)
        return xp.where(unbounded, executors * cost.cores,
                        cost.task_time(d.sized_rate * finite, executors) / xp.maximum(finite, _EPS))

    def _size(self, demands: list[_Demand], costs: dict[str, BatchCost | None],
              history: Sequence[MetricSample], context: ScalingContext, empty_reason: str,
              held: Mapping[str, QueryMetrics], learning: Mapping[str, float] | None = None) -> Evaluation:
        """Every size at once: per query its utilization at 1, 2, ... executors (arrays), the
        application's the highest of them or what all their task time needs (and the slots
        real-time-mode queries hold); the fewest within the target."""
        cfg = context.config
        target = cfg.utilization_target
        spe = context.slots_per_executor
        live = max(1, context.live_executors)
        # The size the load is judged at: the target where executors beyond it are still live
        # (leaving, or started unasked by a standalone Master back from a restart). Judged on all
        # of them, a load they kept within the band asked for no scale-up, and the ones it needed
        # were removed, to be asked for again once measured without them (on real Spark, the
        # scale-up 39 s after a Master came back instead of under 10 s).
        judged_at = min(live, max(1, context.current_target))
        other = _other_tasks(history, context.config.metrics_window_s)
        holding = {qid: held_slots(q) for qid, q in held.items()}
        # Queries still learning their cost: at the target, the slots their tasks kept busy.
        unsized = {qid: slots / target for qid, slots in (learning or {}).items()}
        other += sum(holding.values()) + sum(unsized.values())
        known = [(d, c) for d in demands if (c := costs.get(d.q.query_id)) is not None]

        # The sizes worth scanning. Beyond a slot for every task of a query and of the batches
        # that run beside it, more executors shorten nothing (the efficiency seen at a size stands
        # for the sizes nearest it); their only use is room for the task time of all queries
        # together, which is largest there.
        beside: dict[float, int] = {}
        for d, c in known:
            if d.trigger_s and not d.idle:
                beside[d.trigger_s] = beside.get(d.trigger_s, 0) + c.tasks
        useful = max([max(executors_for(max(c.widest, beside.get(d.trigger_s or 0.0, 0)), spe),
                          max(c.executor_counts, default=1)) for d, c in known] or [1])
        # Every query's figures at every size in one pass (_Scan); the queries off its path (idle,
        # no trigger, nothing to read, a binding read limit) through _utilization and _busy_slots
        # one by one.
        widest = max(useful, live)
        scan_queries = _ScanQueries(known, target)
        at_widest = _Scan(scan_queries, np.array([float(widest)]),
                          [[c.efficiency_at(widest)] for _, c in known])
        slots_at_widest = at_widest.busy_slots()[:, 0].tolist()
        busy = sum(slots_at_widest[i] if scan_queries.common[i] else self._busy_slots(d, c, widest)
                   for i, (d, c) in enumerate(known))
        shared = executors_for(busy / target + other, spe)
        sizes = np.arange(1.0, max(live, min(MAX_SCANNED, max(useful, shared, live) + 1)) + 1)
        scan = _Scan(scan_queries, sizes, [c.efficiency_upto(len(sizes)) for _, c in known])

        # Spark starts the batches of queries with one trigger interval together: each one's batch
        # shares the slots with the others' (their task time at each size).
        sharing = {i for i, (d, _) in enumerate(known) if d.trigger_s and not d.idle}
        work = scan.task_time([d.rows_per_batch() or 0.0 if i in sharing else 0.0
                               for i, (d, _) in enumerate(known)])
        # Per query: the others' task time beside it (a row per query, a column per size) and
        # their tasks; none for a query not sharing.
        concurrent_tasks = np.zeros(len(known))
        if sharing:
            group_of: dict[float, int] = {}
            rows = sorted(sharing)
            group = np.array([group_of.setdefault(known[i][0].trigger_s or 0.0, len(group_of)) for i in rows])
            tasks = np.zeros(len(group_of))
            for i, g in zip(rows, group.tolist(), strict=True):
                tasks[g] += known[i][1].tasks
            # Usually every query shares one trigger: the matrices as they are, not copies of rows.
            every = len(rows) == len(known)
            members, one_group = np.array(rows), every and len(group_of) == 1
            totals = np.array([_sum_rows(work if one_group else work[members[group == k]])
                               for k in range(len(group_of))])
            total = totals[0] if len(group_of) == 1 else totals[group]
            others = total - (work if every else work[rows])
            beside_s = np.where(others > _EPS * np.maximum(total, 1.0), others, 0.0)
            if every:
                concurrent_s = beside_s
            else:
                concurrent_s = np.zeros_like(work)
                concurrent_s[rows] = beside_s
            concurrent_tasks[rows] = tasks[group] - np.array([known[i][1].tasks for i in rows], dtype=float)
        else:
            concurrent_s = np.zeros_like(work)
        own = scan.utilization(concurrent_s, concurrent_tasks)
        busy_at = scan.busy_slots()
        for i, (d, c) in enumerate(known):
            if not scan_queries.common[i]:
                alongside = (Concurrent(concurrent_s[i], int(concurrent_tasks[i])) if i in sharing
                             else NONE_CONCURRENT)
                own[i] = self._utilization(d, c, sizes, target, alongside)
                busy_at[i] = self._busy_slots(d, c, sizes)
        per_query = {d.q.query_id: own[i] for i, (d, _) in enumerate(known)}
        # The queries' task time at the target, and a slot for each task of other jobs at full
        # use (as Spark's own allocation counts them): the slots all of it needs.
        needed = _sum_rows(busy_at)
        needed = needed / target + other
        app = target * needed / (sizes * spe)
        if known:
            app = np.maximum(app, own.max(axis=0))
        required, capped = _fewest(app, target, cfg.utilization_max)
        recommended = cfg.bounded(required)
        now_util = float(app[judged_at - 1])

        each = dict(zip(per_query, _fewest_each(own, target, cfg.utilization_max), strict=True))
        # Each query's batch time at the live size, at its target rate.
        predicted = dict(zip(per_query, scan.steady_batch_time([d.target for d, _ in known],
                                                               [d.trigger_s for d, _ in known], live - 1),
                             strict=True))
        queries: dict[str, QueryEvaluation] = {}
        for d in demands:
            cost = costs.get(d.q.query_id)
            own_required, own_capped = (1 if d.idle else judged_at), False
            own = per_query.get(d.q.query_id)
            if cost is not None and not d.idle and own is not None:
                own_required, own_capped = each[d.q.query_id]
            queries[d.q.query_id] = self._query_result(
                d, cost, own_required, own_capped, None if own is None else float(own[judged_at - 1]),
                None if cost is None or d.idle else predicted[d.q.query_id])
        for qid, q in held.items():
            queries[qid] = _real_time_result(q, holding[qid], spe)
        utilization = min(now_util, MAX_UTILIZATION)
        required_slots = float(required * spe)
        backlog_mode = any(q.backlog_mode for q in queries.values())
        headline, details = self._explain(demands, queries, costs, required, recommended, utilization,
                                          judged_at, live, capped, other, empty_reason, holding, unsized)
        return Evaluation(time=context.now, ready=True, current_executors=context.current_target,
                          recommended_executors=recommended, required_slots=required_slots,
                          utilization=utilization, backlog_mode=backlog_mode, queries=queries,
                          reason=details, headline=headline, rising=any(d.rising for d in demands),
                          measured_until=_measured_until(demands))

    def _query_result(self, d: _Demand, cost: BatchCost | None, required: int, capped: bool,
                      utilization: float | None, predicted: float | None) -> QueryEvaluation:
        notes = list(d.notes)
        if cost is not None:
            notes.append(f"a batch: {cost.driver_s:.2f}s on the driver + task time "
                         f"{cost.fixed_task_s:.2f}s + {cost.per_executor_s:.2f}s per executor + "
                         f"{cost.per_row_s * 1000:.3g} ms per row over {cost.tasks} tasks")
        return QueryEvaluation(
            query_id=d.q.query_id, name=d.q.name, input_rate=d.processed_rate, backlog=d.backlog,
            backlog_growth_rate=d.growth, target_rate=d.rate, catch_up_rate=d.catch_up + d.provisioning,
            slot_seconds_per_row=cost.per_row_s if cost is not None else None,
            required_slots=float(required * (cost.cores if cost is not None else 1)),
            utilization=None if utilization is None else min(utilization, MAX_UTILIZATION),
            parallelism_cap=cost.widest if cost is not None else d.q.max_stage_tasks, capped=capped,
            backlog_mode=d.backlog_mode, note="; ".join(notes), trigger_s=d.trigger_s,
            batch_time_s=d.batch_time_s,
            predicted_batch_time_s=None if predicted is None or math.isinf(predicted) else predicted,
            rows_per_batch=d.rows_per_batch(), required_executors=required, rising=d.rising, cost=cost)

    @staticmethod
    def _explain(demands: list[_Demand], queries: dict[str, QueryEvaluation],
                 costs: dict[str, BatchCost | None], required: int, recommended: int, utilization: float,
                 judged_at: int, live: int, capped: bool, other: float, empty: str,
                 holding: Mapping[str, int], unsized: Mapping[str, float]) -> tuple[str, str]:
        """(the headline: what the load needs and why, in one line; the figures behind it)."""
        beyond = f" (the target; {live} live)" if live > judged_at else ""
        details = [f"utilization {_fraction(utilization)} on {readable.executors(judged_at)}{beyond}"
                   + (f"; bounded to {recommended} by min/maxExecutors" if required != recommended else "")]
        held = sum(holding.values())
        jobs_tasks = other - held - sum(unsized.values())
        parts = []
        if unsized:
            parts.append(f"{len(unsized)} {'query' if len(unsized) == 1 else 'queries'} still learning")
            details.append("still learning their cost, sized on the slots their tasks kept busy (at the "
                           "target): " + ", ".join(f"{readable.query(queries[q].name, q)} {slots:.1f}"
                                                   for q, slots in unsized.items()))
        if held:
            parts.append(f"{held} real-time-mode tasks")
            details.append(f"real-time mode: {held} tasks of "
                           + ", ".join(readable.query(queries[q].name, q) for q in holding)
                           + " hold a slot each for their whole batch")
        if jobs_tasks:
            parts.append(f"other jobs' {jobs_tasks:.0f} pending or running tasks")
            details.append(f"other jobs (not streaming) have up to {jobs_tasks:.0f} pending or running "
                           "tasks, a slot each")
        jobs = " and ".join(parts)
        if not demands:
            if held and not empty:
                return f"{jobs} need {readable.executors(required)}", "; ".join(details)
            what = empty or "no active streaming query"
            need = (f"{jobs} need {readable.executors(required)}" if other
                    else f"{readable.executors(required)} do")
            return f"{what}; {need}", "; ".join(details)
        sized = [d for d in demands if d.q.query_id not in unsized] or demands
        busiest = max(sized, key=lambda d: (queries[d.q.query_id].required_executors,
                                            queries[d.q.query_id].utilization or 0.0))
        qe = queries[busiest.q.query_id]
        load = readable.rate(busiest.rate)
        if busiest.signal:
            load += f" ({busiest.signal})"
        if busiest.catch_up + busiest.provisioning > 0:
            load += f" + catch-up {readable.rate(busiest.catch_up + busiest.provisioning)}"
        who = readable.query(busiest.q.name, busiest.q.query_id)
        if len(demands) == 1:
            headline = f"{who}: arrivals {load}"
        else:
            others = len(sized) - 1
            headline = (f"{who} at {load}" if not others
                        else f"{who} at {load} and {others} other {'query' if others == 1 else 'queries'}")
        if other:
            headline += f" and {jobs}"
        headline += f" need {readable.executors(required)}"
        if capped:
            headline += " (more would not shorten its batches)"
        batches = []
        if qe.batch_time_s is not None:
            trigger = f" of a {readable.seconds(busiest.trigger_s)} trigger" if busiest.trigger_s else ""
            batches.append(f"batches {readable.seconds(qe.batch_time_s)}{trigger}")
        cost = costs.get(busiest.q.query_id)
        if qe.predicted_batch_time_s is not None:
            batches.append(f"{readable.seconds(qe.predicted_batch_time_s)} predicted on {live}")
            if cost is not None and required != live:
                at = cost.steady_batch_time(busiest.target, required, busiest.trigger_s)
                batches.append(f"{readable.seconds(at)} on {required}")
        if batches:
            details.append(f"{who}: " + ", ".join(batches))
        if capped:
            details.append(f"no size keeps it within the target: sized where more executors stop helping "
                           f"(capped at {qe.parallelism_cap} parallel tasks, its widest stage, and by the "
                           "time its batches spend on the driver or reading)")
        return headline, "; ".join(details)

    # -- helpers -----------------------------------------------------------------------------------

    def _forget(self, last: MetricSample) -> None:
        """Drop the models of queries no longer reported (bounded memory)."""
        for qid in [q for q in self._learners if q not in last.queries]:
            del self._learners[qid]
            self._batches.pop(qid, None)
            self._given.pop(qid, None)
            self._units.pop(qid, None)
            self._columns.forget(qid)

    @staticmethod
    def _not_ready(context: ScalingContext, whys: Sequence[str]) -> Evaluation:
        """Not ready, for the first reason (and how many more) in the headline, all in the details."""
        current = context.current_target
        more = f" (and {len(whys) - 1} more)" if len(whys) > 1 else ""
        return Evaluation(time=context.now, ready=False, current_executors=current,
                          recommended_executors=current, required_slots=0.0, utilization=None,
                          backlog_mode=False, headline=f"not ready: {whys[0]}{more}",
                          reason="; ".join(whys) if len(whys) > 1 else "")


def _task_spread(batches: Sequence[BatchRecord], cost: BatchCost) -> float:
    """The most task time a recent batch took over what the model expects of its rows (1: as
    predicted): how much slower than the model the running batch's tasks may be with no more rows.
    Batches on a fresh executor are left out (their first tasks start Python and load classes)."""
    ratios = [b.task_s / expected for b in batches
              if b.task_s is not None and not b.fresh_executors
              and (expected := float(cost.task_time(b.rows, b.executors or 1))) > _EPS]
    return max(ratios, default=1.0)


def _in_flight_rate(q: QueryMetrics, batches: Sequence[BatchRecord], cost: BatchCost | None,
                    live_executors: int, recent: Sequence[BatchRecord] = ()) -> tuple[float, float] | None:
    """Rows/s that arrived between the latest completed batch's start and the running batch's:
    at least what its ended tasks read (their task time less the model's fixed part of a task,
    over its cost of a row), and the estimate for all its tasks (for a single-stage batch, its
    ended tasks' share; else the same lower bound), as slow as the ``recent`` batches' tasks ran
    against the model (:func:`_task_spread`). None without a running batch after the latest one or
    without a cost of a row."""
    f = q.in_flight
    if f is None or not batches or cost is None or cost.per_row_s <= 0 \
            or f.batch_id != batches[-1].batch_id + 1:
        return None
    span = f.first_launch - batches[-1].start  # its start is before its first task: a lower rate
    if span <= 0:
        return None
    fixed = (cost.fixed_task_s + cost.per_executor_s * cost.executors_used(max(1, live_executors))) \
        / max(1, cost.tasks)
    # A lower bound where the model errs too: its fixed part and its cost of a row at their upper
    # estimates, as far off as the batch's error or recent batches' tasks were. At a low rate a
    # task's time is mostly fixed, and tasks slower than the model (a busy machine) read as rows
    # that never arrived: "rising" every few ticks on a steady Kafka load, and no scale-down for
    # minutes; a real tail's tasks took 1.1-1.95x the model's time, beyond a batch's error.
    margin = max(1.0 + max(0.0, cost.error), _task_spread(recent, cost))
    at_least = max(0.0, f.task_s - f.tasks_ended * fixed * margin) / (cost.per_row_s * margin) / span
    # Several stages end unevenly (a wide shuffle stage does little per task): no extrapolation.
    single_stage = cost.tasks == cost.widest and 0 < f.tasks_ended < cost.tasks
    return at_least, at_least * cost.tasks / f.tasks_ended if single_stage else at_least


def _source_rates(history: Sequence[MetricSample], q: QueryMetrics, since: float) -> list[float]:
    """Rows/s that arrived between consecutive readings of the query's sources' latest offsets (see
    :class:`~.metrics.LatestOffsets`), oldest first: spans of at least :data:`SOURCE_SPAN_S` over the
    same partitions, from readings at or after ``since`` (the latest completed batch's start: what
    arrived before it, that batch read and its own arrivals tell)."""
    readings: list[LatestOffsets] = []
    for sample in reversed(history):  # the newest few: readings older than `since` are not used
        m = sample.queries.get(q.query_id)
        r = m.latest_offsets if m is not None else None
        if r is None or r.time < since:
            break
        if not readings or r.time < readings[-1].time:
            readings.append(r)
    if len(readings) < 2:
        return []
    units = [s.rows_per_unit for s in q.backlog_sources if s.unit == "offsets" and s.rows_per_unit]
    per_offset = sum(units) / len(units) if units else 1.0
    readings.reverse()  # oldest first
    rates = []
    start = readings[0]
    for r in readings[1:]:
        span = r.time - start.time
        if r.partitions != start.partitions or r.offsets < start.offsets:
            start = r  # a partition came or went, or the log was recreated: no rate across it
        elif span >= SOURCE_SPAN_S:
            rates.append((r.offsets - start.offsets) * per_offset / span)
            start = r
    return rates


def _fraction_of_period(cost: CostFormulas, executors: Size, rows: Size, period: Size,
                        trigger_s: Size | None, target: float, concurrent: Concurrent) -> Size:
    """How much of ``period`` a batch of ``rows`` takes beyond its part that no rows pay, over what
    is left of the period beside that part, on the scale of ``target``: at ``target`` the batch ends
    exactly within the period (within driver time / ``target`` when the driver alone takes
    longer). Where not even a batch without rows ends within it, sizes rank above every size where
    one does, by their batch time. Other queries' batches beside it (``concurrent``, at the trigger)
    are taken as running at that period too. One query (numbers) or many (columns: the scan)."""
    trigger = 0.0 if trigger_s is None else trigger_s
    xp = ops(executors, rows, period, trigger)
    stretch = xp.where((trigger > 0) & (period > trigger), period / xp.maximum(trigger, _EPS), 1.0)
    concurrent = Concurrent(concurrent.task_s * stretch, concurrent.tasks)
    allowed = xp.maximum(period, cost.driver_s / target)
    # Batch time is a fixed part plus a part per row: the rows a batch can take within ``allowed``
    # follow from two points, its time with none and with ``rows``.
    fixed = cost.batch_time(0.0, executors, concurrent)
    loaded = cost.batch_time(rows, executors, concurrent)
    spare = allowed - fixed
    fits = xp.minimum(target * (loaded - fixed) / xp.maximum(spare, _EPS), MAX_UTILIZATION)
    return xp.where(spare > _EPS, fits, MAX_UTILIZATION * loaded / allowed)


def _busy_fraction(cost: CostFormulas, executors: Size, rows: Size, arrive: Size) -> Size:
    """Slots a query's batches of ``rows`` keep busy on average when their rows come ``arrive``
    seconds apart: their task time over the longer of that and their batch time. One query or
    many, as :func:`_fraction_of_period`."""
    period = ops(executors, arrive).maximum(arrive, cost.batch_time(rows, executors))
    return cost.task_time(rows, executors) / period


def _limit_binds_unseen(batches: Sequence[BatchRecord], recent: Sequence[BatchRecord],
                        trigger_s: float | None, unit: int = 1) -> bool:
    """The window's batches (at least :data:`LIMIT_BATCHES`) all read the same rows, the most any
    of the ``recent`` ones read and at least two of the ``unit`` every batch's rows came in, each
    began as the one before it ended (within :data:`BACK_TO_BACK_S`), past its trigger, and the
    spans between their starts varied while their rows did not: rows were waiting every time, and
    no batch read more than the limit. Batches with gaps between them waited for data. Batches of
    one file each (a file source's files come one by one) read one because one came during each:
    a limit of one unit cannot be told from that, nor a limit some batch read past."""
    if len(batches) < LIMIT_BATCHES:
        return False
    rows = [b.rows for b in batches]
    if (min(rows) <= 0 or max(rows) > 1.01 * min(rows) or max(b.rows for b in recent) > 1.01 * min(rows)
            or min(rows) < 2 * unit):
        return False
    spans = [b.start - before.start for before, b in itertools.pairwise(batches)]
    if max(spans) < (1.0 + LIMIT_EVIDENCE) * min(spans):
        return False
    return all(b.start - before.end <= BACK_TO_BACK_S
               and before.duration_s >= (trigger_s or 0.0) - BACK_TO_BACK_S
               for before, b in itertools.pairwise(batches))


def _since(horizon: float, keys: Sequence[float], *columns: Sequence[Any]) -> list[Sequence[Any]]:
    """Each column's values where ``keys`` (batch starts: ascending) are at or after ``horizon``: a
    slice; picked one by one where the keys are out of order (the driver's clock stepped back)."""
    i = bisect.bisect_left(keys, horizon)
    if max(keys[:i], default=-math.inf) < horizon <= min(keys[i:], default=math.inf):
        return [c[i:] for c in columns]
    picked = [k >= horizon for k in keys]
    return [list(itertools.compress(c, picked)) for c in columns]


def _other_tasks(history: Sequence[MetricSample], window_s: float) -> float:
    """The slots jobs outside the streaming queries (a batch or ML job sharing the application)
    keep: their pending and running tasks, the most seen over the window, so a gap between
    stages frees nothing."""
    last = history[-1]
    return float(max(s.cluster.other_tasks for s in history if s.time >= last.time - window_s))


def _measured_until(demands: Sequence[_Demand]) -> float | None:
    """Up to when every query's arrivals are measured. An idle query bounds nothing: a source
    with new rows starts a batch, and a batch running counts as rising."""
    bounds = [d.measured_until for d in demands if not d.idle and d.measured_until is not None]
    return min(bounds) if bounds else None


def _slots_kept_busy(q: QueryMetrics, history: Sequence[MetricSample], window_s: float) -> float:
    """The slots a query's tasks kept busy on average over the window (its task time over it)."""
    last = history[-1]
    first = next((s for s in history if s.time >= last.time - window_s), last)
    before = first.queries.get(q.query_id)
    if before is None or last.time <= first.time:
        return 0.0
    return max(0.0, q.busy_ms - before.busy_ms) / 1000.0 / (last.time - first.time)


def held_slots(q: QueryMetrics) -> int:
    """The slots a real-time-mode query holds: every task of its batch runs for the whole batch
    (all its stages at once), so the most tasks a recent batch ran, or its widest stage so far."""
    recent = max((b.tasks or 0 for b in q.recent_batches[-3:]), default=0)
    return max(recent, q.max_stage_tasks or 0)


def _real_time_result(q: QueryMetrics, slots: int, slots_per_executor: int) -> QueryEvaluation:
    trigger_s = q.trigger_interval_ms / 1000.0 if q.trigger_interval_ms else None
    return QueryEvaluation(
        query_id=q.query_id, name=q.name, input_rate=q.processed_rate, backlog=q.backlog,
        backlog_growth_rate=0.0, target_rate=q.input_rate, catch_up_rate=0.0, slot_seconds_per_row=None,
        required_slots=float(slots), utilization=None, parallelism_cap=slots, capped=False,
        backlog_mode=False, trigger_s=trigger_s,
        note=f"real-time mode: its {slots} tasks hold a slot each for the whole batch; sized on them, "
             "not on its busy time", required_executors=executors_for(slots, slots_per_executor))


def _fewest(utilization: np.ndarray, target: float, band_max: float) -> tuple[int, bool]:
    """Over sizes 1, 2, ...: (the fewest executors keeping utilization at the target, False); when
    none does, (the fewest that come within :data:`NEAR_BEST` of the best any size does, True):
    executors beyond that shorten what they cannot (driver time, a read limit, the widest stage).

    A whole wave is not bought for a few percent. A size just over the target also does when
    the next size would shorten nothing (a batch's tasks take as many waves: 6 tasks take two on
    3, 4 or 5 one-core executors), what the target asks for, its count x utilization / target
    as if executors came in fractions, is nearer it than the next size that shortens batches
    (3.1 executors: nearer 3 than 6), and it is at most a quarter of the way from the target to
    ``band_max`` (``utilization.max``, where a scale-up would come; 0.75 by default). Each test
    only gets harder as the load rises, so a higher load never gets fewer executors."""
    fits = np.flatnonzero(utilization <= target + _EPS)
    if fits.size:
        fewest = int(fits[0])
        for i in np.flatnonzero(utilization[:fewest] <= target + (band_max - target) / 4 + _EPS):
            shorter = np.flatnonzero(utilization[i + 1:] < utilization[i] * (1.0 - SAME_WAVES))
            useful = i + 2 + int(shorter[0]) if shorter.size else math.inf  # next size that helps
            asked = (i + 1) * utilization[i] / target
            if useful > i + 2 and asked - (i + 1) < useful - asked:
                return int(i) + 1, False
        return fewest + 1, False
    best = float(utilization.min())
    near = np.flatnonzero(utilization <= best * (1.0 + NEAR_BEST) + _EPS)
    # Exactly at the cap, the best sizes are short of the load by MAX_UTILIZATION times or more, and
    # the cap ties them: the most of them does the most (the fewest gave a backlog of 1e8 rows 1
    # executor where one of 6e7 got 4). (Sizes where no batch ends in time rank above the cap.)
    return int(near[-1] if math.isclose(best, MAX_UTILIZATION) else near[0]) + 1, True


def _fewest_each(utilization: np.ndarray, target: float, band_max: float) -> list[tuple[int, bool]]:
    """:func:`_fewest` of each row (a query's utilization at every size), in array passes: the
    fewest size within the target of every row, then the sizes before it within the quarter band
    (their next size that shortens batches and what the target asks for) of all rows together, in
    blocks. The same comparisons, the same figures. A row none fits, or with more than
    :data:`_CANDIDATES_PER_ROW` sizes in the band (a long stretch of sizes of as many waves), is
    :func:`_fewest`'s own: it stops at the first size that answers."""
    if not utilization.size:
        return [_fewest(row, target, band_max) for row in utilization]
    fits = utilization <= target + _EPS
    first, some = fits.argmax(axis=1), fits.any(axis=1)
    sizes = np.arange(utilization.shape[1])
    candidate = (utilization <= target + (band_max - target) / 4 + _EPS) & (sizes < first[:, None])
    few = candidate.sum(axis=1) <= _CANDIDATES_PER_ROW
    answers = [(int(f) + 1, False) if fit and handful else _fewest(row, target, band_max)
               for f, fit, handful, row in zip(first.tolist(), some.tolist(), few.tolist(), utilization,
                                             strict=True)]
    rows, before = np.nonzero(candidate & (some & few)[:, None])  # by row, then size
    answered: set[int] = set()
    for k in range(0, len(rows), _CANDIDATES_AT_ONCE):
        r, i = rows[k:k + _CANDIDATES_AT_ONCE], before[k:k + _CANDIDATES_AT_ONCE]
        at = utilization[r, i]
        shorter = (utilization[r] < (at * (1.0 - SAME_WAVES))[:, None]) & (sizes > i[:, None])
        useful = np.where(shorter.any(axis=1), shorter.argmax(axis=1) + 1.0, math.inf)  # next size that helps
        asked = (i + 1) * at / target
        nearer = (useful > i + 2) & (asked - (i + 1) < useful - asked)
        for row, size in zip(r[nearer].tolist(), i[nearer].tolist(), strict=True):
            if row not in answered:  # the smallest such size of the row
                answered.add(row)
                answers[row] = (size + 1, False)
    return answers


def _sum_rows(matrix: np.ndarray) -> np.ndarray:
    """The rows added one after another, in order: what a loop over them gives, bit for bit (the
    same figures whatever the number of queries). numpy adds down the rows so where there are two
    columns or more; a single column it sums pairwise."""
    if matrix.shape[1] >= 2:
        return matrix.sum(axis=0)
    total = np.zeros(matrix.shape[1])
    for row in matrix:
        total = total + row
    return total


def _fraction(value: float) -> str:
    return f">{MAX_UTILIZATION:g}" if value >= MAX_UTILIZATION else f"{value:.2f}"


class _ScanQueries:
    """The per-query figures a :class:`_Scan` reads: the rows of a period, its period, its trigger
    (placeholders off the scan's path) and its cost, one per query (made once a tick: two scans
    read them)."""

    def __init__(self, known: Sequence[tuple[_Demand, BatchCost]], target: float) -> None:
        self.target = target
        self.common: list[bool] = []
        self.rows: list[float] = []
        self.period: list[float] = []
        self.trigger: list[float] = []
        # At the arrivals themselves, where a fresh period applies (else no rows: they read 0).
        self.fresh_rows: list[float] = []
        self.fresh_period: list[float] = []
        self.arrive: list[float] = []
        for d, _ in known:
            rows = d.rows_per_period()
            period = d.period_s or d.trigger_s
            common = (not d.idle and d.target > 0 and bool(period) and rows is not None and rows > 0
                      and not d.limit_binds)
            self.common.append(common)
            self.rows.append(rows if common and rows is not None else 0.0)
            self.period.append((period or 1.0) if common else 1.0)
            # (No trigger: the period itself, so that nothing is scaled to it: no batch runs beside.)
            self.trigger.append((d.trigger_s or period or 1.0) if common else 1.0)
            fresh = common and bool(d.fresh_period_s)
            self.fresh_rows.append(d.rows_per_fresh_period() if fresh else 0.0)
            self.fresh_period.append((d.fresh_period_s or 1.0) if fresh else 1.0)
            # How soon a period's rows come (sooner where a read limit caps them): see _busy_slots.
            self.arrive.append(d.arrival_span(self.rows[-1], self.period[-1]) if common else self.period[-1])
        self.has_fresh = np.array([r > 0 for r in self.fresh_rows], dtype=bool).reshape(-1, 1)
        self.costs = [c for _, c in known]


def _column(values: Iterable[float]) -> np.ndarray:
    return np.array(list(values), dtype=float).reshape(-1, 1)


# The scan computes this many figures (queries x sizes) at a time: a block's matrices, at most 128
# KB each, are reused by the C library from one operation to the next. The whole scan's at once
# (0.8 MB each at 100 queries x 1,000 sizes) were given back to the system as each was freed and
# faulted in again at the next, and the scan took three times as long.
BLOCK_FIGURES = 16384


class _Scan:
    """:meth:`MicroBatchEvaluator._utilization` and :meth:`~MicroBatchEvaluator._busy_slots` of
    many queries at every size at once, on their common path (a period, rows to read, no binding
    read limit): one row per query, one column per size, through the same functions on the
    queries' :class:`~.model.CostColumns`, a block of queries at a time. Rows off that path
    (:attr:`_ScanQueries.common` false) hold placeholders: the evaluator computes them one by
    one."""

    def __init__(self, queries: _ScanQueries, executors: np.ndarray,
                 efficiency: Sequence[Sequence[float] | np.ndarray]) -> None:
        self.queries = q = queries
        self.shape = (len(q.costs), executors.size)
        step = max(1, BLOCK_FIGURES // max(1, executors.size))
        self.blocks = [(slice(i, i + step),
                        CostColumns(q.costs[i:i + step], executors, efficiency[i:i + step]))
                       for i in range(0, len(q.costs), step)]
        self.headroom_rows = _column(r / q.target for r in q.rows)
        self.rows, self.period, self.trigger = _column(q.rows), _column(q.period), _column(q.trigger)
        self.fresh_rows, self.fresh_period = _column(q.fresh_rows), _column(q.fresh_period)
        self.arrive = _column(q.arrive)

    def _each(self, block_figures: Callable[[slice, CostColumns], np.ndarray]) -> np.ndarray:
        """A matrix of the scan's shape, its rows computed block by block."""
        figures = np.empty(self.shape)
        for rows, costs in self.blocks:
            figures[rows] = block_figures(rows, costs)
        return figures

    def task_time(self, rows: Sequence[float]) -> np.ndarray:
        """:meth:`~.model.CostFormulas.task_time` of each query's ``rows`` at every size."""
        column = _column(rows)
        return self._each(lambda b, costs: costs.task_time(column[b], costs.sizes))

    def steady_batch_time(self, rates: Sequence[float], triggers: Sequence[float | None],
                          column: int) -> list[float]:
        """:meth:`~.model.CostFormulas.steady_batch_time` of each query at ``rates`` on the size of
        ``column``, alone on the executors."""
        rate, trigger = _column(rates), _column(t or 0.0 for t in triggers)
        times: list[float] = []
        for b, costs in self.blocks:
            at = costs.at(column)
            times.extend(at.steady_batch_time(rate[b], at.sizes, trigger[b]).ravel().tolist())
        return times

    def utilization(self, beside_s: np.ndarray, beside_tasks: np.ndarray) -> np.ndarray:
        """:meth:`MicroBatchEvaluator._utilization`, other batches running alongside: their task
        time (a row per query, a column per size) and tasks (one per query). The higher of the
        headroom's rows over the period and, where a fresh period applies, the arrivals over it."""
        target, has_fresh, tasks = self.queries.target, self.queries.has_fresh, _column(beside_tasks)

        def block(b: slice, costs: CostColumns) -> np.ndarray:
            concurrent = Concurrent(beside_s[b], tasks[b])
            utilization = _fraction_of_period(costs, costs.sizes, self.headroom_rows[b], self.period[b],
                                              self.trigger[b], target, concurrent)
            if has_fresh[b].any():
                fresh = _fraction_of_period(costs, costs.sizes, self.fresh_rows[b], self.fresh_period[b],
                                            self.trigger[b], target, concurrent)
                utilization = np.where(has_fresh[b], np.maximum(utilization, fresh), utilization)
            return utilization

        return self._each(block)

    def busy_slots(self) -> np.ndarray:
        """:meth:`MicroBatchEvaluator._busy_slots`."""
        return self._each(lambda b, costs: _busy_fraction(costs, costs.sizes, self.rows[b], self.arrive[b]))
