"""Driver gauges: the autoscaler's state as Spark metrics (the plugin's metric registry, so every
configured sink, the PrometheusServlet included, shows them).

Names are relative to the plugin's registry: ``targetExecutors``, ``liveExecutors``,
``pendingExecutors``, ``paused`` (1 or 0), ``utilization`` (when evaluated), ``backlog`` (all
queries, rows) and ``backlog.<query name or id>``.
"""

from __future__ import annotations

from collections.abc import Callable

from .decisions import Decision
from .metrics import MetricSample

SetGauge = Callable[[str, float], None]


class GaugePublisher:
    """Sets the gauges once per tick through ``set_gauge(name, value)`` (the bridge's)."""

    def __init__(self, set_gauge: SetGauge) -> None:
        self._set = set_gauge

    def publish(self, sample: MetricSample, decision: Decision | None, target: int,
                requested_total: int, paused: bool) -> None:
        live = sample.cluster.live_executors
        self._set("targetExecutors", float(target))
        self._set("liveExecutors", float(live))
        self._set("pendingExecutors", float(max(0, requested_total - live)))
        self._set("paused", 1.0 if paused else 0.0)
        evaluation = decision.evaluation if decision is not None else None
        if evaluation is not None and evaluation.utilization is not None:
            self._set("utilization", float(evaluation.utilization))
        total = 0.0
        for q in sample.queries.values():
            if q.backlog is not None:
                total += q.backlog
                self._set(f"backlog.{q.name or q.query_id}", float(q.backlog))
        self._set("backlog", total)
