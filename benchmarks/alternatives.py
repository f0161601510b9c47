"""The alternatives a user of Spark Structured Streaming has to sparkscale, as models that act on
the simulator's cluster (:class:`~sparkscale_listener.sim.SimCluster`) at their own pace.

Each model is called after every simulator step (``Simulation(on_step=model)``) and talks to the
cluster through the calls Spark's own managers use: ``requestTotalExecutors`` (``request_total``)
and ``killExecutors`` (``kill``). The control loop of sparkscale runs beside them in
``recommend`` mode with :class:`NeverReadyEvaluator`, so it never acts. Every change of what the
cluster is heading for (live + pending executors) a model causes is recorded in ``actions`` as
``(time, from, to)``.

The models learn from Spark's source (no code copied); each docstring names the class modelled,
its formula and its configuration keys with their defaults.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from sparkscale_listener.config.options import Duration, Number, Option
from sparkscale_listener.config.plugins import PluginContext
from sparkscale_listener.decisions import Evaluation, ScalingContext
from sparkscale_listener.evaluator import MetricEvaluator
from sparkscale_listener.metrics import MetricSample
from sparkscale_listener.sim import BatchView, Simulation


class NeverReadyEvaluator(MetricEvaluator):
    """Keeps sparkscale's control loop from deciding anything (static and alternative policies)."""

    def evaluate(self, history: Sequence[MetricSample], context: ScalingContext) -> Evaluation:
        current = context.current_target
        return Evaluation(time=context.now, ready=False, current_executors=current,
                          recommended_executors=current, required_slots=0.0, utilization=None,
                          backlog_mode=False, reason="not ready: another policy sizes this run")


@dataclass
class ClusterModel:
    """Base of the models: records what each cluster call changed."""

    actions: list[tuple[float, int, int]] = field(default_factory=list)

    @staticmethod
    def heading(sim: Simulation) -> int:
        """Executors the cluster is heading for: live + launches pending."""
        return sim.cluster.live_count + sim.cluster.pending_count

    def request_total(self, sim: Simulation, total: int, record: bool = True) -> None:
        before = self.heading(sim)
        sim.cluster.request_total(total)
        if record:
            self._record(sim, before)

    def kill(self, sim: Simulation, executor_ids: Sequence[str]) -> list[str]:
        """killExecutors(force=false): an executor running a task is skipped."""
        before = self.heading(sim)
        killed = sim.cluster.kill(executor_ids, force=False)
        self._record(sim, before)
        return killed

    def _record(self, sim: Simulation, before: int) -> None:
        after = self.heading(sim)
        if after != before:
            self.actions.append((sim.now, before, after))

    def __call__(self, sim: Simulation) -> None:
        raise NotImplementedError


def batch_stats(before: MetricSample | None, now: MetricSample) -> tuple[int, float]:
    """(batches completed, their summed duration in seconds) between two samples, all queries."""
    batches, duration_s = 0, 0.0
    for qid, q in now.queries.items():
        q0 = before.queries.get(qid) if before is not None else None
        batches += q.batches - (q0.batches if q0 else 0)
        duration_s += (q.batch_duration_ms - (q0.batch_duration_ms if q0 else 0.0)) / 1000.0
    return batches, duration_s


