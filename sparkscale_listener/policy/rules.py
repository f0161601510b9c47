"""The rules that turn a measurement into an action, each in one place: the recommendation within
min/maxExecutors (:func:`within_bounds`), the current size held while a query learns its cost
(:func:`held_while_learning`), the scale-down that waits for ``scaleDownInterval``
(:class:`ScaleDownWindow`) and the blocks after an ineffective scale-up (:class:`ScaleUpBlocks`).
The band and the scale-up/scale-down factors are :class:`~.scaling_policy.ScalingPolicy`'s branches."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from ..decisions import Evaluation, QueryEvaluation, ScalingContext, ScalingRecord

_EPS = 1e-9
# A blocked query is unblocked when its target rate moves by more than this fraction.
UNBLOCK_LOAD_CHANGE = 0.5


@dataclass(frozen=True)
class Wish:
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
        self._wishes: deque[Wish] = deque()
        self.due_since: float | None = None  # when the current run's scale-down first came due

    def note(self, wish: Wish, interval_s: float) -> None:
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

    def due(self, now: float, interval_s: float, current: int) -> Wish | None:
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
                self._wishes.append(Wish(float(w["time"]), int(w["current"]), executors,
                                          w.get("limitedBy"), str(w.get("reason", ""))))
            except (KeyError, TypeError, ValueError, AttributeError):
                continue


@dataclass
class _Block:
    reason: str
    target_rate: float  # the query's target rate when blocked; a big move unblocks
    since: float


def label_of(q: QueryEvaluation | None, qid: str) -> str:
    return f"'{q.name}'" if q is not None and q.name else qid


def queries_where(ev: Evaluation, test: Callable[[QueryEvaluation], bool]) -> str:
    """The labels of the evaluation's queries that pass ``test``, for a reason ("a query" if none)."""
    return ", ".join(label_of(q, qid) for qid, q in ev.queries.items() if test(q)) or "a query"


def within_bounds(ev: Evaluation, ctx: ScalingContext) -> Evaluation:
    """The recommendation within ``minExecutors`` and ``maxExecutors``, whatever the load asks
    (a not-ready evaluation recommends the current size, and is left as it is)."""
    bounded = ctx.config.bounded(ev.recommended_executors)
    if not ev.ready or bounded == ev.recommended_executors:
        return ev
    return replace(ev, recommended_executors=bounded,
                   reason="; ".join(x for x in (ev.reason, f"bounded to {bounded} by min/maxExecutors") if x))


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
                    f"unblocked scale-up for query {label_of(q, qid)}: target rate moved from "
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
                          f"blocked scale-up for query {label_of(q, qid)}: {reason}"))
