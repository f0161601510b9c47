"""The scaling policy: from an :class:`Evaluation` to a :class:`Decision`.

The evaluator says how many executors the load needs; the policy decides whether to act on it:
a scale-up once utilization is above ``utilization.max``, a scale-down once fewer executors were
recommended continuously for ``scaleDownInterval`` (the largest recommendation seen is applied, and
neither in backlog mode nor while the load rises), the scale-up / scale-down factors, min / max
executors, and the blocks after an ineffective scale-up. It keeps that
memory between ticks. Recommend mode and excluded periods are the control loop's business: the
policy always says what it would do (``Decision.applied`` stays False).

Also here, for the executor: :func:`scaling_record` (what a change is expected to do) and
:func:`in_excluded_period`.

Why one module of ~500 lines: every branch of the decision (hold, scale up, delayed scale-down, reactive mode,
blocks) is in :meth:`ScalingPolicy.decide`'s one chain of cases, and splitting the branches apart would hide
which case wins.
"""

from __future__ import annotations

import math
import time as _time
from collections import deque
from dataclasses import dataclass, replace
from typing import Any

from . import readable
from .config.core import AutoscalerConfig, Mode
from .decisions import (
    Decision,
    Evaluation,
    Prediction,
    QueryEvaluation,
    ScalingContext,
    ScalingRecord,
)
from .model import executors_for

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


def scaling_record(decision: Decision, time: float | None = None) -> ScalingRecord:
    """The :class:`ScalingRecord` of an applied decision, with what the model expects of it per
    query: for the load the decision was sized on, the batch time at the old and the new size,
    the rows/s the new size does and the time to drain the backlog. ``rate_before`` is the rows/s
    each query read over the window."""
    before: dict[str, float] = {}
    predictions: dict[str, Prediction] = {}
    ev = decision.evaluation
    old, new = decision.from_executors, decision.to_executors
    if ev is not None:
        for qid, q in ev.queries.items():
            before[qid] = q.input_rate
            cost = q.cost
            if cost is None:
                continue
            rate = q.target_rate + q.catch_up_rate
            predictions[qid] = Prediction(
                query_id=qid, rate=rate, rows_per_batch=q.rows_per_batch,
                needed_executors=q.required_executors,
                batch_time_before_s=_finite(cost.steady_batch_time(rate, max(1, old), q.trigger_s)),
                batch_time_s=_finite(cost.steady_batch_time(rate, max(1, new), q.trigger_s)),
                throughput=cost.capacity(max(1, new)),
                drain_s=(cost.drain_seconds(q.backlog, q.target_rate, max(1, new), None, q.trigger_s)
                         if q.backlog else None),
                cost=cost)
    return ScalingRecord(time=decision.time if time is None else time, action=decision.action,
                         from_executors=old, to_executors=new, reason=decision.reason,
                         rate_before=before, predictions=predictions)


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


@dataclass(frozen=True)
class _Wish:
    """What one evaluated tick wanted: a scale-down to ``executors`` (None: no scale-down)."""

    time: float
    current: int
    executors: int | None
    limited_by: str | None = None
    reason: str = ""


