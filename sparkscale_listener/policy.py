"""The scaling policy: from an :class:`Evaluation` to a :class:`Decision`.

The evaluator says how many executors the load needs; the policy decides whether to act on it:
the utilization band, backlog mode, the scale-up / scale-down factors, min / max executors,
the delayed scale-down (a scale-down must be recommended continuously for ``scaleDownInterval``,
then the largest recommendation seen is applied) and ineffective-scale-up blocks. It keeps that
memory between ticks. Recommend mode and excluded periods are the control loop's business: the
policy always says what it would do (``Decision.applied`` stays False).

Also here, for the control loop and the simulator to share: :func:`next_window_start` (when
measuring may resume after a change), :func:`scaling_record` (what a change promised) and
:func:`in_excluded_period`.
"""

from __future__ import annotations

import math
import time as _time
from dataclasses import dataclass
from typing import Any

from .config.core import AutoscalerConfig
from .decisions import Decision, Evaluation, QueryEvaluation, ScalingContext, ScalingRecord

_EPS = 1e-9
# A blocked query is unblocked when its target rate moves by more than this fraction.
UNBLOCK_LOAD_CHANGE = 0.5


def in_excluded_period(config: AutoscalerConfig, epoch_seconds: float) -> bool:
    """True when ``epoch_seconds`` falls in one of ``config.excluded_periods``.

    Windows are daily (start_min, end_min) in local time, start inclusive, end exclusive; a window
    with start > end wraps midnight (22:00-06:00); start == end covers the whole day.
    """
    local = _time.localtime(epoch_seconds)
    minute = local.tm_hour * 60 + local.tm_min
    for start, end in config.excluded_periods:
        if start == end:
            return True
        if start < end and start <= minute < end:
            return True
        if start > end and (minute >= start or minute < end):
            return True
    return False


def scaling_record(decision: Decision, slots_per_executor: int,
                   time: float | None = None) -> ScalingRecord:
    """The :class:`ScalingRecord` of an applied decision, with what it promised per query.

    Per query: ``rate_before`` = processed rows/s over the last window; ``promised_rate`` =
    what the query should process at the new size: its demand (target + catch-up rate), but no
    more than its current rate scaled by the slots it can use (useful parallelism applied).
    A query that already processed all it had to promises no increase.
    """
    before: dict[str, float] = {}
    promised: dict[str, float] = {}
    ev = decision.evaluation
    if ev is not None:
        for qid, q in ev.queries.items():
            old = decision.from_executors * slots_per_executor
            new = decision.to_executors * slots_per_executor
            if q.parallelism_cap:
                old, new = min(old, q.parallelism_cap), min(new, q.parallelism_cap)
            demand = q.target_rate + q.catch_up_rate
            before[qid] = q.input_rate
            if demand <= q.input_rate:
                promised[qid] = q.input_rate
            elif q.input_rate <= 0 or old <= 0:
                promised[qid] = demand
            else:
                promised[qid] = min(demand, q.input_rate * new / old)
    return ScalingRecord(time=decision.time if time is None else time, action=decision.action,
                         from_executors=decision.from_executors, to_executors=decision.to_executors,
                         reason=decision.reason, rate_before=before, promised_rate=promised)


@dataclass
class _PendingScaleDown:
    since: float
    from_executors: int
    to_executors: int  # the largest recommendation seen since `since`
    limited_by: str | None
    reason: str


@dataclass
class _Block:
    reason: str
    target_rate: float  # the query's target rate when blocked; a big move unblocks
    since: float


def _label(q: QueryEvaluation | None, qid: str) -> str:
    return f"'{q.name}'" if q is not None and q.name else qid


