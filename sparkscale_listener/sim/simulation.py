"""The :class:`Simulation`: one simulated clock that steps the cluster and the queries together,
shares the slots out among the queries' tasks, and runs the real control loop on it every
``interval_s`` (reading it through :class:`SimCollector`)."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from ..check.checker import ScalingChecker
from ..collect.collector import MetricCollector
from ..config.core import AutoscalerConfig
from ..control_loop import wire
from ..decisions import ScalingRecord
from ..evaluator import MetricEvaluator
from ..metrics import ClusterMetrics, MetricSample
from ..observe.events import AutoscalerEvent, EventDispatcher, EventHandler
from ..policy import ScalingPolicy
from ..realize.realizer import ExecutorRealizer, ScalingRealizer
from ..state.store import StateStore
from .cluster import SimCluster
from .query_state import _QueryState
from .results import BatchView, QueryPoint, SimResult, TimelinePoint
from .slots import _fair_share
from .tolerance import EPS
from .workload import SimQuery

FAILED_TASK_S = 1.0  # a task on a bad executor fails after this long (one failure per slot-second)
MIN_SUBSTEP_S = 0.01  # the shortest stretch the slots are shared out for


class SimulationError(RuntimeError):
    """The control loop reported an error (an exception it caught) during a strict simulation."""


class RecordingEventHandler(EventHandler):
    """Keeps every delivered event in memory (``events``), oldest first."""

    def __init__(self) -> None:
        self.events: list[AutoscalerEvent] = []

    def handle(self, event: AutoscalerEvent) -> None:
        self.events.append(event)


class SimCollector(MetricCollector):
    """The collector of a :class:`Simulation`: the simulation's current sample."""

    def __init__(self, simulation: Simulation) -> None:
        self.simulation = simulation

    def collect(self, now: float) -> MetricSample:
        if abs(now - self.simulation.now) > 1e-6:
            raise ValueError(f"collect({now}) called at simulated time {self.simulation.now}")
        return self.simulation.sample()


