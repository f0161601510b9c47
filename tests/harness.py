"""The test harness: sample builders, a scripted collector, a recording realizer and a manual
clock, so that a behaviour of the control loop, the evaluator or the checkers reads as a short
specification. Only the simulator tests drive the whole system instead (``sparkscale_listener.sim``).
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from sparkscale_listener.check.checker import CheckContext, CheckResult, ScalingChecker
from sparkscale_listener.collect.collector import MetricCollector
from sparkscale_listener.config.core import AutoscalerConfig
from sparkscale_listener.control_loop import wire
from sparkscale_listener.decisions import ScalingContext, ScalingRecord
from sparkscale_listener.evaluator import MetricEvaluator, MicroBatchEvaluator
from sparkscale_listener.metrics import BatchRecord, ClusterMetrics, ExecutorInfo, MetricSample, QueryMetrics
from sparkscale_listener.model import WARMUP_BATCHES
from sparkscale_listener.observe.events import EventDispatcher
from sparkscale_listener.realize.realizer import RealizationResult, ScalingRealizer
from sparkscale_listener.sim import RecordingEventHandler
from sparkscale_listener.state.store import InMemoryStateStore, StateStore

QID = "q1"
T0 = 1_000.0  # time of the scaling in the checker scenarios
CFG = AutoscalerConfig(max_executors=20)
CORES = 4


def cfg(**keys: str) -> AutoscalerConfig:
    """A configuration from ``spark.sparkscale.*`` keys (prefix stripped), validated."""
    return AutoscalerConfig.from_keys(keys)


# ---------------------------------------------------------------------------------------------
# Samples: one builder for a single instant, and two series builders
# ---------------------------------------------------------------------------------------------


def sample(t: float, live: int = 2, cores: int = CORES, queries: Iterable[QueryMetrics] = (),
           executors: Sequence[ExecutorInfo] | None = None, **cluster: Any) -> MetricSample:
    """One sample at time ``t``: ``live`` executors (ids 1..live unless ``executors`` is given)
    and the given queries; other ``ClusterMetrics`` fields by keyword."""
    if executors is None:
        executors = tuple(ExecutorInfo(str(i), cores=cores) for i in range(1, live + 1))
    return MetricSample(t, ClusterMetrics(live_executors=live, cores_per_executor=cores,
                                          executors=tuple(executors), **cluster),
                        {q.query_id: q for q in queries})


def query(query_id: str = QID, **fields: Any) -> QueryMetrics:
    """A query's metrics at one instant (``QueryMetrics`` fields by keyword)."""
    return QueryMetrics(query_id, **fields)


@dataclass
class SteadyQuery:
    """A steady query: a batch starts every period (its trigger, or at once when the last one
    ends) and reads what arrived since the previous one started; counters from t=0. Its batches
    are ``recent_batches`` as the collector reports them: all of their task time is per row."""

    qid: str
    rate: float | Callable[[float], float]  # rows/s arriving (callable: rate at t)
    cost: float = 0.01  # slot-seconds per row
    backlog: float | Callable[[float], float] | None = None
    batch_s: float = 1.0  # the task phase of a batch
    overhead_s: float = 0.0  # driver time per batch (in its duration, not in its task time)
    trigger_s: float | None = None
    cap: int | None = None  # tasks of its widest stage (and of each batch)
    gauge_rate: float | None = None  # progress inputRowsPerSecond
    name: str | None = None
    whole_batches: bool = False  # counters move only when a batch completes (every period)
    executors: int | None = None  # live executors its batches ran on

    @property
    def period(self) -> float:
        return max(self.trigger_s or 0.0, self.batch_s + self.overhead_s)

    def arrived(self, a: float, b: float) -> float:
        if callable(self.rate):
            steps = max(1, round(b - a))  # integrate a piecewise rate on a 1 s grid
            width = (b - a) / steps
            return sum(self.rate(a + (i + 0.5) * width) for i in range(steps)) * width
        return self.rate * (b - a)

    def rows_at(self, t: float) -> float:
        if self.whole_batches:
            return self.arrived(0.0, self.period * math.floor(t / self.period + 1e-9))
        return self.arrived(0.0, t)

    def batches_until(self, t: float, keep: int = 64) -> tuple[BatchRecord, ...]:
        """The batches completed by ``t``, oldest first, numbered past the warm-up ones."""
        period, duration = self.period, self.batch_s + self.overhead_s
        done = int((t - duration) / period + 1e-9) + 1 if t >= duration else 0
        out = []
        for i in range(max(0, done - keep), done):
            start = i * period
            rows = round(self.arrived(max(0.0, start - period), start)) if i else 0
            backlog = self.backlog(start) if callable(self.backlog) else self.backlog
            out.append(BatchRecord(
                batch_id=WARMUP_BATCHES + i, start=start, duration_s=duration, rows=rows,
                since_previous_s=period if i else None, backlog=backlog, task_s=rows * self.cost,
                tasks=self.cap or 4, task_wall_s=self.batch_s, executors=self.executors))
        return tuple(out)

    def at(self, t: float) -> QueryMetrics:
        rows = self.rows_at(t)
        # The query has been running for a while: past its warm-up batches, which the
        # evaluator does not measure (batches below WARMUP_BATCHES are its first ones).
        batches = WARMUP_BATCHES + int(t / self.period)
        backlog = self.backlog(t) if callable(self.backlog) else self.backlog
        return QueryMetrics(
            query_id=self.qid, name=self.name, batches=batches, input_rows=int(rows),
            batch_busy_ms=rows * self.cost * 1000.0,
            batch_duration_ms=(batches - WARMUP_BATCHES) * (self.batch_s + self.overhead_s) * 1000.0,
            backlog=backlog, input_rate=self.gauge_rate or 0.0,
            last_batch_duration_ms=(self.batch_s + self.overhead_s) * 1000.0,
            trigger_interval_ms=self.trigger_s * 1000.0 if self.trigger_s else None,
            last_progress_time=(self.period * math.floor(t / self.period + 1e-9)
                                if self.whole_batches else t),
            busy_ms=rows * self.cost * 1000.0, max_stage_tasks=self.cap,
            recent_batches=self.batches_until(t))


