"""A fluid simulator of micro-batch streaming queries on a pool of executors.

It drives the real control loop (:class:`~sparkscale_listener.control_loop.Autoscaler`: collector,
checkers and rollback guard, evaluator, policy, realizer, events, state store) with simulated time
(a day runs in seconds), so scaling and rollback behaviour can be tested against load traces and
injected faults: steps, noise, backlogs, partition caps, limits, failing executors and queries.

Model, per query: rows arrive at ``load(t)`` (times a noise factor held for ``noise_period_s``)
into the source. A batch starts at the trigger (at once for the default trigger), reads
``min(available, read limit)`` rows, spends ``batch_overhead_s`` on the driver, then runs
``rows x cost_per_row`` slot-seconds of tasks on ``min(its share of the slots, partitions)``
slots. Concurrent queries share the slots max-min fairly; the scheduler fills executors oldest
first. Metrics are produced the way the Spark collector produces them: cumulative counters updated
when a batch completes, the backlog gauge as planned by the latest completed batch
(``latestOffset - endOffset``), busy time including running tasks, executors with their add and
remove times and reasons (``Executor killed by driver.`` for the autoscaler's kills).

Optionally (``SimQuery.task_overhead_s`` / ``executor_overhead_s``) each batch also pays a fixed
task time per task and per executor its tasks land on, whatever its rows: small batches then cost
far more per row than big ones, as on real Spark.

Executors come from :class:`SimCluster`, a :class:`ClusterBackend` with a provisioning delay and
Spark's target semantics (lowering the target kills nothing; a kill lowers the target by one per
executor; the first kill without any request sets the target to 0). A lower target cancels
launches still pending, or, with ``launch_commit_s``, only those requested less than that long
ago (a YARN container once allocated starts whatever the target does).

Why one module of ~1000 lines: the cluster, the queries' batches and the loop that steps them share
one simulated clock and each other's state (the scheduler places batches' tasks on the cluster's
executors, and fault injection acts on both); apart, each would reach into the others. It is test
support, outside the pipeline's packages.

Policies other than the control loop can act on the cluster at their own pace through
``Simulation(on_step=...)`` (called after every step) and :meth:`Simulation.running_batches`.

Fault injection (for the checkers and the rollback guard), each from ``faults_from`` on:

* ``fail_tasks_on_new_executors``: executors launched after ``faults_from`` are bad; every task
  placed on them fails (about one failed attempt per slot-second) and does no useful work. Their
  tasks fail fast, so they look idle when sampled.
* ``executor_start_failure``: executors launched after ``faults_from`` never register, or, with
  ``executor_start_failure_reason``, die right after registering with that reason (the cluster
  manager then launches replacements, which die too).
* ``SimQuery.query_fails_below_executors=n``: the query terminates with an exception as soon as
  fewer than ``n`` executors are live (and stays terminated).
* ``slow_new_executors=f``: executors launched after ``faults_from`` run tasks at ``f`` of the
  speed of the others (a bad host, a throttled container): a scale-up onto them does not deliver
  what the model predicts.

Why one module of ~1000 lines: the simulated cluster, queries, scheduler, source and clock are one model of
time that advances together; it is a test tool, not part of the autoscaler's path.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from .check.checker import ScalingChecker
from .check.guard import RollbackGuard
from .check.loading import build_checkers
from .collect.collector import MetricCollector
from .config.core import AutoscalerConfig
from .control_loop import Autoscaler
from .decisions import Decision, ScalingRecord
from .evaluator import MetricEvaluator, MicroBatchEvaluator
from .metrics import (
    BatchRecord,
    ClusterMetrics,
    ExecutorInfo,
    InFlightBatch,
    LatestOffsets,
    MetricSample,
    QueryMetrics,
)
from .observe.events import AutoscalerEvent, EventDispatcher, EventHandler
from .policy import ScalingPolicy
from .realize.realizer import ClusterBackend, ExecutorRealizer, ScalingRealizer
from .state.store import InMemoryStateStore, StateStore

_EPS = 1e-9
RECENT_BATCHES = 64  # completed batches a query's metrics carry, as the collector keeps them
IDLE_POLL_S = 1.0  # how often a query with the default trigger looks for new data when idle
FAILED_TASK_S = 1.0  # a task on a bad executor fails after this long (one failure per slot-second)
MIN_SUBSTEP_S = 0.01  # the shortest stretch the slots are shared out for
KILLED_BY_DRIVER = "Executor killed by driver."  # Spark's removal reason for killExecutors
DECOMMISSIONED = "Executor decommission: scale down"  # ... and for decommissionExecutors


@dataclass
class SimQuery:
    """One simulated streaming query."""

    name: str
    load: Callable[[float], float]  # arrival rate, rows/s, at simulated time t
    cost_per_row: float  # executor slot-seconds per row
    batch_overhead_s: float = 0.5  # driver time per batch (planning, commit): no slots shrink it
    partitions: int = 64  # max parallel tasks of its widest stage
    trigger_interval_s: float | None = None  # None: the next batch starts when the last one ends
    max_rows_per_batch: float | None = None  # the source's read limit (ReadMaxRows)
    noise: float = 0.0  # arrivals are multiplied by uniform(1 - noise, 1 + noise)
    noise_period_s: float = 10.0  # how long one noise factor holds
    initial_backlog: float = 0.0  # rows waiting in the source at t = start
    reports_backlog: bool = True  # False: like the `rate` source (backlog None)
    # Fixed task time a batch pays whatever its rows (0: none, the original model). Every one of
    # its ``partitions`` tasks pays ``task_overhead_s`` slot-seconds (scheduling, deserializing,
    # the sink's file per task), and every executor its tasks land on, min(live executors,
    # ceil(partitions / cores)), pays ``executor_overhead_s`` (a Python worker, a connection), so a
    # batch spread over more executors costs more in total. Counted in the query's task time.
    task_overhead_s: float = 0.0
    executor_overhead_s: float = 0.0
    # Fault injection: the query terminates with an exception when fewer executors are live.
    query_fails_below_executors: int | None = None
    # Tasks run in waves, as Spark schedules them: T equal tasks on P slots take ceil(T / P)
    # rounds, so 5 slots finish 8 tasks no sooner than 4 do. False: a fluid model (any share of
    # a slot is used).
    waves: bool = True
    # Extra task time (slot-seconds) a batch pays per executor that runs its first task of the
    # query in it: new executors' first batch is slow (Python workers starting, classes loading).
    new_executor_warmup_s: float = 0.0
    # Opt-in, for replaying a recorded query (sparkscale_listener.replay). ``efficiency`` > 1
    # stretches every task phase by that factor at the same task time (skewed tasks and stragglers
    # leave slots idle: the model's BatchCost.efficiency). ``batch_work(t, n, rows, work)``: the
    # task time the query's batch number ``n`` (from 0) of ``rows`` rows, starting at ``t``, pays
    # instead of the modelled ``work`` (a recorded query's cold start, its costlier stretches).
    efficiency: float = 1.0
    batch_work: Callable[[float, int, float, float], float] | None = None
    # Its first trigger runs a batch even with nothing to read, as Spark's first batch of a source
    # that starts from its latest offsets does (a replayed query whose first batch read no rows).
    empty_first_batch: bool = False
    # Its source's latest offsets are read between batches, as sparkscale's bridge reads a Kafka
    # source's (every row that arrived, at each sample).
    latest_offsets: bool = False
    # Rows come in files of this many (a file source): a batch reads whole files only, and none
    # until a file is complete. None: rows one by one.
    rows_per_file: float | None = None
    # Each batch's driver time is scaled by uniform(1 - jitter, 1 + jitter): planning and commits
    # vary from batch to batch on a real driver. 0: every batch's the same.
    batch_jitter: float = 0.0


@dataclass(frozen=True)
class BatchView:
    """A batch whose tasks are running (its driver-side planning done), for policies that size on
    tasks the way Spark's own dynamic allocation does."""

    query: str
    started: float  # when the batch started (planning included)
    tasks: int  # tasks of its stage (the query's partitions)
    tasks_left: int  # not finished yet: running or pending (the fluid work left, in tasks)
    running_slots: float  # slots its tasks hold now


