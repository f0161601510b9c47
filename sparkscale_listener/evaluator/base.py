"""The evaluator's interface (``spark.sparkscale.evaluator``): from the collected samples to an
:class:`~sparkscale_listener.decisions.Evaluation`."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from ..decisions import Evaluation, ScalingContext
from ..metrics import MetricSample


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
    * Return ``not_ready(context.now, context.current_target, [reason, ...])`` (``ready=False``)
      when there is not enough data; the policy then does nothing. Otherwise set
      ``recommended_executors`` (the policy bounds it to ``[config.min_executors,
      config.max_executors]``) and
      ``utilization`` = how busy the current executors are against the target (1 = all of the
      time the target allows); the policy applies the utilization band, the scale-up/down factors,
      the delayed scale-down, the ineffective-scale-up blocks and, for the queries named in
      ``still_learning``, no scale-down while they learn. A recommendation above what
      ``required_slots`` explain is applied even inside the band (a floor, a forecast).
    * Fill ``queries`` for every active query when you can: the policy uses each query's
      ``input_rate`` (processed rows/s), ``target_rate``, ``catch_up_rate``, ``required_slots``,
      ``capped``, ``backlog_mode`` and ``rising``, and the UI shows them. Write reasons a person can
      act on.
    """

    @abstractmethod
    def evaluate(self, history: Sequence[MetricSample], context: ScalingContext) -> Evaluation:
        """Evaluate the latest sample (and what came before) and recommend an executor count."""
