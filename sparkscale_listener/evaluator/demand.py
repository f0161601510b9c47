"""One query's load, as its batches show it: the arrivals (two batches show a step, the batch
running and the source's latest offsets confirm one sooner), the backlog and what catching it up
asks, a read limit that binds where no backlog is reported, the batch periods the lag allows, and
whether the load is rising or idle. Measurements only: what size they need is :mod:`.sizing`'s."""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from statistics import median
from typing import Any

from .. import readable
from ..concurrency import BatchColumns
from ..decisions import ScalingContext
from ..metrics import RISING, BatchRecord, LatestOffsets, MetricSample, QueryMetrics
from ..model import BatchCost

# The latest batch this much longer than the window's typical one: the load is rising, as with
# arrivals RISING above the window's (metrics.py), no scale-down.
LENGTHENING = 0.5
# The shortest span of a source's latest offsets read as an arrival rate: the bridge reads them every
# second, and a shorter span holds too few rows to tell a rise from jitter.
SOURCE_SPAN_S = 1.0
# backlogThreshold is the lag a user accepts, a bound and not the operating point. Back to back, a
# batch reads what arrived during the one before, so a row waits at most two batch periods. At the
# arrivals themselves, batches may run at most this share of it apart (the lag's peaks within half of
# it), where that is longer than the trigger or there is none; at the arrivals over
# utilization.target (the headroom for bursts), at most HEADROOM_PERIOD_SHARE of it apart (the lag
# within all of it). The room between is for bursts and for new executors to start.
FRESH_PERIOD_SHARE = 0.25
HEADROOM_PERIOD_SHARE = 0.5
# Batches of a source that reports no backlog, each started at most this long after the one before
# it ended, all of the same rows while the spans between their starts varied by LIMIT_EVIDENCE or
# more: a read limit binds, and what waits behind it is unseen. (Rows that come as they arrive
# follow the spans: a steady source read back to back gives batches of the same rows only while
# the spans are the same too, and then no telling is possible: it is taken as keeping up.)
BACK_TO_BACK_S = 0.25
LIMIT_EVIDENCE = 0.03
# Batches needed in the window to tell a binding limit from a few that happened to read alike.
LIMIT_BATCHES = 3
_EPS = 1e-9


@dataclass
class Demand:
    """One query's load, as its batches show it (working state of one evaluation)."""

    q: QueryMetrics
    window_rate: float  # arrivals over the metrics window, rows/s
    recent_rate: float  # the last two batches' arrival rate: the newer after a step, else the lower
    rate: float  # the arrival rate sized on: the higher of the two
    processed_rate: float  # rows/s its batches read over the window
    backlog: float | None
    growth: float  # rows/s the backlog grew by over the window
    catch_up: float  # rows/s that work the backlog off within catchUpDuration
    provisioning: float  # rows/s arriving while new executors start, spread over catchUpDuration
    read_limit: float | None  # rows a batch reads at most, when the source's limit binds
    saturated: bool  # a read limit binds where no backlog is reported: rows wait unseen
    trigger_s: float | None
    # The longest batch period sized for at the arrivals over the target: the trigger interval, or
    # half of backlogThreshold where that is longer or there is no trigger (batches back to back;
    # see :func:`.utilization.query_utilization`). None: neither (no trigger, backlogThreshold 0).
    period_s: float | None
    # At the arrivals themselves: a quarter of backlogThreshold where that is longer than the
    # trigger or there is none (the lag's peaks within half of it); None: the trigger sets it.
    fresh_period_s: float | None
    batch_time_s: float | None  # median of the window's batches
    rising: bool
    idle: bool
    backlog_mode: bool
    arrivals_seen: bool  # two consecutive batches came: the arrivals are measured
    measured_until: float | None  # the start of its latest completed batch
    utilization_target: float
    notes: list[str] = field(default_factory=list)
    signal: str = ""  # what, beside the arrivals, drives its size (for the decision's reason)

    @property
    def target(self) -> float:
        """Rows/s the batches read: the arrivals, the catch-up, the provisioning term."""
        return self.rate + self.catch_up + self.provisioning

    @property
    def sized_rate(self) -> float:
        """The rate sizing divides by ``utilization.target``: that quotient is Flink's target
        capacity, the arrivals with the headroom plus the catch-up and provisioning rows without
        it (a backlog is worked off once; it asks for no headroom of its own)."""
        return self.rate + self.utilization_target * (self.catch_up + self.provisioning)

    def rows_per_batch(self) -> float | None:
        """Rows a batch must read each trigger interval to follow the target rate (at most the
        read limit); None for a query without a trigger."""
        return self._per_trigger(self.target)

    def rows_per_period(self) -> float | None:
        """Rows a batch reads at :attr:`sized_rate` when batches run :attr:`period_s` apart."""
        if self.period_s and self.period_s > (self.trigger_s or 0.0):
            return self._capped(self.sized_rate * self.period_s)
        return self._per_trigger(self.sized_rate)

    def rows_per_fresh_period(self) -> float:
        """Rows a batch reads at :attr:`target` (no headroom) when batches run
        :attr:`fresh_period_s` apart (0 without one)."""
        if not self.fresh_period_s:
            return 0.0
        return self._capped(self.target * self.fresh_period_s)

    def arrival_span(self, rows: float, period: float) -> float:
        """Seconds ``rows`` take to arrive at :attr:`sized_rate`, at most ``period``: sooner than the
        period where a read limit caps a batch's rows, and batches of the limit follow one another
        that often."""
        return min(period, rows / self.sized_rate) if self.sized_rate > 0 else period

    def _capped(self, rows: float) -> float:
        return min(rows, self.read_limit) if self.read_limit else rows

    def _per_trigger(self, rate: float) -> float | None:
        if not self.trigger_s:
            return None
        if self.saturated and self.read_limit:
            return self.read_limit
        rows = rate * self.trigger_s
        return min(rows, self.read_limit) if self.read_limit else rows

    @property
    def limit_binds(self) -> bool:
        """Rows wait behind the read limit (a reported backlog, or an unseen one: :attr:`saturated`):
        batches of the limit, back to back."""
        return bool(self.read_limit)