@dataclass(frozen=True)
class QueryPoint:
    load: float  # arrival rate (noise included) at the tick, rows/s
    backlog: float  # ground truth: rows arrived and not yet read by a batch
    reported_backlog: float | None  # what the query's progress reported
    processed_rate: float  # rows/s of batches completed since the previous tick
    utilization: float  # the query's task time / cluster slot time since the previous tick
    slots_used_max: float  # most slots its tasks held at once since the previous tick
    active: bool = True  # False once the query terminated
    # Ground truth: the age of the oldest row that arrived and no completed batch has read yet
    # (rows waiting in the source and rows of the batch running), seconds.
    lag_s: float = 0.0


@dataclass(frozen=True)
class TimelinePoint:
    t: float
    executors: int  # live
    target: int  # the autoscaler's target (before its baseline: the cluster manager's)
    pending: int  # requested, not registered
    slots: int
    queries: dict[str, QueryPoint]


@dataclass
class SimResult:
    timeline: list[TimelinePoint]
    # Every decision once the baseline is set, as Autoscaler.decisions() has them (unbounded): one
    # per control tick, plus each rollback just before the "paused" decision of its tick.
    decisions: list[Decision]
    actions: list[Decision]  # applied changes of the target: scale_up / scale_down / rollback
    cores_per_executor: int
    records: list[ScalingRecord] = field(default_factory=list)  # the autoscaler's ScalingRecords
    events: list[AutoscalerEvent] = field(default_factory=list)  # every event delivered

    @property
    def final_executors(self) -> int:
        return self.timeline[-1].executors if self.timeline else 0

    def executors_at(self, t: float) -> int:
        """Live executors at the last tick at or before ``t``."""
        point = None
        for p in self.timeline:
            if p.t > t + _EPS:
                break
            point = p
        return point.executors if point else 0

    def actions_between(self, t0: float, t1: float) -> list[Decision]:
        return [a for a in self.actions if t0 <= a.time < t1]

    def events_of(self, *kinds: str) -> list[AutoscalerEvent]:
        """Delivered events of these kinds (``"rollback"``, ``"pause"``, ``"stopped"`` ...)."""
        return [e for e in self.events if e.kind in kinds]

    @property
    def rollbacks(self) -> list[Decision]:
        return [a for a in self.actions if a.action == "rollback"]


