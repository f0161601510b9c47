"""Evaluation: from a window of metric samples to the executors the application needs.

:class:`MetricEvaluator` is the pluggable interface (``spark.sparkscale.evaluator.class``);
:class:`BusyTimeEvaluator` is the default, the DS2 / FLIP-271 model carried over to Spark
micro-batches: the cost of a row is measured as executor task time per row, the rate the query
must sustain is its arrival rate plus what a backlog asks for, and demand in task slots is Flink's
target capacity, ``rate x cost / utilization target + (catch-up + provisioning arrivals) x cost``,
capped by the query's useful parallelism.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .decisions import Evaluation, QueryEvaluation, ScalingContext
from .metrics import MetricSample, QueryMetrics

# A query whose batches take at most this fraction of its trigger interval keeps up with margin.
HEALTHY_BATCH_FRACTION = 0.8
# A query busy on this fraction of the slots it can use is saturated (it cannot show more demand).
SATURATED_FRACTION = 0.95
# A query whose batches take longer than this many trigger intervals falls behind its trigger.
BEHIND_FACTOR = 1.1
# A query's first batches pay for starting Python workers, loading classes, opening the sink:
# their task time says nothing about the steady cost of a row.
WARMUP_BATCHES = 2
_EPS = 1e-9


class MetricEvaluator(ABC):
    """Turns the collected metric history into an :class:`Evaluation` (the pluggable evaluator).

    Implement :meth:`evaluate` and name the class in ``spark.sparkscale.evaluator.class``
    (``package.module.ClassName``); it is constructed like every plugin, ``cls(context)`` with a
    :class:`~sparkscale_listener.config.plugins.PluginContext` (or ``cls()``). Its own keys live under
    ``spark.sparkscale.evaluator.*``: declare them as ``options`` and read them with
    ``context.options.read(self.options)`` (keys it does not read fail at startup).

    Contract:

    * ``evaluate`` is called once per control tick, from the control-loop thread only (never
      concurrently), so an implementation may keep state between calls (e.g. the last known cost
      of a query). It must be fast (well under the tick interval) and should not raise: an
      exception is logged and the tick is skipped.
    * ``history`` is ordered oldest first and ends with the sample of this tick. It may hold
      samples older than ``context.window_start`` (before the last executor change, or during
      stabilization): those describe another cluster size and must be ignored.
    * Counters in :class:`~sparkscale_listener.metrics.QueryMetrics` and
      :class:`~sparkscale_listener.metrics.ClusterMetrics` are cumulative: take rates as
      ``(last - first) / (t_last - t_first)``. Gauges (backlog, live executors) are instants.
      ``sample.external`` carries extra metrics from a custom collector.
    * Return ``ready=False`` (with a reason, ``recommended_executors`` = ``context.current_target``)
      when there is not enough data; the policy then does nothing. Otherwise set
      ``recommended_executors`` within ``[config.min_executors, config.max_executors]`` and
      ``utilization`` = the busy fraction of the current slots the load needs (see
      :func:`band_utilization`); the policy applies the utilization band, the scale-up/down
      factors, the delayed scale-down and the ineffective-scale-up blocks. A recommendation above
      what ``required_slots`` explain is applied even inside the band (a floor, a forecast).
    * Fill ``queries`` for every active query when you can: the policy uses each query's
      ``input_rate`` (processed rows/s), ``target_rate``, ``catch_up_rate``, ``required_slots``,
      ``capped`` and ``backlog_mode``, and the UI shows them. Write reasons a person can act on.
    """

    @abstractmethod
    def evaluate(self, history: Sequence[MetricSample], context: ScalingContext) -> Evaluation:
        """Evaluate the samples in ``[context.window_start, now]`` and recommend an executor count."""


@dataclass(frozen=True)
class _Window:
    first: MetricSample
    last: MetricSample
    samples: tuple[MetricSample, ...]  # first..last inclusive

    @property
    def dt(self) -> float:
        return self.last.time - self.first.time


def select_window(history: Sequence[MetricSample], window_start: float,
                  window_s: float) -> tuple[_Window | None, str]:
    """The samples within the last ``window_s`` seconds, all at or after ``window_start``.

    Returns (window, "") when the usable samples span a full window, else (None, why not).
    """
    if math.isinf(window_start):
        return None, "waiting for requested executors to register before measuring"
    usable = sorted((s for s in history if s.time >= window_start), key=lambda s: s.time)
    if not usable:
        return None, f"no samples since the window start at t={window_start:.0f}s (stabilizing)"
    span = usable[-1].time - usable[0].time
    if span + _EPS < window_s:
        return None, (f"collecting metrics: {span:.0f}s of the {window_s:.0f}s window since "
                      f"t={max(window_start, usable[0].time):.0f}s")
    last = usable[-1]
    # The latest sample that still gives a full window: span >= window_s, as close to it as the
    # tick grid allows.
    first = next(s for s in reversed(usable) if s.time <= last.time - window_s + _EPS)
    return _Window(first, last, tuple(s for s in usable if s.time >= first.time)), ""


def _label(q: QueryMetrics) -> str:
    return f"'{q.name}'" if q.name else q.query_id


def _batch_start(q: QueryMetrics) -> float | None:
    """Start of the query's latest completed batch (its progress time is the completion)."""
    if q.last_progress_time is None:
        return None
    return q.last_progress_time - (q.last_batch_duration_ms or 0.0) / 1000.0