class DemandReader:
    """Reads each query's :class:`Demand` from its batches and the samples. Keeps, per query, its
    batches as columns (extended as batches come, not rebuilt) and the unit its batches' rows come in."""

    def __init__(self) -> None:
        self._columns = BatchColumns()
        # Per query, the rows every batch it read came in multiples of (a file source's file; 1 for
        # rows one by one): the greatest common divisor of all its batches' rows so far.
        self._units: dict[str, int] = {}

    def forget(self, query_id: str) -> None:
        self._units.pop(query_id, None)
        self._columns.forget(query_id)

    def read(self, q: QueryMetrics, last: MetricSample, history: Sequence[MetricSample],
                context: ScalingContext, cost: BatchCost | None = None) -> Demand:
        cfg = context.config
        live = context.live_executors
        batches = list(q.recent_batches)
        trigger_s = q.trigger_interval_ms / 1000.0 if q.trigger_interval_ms else None
        # At least two trigger intervals: a shorter window holds no batch between two of a long
        # trigger's (10 min), and the query read as idle, and was scaled down, between each two.
        horizon = last.time - max(cfg.metrics_window_s, 2.0 * (trigger_s or 0.0))
        cols = self._columns.of(q.query_id, q.recent_batches)
        arrived = bool(cols.arrival_starts)  # two consecutive batches came
        # The window: the arrivals and the batches that started in it, as columns.
        rows_in, seconds_in = _since(horizon, cols.arrival_starts, cols.arrival_rows, cols.arrival_seconds)
        columns = (cols.starts, cols.rows, cols.durations, cols.backlogs, batches)
        window_starts, window_rows, durations, window_backlogs, window_batches = _since(
            horizon, cols.starts, *columns)
        notes: list[str] = []
        running = False
        if not rows_in and arrived:
            # No batch started in the window: nothing arrived (a source with nothing new starts no
            # batch), or one batch has been running all along; its tasks' busy time tells which.
            # Counted from a sample after the last batch's end where there is one: that batch's own
            # tasks, when it started before the window and ended in it, are no batch running now.
            after_end = [s for s in history if max(horizon, batches[-1].end) <= s.time < last.time]
            first = (after_end[0] if after_end else next((s for s in history if s.time >= horizon), last))
            running = q.busy_ms > first.queries.get(q.query_id, q).busy_ms
            if running:
                rows_in, seconds_in = cols.arrival_rows[-2:], cols.arrival_seconds[-2:]
                window_starts, window_rows, durations, window_backlogs, window_batches = (
                    c[-2:] for c in columns)
                notes.append(f"a batch has been running for {last.time - batches[-1].end:.0f}s")
        latest = ([r / t for r, t in zip(cols.arrival_rows[-2:], cols.arrival_seconds[-2:], strict=True)]
                  if rows_in else [])
        # A jump in the latest batch alone is not a step yet (noise, a burst): it counts neither
        # for a scale-up nor allows a scale-down until the next batch confirms or denies it, so a
        # step is sized in one action, on two batches.
        sized_on = len(rows_in)  # how many of the window's arrivals
        # The batch running now, from the work of its ended tasks: at least this rate arrived
        # before it started. It confirms a jump a batch sooner than its progress would; on one
        # executor after a x4 step, that batch alone ran 4-6 s.
        reading = _in_flight_rate(q, batches, cost, live, window_batches) if latest else None
        # What arrived since the latest batch started, by the source's latest offsets read between
        # batches (Kafka): the next batch's arrivals before it completes, or even starts.
        source_rates = _source_rates(history, q, batches[-1].start) if batches else []
        confirmed_by = None
        if len(latest) == 2 and len(rows_in) >= 2:
            before = sum(rows_in[:-1]) / max(sum(seconds_in[:-1]), _EPS)
            jump = (1.0 + RISING) * max(before, _EPS)
            if latest[1] > jump >= latest[0]:
                if reading is not None and reading[0] > jump:
                    confirmed_by = reading[1]
                    notes.append(f"the latest batch read {readable.rate(latest[1])}, the window before it "
                                 f"{readable.rate(before)}; the batch running now confirms it: its ended "
                                 f"tasks read at least {readable.rate(reading[0])}, all of its tasks "
                                 f"{readable.rate(reading[1])} at that pace")
                elif source_rates and source_rates[-1] > jump:
                    confirmed_by = source_rates[-1]
                    notes.append(f"the latest batch read {readable.rate(latest[1])}, the window before it "
                                 f"{readable.rate(before)}; its source confirms it: "
                                 f"{readable.rate(source_rates[-1])} arrived since, by its latest offsets")
                else:
                    sized_on = len(rows_in) - 1
                    notes.append(f"the latest batch read {readable.rate(latest[1])}, the window before it "
                                 f"{readable.rate(before)}: sized once the next batch confirms it")
        seconds = sum(seconds_in[:sized_on])
        window_rate = sum(rows_in[:sized_on]) / seconds if seconds > 0 else 0.0
        rise = (1.0 + RISING) * max(window_rate, _EPS)  # arrivals above this are rising
        # Two spans of the source's offsets since the latest batch started both above it: a rise
        # the source confirms (one span alone may be a burst, as one batch may).
        source_rose = len(source_rates) >= 2 and min(source_rates[-2:]) > rise
        recent = window_rate
        if len(latest) == 2 and sized_on == len(rows_in):
            # Two consecutive batches at a new rate confirm it: the lower of them, unless both
            # rose above the window before them (a step). Then the first of them read across the
            # step, part of it at the old rate, and the newer one alone tells the new rate (sized
            # on the lower, a real x10 step took three scale-ups).
            before_both = sum(rows_in[:-2]) / max(sum(seconds_in[:-2]), _EPS)
            stepped = len(rows_in) > 2 and min(latest) > (1.0 + RISING) * max(before_both, _EPS)
            recent = latest[1] if stepped else min(latest)
            if confirmed_by is not None:
                # The latest batch may have read across the step: the higher of it and the running
                # one's estimate; a later batch corrects it (MicroBatchEvaluator._outgrown). On the
                # lower bound alone, a real step took 1 -> 2 -> 3 -> 6.
                recent = max(latest[1], confirmed_by)
        if source_rose and source_rates[-1] > recent:
            # A step, confirmed without waiting for the batches that read it (at a 5 s trigger, the
            # first of them ran 12 s on the executors sized for the load before). The newer span
            # alone tells the new rate, as the newer batch does after a step.
            recent = source_rates[-1]
            notes.append(f"its source's latest offsets show {readable.rate(source_rates[-2])} then "
                         f"{readable.rate(source_rates[-1])} arriving since the latest batch started, "
                         f"the window {readable.rate(window_rate)}: sized on it now")
        rate = max(window_rate, recent)
        seconds = sum(seconds_in)
        processed = sum(window_rows) / seconds if seconds > 0 else 0.0
        batch_time = median(durations) if durations else None

        backlog, source = last.backlog_of(q)
        if backlog is None:
            notes.append(f"no backlog: {q.backlog_problem}" if q.backlog_problem else "no backlog reported")
        elif source:
            notes.append(f"backlog from external metric {source}")
        # The backlog's growth: from the first batch in the window that reported one to the last.
        reported = list(zip(window_starts, window_backlogs, strict=True))
        first = next(((t, b) for t, b in reported if b is not None), None)
        latest_backlog = next(((t, b) for t, b in reversed(reported) if b is not None), None)
        growth = 0.0
        if first is not None and latest_backlog is not None and latest_backlog[0] > first[0]:
            growth = (latest_backlog[1] - first[1]) / (latest_backlog[0] - first[0])
        period = max(trigger_s or 0.0, batch_time or 0.0)
        # Up to one batch period of arrivals is always waiting in a micro-batch system: only the
        # backlog beyond it needs catching up.
        excess = max(0.0, (backlog or 0.0) - rate * period)
        catch_up = excess / cfg.catch_up_duration_s
        read_limit = None
        if excess > 0:
            limited = [r for r, b in zip(window_rows, window_backlogs, strict=True)
                       if b is not None and b > 0]
            read_limit = float(max(limited)) if limited else None
        # While new executors start, the live ones keep working (unlike Flink's restart, which
        # stops the job): the backlog grows by what they fall short of the arrivals, batches of at
        # most the read limit, and that is caught up too. Counting all arrivals meanwhile, a real
        # 1 -> 3 -> 6 step went to 6 where 3 did 158 rows/s of the 120 arriving, and held 6 for a
        # minute after its 8 s catch-up; without the term, a step's batches read all there was and
        # reported no backlog, and the scale-up sized without it needed a second one.
        short = 0.0
        if cost is not None and live > 0:
            short = max(0.0, rate - float(cost.throughput(live, read_limit)))
        provisioning = short * context.provisioning_time_s / cfg.catch_up_duration_s
        # A source that reports no backlog hides a binding read limit: its batches read the same
        # rows, back to back, the whole window long. The rest waits unseen: the query is sized so
        # that batches of the limit do the arrivals at the target (each scale-up shows whether more
        # waits), and nothing is scaled down meanwhile. Only the window's batches count: the last
        # batches of a query that has gone quiet say nothing of now. (Batches that merely take
        # longer than the trigger are no sign: a stateful batch's fixed cost can exceed a short
        # trigger at any size, and its query keeps up all the same.)
        saturated = False
        signal = ""
        unit = self._units[q.query_id] = math.gcd(self._units.get(q.query_id, 0),
                                                  *(b.rows for b in batches if b.rows > 0))
        if backlog is None and _limit_binds_unseen(window_batches, batches, trigger_s, unit):
            read_limit, saturated = float(max(b.rows for b in window_batches)), True
            notes.append(f"a read limit binds: the window's {len(window_batches)} batches read the same "
                         f"{readable.rows(read_limit)} rows each, back to back, and no backlog is reported; "
                         "sized so that batches of the limit do the arrivals at the target")
            signal = "batches at their read limit back to back, no backlog reported"
        backlog_mode = (excess > cfg.backlog_threshold_s * rate) if rate > 0 else excess > 0
        # Batches back to back a period apart keep a row waiting at most two periods: at the
        # arrivals, a quarter of backlogThreshold keeps the lag's peaks within half of it; at the
        # arrivals over the target, half of it keeps the lag within it (where longer than the
        # trigger, or without one). A read limit that binds caps the rows of a batch, so longer
        # batches do not read more: the batches are then sized on what back-to-back batches of the
        # limit do too (see .utilization.query_utilization).
        period_s = trigger_s
        fresh_s = None
        headroom = cfg.backlog_threshold_s * HEADROOM_PERIOD_SHARE
        if headroom > (trigger_s or 0.0):
            period_s = headroom
            fresh = cfg.backlog_threshold_s * FRESH_PERIOD_SHARE
            fresh_s = fresh if fresh > (trigger_s or 0.0) else None
            fresh_note = (f"a row waits at most {readable.seconds(2 * fresh_s)} at the arrivals (half of "
                          "backlogThreshold), " if fresh_s else "")
            notes.append(f"sized for batches back to back: {fresh_note}at most "
                         f"{readable.seconds(2 * period_s)} at the arrivals over the target")
        if backlog_mode:
            notes.append(f"backlog mode: {readable.rows(excess)} behind")
            signal = signal or f"backlog {readable.rows(excess)} beyond a batch's worth"
        # Arrivals rising, each sign named in the note. The source's offsets count only over two
        # spans (source_rose): a steady Kafka load of 50 rows/s held a due scale-down for 80 s on
        # single spans of a second or two.
        rises: list[str] = []
        if latest:
            if max(latest) > rise:
                rises.append(f"the last batches read {readable.rate(max(latest))}")
            if reading is not None and reading[0] > rise:
                rises.append(f"the running batch's ended tasks read at least {readable.rate(reading[0])}")
            if source_rose:
                rises.append(f"its source's latest offsets show {readable.rate(source_rates[-2])} then "
                             f"{readable.rate(source_rates[-1])} arriving")
        rising = running or saturated or bool(rises)
        if (batch_time is not None and batches and batches[-1].duration_s > (1.0 + LENGTHENING) * batch_time
                and (trigger_s is None or batches[-1].duration_s > 0.5 * trigger_s)):
            rising = True
            notes.append(f"the last batch took {batches[-1].duration_s:.1f}s, the window's typical one "
                         f"{batch_time:.1f}s")
        if rises:
            notes.append(f"arrivals rising: {'; '.join(rises)}; the window {readable.rate(window_rate)}")
        if rising and latest:
            signal = signal or "rising"
        # Idle only on evidence: batches that read nothing, or none for the whole window. A query
        # with no two consecutive batches yet is not idle but unknown (learning).
        idle = arrived and window_rate <= 0 and (backlog or 0.0) <= 0 and not running
        if idle:
            notes.append("idle: nothing arrived in the window")
        return Demand(q=q, window_rate=window_rate, recent_rate=recent, rate=rate,
                       processed_rate=processed, backlog=backlog, growth=growth, catch_up=catch_up,
                       provisioning=provisioning, read_limit=read_limit, saturated=saturated,
                       trigger_s=trigger_s, period_s=period_s, fresh_period_s=fresh_s, signal=signal,
                       batch_time_s=batch_time, rising=rising, idle=idle, backlog_mode=backlog_mode,
                       arrivals_seen=arrived, measured_until=batches[-1].start if batches else None,
                       utilization_target=cfg.utilization_target, notes=notes)


