"""What a recorded application asked of its executors, per query, ready to be replayed (pure).

From a :class:`~.records.RecordedApplication` this builds, per streaming query:

* its batches as :class:`~sparkscale_listener.metrics.BatchRecord`s, the records the autoscaler
  itself learns from (one conversion: the fit and the replay's figures read only these), with the
  task time of other queries' batches beside each (:func:`~..concurrency.with_concurrency`);
* the arrivals over time: batch ``i`` read the rows that arrived since batch ``i - 1`` started,
  plus what its sources' backlog grew by where a read limit bound (``BatchRecord.arrivals``),
  spread evenly over that interval;
* its cost, fitted by :class:`~..model.BatchCostLearner` over all its batches, and how far each
  recorded batch's task time was from the fit (replayed through the simulator's ``batch_work``);
* its recorded lag over time: the age of the oldest row no completed batch had read
  (:meth:`QueryHistory.lag`), what the simulator measures of a replay.

And for the application: its executors over time, the executor-seconds it used, its actions
(sparkscale's applied scalings, else the changes of its executor count) and the provisioning and
kill delays the log shows.
"""

from __future__ import annotations

import bisect
import itertools
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from ..collect.backlog import KAFKA_SOURCE
from ..concurrency import with_concurrency
from ..metrics import BatchRecord, QueryMetrics
from ..model import WARMUP_BATCHES, BatchCost, BatchCostLearner
from .records import BatchRecord as RecordedBatch
from .records import QueryRecord, RecordedApplication

# Applied changes less than this apart are one action when the log has no scaling events (the
# executors of one request register within seconds of each other).
ACTION_MERGE_S = 5.0
# A replayed batch pays at least this share of the fitted cost's task time.
MIN_FACTOR = 0.05
# A recorded batch's task time beyond the fit, replayed in a batch of other rows, scales with their
# ratio within [1 / RESIDUAL_SCALE, RESIDUAL_SCALE].
RESIDUAL_SCALE = 2.0
# Below this many seconds before its first batch, what that batch read was waiting at the start.
INITIAL_BACKLOG_WITHIN_S = 0.1


@dataclass(frozen=True)
class Action:
    """An executor change: recorded (sparkscale's or the cluster's) or replayed."""

    time: float
    action: str  # scale_up, scale_down, rollback
    from_executors: int
    to_executors: int
    reason: str = ""


