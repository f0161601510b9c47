"""Checkers: each judges, after a scaling was applied, whether the application is still healthy.

The rollback guard (:mod:`sparkscale_listener.check.guard`) runs every configured
:class:`ScalingChecker` once per tick while it watches a scaling, and rolls the scaling back when
one of them finds the application unhealthy.

Writing your own checker
------------------------
Subclass :class:`ScalingChecker` and name the class by its Python path in
``spark.sparkscale.checkers`` (next to, or instead of, the built-in names)::

    class LatencyChecker(ScalingChecker):
        name = "latency"  # its keys live under spark.sparkscale.checkers.latency.*

        options = (Option("maxBatchMs", Number(low=0.0), 30_000.0, "slowest batch allowed"),
                   Option("window", Duration(at_most=3600), 120.0, "trailing window"))

        def __init__(self, context):
            super().__init__(context)
            o = context.options.read(self.options)
            self.max_ms, self.window_s = o["maxBatchMs"], o["window"]

        def check(self, context):
            last = context.samples[-1] if context.samples else None
            ...
            return CheckResult(self.name, healthy=True, reason="batches within 30 s")

Rules a checker must follow:

* ``check`` is called once per control tick while a scaling is watched, with every sample since
  the scaling. It must be fast and side-effect free, and must not block.
* Return ``healthy=True`` unless you are sure the scaling made the application unhealthy: an
  unhealthy result rolls the scaling back. Ordinary noise (one retried task, one GC spike, rates
  that swing by 20 %) must not fire. Use ``pending=True`` while there is not yet enough data.
* Counters in :class:`MetricSample` are cumulative: take differences between two samples (see
  :func:`trailing_window`), do not read a gauge at one instant.
* ``window_s`` tells the guard how long after a scaling this checker needs to see it before the
  scaling may be called healthy.
* An exception raised by ``check`` is logged and counted as healthy ("checker error: ...");
  a checker can never crash the control loop nor cause a rollback by failing itself.

A class that does not subclass :class:`ScalingChecker` is accepted when it has a callable
``check(context) -> CheckResult``. Every checker is constructed like every other plugin:
``cls(context)`` with a :class:`~sparkscale_listener.config.plugins.PluginContext` whose ``options``
hold its keys, or ``cls()`` when the constructor takes no argument. A class without a ``name`` attribute
gets its class name as written in the path (keys under ``checkers.<ClassName>.``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

from ..config.core import AutoscalerConfig
from ..config.options import Option
from ..config.plugins import PluginContext
from ..decisions import ScalingRecord
from ..metrics import DELIBERATE_REMOVALS, ExecutorInfo, MetricSample, QueryMetrics

# ----------------------------------------------------------------------------------------------
# The interface
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckContext:
    """Everything a checker may look at, built by the control loop at each tick of a watch."""

    now: float  # seconds, same clock as MetricSample.time
    config: AutoscalerConfig
    scaling: ScalingRecord  # the action being watched
    before: MetricSample | None  # the last sample before the action (baseline for counters)
    samples: Sequence[MetricSample]  # samples since the action, oldest first
    requested_total: int  # executor target the cluster manager has now
    requested_at: float  # when that target was requested
    # Samples before the action, oldest first (``before`` may be the last of them). Optional:
    # lets a checker compute a "before" rate when ScalingRecord.rate_before lacks a query.
    history: Sequence[MetricSample] = ()

    @classmethod
    def around(cls, scaling: ScalingRecord, samples: Sequence[MetricSample], now: float,
               config: AutoscalerConfig, requested_total: int) -> CheckContext:
        """The context of a watched scaling from the loop's recent samples. The sample of the tick
        that applied the action was collected before it: it is the baseline, not a sample "since
        the action"."""
        return cls(now=now, config=config, scaling=scaling,
                   before=next((x for x in reversed(samples) if x.time <= scaling.time), None),
                   samples=[x for x in samples if x.time > scaling.time], requested_total=requested_total,
                   requested_at=scaling.time, history=[x for x in samples if x.time <= scaling.time])


@dataclass(frozen=True)
class CheckResult:
    """A checker's verdict at one tick. ``reason`` is shown to people: give numbers."""

    checker: str
    healthy: bool
    reason: str
    # Healthy only because there is not enough data yet; the guard will not call the scaling
    # healthy while a checker is pending (up to twice the watch duration).
    pending: bool = False