class ScaleDownWindow:
    """Flink's delayed scale-down, as a sliding window: a scale-down is made once every evaluated
    tick over the last ``scaleDownInterval`` wanted one, to the largest size any of them wanted.
    A step that ``scaleDown.maxFactor`` cut short leaves the window as it is, so the next step to
    where the load still points follows as soon as the new size is measured: the interval is
    waited out once. Ticks without an evaluation (stabilizing) neither extend nor break it; a
    tick that wants no scale-down breaks it; a scale-up clears it."""

    def __init__(self) -> None:
        self._wishes: deque[_Wish] = deque()
        self.due_since: float | None = None  # when the current run's scale-down first came due

    def note(self, wish: _Wish, interval_s: float) -> None:
        self._wishes.append(wish)
        if wish.executors is None or wish.executors >= wish.current:
            self.due_since = None
        # Keep the interval plus the last wish before it (it tells whether the run covers it).
        while len(self._wishes) > 1 and self._wishes[1].time <= wish.time - interval_s + _EPS:
            self._wishes.popleft()

    def clear(self) -> None:
        self._wishes.clear()
        self.due_since = None

    def issued(self) -> None:
        """A scale-down was made: the next one, a step ``scaleDown.maxFactor`` cut short
        included, comes due anew."""
        self.due_since = None

    def came_due(self, now: float) -> float:
        """When the scale-down that is due now first came due (the wishes slide with time, so
        the moment is kept, not derived)."""
        if self.due_since is None:
            self.due_since = now
        return self.due_since

    def run_start(self, current: int) -> float | None:
        """When the latest unbroken run of scale-down wishes below ``current`` began, or None."""
        start = None
        for wish in reversed(self._wishes):
            if wish.executors is None or wish.executors >= current:
                break
            start = wish.time
        return start

    def due(self, now: float, interval_s: float, current: int) -> _Wish | None:
        """The scale-down to make now (the largest wished over the interval), or None."""
        start = self.run_start(current)
        if start is None or now - start + _EPS < interval_s:
            return None
        wishes = [w for w in self._wishes if w.time >= start and w.executors is not None]
        return max(wishes, key=lambda w: (w.executors or 0, w.time))

    def to_state(self) -> list[dict[str, Any]]:
        return [{"time": w.time, "current": w.current, "executors": w.executors,
                 "limitedBy": w.limited_by, "reason": w.reason} for w in self._wishes]

    def load_state(self, state: Any) -> None:
        self._wishes.clear()
        for w in state if isinstance(state, list) else ():
            try:
                executors = None if w["executors"] is None else int(w["executors"])
                self._wishes.append(_Wish(float(w["time"]), int(w["current"]), executors,
                                          w.get("limitedBy"), str(w.get("reason", ""))))
            except (KeyError, TypeError, ValueError, AttributeError):
                continue


@dataclass
class _Block:
    reason: str
    target_rate: float  # the query's target rate when blocked; a big move unblocks
    since: float


def _summary(ev: Evaluation) -> str:
    """What the evaluator says the load needs, in a line (an evaluator plugin that sets no headline:
    its reason)."""
    return ev.headline or ev.reason or f"the evaluator recommends {ev.recommended_executors}"


def _label(q: QueryEvaluation | None, qid: str) -> str:
    return f"'{q.name}'" if q is not None and q.name else qid


def held_while_learning(ev: Evaluation, ctx: ScalingContext) -> Evaluation:
    """While a query still learns its cost, the others are sized and the size never falls below
    the current one. (A query still learning blocked every decision before, for the
    application's life when it never could learn.)"""
    if not ev.still_learning or ev.recommended_executors >= ctx.current_target:
        return ev
    names = ", ".join(ev.still_learning)
    return replace(ev, recommended_executors=ctx.current_target,
                   headline=f"{ev.headline}; held at {ctx.current_target}: {names} still learning")


