"""The built-in checkers: task failures, executor losses, query failures, GC and heap pressure,
throughput regression. Each is a :class:`~sparkscale_listener.check.checker.ScalingChecker` with its
keys under ``spark.sparkscale.checkers.<name>.``."""

from __future__ import annotations

import math

from ..config.core import BUILTIN_CHECKERS
from ..config.options import Boolean, Duration, Integer, Names, Number, Option
from ..config.plugins import PluginContext
from ..metrics import DELIBERATE_REMOVALS, ExecutorInfo, MetricSample, QueryMetrics
from .checker import (
    CheckContext,
    CheckResult,
    ScalingChecker,
    added_executor_ids,
    format_seconds,
    lost_from_outside,
    query_label,
    replaced_at,
    trailing_window,
)

# A checker judges a scaling within minutes of it: an hour is the longest window that makes sense.
HOUR = 3600.0
WINDOW = Duration(at_most=HOUR)


class TaskFailuresChecker(ScalingChecker):
    """Tasks fail after the scaling: more than ``maxFailures`` failed tasks in the window AND more
    than ``maxFailureRatio`` of the tasks that ended. Both are needed: a single retried task is
    normal, and a handful of failures among thousands of tasks does not stop a query. Also fires
    when the failures sit on the executors the scaling added (a bad host, a missing library, a
    smaller container) even if the overall ratio still looks fine. A rollback that removes
    executors is judged only from when it took effect (pending until then): the executors it is
    removing go on failing tasks meanwhile, and those failures are what it fixes."""

    name = "taskFailures"

    options = (
        Option("maxFailures", Integer(minimum=0), 3, "unhealthy only if failed tasks in the window "
               "exceed this **and** the failure ratio exceeds `maxFailureRatio`"),
        Option("maxFailureRatio", Number(0.0, 1.0), 0.1, "failed / (finished + failed) tasks in the window"),
        Option("newExecutorShare", Number(0.0, 1.0), 0.8, "also unhealthy when more than `maxFailures` "
               "failures sit on executors the scaling added and make up this share of all failures "
               "(0 disables)"),
        Option("window", WINDOW, 120.0, "trailing window (never reaches back before the scaling)"),
    )

    def __init__(self, context: PluginContext) -> None:
        super().__init__(context)
        o = context.options.read(self.options)
        self.max_failures = o["maxFailures"]
        self.max_ratio = o["maxFailureRatio"]
        self.new_share = o["newExecutorShare"]
        self.window_s = o["window"]

    def check(self, context: CheckContext) -> CheckResult:
        scaling = context.scaling
        not_before = None
        if scaling.action == "rollback" and scaling.to_executors < scaling.from_executors:
            # A rollback that removes executors is judged from when it took effect: until the
            # executors it removes are gone they go on failing tasks, and those failures are
            # what the rollback fixes, not a sign that it failed.
            done = next((s for s in context.samples
                         if s.cluster.live_executors <= scaling.to_executors), None)
            if done is None:
                return self.healthy(f"waiting for the rollback to {scaling.to_executors} "
                                    "executors to take effect", pending=True)
            not_before = done.time
        span = trailing_window(context, self.window_s, include_before=not_before is None,
                               not_before=not_before)
        if span is None:
            return self.healthy("no samples yet", pending=True)
        base, last = span
        failed = max(0, last.cluster.tasks_failed - base.cluster.tasks_failed)
        finished = max(0, last.cluster.tasks_finished - base.cluster.tasks_finished)
        if failed == 0:
            return self.healthy(f"no task failures in {format_seconds(last.time - base.time)}")
        # tasks_finished may or may not include failed tasks: counting failed ones on top keeps
        # the ratio conservative (lower) either way.
        ratio = failed / max(1, finished + failed)
        on_new = self._failures_on(added_executor_ids(context), base, last)
        where = f"; {on_new} of them on executors added by the scaling" if on_new else ""
        text = (f"{failed} task failures in {format_seconds(last.time - base.time)} after the scaling "
                f"({ratio:.0%} of {finished + failed} ended tasks{where})")
        if failed > self.max_failures and ratio > self.max_ratio:
            return self.unhealthy(f"{text}; thresholds maxFailures={self.max_failures}, "
                                  f"maxFailureRatio={self.max_ratio:g}")
        if (self.new_share > 0 and on_new > self.max_failures
                and on_new >= self.new_share * failed):
            return self.unhealthy(f"{text}: failures concentrate on the new executors "
                                  f"(newExecutorShare={self.new_share:g})")
        return self.healthy(f"{text}: within thresholds")

    @staticmethod
    def _failures_on(ids: set[str], base: MetricSample, last: MetricSample) -> int:
        if not ids:
            return 0
        before = {e.executor_id: e.tasks_failed for e in base.cluster.executors}
        return sum(max(0, e.tasks_failed - before.get(e.executor_id, 0))
                   for e in last.cluster.executors if e.executor_id in ids)


