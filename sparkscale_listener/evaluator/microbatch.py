"""The default evaluator (see the package's docstring): each query's demand, its cost model, one
size for all of them; not ready while a change's new size is unmeasured."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from .. import readable
from ..concurrency import Alongside, Given, Swept, with_concurrency
from ..decisions import Evaluation, Outcome, ScalingContext, not_ready
from ..metrics import MetricSample
from ..model import MIN_BATCHES, BatchCost, BatchCostLearner, fit_all
from .base import MetricEvaluator
from .demand import Demand, DemandReader, other_tasks, slots_kept_busy
from .outcomes import CONFIRMING_BATCHES, measure_outcomes
from .sizing import size, size_ahead


class MicroBatchEvaluator(MetricEvaluator):
    """The default evaluator: sizes each query on its performance model (see the package docstring)."""

    def __init__(self) -> None:
        self._learners: dict[str, BatchCostLearner] = {}
        self._costs: dict[str, BatchCost | None] = {}
        self._batches: dict[str, dict[int, Alongside]] = {}  # the last batches, with concurrency
        self._given: dict[str, Given] = {}  # the batches they were made of
        self._demands = DemandReader()
        self._measured: float | None = None  # the time of the change whose outcome was returned

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
        demands: list[Demand] = []
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
            demand = self._demands.read(q, last, history, context, cost)
            demands.append(demand)
            if demand.idle:
                continue
            if cost is None or not demand.arrivals_seen:
                waiting.append(f"learning the cost of {readable.query(q.name, q.query_id)} "
                               f"({len(learner.batches)} of {MIN_BATCHES} warm batches)")
                learning[q.query_id] = slots_kept_busy(q, history, context.config.metrics_window_s)
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
        others = held or other_tasks(history, context.config.metrics_window_s) > 0
        if len(learning) == sum(not d.idle for d in demands) and learning and not others:
            return not_ready(context.now, context.current_target, waiting)
        if stabilizing or math.isinf(context.window_start):
            # The new size is not measured yet; but arrivals do not depend on it: when two batches
            # confirm more than the last change was sized for, the model sizes for them now.
            if not self._outgrown(demands, context) and not self._cut_short(demands, context):
                settling = ("waiting for the executors beyond the target to leave"
                            if context.live_executors > context.current_target
                            else "waiting for the requested executors to register")
                whys = [settling] if math.isinf(context.window_start) else stabilizing
                return not_ready(context.now, context.current_target, whys)
        if not active:
            return size([], {}, history, context, "" if held else "no active streaming query", held)
        sized = {qid: c for qid, c in costs.items() if qid not in learning}
        evaluation = size_ahead(size(demands, sized, history, context, "", held, learning),
                                demands, sized, history, context, held, learning)
        if learning:
            evaluation = replace(evaluation, still_learning=tuple(readable.query(last.queries[q].name, q)
                                                                  for q in learning))
        outcomes = self._outcomes(last, context, concurrent)
        return replace(evaluation, outcomes=outcomes) if outcomes else evaluation

    @staticmethod
    def _outgrown(demands: list[Demand], context: ScalingContext) -> bool:
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
    def _cut_short(demands: list[Demand], context: ScalingContext) -> bool:
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
        """What the last change did (:func:`.outcomes.measure_outcomes`), once per change, at the
        first evaluation that measures it: the control loop reports that outcome and the policy
        judges the scale-up on it. (Measured again at every tick until the next change, nothing
        read it, and at 100 queries it took a third of each such tick.)"""
        rec = context.last_scaling
        if rec is None or not rec.predictions or rec.time == self._measured:
            return {}
        out = measure_outcomes(rec, last, context, batches, self._learners)
        if out:
            self._measured = rec.time
        return out

    def _forget(self, last: MetricSample) -> None:
        """Drop the models of queries no longer reported (bounded memory)."""
        for qid in [q for q in self._learners if q not in last.queries]:
            del self._learners[qid]
            self._batches.pop(qid, None)
            self._given.pop(qid, None)
            self._demands.forget(qid)
