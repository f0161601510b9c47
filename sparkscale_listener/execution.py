"""Executing decisions: the baseline at start, scale-ups and scale-downs, rollbacks, and the
converge step that finishes a scale-down. Each is carried out through the realizer and recorded
where it must be: the executor targets, the rollback guard's watch, the provisioning tracker, the
state store and the events.

The control loop (:mod:`.control_loop`) decides *what* to do each tick; :class:`ScalingExecutor`
does it and keeps the targets that result.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .config import AutoscalerConfig
from .decisions import Decision, ScalingContext, ScalingRecord
from .events import AutoscalerEvent, EventDispatcher
from .metrics import MetricSample
from .policy import in_excluded_period, scaling_record
from .provisioning import ProvisioningTracker, Shortfall
from .realization import RealizationResult, ScalingRealizer
from .rollback import GuardOutcome, RollbackGuard
from .state import AutoscalerState

log = logging.getLogger("sparkscale")


@dataclass
class RequestFailure:
    """Requests to the cluster manager fail (a standalone Master restarting, a resource manager
    unreachable). Nothing is requested until ``retry_at``; then one request re-asserts the target,
    and the wait doubles after each failure (see :meth:`ScalingExecutor.backoff_s`)."""

    since: float
    what: str  # the first request that failed, e.g. "scale_up 1 -> 2"
    message: str  # the latest error
    attempts: int = 0
    retry_at: float = 0.0
    attempt_times: list[float] = field(default_factory=list)  # the last few, oldest first


_KEPT_ATTEMPTS = 20


@dataclass
class Targets:
    """The executor targets the loop keeps between ticks."""

    current: int = 0
    initial: int | None = None  # None until the baseline is set
    window_start: float = math.inf  # no decision before the baseline is set
    last_scaling: ScalingRecord | None = None
    # Executors added by a scale-up that was rolled back: removed first, busy or not.
    bad_executors: set[str] = field(default_factory=set)
    # Live counts seen before the baseline, to tell when the start-up executors have settled.
    live_history: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=3))
    # The last scaling a checker rolled back (persisted), and the one found in the state store at
    # start: that one is not repeated within rollback.window.
    rolled_back: dict[str, Any] | None = None
    rolled_back_before_restart: dict[str, Any] | None = None
    restored: bool = False  # the guard's state came from the state store
    # The cluster gave fewer executors than requested: scale-ups stop at what it gave until
    # capacity_retry_at (then one is tried again).
    capacity: Shortfall | None = None
    capacity_retry_at: float = 0.0
    # Requests to the cluster manager are failing: retried with backoff, not every tick.
    request_failure: RequestFailure | None = None


class ScalingExecutor:
    """Carries decisions out and keeps the executor targets (:class:`Targets`) they lead to."""

    def __init__(self, config: AutoscalerConfig, realizer: ScalingRealizer, guard: RollbackGuard,
                 events: EventDispatcher, state: AutoscalerState, provisioning: ProvisioningTracker,
                 app_name: str) -> None:
        self.config = config
        self.realizer = realizer
        self.guard = guard
        self.events = events
        self.state = state
        self.provisioning = provisioning
        self.app_name = app_name
        self.targets = Targets()

    def follow_the_cluster(self, now: float, sample: MetricSample) -> None:
        """Note a change that settled, and finish a scale-down that found busy executors (or
        extras found at start)."""
        t = self.targets
        live = sample.cluster.live_executors
        window_start = self.provisioning.settle(now, live, t.current, sample.cluster.live())
        if window_start is not None:
            t.window_start = window_start
        shortfall, self.provisioning.shortfall = self.provisioning.shortfall, None
        if shortfall is not None and self.config.mode != "recommend":
            self._hold_at_capacity(now, shortfall)
        if self.config.mode == "recommend":
            t.current = live  # nothing is ever requested: the executors that run are the target
        elif t.request_failure is not None:
            # No removal while the cluster manager fails requests: Spark marks executors it was
            # asked to kill as pending removal before asking the cluster manager, and a failed
            # ask leaves them idle for good; and the extras a recovered standalone Master starts
            # (it forgets the application's limit) may be what a failed scale-up asked for.
            self._retry_request(now)
        elif live > t.current:
            t.bad_executors &= {e.executor_id for e in sample.cluster.live()}
            result = self._realize(now, f"converge on {t.current} executors",
                                   lambda: self.realizer.realize(t.current, t.bad_executors))
            if result.removed:
                log.info("sparkscale: removed executors %s to converge on target %d",
                         list(result.removed), t.current)

    def reassert_after_losses(self, sample: MetricSample) -> None:
        """Reactive mode asks for its full target again after executor losses."""
        if (self.config.mode == "reactive" and sample.cluster.live_executors < self.targets.current
                and not self.provisioning.waiting and self.targets.request_failure is None):
            self._realize(sample.time, f"re-request {self.targets.current} executors",
                          lambda: self.realizer.baseline(self.targets.current))

    def resume(self, now: float) -> None:
        """The user lifted a pause: forget the rolled-back scaling, measure afresh."""
        self.guard.resume()
        self.targets.rolled_back = self.targets.rolled_back_before_restart = None
        self._persist_rollback_state()
        self.targets.window_start = now + self.config.stabilization_interval_s

    def judged(self, now: float, outcome: GuardOutcome, sample: MetricSample) -> list[Decision]:
        """Act on the guard's outcome for the watched scaling: the rollback decision, if any."""
        if outcome.action == "healthy":
            self._persist_rollback_state()
        elif outcome.action == "failed":
            self.events.emit(AutoscalerEvent(now, "pause", outcome.reason, severity="error",
                                             details=self.details()))
            self._persist_rollback_state()
        elif outcome.action == "rollback":
            return [self.roll_back(now, outcome, sample)]
        return []

    def establish_baseline(self, now: float, live: int) -> bool:
        """Set the cluster manager's target once, at the start.

        Until something was requested, a kill would set the target to zero and nothing would ever
        be replaced (the empty-target trap), so the first call is always an absolute request. With
        no configured or restored target, wait until the executors the cluster manager started
        with have settled and keep that many.
        """
        t = self.targets
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
        first = max(base, min(live, config.max_executors))
        result = None if recommend else self._realize(now, f"baseline of {first} executors",
                                                      lambda: self.realizer.baseline(first))
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
        restored_text = f" (restored last healthy target {restored})" if restored is not None else ""
        failed_text = "" if result is None or result.ok else f"; the request failed: {result.message}"
        self.events.emit(AutoscalerEvent(now, "notice", f"baseline: {live} live executor(s), target {base}"
                                         f"{restored_text}{failed_text}", from_executors=live,
                                         to_executors=base, details=self.details()))
        self.state.store_target(t.current)
        return True

    def apply(self, now: float, decision: Decision, context: ScalingContext) -> Decision:
        """Carry out a scale-up or scale-down the policy decided (or only publish it: recommend
        mode, excluded periods, a scaling rolled back before a restart); the decision as applied."""
        t = self.targets
        config = self.config
        if config.mode == "recommend" or in_excluded_period(config, now):
            why = "recommend mode" if config.mode == "recommend" else "excluded period"
            self.events.emit(AutoscalerEvent(now, "recommendation", f"{decision.reason} (not applied: {why})",
                                             action=decision.action, from_executors=decision.from_executors,
                                             to_executors=decision.to_executors,
                                             details=self.details(decision)))
            return decision
        repeated = self._repeats_rolled_back(now, decision)
        if repeated:
            return replace(decision, reason=f"{decision.reason}; not applied: {repeated}")
        decision = self._within_capacity(now, decision)
        if decision.to_executors == t.current:
            return decision
        waiting = self._request_wait(now)
        if waiting:
            return replace(decision, reason=f"{decision.reason}; not applied: {waiting}")

        record = replace(scaling_record(decision, context.slots_per_executor, now),
                         from_executors=t.current)
        # rate_before must be what the queries processed (counter deltas), the same measure the
        # checkers and the ineffective-scale-up test take after the change; the evaluation's
        # input rate is an arrival estimate that a long batch can inflate several-fold.
        processed = context.processed_rates
        if processed:
            record = replace(record, rate_before={q: processed.get(q, r)
                                                  for q, r in record.rate_before.items()})
        result = self._realize(now, f"{decision.action} {t.current} -> {decision.to_executors}",
                               lambda: self.realizer.realize(decision.to_executors))
        if not result.ok:
            # Reported (and the retry scheduled) by _realize; the policy decides afresh each tick.
            return replace(decision, reason=f"{decision.reason}; not applied: {self._request_wait(now)}")
        healthy_before = t.current
        t.current = decision.to_executors
        t.last_scaling = record
        self.provisioning.start(record, result.requested_total, now)
        t.window_start = math.inf  # until the requested executors registered (+ stabilization)
        self.guard.watch(record, healthy_before)
        applied = replace(decision, applied=True)
        self.events.emit(AutoscalerEvent(now, "scaling", decision.reason, action=decision.action,
                                         from_executors=decision.from_executors,
                                         to_executors=decision.to_executors, details=self.details(applied)))
        self.state.record_scaling(now, decision.action, decision.from_executors, decision.to_executors,
                                  decision.reason)
        self.state.store_target(t.current)
        self._persist_rollback_state()
        return applied

    def roll_back(self, now: float, outcome: GuardOutcome, sample: MetricSample) -> Decision:
        """Realize the rollback the guard asked for; the rollback decision."""
        t = self.targets
        assert outcome.target is not None and outcome.unhealthy is not None
        target, checker = outcome.target, outcome.unhealthy.checker
        undone = t.last_scaling
        if undone is not None and undone.action in ("scale_up", "scale_down"):
            t.rolled_back = {"action": undone.action, "to": undone.to_executors, "time": now,
                             "checker": checker, "reason": outcome.unhealthy.reason}
        if undone is not None and undone.action == "scale_up":
            # The executors that scale-up brought and whose tasks failed are the suspects: removed
            # first, busy or not. Others it brought are removed like any, when idle.
            t.bad_executors = {e.executor_id for e in sample.cluster.live()
                               if e.added_time >= undone.time and e.tasks_failed > 0}
        record = ScalingRecord(now, "rollback", t.current, target, f"checker {checker}: "
                               f"{outcome.unhealthy.reason}")
        result = (self._realize(now, f"rollback {t.current} -> {target}",
                                lambda: self.realizer.realize(target, t.bad_executors))
                  if t.request_failure is None else self._not_requested(now))
        from_target = t.current
        t.current = target
        t.last_scaling = record
        self.provisioning.start(record, result.requested_total, now)
        t.window_start = math.inf
        self.guard.watch_rollback(record)
        reason = f"rollback {from_target} -> {target} executors: {outcome.reason}"
        if not result.ok:
            reason += f"; the rollback request failed: {result.message}"
        self.events.emit(AutoscalerEvent(now, "rollback", reason, action="rollback",
                                         from_executors=from_target, to_executors=target,
                                         severity="warning" if result.ok else "error",
                                         details=self.details() | {"checker": checker}))
        self.events.emit(AutoscalerEvent(now, "stopped" if self.guard.stopped else "pause",
                                         self.guard.pause_reason or reason, severity="warning",
                                         details=self.details()))
        self.state.record_scaling(now, "rollback", from_target, target, reason)
        self.state.store_target(t.current)
        self._persist_rollback_state()
        return Decision(now, "rollback", from_target, target, reason, applied=result.ok)

    def _repeats_rolled_back(self, now: float, decision: Decision) -> str | None:
        """Why ``decision`` would repeat the scaling a checker rolled back before a driver restart
        (within rollback.window), or None. Within one run the pause (and, after repeated
        rollbacks, the stop) is what keeps a bad scaling from coming back; a restarted driver has
        no such pause left for `untilRestart`, and must not walk into the same failure."""
        undone = self.targets.rolled_back_before_restart
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

    def _hold_at_capacity(self, now: float, shortfall: Shortfall) -> None:
        """The requested executors did not all arrive: hold the target at what the cluster gave
        (cancelling the launches still hanging), report it, and try for more later."""
        t = self.targets
        if shortfall.live >= t.current:
            return
        held = max(shortfall.live, self.config.min_executors)
        before = t.current
        t.current = held
        t.capacity = shortfall
        t.capacity_retry_at = now + self.config.capacity_retry_s
        result = (self._realize(now, f"hold at {held} executors", lambda: self.realizer.realize(held))
                  if t.request_failure is None else self._not_requested(now))
        failed = "" if result.ok else f"; lowering the request failed: {result.message}"
        self.events.emit(AutoscalerEvent(
            now, "capacity", f"capacity limit: the cluster gave {shortfall.live} of {shortfall.requested} "
            f"requested executors within provisioningTimeout={self.config.provisioning_timeout_s:g}s "
            f"(a full queue or a quota?); target held at {held}, asking for more again in "
            f"{self.config.capacity_retry_s:g}s{failed}", from_executors=before, to_executors=held,
            severity="warning", details=self.details() | {"situation": "capacity-limit"}))
        self.state.store_target(t.current)

    def _within_capacity(self, now: float, decision: Decision) -> Decision:
        """A scale-up capped at the capacity the cluster showed, until the retry time."""
        t = self.targets
        if t.capacity is None or decision.action != "scale_up":
            return decision
        if now >= t.capacity_retry_at:
            self.events.emit(AutoscalerEvent(now, "notice", f"capacity limit of {t.capacity.live} executors "
                                             f"expired: asking for {decision.to_executors} again",
                                             details=self.details()))
            t.capacity = None
            return decision
        limit = t.capacity.live
        if decision.to_executors <= limit:
            return decision
        why = (f"capacity limit: the cluster gave {limit} of {t.capacity.requested} requested executors "
               f"at t={t.capacity.time:.0f}s; retrying in {t.capacity_retry_at - now:.0f}s")
        if limit <= t.current:
            return replace(decision, to_executors=t.current, reason=f"{decision.reason}; not applied: {why}",
                           limited_by="capacity")
        return replace(decision, to_executors=limit, reason=f"{decision.reason}; limited by {why}",
                       limited_by="capacity")

    # ------------------------------------------------------------------ failing requests
    def backoff_s(self, attempts: int) -> float:
        """The wait after ``attempts`` failed requests: twice the interval, doubling each time, at
        most provisioningTimeout (never below the interval): a Master restart or a resource
        manager failover takes seconds to minutes, and nothing is gained by asking every tick."""
        cap = max(self.config.interval_s, self.config.provisioning_timeout_s)
        return min(cap, self.config.interval_s * 2.0 ** min(attempts, 30))

    def _realize(self, now: float, what: str, call: Callable[[], RealizationResult]) -> RealizationResult:
        """One request to the cluster manager through the realizer. An exception (a Py4J error
        when the standalone Master or the resource manager cannot be reached) is a failed
        request like a refused one: reported, and retried with backoff, never raised."""
        try:
            result = call()
        except Exception as exc:
            result = RealizationResult(requested_total=self._requested_total(), ok=False,
                                       message=error_text(exc))
        if result.ok:
            self._request_succeeded(now)
        else:
            self._request_failed(now, what, result.message or "the request was not accepted")
        return result

    def _requested_total(self) -> int:
        try:
            return self.realizer.requested_total
        except Exception:
            return 0

    def _not_requested(self, now: float) -> RealizationResult:
        """Stands for a request not made while requests fail (the retry will carry the target)."""
        return RealizationResult(requested_total=self._requested_total(), ok=False,
                                 message=self._request_wait(now) or "requests are failing")

    def _request_failed(self, now: float, what: str, message: str) -> None:
        t = self.targets
        failure = t.request_failure
        if failure is None:
            failure = t.request_failure = RequestFailure(since=now, what=what, message=message)
        failure.attempts += 1
        failure.message = message
        failure.attempt_times = [*failure.attempt_times, now][-_KEPT_ATTEMPTS:]
        delay = self.backoff_s(failure.attempts)
        failure.retry_at = now + delay
        first = failure.attempts == 1
        what_text = what if first else f"{failure.what} (retry {failure.attempts - 1})"
        # One situation for every failed attempt: the dispatcher reports repeats once per throttle
        # interval, the log and status() have each one.
        self.events.emit(AutoscalerEvent(
            now, "notice", f"the cluster manager did not accept {what_text}: {message}; the queries go "
            f"on with the executors they have; next attempt in {delay:g}s (backing off to at most "
            f"{self.backoff_s(10**6):g}s)", severity="error" if first else "warning",
            details=self.details() | {"situation": "cluster-manager-unavailable",
                                      "attempts": failure.attempts, "retryInS": delay}))

    def _request_succeeded(self, now: float) -> None:
        failure = self.targets.request_failure
        if failure is None:
            return
        self.targets.request_failure = None
        self.events.emit(AutoscalerEvent(
            now, "notice", f"the cluster manager accepts requests again (target "
            f"{self.targets.current} executors) after {now - failure.since:.0f}s and "
            f"{failure.attempts} failed attempt(s) since {failure.what}", details=self.details()
            | {"situation": "cluster-manager-available", "attempts": failure.attempts}))

    def _request_wait(self, now: float) -> str | None:
        """Why no request is made now (requests are failing and the retry is not due), or None."""
        failure = self.targets.request_failure
        if failure is None:
            return None
        return (f"the cluster manager did not accept the last request ({failure.message}); "
                f"{failure.attempts} failed attempt(s) since {failure.what} "
                f"{now - failure.since:.0f}s ago, next in {max(0.0, failure.retry_at - now):.0f}s")

    def _retry_request(self, now: float) -> None:
        """Once the wait is over, re-assert the current target: a request only, nothing removed
        (the baseline call). Whatever was wanted (a scale-up, a rollback's removals) follows on
        this or the next tick once it is accepted."""
        failure = self.targets.request_failure
        if failure is None or now < failure.retry_at:
            return
        target = self.targets.current
        self._realize(now, f"executor target {target}", lambda: self.realizer.baseline(target))

    def request_failure(self, now: float) -> dict[str, Any] | None:
        """Requests to the cluster manager failing (for status()), or None."""
        f = self.targets.request_failure
        if f is None:
            return None
        return {"since": f.since, "first_request": f.what, "message": f.message, "attempts": f.attempts,
                "attempt_times": list(f.attempt_times), "retry_in_s": max(0.0, f.retry_at - now)}

    def capacity_limit(self, now: float) -> dict[str, Any] | None:
        """The capacity limit in force (for status()), or None."""
        c = self.targets.capacity
        if c is None:
            return None
        return {"executors": c.live, "requested": c.requested, "since": c.time,
                "retry_in_s": max(0.0, self.targets.capacity_retry_at - now)}

    def details(self, decision: Decision | None = None) -> dict[str, Any]:
        details: dict[str, Any] = {"mode": self.config.mode, "app": self.app_name}
        if decision is not None and decision.evaluation is not None:
            details["queries"] = {
                q: {"name": e.name, "inputRate": round(e.input_rate, 3), "backlog": e.backlog,
                    "requiredSlots": round(e.required_slots, 3),
                    "utilization": None if e.utilization is None else round(e.utilization, 4)}
                for q, e in decision.evaluation.queries.items()}
            details["limitedBy"] = decision.limited_by
        return details

    # ------------------------------------------------------------------ persistence
    def restore(self) -> None:
        """Start from what a previous driver of this application stored (before the baseline)."""
        guard_state = self.state.rollback_guard()
        if guard_state:
            self.guard.load_state(guard_state)
            self.targets.restored = True
        if self.guard.healthy_target is None:
            stored = self.state.stored_target()
            if stored is not None:  # a store written before the guard kept its state
                self.guard.healthy_target = stored
                self.targets.restored = True
        rolled_back = self.state.rolled_back_scaling()
        if rolled_back is not None:
            self.targets.rolled_back = self.targets.rolled_back_before_restart = rolled_back

    def _persist_rollback_state(self) -> None:
        self.state.store_rollback_state(self.guard.to_state(), self.targets.rolled_back)


def processed_rates(history: Sequence[MetricSample], window_start: float,
                metrics_window_s: float) -> dict[str, float]:
    """Rows/s each query processed over the last metrics window (at or after window_start)."""
    last = history[-1]
    start = max(window_start, last.time - metrics_window_s)
    first = next((x for x in history if x.time >= start), None)
    if first is None or last.time - first.time <= 0:
        return {}
    dt = last.time - first.time
    return {qid: max(0, q.input_rows - first.queries[qid].input_rows) / dt
            for qid, q in last.queries.items() if qid in first.queries}


def error_text(exc: BaseException) -> str:
    """A one-line account of a failed request. A Py4J error's text is the whole Java stack
    trace; the innermost cause says what happened (e.g. "Connection refused")."""
    java = getattr(exc, "java_exception", None)
    if java is not None:
        try:
            parts = [str(java.toString())]
            cause = java.getCause()
            while cause is not None and len(parts) < 5:
                parts.append(str(cause.toString()))
                cause = cause.getCause()
            return " <- ".join(p.strip() for p in parts)[:500]
        except Exception:
            pass  # the JVM may be gone: fall back to the text
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {' '.join(lines[:2])}"[:500]