class ExecutorFailuresChecker(ScalingChecker):
    """Executors die after the scaling (more than ``maxLost`` lost in the window, not counting the
    driver's own kills and decommissions). Executors that never arrive are not a failure of the
    scaling but a capacity limit of the cluster (a full queue, a quota): the control loop holds
    the target at what arrived and reports it; only executors that start and then die count."""

    name = "executorFailures"

    options = (
        Option("maxLost", Integer(minimum=0), 1, "unhealthy if more executors than this are lost in "
               "the window (deliberate removals excluded)"),
        Option("ignoreReasons", Names(), DELIBERATE_REMOVALS, "substrings of removal "
               "reasons that are deliberate"),
        Option("window", WINDOW, 300.0, "window for lost executors"),
    )

    def __init__(self, context: PluginContext) -> None:
        super().__init__(context)
        config = context.config
        o = context.options.read(self.options)
        self.max_lost = o["maxLost"]
        self.window = o["window"]
        self.ignore = tuple(r.lower() for r in o["ignoreReasons"])
        # Watch until executors that arrive late (up to the provisioning timeout) had a chance
        # to start and fail.
        self.window_s = max(self.window, config.provisioning_timeout_s + config.interval_s)

    def check(self, context: CheckContext) -> CheckResult:
        if not context.samples:
            return self.healthy("no samples yet", pending=True)
        lost = self._lost(context)
        if len(lost) > self.max_lost:
            shown = "; ".join(f"{e.executor_id}: {e.removed_reason or 'no reason given'}"
                              for e in lost[:5])
            return self.unhealthy(f"{len(lost)} executors lost in {format_seconds(self.window)} after the "
                                  f"scaling (maxLost={self.max_lost}): {shown}")
        return self.healthy(f"{len(lost)} executors lost")

    def _lost(self, context: CheckContext) -> list[ExecutorInfo]:
        # A scale-down removes (from - to) executors on purpose; a collector that does not carry
        # the reason must not make those look like failures.
        scaling = context.scaling
        lost = lost_from_outside(context, max(scaling.time, context.now - self.window), context.now,
                                 self.ignore, max(0, scaling.from_executors - scaling.to_executors))
        if scaling.action == "rollback":
            # Executors the undone scaling started that die after the rollback are its doing (they
            # were dying already), not the rollback's: only the ones that came after it count.
            lost = [e for e in lost if e.added_time > scaling.time]
        return lost


