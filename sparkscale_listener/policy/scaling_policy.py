"""The scaling policy: from an :class:`Evaluation` to a :class:`Decision` (see the package's
docstring)."""

from __future__ import annotations

import math
from typing import Any

from .. import readable
from ..config.core import Mode
from ..decisions import Decision, Evaluation, ScalingContext
from ..model import executors_for
from .rules import (
    ScaleDownWindow,
    ScaleUpBlocks,
    Wish,
    held_while_learning,
    label_of,
    queries_where,
    within_bounds,
)

_EPS = 1e-9


def _forecast_confirms(ev: Evaluation, wanted: int) -> bool:
    """scaleDownInterval guards against a dip that turns out brief. Where every query's forecast is
    applied (checked within forecast.maxError) and sees no load above the smaller size within it, the
    forecast has answered that already: the interval is not waited out."""
    f = ev.forecast
    return f is not None and f.applied and f.every_query and f.returning <= wanted


def _summary(ev: Evaluation) -> str:
    """What the evaluator says the load needs, in a line (an evaluator plugin that sets no headline:
    its reason)."""
    return ev.headline or ev.reason or f"the evaluator recommends {ev.recommended_executors}"


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
        evaluation = held_while_learning(within_bounds(ScaleUpBlocks.judged(evaluation, context), context),
                                         context)
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
                names = queries_where(evaluation, lambda q: q.backlog_mode)
                return self._hold_up(evaluation, context, f"no scale-down in backlog mode: {need}",
                                     f"backlog mode: {names} more than {cfg.backlog_threshold_s:g} s of "
                                     f"input behind; {rec} executors would keep up with the arrivals")
            if evaluation.rising:
                names = queries_where(evaluation, lambda q: q.rising)
                return self._hold_up(evaluation, context, f"no scale-down while the load rises: {need}",
                                     f"load rising: the latest batches of {names} show more arrivals or run "
                                     f"longer; {rec} executors would do for the window's load")
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
                    blocked_notes.append(f"{label_of(q, qid)} ({blocked[qid].reason})")
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
        # A pre-scale: the forecast load ahead, not the present one, asks for the executors.
        forecast = ev.forecast if insists and ev.forecast is not None and ev.forecast.applied else None
        ahead = forecast is not None and forecast.ahead >= ev.recommended_executors
        if insists:
            signal = ("the forecast load ahead" if ahead
                      else f"the evaluator's recommendation of {ev.recommended_executors}")
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
        headline = (f"pre-scale {cur} -> {target}{short_limit}: {forecast.text}" if ahead and forecast
                    else f"scale up {cur} -> {target}{short_limit}: {_summary(ev)}")
        return self._decision(ev, ctx, "scale_up", target, headline, limited, extra)

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
        self._window.note(Wish(ctx.now, cur, wanted, limited, _summary(ev)), cfg.scale_down_interval_s)
        confirmed = _forecast_confirms(ev, wanted)
        interval = f"scaleDownInterval={cfg.scale_down_interval_s:g}s"
        wish = self._window.due(ctx.now, 0.0 if confirmed else cfg.scale_down_interval_s, cur)
        start = self._window.run_start(cur)
        waited = ctx.now - (ctx.now if start is None else start)
        if wish is None:
            left = readable.seconds(cfg.scale_down_interval_s - waited)
            return self._none(ev, ctx, f"hold {cur}, scale-down to {wanted} in {left}: {_summary(ev)}",
                              limited, extra=f"scale-down to {wanted} pending for {waited:.0f}s of "
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
                              extra=f"fewer executors recommended for {waited:.0f}s ({interval}); the "
                                    f"latest completed batch started {behind} before it came due")
        factor_floor = math.ceil(cur * (1.0 - cfg.scale_down_max_factor) - _EPS)
        to, limited_by = wish.executors or cur, wish.limited_by
        largest = f"the largest recommendation over it was {wish.executors}"
        if to < factor_floor:
            to, limited_by = factor_floor, "scaleDown.maxFactor"
            largest += f", limited by scaleDown.maxFactor={cfg.scale_down_max_factor:g}"
        self._issued_from = cur
        self._window.issued()
        early = ev.forecast if confirmed and waited + _EPS < cfg.scale_down_interval_s else None
        headline, why = ((f"scale down {cur} -> {to}, the forecast sees the load stay low",
                          f", and no more within {interval} by the applied forecast ({early.text})") if early
                         else (f"scale down {cur} -> {to} after {readable.seconds(waited)} of lower "
                               "recommendations", f" ({interval})"))
        return self._decision(ev, ctx, "scale_down", to, f"{headline}: {_summary(ev)}", limited_by,
                              extra=f"fewer executors recommended for {waited:.0f}s{why}; {largest}"
                                    + (f"; {limit_text}" if limit_text else ""))

    def _hold_up(self, ev: Evaluation, ctx: ScalingContext, why: str, extra: str) -> Decision:
        """Keep the executors although fewer would do (``why``: what keeps them)."""
        self._hold(ctx)
        return self._none(ev, ctx, f"hold {ctx.current_target}, {why}", extra=extra)

    def _hold(self, ctx: ScalingContext) -> None:
        """This tick wants no scale-down: the delayed scale-down's run is broken."""
        self._window.note(Wish(ctx.now, ctx.current_target, None), ctx.config.scale_down_interval_s)

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
