"""Evaluation: from each query's recent batches to the executors the application needs.

:class:`MetricEvaluator` is the pluggable interface (``spark.sparkscale.evaluator``);
:class:`MicroBatchEvaluator` is the default. It sizes on the micro-batch performance model
(:mod:`sparkscale_listener.model`): per query, the rate to follow is the arrival rate its batches
show (each batch reads what arrived since the previous one started, so two batches show a step, no
window needed) plus what a backlog asks for (Flink's catch-up and provisioning terms), and the size
it needs is the fewest executors whose predicted batch time for the rate over
``utilization.target`` keeps within its batch period (its trigger interval, or half of
``backlogThreshold`` where longer or where there is no trigger: batches may run back to back, a row
waiting at most ``backlogThreshold``), and for the rate itself within a quarter of
``backlogThreshold`` (the lag's peaks within half of it). Queries share the executors: the
application needs what its most demanding query needs, and enough slots for all of their task time
at the target.

One pass, in the order of its modules: each query's load (:mod:`.demand`), how busy each size keeps
it (:mod:`.utilization`), one size for all of them (:mod:`.sizing`) and its words (:mod:`.explain`);
what the last change did (:mod:`.outcomes`); :mod:`.microbatch` runs them.
"""

from .base import MetricEvaluator
from .microbatch import MicroBatchEvaluator

__all__ = ["MetricEvaluator", "MicroBatchEvaluator"]