@dataclass
class SparkDynamicAllocation(ClusterModel):
    """Spark's core dynamic allocation, ``org.apache.spark.ExecutorAllocationManager`` (with its
    ``ExecutorMonitor`` for idleness), polled every simulator step (Spark polls every 100 ms).

    * **Needed:** ``maxNeeded = ceil((pending + running tasks) x executorAllocationRatio /
      tasksPerExecutor)``, tasksPerExecutor = ``spark.executor.cores / spark.task.cpus``.
    * **Down:** whenever ``maxNeeded < target``, ``target = max(maxNeeded, minExecutors)`` and the
      cluster manager is told at once (this kills nothing, but cancels launches not started yet;
      between two micro-batches no task is pending or running, so the target drops to
      ``minExecutors``). Executors leave only when idle (no task) for ``executorIdleTimeout``, and
      not below ``max(minExecutors, target)``: ``killExecutors(ids, adjustTargetNumExecutors=false,
      force=false)`` then ``requestTotalExecutors(target)``.
    * **Up:** when tasks have been pending for ``schedulerBacklogTimeout`` (timer set when a stage
      is submitted with pending tasks, cleared when none is pending), ``target = min(max(target,
      live) + numToAdd, maxNeeded)`` within ``[minExecutors, maxExecutors]``; ``numToAdd`` doubles
      after each round that added all of it (1, 2, 4, ...), back to 1 otherwise; the next round
      follows after ``sustainedSchedulerBacklogTimeout`` while tasks stay pending.
    * Nothing changes while initializing (until the first stage is submitted).

    Keys (Spark defaults): ``spark.dynamicAllocation.minExecutors`` (0; 1 here like sparkscale),
    ``maxExecutors`` (infinity), ``initialExecutors`` (minExecutors), ``schedulerBacklogTimeout``
    (1s), ``sustainedSchedulerBacklogTimeout`` (= schedulerBacklogTimeout),
    ``executorIdleTimeout`` (60s), ``executorAllocationRatio`` (1.0); a stateless query writes no
    shuffle files, so ``shuffleTracking.timeout`` does not hold executors.

    Where tasks land (the idleness the rule sees): the task scheduler shuffles its resource
    offers and spreads a stage's tasks one per executor per round, so a batch's running tasks go to
    ``min(live, running tasks)`` executors picked at random when the batch is first seen; while
    tasks are pending every executor gets one (every free slot is taken).
    """

    initial_executors: int = 1
    min_executors: int = 1
    max_executors: int = 2**31 - 1
    cores_per_executor: int = 1
    task_cpus: int = 1
    scheduler_backlog_timeout_s: float = 1.0
    sustained_scheduler_backlog_timeout_s: float = 1.0
    executor_idle_timeout_s: float = 60.0
    executor_allocation_ratio: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        self.target = self.initial_executors
        self.num_to_add = 1
        self.add_time: float | None = None
        self.initializing = True
        self.last_busy: dict[str, float] = {}  # executor id -> last time it ran a task
        self.placements: dict[tuple[str, float], list[str]] = {}  # (query, batch start) -> executors
        self.rng = random.Random(self.seed)

    @property
    def tasks_per_executor(self) -> int:
        return max(1, self.cores_per_executor // self.task_cpus)

    def max_needed(self, pending: int, running: int) -> int:
        return math.ceil((pending + running) * self.executor_allocation_ratio / self.tasks_per_executor
                         - 1e-9)

    def __call__(self, sim: Simulation) -> None:
        now = sim.now
        batches = sim.running_batches()
        running = sum(min(b.tasks_left, math.floor(b.running_slots + 1e-6)) for b in batches)
        pending = sum(b.tasks_left for b in batches) - running
        if batches:
            self.initializing = False  # a stage was submitted
        overhead = {q.name: q.batch_overhead_s for q in sim.queries}
        if pending > 0:
            if self.add_time is None:  # onSchedulerBacklogged: from the stage's submission
                submitted = min(b.started + overhead[b.query] for b in batches)
                self.add_time = submitted + self.scheduler_backlog_timeout_s
        else:  # onSchedulerQueueEmpty
            self.add_time = None
            self.num_to_add = 1
        self._track_idleness(sim, batches, pending)
        self.schedule(sim, now, pending, running)

    def _track_idleness(self, sim: Simulation, batches: Sequence[BatchView], pending: int) -> None:
        live = sim.cluster.executor_ids()
        for eid in live:
            self.last_busy.setdefault(eid, sim.now)  # idle from registration
        if pending > 0:
            busy = set(live)
        else:
            busy = set()
            for b in batches:
                key = (b.query, b.started)
                if key not in self.placements:
                    k = min(len(live), max(1, math.floor(b.running_slots + 1e-6)), b.tasks_left)
                    self.placements[key] = self.rng.sample(live, k)
                busy.update(self.placements[key])
        current = {(b.query, b.started) for b in batches}
        self.placements = {k: v for k, v in self.placements.items() if k in current}
        for eid in busy:
            if eid in self.last_busy:
                self.last_busy[eid] = sim.now
        for eid in list(self.last_busy):
            if eid not in live:
                del self.last_busy[eid]

    def schedule(self, sim: Simulation, now: float, pending: int, running: int) -> None:
        timed_out = [eid for eid, busy in self.last_busy.items()
                     if now - busy >= self.executor_idle_timeout_s - 1e-9]
        if timed_out:
            self.initializing = False
        if not self.initializing:
            needed = self.max_needed(pending, running)
            if needed < self.target:
                old, self.target = self.target, max(needed, self.min_executors)
                self.num_to_add = 1
                if self.target != old:  # only a changed target is sent
                    # Not a scaling action of its own (Spark logs it at debug level): it only
                    # withdraws launches not started yet.
                    self.request_total(sim, self.target, record=False)
            elif self.add_time is not None and now >= self.add_time - 1e-9:
                self._add(sim, now, needed)
        if timed_out:
            self._remove(sim, sorted(timed_out, key=int))

    def _add(self, sim: Simulation, now: float, needed: int) -> None:
        old = self.target
        if old >= self.max_executors:
            self.num_to_add = 1
            return
        target = max(old, sim.cluster.live_count) + self.num_to_add
        target = min(target, needed)
        target = max(min(target, self.max_executors), self.min_executors)
        delta = target - old
        self.target = target
        if delta == 0:
            self.num_to_add = 1
            return
        self.request_total(sim, target)
        if delta > 0:
            self.num_to_add = self.num_to_add * 2 if delta == self.num_to_add else 1
            self.add_time = now + self.sustained_scheduler_backlog_timeout_s

    def _remove(self, sim: Simulation, timed_out: Sequence[str]) -> None:
        total = sim.cluster.live_count
        chosen = []
        for eid in timed_out:
            if total - 1 < self.min_executors or total - 1 < self.target:
                continue
            chosen.append(eid)
            total -= 1
        if not chosen:
            return
        killed = self.kill(sim, chosen)
        # killExecutors lowers the cluster manager's target; DA sets its own back (SPARK-21834).
        if killed:
            before = self.heading(sim)
            sim.cluster.request_total(self.target)
            self._record(sim, before)
        for eid in killed:
            self.last_busy.pop(eid, None)


@dataclass
class DStreamsAllocation(ClusterModel):
    """The DStreams streaming allocation rule,
    ``org.apache.spark.streaming.scheduler.ExecutorAllocationManager``.

    Every ``scalingInterval`` (a recurring timer from the start) it averages the processing time
    of the batches completed since the last tick; with ``ratio = average / batch interval``:

    * ``ratio >= scalingUpRatio``: ``requestTotalExecutors(max(min(maxExecutors, registered +
      max(round(ratio), 1)), minExecutors))``: one or two executors more per interval, counted
      from the registered ones (launches still pending are not counted);
    * ``ratio <= scalingDownRatio``: if more than ``minExecutors`` are registered, kill one
      executor picked at random (``killExecutor``: ``adjustTargetNumExecutors=true, force=false``,
      so an executor running a task is not killed that round);
    * no batch completed in the interval: nothing.

    Keys (Spark defaults): ``spark.streaming.dynamicAllocation.scalingInterval`` (60s),
    ``scalingUpRatio`` (0.9), ``scalingDownRatio`` (0.3), ``minExecutors`` (max(1, receivers)),
    ``maxExecutors`` (Int.MaxValue). The batch interval is the queries' trigger interval; the
    processing time is a micro-batch's duration (planning included), averaged over all queries.
    """

    batch_interval_s: float = 10.0
    min_executors: int = 1
    max_executors: int = 2**31 - 1
    scaling_interval_s: float = 60.0
    scaling_up_ratio: float = 0.9
    scaling_down_ratio: float = 0.3
    seed: int = 0

    def __post_init__(self) -> None:
        self.next_tick: float | None = None
        self.last_sample: MetricSample | None = None
        self.rng = random.Random(self.seed)

    def __call__(self, sim: Simulation) -> None:
        if self.next_tick is None:
            self.next_tick = sim.now - (sim.now % self.scaling_interval_s) + self.scaling_interval_s
            self.last_sample = sim.sample()
        if sim.now < self.next_tick - 1e-9:
            return
        self.next_tick += self.scaling_interval_s
        sample = sim.sample()
        batches, duration_s = batch_stats(self.last_sample, sample)
        self.last_sample = sample
        if batches > 0:
            self.manage(sim, duration_s / batches / self.batch_interval_s)

    def manage(self, sim: Simulation, ratio: float) -> None:
        registered = sim.cluster.executor_ids()
        if ratio >= self.scaling_up_ratio:
            new = max(math.floor(ratio + 0.5), 1)  # Scala's math.round: half up
            self.request_total(sim, max(min(self.max_executors, len(registered) + new),
                                        self.min_executors))
        elif ratio <= self.scaling_down_ratio and len(registered) > self.min_executors:
            self.kill(sim, [self.rng.choice(registered)])


def busiest_occupancy(before: MetricSample | None, now: MetricSample,
                      trigger_interval_s: float | None = None) -> float | None:
    """The occupancy rule's signal: the busiest query's average batch duration over its trigger
    interval, over the batches completed since ``before``; None without a completed batch (or a
    trigger). ``trigger_interval_s`` stands for the triggers the queries report."""
    worst: float | None = None
    for qid, q in now.queries.items():
        q0 = before.queries.get(qid) if before is not None else None
        n = q.batches - (q0.batches if q0 else 0)
        trigger_s = trigger_interval_s or (q.trigger_interval_ms or 0.0) / 1000.0
        if n <= 0 or trigger_s <= 0:
            continue
        avg = (q.batch_duration_ms - (q0.batch_duration_ms if q0 else 0.0)) / 1000.0 / n
        worst = max(worst or 0.0, avg / trigger_s)
    return worst


def occupancy_target(live: int, occupancy: float, low: float, high: float, min_executors: int,
                     max_executors: int) -> int | None:
    """The rule's new target, ``ceil(live x occupancy)`` within the bounds; None inside the band
    ``[low, high]``."""
    if low <= occupancy <= high:
        return None
    target = math.ceil(live * occupancy - 1e-9)
    return max(min_executors, min(max_executors, target))


@dataclass
class OccupancyRule(ClusterModel):
    """A hand-written rule a user would put beside a query (no Spark class): every ``interval_s``,
    ``occupancy = average batch duration / trigger interval`` over the batches completed since
    (the busiest query's); outside ``[low, high]`` the target becomes
    ``ceil(live executors x occupancy)`` within ``[min_executors, max_executors]``: up with
    ``requestTotalExecutors``, down by killing the newest idle executors
    (``killExecutors(force=false)``) and re-setting the target. No other damping. Its timer runs
    ``phase_s`` after the triggers (a user's thread has no reason to fire as a batch starts, when
    every executor is busy and none could be killed). :class:`OccupancyEvaluator` is the same rule
    as sparkscale's evaluator, for real Spark."""

    trigger_interval_s: float = 10.0
    interval_s: float = 60.0
    phase_s: float = 5.0
    low: float = 0.5
    high: float = 1.0
    min_executors: int = 1
    max_executors: int = 2**31 - 1

    def __post_init__(self) -> None:
        self.next_tick: float | None = None
        self.last_sample: MetricSample | None = None

    def occupancy(self, before: MetricSample | None, now: MetricSample) -> float | None:
        return busiest_occupancy(before, now, self.trigger_interval_s)

    def target_for(self, live: int, occupancy: float) -> int | None:
        return occupancy_target(live, occupancy, self.low, self.high, self.min_executors,
                                self.max_executors)

    def __call__(self, sim: Simulation) -> None:
        if self.next_tick is None:
            self.next_tick = sim.now - (sim.now % self.interval_s) + self.interval_s + self.phase_s
            self.last_sample = sim.sample()
        if sim.now < self.next_tick - 1e-9:
            return
        self.next_tick += self.interval_s
        sample = sim.sample()
        occupancy = self.occupancy(self.last_sample, sample)
        self.last_sample = sample
        if occupancy is None:
            return
        live = sim.cluster.live_count
        target = self.target_for(live, occupancy)
        if target is None or target == live:
            return
        if target > live:
            self.request_total(sim, target)
            return
        idle = [eid for eid, tasks in sim.cluster.running_tasks().items() if tasks == 0]
        newest_first = sorted(idle, key=int, reverse=True)[:live - target]
        self.kill(sim, newest_first)
        before = self.heading(sim)
        sim.cluster.request_total(target)
        self._record(sim, before)


class OccupancyEvaluator(MetricEvaluator):
    """The occupancy rule of :class:`OccupancyRule` as sparkscale's evaluator
    (``spark.sparkscale.evaluator=alternatives.OccupancyEvaluator``), so that it runs on real Spark
    with everything else of sparkscale (its policy's scale-down delay, checkers, realizer) and only
    the sizing differs: every ``evaluator.interval`` the busiest query's occupancy over the batches
    completed since; outside ``[evaluator.low, evaluator.high]`` it recommends
    ``ceil(live executors x occupancy)``, inside it the live executors. Between its evaluations it
    is not ready, so the policy does nothing (a pending scale-down neither continues nor breaks)."""

    options = (
        Option("interval", Duration(at_most=3600.0, positive=True), 60.0, "how often the rule looks"),
        Option("low", Number(0.0, 1.0), 0.5, "occupancy under which it scales down"),
        Option("high", Number(0.0, None, low_open=True), 1.0, "occupancy over which it scales up"),
    )

    def __init__(self, context: PluginContext) -> None:
        o = context.options.read(self.options)
        self.interval_s: float = o["interval"]
        self.low: float = o["low"]
        self.high: float = o["high"]
        self.last: MetricSample | None = None

    def evaluate(self, history: Sequence[MetricSample], context: ScalingContext) -> Evaluation:
        now, current, cfg = history[-1], context.current_target, context.config
        if self.last is None or now.time < self.last.time + self.interval_s:
            self.last = self.last or now
            left = self.last.time + self.interval_s - now.time
            return Evaluation(time=context.now, ready=False, current_executors=current,
                              recommended_executors=current, required_slots=0.0, utilization=None,
                              backlog_mode=False,
                              reason=f"not ready: the occupancy rule looks in {left:.0f} s")
        occupancy = busiest_occupancy(self.last, now)
        self.last = now
        if occupancy is None:
            return Evaluation(time=context.now, ready=False, current_executors=current,
                              recommended_executors=current, required_slots=0.0, utilization=None,
                              backlog_mode=False,
                              reason="not ready: no batch completed since the rule last looked")
        live = now.cluster.live_executors
        target = occupancy_target(live, occupancy, self.low, self.high, cfg.min_executors, cfg.max_executors)
        recommended = live if target is None else target
        headline = (f"occupancy {occupancy:.2f} of the trigger on {live} executors: "
                    + (f"{recommended} executors" if target is not None else "inside the band, hold"))
        return Evaluation(time=context.now, ready=True, current_executors=current,
                          recommended_executors=recommended,
                          required_slots=float(recommended * context.slots_per_executor),
                          utilization=occupancy, backlog_mode=False, reason=headline, headline=headline)