class ScalingPolicy:
    """Decides, each tick, whether and how far to scale; remembers delays and blocks.

    Not thread-safe: call from the control loop only.
    """

    def __init__(self) -> None:
        self._pending: _PendingScaleDown | None = None
        self._blocked: dict[str, _Block] = {}
        self._checked_record: tuple[float, int, int] | None = None
        self._notes: list[tuple[str, str]] = []  # (situation, text)

    # -- memory, for the control loop / state store -----------------------------------------------

    def blocked_queries(self) -> dict[str, str]:
        """Queries whose scale-ups are blocked (ineffective scale-up), with the reason."""
        return {qid: b.reason for qid, b in self._blocked.items()}

    def pending_scale_down(self) -> tuple[float, int] | None:
        """(since, target) of the scale-down waiting for scaleDownInterval, if any."""
        return (self._pending.since, self._pending.to_executors) if self._pending else None

    def last_notes(self) -> list[tuple[str, str]]:
        """Block / unblock notes of the latest :meth:`decide`, each worth one event."""
        return list(self._notes)

    def to_state(self) -> dict[str, Any]:
        """What a restarted driver must not forget (JSON): the pending scale-down (its wait goes
        on) and the blocked scale-ups (an ineffective scale-up is not tried again)."""
        p = self._pending
        return {
            "pending": None if p is None else {"since": p.since, "from": p.from_executors,
                                               "to": p.to_executors, "limitedBy": p.limited_by,
                                               "reason": p.reason},
            "blocked": {qid: {"reason": b.reason, "targetRate": b.target_rate, "since": b.since}
                        for qid, b in self._blocked.items()},
            "checked": list(self._checked_record) if self._checked_record else None,
        }

    def load_state(self, state: dict[str, Any]) -> None:
        """Load what :meth:`to_state` produced; malformed entries are skipped."""
        try:
            p = state.get("pending")
            if isinstance(p, dict):
                self._pending = _PendingScaleDown(float(p["since"]), int(p["from"]), int(p["to"]),
                                                  p.get("limitedBy"), str(p.get("reason", "")))
        except (KeyError, TypeError, ValueError):
            self._pending = None
        blocked = state.get("blocked")
        for qid, b in (blocked.items() if isinstance(blocked, dict) else ()):
            try:
                self._blocked[str(qid)] = _Block(str(b["reason"]), float(b["targetRate"]),
                                                 float(b["since"]))
            except (KeyError, TypeError, ValueError):
                continue
        checked = state.get("checked")
        if isinstance(checked, list) and len(checked) == 3:
            try:
                self._checked_record = (float(checked[0]), int(checked[1]), int(checked[2]))
            except (TypeError, ValueError):
                self._checked_record = None

    # -- the decision -------------------------------------------------------------------------

    def decide(self, evaluation: Evaluation, context: ScalingContext) -> Decision:
        self._notes = []
        cfg = context.config
        if cfg.mode == "reactive":
            return self._reactive(evaluation, context)
        cur = context.current_target
        if not evaluation.ready:
            # Neither continues nor breaks a pending scale-down: there is no new information.
            return self._none(evaluation, context, evaluation.reason or "not ready")

        self._update_blocks(evaluation, context)
        suffix = "".join(f"; {text}" for _, text in self._notes)

        # Bring a target outside the configured bounds back inside, whatever the load.
        if cur < cfg.min_executors:
            self._pending = None
            return self._decision(evaluation, context, "scale_up", cfg.min_executors,
                                  f"current target {cur} is below minExecutors={cfg.min_executors}"
                                  + suffix, "minExecutors")
        if cur > cfg.max_executors:
            self._pending = None
            return self._decision(evaluation, context, "scale_down", cfg.max_executors,
                                  f"current target {cur} is above maxExecutors={cfg.max_executors}"
                                  + suffix, "maxExecutors")

        cores = context.slots_per_executor
        util = evaluation.utilization
        rec = evaluation.recommended_executors
        raw = math.ceil(evaluation.required_slots / cores - _EPS) if evaluation.required_slots > 0 else 0
        band = f"[{cfg.utilization_min:g}, {cfg.utilization_max:g}]"
        util_text = f"{util:.2f}" if util is not None else "n/a (no live executors)"
        above = util is None or util > cfg.utilization_max

        # An evaluator that recommends more than the load's slots explain asks for it on purpose
        # (a floor, a forecast): that recommendation drives the decision, band or not. The
        # default evaluator never does; its backlog already raises the utilization the band sees.
        insists = rec > raw
        if rec > cur and (above or insists):
            self._pending = None
            return self._scale_up(evaluation, context, util_text, suffix)

        if util is not None and util > cfg.utilization_max:
            self._pending = None
            return self._hold_high(evaluation, context, util_text, raw, suffix)

        if rec < cur and util is not None and util < cfg.utilization_min:
            if evaluation.backlog_mode:
                self._pending = None
                names = [_label(q, qid) for qid, q in evaluation.queries.items() if q.backlog_mode]
                return self._none(evaluation, context,
                                  f"backlog mode ({', '.join(names) or 'a query'} is more than "
                                  f"{cfg.backlog_threshold_s:g}s of input behind): no scale-down "
                                  f"although utilization {util_text} is below {cfg.utilization_min:g}"
                                  + suffix)
            return self._scale_down(evaluation, context, util_text, raw, suffix)

        self._pending = None
        limited = None
        if util is not None and cfg.utilization_min <= util <= cfg.utilization_max:
            why = f"utilization {util_text} inside band {band}"
        elif util is not None and util < cfg.utilization_min and cur <= cfg.min_executors:
            why = (f"utilization {util_text} below {cfg.utilization_min:g}, but already at "
                   f"minExecutors={cfg.min_executors}")
            limited = "minExecutors"
        elif util is not None and util < cfg.utilization_min:
            why = (f"utilization {util_text} below {cfg.utilization_min:g}, but the load still "
                   f"needs {rec} executors")
        else:
            why = f"utilization {util_text}, recommended {rec} = current {cur}"
        return self._none(evaluation, context, f"{why}; {evaluation.reason}{suffix}", limited)

    # -- branches -----------------------------------------------------------------------------

    def _scale_up(self, ev: Evaluation, ctx: ScalingContext, util_text: str, suffix: str) -> Decision:
        cfg = ctx.config
        cur = ctx.current_target
        cores = ctx.slots_per_executor
        required = ev.required_slots
        blocked_notes: list[str] = []
        if self._blocked and ev.queries and ev.required_slots > 0:
            # A blocked query keeps at most its present share of the slots; the others may grow.
            cur_slots = cur * cores
            required = 0.0
            for qid, q in ev.queries.items():
                if qid in self._blocked and q.required_slots > 0:
                    share = cur_slots * q.required_slots / ev.required_slots
                    if q.required_slots > share + _EPS:
                        blocked_notes.append(f"{_label(q, qid)} ({self._blocked[qid].reason})")
                    required += min(q.required_slots, share)
                else:
                    required += q.required_slots
        raw = math.ceil(required / cores - _EPS) if required > 0 else 0
        insists = ev.recommended_executors > math.ceil(ev.required_slots / cores - _EPS)
        if insists:
            raw = max(raw, ev.recommended_executors)  # the evaluator's own recommendation
        target, limited = raw, None
        if target > cfg.max_executors:
            target, limited = cfg.max_executors, "maxExecutors"
        factor_cap = math.ceil(max(cur, 1) * cfg.scale_up_max_factor - _EPS)
        if target > factor_cap:
            target, limited = factor_cap, "scaleUp.maxFactor"
        target = max(target, cfg.min_executors)
        if limited is None and any(q.capped for q in ev.queries.values()):
            limited = "parallelism"
        growing = any(q.backlog_growth_rate > 0 or q.catch_up_rate > 0 for q in ev.queries.values())
        signal = "backlog" if ev.backlog_mode or growing else "utilization"
        if insists:
            signal = "evaluator recommendation"
        if target <= cur:
            self._pending = None
            if blocked_notes:
                return self._none(ev, ctx, "scale-up blocked (ineffective scale-up) for "
                                  + "; ".join(blocked_notes) + f"; {ev.reason}{suffix}",
                                  "ineffectiveScaleUp")
            return self._none(ev, ctx, f"utilization {util_text}: cannot scale above {cur} "
                              f"({limited or 'no limit'}); {ev.reason}{suffix}", limited)
        limit_text = {
            "maxExecutors": f"; limited by maxExecutors={cfg.max_executors} (load needs {raw})",
            "scaleUp.maxFactor": f"; limited by scaleUp.maxFactor={cfg.scale_up_max_factor:g} "
                                 f"(load needs {raw})",
            "parallelism": "; parallelism-capped query asks for no more than its widest stage",
        }.get(limited or "", "")
        blocked_text = ("; scale-up blocked for " + "; ".join(blocked_notes)) if blocked_notes else ""
        return self._decision(ev, ctx, "scale_up", target,
                              f"scale up {cur} -> {target} ({signal}: utilization {util_text}"
                              f"{', backlog mode' if ev.backlog_mode else ''}){limit_text}"
                              f"{blocked_text}; {ev.reason}{suffix}", limited)

    def _hold_high(self, ev: Evaluation, ctx: ScalingContext, util_text: str, raw: int,
                   suffix: str) -> Decision:
        cfg = ctx.config
        cur = ctx.current_target
        if raw > cfg.max_executors and cur >= cfg.max_executors:
            return self._none(ev, ctx, f"utilization {util_text} above {cfg.utilization_max:g}: the "
                              f"load needs {raw} executors but maxExecutors={cfg.max_executors}; "
                              f"holding at {cur}; {ev.reason}{suffix}", "maxExecutors")
        if any(q.capped for q in ev.queries.values()):
            return self._none(ev, ctx, f"utilization {util_text} above {cfg.utilization_max:g}, but "
                              "the queries cannot use more slots (parallelism cap: widest stage); "
                              f"{ev.reason}{suffix}", "parallelism")
        return self._none(ev, ctx, f"utilization {util_text} above {cfg.utilization_max:g}, but the "
                          f"evaluator recommends {ev.recommended_executors} (current {cur}); "
                          f"{ev.reason}{suffix}")

    def _scale_down(self, ev: Evaluation, ctx: ScalingContext, util_text: str, raw: int,
                    suffix: str) -> Decision:
        cfg = ctx.config
        cur = ctx.current_target
        target, limited = ev.recommended_executors, None
        if raw < cfg.min_executors:
            target, limited = cfg.min_executors, "minExecutors"
        factor_floor = math.ceil(cur * (1.0 - cfg.scale_down_max_factor) - _EPS)
        if target < factor_floor:
            target, limited = factor_floor, "scaleDown.maxFactor"
        if target >= cur:
            self._pending = None
            return self._none(ev, ctx, f"utilization {util_text} below {cfg.utilization_min:g}, but "
                              f"cannot go below {cur} ({limited}); {ev.reason}{suffix}", limited)
        limit_text = {
            "minExecutors": f"; limited by minExecutors={cfg.min_executors}",
            "scaleDown.maxFactor": f"; limited by scaleDown.maxFactor={cfg.scale_down_max_factor:g} "
                                   f"(load needs {max(raw, cfg.min_executors)})",
        }.get(limited or "", "")
        why = (f"utilization {util_text} below {cfg.utilization_min:g}{limit_text}; {ev.reason}")
        p = self._pending
        if p is None or p.from_executors != cur:
            p = self._pending = _PendingScaleDown(ctx.now, cur, target, limited, why)
        elif target > p.to_executors:
            # Delayed scale-down applies the largest recommendation seen while waiting.
            p.to_executors, p.limited_by, p.reason = target, limited, why
        waited = ctx.now - p.since
        if waited + _EPS >= cfg.scale_down_interval_s:
            self._pending = None
            return self._decision(ev, ctx, "scale_down", p.to_executors,
                                  f"scale down {cur} -> {p.to_executors} after {waited:.0f}s of "
                                  f"recommendations (largest seen): {p.reason}{suffix}", p.limited_by)
        return self._none(ev, ctx, f"scale-down to {p.to_executors} pending for {waited:.0f}s of "
                          f"{cfg.scale_down_interval_s:.0f}s: {why}{suffix}", p.limited_by)

    def _reactive(self, ev: Evaluation, ctx: ScalingContext) -> Decision:
        cfg = ctx.config
        target = cfg.max_executors
        cur = ctx.current_target
        have = ctx.live_executors + ctx.pending_executors
        self._pending = None
        if cur < target:
            return Decision(time=ctx.now, action="scale_up", from_executors=cur, to_executors=target,
                            reason=f"reactive mode: take every executor up to maxExecutors={target}",
                            evaluation=ev, limited_by="maxExecutors")
        if have < target:
            return Decision(time=ctx.now, action="scale_up", from_executors=have, to_executors=target,
                            reason=f"reactive mode: {target - have} executor(s) lost, re-requesting "
                                   f"up to maxExecutors={target}",
                            evaluation=ev, limited_by="maxExecutors")
        return Decision(time=ctx.now, action="none", from_executors=cur, to_executors=cur,
                        reason=f"reactive mode: holding {cur} executors (maxExecutors={target}); "
                               "never scaling down by choice", evaluation=ev)

    # -- ineffective scale-up -------------------------------------------------------------------

    def _update_blocks(self, ev: Evaluation, ctx: ScalingContext) -> None:
        cfg = ctx.config
        rec = ctx.last_scaling
        threshold = cfg.ineffective_scale_up_threshold
        if rec is not None and rec.action == "scale_up":
            key = (rec.time, rec.from_executors, rec.to_executors)
            # Judge once, on the first full window measured entirely after the change.
            if key != self._checked_record and ctx.window_start >= rec.time:
                self._checked_record = key
                if threshold > 0:
                    self._judge(rec, ev, ctx, threshold)
        for qid, block in list(self._blocked.items()):
            q = ev.queries.get(qid)
            if q is None:
                del self._blocked[qid]
                self._notes.append((f"scale-up-unblocked:{qid}",
                                    f"unblocked scale-up for query {qid}: query no longer active"))
                continue
            ref = block.target_rate
            moved = abs(q.target_rate - ref) > UNBLOCK_LOAD_CHANGE * ref if ref > 0 else q.target_rate > 0
            if moved:
                del self._blocked[qid]
                self._notes.append((
                    f"scale-up-unblocked:{qid}",
                    f"unblocked scale-up for query {_label(q, qid)}: target rate moved from "
                    f"{ref:.1f} to {q.target_rate:.1f} rows/s (more than {UNBLOCK_LOAD_CHANGE:.0%})"))

    def _judge(self, rec: ScalingRecord, ev: Evaluation, ctx: ScalingContext, threshold: float) -> None:
        for qid, before in rec.rate_before.items():
            q = ev.queries.get(qid)
            promised = rec.promised_rate.get(qid)
            if q is None or promised is None:
                continue
            # Measure against what the query needs now: if its load fell since, it could not
            # show the promised rate, and that is no evidence against the scale-up.
            # Processed rows/s from the counters, as ``before`` was taken (the evaluator's input
            # rate is a per-batch arrival estimate that a long batch inflates).
            done = ctx.processed_rates.get(qid, q.input_rate)
            need = max(q.target_rate + q.catch_up_rate, done)
            expected = min(promised, need) - before
            if expected <= _EPS:
                continue
            actual = done - before
            if actual < threshold * expected:
                reason = (f"scale-up {rec.from_executors} -> {rec.to_executors} at t={rec.time:.0f}s "
                          f"promised {before:.1f} -> {min(promised, need):.1f} rows/s but delivered "
                          f"{done:.1f} rows/s (less than {threshold:.0%} of the promised "
                          "increase)")
                self._blocked[qid] = _Block(reason, q.target_rate, ctx.now)
                self._notes.append((f"scale-up-blocked:{qid}",
                                    f"blocked scale-up for query {_label(q, qid)}: {reason}"))

    # -- helpers -------------------------------------------------------------------------------

    @staticmethod
    def _none(ev: Evaluation, ctx: ScalingContext, reason: str,
              limited_by: str | None = None) -> Decision:
        cur = ctx.current_target
        return Decision(time=ctx.now, action="none", from_executors=cur, to_executors=cur,
                        reason=reason, evaluation=ev, limited_by=limited_by)

    @staticmethod
    def _decision(ev: Evaluation, ctx: ScalingContext, action: str, target: int, reason: str,
                  limited_by: str | None) -> Decision:
        return Decision(time=ctx.now, action=action,  # type: ignore[arg-type]
                        from_executors=ctx.current_target, to_executors=target, reason=reason,
                        evaluation=ev, limited_by=limited_by)
