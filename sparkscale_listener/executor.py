"""Executing decisions: the baseline at start, scale-ups and scale-downs, rollbacks, and the
converge step that finishes a scale-down. Each is carried out through the realizer (by way of the
:class:`~sparkscale_listener.realize.requests.RequestGuard`, which backs off while the cluster
manager fails requests) and recorded where it must be: the executor targets, the rollback guard's
watch, the provisioning tracker, the capacity limit, the state and the events.

The control loop (:mod:`.control_loop`) decides *what* to do each tick; :class:`ScalingExecutor`
does it and keeps the targets that result.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Collection
from dataclasses import dataclass, field, replace
from typing import Any

from .check.guard import GuardOutcome, RollbackGuard
from .config.core import AutoscalerConfig, Mode
from .decisions import Decision, ScalingContext, ScalingRecord
from .metrics import MetricSample
from .observe.events import AutoscalerEvent, EventDispatcher
from .policy import in_excluded_period, scaling_record
from .realize.capacity import CapacityLimit, Shortfall
from .realize.provisioning import ProvisioningTracker
from .realize.realizer import RealizationResult, ScalingRealizer
from .realize.requests import RequestGuard
from .state.autoscaler_state import AutoscalerState

log = logging.getLogger("sparkscale")


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
    waiting_since: float | None = None  # the first tick without a baseline
    # The last scaling a checker rolled back (persisted), and the one found in the state store at
    # start: that one is not repeated within rollback.window.
    rolled_back: dict[str, Any] | None = None
    rolled_back_before_restart: dict[str, Any] | None = None
    restored: bool = False  # the guard's state came from the state store


def scaling_details(config: AutoscalerConfig, app_name: str,
                    decision: Decision | None = None) -> dict[str, Any]:
    """The figures an event carries beside its message: the mode, the application and, of a decision,
    each query's load, what limited it, its explanation and predictions."""
    details: dict[str, Any] = {"mode": config.mode, "app": app_name}
    if decision is not None and decision.evaluation is not None:
        details["queries"] = {
            q: {"name": e.name, "inputRate": round(e.input_rate, 3), "backlog": e.backlog,
                "requiredSlots": round(e.required_slots, 3),
                "utilization": None if e.utilization is None else round(e.utilization, 4)}
            for q, e in decision.evaluation.queries.items()}
        details["limitedBy"] = decision.limited_by
    if decision is not None and decision.details:
        details["explanation"] = decision.details
    if decision is not None and decision.predictions:
        details["predictions"] = {q: p.summary() for q, p in decision.predictions.items()}
    return details


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
        self.requests = RequestGuard(config, realizer, events, self.details)
        self.capacity = CapacityLimit(config)

    def _realize(self, target: int, remove_first: Collection[str] = ()) -> RealizationResult:
        """The realizer's move towards ``target``; the executors it removed are noted as ours (a
        decommission of any other during a scale-up's wait is the cluster's, see provisioning)."""
        result = self.realizer.realize(target, remove_first)
        self.provisioning.removed_by_us(result.removed)
        return result

    def follow_the_cluster(self, now: float, sample: MetricSample) -> None:
        """Note a change that settled, and finish a scale-down that found busy executors (or
        extras found at start)."""
        t = self.targets
        live = sample.cluster.live_executors
        settled = self.provisioning.settle(now, live, t.current, sample.cluster.executors)
        if settled is not None:
            t.window_start = settled.window_start
            if settled.shortfall is not None and self.config.mode is not Mode.RECOMMEND:
                self._hold_at_capacity(now, settled.shortfall)
        if self.config.mode is Mode.RECOMMEND:
            t.current = live  # nothing is ever requested: the executors that run are the target
        elif self.requests.failure is not None:
            # No removal while the cluster manager fails requests: Spark marks executors it was
            # asked to kill as pending removal before asking the cluster manager, and a failed
            # ask leaves them idle for good; and the extras a recovered standalone Master starts
            # (it forgets the application's limit) may be what a failed scale-up asked for. Once
            # the wait is over, one request re-asserts the target (nothing removed); whatever was
            # wanted follows once it is accepted.
            if self.requests.retry_due(now):
                target = t.current
                self.requests.request(now, f"executor target {target}",
                                      lambda: self.realizer.baseline(target))
        elif live > t.current:
            t.bad_executors &= {e.executor_id for e in sample.cluster.live()}
            result = self.requests.request(now, f"converge on {t.current} executors",
                                           lambda: self._realize(t.current, t.bad_executors))
            if result.removed:
                log.info("removed executors %s to converge on target %d",
                         list(result.removed), t.current)
                if not self.provisioning.waiting:
                    # Batches run on executors leaving (a standalone master starts one on every
                    # free core before the first request reaches it): measuring restarts once
                    # they are gone, as after a scale-down.
                    self.provisioning.start(ScalingRecord(now, "scale_down", live, t.current,
                                                          "executors beyond the target"), t.current, now)
                    t.window_start = math.inf

    def reassert_after_losses(self, sample: MetricSample) -> None:
        """Reactive mode asks for its full target again after executor losses."""
        t = self.targets
        if (self.config.mode is Mode.REACTIVE and sample.cluster.live_executors < t.current
                and not self.provisioning.waiting and self.requests.failure is None):
            self.requests.request(sample.time, f"re-request {t.current} executors",
                                  lambda: self.realizer.baseline(t.current))

    def resume(self, now: float) -> bool:
        """The user lifted a pause: forget the rolled-back scaling, measure afresh. True when a
        pause or stop was in force."""
        was = self.guard.pause.resume(now)
        self.targets.rolled_back = self.targets.rolled_back_before_restart = None
        self.targets.window_start = now + self.config.stabilization_interval_s
        return was

    def judged(self, now: float, outcome: GuardOutcome) -> list[Decision]:
        """Act on the guard's outcome for the watched scaling: the rollback decision, if any."""
        if outcome.action == "failed":
            self.events.emit(AutoscalerEvent(now, "pause", outcome.reason, severity="error",
                                             situation="unhealthy-after-rollback", details=self.details()))
        elif outcome.action == "rollback":
            return [self.roll_back(now, outcome)]
        elif outcome.action == "healthy":
            # What a rollback and a restart go back to; one situation per target, so none is throttled.
            self.events.emit(AutoscalerEvent(now, "notice", outcome.reason,
                                             situation=f"scaling-healthy:{outcome.target}",
                                             details={**self.details(), "healthyTarget": outcome.target}))
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
        recommend = config.mode is Mode.RECOMMEND
        restored = self.guard.healthy_target if t.restored and not recommend else None
        if config.mode is Mode.REACTIVE:
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
            # From the first tick: the last three live counts are only how the settling is told.
            t.waiting_since = now if t.waiting_since is None else t.waiting_since
            waited = now - t.waiting_since
            if not settled and waited < config.provisioning_timeout_s:
                return False
            wanted = live
        base = live if recommend else config.bounded(wanted)
        first = max(base, min(live, config.max_executors))
        result = None if recommend else self.requests.request(now, f"baseline of {first} executors",
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
                                         f"{restored_text}{failed_text}", situation="baseline",
                                         from_executors=live, to_executors=base, details=self.details()))
        return True

    def apply(self, now: float, decision: Decision, context: ScalingContext) -> Decision:
        """Carry out a scale-up or scale-down the policy decided (or only publish it: recommend
        mode, excluded periods, a scaling rolled back before a restart); the decision as applied."""
        t = self.targets
        config = self.config
        if config.mode is Mode.RECOMMEND or in_excluded_period(config, now):
            why = "recommend mode" if config.mode is Mode.RECOMMEND else "excluded period"
            self.events.emit(AutoscalerEvent(now, "recommendation", f"{decision.reason} (not applied: {why})",
                                             situation=f"recommendation-{decision.action}",
                                             action=decision.action, from_executors=decision.from_executors,
                                             to_executors=decision.to_executors,
                                             details=self.details(decision)))
            return decision
        repeated = self._repeats_rolled_back(now, decision)
        if repeated:
            return replace(decision, reason=f"{decision.reason}; not applied: {repeated}")
        if decision.action == "scale_up":
            lifted = self.capacity.expire(now)
            if lifted is not None:
                self.events.emit(AutoscalerEvent(
                    now, "notice", f"capacity limit of {lifted.live} executors expired: asking for "
                    f"{decision.to_executors} again", situation="capacity-limit-expired",
                    details=self.details()))
            decision = self.capacity.cap(now, decision, t.current)
        if decision.to_executors == t.current:
            return decision
        waiting = self.requests.wait_reason(now)
        if waiting:
            return replace(decision, reason=f"{decision.reason}; not applied: {waiting}")

        record = replace(scaling_record(decision, now), from_executors=t.current)
        # rate_before must be what the queries processed (counter deltas), the same measure the
        # checkers and the ineffective-scale-up test take after the change; the evaluation's
        # input rate is an arrival estimate that a long batch can inflate several-fold.
        processed = context.processed_rates
        if processed:
            record = replace(record, rate_before={q: processed.get(q, r)
                                                  for q, r in record.rate_before.items()})
        result = self.requests.request(now, f"{decision.action} {t.current} -> {decision.to_executors}",
                                       lambda: self._realize(decision.to_executors))
        if not result.ok:
            # Reported (and the retry scheduled) by the request guard; the policy decides afresh
            # each tick.
            return replace(decision, reason=f"{decision.reason}; not applied: "
                                            f"{self.requests.wait_reason(now)}")
        healthy_before = t.current
        t.current = decision.to_executors
        t.last_scaling = record
        self.provisioning.start(record, result.requested_total, now)
        t.window_start = math.inf  # until the requested executors registered (+ stabilization)
        self.guard.watch(record, healthy_before)
        applied = replace(decision, applied=True, predictions=record.predictions)
        self.events.emit(AutoscalerEvent(now, "scaling", decision.reason, action=decision.action,
                                         from_executors=decision.from_executors,
                                         to_executors=decision.to_executors, details=self.details(applied)))
        self.state.record_scaling(now, decision.action, decision.from_executors, decision.to_executors,
                                  decision.reason)
        return applied

    def roll_back(self, now: float, outcome: GuardOutcome) -> Decision:
        """Realize the rollback the guard asked for; the rollback decision."""
        t = self.targets
        assert outcome.target is not None and outcome.unhealthy is not None
        target, checker = outcome.target, outcome.unhealthy.checker
        undone = t.last_scaling
        if undone is not None and undone.action in ("scale_up", "scale_down"):
            t.rolled_back = {"action": undone.action, "to": undone.to_executors, "time": now,
                             "checker": checker, "reason": outcome.unhealthy.reason}
        # The executors the scale-up brought and whose tasks failed are removed first, busy or
        # not; others it brought go like any, when idle.
        t.bad_executors = set(outcome.suspects)
        record = ScalingRecord(now, "rollback", t.current, target, f"checker {checker}: "
                               f"{outcome.unhealthy.reason}")
        result = (self.requests.request(now, f"rollback {t.current} -> {target}",
                                        lambda: self._realize(target, t.bad_executors))
                  if self.requests.failure is None else self.requests.not_requested(now))
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
        pause = self.guard.pause
        self.events.emit(AutoscalerEvent(now, "stopped" if pause.stopped else "pause",
                                         pause.reason(now) or reason,
                                         situation="stopped" if pause.stopped else "paused-after-rollback",
                                         severity="warning", details=self.details()))
        self.state.record_scaling(now, "rollback", from_target, target, reason)
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
        held = self.capacity.hold(now, shortfall)
        before = t.current
        t.current = held
        result = (self.requests.request(now, f"hold at {held} executors", lambda: self._realize(held))
                  if self.requests.failure is None else self.requests.not_requested(now))
        failed = "" if result.ok else f"; lowering the request failed: {result.message}"
        self.events.emit(AutoscalerEvent(
            now, "capacity", f"capacity limit: the cluster gave {shortfall.live} of {shortfall.requested} "
            f"requested executors within provisioningTimeout={self.config.provisioning_timeout_s:g}s "
            f"(a full queue or a quota?); target held at {held}, asking for more again in "
            f"{self.config.capacity_retry_s:g}s{failed}", situation="capacity-limit",
            from_executors=before, to_executors=held, severity="warning", details=self.details()))

    def details(self, decision: Decision | None = None) -> dict[str, Any]:
        return scaling_details(self.config, self.app_name, decision)

    def measure_afresh(self, now: float) -> None:
        """Measure from ``now``: what was counted before misses work (lost listener events)."""
        self.targets.window_start = max(self.targets.window_start, now)

    # ------------------------------------------------------------------ persistence
    def restore(self) -> None:
        """Start from what a previous driver of this application stored (before the baseline)."""
        guard_state = self.state.rollback_guard()
        if guard_state:
            self.guard.load_state(guard_state)
            self.targets.restored = True
        rolled_back = self.state.rolled_back_scaling()
        if rolled_back is not None:
            self.targets.rolled_back = self.targets.rolled_back_before_restart = rolled_back

    def persist(self) -> None:
        """Hand the state what must outlive this driver (written at the end of the tick)."""
        self.state.store_rollback_state(self.guard.to_state(), self.targets.rolled_back)
