"""What the last change did: once its new size has run enough warm batches, their batch time
against what the model it rested on predicted, per query it predicted something for."""

from __future__ import annotations

from collections.abc import Mapping
from statistics import median

import numpy as np

from ..concurrency import Swept
from ..decisions import Outcome, ScalingContext, ScalingRecord
from ..metrics import MetricSample
from ..model import BatchCostLearner, Concurrent

# Batches at the current size needed after a change before a decision (the arrival rate of one
# batch can be noise; two consecutive ones show a step).
CONFIRMING_BATCHES = 2


def measure_outcomes(rec: ScalingRecord, last: MetricSample, context: ScalingContext,
                     batches: Mapping[str, Swept],
                     learners: Mapping[str, BatchCostLearner]) -> dict[str, Outcome]:
    """What the change ``rec`` did, per query it predicted something for, once the new size has
    run :data:`CONFIRMING_BATCHES` warm batches: their median batch time against the
    prediction of the model the change rested on, for the rows they actually read (none yet: an
    empty dict). Measurements only: whether that was effective is the policy's verdict."""
    out: dict[str, Outcome] = {}
    for qid, prediction in rec.predictions.items():
        q, learner = last.queries.get(qid), learners.get(qid)
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
        out[qid] = Outcome(query_id=qid, batches=len(warm), rows_per_batch=rows, batch_time_s=observed,
                           predicted_s=predicted, predicted_before_s=before, executors=size)
    return out