class ScaleUpBlocks:
    """The ineffective-scale-up rule: a scale-up whose new executors' warm batches gained less than
    ``ineffectiveScaleUp.threshold`` of what the model expected (its
    :class:`~sparkscale_listener.decisions.Outcome`) blocks further scale-ups of the queries it did
    not help, until a query's target rate moves by more than :data:`UNBLOCK_LOAD_CHANGE` or the
    query stops. A blocked query may keep the current size but not ask for more."""

    def __init__(self) -> None:
        self.blocked: dict[str, _Block] = {}
        self._checked_record: tuple[float, int, int] | None = None

    def to_state(self) -> dict[str, Any]:
        return {"blocked": {qid: {"reason": b.reason, "targetRate": b.target_rate, "since": b.since}
                            for qid, b in self.blocked.items()},
                "checked": list(self._checked_record) if self._checked_record else None}

    def load_state(self, state: dict[str, Any]) -> None:
        """Load what :meth:`to_state` produced (in the policy's state); malformed entries are skipped."""
        blocked = state.get("blocked")
        for qid, b in (blocked.items() if isinstance(blocked, dict) else ()):
            try:
                self.blocked[str(qid)] = _Block(str(b["reason"]), float(b["targetRate"]),
                                                float(b["since"]))
            except (KeyError, TypeError, ValueError):
                continue
        checked = state.get("checked")
        if isinstance(checked, list) and len(checked) == 3:
            try:
                self._checked_record = (float(checked[0]), int(checked[1]), int(checked[2]))
            except (TypeError, ValueError):
                self._checked_record = None

    @staticmethod
    def judged(ev: Evaluation, ctx: ScalingContext) -> Evaluation:
        """``ev`` with each measured outcome of the last change given its verdict. A scale-up is
        judged where it added executors the query needed and the model expected a gain beyond its
        error: effective when the batches gained at least ``ineffectiveScaleUp.threshold`` of that
        gain (less the error). Anything else is only reported, measured against the model."""
        rec = ctx.last_scaling
        if not ev.outcomes or rec is None:
            return ev
        threshold = ctx.config.ineffective_scale_up_threshold
        outcomes = {}
        for qid, o in ev.outcomes.items():
            prediction = rec.predictions.get(qid)
            error = prediction.cost.error if prediction is not None else 0.0
            tolerance = error * o.predicted_before_s
            gain = o.predicted_before_s - o.predicted_s
            measured = (f"batches of {o.rows_per_batch:.0f} rows took {o.batch_time_s:.2f}s on {o.executors} "
                        f"executors; the model expected {o.predicted_s:.2f}s")
            if (prediction is not None and rec.action == "scale_up" and o.executors > rec.from_executors
                    and prediction.needed_executors > rec.from_executors and gain > tolerance):
                effective = o.predicted_before_s - o.batch_time_s >= threshold * gain - tolerance
                verdict = (f"{measured} (and {o.predicted_before_s:.2f}s on {rec.from_executors}, error "
                           f"{error:.0%}): " + ("effective" if effective else
                                               f"less than {threshold:.0%} of the expected gain"))
            else:
                effective, verdict = True, f"{measured} (error {error:.0%})"
            outcomes[qid] = replace(o, effective=effective, verdict=verdict)
        return replace(ev, outcomes=outcomes)

    def update(self, ev: Evaluation, ctx: ScalingContext, notes: list[tuple[str, str]]) -> None:
        """Judge the last scale-up once, on its outcome; unblock the queries whose load moved or
        that stopped. Each block and unblock is a (situation, text) note appended to ``notes``."""
        rec = ctx.last_scaling
        if rec is not None and rec.action == "scale_up" and ev.outcomes:
            key = (rec.time, rec.from_executors, rec.to_executors)
            # Judged once, on its outcome: the new executors' warm batches against the prediction.
            if key != self._checked_record:
                self._checked_record = key
                if ctx.config.ineffective_scale_up_threshold > 0:
                    self._judge(rec, ev, ctx, notes)
        for qid, block in list(self.blocked.items()):
            q = ev.queries.get(qid)
            if q is None:
                del self.blocked[qid]
                notes.append((f"scale-up-unblocked:{qid}",
                              f"unblocked scale-up for query {qid}: query no longer active"))
                continue
            ref = block.target_rate
            moved = abs(q.target_rate - ref) > UNBLOCK_LOAD_CHANGE * ref if ref > 0 else q.target_rate > 0
            if moved:
                del self.blocked[qid]
                notes.append((
                    f"scale-up-unblocked:{qid}",
                    f"unblocked scale-up for query {_label(q, qid)}: target rate moved from "
                    f"{ref:.1f} to {q.target_rate:.1f} rows/s (more than {UNBLOCK_LOAD_CHANGE:.0%})"))

    def _judge(self, rec: ScalingRecord, ev: Evaluation, ctx: ScalingContext,
               notes: list[tuple[str, str]]) -> None:
        """Block further scale-ups of the queries the scale-up did not help (see
        :class:`~sparkscale_listener.decisions.Outcome`)."""
        for qid, outcome in ev.outcomes.items():
            q = ev.queries.get(qid)
            if q is None or outcome.effective:
                continue
            reason = (f"scale-up {rec.from_executors} -> {rec.to_executors} was ineffective: "
                      f"{outcome.verdict}")
            self.blocked[qid] = _Block(reason, q.target_rate, ctx.now)
            notes.append((f"scale-up-blocked:{qid}",
                          f"blocked scale-up for query {_label(q, qid)}: {reason}"))