def loads_at(queries: Sequence[SimQuery], t: float) -> dict[str, float]:
    """Each query's (noise-free) arrival rate at time ``t``."""
    return {q.name: q.load(t) for q in queries}


def smallest_sufficient_executors(queries: Sequence[SimQuery], load: Mapping[str, float],
                                  cores_per_executor: int, utilization_target: float,
                                  max_executors: int = 1000,
                                  backlog_threshold_s: float | None = None) -> int:
    """The oracle: the fewest executors on which the steady, noise-free ``load`` (rows/s per query
    name) keeps within ``utilization_target``, as the simulator runs it. A query with a trigger
    reads a trigger interval's rows per batch; its batch (the driver part, then its task time on
    the slots it gets, in waves) must take at most the target share of the interval, the batches
    of queries with one trigger interval starting together and sharing the slots
    (:func:`aligned_batch_times`). A query without one runs batch after batch: the share of its
    tasks' slots its rows keep busy must stay at most the target.

    With ``backlog_threshold_s`` (the lag a user accepts), a query without a trigger or with one
    shorter than half of it is sized on its lag instead, as sparkscale sizes it: batches may run
    back to back, a row waiting at most two batch periods. Alone on the slots (at most its
    partitions, in waves), a batch of half the threshold's arrivals over the target must end within
    half of it (the lag within the threshold at the headroom's load), and where a quarter of it is
    longer than the trigger, a batch of a quarter's arrivals within a quarter (the lag within half
    of it at the load); batches of its read limit, back to back, must do the arrivals over the
    target where a period's rows exceed the limit; and all queries' task time must fit in the
    slots. Where no size keeps it within the target, a slot per partition does."""
    half = backlog_threshold_s / 2.0 if backlog_threshold_s else None

    def period_of(q: SimQuery) -> float | None:
        """The longest batch period a query sized on its lag may run at, at the headroom's load;
        None for one sized on its trigger."""
        if half is None or (q.trigger_interval_s or 0.0) >= half:
            return None
        return half

    def fresh_of(q: SimQuery) -> float | None:
        """... and at the load itself, where that is longer than its trigger."""
        quarter = half / 2.0 if half else None
        return quarter if quarter and (q.trigger_interval_s or 0.0) < quarter else None

    def fits(executors: int) -> bool:
        slots = executors * cores_per_executor
        used_by = {q.name: min(executors, math.ceil(q.partitions / cores_per_executor)) for q in queries}
        fixed_of = {q.name: q.partitions * q.task_overhead_s + used_by[q.name] * q.executor_overhead_s
                    for q in queries}
        on_trigger = [q for q in queries if period_of(q) is None]
        triggers = {q.trigger_interval_s for q in on_trigger if q.trigger_interval_s and load[q.name] > 0}
        for trigger in triggers:
            group = [q for q in on_trigger if q.trigger_interval_s == trigger]
            times = aligned_batch_times(group, load, executors, cores_per_executor)
            if any(time_s > utilization_target * trigger + 1e-9 for time_s in times.values()):
                return False
        free = [q for q in on_trigger if not q.trigger_interval_s and load[q.name] > 0]
        for q in free:
            usable = _waves_parallelism(q, min(float(q.partitions), float(slots) / len(free)))
            if load[q.name] * q.cost_per_row > utilization_target * usable + 1e-9:
                return False
        # All of them together: their task time must leave the slots that much idle.
        busy = sum(load[q.name] * q.cost_per_row for q in queries)
        for q in queries:
            period = period_of(q) or q.trigger_interval_s
            if load[q.name] <= 0:
                continue
            if period:
                busy += fixed_of[q.name] / period
            lagged = period_of(q)
            if lagged is not None and executors < math.ceil(q.partitions / cores_per_executor):
                # (Past a slot per partition no executor shortens its batches: where none of these
                # sizes keeps it within the target, it needs what its partitions can use.)
                parallel = _waves_parallelism(q, float(slots))
                fresh = fresh_of(q)
                periods = [(load[q.name] / utilization_target, lagged)]
                periods += [(load[q.name], fresh)] if fresh is not None else []
                for rate, period in periods:
                    rows = rate * period
                    limit = q.max_rows_per_batch
                    if limit is not None and rows > limit:
                        # Batches of the limit back to back must do these arrivals.
                        batch = q.batch_overhead_s + (limit * q.cost_per_row + fixed_of[q.name]) / parallel
                        if rate * batch > limit + 1e-9:
                            return False
                        rows = limit
                    work = rows * q.cost_per_row + fixed_of[q.name]
                    if q.batch_overhead_s + work / parallel > period + 1e-9:
                        return False
        return busy <= utilization_target * slots + 1e-9

    for executors in range(1, max_executors + 1):
        if fits(executors):
            return executors
    return max_executors