def series(queries: list[SteadyQuery], t0: float = 0.0, t1: float = 60.0, step: float = 10.0,
           live: int = 4, external: Callable[[float], dict[str, float]] | None = None,
           pool_busy: float = 0.0) -> list[MetricSample]:
    """Samples every ``step`` s; ``pool_busy``: fraction of the slots busy (cluster busy_ms)."""
    out = []
    t = t0
    while t <= t1 + 1e-9:
        busy_ms = pool_busy * live * CORES * t * 1000.0
        out.append(MetricSample(time=t, cluster=ClusterMetrics(live, CORES, busy_ms=busy_ms),
                                queries={q.qid: q.at(t) for q in queries},
                                external=external(t) if external else {}))
        t += step
    return out


def scaling_context(now: float, target: int = 4, live: int | None = None, window_start: float = 0.0,
                    cfg: AutoscalerConfig = CFG, provisioning: float = 0.0) -> ScalingContext:
    return ScalingContext(now=now, config=cfg, current_target=target,
                          live_executors=target if live is None else live, pending_executors=0,
                          cores_per_executor=CORES, window_start=window_start,
                          provisioning_time_s=provisioning)


@dataclass
class CounterSim:
    """Produces MetricSamples with cumulative counters, like the collector does."""

    time: float = 0.0
    interval: float = 10.0
    cores: int = 4
    rows: int = 0
    finished: int = 0
    failed: int = 0
    run_ms: float = 0.0
    gc_ms: float = 0.0
    batches: int = 0
    batch_ms: float = 0.0
    failed_batches: int = 0
    executors: dict[str, ExecutorInfo] = field(default_factory=dict)
    next_id: int = 1

    def add_executors(self, n: int) -> list[str]:
        ids = []
        for _ in range(n):
            eid = str(self.next_id)
            self.next_id += 1
            self.executors[eid] = ExecutorInfo(eid, cores=self.cores, added_time=self.time)
            ids.append(eid)
        return ids

    def remove(self, eid: str, reason: str | None) -> None:
        self.executors[eid] = replace(self.executors[eid], removed_time=self.time,
                                      removed_reason=reason)

    def live(self) -> list[str]:
        return [e for e, info in self.executors.items() if info.removed_time is None]

    def tick(self, rate: float = 1000.0, backlog: float | None = 0.0, tasks: int = 200,
             failures: int = 0, fail_on: str | None = None, gc_ratio: float = 0.05,
             heap: float | None = 0.5, exception: str | None = None, new_failed_batches: int = 0,
             trigger_ms: float | None = None, batch_ms: float | None = None) -> MetricSample:
        self.time += self.interval
        self.rows += int(rate * self.interval)
        self.finished += tasks
        self.failed += failures
        if failures:
            eid = fail_on or self.live()[0]
            info = self.executors[eid]
            self.executors[eid] = replace(info, tasks_failed=info.tasks_failed + failures)
        run = tasks * 100.0
        self.run_ms += run
        self.gc_ms += run * gc_ratio
        self.batches += 1
        self.batch_ms += batch_ms if batch_ms is not None else self.interval * 500.0
        self.failed_batches += new_failed_batches
        live = self.live()
        query = QueryMetrics(
            QID, name="orders", batches=self.batches, input_rows=self.rows,
            batch_duration_ms=self.batch_ms, backlog=backlog, trigger_interval_ms=trigger_ms,
            active=exception is None, exception=exception, failed_batches=self.failed_batches)
        cluster = ClusterMetrics(
            live_executors=len(live), cores_per_executor=self.cores,
            executors=tuple(self.executors.values()), tasks_finished=self.finished,
            tasks_failed=self.failed, gc_ms=self.gc_ms, run_ms=self.run_ms,
            heap_used_ratio=heap)
        return MetricSample(self.time, cluster, {QID: query})


def noisy(rng: random.Random, value: float, spread: float = 0.2) -> float:
    return value * rng.uniform(1 - spread, 1 + spread)