def _task_spread(batches: Sequence[BatchRecord], cost: BatchCost) -> float:
    """The most task time a recent batch took over what the model expects of its rows (1: as
    predicted): how much slower than the model the running batch's tasks may be with no more rows.
    Batches on a fresh executor are left out (their first tasks start Python and load classes)."""
    ratios = [b.task_s / expected for b in batches
              if b.task_s is not None and not b.fresh_executors
              and (expected := float(cost.task_time(b.rows, b.executors or 1))) > _EPS]
    return max(ratios, default=1.0)


def _in_flight_rate(q: QueryMetrics, batches: Sequence[BatchRecord], cost: BatchCost | None,
                    live_executors: int, recent: Sequence[BatchRecord] = ()) -> tuple[float, float] | None:
    """Rows/s that arrived between the latest completed batch's start and the running batch's:
    at least what its ended tasks read (their task time less the model's fixed part of a task,
    over its cost of a row), and the estimate for all its tasks (for a single-stage batch, its
    ended tasks' share; else the same lower bound), as slow as the ``recent`` batches' tasks ran
    against the model (:func:`_task_spread`). None without a running batch after the latest one or
    without a cost of a row."""
    f = q.in_flight
    if f is None or not batches or cost is None or cost.per_row_s <= 0 \
            or f.batch_id != batches[-1].batch_id + 1:
        return None
    span = f.first_launch - batches[-1].start  # its start is before its first task: a lower rate
    if span <= 0:
        return None
    fixed = (cost.fixed_task_s + cost.per_executor_s * cost.executors_used(max(1, live_executors))) \
        / max(1, cost.tasks)
    # A lower bound where the model errs too: its fixed part and its cost of a row at their upper
    # estimates, as far off as the batch's error or recent batches' tasks were. At a low rate a
    # task's time is mostly fixed, and tasks slower than the model (a busy machine) read as rows
    # that never arrived: "rising" every few ticks on a steady Kafka load, and no scale-down for
    # minutes; a real tail's tasks took 1.1-1.95x the model's time, beyond a batch's error.
    margin = max(1.0 + max(0.0, cost.error), _task_spread(recent, cost))
    at_least = max(0.0, f.task_s - f.tasks_ended * fixed * margin) / (cost.per_row_s * margin) / span
    # Several stages end unevenly (a wide shuffle stage does little per task): no extrapolation.
    single_stage = cost.tasks == cost.widest and 0 < f.tasks_ended < cost.tasks
    return at_least, at_least * cost.tasks / f.tasks_ended if single_stage else at_least