def aligned_batch_times(queries: Sequence[SimQuery], load: Mapping[str, float], executors: int,
                        cores_per_executor: int) -> dict[str, float]:
    """How long each query's batch takes when all of them start together (Spark aligns
    processing-time triggers to multiples of the interval, so queries with one trigger start their
    batches at the same instant) on ``executors`` executors, for the steady ``load``: the driver
    part first, then the tasks, the slots shared max-min fairly and used in waves, as the
    simulator runs them."""
    slots = float(executors * cores_per_executor)
    left: dict[str, float] = {}
    ready: dict[str, float] = {}
    done: dict[str, float] = {}
    by_name = {q.name: q for q in queries}
    for q in queries:
        rate = load[q.name]
        if rate <= 0 or not q.trigger_interval_s:
            continue
        used = min(executors, math.ceil(q.partitions / cores_per_executor))
        left[q.name] = (rate * q.trigger_interval_s * q.cost_per_row + q.partitions * q.task_overhead_s
                        + used * q.executor_overhead_s)
        ready[q.name] = q.batch_overhead_s
    now = 0.0
    while left:
        running = [n for n in left if ready[n] <= now + 1e-12]
        if not running:
            now = min(ready[n] for n in left)
            continue
        share = _fair_share({n: min(float(by_name[n].partitions), slots) for n in running}, slots)
        speed = {n: _waves_parallelism(by_name[n], share[n]) for n in running}
        waits = [left[n] / speed[n] for n in running if speed[n] > 0]
        later = [ready[n] - now for n in left if ready[n] > now + 1e-12]
        step = min(waits + later)
        for n in running:
            left[n] -= speed[n] * step
        now += step
        for n in [n for n in running if left[n] <= 1e-9]:
            done[n] = now
            del left[n]
    return done


