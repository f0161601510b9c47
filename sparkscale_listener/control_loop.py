"""The control loop: collect -> check -> evaluate -> decide -> apply -> record, every interval.

:class:`Autoscaler` only sequences the stages; each lives in its own place: collection
(:mod:`.collect`), checking and rollback (:mod:`.check`), evaluation (:mod:`.evaluator`), the
decision (:mod:`.policy`), executing it and keeping the executor targets (:mod:`.executor`, over
:mod:`.realize`), state (:mod:`.state`), events and gauges (:mod:`.observe`). It is driven by
:meth:`Autoscaler.step`: from a daemon thread in Spark (:class:`ControlLoop`), or from simulated
time in :mod:`sparkscale_listener.sim`. A step never raises: an exception in any module is
logged, reported as an ``error`` event, and the next step runs as usual.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace

from .check.checker import CheckContext, ScalingChecker
from .check.guard import RollbackGuard
from .check.loading import build_checkers
from .collect.collector import MetricCollector
from .config.core import AutoscalerConfig, Mode
from .decisions import Decision, Evaluation, ScalingContext, decision_to_dict, not_ready
from .evaluator import MetricEvaluator, MicroBatchEvaluator
from .executor import ScalingExecutor
from .forecast import ArrivalForecasts
from .metrics import MetricSample, processed_rates
from .observe.errors import ErrorReporter
from .observe.events import (
    AutoscalerEvent,
    EventDispatcher,
    concurrent_run_event,
    events_lost_event,
    outcome_event,
    resume_event,
)
from .observe.gauges import GaugePublisher
from .policy import ScalingPolicy
from .realize.provisioning import AllocationBatches, ProvisioningTracker
from .realize.realizer import ScalingRealizer
from .state import AutoscalerState, InMemoryStateStore, StateStore
from .views import DecisionList, DecisionView, Status

log = logging.getLogger("sparkscale")

_HISTORY_DECISIONS = 1000

#: Called at the end of every tick with the autoscaler, the tick's sample and its decisions.
Observer = Callable[["Autoscaler", MetricSample, Sequence[Decision]], None]


class Autoscaler:
    """One application's autoscaler. Thread-safe: status()/decisions()/resume() may be called from
    any thread while the control loop runs."""

    def __init__(self, config: AutoscalerConfig, collector: MetricCollector, evaluator: MetricEvaluator,
                 policy: ScalingPolicy, realizer: ScalingRealizer, guard: RollbackGuard,
                 events: EventDispatcher, state_store: StateStore, app_name: str,
                 clock: Callable[[], float] = time.time, gauges: GaugePublisher | None = None,
                 observers: Sequence[Observer] = (), task_cpus: int = 1, run_id: str | None = None,
                 application_ended: Callable[[], bool] = lambda: False,
                 allocation_batches: AllocationBatches | None = None) -> None:
        self.config = config
        # A tick that fails because the SparkContext stopped under it is the application's end,
        # not an error of ours (spark.stop() during a tick logged an error at every such shutdown).
        self.application_ended = application_ended
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
        self.errors = ErrorReporter(events, config.mode, clock)
        # run_id (the Spark application id) tells a restarted driver from a concurrent run.
        self.state = AutoscalerState(state_store, app_name, self.errors.report_now, run_id)
        self._restored = False
        self._events_lost: int | None = None  # cumulative count at the previous tick
        self._lost_at: float | None = None  # when the latest loss of listener events was noticed
        self._outcome_reported: float | None = None  # time of the change whose outcome was reported
        self.provisioning = ProvisioningTracker(config, self.state, allocation_batches)
        self.executor = ScalingExecutor(config, realizer, guard, events, self.state, self.provisioning,
                                        app_name)
        # Each query's forecast of its arrivals (forecast.mode shadow or on), learnt at every tick.
        self.forecasts = ArrivalForecasts(config) if config.forecast_mode != "off" else None

    # ------------------------------------------------------------------ public API
    def step(self) -> list[Decision]:
        """One control tick: every decision it made, oldest first (a rollback, then what the
        policy said). Empty before the baseline is set or when the tick failed. Never raises."""
        with self._lock:
            now = self.clock()
            try:
                return self._tick(now)
            except Exception as exc:  # the user's query must never suffer for our bug
                self._failed(now, "control loop", exc)
                return []
            finally:
                self.state.flush()  # what the tick changed, written once

    def _failed(self, now: float, where: str, exc: Exception) -> None:
        """Report a failure, unless the application ended under it (then a log line says so)."""
        try:
            ended = bool(self.application_ended())
        except Exception:  # no telling: the failure is reported (a bug of that check hid every error)
            log.warning("could not tell whether the application ended", exc_info=True)
            ended = False
        if ended:
            log.info("the application ended during a tick (%s: %s: %s)", where, type(exc).__name__, exc)
        else:
            self.errors.report(now, where, exc)

    def status(self, brief: bool = False) -> Status:
        """Where the autoscaler stands (a dict that prints readably). Reading it changes nothing.
        ``brief``: without ``last_decision`` and ``last_scaling``, whose figures per query the UI's
        summary of every tick does not show (at 100 queries, 5 ms of a tick after a change)."""
        with self._lock:
            t = self.executor.targets
            live = self._history[-1].cluster.live_executors if self._history else 0
            now = self.clock()
            pause = self.guard.pause
            status = Status({
                "mode": self.config.mode,
                "target_executors": self._reported_target(),
                "initial_executors": t.initial,
                "live_executors": live,
                "pending_executors": max(0, self.realizer.requested_total - live),
                "paused": pause.active(now),
                "pause_reason": pause.reason(now),
                "stopped": pause.stopped,
                "last_decision": None if brief or self._last_decision is None
                else DecisionView(decision_to_dict(self._last_decision)),
                "last_scaling": asdict(t.last_scaling) if t.last_scaling and not brief else None,
                "provisioning_time_s": self.provisioning.time_s(),
                "waiting_for": self.provisioning.waiting_for(now, live),
                "blocked_queries": dict(self.policy.blocked_queries()),
                "healthy_target": self.guard.healthy_target,
                "capacity_limit": self.executor.capacity.status(now),
                "request_failure": self.executor.requests.status(now),
                "events_lost": self._events_lost or 0,
                "errors": self.errors.count,
                "last_error": self.errors.last,
                "forecasts": {qid: f.to_dict() for qid, f in self.forecasts.forecasts().items()}
                if self.forecasts is not None else {},
            })
            if brief:
                del status["last_decision"], status["last_scaling"]
            return status

    def _reported_target(self) -> int:
        """The executor target status() and the gauges show. In recommend mode nothing is requested
        and the target follows the executors that run: on ``local[*]`` none does (the driver runs
        the tasks), and a target of 0, below minExecutors, read as a decision to run on nothing."""
        current = self.executor.targets.current
        return max(current, self.config.min_executors) if self.config.mode is Mode.RECOMMEND else current

    def decisions(self, applied_only: bool = False) -> DecisionList:
        """Every decision so far (the last 1000), oldest first, as dicts that print a line each; with
        ``applied_only`` only those carried out (scale-ups, scale-downs, rollbacks)."""
        with self._lock:
            return DecisionList(DecisionView(decision_to_dict(d)) for d in self._decisions
                                if d.applied or not applied_only)

    def resume(self) -> bool:
        """Lift a rollback pause or a stop after repeated rollbacks; True when one was in force."""
        with self._lock:
            now = self.clock()
            was = self.executor.resume(now)
            self.events.emit(resume_event(now, was, self.executor.details()))
            self.state.flush()
            return was

    def close(self) -> None:
        for closer in (getattr(self.collector, "close", None), self.events.close, self.state.release,
                       self.state.close):
            if closer is None:
                continue
            try:
                closer()
            except Exception:
                log.exception("error while closing")

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
        if self.forecasts is not None:
            self.forecasts.observe(sample, self.provisioning.time_s())
        self._note_lost_events(now, sample)
        decisions = self._check_last_scaling(now)
        pause = self.guard.pause
        current = executor.targets.current
        if pause.active(now):
            decisions.append(Decision(now, "none", current, current, f"paused: {pause.reason(now)}"))
        elif (measuring := self._measuring_afresh(now)) is not None:
            waiting = not_ready(now, current, [measuring])
            decisions.append(Decision(now, "none", current, current, waiting.headline, evaluation=waiting))
            executor.reassert_after_losses(sample)  # lost executors are replaced all the same
        else:
            decisions.append(self._decide_and_apply(now, sample))
        self._record(decisions, sample)
        executor.persist()
        self.state.store_policy_state(self.policy.to_state())
        learnt = self.forecasts.learnt_state() if self.forecasts is not None else None
        if learnt is not None:
            self.state.store_forecast_state(learnt)
        return decisions

    def _restore(self, now: float) -> bool:
        """Take over what a previous driver of this application stored, once this run owns the
        state (see :meth:`AutoscalerState.claim`); False while that is undecided."""
        verdict = self.state.claim(now, stale_after_s=3 * self.config.interval_s)
        if verdict is None:
            return False
        self._restored = True
        if verdict == "separate":
            self.events.emit(concurrent_run_event(now, self.app_name, self.state.app))
            return True
        self.executor.restore()
        self.provisioning.restore()
        policy_state = self.state.policy_state()
        if policy_state:
            self.policy.load_state(policy_state)
        if self.forecasts is not None:
            self.forecasts.load_state(self.state.forecast_state())
        return True

    def _note_lost_events(self, now: float, sample: MetricSample) -> None:
        """Listener events were lost since the last tick (Spark's bus dropped some, or a task's
        end never came): the counters over the window miss work. Measure afresh from now, so that
        no decision rests on the incomplete window, and say so."""
        lost, before = sample.cluster.events_lost, self._events_lost
        self._events_lost = lost
        if before is None or lost <= before:
            return
        self.executor.measure_afresh(now)
        self._lost_at = now
        self.events.emit(events_lost_event(now, lost, lost - before))

    def _measuring_afresh(self, now: float) -> str | None:
        """The reason no decision is made yet after lost listener events, or None. A whole
        metrics window is waited out, whatever the queries show: an idle query, or another job's
        tasks, would otherwise be judged on counters that miss work."""
        if self._lost_at is None:
            return None
        left = self._lost_at + self.config.metrics_window_s - now
        if left <= 0:
            self._lost_at = None
            return None
        return (f"listener events were lost {now - self._lost_at:.0f}s ago; measuring a fresh "
                f"{self.config.metrics_window_s:.0f}s metrics window ({left:.0f}s left)")

    def _check_last_scaling(self, now: float) -> list[Decision]:
        """Let the guard judge the scaling it watches; a rollback is the tick's first decision."""
        scaling = self.guard.watching
        if scaling is None:
            return []
        t = self.executor.targets
        assert t.initial is not None
        context = CheckContext.around(scaling, self._history, now, self.config, self.realizer.requested_total)
        return self.executor.judged(now, self.guard.observe(context, t.initial, t.current))

    def _decide_and_apply(self, now: float, sample: MetricSample) -> Decision:
        context = self._context(now, sample)
        evaluation = self.evaluator.evaluate(list(self._history), context)
        decision = self.policy.decide(evaluation, context)
        # The outcomes as the policy judged them (its verdict on the last scale-up).
        self._report_outcomes(now, decision.evaluation or evaluation)
        for situation, note in self.policy.last_notes():
            self.events.emit(AutoscalerEvent(now, "blocked", note, situation=situation, severity="warning",
                                             details=self.executor.details()))
        if decision.action in ("scale_up", "scale_down") and decision.to_executors != context.current_target:
            return self.executor.apply(now, decision, context)
        self.executor.reassert_after_losses(sample)
        return decision

    def _report_outcomes(self, now: float, evaluation: Evaluation) -> None:
        """Once per applied change, when its outcome is measured: an ``outcome`` event, and the
        outcome on the change's decision (``decisions()``)."""
        rec = self.executor.targets.last_scaling
        if rec is None or not evaluation.outcomes or rec.time == self._outcome_reported:
            return
        self._outcome_reported = rec.time
        applied = [i for i, d in enumerate(self._decisions) if d.applied and d.time == rec.time]
        if applied:  # the change's decision, unless it left the bounded list already
            self._decisions[applied[-1]] = replace(self._decisions[applied[-1]], outcomes=evaluation.outcomes)
        self.events.emit(outcome_event(now, rec, evaluation.outcomes, self.executor.details()))

    def _context(self, now: float, sample: MetricSample) -> ScalingContext:
        t = self.executor.targets
        return ScalingContext(
            now=now, config=self.config, current_target=t.current,
            live_executors=sample.cluster.live_executors,
            pending_executors=max(0, self.realizer.requested_total - sample.cluster.live_executors),
            cores_per_executor=max(1, sample.cluster.cores_per_executor), task_cpus=self.task_cpus,
            live_slots=sample.cluster.live_slots(self.task_cpus),
            processed_rates=processed_rates(list(self._history), t.window_start,
                                            self.config.metrics_window_s),
            window_start=t.window_start, provisioning_time_s=self.provisioning.time_s(),
            last_scaling=t.last_scaling,
            forecasts=self.forecasts.forecasts() if self.forecasts is not None else {})

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
                self.gauges.publish(sample, decisions[-1], self._reported_target(),
                                    self.realizer.requested_total, self.guard.pause.active(sample.time),
                                    self.forecasts.forecasts() if self.forecasts is not None else None)
            except Exception as exc:
                self._failed(sample.time, "gauges", exc)
        for observer in self.observers:
            try:
                observer(self, sample, decisions)
            except Exception as exc:
                self._failed(sample.time, f"observer {observer!r}", exc)