class QueryFailureChecker(ScalingChecker):
    """A streaming query terminated with an exception, or its batches failed (more than
    ``maxFailedBatches`` in the window). A query that had already failed before the scaling is
    not blamed on it; a query stopped without an exception is not a failure."""

    name = "queryFailure"

    options = (
        Option("maxFailedBatches", Integer(minimum=0), 0, "unhealthy if a query terminates with an "
               "exception or its failed batches grow by more than this"),
        Option("window", WINDOW, 300.0, "trailing window"),
    )

    def __init__(self, context: PluginContext) -> None:
        super().__init__(context)
        o = context.options.read(self.options)
        self.max_failed_batches = o["maxFailedBatches"]
        self.window_s = o["window"]

    def check(self, context: CheckContext) -> CheckResult:
        span = trailing_window(context, self.window_s)
        if span is None:
            return self.healthy("no samples yet", pending=True)
        base, last = span
        before = context.before.queries if context.before else {}
        problems = []
        for query_id, query in last.queries.items():
            earlier = before.get(query_id)
            if query.exception and not (earlier and earlier.exception == query.exception):
                problems.append(f"{query_label(query)} terminated: {query.exception.splitlines()[0][:300]}")
                continue
            start = base.queries.get(query_id)
            failed = query.failed_batches - (start.failed_batches if start else 0)
            if failed > self.max_failed_batches:
                problems.append(f"{query_label(query)}: {failed} failed batches in "
                                f"{format_seconds(last.time - base.time)} (maxFailedBatches="
                                f"{self.max_failed_batches})")
        if problems:
            return self.unhealthy("; ".join(problems))
        return self.healthy(f"{len(last.queries)} queries without new failures")


class GcPressureChecker(ScalingChecker):
    """JVM GC time / task run time over the window above ``spark.sparkscale.memory.
    gcPressureThreshold``, judged once the window holds ``minRunTime`` of task run time (a few
    tasks prove nothing). Scale-ups are not judged by default: rolling one back (fewer executors)
    cannot relieve memory pressure."""

    name = "gcPressure"

    options = (
        Option("threshold", Number(0.0, 1.0, low_open=True), 0.3, "GC time / task run time over the "
               "window above this is unhealthy"),
        Option("window", WINDOW, 120.0, "averages out a single GC spike"),
        Option("minRunTime", WINDOW, 60.0, "task run time needed in the window before GC is judged"),
        Option("scaleUps", Boolean(), False, "judge scale-ups too (rolling a scale-up back cannot "
               "relieve memory pressure)"),
    )

    def __init__(self, context: PluginContext) -> None:
        super().__init__(context)
        o = context.options.read(self.options)
        self.threshold = o["threshold"]
        self.window_s = o["window"]
        self.min_run_s = o["minRunTime"]
        self.scale_ups = o["scaleUps"]

    def check(self, context: CheckContext) -> CheckResult:
        scaling = context.scaling
        if scaling.to_executors > scaling.from_executors and not self.scale_ups:
            return self.healthy("scale-ups are not judged (scaleUps=false)")
        span = trailing_window(context, self.window_s, include_before=False)
        if span is None:
            return self.healthy("no samples yet", pending=True)
        base, last = span
        run_ms = last.cluster.run_ms - base.cluster.run_ms
        gc_ms = max(0.0, last.cluster.gc_ms - base.cluster.gc_ms)
        if run_ms < self.min_run_s * 1000.0:
            return self.healthy(f"only {format_seconds(max(0.0, run_ms) / 1000)} of task run time, "
                                f"minRunTime={format_seconds(self.min_run_s)} needed to judge GC")
        ratio = gc_ms / run_ms
        text = (f"GC took {ratio:.0%} of task run time over {format_seconds(last.time - base.time)} "
                f"(threshold {self.threshold:.0%})")
        return self.unhealthy(text) if ratio > self.threshold else self.healthy(text)