def _source_rates(history: Sequence[MetricSample], q: QueryMetrics, since: float) -> list[float]:
    """Rows/s that arrived between consecutive readings of the query's sources' latest offsets (see
    :class:`~.metrics.LatestOffsets`), oldest first: spans of at least :data:`SOURCE_SPAN_S` over the
    same partitions, from readings at or after ``since`` (the latest completed batch's start: what
    arrived before it, that batch read and its own arrivals tell)."""
    readings: list[LatestOffsets] = []
    for sample in reversed(history):  # the newest few: readings older than `since` are not used
        m = sample.queries.get(q.query_id)
        r = m.latest_offsets if m is not None else None
        if r is None or r.time < since:
            break
        if not readings or r.time < readings[-1].time:
            readings.append(r)
    if len(readings) < 2:
        return []
    units = [s.rows_per_unit for s in q.backlog_sources if s.unit == "offsets" and s.rows_per_unit]
    per_offset = sum(units) / len(units) if units else 1.0
    readings.reverse()  # oldest first
    rates = []
    start = readings[0]
    for r in readings[1:]:
        span = r.time - start.time
        if r.partitions != start.partitions or r.offsets < start.offsets:
            start = r  # a partition came or went, or the log was recreated: no rate across it
        elif span >= SOURCE_SPAN_S:
            rates.append((r.offsets - start.offsets) * per_offset / span)
            start = r
    return rates


