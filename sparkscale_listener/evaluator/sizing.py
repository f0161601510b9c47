"""From every query's demand and cost to the executors the application needs: every query at every
size in one scan, the queries sharing the executors (batches of one trigger run together), other
jobs' and real-time queries' slots, and the fewest executors keeping all of it within the target."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np

from .. import readable
from ..decisions import Evaluation, ForecastSizing, QueryEvaluation, ScalingContext
from ..metrics import MetricSample, QueryMetrics
from ..model import NONE_CONCURRENT, BatchCost, Concurrent, executors_for
from .demand import Demand, measured_until, other_tasks
from .explain import explain, query_result
from .utilization import MAX_UTILIZATION, Scan, ScanQueries, query_busy_slots, query_utilization

# When no size keeps a query within the target, it gets the fewest executors within this share of
# the best utilization any size gives.
NEAR_BEST = 0.05
# Sizes whose utilization is within this share take as many waves of tasks (they differ by the
# per-executor cost and the efficiency fitted at each): more executors there shorten nothing.
SAME_WAVES = 0.01
# Sizes evaluated at most (the useful ones, up to the widest stage, are fewer).
MAX_SCANNED = 2000
# Sizes before a query's fewest within the target compared with every later size at once (a
# block of this many x the sizes scanned: 2 MB at 1,000 sizes), of queries with at most
# _CANDIDATES_PER_ROW of them (usually one or two).
_CANDIDATES_AT_ONCE = 256
_CANDIDATES_PER_ROW = 4
_EPS = 1e-9


def size(demands: list[Demand], costs: dict[str, BatchCost | None],
          history: Sequence[MetricSample], context: ScalingContext, empty_reason: str,
          held: Mapping[str, QueryMetrics], learning: Mapping[str, float] | None = None) -> Evaluation:
    """Every size at once: per query its utilization at 1, 2, ... executors (arrays), the
    application's the highest of them or what all their task time needs (and the slots
    real-time-mode queries hold); the fewest within the target."""
    cfg = context.config
    target = cfg.utilization_target
    spe = context.slots_per_executor
    live = max(1, context.live_executors)
    # The size the load is judged at: the target where executors beyond it are still live
    # (leaving, or started unasked by a standalone Master back from a restart). Judged on all
    # of them, a load they kept within the band asked for no scale-up, and the ones it needed
    # were removed, to be asked for again once measured without them (on real Spark, the
    # scale-up 39 s after a Master came back instead of under 10 s).
    judged_at = min(live, max(1, context.current_target))
    other = other_tasks(history, context.config.metrics_window_s)
    holding = {qid: held_slots(q) for qid, q in held.items()}
    # Queries still learning their cost: at the target, the slots their tasks kept busy.
    unsized = {qid: slots / target for qid, slots in (learning or {}).items()}
    other += sum(holding.values()) + sum(unsized.values())
    known = [(d, c) for d in demands if (c := costs.get(d.q.query_id)) is not None]

    # The sizes worth scanning. Beyond a slot for every task of a query and of the batches
    # that run beside it, more executors shorten nothing (the efficiency seen at a size stands
    # for the sizes nearest it); their only use is room for the task time of all queries
    # together, which is largest there.
    beside: dict[float, int] = {}
    for d, c in known:
        if d.trigger_s and not d.idle:
            beside[d.trigger_s] = beside.get(d.trigger_s, 0) + c.tasks
    useful = max([max(executors_for(max(c.widest, beside.get(d.trigger_s or 0.0, 0)), spe),
                      max(c.executor_counts, default=1)) for d, c in known] or [1])
    # Every query's figures at every size in one pass (Scan); the queries off its path (idle,
    # no trigger, nothing to read, a binding read limit) through query_utilization and query_busy_slots
    # one by one.
    widest = max(useful, live)
    scan_queries = ScanQueries(known, target)
    at_widest = Scan(scan_queries, np.array([float(widest)]),
                      [[c.efficiency_at(widest)] for _, c in known])
    slots_at_widest = at_widest.busy_slots()[:, 0].tolist()
    busy = sum(slots_at_widest[i] if scan_queries.common[i] else query_busy_slots(d, c, widest)
               for i, (d, c) in enumerate(known))
    shared = executors_for(busy / target + other, spe)
    sizes = np.arange(1.0, max(live, min(MAX_SCANNED, max(useful, shared, live) + 1)) + 1)
    scan = Scan(scan_queries, sizes, [c.efficiency_upto(len(sizes)) for _, c in known])

    # Spark starts the batches of queries with one trigger interval together: each one's batch
    # shares the slots with the others' (their task time at each size).
    sharing = {i for i, (d, _) in enumerate(known) if d.trigger_s and not d.idle}
    work = scan.task_time([d.rows_per_batch() or 0.0 if i in sharing else 0.0
                           for i, (d, _) in enumerate(known)])
    # Per query: the others' task time beside it (a row per query, a column per size) and
    # their tasks; none for a query not sharing.
    concurrent_tasks = np.zeros(len(known))
    if sharing:
        group_of: dict[float, int] = {}
        rows = sorted(sharing)
        group = np.array([group_of.setdefault(known[i][0].trigger_s or 0.0, len(group_of)) for i in rows])
        tasks = np.zeros(len(group_of))
        for i, g in zip(rows, group.tolist(), strict=True):
            tasks[g] += known[i][1].tasks
        # Usually every query shares one trigger: the matrices as they are, not copies of rows.
        every = len(rows) == len(known)
        members, one_group = np.array(rows), every and len(group_of) == 1
        totals = np.array([_sum_rows(work if one_group else work[members[group == k]])
                           for k in range(len(group_of))])
        total = totals[0] if len(group_of) == 1 else totals[group]
        others = total - (work if every else work[rows])
        beside_s = np.where(others > _EPS * np.maximum(total, 1.0), others, 0.0)
        if every:
            concurrent_s = beside_s
        else:
            concurrent_s = np.zeros_like(work)
            concurrent_s[rows] = beside_s
        concurrent_tasks[rows] = tasks[group] - np.array([known[i][1].tasks for i in rows], dtype=float)
    else:
        concurrent_s = np.zeros_like(work)
    own = scan.utilization(concurrent_s, concurrent_tasks)
    busy_at = scan.busy_slots()
    for i, (d, c) in enumerate(known):
        if not scan_queries.common[i]:
            alongside = (Concurrent(concurrent_s[i], int(concurrent_tasks[i])) if i in sharing
                         else NONE_CONCURRENT)
            own[i] = query_utilization(d, c, sizes, target, alongside)
            busy_at[i] = query_busy_slots(d, c, sizes)
    per_query = {d.q.query_id: own[i] for i, (d, _) in enumerate(known)}
    # The queries' task time at the target, and a slot for each task of other jobs at full
    # use (as Spark's own allocation counts them): the slots all of it needs.
    needed = _sum_rows(busy_at)
    needed = needed / target + other
    app = target * needed / (sizes * spe)
    if known:
        app = np.maximum(app, own.max(axis=0))
    required, capped = _fewest(app, target, cfg.utilization_max)
    now_util = float(app[judged_at - 1])

    each = dict(zip(per_query, _fewest_each(own, target, cfg.utilization_max), strict=True))
    # Each query's batch time at the live size, at its target rate.
    predicted = dict(zip(per_query, scan.steady_batch_time([d.target for d, _ in known],
                                                           [d.trigger_s for d, _ in known], live - 1),
                         strict=True))
    queries: dict[str, QueryEvaluation] = {}
    for d in demands:
        cost = costs.get(d.q.query_id)
        own_required, own_capped = (1 if d.idle else judged_at), False
        own = per_query.get(d.q.query_id)
        if cost is not None and not d.idle and own is not None:
            own_required, own_capped = each[d.q.query_id]
        queries[d.q.query_id] = query_result(
            d, cost, own_required, own_capped, None if own is None else float(own[judged_at - 1]),
            None if cost is None or d.idle else predicted[d.q.query_id])
    for qid, q in held.items():
        queries[qid] = _real_time_result(q, holding[qid], spe)
    utilization = min(now_util, MAX_UTILIZATION)
    required_slots = float(required * spe)
    backlog_mode = any(q.backlog_mode for q in queries.values())
    headline, details = explain(demands, queries, costs, required, utilization,
                                      judged_at, live, capped, other, empty_reason, holding, unsized)
    return Evaluation(time=context.now, ready=True, current_executors=context.current_target,
                      recommended_executors=required, required_slots=required_slots,
                      utilization=utilization, backlog_mode=backlog_mode, queries=queries,
                      reason=details, headline=headline, rising=any(d.rising for d in demands),
                      measured_until=measured_until(demands))


def size_ahead(evaluation: Evaluation, demands: list[Demand], costs: dict[str, BatchCost | None],
               history: Sequence[MetricSample], context: ScalingContext, held: Mapping[str, QueryMetrics],
               learning: Mapping[str, float] | None = None) -> Evaluation:
    """``evaluation`` with what the forecast load needs (``context.forecasts``), sized by :func:`size`
    as the present load is, each query on the higher of its arrivals and its forecast: at its peak
    from now to a provisioning time plus a batch ahead (executors asked for now register before the
    load comes; where that asks for more, at its peak until a decision after the change can come),
    and at its peak within ``scaleDownInterval`` (no scale-down below what the load returns to).
    Applied only where each query's forecast is (its recent error within ``forecast.maxError`` and
    ``forecast.mode=on``): the recommendation is then the larger of the present load's, the peak
    ahead's and, up to the current size, the returning load's. In shadow the figures are only told."""
    forecasts = {d.q.query_id: f for d in demands
                 if not d.idle and (f := context.forecasts.get(d.q.query_id)) is not None}
    if not evaluation.ready or not forecasts:
        return evaluation
    applied = {qid: f for qid, f in forecasts.items() if f.applied}
    used = applied or forecasts  # in shadow, what the forecasts would do

    def sized_on(rates: Mapping[str, float]) -> Evaluation:
        if not any(rates.get(d.q.query_id, 0.0) > d.rate for d in demands):
            return evaluation  # the present load's size already covers it
        forecast = [replace(d, rate=max(d.rate, rates.get(d.q.query_id, 0.0)), notes=[]) for d in demands]
        return size(forecast, costs, history, context, "", held, learning)

    bounded = context.config.bounded
    ahead = evaluation.recommended_executors
    coming = sized_on({qid: f.peak_rate for qid, f in used.items()})
    # The band as for the present load: a pre-scale only where the forecast load would take the current
    # executors past utilization.max (sized at the target on every forecast, the day's peak was held all
    # day where the present load, inside the band, kept half the executors with no lag).
    if coming.utilization is not None and coming.utilization > context.config.utilization_max:
        # A pre-scale: sized for the load until the next decision can come, not only the horizon's.
        settled = sized_on({qid: f.settled_rate for qid, f in used.items()})
        ahead = max(ahead, bounded(coming.recommended_executors), bounded(settled.recommended_executors))
    now, current, present = context.now, context.current_target, evaluation.recommended_executors
    # Only a scale-down can be held (a size scan fewer at every tick that has none to hold).
    returning = (bounded(sized_on({qid: f.return_rate for qid, f in used.items()}).recommended_executors)
                 if current > present else present)
    wanted = max(present, ahead, min(current, returning))
    # The query whose forecast is furthest above its arrivals: the one the text names.
    by_id = {d.q.query_id: d for d in demands}
    qid, f = max(used.items(), key=lambda item: item[1].settled_rate - by_id[item[0]].rate)
    label = readable.query(by_id[qid].q.name, qid)
    if ahead > present:
        said = f"{label}: {f.reaches(now)}"
    elif wanted > present:
        said = (f"{label}: the load returns to {readable.rate(f.return_rate)} in "
                f"{readable.seconds(max(0.0, f.return_at - now))}, within scaleDownInterval; "
                f"{f.error_text()}")
    else:
        said = f"{label}: the load forecast within the present size's, {f.error_text()}"
    every_query = bool(applied) and set(applied) == {d.q.query_id for d in demands if not d.idle}
    sizing = ForecastSizing(ahead, returning, bool(applied), f"{said} ({f.state})", every_query)
    if not applied or wanted <= present:
        details = f"forecast: {ahead} executors ahead, {returning} within scaleDownInterval; {sizing.text}"
        return replace(evaluation, forecast=sizing,
                       reason="; ".join(x for x in (evaluation.reason, details) if x))
    headline = (f"{evaluation.headline}; forecast: {said}, {readable.executors(wanted)}" if wanted <= current
                else evaluation.headline)
    return replace(evaluation, recommended_executors=wanted, forecast=sizing, headline=headline,
                   reason="; ".join(x for x in (evaluation.reason, f"forecast: {sizing.text}") if x))


def held_slots(q: QueryMetrics) -> int:
    """The slots a real-time-mode query holds: every task of its batch runs for the whole batch
    (all its stages at once), so the most tasks a recent batch ran, or its widest stage so far."""
    recent = max((b.tasks or 0 for b in q.recent_batches[-3:]), default=0)
    return max(recent, q.max_stage_tasks or 0)


def _real_time_result(q: QueryMetrics, slots: int, slots_per_executor: int) -> QueryEvaluation:
    trigger_s = q.trigger_interval_ms / 1000.0 if q.trigger_interval_ms else None
    return QueryEvaluation(
        query_id=q.query_id, name=q.name, input_rate=q.processed_rate, backlog=q.backlog,
        backlog_growth_rate=0.0, target_rate=q.input_rate, catch_up_rate=0.0, slot_seconds_per_row=None,
        required_slots=float(slots), utilization=None, parallelism_cap=slots, capped=False,
        backlog_mode=False, trigger_s=trigger_s,
        note=f"real-time mode: its {slots} tasks hold a slot each for the whole batch; sized on them, "
             "not on its busy time", required_executors=executors_for(slots, slots_per_executor))


def _fewest(utilization: np.ndarray, target: float, band_max: float) -> tuple[int, bool]:
    """Over sizes 1, 2, ...: (the fewest executors keeping utilization at the target, False); when
    none does, (the fewest that come within :data:`NEAR_BEST` of the best any size does, True):
    executors beyond that shorten what they cannot (driver time, a read limit, the widest stage).

    A whole wave is not bought for a few percent. A size just over the target also does when
    the next size would shorten nothing (a batch's tasks take as many waves: 6 tasks take two on
    3, 4 or 5 one-core executors), what the target asks for, its count x utilization / target
    as if executors came in fractions, is nearer it than the next size that shortens batches
    (3.1 executors: nearer 3 than 6), and it is at most a quarter of the way from the target to
    ``band_max`` (``utilization.max``, where a scale-up would come; 0.75 by default). Each test
    only gets harder as the load rises, so a higher load never gets fewer executors."""
    fits = np.flatnonzero(utilization <= target + _EPS)
    if fits.size:
        fewest = int(fits[0])
        for i in np.flatnonzero(utilization[:fewest] <= target + (band_max - target) / 4 + _EPS):
            shorter = np.flatnonzero(utilization[i + 1:] < utilization[i] * (1.0 - SAME_WAVES))
            useful = i + 2 + int(shorter[0]) if shorter.size else math.inf  # next size that helps
            asked = (i + 1) * utilization[i] / target
            if useful > i + 2 and asked - (i + 1) < useful - asked:
                return int(i) + 1, False
        return fewest + 1, False
    best = float(utilization.min())
    near = np.flatnonzero(utilization <= best * (1.0 + NEAR_BEST) + _EPS)
    # Exactly at the cap, the best sizes are short of the load by MAX_UTILIZATION times or more, and
    # the cap ties them: the most of them does the most (the fewest gave a backlog of 1e8 rows 1
    # executor where one of 6e7 got 4). (Sizes where no batch ends in time rank above the cap.)
    return int(near[-1] if math.isclose(best, MAX_UTILIZATION) else near[0]) + 1, True


def _fewest_each(utilization: np.ndarray, target: float, band_max: float) -> list[tuple[int, bool]]:
    """:func:`_fewest` of each row (a query's utilization at every size), in array passes: the
    fewest size within the target of every row, then the sizes before it within the quarter band
    (their next size that shortens batches and what the target asks for) of all rows together, in
    blocks. The same comparisons, the same figures. A row none fits, or with more than
    :data:`_CANDIDATES_PER_ROW` sizes in the band (a long stretch of sizes of as many waves), is
    :func:`_fewest`'s own: it stops at the first size that answers."""
    if not utilization.size:
        return [_fewest(row, target, band_max) for row in utilization]
    fits = utilization <= target + _EPS
    first, some = fits.argmax(axis=1), fits.any(axis=1)
    sizes = np.arange(utilization.shape[1])
    candidate = (utilization <= target + (band_max - target) / 4 + _EPS) & (sizes < first[:, None])
    few = candidate.sum(axis=1) <= _CANDIDATES_PER_ROW
    answers = [(int(f) + 1, False) if fit and handful else _fewest(row, target, band_max)
               for f, fit, handful, row in zip(first.tolist(), some.tolist(), few.tolist(), utilization,
                                             strict=True)]
    rows, before = np.nonzero(candidate & (some & few)[:, None])  # by row, then size
    answered: set[int] = set()
    for k in range(0, len(rows), _CANDIDATES_AT_ONCE):
        r, i = rows[k:k + _CANDIDATES_AT_ONCE], before[k:k + _CANDIDATES_AT_ONCE]
        at = utilization[r, i]
        shorter = (utilization[r] < (at * (1.0 - SAME_WAVES))[:, None]) & (sizes > i[:, None])
        useful = np.where(shorter.any(axis=1), shorter.argmax(axis=1) + 1.0, math.inf)  # next size that helps
        asked = (i + 1) * at / target
        nearer = (useful > i + 2) & (asked - (i + 1) < useful - asked)
        for row, size in zip(r[nearer].tolist(), i[nearer].tolist(), strict=True):
            if row not in answered:  # the smallest such size of the row
                answered.add(row)
                answers[row] = (size + 1, False)
    return answers


def _sum_rows(matrix: np.ndarray) -> np.ndarray:
    """The rows added one after another, in order: what a loop over them gives, bit for bit (the
    same figures whatever the number of queries). numpy adds down the rows so where there are two
    columns or more; a single column it sums pairwise."""
    if matrix.shape[1] >= 2:
        return matrix.sum(axis=0)
    total = np.zeros(matrix.shape[1])
    for row in matrix:
        total = total + row
    return total