class ScalingChecker(ABC):
    """Judges whether the application is still healthy after a scaling.

    Subclasses set ``name`` (their keys live under ``spark.sparkscale.checkers.<name>.``), declare
    their keys as ``options`` and read them in ``__init__`` with ``context.options.read(...)``
    (unknown keys fail at startup), set ``window_s`` and implement :meth:`check`.
    """

    name: str = ""
    options: tuple[Option, ...] = ()

    def __init__(self, context: PluginContext) -> None:
        self.config = context.config
        # How long after a scaling this checker needs to judge it; the guard watches a scaling
        # for the longest window of its checkers.
        self.window_s: float = 0.0

    @abstractmethod
    def check(self, context: CheckContext) -> CheckResult:
        """Return healthy unless the scaling being watched left the application unhealthy."""

    # Small helpers so that results read the same everywhere.
    def healthy(self, reason: str, pending: bool = False) -> CheckResult:
        return CheckResult(self.name, True, reason, pending)

    def unhealthy(self, reason: str) -> CheckResult:
        return CheckResult(self.name, False, reason)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, window_s={getattr(self, 'window_s', 0.0):g})"


# ----------------------------------------------------------------------------------------------
# Helpers for checkers (public: custom checkers may use them)
# ----------------------------------------------------------------------------------------------


def trailing_window(context: CheckContext, window_s: float, include_before: bool = True,
                    not_before: float | None = None) -> tuple[MetricSample, MetricSample] | None:
    """(baseline, latest) samples spanning at most the last ``window_s`` seconds since the action.

    Counter deltas ``latest - baseline`` then cover events in the trailing window, never events
    before the action. ``include_before`` lets ``context.before`` serve as the baseline (so events
    right after the action count); ``not_before`` excludes samples older than that time (e.g. a
    warm-up period). Returns None when there are no usable samples.
    """
    series: list[MetricSample] = []
    if include_before and context.before is not None:
        series.append(context.before)
    series.extend(context.samples)
    if not_before is not None:
        series = [s for s in series if s.time >= not_before]
    if not series:
        return None
    latest = series[-1]
    start = latest.time - window_s
    baseline = series[0]
    for sample in series:
        if sample.time <= start:
            baseline = sample
        else:
            break
    return baseline, latest


def added_executor_ids(context: CheckContext) -> set[str]:
    """Executors that registered after the action: the ones the scaling added."""
    known = {e.executor_id for e in context.before.cluster.executors} if context.before else set()
    added: set[str] = set()
    for sample in context.samples:
        for executor in sample.cluster.executors:
            if executor.executor_id not in known and executor.added_time >= context.scaling.time:
                added.add(executor.executor_id)
    return added


def lost_from_outside(context: CheckContext, since: float, until: float,
                      deliberate: Sequence[str] = DELIBERATE_REMOVALS,
                      excused_unexplained: int | None = None) -> list[ExecutorInfo]:
    """Executors removed between ``since`` and ``until`` for a reason that is not the driver's
    own (a killed JVM, a lost host, a preempted container), oldest first.

    An executor removed without a reason cannot be told from a removal of ours: it is not counted,
    unless ``excused_unexplained`` is given; then those beyond that many (the executors the watched
    scale-down removed on purpose) count as lost too."""
    removed = [e for e in _executors_seen(context)
               if e.removed_time is not None and since <= e.removed_time <= until]
    lost = [e for e in removed if e.lost_since(since, deliberate)]
    if excused_unexplained is not None:
        lost.extend([e for e in removed if e.removed_reason is None][excused_unexplained:])
    return sorted(lost, key=lambda e: (e.removed_time or 0.0, e.executor_id))


def replaced_at(context: CheckContext, lost: ExecutorInfo) -> float | None:
    """When the first executor registered after ``lost`` was removed (its replacement), or None."""
    after = [e.added_time for e in _executors_seen(context)
             if lost.removed_time is not None and e.added_time > lost.removed_time]
    return min(after) if after else None


def _executors_seen(context: CheckContext) -> list[ExecutorInfo]:
    seen: dict[str, ExecutorInfo] = {}
    for sample in context.samples:  # union: removed executors drop off the list eventually
        for executor in sample.cluster.executors:
            seen[executor.executor_id] = executor
    return list(seen.values())


def query_label(query: QueryMetrics) -> str:
    return f"query {query.name!r}" if query.name else f"query {query.query_id}"


def format_seconds(seconds: float) -> str:
    return f"{seconds:.0f}s" if seconds >= 1 else f"{seconds * 1000:.0f}ms"
