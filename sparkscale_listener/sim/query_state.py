"""One query's side of the simulation (:class:`_QueryState`): rows arriving into its source, its
batches (driver part, then tasks), and the counters and gauges its progress reports, as the
Spark collector keeps them. The simulation gives it slots; it never sees the cluster."""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass

from ..metrics import BatchRecord, InFlightBatch, LatestOffsets, QueryMetrics
from .results import BatchView
from .slots import _waves_parallelism
from .tolerance import EPS
from .workload import SimQuery

RECENT_BATCHES = 64  # completed batches a query's metrics carry, as the collector keeps them
IDLE_POLL_S = 1.0  # how often a query with the default trigger looks for new data when idle


@dataclass
class _Batch:
    rows: float
    overhead_left: float
    work_left: float
    started: float
    backlog_at_start: float | None  # latestOffset - endOffset as planned
    arrival_rate: float  # rows / time since the previous batch start (inputRowsPerSecond)
    work: float = 0.0  # task slot-seconds in all (work_left at the start)
    since_previous: float | None = None  # start minus the previous batch's start
    executors: int = 0  # live when it started
    executors_used: int = 0  # where its tasks land
    fresh: bool = False  # some executor runs its first task of the query in it
    tasks_started: float | None = None  # when its task phase began (the driver part done)