def _delta(a: float, b: float) -> float:
    # A counter that went down was reset (collector restart): count from zero.
    return b - a if b >= a else b


def band_utilization(rate_work: float, reserved: float, slots: float) -> float | None:
    """The utilization the policy's band is applied to: the busy fraction the arrival rate needs
    of the slots left after reserving the catch-up and provisioning capacity (Flink scales up when
    capacity < rate / utilization.max + reserved, which is this above utilization.max; and down
    when capacity > rate / utilization.min + reserved). With nothing left it is
    (rate + reserved) / slots, at least 1. None without slots."""
    if slots <= 0:
        return None
    free = slots - reserved
    if free > _EPS * slots:
        return rate_work / free
    return max(1.0, (rate_work + reserved) / slots)


class BatchCostModel:
    """Task time of a query's batches as ``alpha x batches + beta x rows``, fitted on recent
    sample intervals, to tell the marginal cost of a row (``beta``) from the fixed cost of a batch.

    Every task pays a fixed price (scheduling, a Python worker, opening the sink's file) whatever
    its rows, so a batch has a fixed cost ``alpha`` (partitions x per-task overhead) besides the
    marginal ``beta`` per row. Dividing busy time by rows charges that fixed part to every row: with
    small batches a query looks several times as expensive as it will be in the bigger batches a
    higher load brings. The fit is only used when it is trustworthy: enough points, batch sizes that
    really vary (between the 20th and 80th percentile, so one odd batch cannot carry the fit), a
    line that explains most of the variance, after dropping points far off it (a batch whose task
    ends landed a tick late looks half as expensive, the next one twice). ``beta`` is kept between
    a quarter of the plain average cost and that average, so a fit error cannot shrink demand more
    than 4x, and old points leave after ``max_points`` intervals.
    """

    MIN_POINTS = 8
    MIN_SPREAD = 1.5  # 80th / 20th percentile of rows per batch
    MIN_R2 = 0.6  # share of the per-batch time variance the line must explain
    MIN_MARGINAL_SHARE = 0.25  # beta >= this x the plain average cost per row
    OUTLIER_MADS = 3.0

    def __init__(self, max_points: int = 60) -> None:
        self._points: deque[tuple[float, float, float]] = deque(maxlen=max_points)
        self.last_time = -math.inf

    def add(self, batches: float, rows: float, busy_s: float) -> None:
        if batches > 0 and rows > 0 and busy_s > 0:
            self._points.append((batches, rows, busy_s))

    def average_cost(self) -> float | None:
        """Task seconds per row over the kept points (the plain average), or None."""
        if not self._points:
            return None
        pts = np.array(self._points)
        return float(pts[:, 2].sum() / pts[:, 1].sum())

    def fit(self) -> tuple[float, float] | None:
        """(alpha seconds per batch, beta seconds per row), or None when not identifiable."""
        if len(self._points) < self.MIN_POINTS:
            return None
        pts = np.array(self._points)
        size = pts[:, 1] / pts[:, 0]  # rows per batch
        per_batch = pts[:, 2] / pts[:, 0]  # seconds per batch
        weight = pts[:, 0]
        low, high = np.percentile(size, [20, 80])
        if high < self.MIN_SPREAD * low:
            return None
        keep = np.ones(len(pts), dtype=bool)
        for _ in range(2):  # fit, drop the points far off the line, fit again
            line = self._line(size[keep], per_batch[keep], weight[keep])
            if line is None:
                return None
            residual = per_batch - (line[0] + line[1] * size)
            mad = float(np.median(np.abs(residual[keep] - np.median(residual[keep]))))
            if mad <= 0:
                break
            inliers = np.abs(residual) <= self.OUTLIER_MADS * 1.4826 * mad
            if inliers.sum() < self.MIN_POINTS or (inliers == keep).all():
                break
            keep = inliers
        line = self._line(size[keep], per_batch[keep], weight[keep])
        if line is None:
            return None
        alpha, beta, r2 = line
        if r2 < self.MIN_R2 or beta <= 0:
            return None
        average = float(pts[keep, 2].sum() / pts[keep, 1].sum())
        beta = min(max(beta, self.MIN_MARGINAL_SHARE * average), average)
        return max(0.0, alpha), beta

    @staticmethod
    def _line(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[float, float, float] | None:
        """Weighted least squares y = a + b x: (a, b, R^2), or None when x does not vary."""
        mx, my = np.average(x, weights=w), np.average(y, weights=w)
        sxx = float(np.sum(w * (x - mx) ** 2))
        if sxx <= 0:
            return None
        b = float(np.sum(w * (x - mx) * (y - my))) / sxx
        a = float(my - b * mx)
        total = float(np.sum(w * (y - my) ** 2))
        residual = float(np.sum(w * (y - a - b * x) ** 2))
        r2 = 1.0 - residual / total if total > 0 else 0.0
        return a, b, r2


class BusyTimeEvaluator(MetricEvaluator):
    """The default evaluator: demand from executor task busy time per row (see module docstring).

    Per active query, over the window:

    * ``cost`` = Δbatch_busy_ms / 1000 / Δinput_rows slot-seconds per row (task time of exactly the
      completed batches, so driver-side planning and commits never inflate it); remembered per
      query for windows without rows;
    * ``input_rate`` = Δinput_rows over the time those batches cover; ``target_rate`` = input rate
      + backlog growth (or, for a saturated query, the last batch's arrival rate when higher);
      ``catch_up_rate`` = (backlog beyond one batch period of arrivals) / ``catchUpDuration``
      (none for a healthy query: batches well inside the trigger interval, backlog not growing);
    * required slots = target x cost / ``utilization.target`` + (catch-up + target x
      provisioning / catchUpDuration) x cost (when no batch completed in the window: at least the
      task time used), capped at the widest stage (useful parallelism); ``cost`` is the marginal
      cost of a row where the batch cost fit is trustworthy (:meth:`_sizing_cost`).

    Application: required slots are summed; recommended executors = ceil(slots / cores), clamped.
    """

    def __init__(self) -> None:
        self._cost: dict[str, float] = {}  # last measured slot-seconds per row, per query id
        self._models: dict[str, BatchCostModel] = {}
        self._fits: dict[str, tuple[float, float]] = {}  # last trustworthy (alpha, beta) per query

    def evaluate(self, history: Sequence[MetricSample], context: ScalingContext) -> Evaluation:
        cfg = context.config
        window, why = select_window(history, context.window_start, cfg.metrics_window_s)
        current = context.current_target
        if window is None:
            return Evaluation(time=context.now, ready=False, current_executors=current,
                              recommended_executors=current, required_slots=0.0, utilization=None,
                              backlog_mode=False, reason=f"not ready: {why}")

        slots = context.slots
        active = [q for q in window.last.queries.values() if q.active]
        self._learn_costs(history, active)
        # The whole pool busy: every query gets less than it asks for, capped or not.
        cluster_busy = (_delta(window.first.cluster.busy_ms, window.last.cluster.busy_ms) / 1000.0
                        / window.dt)
        pool_saturated = slots > 0 and cluster_busy >= SATURATED_FRACTION * slots
        measured = {q.query_id: self._measure(q, window, context, slots, pool_saturated)
                    for q in active}

        # Queries with a backlog but no cost estimate ever hold their current share of the slots
        # (busy-time weighted, else an equal split): no scaling on no data.
        unknown = [qid for qid, m in measured.items() if m.needs_share]
        if unknown:
            busy_total = sum(m.busy_slots for m in measured.values() if not m.idle)
            demanding = [m for m in measured.values() if not m.idle] or list(measured.values())
            for qid in unknown:
                m = measured[qid]
                share = (slots * m.busy_slots / busy_total if busy_total > 0
                         else slots / len(demanding))
                m.required = share
                m.work = m.rate_work = share * cfg.utilization_target  # neutral: at target
        queries = {qid: m.result() for qid, m in measured.items()}

        # Jobs outside the streaming queries (a batch or ML job sharing the application) keep the
        # slots their pending and running tasks ask for, at full use, as Spark's own allocation
        # counts them; the most seen over the window, so a gap between stages frees nothing.
        other = float(max(s.cluster.other_tasks for s in window.samples))
        required = sum(q.required_slots for q in queries.values()) + other
        work = sum(m.work for m in measured.values()) + other
        utilization = band_utilization(sum(m.rate_work for m in measured.values()),
                                       sum(m.reserved for m in measured.values()) + other, slots)
        cores = context.slots_per_executor
        raw = math.ceil(required / cores - _EPS) if required > 0 else 0
        recommended = min(max(raw, cfg.min_executors), cfg.max_executors)
        backlog_mode = any(q.backlog_mode for q in queries.values())

        # Micro-batch awareness: queries that finish their batches well inside the trigger interval
        # with no growing backlog are keeping up; they are never a reason to scale up.
        with_work = [m for m in measured.values() if m.work > 0]
        all_healthy = bool(with_work) and all(m.healthy for m in with_work)
        healthy_hold = all_healthy and recommended > current and other == 0
        if healthy_hold:
            recommended = max(min(current, cfg.max_executors), cfg.min_executors)

        reason = self._reason(measured, queries, required, work, slots, utilization, raw,
                              recommended, context, window.dt, healthy_hold)
        if other:
            reason += (f"; other jobs (not streaming) have up to {other:.0f} pending or running "
                       "tasks, a slot each")
        return Evaluation(time=context.now, ready=True, current_executors=current,
                          recommended_executors=recommended, required_slots=required,
                          utilization=utilization, backlog_mode=backlog_mode, queries=queries,
                          reason=reason)

    def _learn_costs(self, history: Sequence[MetricSample], active: Sequence[QueryMetrics]) -> None:
        """Feed each query's cost model with the sample intervals it has not seen yet (all of the
        history, not just the window: batch sizes vary most across load changes)."""
        for q in active:
            model = self._models.setdefault(q.query_id, BatchCostModel())
            prev: QueryMetrics | None = None
            for sample in history:
                cur = sample.queries.get(q.query_id)
                if cur is None:
                    prev = None
                    continue
                if prev is not None and sample.time > model.last_time and prev.batches >= WARMUP_BATCHES:
                    model.add(_delta(prev.batches, cur.batches), _delta(prev.input_rows, cur.input_rows),
                              _delta(prev.batch_busy_ms, cur.batch_busy_ms) / 1000.0)
                    model.last_time = sample.time
                prev = cur

    # -- per query ---------------------------------------------------------------------------

    def _measure(self, q: QueryMetrics, window: _Window, context: ScalingContext,
                 slots: int, pool_saturated: bool) -> _QueryMeasure:
        cfg = context.config
        last = window.last
        # A query that started inside the window is measured from its first sample.
        first_sample = next((s for s in window.samples if q.query_id in s.queries), last)
        q0 = first_sample.queries.get(q.query_id, q)
        dt = last.time - first_sample.time
        notes: list[str] = []
        if first_sample is not window.first:
            notes.append(f"seen for {dt:.0f}s of the window")

        rows = _delta(q0.input_rows, q.input_rows)
        busy_slots = _delta(q0.busy_ms, q.busy_ms) / 1000.0 / dt if dt > 0 else 0.0
        batches = _delta(q0.batches, q.batches)

        # Cost from task time only: driver time per batch is not in batch_busy_ms.
        # Measured from the first sample past the warm-up batches (all of the window, usually).
        qw = next((x.queries[q.query_id] for x in window.samples if q.query_id in x.queries
                   and x.queries[q.query_id].batches >= WARMUP_BATCHES), None)
        if qw is not None:
            warm_rows = _delta(qw.input_rows, q.input_rows)
            warm_busy_s = _delta(qw.batch_busy_ms, q.batch_busy_ms) / 1000.0
            if warm_rows > 0 and warm_busy_s > 0:
                self._cost[q.query_id] = warm_busy_s / warm_rows
        cost = self._cost.get(q.query_id)
        if cost is None and q.batches <= WARMUP_BATCHES:
            notes.append(f"warming up: its first {WARMUP_BATCHES} batches are not measured")

        # Rates over the time the completed batches cover, not the sample interval: batch k reads
        # what arrived between the starts of batches k-1 and k, so the rows of the batches
        # completed in the window arrived between the start of the last batch before the window
        # and the start of the last batch in it (and the backlog gauges, taken at batch starts,
        # moved over the same span). Dividing by the sample interval instead errs by up to a
        # batch per window, and badly while a long batch drains a hidden backlog.
        span = dt
        start0, start1 = _batch_start(q0), _batch_start(q)
        if start0 is not None and start1 is not None and start1 > start0:
            period = self._batch_period(q, q0, batches)
            progress_age = last.time - (q.last_progress_time or last.time)
            recent = progress_age <= max(2.0 * period, cfg.interval_s)
            # No batch for a while: nothing arrived since (or it is still running), so the
            # rows cover the time up to now.
            span = start1 - start0 if recent else last.time - start0
            # The span is within about a batch of the window; bound it so that an idle spell
            # (old previous batch) or a progress time moved without a batch (idle event, restart)
            # cannot stretch or shrink it far.
            span = min(max(span, 0.5 * dt), dt + period)
        input_rate = rows / span if span > 0 else 0.0

        backlog, source = last.backlog_of(q)
        backlog0, _ = first_sample.backlog_of(q0)
        if backlog is None:
            notes.append(f"no backlog: {q.backlog_problem}" if q.backlog_problem
                         else "no backlog reported")
        elif source:
            notes.append(f"backlog from external metric {source}")
        growth = (backlog - backlog0) / span if (backlog is not None and backlog0 is not None
                                                 and span > 0) else 0.0

        target_rate = max(0.0, input_rate + growth)
        cap = q.max_stage_tasks
        usable_slots = min(slots, cap) if cap else slots
        # A source without a read limit reports no backlog (latest == end offset, or none at all):
        # an overloaded query hides its demand, processing what its slots allow while the rest
        # waits unseen in ever longer batches. When it is saturated, the last batch's arrival rate
        # (rows / time since the previous batch start) is the better estimate of the load.
        if cost and usable_slots > 0 and q.input_rate > target_rate:
            if pool_saturated or input_rate * cost >= SATURATED_FRACTION * usable_slots:
                notes.append(f"saturated, using last batch arrival rate {q.input_rate:.1f} rows/s")
                target_rate = q.input_rate

        trigger_s = q.trigger_interval_ms / 1000.0 if q.trigger_interval_ms else None
        avg_batch_s = self._avg_batch_s(q, q0, batches)
        # A source that reports no backlog (the file source, rate) hides a read-limited query's
        # demand: each batch reads its limit and the rest waits unseen. Batches longer than the
        # trigger show it: keeping to the trigger needs the rows of a batch read every trigger
        # interval, input rate x batch time / trigger. Sized on that in one action, rather than
        # on the rate the too-few slots managed, which takes one scale-up per step.
        behind = False
        if (backlog is None and trigger_s and avg_batch_s and input_rate > 0
                and avg_batch_s > BEHIND_FACTOR * trigger_s):
            behind_rate = input_rate * avg_batch_s / trigger_s
            if behind_rate > target_rate:
                notes.append(f"falling behind: batches take {avg_batch_s:.1f}s of a {trigger_s:g}s "
                             f"trigger and no backlog is reported; sizing for {behind_rate:.1f} "
                             "rows/s, what keeps a batch within the trigger")
                target_rate = behind_rate
                behind = True

        # Up to one batch period of arrivals is always waiting in a micro-batch system; only the
        # backlog beyond that needs catching up.
        period = self._batch_period(q, q0, batches)
        in_flight = target_rate * period
        excess = max(0.0, (backlog or 0.0) - in_flight)
        healthy = (trigger_s is not None and avg_batch_s is not None
                   and avg_batch_s <= HEALTHY_BATCH_FRACTION * trigger_s
                   and (growth <= 0 or excess <= 0))
        # A healthy query with a backlog is bound by its read limit / trigger, not by executors:
        # more slots cannot speed it up, so its backlog asks for no extra capacity.
        catch_up_rate = 0.0 if healthy else excess / cfg.catch_up_duration_s
        if healthy:
            notes.append(f"healthy: batches take {avg_batch_s:.1f}s of a {trigger_s:.0f}s trigger")

        fit = self._models[q.query_id].fit() if q.query_id in self._models else None
        # The marginal cost of a row does not change when batch sizes stop varying (a steady
        # load): the last trustworthy fit holds until a new one replaces it, bounded by this
        # window's average cost in _sizing_cost.
        if fit is not None:
            self._fits[q.query_id] = fit
        fit = self._fits.get(q.query_id)
        if fit is not None and cost is not None:
            cost = self._sizing_cost(cost, fit, rows, batches, reading_ahead=excess > 0 and not healthy)
            notes.append(f"cost {fit[1] * 1000:.1f} ms/row + {fit[0]:.2f}s/batch")

        idle = rows == 0 and (backlog or 0.0) <= 0 and busy_slots <= 0
        m = _QueryMeasure(q=q, input_rate=input_rate, backlog=backlog, growth=growth,
                          target_rate=target_rate, catch_up_rate=catch_up_rate, cost=cost,
                          cap=cap, busy_slots=busy_slots, healthy=healthy, idle=idle)
        m.behind = behind
        if idle:
            notes.append("idle: no rows and no backlog in the window")
        elif cost is None:
            if busy_slots > 0 or (backlog or 0.0) > 0:
                m.needs_share = True
                notes.append("not ready: backlog but no completed batch to measure cost yet; "
                             "holding its current share")
        else:
            # Flink's target capacity: the arrival rate at the target utilization, plus the
            # catch-up rate and the arrivals during provisioning at full speed (that capacity
            # is spent working the backlog off, not kept as headroom).
            m.rate_work = target_rate * cost
            if rows == 0:
                # A batch longer than the window completes no rows but keeps its slots busy: the
                # task time it used is the best lower bound of its demand. (Not otherwise: while
                # catching up a query rightly uses more than its steady demand.)
                m.rate_work = max(m.rate_work, busy_slots)
            m.catch_up_work = catch_up_rate * cost
            m.reserved = m.catch_up_work + (target_rate * context.provisioning_time_s
                                            / cfg.catch_up_duration_s * cost)
            m.work = m.rate_work + m.reserved
            m.required = m.rate_work / cfg.utilization_target + m.reserved
            if cap is not None and m.required > cap:
                m.uncapped = m.required
                m.required = float(cap)
                m.capped = True
                notes.append(f"capped at {cap} parallel tasks (widest stage), needs "
                             f"{m.uncapped:.1f} slots")
        m.utilization = m.work / slots if slots > 0 and cost is not None else None
        # Backlog mode: the backlog beyond this many seconds of input must be worked off first.
        has_work = m.work > 0 and not idle
        if excess > 0:
            if target_rate > 0:
                m.backlog_mode = excess > cfg.backlog_threshold_s * target_rate
            else:
                m.backlog_mode = growth > 0 or (has_work and cost is not None)
        if m.backlog_mode:
            notes.append(f"backlog mode: {excess:.0f} rows behind")
        m.notes = notes
        return m

    @staticmethod
    def _sizing_cost(average: float, fit: tuple[float, float], rows: float, batches: float,
                     reading_ahead: bool) -> float:
        """Cost per row to size a query on, from the window's average cost and the fit.

        The marginal cost ``beta`` (kept between a quarter of the average and the average): the
        fixed part of a batch is elastic. Measured on local-cluster, a query of 6 partitions at
        20 rows/s cost 0.035 slot-s/row on 2 executors and 0.08 on 3: much of the fixed price is
        paid per executor a batch's tasks land on, so fewer executors pay less of it, and batches
        that grow pay it over more rows. A query reading ahead (a backlog beyond its read limit)
        runs full batches, each paying ``alpha`` once.
        """
        alpha, beta = fit
        beta = min(max(beta, BatchCostModel.MIN_MARGINAL_SHARE * average), average)
        if reading_ahead and batches > 0 and rows > 0:
            return min(average, beta + alpha / (rows / batches))
        return beta

    @staticmethod
    def _avg_batch_s(q: QueryMetrics, q0: QueryMetrics, batches: int) -> float | None:
        if batches > 0:
            return _delta(q0.batch_duration_ms, q.batch_duration_ms) / batches / 1000.0
        return q.last_batch_duration_ms / 1000.0 if q.last_batch_duration_ms is not None else None

    def _batch_period(self, q: QueryMetrics, q0: QueryMetrics, batches: int) -> float:
        """Time from one batch start to the next: the trigger interval, or the batch duration."""
        trigger_s = q.trigger_interval_ms / 1000.0 if q.trigger_interval_ms else 0.0
        return max(trigger_s, self._avg_batch_s(q, q0, batches) or 0.0)

    # -- reason --------------------------------------------------------------------------------

    def _reason(self, measured: dict[str, _QueryMeasure], queries: dict[str, QueryEvaluation],
                required: float, work: float, slots: int, utilization: float | None, raw: int,
                recommended: int, context: ScalingContext, dt: float, healthy_hold: bool) -> str:
        cfg = context.config
        per = context.slots_per_executor
        util = f"{utilization:.2f}" if utilization is not None else "n/a"
        size = (f"{context.cores_per_executor} cores" if context.task_cpus <= 1 else
                f"{context.cores_per_executor} cores / spark.task.cpus={context.task_cpus}")
        if context.live_slots is not None and context.live_slots != context.live_executors * per:
            size = "executors of unequal size"
        head = (f"utilization {util} of {slots} slots ({context.live_executors} executors, {size}) "
                f"over {dt:.0f}s; needs {required:.1f} slots at target {cfg.utilization_target:g} = "
                f"{raw} executors of {per} slots")
        if raw != recommended and not healthy_hold:
            bound = "maxExecutors" if raw > cfg.max_executors else "minExecutors"
            head += f", clamped to {bound}={recommended}"
        if not measured:
            return head + "; no active streaming query"
        dominant = max(measured.values(), key=lambda m: (m.required, m.work))
        if dominant.required <= 0:
            return head + "; every query is idle"
        d = queries[dominant.q.query_id]
        if dominant.backlog_mode or dominant.catch_up_work > dominant.rate_work:
            signal = "backlog"
        elif dominant.behind:
            signal = "falling behind its trigger, no backlog reported"
        elif utilization is not None and not (cfg.utilization_min <= utilization
                                              <= cfg.utilization_max):
            signal = "utilization"
        else:
            signal = "input rate"
        cost = f"{d.slot_seconds_per_row:.3g} slot-s/row" if d.slot_seconds_per_row else "cost unknown"
        backlog = f"{d.backlog:.0f} rows" if d.backlog is not None else "not reported"
        part = (f"; query {_label(dominant.q)} dominates ({signal}): {d.required_slots:.1f} of "
                f"{required:.1f} slots, input {d.input_rate:.1f} rows/s, target "
                f"{d.target_rate:.1f} rows/s, backlog {backlog} (catch-up {d.catch_up_rate:.1f} "
                f"rows/s), {cost}")
        if d.capped:
            part += f", capped at {d.parallelism_cap} parallel tasks"
        others = [f"{_label(m.q)} {m.required:.1f}" for m in measured.values()
                  if m is not dominant and m.required > 0]
        if others:
            part += "; others: " + ", ".join(others)
        if healthy_hold:
            part += ("; every query with work finishes its batches well inside its trigger interval "
                     f"with no growing backlog: holding at {recommended} executors, no scale-up")
        return head + part


class _QueryMeasure:
    """Mutable per-query working state of one evaluation (turned into a QueryEvaluation)."""

    def __init__(self, q: QueryMetrics, input_rate: float, backlog: float | None, growth: float,
                 target_rate: float, catch_up_rate: float, cost: float | None, cap: int | None,
                 busy_slots: float, healthy: bool, idle: bool) -> None:
        self.q = q
        self.input_rate = input_rate
        self.backlog = backlog
        self.growth = growth
        self.target_rate = target_rate
        self.catch_up_rate = catch_up_rate
        self.cost = cost
        self.cap = cap
        self.busy_slots = busy_slots
        self.healthy = healthy
        self.idle = idle
        self.work = 0.0  # fully busy slots the query needs
        self.rate_work = 0.0
        self.catch_up_work = 0.0
        self.reserved = 0.0  # slots for catch-up and provisioning arrivals, at full speed
        self.required = 0.0  # slots at the target utilization, after the cap
        self.uncapped: float | None = None
        self.capped = False
        self.backlog_mode = False
        self.behind = False  # batches longer than the trigger, sized on keeping to it
        self.needs_share = False
        self.utilization: float | None = None
        self.notes: list[str] = []

    def result(self) -> QueryEvaluation:
        return QueryEvaluation(
            query_id=self.q.query_id, name=self.q.name, input_rate=self.input_rate,
            backlog=self.backlog, backlog_growth_rate=self.growth, target_rate=self.target_rate,
            catch_up_rate=self.catch_up_rate, slot_seconds_per_row=self.cost,
            true_processing_rate_per_slot=(1.0 / self.cost) if self.cost else None,
            required_slots=self.required, utilization=self.utilization, parallelism_cap=self.cap,
            capped=self.capped, backlog_mode=self.backlog_mode, note="; ".join(self.notes))
