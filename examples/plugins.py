"""Two complete plugins: an evaluator and a realizer, chosen by configuration.

    spark.sparkscale.evaluator               = examples.plugins.BusinessHoursFloorEvaluator
    spark.sparkscale.evaluator.floor         = 4
    spark.sparkscale.evaluator.hours         = 08:00-18:00

    spark.sparkscale.realizer                = examples.plugins.GradualRealizer
    spark.sparkscale.realizer.maxStep        = 2

(`examples` must be importable on the driver: run from the repository root, or package it.)
"""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence
from dataclasses import replace

from sparkscale_listener.plugins import (
    DailyWindows,
    Evaluation,
    ExecutorRealizer,
    Integer,
    MetricEvaluator,
    MetricSample,
    MicroBatchEvaluator,
    Option,
    PluginContext,
    RealizationResult,
    ScalingContext,
    ScalingRealizer,
)


class BusinessHoursFloorEvaluator(MetricEvaluator):
    """The built-in evaluator, with a floor of executors during business hours.

    Useful when load arrives faster than executors can be provisioned every morning: keep
    capacity warm in the hours that need it, and let the autoscaler do the rest of the day.
    Keys (under ``spark.sparkscale.evaluator.``): ``floor`` (executors), ``hours`` (daily
    ``HH:MM-HH:MM`` windows, local time).
    """

    options = (
        Option("floor", Integer(minimum=0), None, "executors kept during the hours (default: "
               "minExecutors)"),
        Option("hours", DailyWindows(), (), "daily HH:MM-HH:MM windows, local time"),
    )

    def __init__(self, context: PluginContext) -> None:
        o = context.options.read(self.options)  # a typo under evaluator.* fails at startup
        self.floor = context.config.min_executors if o["floor"] is None else o["floor"]
        self.hours = o["hours"]
        self.inner = MicroBatchEvaluator()

    def evaluate(self, history: Sequence[MetricSample], context: ScalingContext) -> Evaluation:
        evaluation = self.inner.evaluate(history, context)
        if not evaluation.ready or not self._in_hours(context.now):
            return evaluation
        floor = min(self.floor, context.config.max_executors)
        if evaluation.recommended_executors >= floor:
            return evaluation
        return replace(evaluation, recommended_executors=floor,
                       headline=f"business-hours floor of {floor} executors",
                       reason=f"{evaluation.headline}; {evaluation.reason}")

    def _in_hours(self, now: float) -> bool:
        local = time.localtime(now)
        minute = local.tm_hour * 60 + local.tm_min
        # start == end is the whole day; start > end wraps midnight (22:00-06:00).
        return any(start == end or ((start <= minute < end) if start < end
                                    else (minute >= start or minute < end))
                   for start, end in self.hours)


class GradualRealizer(ScalingRealizer):
    """Moves at most ``maxStep`` executors per control tick towards the target.

    For clusters where a burst of executor requests trips a quota or overwhelms a node pool. It
    delegates the safe mechanics (absolute targets, idle-only removal) to the built-in realizer;
    the control loop keeps calling it every tick until live executors match the target.
    Keys (under ``spark.sparkscale.realizer.``): ``maxStep`` (default 1).
    """

    options = (Option("maxStep", Integer(minimum=1), 1, "executors added or removed per tick"),)

    def __init__(self, context: PluginContext) -> None:
        config, backend = context.config, context.backend
        self.max_step = context.options.read(self.options)["maxStep"]
        self.inner = ExecutorRealizer(backend, config.min_executors, config.decommission)
        self.backend = backend

    @property
    def requested_total(self) -> int:
        return self.inner.requested_total

    def baseline(self, total: int) -> RealizationResult:
        return self.inner.baseline(total)

    def realize(self, target: int, remove_first: Collection[str] = ()) -> RealizationResult:
        current = self.inner.requested_total or len(self.backend.executor_ids())
        step = max(-self.max_step, min(self.max_step, target - current))
        return self.inner.realize(current + step, remove_first)