class HeapUsageChecker(ScalingChecker):
    """Heap used / heap max (the fullest executor) above ``spark.sparkscale.memory.
    heapUsageThreshold`` in at least ``minFraction`` of the samples in the window (and at least
    ``minSamples`` of them): sustained, not one spike before a full GC. Scale-ups are not judged by
    default (see gcPressure)."""

    name = "heapUsage"

    options = (
        Option("threshold", Number(0.0, 1.0, low_open=True), 0.95, "heap used / heap max on any "
               "executor above this is high"),
        Option("minFraction", Number(0.0, 1.0), 0.5, "unhealthy only if this fraction of the window's "
               "samples are above the threshold"),
        Option("minSamples", Integer(minimum=1), 3, "heap readings needed before judging"),
        Option("window", WINDOW, 120.0, "trailing window"),
        Option("scaleUps", Boolean(), False, "as for gcPressure"),
    )

    def __init__(self, context: PluginContext) -> None:
        super().__init__(context)
        o = context.options.read(self.options)
        self.threshold = o["threshold"]
        self.window_s = o["window"]
        self.min_fraction = o["minFraction"]
        self.min_samples = o["minSamples"]
        self.scale_ups = o["scaleUps"]

    def check(self, context: CheckContext) -> CheckResult:
        scaling = context.scaling
        if scaling.to_executors > scaling.from_executors and not self.scale_ups:
            return self.healthy("scale-ups are not judged (scaleUps=false)")
        start = context.now - self.window_s
        values = [s.cluster.heap_used_ratio for s in context.samples
                  if s.time >= start and s.cluster.heap_used_ratio is not None]
        if len(values) < self.min_samples:
            return self.healthy(f"{len(values)} heap readings, {self.min_samples} needed",
                                pending=True)
        high = sum(1 for v in values if v > self.threshold)
        text = (f"heap above {self.threshold:.0%} in {high} of {len(values)} samples "
                f"(peak {max(values):.0%}; minFraction={self.min_fraction:g})")
        if high and high >= self.min_fraction * len(values):
            return self.unhealthy(text)
        return self.healthy(text)