def _waves_parallelism(q: SimQuery, slots: float) -> float:
    """Slots' worth of progress a query's tasks make on ``slots`` slots (see
    ``_QueryState.parallelism``)."""
    usable = min(float(q.partitions), slots)
    if not q.waves or usable < 1.0:
        return usable
    return q.partitions / math.ceil(q.partitions / math.floor(usable + _EPS))


def step_load(before: float, after: float, at: float) -> Callable[[float], float]:
    """A load trace that jumps from ``before`` to ``after`` rows/s at time ``at``."""
    return lambda t: before if t < at else after


# --------------------------------------------------------------------------------------------
# The cluster


@dataclass
class _Executor:
    executor_id: str
    added_time: float
    requested_time: float
    running_tasks: int = 0
    removed_time: float | None = None
    removed_reason: str | None = None
    bad: bool = False  # every task placed on it fails
    speed: float = 1.0  # how fast it runs tasks, relative to a healthy executor
    failed: float = 0.0  # failed task attempts (fractional: the fluid model)


class SimCluster(ClusterBackend):
    """Executors of a simulated cluster manager (standalone-like semantics, see module docstring).

    Fault injection: launches requested at or after ``bad_executors_from`` yield executors on
    which every task fails; launches requested at or after ``start_failure_from`` never register
    (``start_failure_reason`` None) or register and die at once with that reason. The executors
    present at construction are never affected.
    """

    def __init__(self, cores_per_executor: int, provisioning_delay_s: float, initial_executors: int,
                 now: float = 0.0, kill_delay_s: float = 0.0, *,
                 bad_executors_from: float | None = None, start_failure_from: float | None = None,
                 start_failure_reason: str | None = None,
                 heap_used_ratio: float | None = None, launch_commit_s: float | None = None,
                 slow_executors_from: float | None = None, slow_speed: float = 1.0) -> None:
        self.cores_per_executor = cores_per_executor
        self.slow_executors_from = slow_executors_from
        self.slow_speed = slow_speed
        self.launch_commit_s = launch_commit_s
        self.provisioning_delay_s = provisioning_delay_s
        self.kill_delay_s = kill_delay_s
        self.bad_executors_from = bad_executors_from
        self.start_failure_from = start_failure_from
        self.start_failure_reason = start_failure_reason
        self.heap_used_ratio = heap_used_ratio
        self.now = now
        self.target: int | None = None  # the cluster manager's target; None: nothing requested
        self._initial = initial_executors
        self._next_id = 0
        self._live: dict[str, _Executor] = {}
        self._removing: dict[str, float] = {}  # killed, gone at this time
        self._removal_reason: dict[str, str] = {}
        self._removed: list[_Executor] = []
        self._pending: list[float] = []  # request time of each launch under way
        self.provisioning_observed: list[float] = []  # request -> registered, seconds
        self.executors_added = 0
        self.executors_removed = 0
        self._failed_removed = 0.0  # failed task attempts on executors that are gone
        self._order: list[_Executor] | None = None
        for _ in range(initial_executors):
            self._register(now, now, initial=True)

    # -- ClusterBackend ---------------------------------------------------------------------------

    def executor_ids(self) -> list[str]:
        return list(self._live)

    def running_tasks(self) -> dict[str, int]:
        return {eid: e.running_tasks for eid, e in self._live.items()}

    def request_total(self, total: int) -> bool:
        self.target = max(0, int(total))
        self._reconcile()
        return True

    def kill(self, executor_ids: Sequence[str], force: bool = False) -> list[str]:
        # Like Spark's killExecutors(force=false): the scheduler skips an executor running tasks.
        ids = [e for e in executor_ids
               if force or (e in self._live and self._live[e].running_tasks == 0)]
        return self._kill(ids, KILLED_BY_DRIVER)

    def decommission(self, executor_ids: Sequence[str]) -> list[str]:
        return self._kill(executor_ids, DECOMMISSIONED)

    def _kill(self, executor_ids: Sequence[str], reason: str) -> list[str]:
        killed = [eid for eid in executor_ids if eid in self._live and eid not in self._removing]
        self._order = None
        for eid in killed:
            self._removing[eid] = self.now + self.kill_delay_s
            self._removal_reason[eid] = reason
            self._live[eid].running_tasks = 0  # its tasks are lost and re-run elsewhere
        # Spark lowers the target by one per killed executor; with no target ever requested the
        # first kill leaves the limit at 0 (the empty-target trap).
        self.target = 0 if self.target is None else max(0, self.target - len(killed))
        self._reconcile()
        self.advance(self.now)
        return killed

    # -- simulation -------------------------------------------------------------------------------

    @property
    def live_count(self) -> int:
        """Executors that run tasks (killed ones stop at once, even while still listed)."""
        return len(self._live) - len(self._removing)

    @property
    def listed_count(self) -> int:
        """Executors Spark's listener still lists: a killed one until its removal is announced."""
        return len(self._live)

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    @property
    def slots(self) -> int:
        return self.live_count * self.cores_per_executor

    @property
    def effective_target(self) -> int:
        """The target the cluster manager works towards (its initial count before any request)."""
        return self._initial if self.target is None else self.target

    @property
    def tasks_failed(self) -> int:
        return int(self._failed_removed + sum(e.failed for e in self._live.values()) + _EPS)

    def advance(self, now: float) -> None:
        """Register launches whose delay has passed and drop killed executors that are gone."""
        self.now = now
        ready = [r for r in self._pending if r + self.provisioning_delay_s <= now + _EPS
                 and not (self._start_fails(r) and self.start_failure_reason is None)]
        for r in ready:
            self._pending.remove(r)
            at = r + self.provisioning_delay_s
            eid = self._register(at, r)
            if self._start_fails(r):  # registers, then dies at once
                self._remove(eid, at, str(self.start_failure_reason))
                self._reconcile()  # the cluster manager launches a replacement
        for eid, gone in list(self._removing.items()):
            if gone <= now + _EPS:
                del self._removing[eid]
                self._remove(eid, gone, self._removal_reason.pop(eid, KILLED_BY_DRIVER))

    def lose(self, executor_id: str, reason: str = "lost") -> None:
        """An executor dies (not asked for): the cluster manager replaces it up to its target."""
        self._removing.pop(executor_id, None)
        self._removal_reason.pop(executor_id, None)
        self._remove(executor_id, self.now, reason)
        self._reconcile()

    def place_tasks(self, tasks: float) -> dict[str, int]:
        """Where ``ceil(tasks)`` tasks run: the live executors filled oldest first (the newest stay
        idle). Returns the tasks per executor id."""
        left = math.ceil(tasks - _EPS)
        placed: dict[str, int] = {}
        for e in self._scheduling_order():
            n = min(self.cores_per_executor, max(0, left))
            left -= n
            placed[e.executor_id] = n
        return placed

    def speed(self, placement: Mapping[str, int]) -> float:
        """The average speed of the slots these tasks were placed on."""
        placed = [(n, self._live[eid].speed) for eid, n in placement.items() if n > 0 and eid in self._live]
        total = sum(n for n, _ in placed)
        return sum(n * s for n, s in placed) / total if total > 0 else 1.0

    def tasks_on_bad(self, placement: Mapping[str, int]) -> int:
        return sum(n for eid, n in placement.items() if eid in self._live and self._live[eid].bad)

    def fail_tasks(self, placement: Mapping[str, int], failed: float) -> None:
        """Record ``failed`` task attempts on the bad executors of ``placement``, in proportion
        to the tasks placed on each."""
        bad = {eid: n for eid, n in placement.items()
               if n > 0 and eid in self._live and self._live[eid].bad}
        total = sum(bad.values())
        for eid, n in bad.items():
            self._live[eid].failed += failed * n / total

    def set_running(self, tasks: float) -> None:
        """The tasks running at this instant, spread oldest first. Bad executors are reported
        idle: their tasks fail within moments of starting."""
        placement = self.place_tasks(tasks)
        for e in self._live.values():
            e.running_tasks = 0 if e.bad else placement.get(e.executor_id, 0)

    def _scheduling_order(self) -> list[_Executor]:
        if self._order is None:  # cached: changes only when executors come, go or are killed
            self._order = sorted((e for e in self._live.values() if e.executor_id not in self._removing),
                                 key=lambda e: (e.added_time, int(e.executor_id)))
        return self._order

    def infos(self) -> tuple[ExecutorInfo, ...]:
        """The executors as the listener lists them: a killed one stays until its removal."""
        live = [ExecutorInfo(e.executor_id, host="sim", cores=self.cores_per_executor,
                             running_tasks=e.running_tasks, added_time=e.added_time,
                             tasks_failed=int(e.failed + _EPS), heap_used_ratio=self.heap_used_ratio)
                for e in self._live.values()]
        gone = [ExecutorInfo(e.executor_id, host="sim", cores=self.cores_per_executor,
                             added_time=e.added_time, removed_time=e.removed_time,
                             removed_reason=e.removed_reason, tasks_failed=int(e.failed + _EPS))
                for e in self._removed[-20:]]
        return tuple(live + gone)

    def _start_fails(self, requested: float) -> bool:
        return self.start_failure_from is not None and requested >= self.start_failure_from - _EPS

    def _register(self, at: float, requested: float, initial: bool = False) -> str:
        self._next_id += 1
        eid = str(self._next_id)
        bad = (not initial and self.bad_executors_from is not None
               and requested >= self.bad_executors_from - _EPS)
        slow = (not initial and self.slow_executors_from is not None
                and requested >= self.slow_executors_from - _EPS)
        self._live[eid] = _Executor(eid, at, requested, bad=bad, speed=self.slow_speed if slow else 1.0)
        self._order = None
        self.executors_added += 1
        if at > requested:
            self.provisioning_observed.append(at - requested)
        return eid

    def _remove(self, executor_id: str, at: float, reason: str) -> None:
        e = self._live.pop(executor_id)
        self._order = None
        e.removed_time, e.removed_reason, e.running_tasks = at, reason, 0
        self._removed.append(e)
        self._removed = self._removed[-100:]
        self._failed_removed += e.failed
        self.executors_removed += 1

    def _reconcile(self) -> None:
        limit = self.effective_target
        have = self.live_count + len(self._pending)
        if have < limit:
            self._pending.extend([self.now] * (limit - have))
        elif have > limit and self._pending:
            # Cancel launches not needed any more; running executors are never touched, nor
            # launches past launch_commit_s.
            keep = max(0, limit - self.live_count)
            if self.launch_commit_s is None:
                self._pending = self._pending[:keep]
            else:
                committed = [r for r in self._pending if self.now - r >= self.launch_commit_s - _EPS]
                cancellable = [r for r in self._pending if self.now - r < self.launch_commit_s - _EPS]
                self._pending = committed + cancellable[:max(0, keep - len(committed))]


