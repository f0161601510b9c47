"""The rollback guard: watches each applied scaling with the checkers, and rolls a bad one back.

After every applied scale-up or scale-down the control loop hands the guard the samples collected
since (:meth:`RollbackGuard.observe`, once per tick). The guard runs every configured
:class:`~sparkscale_listener.check.checker.ScalingChecker` and returns one :class:`GuardOutcome`: keep
watching, healthy (the new target becomes the last healthy one), roll back to the last healthy (or
the initial) target, or pause without rolling back. The pause after a rollback and the stop after
too many of them are its :class:`~sparkscale_listener.check.pause.ScalingPause`. Flink proposed this
(FLINK-37411) and never built it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .. import readable
from ..config.core import AutoscalerConfig
from ..decisions import ScalingRecord
from ..metrics import executor_id_order
from .checker import CheckContext, CheckResult, ScalingChecker, format_seconds
from .pause import ScalingPause

log = logging.getLogger("sparkscale")

OutcomeAction = Literal["none", "watching", "healthy", "rollback", "failed"]


@dataclass(frozen=True)
class GuardOutcome:
    """What :meth:`RollbackGuard.observe` concluded at one tick.

    - ``none``: nothing is being watched.
    - ``watching``: all healthy so far, the watch goes on.
    - ``healthy``: watched long enough; ``target`` is the new last healthy target, watch ended.
    - ``rollback``: unhealthy; the guard has counted the rollback and paused (or stopped). The
      caller realizes ``target``, removing the ``suspects`` first, and then calls
      :meth:`RollbackGuard.watch_rollback`.
    - ``failed``: unhealthy, but no rollback is made (the watched action was itself a rollback,
      or the rollback target is the current one); the guard has paused. ``reason`` says why.
    """

    action: OutcomeAction
    reason: str
    results: tuple[CheckResult, ...] = ()
    unhealthy: CheckResult | None = None
    target: int | None = None
    # Executors to remove first on a rollback: those the judged scale-up added (and the earlier
    # steps of its climb) whose tasks failed since it began.
    suspects: frozenset[str] = frozenset()


class RollbackGuard:
    """Watches each applied scaling with the checkers and decides rollbacks, pauses and stops.

    The control loop's sequence:

    1. ``watch(record, healthy_target_before)`` when a scale-up/down is applied.
    2. Every tick while ``watching`` is set: ``outcome = observe(context, initial, current)``.
       A scaling watched for ``window_s()`` with every checker healthy becomes the last healthy
       target and the watch ends; an unhealthy result ends the watch too (the scaling has been
       judged), so the same failure is never acted on twice.
    3. On ``rollback``: realize ``outcome.target``, then ``watch_rollback(record)``. A rollback
       is never rolled back: if it is judged unhealthy too, the outcome is ``failed`` (pause).
    4. Before applying any decision: skip it while ``pause.active(now)`` (``pause.reason(now)``
       says why).

    ``to_state``/``load_state`` keep the last healthy target, rollback times, a timed pause and a
    stop across driver restarts; a pause "until restart" is, by design, not restored.
    """

    STATE_VERSION = 1

    def __init__(self, config: AutoscalerConfig, checkers: Sequence[ScalingChecker]) -> None:
        self.config = config
        self.checkers: list[ScalingChecker] = list(checkers)
        self.pause = ScalingPause(config)
        self.healthy_target: int | None = None  # last target known healthy
        self._watch: ScalingRecord | None = None
        self._watch_is_rollback = False
        # The target in force is known healthy (start, or a completed watch); a target reached
        # by an unconfirmed or failed action must not become the "last healthy" one.
        self._current_confirmed = True
        # The target in force was reached by an action the checkers judged unhealthy.
        self._current_judged_unhealthy = False
        # Where a rollback of the watched action goes (rollback.target=last), see watch().
        self._undo_target: int | None = None
        # (time, target before) of the first step of the scale-up being watched: a scale-up made
        # while the one before it is still watched continues the same climb (see watch()).
        self._climb: tuple[float, int] | None = None

    # --- watching -----------------------------------------------------------------------------

    @property
    def watching(self) -> ScalingRecord | None:
        """The action being watched, or None."""
        return self._watch

    def window_s(self) -> float:
        """How long an action is watched: the longest window of the checkers. Keep at least
        this much sample history for them."""
        return max((float(getattr(c, "window_s", 0.0) or 0.0) for c in self.checkers), default=0.0)

    def watch(self, scaling: ScalingRecord, healthy_target_before: int) -> None:
        """Start watching an applied scale-up or scale-down. ``healthy_target_before`` is the
        target in force before it; it becomes the last healthy target unless that target was
        itself never confirmed (an earlier action still watched, or one judged unhealthy).

        A rollback of this action undoes it: back to ``healthy_target_before`` even when that
        target's own watch was cut short by this action (nothing was found wrong with it), unless
        it was judged unhealthy; then to the last healthy target.

        A scale-up made while a scale-up is still watched (the rest of a step ``scaleUp.maxFactor``
        cut short, arrivals that outgrew the first step) continues the same climb: undoing it
        (``rollback.target=last``) also removes the earlier steps' executors that go on failing
        tasks, down to where the climb began. Their failures may have stayed under the checkers'
        thresholds until this step started a new count, and undoing only this step would keep
        them."""
        previous = self._watch
        if not (previous is not None and not self._watch_is_rollback
                and previous.action == scaling.action == "scale_up"):
            self._climb = (scaling.time, healthy_target_before)
        if self._current_confirmed or self.healthy_target is None:
            self.healthy_target = healthy_target_before
        self._undo_target = None if self._current_judged_unhealthy else healthy_target_before
        self._start_watch(scaling, rollback=False)

    def watch_rollback(self, scaling: ScalingRecord) -> None:
        """Start watching an applied rollback (never rolled back itself)."""
        self._start_watch(scaling, rollback=True)

    def _start_watch(self, scaling: ScalingRecord, rollback: bool) -> None:
        self._watch = scaling
        self._watch_is_rollback = rollback
        self._current_confirmed = False
        self._current_judged_unhealthy = False

    def observe(self, context: CheckContext, initial_target: int, current_target: int) -> GuardOutcome:
        """Judge the watched action at ``context.now`` and say what to do next (see the class
        docs). On ``rollback`` and ``failed`` the guard has already paused (or stopped)."""
        scaling, was_rollback = self._watch, self._watch_is_rollback
        if scaling is None:
            return GuardOutcome("none", "no scaling is being watched")
        results = tuple(self._run_checkers(context))
        bad = next((r for r in results if not r.healthy), None)
        now = context.now
        elapsed = now - scaling.time
        what = (f"rollback to {scaling.to_executors}" if was_rollback
                else f"{scaling.action} {scaling.from_executors}->{scaling.to_executors}")
        if bad is None:
            duration = self.window_s()
            pending = [r.checker for r in results if r.pending]
            # A pending checker may hold the watch for at most one more duration: one that can
            # never judge must not keep the target unconfirmed forever.
            if elapsed >= duration and (not pending or elapsed >= 2 * duration):
                self._end_watch(confirmed=True)
                # The target in force: a scale-up held at the cluster's capacity is healthy at
                # what it got, not at what it asked for.
                self.healthy_target = current_target
                return GuardOutcome("healthy", f"{what} healthy for {format_seconds(elapsed)}: "
                                    f"{readable.executors(current_target)} is the last healthy target",
                                    results, None, current_target)
            waiting = f", waiting for {', '.join(pending)}" if pending else ""
            return GuardOutcome("watching", f"{what}: healthy after {format_seconds(elapsed)} of "
                                f"{format_seconds(duration)}{waiting}", results)
        self._end_watch(confirmed=False)
        self._current_judged_unhealthy = True
        target = self.rollback_target(initial_target)
        suspects: frozenset[str] = frozenset()
        undo_earlier = ""
        if not was_rollback and scaling.action == "scale_up":
            target, suspects, undo_earlier = self._undo_climb(context, scaling, target)
        if was_rollback or target == current_target:
            # A failing rollback (or nothing to roll back to) is reported and paused, never chained.
            why = ("still unhealthy after the rollback" if was_rollback
                   else f"already at the rollback target {target}")
            self.pause.pause(now, f"checker {bad.checker}: {bad.reason}; {why}")
            return GuardOutcome("failed", f"checker {bad.checker} found the job unhealthy "
                                f"({bad.reason}), {why}; automatic scaling paused", results, bad)
        self.pause.record_rollback(now, bad.checker, bad.reason)
        return GuardOutcome("rollback", f"checker {bad.checker} found the scaling unhealthy: "
                            f"{bad.reason}{undo_earlier}", results, bad, target, suspects)

    def _undo_climb(self, context: CheckContext, scaling: ScalingRecord,
                    target: int) -> tuple[int, frozenset[str], str]:
        """The rollback of a scale-up: (target, suspects, what it adds to the reason). The
        suspects are the live executors the climb added whose tasks failed since the watched step
        began (for its own executors: at all), removed first. When the rollback undoes the last
        step (``rollback.target=last``) and removing as many executors as that leaves some of them,
        the target goes lower by as many, not below where the climb began."""
        assert self._climb is not None
        since, climb_from = self._climb
        latest = context.samples[-1] if context.samples else context.before
        if latest is None:
            return target, frozenset(), ""
        failed_before = ({e.executor_id: e.tasks_failed for e in context.before.cluster.executors}
                         if context.before is not None else {})
        live = latest.cluster.live()
        failing = sorted((e.executor_id for e in live if e.added_time >= since
                          and e.tasks_failed > failed_before.get(e.executor_id, 0)),
                         key=executor_id_order)
        kept = len(failing) - max(0, len(live) - target)  # the realizer removes suspects first
        floor = max(climb_from, self.config.min_executors)
        undoes_last_step = self._undo_target is not None and self.config.rollback_target == "last"
        if kept <= 0 or not undoes_last_step or target <= floor:
            return target, frozenset(failing), ""
        lowered = max(floor, target - kept)
        return lowered, frozenset(failing), (
            f"; tasks failed on executors {', '.join(failing)}, added since the scale-up from "
            f"{climb_from} began: down to {lowered}, not {target}")

    def _run_checkers(self, context: CheckContext) -> list[CheckResult]:
        """Every checker's result. An exception or a wrong return value in a checker counts as
        healthy with reason "checker error: ..."."""
        results = []
        for checker in self.checkers:
            name = getattr(checker, "name", "") or type(checker).__name__
            try:
                result = checker.check(context)
                if not isinstance(result, CheckResult):
                    raise TypeError(f"check() returned {type(result).__name__}, expected CheckResult")
            except Exception as e:  # never crash the control loop, never roll back on our bug
                log.warning("checker %s raised; counted as healthy", name, exc_info=True)
                result = CheckResult(name, True, f"checker error: {type(e).__name__}: {e}")
            results.append(result)
        return results

    def _end_watch(self, confirmed: bool) -> None:
        self._watch = None
        self._current_confirmed = confirmed

    # --- rollback target ---------------------------------------------------------------------------

    def rollback_target(self, initial_target: int) -> int:
        """Where to roll back to, within min/maxExecutors. ``rollback.target=last``: the target
        before the watched action (see :meth:`watch`), else the last healthy target, else the
        initial one. ``initial``: the initial one."""
        target = initial_target
        if self.config.rollback_target == "last":
            if self._undo_target is not None:
                target = self._undo_target
            elif self.healthy_target is not None:
                target = self.healthy_target
        return self.config.bounded(target)

    # --- persistence ----------------------------------------------------------------------------

    def to_state(self) -> dict[str, Any]:
        """JSON-serializable state for a state store: the last healthy target and the pause. The
        watch is left out on purpose: it does not outlive the application."""
        return {"version": self.STATE_VERSION, "healthy_target": self.healthy_target,
                **self.pause.to_state()}

    def load_state(self, state: dict[str, Any]) -> None:
        """Load what :meth:`to_state` produced. Missing or malformed entries keep defaults."""
        target = state.get("healthy_target")
        self.healthy_target = (int(target) if isinstance(target, int) and not isinstance(target, bool)
                               and target >= 0 else None)
        self.pause.load_state(state)
        self._watch = None
        self._current_confirmed = True
        self._current_judged_unhealthy = False
        self._undo_target = None
        self._climb = None