@dataclass(frozen=True)
class QueryHistory:
    """One streaming query's recorded load and cost (every run of it, in batch order)."""

    label: str  # its name, else its id
    query_id: str
    start: float
    end: float  # its last batch's start: no arrival after it is known
    batches: tuple[BatchRecord, ...]
    trigger_s: float | None
    read_limit: float | None  # rows a batch read at most while a backlog stayed
    reports_backlog: bool
    reads_kafka: bool  # every source of every batch is Kafka (the bridge reads its latest offsets)
    initial_backlog: float
    cost: BatchCost
    cost_fitted: bool  # False: too few warm batches, an average stands in (see assumptions)
    new_executor_warmup_s: float  # extra task time of a batch per executor new to the query
    _times: np.ndarray  # arrival segments: rate[i] in force over (times[i], times[i + 1]]
    _rates: np.ndarray
    _cumulative: np.ndarray  # rows arrived by times[i]
    _starts: np.ndarray  # the batches' starts
    _ends: np.ndarray  # the batches' ends, in order
    _read: np.ndarray  # rows read by the batches that ended by _ends[i]
    _residual_s: np.ndarray  # what each batch paid beyond the fit (0 where unknown)
    _cold_s: tuple[float, ...]  # what the first batches paid beyond the fit

    @property
    def rates(self) -> tuple[float, ...]:
        """The arrival rate over each interval between batch starts, rows/s."""
        return tuple(self._rates.tolist())

    def load(self, t: float) -> float:
        """Rows/s arriving at ``t``."""
        i = bisect.bisect_left(self._times, t) - 1
        return float(self._rates[i]) if 0 <= i < len(self._rates) else 0.0

    def arrived(self, t: float) -> float:
        """Rows arrived from the query's start up to ``t``."""
        i = bisect.bisect_right(self._times, t) - 1
        if i < 0:
            return 0.0
        if i >= len(self._rates):
            return float(self._cumulative[-1])
        return float(self._cumulative[i] + self._rates[i] * (t - self._times[i]))

    def lag(self, t: float) -> float:
        """Seconds the oldest row no completed batch had read by ``t`` had waited (0: none waits),
        as recorded: the lag as the simulator measures it and as a user reading the sink sees it.
        Rows waiting over the arrival rate of the moment would not do: after a fall of the load
        they read as waiting far longer than the application ran. Rows that waited when the
        query started count from its start (the log does not say when they arrived)."""
        i = bisect.bisect_right(self._ends, t)
        read = float(self._read[i - 1]) if i else 0.0
        if self.initial_backlog + self.arrived(t) <= read + 1e-6:
            return 0.0
        if read < self.initial_backlog:
            return max(0.0, t - self.start)
        return max(0.0, t - self._arrival_of(read - self.initial_backlog))

    def _arrival_of(self, rows: float) -> float:
        """When the row that follows the first ``rows`` rows since the start arrived (the arrivals
        spread evenly over each interval between batch starts)."""
        i = bisect.bisect_right(self._cumulative, rows) - 1
        if i < 0:
            return float(self._times[0])
        if i >= len(self._rates):
            return float(self._times[-1])
        return float(self._times[i] + (rows - self._cumulative[i]) / self._rates[i])

    def batch_work(self, t: float, n: int, rows: float, work: float) -> float:
        """The task time a replayed batch (the query's ``n``-th, of ``rows`` rows, starting at
        ``t``) pays for the fitted cost's ``work``. Its first batches pay what the recorded first
        ones paid beyond the fit (a cold start costs the same whatever the rows). A later one pays
        what the recorded batch that started last at or before ``t`` paid beyond the fit, scaled
        by their rows' ratio within [1/2, 2]: a costlier stretch of input costs more in a bigger
        batch, but one noisy small batch does not multiply a big one."""
        if n < len(self._cold_s):
            return max(MIN_FACTOR * work, work + self._cold_s[n])
        i = bisect.bisect_right(self._starts, t + 1e-6) - 1
        if not 0 <= i < len(self._residual_s):
            return work
        recorded = max(1.0, float(self.batches[i].rows))
        scale = min(RESIDUAL_SCALE, max(1.0 / RESIDUAL_SCALE, max(1.0, rows) / recorded))
        return max(MIN_FACTOR * work, work + float(self._residual_s[i]) * scale)


@dataclass(frozen=True)
class ApplicationHistory:
    start: float  # the replay's window: the first query's start ...
    end: float  # ... to the last batch's end
    queries: tuple[QueryHistory, ...]
    cores: int  # task slots per executor (spark.executor.cores / spark.task.cpus)
    executors_at_start: int
    executor_seconds: float  # what the application used over the window
    actions: tuple[Action, ...]
    # Recorded actions after the queries' last batch: outside the replayed window, not compared.
    late_actions: tuple[Action, ...]
    provisioning_s: float | None  # request -> registered, from sparkscale's own scale-ups
    kill_delay_s: float  # kill -> removed, likewise (0 when unknown)
    assumptions: tuple[str, ...]  # the reader's, and the replay's own
    _changes: tuple[tuple[float, int], ...]  # (time, live executors from then on)

    def executors_at(self, t: float) -> int:
        i = bisect.bisect_right([c[0] for c in self._changes], t) - 1
        return self._changes[i][1] if i >= 0 else self.executors_at_start