# --------------------------------------------------------------------------------------------
# The queries


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
        if q.noise > 0 and t >= self.noise_until - _EPS:
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
        return self.active and b is not None and b.overhead_left <= _EPS and b.work_left > 1e-7

    def next_event(self, now: float, progress: float) -> float:
        """Seconds until its batch changes phase at ``progress`` slot-seconds per second (its
        driver part ends, its tasks end, its next trigger comes): the slots are shared out again
        then."""
        if not self.active:
            return math.inf
        b = self.batch
        if b is None:
            due = self.next_start - now
            return due if due > _EPS else self.q.batch_overhead_s
        if b.overhead_left > _EPS:
            return b.overhead_left
        return b.work_left / progress if progress > _EPS else math.inf

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
        while now < end - _EPS:
            if self.batch is None:
                if now < self.next_start - _EPS:
                    now = min(end, self.next_start)
                    continue
                self.source += self.arrival_rate * (now - accrued)
                accrued = now
                self.begin(now)
                continue
            b = self.batch
            if b.overhead_left > _EPS:
                use = min(b.overhead_left, end - now)
                b.overhead_left -= use
                now += use
                continue
            if b.tasks_started is None:
                b.tasks_started = now
            if b.work_left <= 1e-7:  # no task time at all (a batch of nothing to compute)
                self._complete(b, now)
                continue
            if alloc <= _EPS:
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
        if b is not None and b.overhead_left <= _EPS and b.work_left > 1e-7:
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
        if self.batch is not None or not self.active or now < self.next_start - _EPS:
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
        if b is None or b.overhead_left > _EPS or b.work_left <= 1e-7:
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
        if started is not None and now >= started + interval - _EPS:
            return now
        return (math.floor(now / interval + _EPS) + 1) * interval

    def metrics(self, now: float) -> QueryMetrics:
        q = self.q
        return QueryMetrics(
            query_id=q.name, name=q.name, batches=self.batches, input_rows=int(self.input_rows),
            batch_busy_ms=self.batch_busy_ms, batch_duration_ms=self.batch_duration_ms,
            backlog=self.reported_backlog, input_rate=self.input_rate,
            processed_rate=self.processed_rate, last_batch_duration_ms=self.last_batch_duration_ms,
            trigger_interval_ms=(q.trigger_interval_s * 1000.0 if q.trigger_interval_s else None),
            last_progress_time=self.last_progress_time, busy_ms=self.busy_ms,
            tasks_finished=self.tasks_finished, tasks_failed=int(self.tasks_failed + _EPS),
            max_stage_tasks=q.partitions if self.ran else None, active=self.active,
            exception=self.exception, recent_batches=tuple(self.records), in_flight=self._in_flight(),
            latest_offsets=LatestOffsets(now, self.source + self.taken, 1) if q.latest_offsets else None)

    def _in_flight(self) -> InFlightBatch | None:
        """The running batch's ended tasks, as the listener sees them: its tasks run in waves of
        the slots they hold, and a wave's tasks end together (one wave: none until the batch ends)."""
        b = self.batch
        if b is None or b.tasks_started is None or b.work <= 0 or self.running_slots <= _EPS:
            return None
        tasks = self.q.partitions
        per_wave = max(1, min(tasks, round(self.running_slots)))
        done = 1.0 - b.work_left / b.work
        ended = min(tasks, math.floor(done * math.ceil(tasks / per_wave) + 1e-6) * per_wave)
        if ended <= 0:
            return None
        return InFlightBatch(batch_id=self.batches, first_launch=b.tasks_started, tasks_ended=ended,
                             task_s=ended * b.work / tasks)


