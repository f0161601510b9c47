"""For the executor: what an applied change is expected to do (its :class:`ScalingRecord`), and
whether a moment is in a period excluded from scaling."""

from __future__ import annotations

import math
import time as _time

from ..config.core import AutoscalerConfig
from ..decisions import Decision, Prediction, ScalingRecord


def in_excluded_period(config: AutoscalerConfig, epoch_seconds: float) -> bool:
    """True when ``epoch_seconds`` falls in one of ``config.excluded_periods``.

    Windows are daily (start_min, end_min) in local time, start inclusive, end exclusive; a window
    with start > end wraps midnight (22:00-06:00); start == end covers the whole day.
    """
    local = _time.localtime(epoch_seconds)
    minute = local.tm_hour * 60 + local.tm_min
    for start, end in config.excluded_periods:
        if start == end:
            return True
        if start < end and start <= minute < end:
            return True
        if start > end and (minute >= start or minute < end):
            return True
    return False


def scaling_record(decision: Decision, time: float | None = None) -> ScalingRecord:
    """The :class:`ScalingRecord` of an applied decision, with what the model expects of it per
    query: for the load the decision was sized on, the batch time at the old and the new size,
    the rows/s the new size does and the time to drain the backlog. ``rate_before`` is the rows/s
    each query read over the window."""
    before: dict[str, float] = {}
    predictions: dict[str, Prediction] = {}
    ev = decision.evaluation
    old, new = decision.from_executors, decision.to_executors
    if ev is not None:
        for qid, q in ev.queries.items():
            before[qid] = q.input_rate
            cost = q.cost
            if cost is None:
                continue
            rate = q.target_rate + q.catch_up_rate
            predictions[qid] = Prediction(
                query_id=qid, rate=rate, rows_per_batch=q.rows_per_batch,
                needed_executors=q.required_executors,
                batch_time_before_s=_finite(cost.steady_batch_time(rate, max(1, old), q.trigger_s)),
                batch_time_s=_finite(cost.steady_batch_time(rate, max(1, new), q.trigger_s)),
                throughput=cost.capacity(max(1, new)),
                drain_s=(cost.drain_seconds(q.backlog, q.target_rate, max(1, new), None, q.trigger_s)
                         if q.backlog else None),
                cost=cost)
    return ScalingRecord(time=decision.time if time is None else time, action=decision.action,
                         from_executors=old, to_executors=new, reason=decision.reason,
                         rate_before=before, predictions=predictions)


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None