class ThroughputRegressionChecker(ScalingChecker):
    """A query processes fewer rows/s after the scaling than before (by more than ``maxDrop``)
    AND no longer keeps up with its input. The second part matters: after a scale-down, or when
    the input simply fell, a lower rate is expected and fine; a regression is a query that has
    work waiting and does it more slowly. "Not keeping up" is read from the backlog (it grew over
    the window by more than one control interval of input, or it is above
    ``backlogThreshold`` seconds of input) or, for sources without one, from batches that take
    longer than the trigger interval. Without either signal the query is not judged.

    Judged over a full ``window`` that starts ``settle`` after the scaling (new executors warm up).
    The rate before comes from ScalingRecord.rate_before, else from ``CheckContext.history``.
    A window in which an executor lost from outside (a killed JVM, a lost host; not the driver's
    own removals) was not yet replaced is not judged: the dip while its tasks re-run and its
    replacement starts is the loss's doing, and executorFailures judges losses.
    """

    name = "throughputRegression"

    options = (
        Option("maxDrop", Number(0.0, 1.0), 0.3, "unhealthy if rows/s after the scaling fall more than "
               "this below the rate before **and** the query no longer keeps up (backlog growing or "
               "above `backlogThreshold`)"),
        Option("window", WINDOW, 180.0, "judged only over a full window"),
        # With only a few long batches in the window, one batch more or less looks like a 30 %
        # change in rate: such a query is not judged.
        Option("minBatches", Integer(minimum=1), 5, "a query with fewer completed batches in the "
               "window is not judged (one batch more or less would look like a big change in rate)"),
        Option("settle", Duration(until="stabilizationInterval", at_most=HOUR), None,
               "warm-up after the scaling that the window skips"),
    )

    def __init__(self, context: PluginContext) -> None:
        super().__init__(context)
        o = context.options.read(self.options)
        self.max_drop = o["maxDrop"]
        self.window = o["window"]
        settle = o["settle"]
        self.settle = context.config.stabilization_interval_s if settle is None else settle
        self.min_batches = o["minBatches"]
        self.window_s = self.settle + self.window

    def check(self, context: CheckContext) -> CheckResult:
        begin = context.scaling.time + self.settle
        after = [s for s in context.samples if s.time >= begin]
        if not after or after[-1].time - after[0].time < self.window:
            return self.healthy(f"waiting for a full {format_seconds(self.window)} window after "
                                f"{format_seconds(self.settle)} of warm-up", pending=True)
        span = trailing_window(context, self.window, include_before=False, not_before=begin)
        assert span is not None  # `after` is not empty
        base, last = span
        dt = last.time - base.time
        # A loss weighs on the rate from the moment it happens until its replacement registered
        # (never, if none came): windows overlapping that are not judged.
        lost = [e for e in lost_from_outside(context, context.scaling.time, last.time)
                if (replaced_at(context, e) or math.inf) > base.time]
        if lost:
            shown = ", ".join(f"{e.executor_id} ({e.removed_reason})" for e in lost[:3])
            return self.healthy(f"not judged over a window in which executors lost from outside were "
                                f"not yet replaced: {shown}; executorFailures judges the losses",
                                pending=True)
        notes: list[str] = []
        for query_id, query in last.queries.items():
            start = base.queries.get(query_id)
            if start is None or not query.active:
                continue  # a new or terminated query: queryFailure's business
            batches = query.batches - start.batches
            if batches < self.min_batches:
                notes.append(f"{query_label(query)}: {batches} batches in the window, fewer than "
                             f"minBatches={self.min_batches}; not judged")
                continue
            rate_before = self._rate_before(context, query)
            if rate_before is None or rate_before <= 0:
                notes.append(f"{query_label(query)}: no rate before the scaling")
                continue
            rate_after = max(0, query.input_rows - start.input_rows) / dt
            drop = 1.0 - rate_after / rate_before
            text = (f"{query_label(query)} processed {rate_after:.1f} rows/s over {format_seconds(dt)}, "
                    f"{rate_before:.1f} rows/s before the scaling")
            if drop <= self.max_drop:
                notes.append(f"{text}: ok")
                continue
            behind = self._falling_behind(context, base, last, start, query, rate_before)
            if behind is None:
                notes.append(f"{text}: {drop:.0%} lower, not judged (no backlog or trigger "
                             "interval to tell whether it keeps up)")
            elif behind:
                return self.unhealthy(f"{text}: {drop:.0%} lower (maxDrop={self.max_drop:g}) "
                                      f"and {behind}")
            else:
                notes.append(f"{text}: lower, but it keeps up with its input")
        return self.healthy("; ".join(notes) or "no query to judge")

    def _rate_before(self, context: CheckContext, query: QueryMetrics) -> float | None:
        rates = context.scaling.rate_before
        for key in (query.query_id, query.name):
            if key is not None and key in rates:
                return rates[key]
        series = list(context.history)
        if context.before is not None and (not series or series[-1].time < context.before.time):
            series.append(context.before)
        series = [s for s in series if query.query_id in s.queries]
        if len(series) < 2:
            return None
        last = series[-1]
        base = series[0]
        for sample in series:  # the latest sample at least one window before `last`
            if sample.time <= last.time - self.window:
                base = sample
        dt = last.time - base.time
        if dt <= 0:
            return None
        return max(0, last.queries[query.query_id].input_rows
                   - base.queries[query.query_id].input_rows) / dt

    def _falling_behind(self, context: CheckContext, base: MetricSample, last: MetricSample,
                        start: QueryMetrics, query: QueryMetrics, rate_before: float) -> str | None:
        """A short description when the query no longer keeps up, "" when it does, None when
        there is no way to tell."""
        b0, b1 = base.backlog_of(start)[0], last.backlog_of(query)[0]
        if b0 is not None and b1 is not None:
            # One control interval of input absorbs the micro-batch sawtooth of the backlog.
            tolerance = rate_before * context.config.interval_s
            if b1 - b0 > tolerance:
                return f"its backlog grew from {b0:.0f} to {b1:.0f}"
            if b1 > rate_before * context.config.backlog_threshold_s:
                return f"its backlog of {b1:.0f} is not being worked off faster"
            return ""
        batches = query.batches - start.batches
        if query.trigger_interval_ms and batches > 0:
            average = (query.batch_duration_ms - start.batch_duration_ms) / batches
            if average > query.trigger_interval_ms:
                return (f"its batches take {average:.0f} ms, longer than the "
                        f"{query.trigger_interval_ms:.0f} ms trigger interval")
            return ""
        return None


BUILTIN_CHECKER_CLASSES: dict[str, type[ScalingChecker]] = {
    cls.name: cls for cls in (TaskFailuresChecker, ExecutorFailuresChecker, QueryFailureChecker,
                              GcPressureChecker, HeapUsageChecker, ThroughputRegressionChecker)
}
assert tuple(BUILTIN_CHECKER_CLASSES) == BUILTIN_CHECKERS, "keep config.BUILTIN_CHECKERS in sync"