def build_history(app: RecordedApplication) -> ApplicationHistory:
    assumptions = list(app.assumptions)
    cores = _slots_per_executor(app, assumptions)
    runs: dict[str, list[QueryRecord]] = {}
    for q in app.queries:
        if q.batches:
            runs.setdefault(q.query_id, []).append(q)
    if not runs:
        raise ValueError(f"{app.path}: no streaming query ran a batch: nothing to replay")
    converted = {qid: _batch_records(app, [b for run in rs for b in run.batches])
                 for qid, rs in runs.items()}
    together = with_concurrency([QueryMetrics(query_id=qid, recent_batches=tuple(bs))
                                 for qid, (bs, _) in converted.items()])
    queries = tuple(_query_history(rs, together[qid].records(), converted[qid][1], cores, assumptions)
                    for qid, rs in runs.items())
    start = min(q.start for q in queries)
    end = max(q.batches[-1].end for q in queries)
    changes = _executor_changes(app)
    at_start = app.executors_at(start)
    if at_start == 0:
        at_start = max(1, max((b.executors_used or 0 for q in queries for b in q.batches[:1]), default=1))
        assumptions.append(f"no executor is announced in the log when the first query starts: the replay "
                           f"starts with {at_start}")
    provisioning, kill = _delays(app)
    # Executors the driver was already killing when the window starts (sparkscale's baseline, a
    # scale-down just before) run none of its tasks: Spark schedules nothing on an executor pending
    # removal, however long its removal then takes to be announced.
    leaving = [e.removed_time for e in app.executors
               if e.removed_time is not None and start < e.removed_time <= start + kill
               and (e.removed_reason or "").startswith("Executor killed by driver")]
    if leaving and at_start - len(leaving) >= 1:
        at_start -= len(leaving)
        changes = [(t, n) for t, n in changes if t > max(leaving)]
    actions = _actions(app, changes)
    # The replay simulates the queries up to their last batch: an action after it (the executors
    # of a batch job that ran once the queries stopped) is outside what it can reproduce.
    after = [a for a in actions if a.time > end]
    if after:
        actions = tuple(a for a in actions if a.time <= end)
        assumptions.append("recorded actions after the queries' last batch are outside the replayed window: "
                           + "; ".join(f"{a.action} {a.from_executors} -> {a.to_executors} at "
                                       f"{a.time - start:.0f} s" for a in after))
    if app.jobs:
        task_s = sum(j.tasks.task_ms for j in app.jobs if j.tasks) / 1000.0
        n = len(app.jobs)
        assumptions.append(f"{n} job{'s' if n != 1 else ''} outside the streaming queries ({task_s:.0f} s "
                           f"of task time) {'are' if n != 1 else 'is'} not replayed: the simulated "
                           "executors run only the queries")
    return ApplicationHistory(
        start=start, end=end, queries=queries, cores=cores, executors_at_start=at_start,
        executor_seconds=_executor_seconds(app, start, end), actions=actions, late_actions=tuple(after),
        provisioning_s=provisioning, kill_delay_s=kill, assumptions=tuple(dict.fromkeys(assumptions)),
        _changes=tuple((t, n) for t, n in changes if start < t))


def flaps(actions: Sequence[Action], within_s: float) -> int:
    """Consecutive actions in opposite directions less than ``within_s`` apart (the benchmarks'
    definition: one per such pair)."""
    moves = [a for a in actions if a.to_executors != a.from_executors]
    return sum(1 for a, b in itertools.pairwise(moves)
               if (a.to_executors > a.from_executors) != (b.to_executors > b.from_executors)
               and b.time - a.time < within_s)


# -- the application ---------------------------------------------------------------------------