# The least time between two steps when woken early: a burst of batches completing together (many
# queries on one trigger) makes one early evaluation, not one each.
MIN_STEP_GAP_S = 1.0


class ControlLoop:
    """Runs :meth:`Autoscaler.step` every interval on a daemon thread until stopped, or until the
    SparkContext stops; sooner when :meth:`wake` is called (a batch showed arrivals rising), but
    never twice within :data:`MIN_STEP_GAP_S`."""

    def __init__(self, autoscaler: Autoscaler, interval_s: float,
                 alive: Callable[[], bool] = lambda: True) -> None:
        self.autoscaler = autoscaler
        self.interval_s = interval_s
        self._alive = alive
        self._stop = threading.Event()
        self._wakeup = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sparkscale-control-loop", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        """Step now rather than at the next interval (callable from any thread; returns at once)."""
        self._wakeup.set()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wakeup.set()
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
            self._wakeup.clear()  # a wake during the step counts for the next one
            self.autoscaler.step()
            due = time.monotonic() + self.interval_s
            if self._stop.wait(min(MIN_STEP_GAP_S, self.interval_s)):
                break
            self._wakeup.wait(max(0.0, due - time.monotonic()))
        self.autoscaler.close()


def wire(config: AutoscalerConfig, collector: MetricCollector, realizer: ScalingRealizer,
         events: EventDispatcher, app_name: str, *, evaluator: MetricEvaluator | None = None,
         policy: ScalingPolicy | None = None, checkers: Sequence[ScalingChecker] | None = None,
         state_store: StateStore | None = None, clock: Callable[[], float] = time.time,
         gauges: GaugePublisher | None = None, observers: Sequence[Observer] = (), task_cpus: int = 1,
         run_id: str | None = None, application_ended: Callable[[], bool] = lambda: False,
         allocation_batches: AllocationBatches | None = None) -> Autoscaler:
    """The one assembly of an :class:`Autoscaler` (the session's, the simulator's, the tests'): what
    is not given is the default, the micro-batch evaluator, the policy, the checkers the
    configuration names and an in-memory state store."""
    guard = RollbackGuard(config, build_checkers(config) if checkers is None else list(checkers))
    store = InMemoryStateStore() if state_store is None else state_store
    return Autoscaler(config, collector, evaluator or MicroBatchEvaluator(), policy or ScalingPolicy(),
                      realizer, guard, events, store, app_name,
                      clock=clock, gauges=gauges, observers=observers, task_cpus=task_cpus, run_id=run_id,
                      application_ended=application_ended, allocation_batches=allocation_batches)