def _fair_share(demand: dict[str, float], slots: float) -> dict[str, float]:
    """Max-min fair allocation of ``slots`` to the demands."""
    alloc = {k: 0.0 for k in demand}
    active = {k: d for k, d in demand.items() if d > 0}
    remaining = float(slots)
    while active and remaining > _EPS:
        fair = remaining / len(active)
        satisfied = {k: d for k, d in active.items() if d <= fair + _EPS}
        if not satisfied:
            for k in active:
                alloc[k] = fair
            break
        for k, d in satisfied.items():
            alloc[k] = d
            remaining -= d
            del active[k]
    return alloc


# --------------------------------------------------------------------------------------------
# The simulation


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

    Fault injection (see the module docstring) starts at ``faults_from`` (default: the start; the
    executors present at the start are never affected). ``heap_used_ratio`` and ``gc_fraction``
    set the memory gauges the memory checkers read.
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
        self.evaluator = evaluator or MicroBatchEvaluator()
        self.policy = policy or ScalingPolicy()
        if realizer is None:
            self.realizer: ScalingRealizer = ExecutorRealizer(self.cluster, config.min_executors,
                                                              decommission=config.decommission)
        elif isinstance(realizer, ScalingRealizer):
            self.realizer = realizer
        else:
            self.realizer = realizer(self.cluster)
        self.guard = RollbackGuard(config, build_checkers(config) if checkers is None else checkers)
        self.recorder = RecordingEventHandler()
        self.events = EventDispatcher([self.recorder], throttle_s=config.event_throttle_s,
                                      clock=lambda: self.now)
        self.autoscaler = Autoscaler(config, SimCollector(self), self.evaluator, self.policy,
                                     self.realizer, self.guard, self.events,
                                     state_store if state_store is not None else InMemoryStateStore(),
                                     app_name, clock=lambda: self.now, run_id=run_id)
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
        while self.now < end - _EPS:
            dt = min(self.step_s, end - self.now, self._next_tick - self.now)
            self._step(dt)
            if self.on_step is not None:
                self.on_step(self)
            if self.now >= self._next_tick - _EPS:
                self._tick()
                self._next_tick += self.config.interval_s
        return self.result

    def _step(self, dt: float) -> None:
        """Advance ``dt``, sharing the slots out again at every change of a batch's phase (see
        :meth:`_QueryState.next_event`): slots held through a step by a batch that ends or is
        still on the driver would be idle while other queries' tasks wait."""
        end = self.now + dt
        while self.now < end - _EPS:
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
        useful = max(0.0, 1.0 - on_bad / total) if total > _EPS else 1.0
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
                task_s = (busy / (a * useful * speed) if useful * speed > _EPS
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
