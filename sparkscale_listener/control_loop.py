"""The control loop: collect -> check -> evaluate -> decide -> apply -> record, every interval.

:class:`Autoscaler` owns one application's executor target and only sequences the stages; each
stage lives in its own module: collection (:mod:`.collection`), checking and rollback
(:mod:`.rollback`), evaluation (:mod:`.evaluation`), the decision (:mod:`.policy`), realization
(:mod:`.realization`), provisioning time (:mod:`.provisioning`), state (:mod:`.state`), events
(:mod:`.events`) and gauges (:mod:`.gauges`). It is driven by :meth:`Autoscaler.step`: from a
daemon thread in Spark (:class:`ControlLoop`), or from simulated time in
:mod:`sparkscale_listener.testing.sim`. A step never raises: an exception in any module is logged,
reported as an ``error`` event, and the next step runs as usual.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from .checking import CheckContext
from .collection import MetricCollector
from .config import AutoscalerConfig
from .decisions import Decision, Evaluation, ScalingContext, ScalingRecord
from .evaluation import MetricEvaluator
from .events import AutoscalerEvent, EventDispatcher
from .gauges import GaugePublisher
from .metrics import MetricSample
from .policy import ScalingPolicy, in_excluded_period, scaling_record
from .provisioning import ProvisioningTracker
from .realization import ScalingRealizer
from .rollback import GuardOutcome, RollbackGuard
from .state import AutoscalerState, StateStore

log = logging.getLogger("sparkscale")

_HISTORY_DECISIONS = 1000

#: Called at the end of every tick with the autoscaler, the tick's sample and its decisions.
Observer = Callable[["Autoscaler", MetricSample, Sequence[Decision]], None]


@dataclass
class _Targets:
    """The executor targets the loop keeps between ticks."""

    current: int = 0
    initial: int | None = None  # None until the baseline is set
    window_start: float = math.inf  # no decision before the baseline is set
    last_scaling: ScalingRecord | None = None
    last_decision: Decision | None = None
    # Executors added by a scale-up that was rolled back: removed first, busy or not.
    bad_executors: set[str] = field(default_factory=set)
    # Live counts seen before the baseline, to tell when the start-up executors have settled.
    live_history: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=3))
    # The last scaling a checker rolled back (persisted), and the one found in the state store at
    # start: that one is not repeated within rollback.window.
    rolled_back: dict[str, Any] | None = None
    rolled_back_before_restart: dict[str, Any] | None = None
    restored: bool = False  # the guard's state came from the state store
    errors: int = 0
    last_error: str | None = None


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
    ) -> None:
        self.config = config
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
        self._t = _Targets()
        self.state = AutoscalerState(state_store, app_name, self._on_state_error)
        self.provisioning = ProvisioningTracker(config, self.state)
        self._restore_state()

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
            t = self._t
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
                "last_decision": decision_to_dict(t.last_decision) if t.last_decision else None,
                "last_scaling": asdict(t.last_scaling) if t.last_scaling else None,
                "provisioning_time_s": self.provisioning.time_s(),
                "blocked_queries": dict(self.policy.blocked_queries()),
                "healthy_target": self.guard.healthy_target,
                "errors": t.errors,
                "last_error": t.last_error,
            }

    def decisions(self) -> list[dict[str, Any]]:
        """Every decision so far (bounded to the last 1000), oldest first."""
        with self._lock:
            return [decision_to_dict(d) for d in self._decisions]

    def resume(self) -> None:
        """Lift a rollback pause or a stop after repeated rollbacks."""
        with self._lock:
            now = self.clock()
            self.guard.resume()
            self._t.rolled_back = self._t.rolled_back_before_restart = None
            self._persist_rollback_state()
            self._emit(AutoscalerEvent(now, "resume", "automatic scaling resumed by the user",
                                       details=self._details()))
            self._t.window_start = now + self.config.stabilization_interval_s

    def provisioning_time_s(self) -> float:
        """The learned request -> registered time (Flink's restart time)."""
        return self.provisioning.time_s()

    def close(self) -> None:
        for closer in (getattr(self.collector, "close", None), self.events.close, self.state.close):
            if closer is None:
                continue
            try:
                closer()
            except Exception:
                log.exception("sparkscale: error while closing")

    # ------------------------------------------------------------------ the tick
    def _tick(self, now: float) -> list[Decision]:
        sample = self.collector.collect(now)
        self._remember(sample)
        t = self._t
        if t.initial is None and not self._establish_baseline(now, sample.cluster.live_executors):
            return []
        self._follow_the_cluster(now, sample)
        decisions = self._check_last_scaling(now, sample)
        if self.guard.stopped or self.guard.paused(now):
            decisions.append(Decision(now, "none", t.current, t.current,
                                      f"paused: {self.guard.pause_reason or 'stopped'}"))
        else:
            decisions.append(self._decide_and_apply(now, sample))
        self._record(decisions, sample)
        return decisions

    def _follow_the_cluster(self, now: float, sample: MetricSample) -> None:
        """Note settled changes, and finish a scale-down that found busy executors (or extras
        found at start)."""
        t = self._t
        live = sample.cluster.live_executors
        window_start = self.provisioning.settle(now, live, t.current)
        if window_start is not None:
            t.window_start = window_start
        if self.config.mode == "recommend":
            t.current = live  # nothing is ever requested: the executors that run are the target
        elif live > t.current:
            t.bad_executors &= {e.executor_id for e in sample.cluster.live()}
            result = self.realizer.realize(t.current, t.bad_executors)
            if result.removed:
                log.info("sparkscale: removed executors %s to converge on target %d",
                         list(result.removed), t.current)

    def _decide_and_apply(self, now: float, sample: MetricSample) -> Decision:
        t = self._t
        context = self._context(now, sample)
        evaluation = self.evaluator.evaluate(list(self._history), context)
        decision = self.policy.decide(evaluation, context)
        for note in self.policy.last_notes():
            self._emit(AutoscalerEvent(now, "blocked", note, severity="warning", details=self._details()))
        if decision.action in ("scale_up", "scale_down") and decision.to_executors != t.current:
            return self._apply(now, decision, evaluation)
        if (self.config.mode == "reactive" and sample.cluster.live_executors < t.current
                and not self.provisioning.waiting):
            # Reactive mode re-asserts the full target after executor losses.
            self.realizer.baseline(t.current)
        return decision

    def _establish_baseline(self, now: float, live: int) -> bool:
        """Set the cluster manager's target once, at the start.

        Until something was requested, a kill would set the target to zero and nothing would ever
        be replaced (the empty-target trap), so the first call is always an absolute request. With
        no configured or restored target, wait until the executors the cluster manager started
        with have settled and keep that many.
        """
        t = self._t
        config = self.config
        # Recommend mode never touches the cluster: its target is whatever runs.
        recommend = config.mode == "recommend"
        restored = self.guard.healthy_target if t.restored and not recommend else None
        if config.mode == "reactive":
            wanted: int | None = config.max_executors
        elif restored is not None:
            wanted = restored
        else:
            wanted = None if recommend else config.initial_executors
        if wanted is None:
            t.live_history.append((now, live))
            settled = (len(t.live_history) >= 2 and live > 0
                       and all(n == live for _, n in t.live_history)
                       and now - t.live_history[0][0] >= min(config.interval_s, 3.0))
            waited = now - t.live_history[0][0]
            if not settled and waited < config.provisioning_timeout_s:
                return False
            wanted = live
        base = live if recommend else min(max(wanted, config.min_executors), config.max_executors)
        result = None if recommend else self.realizer.baseline(max(base, min(live, config.max_executors)))
        t.initial = base
        t.current = base
        if self.guard.healthy_target is None:
            self.guard.healthy_target = base
        t.window_start = now + config.stabilization_interval_s
        if base != live:
            # Extras are removed (idle ones) by the converge step; missing ones are awaited.
            record = ScalingRecord(now, "scale_up" if base > live else "scale_down", live, base, "baseline")
            self.provisioning.start(record, base, now)
            t.window_start = math.inf
        self._emit(AutoscalerEvent(
            now, "notice",
            f"baseline: {live} live executor(s), target {base}"
            + (f" (restored last healthy target {restored})" if restored is not None else "")
            + ("" if result is None or result.ok else f"; the request failed: {result.message}"),
            from_executors=live, to_executors=base, details=self._details()))
        self.state.store_target(t.current)
        return True

    def _context(self, now: float, sample: MetricSample) -> ScalingContext:
        t = self._t
        return ScalingContext(
            now=now,
            config=self.config,
            current_target=t.current,
            live_executors=sample.cluster.live_executors,
            pending_executors=max(0, self.realizer.requested_total - sample.cluster.live_executors),
            cores_per_executor=max(1, sample.cluster.cores_per_executor),
            window_start=t.window_start,
            provisioning_time_s=self.provisioning.time_s(),
            last_scaling=t.last_scaling,
        )

    def _apply(self, now: float, decision: Decision, evaluation: Evaluation) -> Decision:
        t = self._t
        config = self.config
        if config.mode == "recommend" or in_excluded_period(config, now):
            why = "recommend mode" if config.mode == "recommend" else "excluded period"
            self._emit(AutoscalerEvent(now, "recommendation", f"{decision.reason} (not applied: {why})",
                                       action=decision.action, from_executors=decision.from_executors,
                                       to_executors=decision.to_executors,
                                       details=self._details(decision)))
            return decision
        repeated = self._repeats_rolled_back(now, decision)
        if repeated:
            return replace(decision, reason=f"{decision.reason}; not applied: {repeated}")

        record = replace(scaling_record(decision, max(1, self._history[-1].cluster.cores_per_executor), now),
                         from_executors=t.current)
        # rate_before must be what the queries processed (counter deltas), the same measure the
        # checkers and the ineffective-scale-up test take after the change; the evaluation's
        # input rate is an arrival estimate that a long batch can inflate several-fold.
        processed = self._processed_rates(t.window_start)
        if processed:
            record = replace(record, rate_before={q: processed.get(q, r)
                                                  for q, r in record.rate_before.items()})
        result = self.realizer.realize(decision.to_executors)
        if not result.ok:
            self._emit(AutoscalerEvent(now, "error", f"{decision.action} to {decision.to_executors} "
                                       f"failed: {result.message}", action=decision.action,
                                       severity="error", details=self._details(decision)))
            return replace(decision, reason=f"{decision.reason}; not applied: {result.message}")
        healthy_before = t.current
        t.current = decision.to_executors
        t.last_scaling = record
        self.provisioning.start(record, result.requested_total, now)
        t.window_start = math.inf  # until the requested executors registered (+ stabilization)
        self.guard.watch(record, healthy_before)
        applied = replace(decision, applied=True)
        self._emit(AutoscalerEvent(now, "scaling", decision.reason, action=decision.action,
                                   from_executors=decision.from_executors,
                                   to_executors=decision.to_executors, details=self._details(applied)))
        self.state.record_scaling(now, decision.action, decision.from_executors, decision.to_executors,
                                  decision.reason)
        self.state.store_target(t.current)
        self._persist_rollback_state()
        return applied

    def _processed_rates(self, window_start: float) -> dict[str, float]:
        """Rows/s each query processed over the last metrics window (at or after window_start)."""
        last = self._history[-1]
        start = max(window_start, last.time - self.config.metrics_window_s)
        first = next((x for x in self._history if x.time >= start), None)
        if first is None or last.time - first.time <= 0:
            return {}
        dt = last.time - first.time
        return {qid: max(0, q.input_rows - first.queries[qid].input_rows) / dt
                for qid, q in last.queries.items() if qid in first.queries}

    # ------------------------------------------------------------------ checkers and rollback
    def _check_last_scaling(self, now: float, sample: MetricSample) -> list[Decision]:
        """Let the guard judge the scaling it watches; a rollback it asks for is realized here
        and returned as the tick's first decision."""
        scaling = self.guard.watching
        if scaling is None:
            return []
        t = self._t
        assert t.initial is not None
        # The sample of the tick that applied the action was collected before it: it is the
        # baseline, not a sample "since the action".
        before = next((x for x in reversed(self._history) if x.time <= scaling.time), None)
        context = CheckContext(now=now, config=self.config, scaling=scaling, before=before,
                               samples=[x for x in self._history if x.time > scaling.time],
                               requested_total=self.realizer.requested_total,
                               requested_at=scaling.time,
                               history=[x for x in self._history if x.time <= scaling.time])
        outcome = self.guard.observe(context, t.initial, t.current)
        if outcome.action == "healthy":
            self._persist_rollback_state()
        elif outcome.action == "failed":
            self._emit(AutoscalerEvent(now, "pause", outcome.reason, severity="error",
                                       details=self._details()))
            self._persist_rollback_state()
        elif outcome.action == "rollback":
            return [self._roll_back(now, outcome)]
        return []

    def _roll_back(self, now: float, outcome: GuardOutcome) -> Decision:
        t = self._t
        assert outcome.target is not None and outcome.unhealthy is not None
        target, checker = outcome.target, outcome.unhealthy.checker
        undone = t.last_scaling
        if undone is not None and undone.action in ("scale_up", "scale_down"):
            t.rolled_back = {"action": undone.action, "to": undone.to_executors, "time": now,
                             "checker": checker, "reason": outcome.unhealthy.reason}
        if undone is not None and undone.action == "scale_up" and self._history:
            # The executors that scale-up brought are the suspects: remove them, not the old ones.
            t.bad_executors = {e.executor_id for e in self._history[-1].cluster.live()
                               if e.added_time >= undone.time}
        record = ScalingRecord(now, "rollback", t.current, target, f"checker {checker}: "
                               f"{outcome.unhealthy.reason}")
        result = self.realizer.realize(target, t.bad_executors)
        from_target = t.current
        t.current = target
        t.last_scaling = record
        self.provisioning.start(record, result.requested_total, now)
        t.window_start = math.inf
        self.guard.watch_rollback(record)
        reason = f"rollback {from_target} -> {target} executors: {outcome.reason}"
        if not result.ok:
            reason += f"; the rollback request failed: {result.message}"
        self._emit(AutoscalerEvent(now, "rollback", reason, action="rollback",
                                   from_executors=from_target, to_executors=target,
                                   severity="warning" if result.ok else "error",
                                   details=self._details() | {"checker": checker}))
        self._emit(AutoscalerEvent(now, "stopped" if self.guard.stopped else "pause",
                                   self.guard.pause_reason or reason, severity="warning",
                                   details=self._details()))
        self.state.record_scaling(now, "rollback", from_target, target, reason)
        self.state.store_target(t.current)
        self._persist_rollback_state()
        return Decision(now, "rollback", from_target, target, reason, applied=result.ok)

    def _repeats_rolled_back(self, now: float, decision: Decision) -> str | None:
        """Why ``decision`` would repeat the scaling a checker rolled back before a driver restart
        (within rollback.window), or None. Within one run the pause (and, after repeated
        rollbacks, the stop) is what keeps a bad scaling from coming back; a restarted driver has
        no such pause left for `untilRestart`, and must not walk into the same failure."""
        undone = self._t.rolled_back_before_restart
        if not undone:
            return None
        if now - float(undone["time"]) > self.config.rollback_window_s:
            return None
        to = int(undone["to"])
        same = (decision.action == undone["action"]
                and (decision.to_executors >= to if decision.action == "scale_up"
                     else decision.to_executors <= to))
        if not same:
            return None
        return (f"{undone['action']} to {to} executors was rolled back {now - float(undone['time']):.0f}s "
                f"ago, before the driver restarted (checker {undone.get('checker')}: "
                f"{undone.get('reason')}); not repeated within rollback.window or until resume()")

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
        self._t.last_decision = decisions[-1]
        if self.gauges is not None:
            try:
                self.gauges.publish(sample, decisions[-1], self._t.current, self.realizer.requested_total,
                                    self.guard.stopped or self.guard.paused(sample.time))
            except Exception as exc:
                self._report_error(sample.time, "gauges", exc)
        for observer in self.observers:
            try:
                observer(self, sample, decisions)
            except Exception as exc:
                self._report_error(sample.time, f"observer {observer!r}", exc)

    def _emit(self, event: AutoscalerEvent) -> None:
        self.events.emit(event)

    def _details(self, decision: Decision | None = None) -> dict[str, Any]:
        details: dict[str, Any] = {"mode": self.config.mode, "app": self.app_name}
        if decision is not None and decision.evaluation is not None:
            details["queries"] = {
                q: {"name": e.name, "inputRate": round(e.input_rate, 3), "backlog": e.backlog,
                    "requiredSlots": round(e.required_slots, 3),
                    "utilization": None if e.utilization is None else round(e.utilization, 4)}
                for q, e in decision.evaluation.queries.items()}
            details["limitedBy"] = decision.limited_by
        return details

    def _report_error(self, now: float, where: str, exc: BaseException) -> None:
        self._t.errors += 1
        self._t.last_error = f"{where}: {type(exc).__name__}: {exc}"
        log.exception("sparkscale: error in %s (the query goes on; next tick as usual)", where)
        try:
            self._emit(AutoscalerEvent(now, "error", self._t.last_error, severity="error",
                                       details={"mode": self.config.mode, "where": where}))
        except Exception:
            log.exception("sparkscale: could not report the error")

    def _on_state_error(self, where: str, exc: BaseException) -> None:
        self._report_error(self.clock(), where, exc)

    # ------------------------------------------------------------------ persistence
    def _restore_state(self) -> None:
        guard_state = self.state.rollback_guard()
        if guard_state:
            self.guard.load_state(guard_state)
            self._t.restored = True
        rolled_back = self.state.rolled_back_scaling()
        if rolled_back is not None:
            self._t.rolled_back = self._t.rolled_back_before_restart = rolled_back

    def _persist_rollback_state(self) -> None:
        self.state.store_rollback_state(self.guard.to_state(), self._t.rolled_back)


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