def _limit_binds_unseen(batches: Sequence[BatchRecord], recent: Sequence[BatchRecord],
                        trigger_s: float | None, unit: int = 1) -> bool:
    """The window's batches (at least :data:`LIMIT_BATCHES`) all read the same rows, the most any
    of the ``recent`` ones read and at least two of the ``unit`` every batch's rows came in, each
    began as the one before it ended (within :data:`BACK_TO_BACK_S`), past its trigger, and the
    spans between their starts varied while their rows did not: rows were waiting every time, and
    no batch read more than the limit. Batches with gaps between them waited for data. Batches of
    one file each (a file source's files come one by one) read one because one came during each:
    a limit of one unit cannot be told from that, nor a limit some batch read past."""
    if len(batches) < LIMIT_BATCHES:
        return False
    rows = [b.rows for b in batches]
    if (min(rows) <= 0 or max(rows) > 1.01 * min(rows) or max(b.rows for b in recent) > 1.01 * min(rows)
            or min(rows) < 2 * unit):
        return False
    spans = [b.start - before.start for before, b in itertools.pairwise(batches)]
    if max(spans) < (1.0 + LIMIT_EVIDENCE) * min(spans):
        return False
    return all(b.start - before.end <= BACK_TO_BACK_S
               and before.duration_s >= (trigger_s or 0.0) - BACK_TO_BACK_S
               for before, b in itertools.pairwise(batches))