class ScalingPolicy:
    """Decides, each tick, whether and how far to scale; remembers delays and blocks.

    Not thread-safe: call from the control loop only.
    """

    def __init__(self) -> None:
        self._window = ScaleDownWindow()
        self._issued_from: int | None = None  # the target the last scale-down decided left
        self._blocks = ScaleUpBlocks()
        self._notes: list[tuple[str, str]] = []  # (situation, text)

    # -- memory, for the control loop / state store -----------------------------------------------

    def blocked_queries(self) -> dict[str, str]:
        """Queries whose scale-ups are blocked (ineffective scale-up), with the reason."""
        return {qid: b.reason for qid, b in self._blocks.blocked.items()}

    def pending_scale_down(self, current: int) -> tuple[float, int] | None:
        """(since, target) of the scale-down waiting for scaleDownInterval, if any."""
        since = self._window.run_start(current)
        if since is None:
            return None
        wished = self._window.due(math.inf, 0.0, current)
        return (since, wished.executors) if wished is not None else None

    def last_notes(self) -> list[tuple[str, str]]:
        """Block / unblock notes of the latest :meth:`decide`, each worth one event."""
        return list(self._notes)

    def to_state(self) -> dict[str, Any]:
        """What a restarted driver must not forget (JSON): the scale-down wishes (the wait goes
        on) and the blocked scale-ups (an ineffective scale-up is not tried again)."""
        return {
            "scaleDownWishes": self._window.to_state(),
            **self._blocks.to_state(),
            "scaleDownDueSince": self._window.due_since,
        }

    def load_state(self, state: dict[str, Any]) -> None:
        """Load what :meth:`to_state` produced; malformed entries are skipped."""
        self._window.load_state(state.get("scaleDownWishes"))
        due_since = state.get("scaleDownDueSince")
        self._window.due_since = float(due_since) if isinstance(due_since, (int, float)) else None
        self._blocks.load_state(state)

    # -- the decision -------------------------------------------------------------------------

    def decide(self, evaluation: Evaluation, context: ScalingContext) -> Decision:
        """The decision: ``reason`` a short headline (what and why), ``details`` the figures."""
        self._notes = []
        cfg = context.config
        evaluation = held_while_learning(ScaleUpBlocks.judged(evaluation, context), context)
        if cfg.mode is Mode.REACTIVE:
            return self._reactive(evaluation, context)
        cur = context.current_target
        if not evaluation.ready:
            # Neither continues nor breaks a pending scale-down: there is no new information.
            return self._none(evaluation, context, evaluation.headline or evaluation.reason or "not ready")

        self._blocks.update(evaluation, context, self._notes)

        # Bring a target outside the configured bounds back inside, whatever the load.
        if cur < cfg.min_executors:
            self._hold(context)
            return self._decision(evaluation, context, "scale_up", cfg.min_executors,
                                  f"scale up {cur} -> {cfg.min_executors}: below minExecutors",
                                  "minExecutors")
        if cur > cfg.max_executors:
            self._hold(context)
            return self._decision(evaluation, context, "scale_down", cfg.max_executors,
                                  f"scale down {cur} -> {cfg.max_executors}: above maxExecutors",
                                  "maxExecutors")

        cores = context.slots_per_executor
        util = evaluation.utilization
        rec = evaluation.recommended_executors
        raw = executors_for(evaluation.required_slots, cores)
        above = util is None or util > cfg.utilization_max
        need = _summary(evaluation)

        # An evaluator that recommends more than the load's slots explain asks for it on purpose
        # (a floor, a forecast): that recommendation drives the decision, band or not. The
        # default evaluator never does; its backlog already raises the utilization it reports.
        insists = rec > raw
        # A scale-up that scaleUp.maxFactor cut short follows through: its first step may land in
        # the band, where the rest of the way would otherwise wait for a rise above it.
        last = context.last_scaling
        following = last is not None and last.to_executors == cur and last.cut_short() is not None
        if rec > cur and (above or insists or following):
            self._window.clear()
            return self._scale_up(evaluation, context)

        if util is not None and util > cfg.utilization_max:
            self._hold(context)
            return self._hold_high(evaluation, context, raw)

        # Fewer executors keep the load within the target: a scale-down is wished for, and made
        # once wished for all of scaleDownInterval (the delay is what keeps noise from flapping).
        if rec < cur:
            if evaluation.backlog_mode:
                self._hold(context)
                names = [_label(q, qid) for qid, q in evaluation.queries.items() if q.backlog_mode]
                return self._none(evaluation, context,
                                  f"hold {cur}, no scale-down in backlog mode: {need}",
                                  extra=f"backlog mode: {', '.join(names) or 'a query'} more than "
                                        f"{cfg.backlog_threshold_s:g} s of input behind; {rec} executors "
                                        "would keep up with the arrivals")
            if evaluation.rising:
                self._hold(context)
                names = [_label(q, qid) for qid, q in evaluation.queries.items() if q.rising]
                return self._none(evaluation, context,
                                  f"hold {cur}, no scale-down while the load rises: {need}",
                                  extra=f"load rising: the latest batches of {', '.join(names) or 'a query'} "
                                        f"show more arrivals or run longer; {rec} executors would do "
                                        "for the window's load")
            return self._scale_down(evaluation, context, raw)

        self._hold(context)
        if cur <= cfg.min_executors and raw < cur:
            return self._none(evaluation, context, f"hold {cur} (minExecutors): {need}",
                              "minExecutors")
        if util is not None and util >= cfg.utilization_target:
            return self._none(evaluation, context, f"hold {cur}: {need}",
                              extra=f"utilization between the target {cfg.utilization_target:g} and "
                                    f"utilization.max={cfg.utilization_max:g}: inside the band, no "
                                    "scale-up yet")
        return self._none(evaluation, context, f"hold {cur}: {need}")

    # -- branches -----------------------------------------------------------------------------

    def _scale_up(self, ev: Evaluation, ctx: ScalingContext) -> Decision:
        cfg = ctx.config
        cur = ctx.current_target
        cores = ctx.slots_per_executor
        blocked_notes: list[str] = []
        raw = max(ev.recommended_executors, executors_for(ev.required_slots, cores))
        blocked = self._blocks.blocked
        if blocked and ev.queries:
            # A blocked query may keep the current size but not ask for more; the others may.
            wanted = [cur]
            for qid, q in ev.queries.items():
                if qid in blocked and q.required_executors > cur:
                    blocked_notes.append(f"{_label(q, qid)} ({blocked[qid].reason})")
                else:
                    wanted.append(q.required_executors)
            raw = min(raw, max(wanted))
        insists = ev.recommended_executors > executors_for(ev.required_slots, cores)
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
            signal = f"the evaluator's recommendation of {ev.recommended_executors}"
        blocked_text = ("scale-up blocked (ineffective scale-up) for " + "; ".join(blocked_notes)
                        if blocked_notes else "")
        if target <= cur:
            self._hold(ctx)
            if blocked_notes:
                return self._none(ev, ctx, f"hold {cur}, scale-up blocked: {_summary(ev)}",
                                  "ineffectiveScaleUp", extra=blocked_text)
            return self._none(ev, ctx, f"hold {cur} ({limited or 'no limit'}): {_summary(ev)}", limited)
        limit_text = {
            "maxExecutors": f"limited by maxExecutors={cfg.max_executors} (the load needs {raw})",
            "scaleUp.maxFactor": f"limited by scaleUp.maxFactor={cfg.scale_up_max_factor:g} "
                                 f"(the load needs {raw})",
            "parallelism": "a query whose batches more executors cannot shorten asks for no more",
        }.get(limited or "", "")
        short_limit = f" (limited by {limited})" if limited in ("maxExecutors", "scaleUp.maxFactor") else ""
        extra = "; ".join(x for x in (f"driven by {signal}" + (", backlog mode" if ev.backlog_mode else ""),
                                      limit_text, blocked_text) if x)
        return self._decision(ev, ctx, "scale_up", target,
                              f"scale up {cur} -> {target}{short_limit}: {_summary(ev)}", limited, extra)

    def _hold_high(self, ev: Evaluation, ctx: ScalingContext, raw: int) -> Decision:
        cfg = ctx.config
        cur = ctx.current_target
        if raw > cfg.max_executors and cur >= cfg.max_executors:
            return self._none(ev, ctx, f"hold {cur} (maxExecutors): {_summary(ev)}", "maxExecutors",
                              extra=f"the load needs {raw} executors but maxExecutors={cfg.max_executors}")
        if any(q.capped for q in ev.queries.values()):
            return self._none(ev, ctx, f"hold {cur}, more executors would not help: {_summary(ev)}",
                              "parallelism",
                              extra="no size keeps the batches within the target: the widest stage, "
                                    "driver time or a read limit bound them")
        return self._none(ev, ctx, f"hold {cur}: the evaluator recommends {ev.recommended_executors}; "
                          f"{_summary(ev)}")

    def _scale_down(self, ev: Evaluation, ctx: ScalingContext, raw: int) -> Decision:
        cfg = ctx.config
        cur = ctx.current_target
        # The wish is where the load points (min/maxExecutors applied); scaleDown.maxFactor only
        # limits each step, so a step it cuts short leaves the wish standing for the next.
        wanted, limited = ev.recommended_executors, None
        if raw < cfg.min_executors:
            wanted, limited = cfg.min_executors, "minExecutors"
        if wanted >= cur:
            self._hold(ctx)
            return self._none(ev, ctx, f"hold {cur} ({limited}): {_summary(ev)}", limited)
        limit_text = f"limited by minExecutors={cfg.min_executors}" if limited else ""
        if self._issued_from == cur:
            # The last scale-down decided was not carried out (recommend mode, an excluded period,
            # a failed request): its run is spent; the next one waits anew.
            self._window.clear()
        self._issued_from = None
        self._window.note(_Wish(ctx.now, cur, wanted, limited, _summary(ev)), cfg.scale_down_interval_s)
        wish = self._window.due(ctx.now, cfg.scale_down_interval_s, cur)
        start = self._window.run_start(cur)
        waited = ctx.now - (ctx.now if start is None else start)
        if wish is None:
            left = cfg.scale_down_interval_s - waited
            return self._none(ev, ctx, f"hold {cur}, scale-down to {wanted} in {readable.seconds(left)}: "
                              f"{_summary(ev)}", limited,
                              extra=f"scale-down to {wanted} pending for {waited:.0f}s of "
                                    f"{cfg.scale_down_interval_s:.0f}s (scaleDownInterval)"
                                    + (f"; {limit_text}" if limit_text else ""))
        came_due = self._window.came_due(ctx.now)
        if ev.measured_until is not None and ev.measured_until + _EPS < came_due:
            # The batches measured so far read what arrived before the scale-down came due; a
            # step since then is unseen (on Kafka, 2 -> 1 came 3 s after a x10 step). The next
            # batch, started after it came due, confirms it or breaks the run.
            behind = readable.seconds(came_due - ev.measured_until)
            return self._none(ev, ctx, f"hold {cur}, scale-down to {wish.executors} due: waiting for a "
                              f"batch started after it came due: {_summary(ev)}", limited,
                              extra=f"fewer executors recommended for {waited:.0f}s "
                                    f"(scaleDownInterval={cfg.scale_down_interval_s:g}s); the latest "
                                    f"completed batch started {behind} before it came due")
        factor_floor = math.ceil(cur * (1.0 - cfg.scale_down_max_factor) - _EPS)
        to, limited_by = wish.executors or cur, wish.limited_by
        largest = f"the largest recommendation over it was {wish.executors}"
        if to < factor_floor:
            to, limited_by = factor_floor, "scaleDown.maxFactor"
            largest += f", limited by scaleDown.maxFactor={cfg.scale_down_max_factor:g}"
        self._issued_from = cur
        self._window.issued()
        return self._decision(ev, ctx, "scale_down", to,
                              f"scale down {cur} -> {to} after {readable.seconds(waited)} of lower "
                              f"recommendations: {_summary(ev)}", limited_by,
                              extra=f"fewer executors recommended for {waited:.0f}s "
                                    f"(scaleDownInterval={cfg.scale_down_interval_s:g}s); {largest}"
                                    + (f"; {limit_text}" if limit_text else ""))

    def _hold(self, ctx: ScalingContext) -> None:
        """This tick wants no scale-down: the delayed scale-down's run is broken."""
        self._window.note(_Wish(ctx.now, ctx.current_target, None), ctx.config.scale_down_interval_s)

    def _reactive(self, ev: Evaluation, ctx: ScalingContext) -> Decision:
        cfg = ctx.config
        target = cfg.max_executors
        cur = ctx.current_target
        have = ctx.live_executors + ctx.pending_executors
        self._window.clear()
        if cur < target:
            return Decision(time=ctx.now, action="scale_up", from_executors=cur, to_executors=target,
                            reason=f"scale up {cur} -> {target}: reactive mode takes every executor up to "
                                   "maxExecutors",
                            evaluation=ev, limited_by="maxExecutors")
        if have < target:
            return Decision(time=ctx.now, action="scale_up", from_executors=have, to_executors=target,
                            reason=f"scale up {have} -> {target}: reactive mode re-requests "
                                   f"{readable.executors(target - have)} lost",
                            evaluation=ev, limited_by="maxExecutors")
        return Decision(time=ctx.now, action="none", from_executors=cur, to_executors=cur,
                        reason=f"reactive mode: holding {cur} executors (maxExecutors={target}); "
                               "never scaling down by choice", evaluation=ev)

    # -- helpers -------------------------------------------------------------------------------

    def _none(self, ev: Evaluation, ctx: ScalingContext, headline: str,
              limited_by: str | None = None, extra: str = "") -> Decision:
        cur = ctx.current_target
        return Decision(time=ctx.now, action="none", from_executors=cur, to_executors=cur,
                        reason=headline, details=self._details(ev, extra), evaluation=ev,
                        limited_by=limited_by)

    def _decision(self, ev: Evaluation, ctx: ScalingContext, action: str, target: int, headline: str,
                  limited_by: str | None, extra: str = "") -> Decision:
        return Decision(time=ctx.now, action=action,  # type: ignore[arg-type]
                        from_executors=ctx.current_target, to_executors=target, reason=headline,
                        details=self._details(ev, extra), evaluation=ev, limited_by=limited_by)

    def _details(self, ev: Evaluation, extra: str) -> str:
        """What stands behind the headline: the policy's own words, the evaluator's figures, the
        blocks noted this tick."""
        figures = ev.reason if ev.headline else ""  # else the headline is the evaluator's reason
        return "; ".join(x for x in (extra, figures, *(text for _, text in self._notes)) if x)