def warm_sim(executors: int = 2, until: float = T0) -> tuple[CounterSim, list[MetricSample]]:
    """A sim that ran steadily up to the scaling; returns it and its history."""
    sim = CounterSim(time=until - 100.0)
    sim.add_executors(executors)
    history = [sim.tick() for _ in range(10)]
    return sim, history


def record(action: str = "scale_up", frm: int = 2, to: int = 4, time: float = T0,
           rate_before: dict[str, float] | None = None) -> ScalingRecord:
    return ScalingRecord(time, action, frm, to, "test", rate_before=rate_before or {})  # type: ignore[arg-type]


def context(scaling: ScalingRecord, before: MetricSample | None, samples: Sequence[MetricSample],
            config: AutoscalerConfig | None = None, requested_total: int | None = None,
            requested_at: float | None = None, history: Sequence[MetricSample] = (),
            now: float | None = None) -> CheckContext:
    return CheckContext(
        now=now if now is not None else (samples[-1].time if samples else scaling.time),
        config=config or cfg(), scaling=scaling, before=before, samples=list(samples),
        requested_total=scaling.to_executors if requested_total is None else requested_total,
        requested_at=scaling.time if requested_at is None else requested_at, history=history)


def contexts(scaling: ScalingRecord, before: MetricSample, ticks: Iterator[MetricSample],
             **kw: object) -> Iterator[CheckContext]:
    """One context per tick, as the control loop builds them while watching."""
    samples: list[MetricSample] = []
    for sample in ticks:
        samples.append(sample)
        yield context(scaling, before, samples, **kw)  # type: ignore[arg-type]


def all_results(checker: ScalingChecker, ctxs: Iterator[CheckContext]) -> list[CheckResult]:
    return [checker.check(c) for c in ctxs]


def scale_up(sim: CounterSim, n: int = 2) -> list[str]:
    return sim.add_executors(n)


# ---------------------------------------------------------------------------------------------
# The control loop's harness: a scripted collector, a recording realizer, a manual clock
# ---------------------------------------------------------------------------------------------


class ManualClock:
    """The control loop's clock; tests move it."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class ScriptedCollector(MetricCollector):
    """Returns queued samples one per tick (re-timed to the clock); repeats the last when the
    queue is empty. A queued exception is raised instead."""

    def __init__(self, samples: Iterable[MetricSample | Exception] = ()) -> None:
        self.queue: deque[MetricSample | Exception] = deque(samples)
        self.last: MetricSample | None = None

    def push(self, *samples: MetricSample | Exception) -> None:
        self.queue.extend(samples)

    def collect(self, now: float) -> MetricSample:
        item = self.queue.popleft() if self.queue else self.last
        if item is None:
            raise LookupError("ScriptedCollector has no sample queued")
        if isinstance(item, Exception):
            raise item
        self.last = replace(item, time=now)
        return self.last


class RecordingRealizer(ScalingRealizer):
    """Records every call as ("baseline", total) or ("realize", target, sorted remove_first);
    the cluster manager accepts every target unless ``refuse`` is set."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.refuse = False
        self.removing: tuple[str, ...] = ()  # the executors a realize call reports removed
        self._requested = 0

    @property
    def requested_total(self) -> int:
        return self._requested

    def _answer(self, total: int) -> RealizationResult:
        if self.refuse:
            return RealizationResult(self._requested, ok=False, message=f"refused {total}")
        self._requested = total
        return RealizationResult(total)

    def baseline(self, total: int) -> RealizationResult:
        self.calls.append(("baseline", total))
        return self._answer(total)

    def realize(self, target: int, remove_first: Collection[str] = ()) -> RealizationResult:
        self.calls.append(("realize", target, tuple(sorted(remove_first))))
        answer = self._answer(target)
        return replace(answer, removed=self.removing) if answer.ok else answer


@dataclass
class LoopHarness:
    """An :class:`Autoscaler` wired to the scripted collector, the recording realizer, a manual
    clock and recorded events; ``tick(sample)`` queues a sample, moves the clock one interval
    and runs one step."""

    config: AutoscalerConfig = field(default_factory=lambda: cfg(initialExecutors="2"))
    checkers: Sequence[ScalingChecker] = ()
    evaluator: MetricEvaluator = field(default_factory=MicroBatchEvaluator)
    state_store: StateStore = field(default_factory=InMemoryStateStore)
    start: float = 0.0

    def __post_init__(self) -> None:
        self.clock = ManualClock(self.start)
        self.collector = ScriptedCollector()
        self.realizer = RecordingRealizer()
        self.recorded = RecordingEventHandler()
        events = EventDispatcher([self.recorded], throttle_s=0)
        self.autoscaler = wire(self.config, self.collector, self.realizer, events, "app",
                               evaluator=self.evaluator, checkers=self.checkers, state_store=self.state_store,
                               clock=self.clock)
        self.guard = self.autoscaler.guard

    def tick(self, sample_: MetricSample | Exception | None = None, dt: float | None = None) -> list:
        if sample_ is not None:
            self.collector.push(sample_)
        self.clock.now += self.config.interval_s if dt is None else dt
        return self.autoscaler.step()