def _since(horizon: float, keys: Sequence[float], *columns: Sequence[Any]) -> list[Sequence[Any]]:
    """Each column's values where ``keys`` (batch starts: ascending) are at or after ``horizon``: a
    slice; picked one by one where the keys are out of order (the driver's clock stepped back)."""
    i = bisect.bisect_left(keys, horizon)
    if max(keys[:i], default=-math.inf) < horizon <= min(keys[i:], default=math.inf):
        return [c[i:] for c in columns]
    picked = [k >= horizon for k in keys]
    return [list(itertools.compress(c, picked)) for c in columns]


def other_tasks(history: Sequence[MetricSample], window_s: float) -> float:
    """The slots jobs outside the streaming queries (a batch or ML job sharing the application)
    keep: their pending and running tasks, the most seen over the window, so a gap between
    stages frees nothing."""
    last = history[-1]
    return float(max(s.cluster.other_tasks for s in history if s.time >= last.time - window_s))


def measured_until(demands: Sequence[Demand]) -> float | None:
    """Up to when every query's arrivals are measured. An idle query bounds nothing: a source
    with new rows starts a batch, and a batch running counts as rising."""
    bounds = [d.measured_until for d in demands if not d.idle and d.measured_until is not None]
    return min(bounds) if bounds else None


def slots_kept_busy(q: QueryMetrics, history: Sequence[MetricSample], window_s: float) -> float:
    """The slots a query's tasks kept busy on average over the window (its task time over it)."""
    last = history[-1]
    first = next((s for s in history if s.time >= last.time - window_s), last)
    before = first.queries.get(q.query_id)
    if before is None or last.time <= first.time:
        return 0.0
    return max(0.0, q.busy_ms - before.busy_ms) / 1000.0 / (last.time - first.time)