class Simulation:
    """Queries on a simulated cluster, controlled by the real :class:`Autoscaler`.

    Every ``config.interval_s`` of simulated time the simulation calls ``autoscaler.step()``; the
    autoscaler reads the simulation through :class:`SimCollector` (clock = simulated time, read as
    epoch seconds for excluded periods) and acts on :attr:`cluster` through the realizer. Built from:
    ``evaluator`` / ``policy`` (default :class:`MicroBatchEvaluator` / :class:`ScalingPolicy`),
    ``realizer`` (a :class:`ScalingRealizer`, or a factory called with the :class:`SimCluster`;
    default :class:`ExecutorRealizer`), ``checkers`` (default: ``build_checkers(config)``) in a
    :class:`RollbackGuard`, ``state_store`` (default :class:`InMemoryStateStore`), and an
    :class:`EventDispatcher` throttling on simulated time into a :class:`RecordingEventHandler`
    (``SimResult.events``). ``strict``: raise :class:`SimulationError` when the control loop
    reports an ``error`` event (it never raises itself).

    Fault injection (see :mod:`sparkscale_listener.sim`) starts at ``faults_from`` (default: the
    start; the executors present at the start are never affected). ``heap_used_ratio`` and
    ``gc_fraction`` set the memory gauges the memory checkers read.
    """

    def __init__(self, config: AutoscalerConfig, queries: Sequence[SimQuery], initial_executors: int,
                 provisioning_delay_s: float = 5.0, seed: int = 0, *, cores_per_executor: int = 4,
                 step_s: float = 1.0, start_time: float = 0.0, kill_delay_s: float = 0.0,
                 evaluator: MetricEvaluator | None = None, policy: ScalingPolicy | None = None,
                 realizer: ScalingRealizer | Callable[[SimCluster], ScalingRealizer] | None = None,
                 checkers: Sequence[ScalingChecker] | None = None,
                 state_store: StateStore | None = None, app_name: str = "sim", strict: bool = True,
                 fail_tasks_on_new_executors: bool = False, slow_new_executors: float | None = None,
                 executor_start_failure: bool = False,
                 executor_start_failure_reason: str | None = None, faults_from: float | None = None,
                 heap_used_ratio: float | None = 0.5, gc_fraction: float = 0.02,
                 run_id: str | None = None, launch_commit_s: float | None = None,
                 on_step: Callable[[Simulation], None] | None = None) -> None:
        if step_s <= 0 or step_s > config.interval_s:
            raise ValueError(f"step_s={step_s} must be in (0, interval_s={config.interval_s}]")
        self.config = config
        self.queries = list(queries)
        self.cores = cores_per_executor
        self.step_s = step_s
        self.strict = strict
        self.gc_fraction = gc_fraction
        t0 = start_time if faults_from is None else faults_from
        self.cluster = SimCluster(
            cores_per_executor, provisioning_delay_s, initial_executors, now=start_time,
            kill_delay_s=kill_delay_s, bad_executors_from=t0 if fail_tasks_on_new_executors else None,
            start_failure_from=t0 if executor_start_failure else None,
            start_failure_reason=executor_start_failure_reason, heap_used_ratio=heap_used_ratio,
            launch_commit_s=launch_commit_s,
            slow_executors_from=t0 if slow_new_executors is not None else None,
            slow_speed=slow_new_executors if slow_new_executors is not None else 1.0)
        self.on_step = on_step
        self.now = start_time
        if realizer is None:
            self.realizer: ScalingRealizer = ExecutorRealizer(self.cluster, config.min_executors,
                                                              decommission=config.decommission)
        elif isinstance(realizer, ScalingRealizer):
            self.realizer = realizer
        else:
            self.realizer = realizer(self.cluster)
        self.recorder = RecordingEventHandler()
        self.events = EventDispatcher([self.recorder], throttle_s=config.event_throttle_s,
                                      clock=lambda: self.now)
        self.autoscaler = wire(config, SimCollector(self), self.realizer, self.events, app_name,
                               evaluator=evaluator, policy=policy, checkers=checkers, state_store=state_store,
                               clock=lambda: self.now, run_id=run_id)
        self.evaluator, self.policy, self.guard = (self.autoscaler.evaluator, self.autoscaler.policy,
                                                   self.autoscaler.guard)
        self._states = [_QueryState(q, random.Random(f"{seed}:{i}:{q.name}"), start_time,
                                    cores_per_executor)
                        for i, q in enumerate(self.queries)]
        self._slot_ms = 0.0
        self._next_tick = start_time + config.interval_s
        self._tick_slot_s = 0.0
        self._last_scaling: ScalingRecord | None = None
        self.result = SimResult([], [], [], cores_per_executor, events=self.recorder.events)

    @property
    def target(self) -> int:
        """The autoscaler's executor target (before its baseline: the cluster manager's)."""
        status = self.autoscaler.status(brief=True)
        if status["initial_executors"] is None:
            return self.cluster.effective_target
        return int(status["target_executors"])

    def run(self, duration_s: float) -> SimResult:
        """Advance ``duration_s`` simulated seconds (may be called again to continue)."""
        end = self.now + duration_s
        while self.now < end - EPS:
            dt = min(self.step_s, end - self.now, self._next_tick - self.now)
            self._step(dt)
            if self.on_step is not None:
                self.on_step(self)
            if self.now >= self._next_tick - EPS:
                self._tick()
                self._next_tick += self.config.interval_s
        return self.result

    def _step(self, dt: float) -> None:
        """Advance ``dt``, sharing the slots out again at every change of a batch's phase (see
        :meth:`_QueryState.next_event`): slots held through a step by a batch that ends or is
        still on the driver would be idle while other queries' tasks wait."""
        end = self.now + dt
        while self.now < end - EPS:
            self._substep(end)

    def _substep(self, end: float) -> None:
        t = self.now
        self.cluster.advance(t)
        live = self.cluster.live_count
        slots = self.cluster.slots
        for s in self._states:
            s.check_executors(t, live)
            s.arrive(t)
            s.live_executors = live
            s.begin(t)  # a batch due now holds slots from now on if it has no driver part
        demand = {s.q.name: float(min(s.q.partitions, slots)) if s.wants_slots() else 0.0
                  for s in self._states}
        alloc = _fair_share(demand, slots)
        total = sum(alloc.values())
        # Tasks placed on bad executors fail and do no useful work: every query loses that share,
        # and fails one attempt per slot-second its tasks spend there.
        placement = self.cluster.place_tasks(total)
        on_bad = self.cluster.tasks_on_bad(placement)
        useful = max(0.0, 1.0 - on_bad / total) if total > EPS else 1.0
        speed = self.cluster.speed(placement)  # slow executors make every task slower on average
        progress = {s.q.name: s.parallelism(alloc[s.q.name]) * useful * speed for s in self._states}
        # Up to the next change of any batch's phase (at least MIN_SUBSTEP_S: a step of a few
        # hundredths of a second at most is lost to a change that comes sooner).
        dt = min(end - t, max(MIN_SUBSTEP_S, min(s.next_event(t, progress[s.q.name]) for s in self._states)))
        failed = 0.0
        running = 0.0
        for s in self._states:
            a = s.parallelism(alloc[s.q.name])
            busy = s.advance(t, dt, progress[s.q.name])
            if on_bad and a > 0:
                # Slot-seconds in the task phase at the full allocation, on the bad share.
                task_s = (busy / (a * useful * speed) if useful * speed > EPS
                          else (dt if s.batch is not None else 0.0))
                lost = a * (on_bad / total) * task_s / FAILED_TASK_S
                s.tasks_failed += lost
                failed += lost
            running += s.running_slots
        if failed > 0:
            self.cluster.fail_tasks(placement, failed)
        self.cluster.set_running(running)
        self._slot_ms += slots * dt * 1000.0
        self._tick_slot_s += slots * dt
        self.now = t + dt
        self.cluster.advance(self.now)

    def running_batches(self) -> list[BatchView]:
        """The batches whose tasks are running now, one per query at most."""
        views = (s.batch_view() for s in self._states if s.active)
        return [v for v in views if v is not None]

    def sample(self) -> MetricSample:
        """What a collector would see now."""
        queries = {s.q.name: s.metrics(self.now) for s in self._states}
        busy = sum(s.busy_ms for s in self._states)
        run_ms = sum(s.batch_busy_ms for s in self._states)  # task time of finished tasks
        cluster = ClusterMetrics(
            live_executors=self.cluster.listed_count, cores_per_executor=self.cores,
            executors=self.cluster.infos(), slot_ms=self._slot_ms, busy_ms=busy,
            tasks_finished=sum(s.tasks_finished for s in self._states),
            tasks_failed=self.cluster.tasks_failed,
            executors_added=self.cluster.executors_added,
            executors_removed=self.cluster.executors_removed,
            gc_ms=self.gc_fraction * run_ms, run_ms=run_ms,
            heap_used_ratio=self.cluster.heap_used_ratio if self.cluster.live_count else None)
        return MetricSample(time=self.now, cluster=cluster, queries=queries)

    def _tick(self) -> None:
        seen = len(self.recorder.events)
        decisions = self.autoscaler.step()
        if self.strict:
            errors = [e for e in self.recorder.events[seen:] if e.kind == "error"]
            if errors:
                raise SimulationError(f"t={self.now:g}s: the control loop reported: {errors[0].reason}")
        status = self.autoscaler.status(brief=True)
        scaling = self.autoscaler.executor.targets.last_scaling
        if scaling is not None and scaling is not self._last_scaling:
            self.result.records.append(scaling)
        self._last_scaling = scaling
        for decision in decisions:
            if decision.applied:
                self.result.actions.append(decision)
            self.result.decisions.append(decision)
        target = (self.cluster.effective_target if status["initial_executors"] is None
                  else int(status["target_executors"]))
        self._record_point(target)

    def _record_point(self, target: int) -> None:
        slot_s = self._tick_slot_s
        points = {}
        for s in self._states:
            points[s.q.name] = QueryPoint(
                load=s.arrival_rate, backlog=s.source, reported_backlog=s.reported_backlog,
                processed_rate=s.tick_rows / self.config.interval_s,
                utilization=s.tick_busy / slot_s if slot_s > 0 else 0.0,
                slots_used_max=s.tick_slots_max, active=s.active, lag_s=s.lag(self.now))
            s.tick_rows = s.tick_busy = s.tick_slots_max = 0.0
        self._tick_slot_s = 0.0
        self.result.timeline.append(TimelinePoint(
            t=self.now, executors=self.cluster.live_count, target=target,
            pending=self.cluster.pending_count, slots=self.cluster.slots, queries=points))
