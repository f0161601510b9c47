"""Each query's forecast of its arrivals (:class:`ArrivalForecasts`): learnt from the arrivals its
completed batches show, checked like every prediction (each forecast recorded with its horizon and
compared with the arrivals that came), applied only while its recent error is within
``forecast.maxError`` and ``forecast.mode=on``, kept in the state store across driver restarts."""

from __future__ import annotations

import itertools
import math
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import readable
from ..config.core import AutoscalerConfig
from ..metrics import MetricSample, QueryMetrics
from .profile import RateHistory, SeasonalProfile, bins_for, detect_period

# The error is read over this many periods of checked forecasts (the newest), and only once this share of
# a period's slots (at least MIN_CHECKED_SLOTS) were checked: a handful of lucky slots applies nothing.
# The newest that many checks count on their own too: a pattern that shifted goes to shadow at once,
# not once its misses outweigh periods of good forecasts.
ERROR_PERIODS = 3
CHECKED_SHARE = 0.1
MIN_CHECKED_SLOTS = 3
# A query not reported for this many periods (a day where no period is known) is forgotten.
FORGET_PERIODS = 2
_DAY_S = 86400.0
_EPS = 1e-9


@dataclass(frozen=True)
class QueryForecast:
    """What one query's forecast says at a tick: the rates the evaluator sizes on, and whether they
    are applied (``applied``) or only shown (shadow)."""

    query_id: str
    period_s: float
    detected: bool  # the period was detected from the history (not forecast.period)
    rate_now: float  # forecast rows/s of the current slot
    horizon_s: float  # a provisioning time plus a batch period
    peak_rate: float  # the highest forecast rows/s from now to the horizon
    peak_at: float  # the start of that slot
    return_rate: float  # the highest forecast rows/s from now to scaleDownInterval ahead
    return_at: float
    # The highest forecast rows/s until a decision after a change can come (the horizon,
    # stabilizationInterval and two batches): what a pre-scale is sized for.
    settled_rate: float
    settled_at: float
    error: float | None  # the recent forecasts' error: |forecast - arrivals| over arrivals; None: unchecked
    checked_periods: float  # the periods that error covers
    applied: bool
    state: str  # why it is applied or in shadow, in words

    def reaches(self, now: float) -> str:
        """``the load reaches 480 rows/s at 09:00 in 40 s, forecast error 6 % over the last 3 periods``:
        the load a pre-scale is sized for."""
        at = clock_time(self.settled_at, self.period_s)
        return (f"the load reaches {readable.rate(self.settled_rate)} at {at} "
                f"in {readable.seconds(max(0.0, self.settled_at - now))}, {self.error_text()}")

    def error_text(self) -> str:
        if self.error is None:
            return "forecast not checked yet"
        periods = max(1, math.ceil(self.checked_periods - _EPS))
        return (f"forecast error {self.error:.0%} over the last "
                + ("period" if periods == 1 else f"{periods} periods"))

    def to_dict(self) -> dict[str, Any]:
        return {"period_s": self.period_s, "detected": self.detected, "rate_now": self.rate_now,
                "horizon_s": self.horizon_s, "peak_rate": self.peak_rate, "peak_at": self.peak_at,
                "return_rate": self.return_rate, "error": self.error, "applied": self.applied,
                "state": self.state}


def _error(checks: Sequence[tuple[int, float, float]],
           profile: SeasonalProfile) -> tuple[float | None, float]:
    """The checked forecasts' error, |forecast - arrivals| over arrivals (summed over the slots: a
    quiet slot's miss weighs as little as its rows), and the periods they cover."""
    if not checks:
        return None, 0.0
    missed = sum(c[1] for c in checks)
    arrived = sum(c[2] for c in checks)
    span = (checks[-1][0] - checks[0][0] + 1) / profile.bins
    return (missed / arrived if arrived > _EPS else (0.0 if missed <= _EPS else math.inf)), span


def clock_time(t: float, period_s: float) -> str:
    """The moment as a clock reads it (local time); with seconds where the period is short."""
    return time.strftime("%H:%M:%S" if period_s < 3600 else "%H:%M", time.localtime(t))


@dataclass
class _Query:
    """One query's learning: the history (for the period), the profile, the open slot, the ledger."""

    history: RateHistory
    profile: SeasonalProfile | None = None
    detected: bool = False
    slot: int | None = None  # the profile's slot being filled
    rows: float = 0.0
    seconds: float = 0.0
    last_batch: int | None = None
    last_seen: float = 0.0
    predicted: dict[int, float] = field(default_factory=dict)  # slot -> forecast made a horizon ahead
    checks: deque[tuple[int, float, float]] = field(default_factory=deque)  # (slot, |miss|, arrivals)
    detect_length: int = 0  # the history's length at the last detection attempt