def _slots_per_executor(app: RecordedApplication, assumptions: list[str]) -> int:
    cores = app.executor_cores
    if cores is None:
        sizes = [e.cores for e in app.executors if e.cores]
        if sizes:
            cores = statistics.mode(sizes)
        else:
            cores = 1
            assumptions.append("the executors' size is unknown (no spark.executor.cores, no executor "
                               "announced with its cores): taken as 1 core")
    return max(1, cores // max(1, app.task_cpus))


def _executor_changes(app: RecordedApplication) -> list[tuple[float, int]]:
    times = sorted({t for e in app.executors for t in (e.added_time, e.removed_time) if t is not None})
    return [(t, app.executors_at(t)) for t in times]


def _executor_seconds(app: RecordedApplication, start: float, end: float) -> float:
    total = 0.0
    for e in app.executors:
        since = e.added_time if e.added_time is not None else start
        until = e.removed_time if e.removed_time is not None else end
        total += max(0.0, min(until, end) - max(since, start))
    return total


def _actions(app: RecordedApplication, changes: list[tuple[float, int]]) -> tuple[Action, ...]:
    if app.ran_sparkscale:
        return tuple(Action(s.time, s.action, s.from_executors, s.to_executors, s.reason)
                     for s in app.scalings if s.applied and s.to_executors != s.from_executors)
    # No decisions in the log: the changes of the executor count (after the first executors came).
    out: list[Action] = []
    previous = None
    for t, n in changes:
        if previous is None:
            previous = n
            continue
        if n == previous:
            continue
        if out and t - out[-1].time < ACTION_MERGE_S and (n > out[-1].from_executors) == (
                out[-1].to_executors > out[-1].from_executors):
            out[-1] = replace(out[-1], to_executors=n)
        else:
            out.append(Action(t, "scale_up" if n > previous else "scale_down", previous, n,
                              "executors added" if n > previous else "executors removed"))
        previous = n
    first = min((e.added_time for e in app.executors if e.added_time is not None), default=None)
    return tuple(a for a in out if first is None or a.time - first > ACTION_MERGE_S)


def _delays(app: RecordedApplication) -> tuple[float | None, float]:
    """Median request -> registered and kill -> removed times of sparkscale's applied changes."""
    added = sorted(e.added_time for e in app.executors if e.added_time is not None)
    removed = sorted(e.removed_time for e in app.executors if e.removed_time is not None)
    ups, downs = [], []
    for s in app.scalings:
        if not s.applied:
            continue
        n = abs(s.to_executors - s.from_executors)
        if s.to_executors > s.from_executors:
            ups += [t - s.time for t in added if t >= s.time][:n]
        elif s.to_executors < s.from_executors:
            downs += [t - s.time for t in removed if t >= s.time][:n]
    return (statistics.median(ups) if ups else None), (statistics.median(downs) if downs else 0.0)


# -- one query ---------------------------------------------------------------------------------


def _batch_records(app: RecordedApplication, batches: Sequence[RecordedBatch],
                   ) -> tuple[list[BatchRecord], list[int]]:
    """The recorded batches as the autoscaler's own records (what its collector would have made),
    and how many executors new to the query each one ran on."""
    out: list[BatchRecord] = []
    new: list[int] = []
    seen: set[str] = set()
    previous = None
    for b in sorted(batches, key=lambda b: (b.batch_id, b.timestamp)):
        tasks = b.tasks
        executors = set(tasks.executors) if tasks else set()
        fresh = bool(executors - seen) and bool(seen)
        new.append(len(executors - seen) if seen else 0)
        seen |= executors
        out.append(BatchRecord(
            batch_id=b.batch_id, start=b.timestamp, duration_s=(b.trigger_ms or 0.0) / 1000.0,
            rows=b.num_input_rows,
            since_previous_s=b.timestamp - previous.timestamp if previous is not None else None,
            backlog=b.backlog_rows, task_s=tasks.task_ms / 1000.0 if tasks else None,
            tasks=tasks.tasks if tasks else None,
            task_wall_s=tasks.last_finish - tasks.first_launch if tasks else None,
            executors_used=len(executors) or None, executors=app.executors_at(b.timestamp) or None,
            fresh_executors=fresh))
        previous = b
    return out, new


def _query_history(runs: list[QueryRecord], batches: list[BatchRecord], new: list[int], cores: int,
                   assumptions: list[str]) -> QueryHistory:
    latest = runs[-1]
    label = latest.name or latest.query_id
    starts = [r.start_time for r in runs if r.start_time is not None]
    start = min(starts) if starts else batches[0].start
    first = batches[0]
    initial = 0.0
    times, rates = [], []
    span = first.start - start
    if span > INITIAL_BACKLOG_WITHIN_S:
        times, rates = [start], [(first.rows + (first.backlog or 0.0)) / span]
    else:
        initial = first.rows + (first.backlog or 0.0)
    for previous, b in itertools.pairwise(batches):
        since = b.start - previous.start
        if since <= 0:
            continue
        times.append(previous.start)
        rates.append((b.arrivals(previous.backlog) or 0.0) / since)
    times.append(batches[-1].start)
    t = np.array(times)
    r = np.array(rates)
    cumulative = np.concatenate([[0.0], np.cumsum(r * np.diff(t))])
    by_end = sorted(batches, key=lambda b: b.end)
    limited = [b.rows for b in batches if b.backlog]
    cost, fitted = _fit(batches, cores, label, assumptions)
    residuals, cold, warmup = _deviations(batches, new, cost)
    return QueryHistory(
        label=label, query_id=latest.query_id, start=start, end=batches[-1].start,
        batches=tuple(batches), trigger_s=latest.trigger_interval_s,
        read_limit=float(max(limited)) if limited else None,
        reports_backlog=any(b.backlog is not None for b in batches),
        reads_kafka=all(s.description and KAFKA_SOURCE.search(s.description)
                        for run in runs for b in run.batches for s in b.sources),
        initial_backlog=initial,
        cost=cost, cost_fitted=fitted, new_executor_warmup_s=warmup, _times=t, _rates=r,
        _cumulative=cumulative, _starts=np.array([b.start for b in batches]),
        _ends=np.array([b.end for b in by_end]), _read=np.cumsum([float(b.rows) for b in by_end]),
        _residual_s=np.array(residuals), _cold_s=tuple(cold))


def _fit(batches: list[BatchRecord], cores: int, label: str,
         assumptions: list[str]) -> tuple[BatchCost, bool]:
    learner = BatchCostLearner(max_batches=len(batches) + 1)
    learner.add(batches)
    cost = learner.fit(cores)
    if cost is not None:
        return cost, True
    with_tasks = [b for b in batches if b.task_s is not None and b.rows > 0]
    rows = sum(b.rows for b in with_tasks)
    if with_tasks and rows > 0:
        per_row = sum(b.task_s or 0.0 for b in with_tasks) / rows
        tasks = round(statistics.median(b.tasks or 1 for b in with_tasks))
        driver = statistics.median(max(0.0, b.duration_s - (b.task_wall_s or 0.0)) for b in with_tasks)
        how = "its task time per row (all of it charged to the rows)"
    else:
        busy = [b for b in batches if b.rows > 0]
        rows = sum(b.rows for b in busy)
        slots = [(b.executors or 1) * cores for b in busy]
        per_row = sum(b.duration_s * k for b, k in zip(busy, slots, strict=True)) / rows if rows else 0.0
        tasks, driver = cores, 0.0
        how = "its batch time x the slots it had, per row (no task events: an upper bound)"
    assumptions.append(f"query {label!r}: too few warm batches with rows to fit its cost; taken as {how}")
    return BatchCost(driver_s=driver, fixed_task_s=0.0, per_executor_s=0.0, per_row_s=per_row,
                     tasks=max(1, tasks), widest=max(1, tasks), cores=cores, efficiency=1.0, error=0.0,
                     batches=len(batches), row_cost_trusted=False), False


def _deviations(batches: list[BatchRecord], new: list[int],
                cost: BatchCost) -> tuple[list[float], list[float], float]:
    """What each batch paid beyond the fit (0 where unknown, for the first batches, and for batches
    with executors new to the query); what the first batches paid beyond it; the median extra task
    time per executor new to the query."""
    residuals, cold, extra = [], [], []
    first = batches[0].batch_id
    for b, fresh in zip(batches, new, strict=True):
        predicted = float(cost.task_time(b.rows, b.executors or b.executors_used or 1))
        if b.batch_id < first + WARMUP_BATCHES:
            cold.append(max(0.0, (b.task_s or 0.0) - predicted))
            residuals.append(0.0)
        elif b.task_s is None:
            residuals.append(0.0)
        elif fresh:
            extra.append(max(0.0, b.task_s - predicted) / fresh)
            residuals.append(0.0)
        else:
            residuals.append(b.task_s - predicted)
    warmup = statistics.median(extra) if extra else 0.0
    if cold:  # the simulator's first batch pays the warm-up on every executor it lands on: less
        # it, so that batch costs what the recorded one did (a first batch of no rows starts no
        # Python worker and pays less than the warm-up: then this is negative)
        used = batches[0].executors_used or 1
        predicted = float(cost.task_time(batches[0].rows, batches[0].executors or used))
        cold[0] = (batches[0].task_s or predicted) - predicted - used * warmup
    return residuals, cold, warmup
