"""The control loop: collect -> check -> evaluate -> decide -> realize, every interval.

:class:`Autoscaler` owns one application's executor target. It wires the pluggable modules
(collector, evaluator, policy, checkers, realizer, state store, event handlers) together and is
driven by :meth:`Autoscaler.step` — from a daemon thread in Spark (:class:`ControlLoop`), or from
simulated time in :mod:`sparkscale_listener.sim`. A step never raises: an exception in any
module is logged, reported as an ``error`` event, and the next step runs as usual.
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

from .checking import CheckContext, CheckResult, RollbackGuard
from .collection import MetricCollector
from .config import AutoscalerConfig
from .decisions import Decision, Evaluation, ScalingContext, ScalingRecord
from .evaluation import MetricEvaluator
from .events import AutoscalerEvent, EventDispatcher
from .metrics import MetricSample
from .policy import ScalingPolicy, in_excluded_period, next_window_start, scaling_record
from .realization import ScalingRealizer
from .state import StateStore

log = logging.getLogger("sparkscale")

APP_SCOPE = "_app"
DEFAULT_PROVISIONING_TIME_S = 10.0
_HISTORY_DECISIONS = 1000


@dataclass
class _PendingChange:
    """An applied change whose requested executors have not all registered yet."""

    record: ScalingRecord
    requested_total: int
    requested_at: float


@dataclass
class _Status:
    target: int = 0
    initial_target: int | None = None
    pending_change: _PendingChange | None = None
    window_start: float = math.inf  # no decision before the baseline is set
    last_scaling: ScalingRecord | None = None
    last_decision: Decision | None = None
    provisioning_observations: list[float] = field(default_factory=list)
    errors: int = 0
    last_error: str | None = None
    # The last scaling a checker rolled back (persisted), and the one found in the state store at
    # start: that one is not repeated within rollback.window.
    rolled_back: dict[str, Any] | None = None
    rolled_back_before_restart: dict[str, Any] | None = None
    # Executors added by a scale-up that was rolled back: removed first, busy or not.
    bad_executors: set[str] = field(default_factory=set)
    live_history: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=3))


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
        gauges: Callable[[str, float], None] | None = None,
        observers: Sequence[Callable[[Autoscaler, MetricSample, Decision], None]] = (),
    ) -> None:
        self.config = config
        self.collector = collector
        self.evaluator = evaluator
        self.policy = policy
        self.realizer = realizer
        self.guard = guard
        self.events = events
        self.state_store = state_store
        self.app_name = app_name
        self.clock = clock
        self._gauges = gauges
        # Called at the end of every tick (e.g. the Spark UI tab's publisher); errors are reported.
        self.observers = list(observers)
        self._lock = threading.RLock()
        self._history: deque[MetricSample] = deque()
        self._decisions: deque[Decision] = deque(maxlen=_HISTORY_DECISIONS)
        self._s = _Status()
        self._restore_state()

    # ------------------------------------------------------------------ public API
    def step(self) -> Decision | None:
        """One control tick. Never raises."""
        with self._lock:
            now = self.clock()
            try:
                return self._step(now)
            except Exception as exc:  # the user's query must never suffer for our bug
                self._report_error(now, "control loop", exc)
                return None

    def status(self) -> dict[str, Any]:
        with self._lock:
            s = self._s
            live = self._history[-1].cluster.live_executors if self._history else 0
            now = self.clock()
            return {
                "mode": self.config.mode,
                "target_executors": s.target,
                "initial_executors": s.initial_target,
                "live_executors": live,
                "pending_executors": max(0, self.realizer.requested_total - live),
                "paused": self.guard.paused(now) or self.guard.stopped,
                "pause_reason": self.guard.pause_reason,
                "stopped": self.guard.stopped,
                "last_decision": decision_to_dict(s.last_decision) if s.last_decision else None,
                "last_scaling": asdict(s.last_scaling) if s.last_scaling else None,
                "provisioning_time_s": self.provisioning_time_s(),
                "blocked_queries": dict(self.policy.blocked_queries()),
                "healthy_target": self.guard.healthy_target,
                "errors": s.errors,
                "last_error": s.last_error,
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
            self._s.rolled_back = self._s.rolled_back_before_restart = None
            self._persist_rollback_state()
            self._emit(AutoscalerEvent(now, "resume", "automatic scaling resumed by the user",
                                       details=self._details()))
            self._s.window_start = now + self.config.stabilization_interval_s

    def provisioning_time_s(self) -> float:
        """Median of the recent request -> registered observations (Flink's restart time)."""
        obs = sorted(self._s.provisioning_observations[-10:])
        return obs[len(obs) // 2] if obs else DEFAULT_PROVISIONING_TIME_S

    def close(self) -> None:
        for closer in (getattr(self.collector, "close", None), self.events.close, self.state_store.close):
            if closer is None:
                continue
            try:
                closer()
            except Exception:
                log.exception("sparkscale: error while closing")

    # ------------------------------------------------------------------ the tick
    def _step(self, now: float) -> Decision | None:
        sample = self.collector.collect(now)
        self._remember(sample)
        live = sample.cluster.live_executors
        s = self._s

        if s.initial_target is None and not self._establish_baseline(now, live):
            return None

        self._track_provisioning(now, live)
        if self.config.mode == "recommend":
            s.target = live  # nothing is ever requested: the executors that run are the target
        # Converge: finish a scale-down that found busy executors (or extras found at start).
        elif live > s.target:
            s.bad_executors &= {e.executor_id for e in sample.cluster.live()}
            result = self.realizer.realize(s.target, s.bad_executors)
            if result.removed:
                log.info("sparkscale: removed executors %s to converge on target %d",
                         list(result.removed), s.target)
        self._check_scaling(now, sample)

        if self.guard.stopped or self.guard.paused(now):
            decision = Decision(now, "none", s.target, s.target,
                                f"paused: {self.guard.pause_reason or 'stopped'}")
            return self._record(decision, sample)

        context = self._context(now, sample)
        evaluation = self.evaluator.evaluate(list(self._history), context)
        decision = self.policy.decide(evaluation, context)
        for note in self.policy.last_notes():
            self._emit(AutoscalerEvent(now, "blocked", note, severity="warning", details=self._details()))
        if decision.action in ("scale_up", "scale_down") and decision.to_executors != s.target:
            decision = self._apply(now, decision, evaluation)
        elif self.config.mode == "reactive" and live < s.target and s.pending_change is None:
            # Reactive mode re-asserts the full target after executor losses.
            self.realizer.baseline(s.target)
        return self._record(decision, sample)

    def _establish_baseline(self, now: float, live: int) -> bool:
        """Set the cluster manager's target once, at the start.

        Until something was requested, a kill would set the target to zero and nothing would ever
        be replaced (the empty-target trap), so the first call is always an absolute request. With
        no configured or restored target, wait until the executors the cluster manager started
        with have settled and keep that many.
        """
        s = self._s
        config = self.config
        # Recommend mode never touches the cluster: its target is whatever runs.
        recommend = config.mode == "recommend"
        restored = self.guard.healthy_target if self._restored and not recommend else None
        if config.mode == "reactive":
            wanted: int | None = config.max_executors
        elif restored is not None:
            wanted = restored
        else:
            wanted = None if recommend else config.initial_executors
        if wanted is None:
            s.live_history.append((now, live))
            settled = (len(s.live_history) >= 2 and live > 0
                       and all(n == live for _, n in s.live_history)
                       and now - s.live_history[0][0] >= min(config.interval_s, 3.0))
            waited = now - s.live_history[0][0]
            if not settled and waited < config.provisioning_timeout_s:
                return False
            wanted = live
        base = live if recommend else min(max(wanted, config.min_executors), config.max_executors)
        result = None if recommend else self.realizer.baseline(max(base, min(live, config.max_executors)))
        s.initial_target = base
        s.target = base
        if self.guard.healthy_target is None:
            self.guard.healthy_target = base
        s.window_start = now + config.stabilization_interval_s
        if base != live:
            # Extras are removed (idle ones) by the converge step; missing ones are awaited.
            record = ScalingRecord(now, "scale_up" if base > live else "scale_down", live, base, "baseline")
            s.pending_change = _PendingChange(record, base, now)
            s.window_start = math.inf
        self._emit(AutoscalerEvent(
            now, "notice",
            f"baseline: {live} live executor(s), target {base}"
            + (f" (restored last healthy target {restored})" if restored is not None else "")
            + ("" if result is None or result.ok else f"; the request failed: {result.message}"),
            from_executors=live, to_executors=base, details=self._details()))
        self._persist_target()
        return True

    def _context(self, now: float, sample: MetricSample) -> ScalingContext:
        s = self._s
        return ScalingContext(
            now=now,
            config=self.config,
            current_target=s.target,
            live_executors=sample.cluster.live_executors,
            pending_executors=max(0, self.realizer.requested_total - sample.cluster.live_executors),
            cores_per_executor=max(1, sample.cluster.cores_per_executor),
            window_start=s.window_start,
            provisioning_time_s=self.provisioning_time_s(),
            last_scaling=s.last_scaling,
        )

    def _apply(self, now: float, decision: Decision, evaluation: Evaluation) -> Decision:
        s = self._s
        config = self.config
        excluded = in_excluded_period(config, now)
        if config.mode == "recommend" or excluded:
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
                         from_executors=s.target)
        # rate_before must be what the queries processed (counter deltas), the same measure the
        # checkers and the ineffective-scale-up test take after the change; the evaluation's
        # input rate is an arrival estimate that a long batch can inflate several-fold.
        processed = self._processed_rates(s.window_start)
        if processed:
            record = replace(record, rate_before={q: processed.get(q, r)
                                                  for q, r in record.rate_before.items()})
        result = self.realizer.realize(decision.to_executors)
        if not result.ok:
            self._emit(AutoscalerEvent(now, "error", f"{decision.action} to {decision.to_executors} "
                                       f"failed: {result.message}", action=decision.action,
                                       severity="error", details=self._details(decision)))
            return replace(decision, reason=f"{decision.reason}; not applied: {result.message}")
        healthy_before = s.target
        s.target = decision.to_executors
        s.last_scaling = record
        s.pending_change = _PendingChange(record, result.requested_total, now)
        s.window_start = math.inf  # until the requested executors registered (+ stabilization)
        self.guard.watch(record, healthy_before)
        applied = replace(decision, applied=True)
        self._emit(AutoscalerEvent(now, "scaling", decision.reason, action=decision.action,
                                   from_executors=decision.from_executors,
                                   to_executors=decision.to_executors, details=self._details(applied)))
        self._store_append("scaling", {"time": now, "action": decision.action,
                                       "from": decision.from_executors, "to": decision.to_executors,
                                       "reason": decision.reason})
        self._persist_target()
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
    def _check_scaling(self, now: float, sample: MetricSample) -> None:
        scaling = self.guard.watching
        if scaling is None:
            return
        # The sample of the tick that applied the action was collected before it: it is the
        # baseline, not a sample "since the action".
        samples = [x for x in self._history if x.time > scaling.time]
        before = next((x for x in reversed(self._history) if x.time <= scaling.time), None)
        context = CheckContext(now=now, config=self.config, scaling=scaling, before=before,
                               samples=samples, requested_total=self.realizer.requested_total,
                               requested_at=scaling.time,
                               history=[x for x in self._history if x.time <= scaling.time])
        results = self.guard.evaluate(context)
        verdict = self.guard.verdict(results)
        if verdict is None:
            if self.guard.watching is None:  # the watch ended healthy
                self._persist_rollback_state()
            return
        self._rollback(now, verdict)

    def _rollback(self, now: float, verdict: CheckResult) -> None:
        s = self._s
        assert s.initial_target is not None
        target = self.guard.rollback_target(s.initial_target)
        if self.guard.last_judged_rollback or target == s.target:
            # A failing rollback (or nothing to roll back to) is reported and paused, never chained.
            why = ("still unhealthy after the rollback" if self.guard.last_judged_rollback
                   else f"already at the rollback target {target}")
            self.guard.pause(now, f"checker {verdict.checker}: {verdict.reason}; {why}")
            self._emit(AutoscalerEvent(
                now, "pause", f"checker {verdict.checker} found the job unhealthy ({verdict.reason}), "
                f"{why}; automatic scaling paused", severity="error", details=self._details()))
            self._persist_rollback_state()
            return
        self.guard.record_rollback(now, verdict)
        undone = s.last_scaling
        if undone is not None and undone.action in ("scale_up", "scale_down"):
            s.rolled_back = {"action": undone.action, "to": undone.to_executors, "time": now,
                             "checker": verdict.checker, "reason": verdict.reason}
        record = ScalingRecord(now, "rollback", s.target, target,
                               f"checker {verdict.checker}: {verdict.reason}")
        if undone is not None and undone.action == "scale_up" and self._history:
            # The executors that scale-up brought are the suspects: remove them, not the old ones.
            s.bad_executors = {e.executor_id for e in self._history[-1].cluster.live()
                               if e.added_time >= undone.time}
        result = self.realizer.realize(target, s.bad_executors)
        from_target = s.target
        s.target = target
        s.last_scaling = record
        s.pending_change = _PendingChange(record, result.requested_total, now)
        s.window_start = math.inf
        self.guard.watch_rollback(record)
        reason = (f"rollback {from_target} -> {target} executors: checker {verdict.checker} found the "
                  f"scaling unhealthy: {verdict.reason}")
        if not result.ok:
            reason += f"; the rollback request failed: {result.message}"
        self._emit(AutoscalerEvent(now, "rollback", reason, action="rollback",
                                   from_executors=from_target, to_executors=target,
                                   severity="warning" if result.ok else "error",
                                   details=self._details() | {"checker": verdict.checker}))
        pause_kind = "stopped" if self.guard.stopped else "pause"
        self._emit(AutoscalerEvent(now, pause_kind, self.guard.pause_reason or reason,
                                   severity="warning", details=self._details()))
        self._decisions.append(Decision(now, "rollback", from_target, target, reason, applied=result.ok))
        self._store_append("scaling", {"time": now, "action": "rollback", "from": from_target,
                                       "to": target, "reason": reason})
        self._persist_target()
        self._persist_rollback_state()

    def _repeats_rolled_back(self, now: float, decision: Decision) -> str | None:
        """Why ``decision`` would repeat the scaling a checker rolled back before a driver restart
        (within rollback.window), or None. Within one run the pause (and, after repeated
        rollbacks, the stop) is what keeps a bad scaling from coming back; a restarted driver has
        no such pause left for `untilRestart`, and must not walk into the same failure."""
        undone = self._s.rolled_back_before_restart
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
    def _track_provisioning(self, now: float, live: int) -> None:
        """Learn request -> registered time; open the next window once executors have settled."""
        s = self._s
        change = s.pending_change
        if change is None:
            return
        scaled_up = change.record.to_executors > change.record.from_executors
        arrived = live >= change.requested_total if scaled_up else live <= s.target
        timed_out = now - change.requested_at >= self.config.provisioning_timeout_s
        if not (arrived or timed_out):
            return
        if arrived and scaled_up:
            took = now - change.requested_at
            s.provisioning_observations.append(took)
            s.provisioning_observations = s.provisioning_observations[-50:]
            self._store_append("provisioning", {"time": now, "seconds": took,
                                                "executors": change.record.to_executors})
        s.pending_change = None
        s.window_start = next_window_start(self.config, change.requested_at, now if arrived else None, now)

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

    def _record(self, decision: Decision, sample: MetricSample) -> Decision:
        self._s.last_decision = decision
        self._decisions.append(decision)
        self._publish_gauges(decision, sample)
        for observer in self.observers:
            try:
                observer(self, sample, decision)
            except Exception as exc:
                self._report_error(sample.time, f"observer {observer!r}", exc)
        return decision

    def _publish_gauges(self, decision: Decision, sample: MetricSample) -> None:
        if self._gauges is None:
            return
        try:
            now = sample.time
            live = sample.cluster.live_executors
            ev = decision.evaluation
            self._gauges("targetExecutors", float(self._s.target))
            self._gauges("liveExecutors", float(live))
            self._gauges("pendingExecutors", float(max(0, self.realizer.requested_total - live)))
            self._gauges("paused", 1.0 if (self.guard.stopped or self.guard.paused(now)) else 0.0)
            if ev is not None and ev.utilization is not None:
                self._gauges("utilization", float(ev.utilization))
            total = 0.0
            for q in sample.queries.values():
                if q.backlog is not None:
                    total += q.backlog
                    self._gauges(f"backlog.{q.name or q.query_id}", float(q.backlog))
            self._gauges("backlog", total)
        except Exception as exc:
            self._report_error(sample.time, "gauges", exc)

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
        self._s.errors += 1
        self._s.last_error = f"{where}: {type(exc).__name__}: {exc}"
        log.exception("sparkscale: error in %s (the query goes on; next tick as usual)", where)
        try:
            self._emit(AutoscalerEvent(now, "error", self._s.last_error, severity="error",
                                       details={"mode": self.config.mode, "where": where}))
        except Exception:
            log.exception("sparkscale: could not report the error")

    # ------------------------------------------------------------------ persistence
    _restored = False

    def _restore_state(self) -> None:
        try:
            guard_state = self.state_store.get(self.app_name, APP_SCOPE, "guard")
            if guard_state:
                self.guard.load_state(guard_state)
                self._restored = True
            rolled_back = self.state_store.get(self.app_name, APP_SCOPE, "rolledBack")
            if isinstance(rolled_back, dict) and {"action", "to", "time"} <= set(rolled_back):
                self._s.rolled_back = self._s.rolled_back_before_restart = rolled_back
            obs = self.state_store.records(self.app_name, APP_SCOPE, "provisioning", limit=10)
            self._s.provisioning_observations = [float(r["seconds"]) for r in obs if "seconds" in r]
        except Exception as exc:
            self._report_error(self.clock(), "state store (restore)", exc)

    def _persist_rollback_state(self) -> None:
        try:
            self.state_store.put(self.app_name, APP_SCOPE, "guard", self.guard.to_state())
            self.state_store.put(self.app_name, APP_SCOPE, "rolledBack", self._s.rolled_back)
        except Exception as exc:
            self._report_error(self.clock(), "state store", exc)

    def _persist_target(self) -> None:
        try:
            self.state_store.put(self.app_name, APP_SCOPE, "target", self._s.target)
        except Exception as exc:
            self._report_error(self.clock(), "state store", exc)

    def _store_append(self, kind: str, record: dict[str, Any]) -> None:
        try:
            self.state_store.append(self.app_name, APP_SCOPE, kind, record)
        except Exception as exc:
            self._report_error(self.clock(), "state store", exc)


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
