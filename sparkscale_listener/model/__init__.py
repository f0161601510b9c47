"""The micro-batch performance model: what one query's batch costs at a given size, learned online
from every completed batch.

A micro-batch is not a continuous operator. Each batch pays

* driver time no executor shortens (planning, offset and state commits, the sink's commit):
  ``driver_s``;
* task time ``W = fixed_task_s + per_executor_s x E + per_row_s x rows``: a fixed part paid per task
  (scheduling, deserializing, the sink's file per task), a part per executor its tasks land on
  (``E``: a Python worker, a connection) and the work of its rows;
* spread over its tasks: the widest stage's ``T`` tasks on ``P = min(slots, T)`` slots run in
  ``ceil(T / P)`` waves, so the task phase lasts ``efficiency x waves x W / tasks``. ``efficiency``
  is 1 for perfectly even tasks; skew and stragglers make it larger.

So the batch time is ``driver_s + efficiency x waves(P) x W / tasks``: only the second part falls
with more executors, and only while ``P`` is below ``T``. Queries of one application share its
executors: batches that run at the same time (Spark starts the batches of queries with one trigger
interval at the same instant) split the slots, so a batch's task phase lasts at least the joint
task time of it and its :class:`Concurrent` batches over all the slots. :class:`BatchCostLearner` fits the
coefficients from the query's recent batches (the executor counts it ran on give ``per_executor_s``
and the efficiency; batches of different sizes give ``per_row_s``), and :class:`BatchCost` answers
what a size would do: batch time, throughput, time to drain a backlog.

The formulas are :mod:`.cost`'s, the learning :mod:`.learner`'s.
"""

from .cost import (
    NONE_CONCURRENT,
    BatchCost,
    Concurrent,
    CostColumns,
    CostFormulas,
    Size,
    executors_for,
    ideal_task_phase,
    ops,
    waves,
)
from .learner import KEPT_BATCHES, MIN_BATCHES, WARMUP_BATCHES, BatchCostLearner, fit_all

__all__ = ["KEPT_BATCHES", "MIN_BATCHES", "NONE_CONCURRENT", "WARMUP_BATCHES", "BatchCost",
           "BatchCostLearner", "Concurrent", "CostColumns", "CostFormulas", "Size", "executors_for",
           "fit_all", "ideal_task_phase", "ops", "waves"]