class ArrivalForecasts:
    """Every query's forecast (see the module's docstring): :meth:`observe` once per tick with the
    sample, :meth:`forecasts` what the evaluator sizes on."""

    def __init__(self, config: AutoscalerConfig) -> None:
        self.config = config
        self.mode = config.forecast_mode
        self.max_error = config.forecast_max_error
        self.period_s = config.forecast_period_s  # None: detected per query
        # The shortest slot: a few control ticks, so each slot sees a batch or two.
        self.slot_s = 2.0 * config.interval_s
        self._queries: dict[str, _Query] = {}
        self._latest: dict[str, QueryForecast] = {}
        self._learnt = False  # a slot closed or the history grew since the state was last taken

    def forecasts(self) -> Mapping[str, QueryForecast]:
        """The latest forecast of each query that has one."""
        return dict(self._latest)

    def observe(self, sample: MetricSample, provisioning_s: float) -> None:
        """Learn the arrivals of the batches completed since the last call, check the forecasts they
        settle, and forecast each query a horizon ahead."""
        now = sample.time
        self._latest = {}
        for q in sample.queries.values():
            if not q.active or q.real_time:
                continue
            state = self._queries.get(q.query_id)
            if state is None:
                state = self._queries[q.query_id] = _Query(RateHistory(self.slot_s))
            state.last_seen = now
            self._learn(state, q)
            forecast = self._forecast(q, state, now, provisioning_s)
            if forecast is not None:
                self._latest[q.query_id] = forecast
        for qid in [qid for qid, s in self._queries.items()
                    if now - s.last_seen > FORGET_PERIODS * (s.profile.period_s if s.profile else _DAY_S)]:
            del self._queries[qid]

    def learnt_state(self) -> dict[str, Any] | None:
        """:meth:`to_state` when something was learnt since the last call (a slot closed, the history
        grew), else None: the state is written as it changes, not at every tick (it holds a history
        and a profile per query, and each write is one more JSON of them to the store)."""
        if not self._learnt:
            return None
        self._learnt = False
        return self.to_state()

    def horizon_s(self, q: QueryMetrics, provisioning_s: float) -> float:
        """How far ahead a query is sized: a provisioning time (new executors register) plus a batch
        period (the batch that then reads the load)."""
        trigger_s = q.trigger_interval_ms / 1000.0 if q.trigger_interval_ms else self.config.interval_s
        return provisioning_s + trigger_s

    # -- learning -----------------------------------------------------------------------------------

    def _learn(self, state: _Query, q: QueryMetrics) -> None:
        batches = list(q.recent_batches)
        known = (len(state.history.rates), state.history.resolution_s, state.slot)
        for previous, b in itertools.pairwise(batches):
            if state.last_batch is not None and b.batch_id <= state.last_batch:
                continue
            seconds = b.start - previous.start
            if b.batch_id != previous.batch_id + 1 or seconds <= 0:
                continue
            rows = b.arrivals(previous.backlog)
            middle = previous.start + seconds / 2.0
            state.history.add(middle, rows / seconds)
            self._into_slot(state, middle, rows, seconds)
        if batches:
            state.last_batch = max(batches[-1].batch_id, state.last_batch or -1)
        if state.profile is None:
            self._start_profile(state)
        if (len(state.history.rates), state.history.resolution_s, state.slot) != known:
            self._learnt = True

    def _into_slot(self, state: _Query, t: float, rows: float, seconds: float) -> None:
        """Arrivals into the profile's slot of ``t``; a later slot closes the open one (learnt, and its
        forecast checked)."""
        profile = state.profile
        if profile is None:
            return
        slot = profile.slot_of(t)
        if state.slot is not None and slot > state.slot and state.seconds > 0:
            rate = state.rows / state.seconds
            predicted = state.predicted.pop(state.slot, None)
            if predicted is not None:
                state.checks.append((state.slot, abs(predicted - rate), rate))
            profile.learn(state.slot, rate)
            state.rows = state.seconds = 0.0
            for old in [k for k in state.predicted if k <= state.slot]:
                del state.predicted[old]
            while state.checks and state.checks[0][0] <= slot - ERROR_PERIODS * profile.bins:
                state.checks.popleft()
        if state.slot is None or slot >= state.slot:
            state.slot = slot
            state.rows += rows
            state.seconds += seconds

    def _start_profile(self, state: _Query) -> None:
        """The configured period's profile at once; else, once the history shows a period, a profile
        of it that starts from the history's last period."""
        if self.period_s is not None:
            state.profile = SeasonalProfile(self.period_s, bins_for(self.period_s, self.slot_s))
            return
        history = state.history
        grown = len(history.rates) - state.detect_length
        if 0 <= grown < max(1, len(history.rates) // 20):
            return  # tried on nearly this history already (a negative growth: its resolution halved)
        state.detect_length = len(history.rates)
        period = detect_period(history.rates, history.resolution_s, shortest_s=6 * self.slot_s)
        if period is None:
            return
        profile = SeasonalProfile(period, bins_for(period, max(self.slot_s, history.resolution_s)))
        assert history.start_slot is not None
        # The history's rates in the profile's slots, the last whole period of them.
        by_slot: dict[int, list[float]] = {}
        for j, r in enumerate(history.rates):
            if r is not None:
                by_slot.setdefault(profile.slot_of((history.start_slot + j + 0.5) * history.resolution_s),
                                   []).append(r)
        last = max(by_slot) - 1  # the newest slot may still be filling
        rates: list[float | None] = [sum(v) / len(v) if (v := by_slot.get(k)) else None
                                     for k in range(last - profile.bins + 1, last + 1)]
        profile.start_from(rates, last)
        state.profile, state.detected = profile, True

    # -- forecasting and checking -------------------------------------------------------------------

    def _forecast(self, q: QueryMetrics, state: _Query, now: float,
                  provisioning_s: float) -> QueryForecast | None:
        profile = state.profile
        if profile is None or not profile.ready:
            return None
        horizon = self.horizon_s(q, provisioning_s)
        # Recorded once per slot, as first forecast a horizon ahead: checked when the slot closes. The
        # slots before the horizon too, where none is recorded (the profile just became ready, or the
        # driver restarted), forecast less far ahead: checked from the next slot's close on, not a
        # horizon later (on a 160 s period the second ramp came before 4 checks and was not pre-scaled).
        ahead = profile.slot_of(now + horizon)
        for slot in range(profile.slot_of(now) + 1, ahead + 1):
            state.predicted.setdefault(slot, profile.rate_at(slot))
        # A slot's forecast is its mean: on a ramp the load reaches the next slot's by its end, so the
        # slot after the horizon's counts too (without it, a 30 s ramp was pre-scaled for in two steps,
        # the second after the first's stabilization, as the ramp ended).
        peak, peak_at = profile.peak(now, now + horizon + profile.slot_s)
        back, back_at = profile.peak(now, now + self.config.scale_down_interval_s)
        # After a change no decision comes until its executors registered, stabilizationInterval passed
        # and two batches ran: a pre-scale to the peak within the horizon alone was followed by a
        # second one as a 30 s ramp ended.
        settle = horizon + self.config.stabilization_interval_s + 2 * (horizon - provisioning_s)
        settled, settled_at = profile.peak(now, now + settle + profile.slot_s)
        error, periods = _error(state.checks, profile)
        applied, why = self._verdict(error, state.checks, profile)
        return QueryForecast(q.query_id, profile.period_s, state.detected,
                             profile.rate_at(profile.slot_of(now)), horizon, peak, peak_at, back, back_at,
                             settled, settled_at, error, periods, applied, why)

    def _verdict(self, error: float | None, checks: deque[tuple[int, float, float]],
                 profile: SeasonalProfile) -> tuple[bool, str]:
        """Applied, or in shadow, and why (``forecast.mode``, its error, too few checks)."""
        needed = max(MIN_CHECKED_SLOTS, math.ceil(CHECKED_SHARE * profile.bins))
        if self.mode != "on":
            return False, f"shadow (forecast.mode={self.mode})"
        if error is None or len(checks) < needed:
            return False, f"shadow: {len(checks)} of {needed} forecasts checked"
        newest, _ = _error(list(checks)[-needed:], profile)
        bound = f"forecast.maxError={self.max_error:.0%}"
        if error > self.max_error:
            return False, f"shadow: error {error:.0%} above {bound}"
        if newest is not None and newest > self.max_error:
            newest_s = readable.seconds(needed * profile.slot_s)
            return False, f"shadow: error {newest:.0%} over the last {newest_s} above {bound}"
        return True, f"applied: error {error:.0%} within {bound}"

    # -- state ------------------------------------------------------------------------------------

    def to_state(self) -> dict[str, Any]:
        """What a restarted driver must not relearn (JSON): each query's history and profile, its open
        slot and its checked forecasts."""
        return {qid: {"history": s.history.to_state(),
                      "profile": s.profile.to_state() if s.profile else None, "detected": s.detected,
                      "slot": s.slot, "rows": s.rows, "seconds": s.seconds, "lastSeen": s.last_seen,
                      "predicted": [[k, v] for k, v in s.predicted.items()],
                      "checks": [list(c) for c in s.checks]}
                for qid, s in self._queries.items()}

    def load_state(self, state: Any) -> None:
        """Load what :meth:`to_state` produced; a malformed query is skipped (it learns afresh), and a
        profile of another period than ``forecast.period`` now names is dropped."""
        for qid, s in (state.items() if isinstance(state, dict) else ()):
            try:
                profile = SeasonalProfile.from_state(s["profile"]) if s["profile"] else None
                configured = self.period_s
                if profile and configured is not None and abs(profile.period_s - configured) > _EPS:
                    profile = None
                restored = _Query(RateHistory.from_state(s["history"]), profile,
                                  bool(s["detected"]) and profile is not None,
                                  None if s["slot"] is None or profile is None else int(s["slot"]),
                                  float(s["rows"]), float(s["seconds"]), None, float(s["lastSeen"]),
                                  {int(k): float(v) for k, v in s["predicted"]},
                                  deque((int(c[0]), float(c[1]), float(c[2])) for c in s["checks"]))
            except (KeyError, TypeError, ValueError, IndexError):
                continue
            self._queries[str(qid)] = restored