class _QueryState:
    def __init__(self, q: SimQuery, rng: random.Random, start: float, cores_per_executor: int = 1) -> None:
        self.q = q
        self.cores = cores_per_executor
        self.live_executors = 0  # set by the simulation each step: where a new batch's tasks land
        self.rng = rng
        self.source = q.initial_backlog  # arrived, not read
        # Every row that arrived (the initial backlog as if it came at the rate of the start,
        # over the time before it) and every row a completed batch read: the lag is the age of
        # the first row of the one not yet in the other. (time, rows arrived by then), oldest first.
        self.arrived = q.initial_backlog
        self.committed = 0.0
        rate0 = max(0.0, q.load(start))
        lead = q.initial_backlog / rate0 if q.initial_backlog > 0 and rate0 > 0 else 0.0
        self._arrivals: deque[tuple[float, float]] = deque([(start - lead, 0.0), (start, self.arrived)])
        self.taken = 0.0  # rows batches started to read: with ``source``, every row that arrived
        self.noise_factor = 1.0
        self.noise_until = start
        self.arrival_rate = 0.0
        self.batch: _Batch | None = None
        self.next_start = start
        self.last_batch_start: float | None = None
        self.records: deque[BatchRecord] = deque(maxlen=RECENT_BATCHES)
        self.warm_executors = 0  # executors that ran a task of this query (the most at once)
        # cumulative counters, as the collector keeps them
        self.batches = 0
        self.input_rows = 0.0
        self.batch_busy_ms = 0.0
        self.batch_duration_ms = 0.0
        self.busy_ms = 0.0
        self.tasks_finished = 0
        self.tasks_failed = 0.0  # fractional: the fluid model
        # lifecycle
        self.active = True
        self.exception: str | None = None
        self.running_slots = 0.0  # slots its tasks hold at the end of the last step
        # gauges
        self.reported_backlog: float | None = None
        self.input_rate = 0.0
        self.processed_rate = 0.0
        self.last_batch_duration_ms: float | None = None
        self.last_progress_time: float | None = None
        self.ran = False
        # per tick
        self.tick_rows = 0.0
        self.tick_busy = 0.0
        self.tick_slots_max = 0.0

    def arrive(self, t: float) -> None:
        """Set the arrival rate for the step starting at t (rows accrue in :meth:`advance`)."""
        q = self.q
        if q.noise > 0 and t >= self.noise_until - EPS:
            self.noise_factor = self.rng.uniform(1.0 - q.noise, 1.0 + q.noise)
            self.noise_until = t + q.noise_period_s
        self.arrival_rate = max(0.0, q.load(t)) * self.noise_factor

    def check_executors(self, now: float, live: int) -> None:
        """Fault injection: terminate when fewer executors than the query needs are live."""
        need = self.q.query_fails_below_executors
        if self.active and need is not None and live < need:
            self.active = False
            self.batch = None
            self.exception = (f"org.apache.spark.SparkException: Job aborted due to stage failure "
                              f"(simulated: {live} live executors, the query needs {need}) "
                              f"at t={now:.0f}s")

    def wants_slots(self) -> bool:
        """Its batch's tasks are running (its driver part done): a batch being planned or
        committed on the driver, or a query waiting for its trigger or for data, holds no slot,
        and the other queries' tasks use them."""
        b = self.batch
        return self.active and b is not None and b.overhead_left <= EPS and b.work_left > 1e-7

    def next_event(self, now: float, progress: float) -> float:
        """Seconds until its batch changes phase at ``progress`` slot-seconds per second (its
        driver part ends, its tasks end, its next trigger comes): the slots are shared out again
        then."""
        if not self.active:
            return math.inf
        b = self.batch
        if b is None:
            due = self.next_start - now
            return due if due > EPS else self.q.batch_overhead_s
        if b.overhead_left > EPS:
            return b.overhead_left
        return b.work_left / progress if progress > EPS else math.inf

    def advance(self, t: float, dt: float, alloc: float) -> float:
        """Run this query from t to t + dt with ``alloc`` slots while its tasks run; returns the
        slot-seconds its tasks used. ``running_slots`` is then what its tasks hold at t + dt."""
        now, end = t, t + dt
        busy = 0.0
        self.running_slots = 0.0
        self.arrived += self.arrival_rate * dt
        self._arrivals.append((end, self.arrived))
        if not self.active:  # terminated: rows pile up in the source, nothing reads them
            self.source += self.arrival_rate * dt
            return busy
        accrued = t  # rows arrive continuously: a batch starting mid-step sees only part of them
        while now < end - EPS:
            if self.batch is None:
                if now < self.next_start - EPS:
                    now = min(end, self.next_start)
                    continue
                self.source += self.arrival_rate * (now - accrued)
                accrued = now
                self.begin(now)
                continue
            b = self.batch
            if b.overhead_left > EPS:
                use = min(b.overhead_left, end - now)
                b.overhead_left -= use
                now += use
                continue
            if b.tasks_started is None:
                b.tasks_started = now
            if b.work_left <= 1e-7:  # no task time at all (a batch of nothing to compute)
                self._complete(b, now)
                continue
            if alloc <= EPS:
                break
            use = min(b.work_left / alloc, end - now)
            b.work_left -= alloc * use
            busy += alloc * use
            self.busy_ms += alloc * use * 1000.0
            self.tick_busy += alloc * use
            self.tick_slots_max = max(self.tick_slots_max, alloc)
            now += use
            if b.work_left <= 1e-7:
                self._complete(b, now)
        self.source += self.arrival_rate * (end - accrued)
        b = self.batch
        if b is not None and b.overhead_left <= EPS and b.work_left > 1e-7:
            self.running_slots = alloc
        return busy

    def _complete(self, b: _Batch, now: float) -> None:
        q = self.q
        duration = now - b.started
        self.batches += 1
        self.input_rows += b.rows
        self.committed += b.rows
        self.batch_busy_ms += b.work * 1000.0
        self.batch_duration_ms += duration * 1000.0
        self.tasks_finished += q.partitions
        self.last_batch_duration_ms = duration * 1000.0
        # Gauges come with the batch's progress event, i.e. at its completion.
        self.reported_backlog = b.backlog_at_start
        self.input_rate = b.arrival_rate
        self.processed_rate = b.rows / duration if duration > 0 else 0.0
        self.last_progress_time = now
        self.tick_rows += b.rows
        self.ran = True
        self.batch = None
        self.next_start = self._next_trigger(now, poll=False, started=b.started)
        self.records.append(BatchRecord(
            batch_id=self.batches - 1, start=b.started, duration_s=duration, rows=round(b.rows),
            since_previous_s=b.since_previous, backlog=b.backlog_at_start, task_s=b.work,
            tasks=q.partitions, task_wall_s=now - (b.tasks_started if b.tasks_started is not None else now),
            executors_used=b.executors_used, executors=b.executors, fresh_executors=b.fresh))

    def begin(self, now: float) -> None:
        """At its trigger: a batch of what waits (whole files, at most the read limit) starts
        now, or, with nothing new, the next look is set. The source is read as it stands."""
        q = self.q
        if self.batch is not None or not self.active or now < self.next_start - EPS:
            return
        available = (self.source if not q.rows_per_file
                     else math.floor(self.source / q.rows_per_file + 1e-9) * q.rows_per_file)
        rows = available if q.max_rows_per_batch is None else min(available, q.max_rows_per_batch)
        empty_first = q.empty_first_batch and self.last_batch_start is None
        if rows < 1.0 and not empty_first:  # no new data: look again at the next trigger
            self.next_start = self._next_trigger(now, poll=True)
            return
        self.source -= rows
        self.taken += rows
        previous = self.last_batch_start
        since = now - previous if previous is not None else 0.0
        self.last_batch_start = now
        used = self._executors_used()
        # Executors gone since are gone for good: their replacements start cold.
        self.warm_executors = min(self.warm_executors, self.live_executors)
        fresh = max(0, used - self.warm_executors)
        self.warm_executors = max(self.warm_executors, used)
        work = rows * q.cost_per_row + self._fixed_cost() + fresh * q.new_executor_warmup_s
        if q.batch_work is not None:
            work = max(0.0, q.batch_work(now, self.batches, rows, work))
        overhead = q.batch_overhead_s
        if q.batch_jitter > 0:
            overhead *= self.rng.uniform(1.0 - q.batch_jitter, 1.0 + q.batch_jitter)
        self.batch = _Batch(rows, overhead, work, now, self.source if q.reports_backlog else None,
                            rows / since if since > 0 else 0.0, work=work,
                            since_previous=None if previous is None else since,
                            executors=self.live_executors, executors_used=used, fresh=fresh > 0)

    def lag(self, now: float) -> float:
        """Seconds since the oldest row not read by a completed batch arrived (0: none waits). Rows
        of files arrive with their file: the oldest file not read arrived once all its rows had."""
        oldest = self.committed + (self.q.rows_per_file or 0.0)  # rows arrived once it has
        if oldest > self.arrived - 1e-6 or self.committed >= self.arrived - 1e-6:
            return 0.0
        points = self._arrivals
        while len(points) > 2 and points[1][1] <= oldest:
            points.popleft()
        (t0, a0), (t1, a1) = points[0], points[1]
        first = t0 + (t1 - t0) * min(1.0, (oldest - a0) / (a1 - a0)) if a1 > a0 else t1
        return max(0.0, now - first)

    def _executors_used(self) -> int:
        """Executors a new batch's tasks land on: as many as its tasks fill, at most the live ones."""
        return min(self.live_executors, math.ceil(self.q.partitions / self.cores))

    def _fixed_cost(self) -> float:
        """Task slot-seconds a batch pays whatever its rows (see SimQuery.task_overhead_s)."""
        q = self.q
        if not q.task_overhead_s and not q.executor_overhead_s:
            return 0.0
        return q.partitions * q.task_overhead_s + self._executors_used() * q.executor_overhead_s

    def parallelism(self, slots: float) -> float:
        """Slots its tasks can keep busy given ``slots``: at most its tasks, and in waves (T tasks
        on P slots take ceil(T / P) rounds: T / ceil(T / P) slots' worth of progress)."""
        usable = _waves_parallelism(self.q, slots)
        return usable / self.q.efficiency if self.q.efficiency != 1.0 else usable

    def batch_view(self) -> BatchView | None:
        """The running batch's tasks, or None (no batch, or still planning on the driver)."""
        b = self.batch
        if b is None or b.overhead_left > EPS or b.work_left <= 1e-7:
            return None
        share = b.work_left / b.work if b.work > 0 else 0.0
        return BatchView(self.q.name, b.started, self.q.partitions,
                         max(1, math.ceil(self.q.partitions * share - 1e-6)), self.running_slots)

    def _next_trigger(self, now: float, poll: bool, started: float | None = None) -> float:
        interval = self.q.trigger_interval_s
        if interval is None:
            return now + IDLE_POLL_S if poll else now
        # ProcessingTime triggers fire on multiples of the interval; an overrun batch is followed
        # at once.
        if started is not None and now >= started + interval - EPS:
            return now
        return (math.floor(now / interval + EPS) + 1) * interval

    def metrics(self, now: float) -> QueryMetrics:
        q = self.q
        return QueryMetrics(
            query_id=q.name, name=q.name, batches=self.batches, input_rows=int(self.input_rows),
            batch_busy_ms=self.batch_busy_ms, batch_duration_ms=self.batch_duration_ms,
            backlog=self.reported_backlog, input_rate=self.input_rate,
            processed_rate=self.processed_rate, last_batch_duration_ms=self.last_batch_duration_ms,
            trigger_interval_ms=(q.trigger_interval_s * 1000.0 if q.trigger_interval_s else None),
            last_progress_time=self.last_progress_time, busy_ms=self.busy_ms,
            tasks_finished=self.tasks_finished, tasks_failed=int(self.tasks_failed + EPS),
            max_stage_tasks=q.partitions if self.ran else None, active=self.active,
            exception=self.exception, recent_batches=tuple(self.records), in_flight=self._in_flight(),
            latest_offsets=LatestOffsets(now, self.source + self.taken, 1) if q.latest_offsets else None)

    def _in_flight(self) -> InFlightBatch | None:
        """The running batch's ended tasks, as the listener sees them: its tasks run in waves of
        the slots they hold, and a wave's tasks end together (one wave: none until the batch ends)."""
        b = self.batch
        if b is None or b.tasks_started is None or b.work <= 0 or self.running_slots <= EPS:
            return None
        tasks = self.q.partitions
        per_wave = max(1, min(tasks, round(self.running_slots)))
        done = 1.0 - b.work_left / b.work
        ended = min(tasks, math.floor(done * math.ceil(tasks / per_wave) + 1e-6) * per_wave)
        if ended <= 0:
            return None
        return InFlightBatch(batch_id=self.batches, first_launch=b.tasks_started, tasks_ended=ended,
                             task_s=ended * b.work / tasks)
