"""The control loop: collect -> check -> evaluate -> decide -> apply -> record, every interval.

:class:`Autoscaler` only sequences the stages; each lives in its own module: collection
(:mod:`.collection`), checking and rollback (:mod:`.rollback`), evaluation (:mod:`.evaluation`),
the decision (:mod:`.policy`), executing it and keeping the executor targets (:mod:`.execution`,
over :mod:`.realization`), provisioning time (:mod:`.provisioning`), state (:mod:`.state`),
events (:mod:`.events`) and gauges (:mod:`.gauges`). It is driven by :meth:`Autoscaler.step`: from a
daemon thread in Spark (:class:`ControlLoop`), or from simulated time in
:mod:`sparkscale_listener.testing.sim`. A step never raises: an exception in any module is logged,
reported as an ``error`` event, and the next step runs as usual.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

from .checking import CheckContext
from .collection import MetricCollector
from .config import AutoscalerConfig
from .decisions import Decision, ScalingContext
from .evaluation import MetricEvaluator
from .events import AutoscalerEvent, EventDispatcher
from .execution import ScalingExecutor, processed_rates
from .gauges import GaugePublisher
from .metrics import ClusterMetrics, MetricSample
from .policy import ScalingPolicy
from .provisioning import ProvisioningTracker
from .realization import ScalingRealizer
from .rollback import RollbackGuard
from .state import AutoscalerState, StateStore

log = logging.getLogger("sparkscale")

_HISTORY_DECISIONS = 1000

#: Called at the end of every tick with the autoscaler, the tick's sample and its decisions.
Observer = Callable[["Autoscaler", MetricSample, Sequence[Decision]], None]


class Autoscaler:
    """One application's autoscaler. Thread-safe: status()/decisions()/resume() may be called from
    any thread while the control loop runs."""

    def __init__(
        self,
        config: AutoscalerConfig,
        collector: MetricCollector,
        evaluator: MetricEvaluator,
        policy: ScalingPolicy,
        realizer: ScalingRealizer,
        guard: RollbackGuard,
        events: EventDispatcher,
        state_store: StateStore,
        app_name: str,
        clock: Callable[[], float] = time.time,
        gauges: GaugePublisher | None = None,
        observers: Sequence[Observer] = (),
        task_cpus: int = 1,
        run_id: str | None = None,
    ) -> None:
        self.config = config
        self.task_cpus = max(1, task_cpus)  # spark.task.cpus
        self.collector = collector
        self.evaluator = evaluator
        self.policy = policy
        self.realizer = realizer
        self.guard = guard
        self.events = events
        self.app_name = app_name
        self.clock = clock
        self.gauges = gauges
        # Called at the end of every tick (e.g. the Spark UI tab's publisher); errors are reported.
        self.observers = list(observers)
        self._lock = threading.RLock()
        self._history: deque[MetricSample] = deque()
        self._decisions: deque[Decision] = deque(maxlen=_HISTORY_DECISIONS)
        self._last_decision: Decision | None = None
        self._errors = 0
        self._last_error: str | None = None
        # run_id (the Spark application id) tells a restarted driver from a concurrent run.
        self.state = AutoscalerState(state_store, app_name, self._on_state_error, run_id)
        self._restored = False
        self._policy_state: dict[str, Any] | None = None
        self._events_lost: int | None = None  # cumulative count at the previous tick
        self.provisioning = ProvisioningTracker(config, self.state)
        self.executor = ScalingExecutor(config, realizer, guard, events, self.state, self.provisioning,
                                        app_name)

    @property
    def state_store(self) -> StateStore:
        return self.state.store

    # ------------------------------------------------------------------ public API
    def step(self) -> list[Decision]:
        """One control tick: every decision it made, oldest first (a rollback, then what the
        policy said). Empty before the baseline is set or when the tick failed. Never raises."""
        with self._lock:
            now = self.clock()
            try:
                return self._tick(now)
            except Exception as exc:  # the user's query must never suffer for our bug
                self._report_error(now, "control loop", exc)
                return []

    def status(self) -> dict[str, Any]:
        with self._lock:
            t = self.executor.targets
            live = self._history[-1].cluster.live_executors if self._history else 0
            now = self.clock()
            return {
                "mode": self.config.mode,
                "target_executors": t.current,
                "initial_executors": t.initial,
                "live_executors": live,
                "pending_executors": max(0, self.realizer.requested_total - live),
                "paused": self.guard.paused(now) or self.guard.stopped,
                "pause_reason": self.guard.pause_reason,
                "stopped": self.guard.stopped,
                "last_decision": decision_to_dict(self._last_decision) if self._last_decision else None,
                "last_scaling": asdict(t.last_scaling) if t.last_scaling else None,
                "provisioning_time_s": self.provisioning.time_s(),
                "blocked_queries": dict(self.policy.blocked_queries()),
                "healthy_target": self.guard.healthy_target,
                "capacity_limit": self.executor.capacity_limit(now),
                "request_failure": self.executor.request_failure(now),
                "events_lost": self._events_lost or 0,
                "errors": self._errors,
                "last_error": self._last_error,
            }

    def decisions(self) -> list[dict[str, Any]]:
        """Every decision so far (bounded to the last 1000), oldest first."""
        with self._lock:
            return [decision_to_dict(d) for d in self._decisions]

    def resume(self) -> None:
        """Lift a rollback pause or a stop after repeated rollbacks."""
        with self._lock:
            now = self.clock()
            self.executor.resume(now)
            self.events.emit(AutoscalerEvent(now, "resume", "automatic scaling resumed by the user",
                                             details=self.executor.details()))

    def provisioning_time_s(self) -> float:
        """The learned request -> registered time (Flink's restart time)."""
        return self.provisioning.time_s()

    def close(self) -> None:
        for closer in (getattr(self.collector, "close", None), self.events.close, self.state.release,
                       self.state.close):
            if closer is None:
                continue
            try:
                closer()
            except Exception:
                log.exception("sparkscale: error while closing")

    # ------------------------------------------------------------------ the tick
    def _tick(self, now: float) -> list[Decision]:
        """collect -> (baseline) -> follow the cluster -> check -> evaluate, decide, apply -> record."""
        sample = self.collector.collect(now)
        self._remember(sample)
        executor = self.executor
        if not self._restored and not self._restore(now):
            return []
        self.state.heartbeat(now)
        if executor.targets.initial is None and not executor.establish_baseline(
                now, sample.cluster.live_executors):
            return []
        executor.follow_the_cluster(now, sample)
        self._note_lost_events(now, sample)
        decisions = self._check_last_scaling(now, sample)
        if self.guard.stopped or self.guard.paused(now):
            current = executor.targets.current
            decisions.append(Decision(now, "none", current, current,
                                      f"paused: {self.guard.pause_reason or 'stopped'}"))
        else:
            decisions.append(self._decide_and_apply(now, sample))
        self._record(decisions, sample)
        self._persist_policy()
        return decisions

    def _restore(self, now: float) -> bool:
        """Take over what a previous driver of this application stored, once this run owns the
        state (see :meth:`AutoscalerState.claim`); False while that is undecided."""
        verdict = self.state.claim(now, stale_after_s=3 * self.config.interval_s)
        if verdict is None:
            return False
        self._restored = True
        if verdict == "separate":
            self.events.emit(AutoscalerEvent(
                now, "notice", f"another run of application '{self.app_name}' is alive and uses its "
                f"state: this run keeps its own state under '{self.state.app}'", severity="warning",
                details={"situation": "concurrent-run"}))
            return True
        self.executor.restore()
        self.provisioning.restore()
        policy_state = self.state.policy_state()
        if policy_state:
            self.policy.load_state(policy_state)
            self._policy_state = policy_state
        return True

    def _note_lost_events(self, now: float, sample: MetricSample) -> None:
        """Listener events were lost since the last tick (Spark's bus dropped some, or a task's
        end never came): the counters over the window miss work. Measure afresh from now, so that
        no decision rests on the incomplete window, and say so."""
        lost, before = sample.cluster.events_lost, self._events_lost
        self._events_lost = lost
        if before is None or lost <= before:
            return
        t = self.executor.targets
        t.window_start = max(t.window_start, now)
        self.events.emit(AutoscalerEvent(
            now, "notice", f"{lost - before} listener event(s) lost (Spark's listener bus dropped them "
            "or a task's end never arrived; raise spark.scheduler.listenerbus.eventqueue.capacity): "
            "the metrics of the last window are incomplete, measuring afresh before any decision",
            severity="warning", details={"situation": "events-lost", "eventsLost": lost}))

    def _persist_policy(self) -> None:
        """Store the policy's memory when it changed (a pending scale-down, blocks)."""
        state = self.policy.to_state()
        if state != self._policy_state:
            self.state.store_policy_state(state)
            self._policy_state = state

    def _check_last_scaling(self, now: float, sample: MetricSample) -> list[Decision]:
        """Let the guard judge the scaling it watches; a rollback is the tick's first decision."""
        scaling = self.guard.watching
        if scaling is None:
            return []
        t = self.executor.targets
        assert t.initial is not None
        # The sample of the tick that applied the action was collected before it: it is the
        # baseline, not a sample "since the action".
        before = next((x for x in reversed(self._history) if x.time <= scaling.time), None)
        context = CheckContext(now=now, config=self.config, scaling=scaling, before=before,
                               samples=[x for x in self._history if x.time > scaling.time],
                               requested_total=self.realizer.requested_total,
                               requested_at=scaling.time,
                               history=[x for x in self._history if x.time <= scaling.time])
        return self.executor.judged(now, self.guard.observe(context, t.initial, t.current), sample)

    def _decide_and_apply(self, now: float, sample: MetricSample) -> Decision:
        context = self._context(now, sample)
        evaluation = self.evaluator.evaluate(list(self._history), context)
        decision = self.policy.decide(evaluation, context)
        for note in self.policy.last_notes():
            self.events.emit(AutoscalerEvent(now, "blocked", note, severity="warning",
                                             details=self.executor.details()))
        if decision.action in ("scale_up", "scale_down") and decision.to_executors != context.current_target:
            return self.executor.apply(now, decision, context)
        self.executor.reassert_after_losses(sample)
        return decision

    def _context(self, now: float, sample: MetricSample) -> ScalingContext:
        t = self.executor.targets
        return ScalingContext(
            now=now,
            config=self.config,
            current_target=t.current,
            live_executors=sample.cluster.live_executors,
            pending_executors=max(0, self.realizer.requested_total - sample.cluster.live_executors),
            cores_per_executor=max(1, sample.cluster.cores_per_executor),
            task_cpus=self.task_cpus,
            live_slots=live_slots(sample.cluster, self.task_cpus),
            processed_rates=processed_rates(list(self._history), t.window_start,
                                            self.config.metrics_window_s),
            window_start=t.window_start,
            provisioning_time_s=self.provisioning.time_s(),
            last_scaling=t.last_scaling,
        )

    # ------------------------------------------------------------------ bookkeeping
    def _remember(self, sample: MetricSample) -> None:
        self._history.append(sample)
        keep = max(self.config.metrics_window_s, self.guard.window_s(), self.config.scale_down_interval_s) \
            + 4 * self.config.interval_s
        keep_from = sample.time - keep
        watching = self.guard.watching
        if watching is not None:
            # A watch may last up to twice the checkers' window (a pending checker): keep the
            # sample before the watched action (the checkers' baseline) and history before it.
            keep_from = min(keep_from, watching.time - self.guard.window_s() - self.config.interval_s)
        while self._history and self._history[0].time < keep_from:
            self._history.popleft()

    def _record(self, decisions: Sequence[Decision], sample: MetricSample) -> None:
        self._decisions.extend(decisions)
        self._last_decision = decisions[-1]
        if self.gauges is not None:
            try:
                self.gauges.publish(sample, decisions[-1], self.executor.targets.current,
                                    self.realizer.requested_total,
                                    self.guard.stopped or self.guard.paused(sample.time))
            except Exception as exc:
                self._report_error(sample.time, "gauges", exc)
        for observer in self.observers:
            try:
                observer(self, sample, decisions)
            except Exception as exc:
                self._report_error(sample.time, f"observer {observer!r}", exc)

    def _report_error(self, now: float, where: str, exc: BaseException) -> None:
        self._errors += 1
        self._last_error = f"{where}: {type(exc).__name__}: {exc}"
        log.exception("sparkscale: error in %s (the query goes on; next tick as usual)", where)
        try:
            self.events.emit(AutoscalerEvent(now, "error", self._last_error, severity="error",
                                             details={"mode": self.config.mode, "where": where}))
        except Exception:
            log.exception("sparkscale: could not report the error")

    def _on_state_error(self, where: str, exc: BaseException) -> None:
        self._report_error(self.clock(), where, exc)


def live_slots(cluster: ClusterMetrics, task_cpus: int) -> int | None:
    """Task slots of the live executors from each one's own cores (sizes may differ: a changed
    ``spark.executor.cores``, resource profiles), or None when the executors are not listed."""
    live = cluster.live()
    if not live or len(live) != cluster.live_executors:
        return None
    return sum(max(0, e.cores) // max(1, task_cpus) for e in live)


def decision_to_dict(decision: Decision) -> dict[str, Any]:
    out: dict[str, Any] = {
        "time": decision.time,
        "action": decision.action,
        "from_executors": decision.from_executors,
        "to_executors": decision.to_executors,
        "reason": decision.reason,
        "applied": decision.applied,
        "limited_by": decision.limited_by,
    }
    ev = decision.evaluation
    if ev is not None:
        out["utilization"] = ev.utilization
        out["required_slots"] = ev.required_slots
        out["backlog_mode"] = ev.backlog_mode
        out["queries"] = {q: asdict(e) for q, e in ev.queries.items()}
    return out


class ControlLoop:
    """Runs :meth:`Autoscaler.step` every interval on a daemon thread until stopped, or until the
    SparkContext stops."""

    def __init__(self, autoscaler: Autoscaler, interval_s: float,
                 alive: Callable[[], bool] = lambda: True) -> None:
        self.autoscaler = autoscaler
        self.interval_s = interval_s
        self._alive = alive
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sparkscale-control-loop", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if not self._alive():
                    break
            except Exception:
                break  # the JVM is gone: the application ended
            self.autoscaler.step()
            self._stop.wait(self.interval_s)
        self.autoscaler.close()
