"""One query's arrivals as a recurring profile: a seasonal profile of ``bins`` slots over a period, a
level and a trend, learned online from the rate each slot showed (additive Holt-Winters: exponential
smoothing of each). Small and explainable: the forecast at a moment is the level, the trend times the
slots ahead, and the profile's slot of that moment. And the period, when none is configured, from a
coarse history of the rates (:func:`detect_period`: the autocorrelation's highest peak)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# Smoothing of the level per slot, of the trend per slot and of each profile slot per period. The level
# follows a day busier than the one before within a few dozen slots (faster, it chased a pattern that
# shifted, and the profile learnt the opposite: still 38 % off three periods after a shift of 0.15 of
# the period); a slot of the profile moves halfway to what it saw, so a shifted pattern is learnt
# within two or three periods.
LEVEL_SMOOTHING = 0.03
TREND_SMOOTHING = 0.01
SEASON_SMOOTHING = 0.5
# The profile's slots per period: at most this many (a day in 5-minute slots), at least MIN_BINS.
MAX_BINS = 288
MIN_BINS = 12
# The history the period is detected from: at most this many rates; beyond, neighbours are merged (the
# resolution halves, the span it covers doubles).
HISTORY_POINTS = 1024
# A period is taken from the autocorrelation when its peak is at least this high (1: the history repeats
# exactly), and only once the history holds this many periods of it.
PERIOD_CORRELATION = 0.6
PERIODS_TO_DETECT = 2.5
_EPS = 1e-9


def bins_for(period_s: float, slot_s: float) -> int:
    """Slots of a period's profile, each at least ``slot_s`` long (a slot sees a few batches)."""
    return max(MIN_BINS, min(MAX_BINS, int(period_s // max(slot_s, _EPS))))


@dataclass
class SeasonalProfile:
    """A recurring profile with level and trend (additive Holt-Winters), updated once per slot that
    closes with the rate it saw; the slots are aligned on the clock (slot ``k`` covers
    ``[k, k + 1) x slot_s``), so a restarted driver finds its place in the period."""

    period_s: float
    bins: int
    season: list[float] = field(default_factory=list)  # per slot of the period: above or below the level
    level: float = 0.0
    trend: float = 0.0  # rows/s per slot
    last_slot: int | None = None  # the latest slot learnt from
    first: list[float | None] = field(default_factory=list)  # the first period's rates, until it is full
    first_start: int | None = None

    @property
    def slot_s(self) -> float:
        return self.period_s / self.bins

    @property
    def ready(self) -> bool:
        """A whole period learnt: the profile forecasts."""
        return bool(self.season)

    def slot_of(self, t: float) -> int:
        return math.floor(t / self.slot_s + _EPS)

    def learn(self, slot: int, rate: float) -> None:
        """The rate the closed ``slot`` showed (slots without batches are skipped: nothing is learnt)."""
        if not self.ready:
            self._first_period(slot, rate)
            return
        i = slot % self.bins
        ahead = max(1, slot - (self.last_slot if self.last_slot is not None else slot - 1))
        expected = self.level + ahead * self.trend
        level = LEVEL_SMOOTHING * (rate - self.season[i]) + (1.0 - LEVEL_SMOOTHING) * expected
        self.trend = TREND_SMOOTHING * (level - self.level) / ahead + (1.0 - TREND_SMOOTHING) * self.trend
        self.level = level
        moved = SEASON_SMOOTHING * (rate - level - self.season[i])
        # The profile stays centred on the level: what one slot gains, the others give up a share of
        # (the slot's own move stays), else level and profile drift apart in opposite directions.
        self.season = [x - moved / self.bins for x in self.season]
        self.season[i] += moved
        self.level += moved / self.bins
        self.last_slot = slot

    def start_from(self, rates: list[float | None], last_slot: int) -> None:
        """A profile from a whole period of rates already seen (a detected period), the last one of
        ``last_slot``: the level their mean, each slot above or below it (a gap: its neighbours')."""
        known = [r for r in rates if r is not None]
        if not known:
            return
        level = float(np.mean(known))
        filled = _filled(rates)
        # rates[j] is the rate of slot last_slot - (len - 1) + j: its place in the period.
        offset = last_slot - (len(rates) - 1)
        season = [0.0] * self.bins
        for j, r in enumerate(filled):
            season[(offset + j) % self.bins] = r - level
        self.season, self.level, self.trend, self.last_slot = season, level, 0.0, last_slot
        self.first, self.first_start = [], None

    def rate_at(self, slot: int) -> float:
        """The forecast rate of ``slot`` (not below 0)."""
        ahead = slot - (self.last_slot if self.last_slot is not None else slot)
        return max(0.0, self.level + ahead * self.trend + self.season[slot % self.bins])

    def peak(self, start: float, end: float) -> tuple[float, float]:
        """The highest forecast rate over the slots from ``start`` to ``end`` and the start of its slot."""
        first, last = self.slot_of(start), self.slot_of(end)
        slots = range(first, max(first, last) + 1)
        rates = [self.rate_at(k) for k in slots]
        best = int(np.argmax(rates))
        return rates[best], max(start, slots[best] * self.slot_s)

    def _first_period(self, slot: int, rate: float) -> None:
        if self.first_start is None:
            self.first_start = slot
        j = slot - self.first_start
        if j >= self.bins:
            # A whole period seen: the profile starts from it, and this slot is its first update.
            self.start_from(self.first, self.first_start + len(self.first) - 1)
            self.learn(slot, rate)
            return
        self.first.extend([None] * (j + 1 - len(self.first)))
        self.first[j] = rate

    def to_state(self) -> dict[str, Any]:
        return {"periodS": self.period_s, "bins": self.bins, "season": [short(x) for x in self.season],
                "level": self.level, "trend": self.trend, "lastSlot": self.last_slot,
                "first": [None if x is None else short(x) for x in self.first],
                "firstStart": self.first_start}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> SeasonalProfile:
        """What :meth:`to_state` produced (raises KeyError, TypeError or ValueError on a malformed one)."""
        profile = cls(float(state["periodS"]), int(state["bins"]),
                      [float(x) for x in state["season"]], float(state["level"]), float(state["trend"]),
                      None if state["lastSlot"] is None else int(state["lastSlot"]),
                      [None if x is None else float(x) for x in state["first"]],
                      None if state["firstStart"] is None else int(state["firstStart"]))
        if profile.season and len(profile.season) != profile.bins:
            raise ValueError("a profile of another number of slots")
        return profile


def short(value: float) -> float:
    """4 significant digits: what a rate's noise leaves of meaning, in a third of the JSON."""
    return float(f"{value:.4g}")


def _filled(rates: list[float | None]) -> list[float]:
    """Gaps filled with the nearest rate before them (after them at the start)."""
    known = next((r for r in rates if r is not None), 0.0)
    out = []
    for r in rates:
        known = known if r is None else r
        out.append(known)
    return out


@dataclass
class RateHistory:
    """The rates seen, at a resolution that halves whenever :data:`HISTORY_POINTS` are kept (the span
    doubles): bounded, and long enough to tell a day from the weeks it recurs in."""

    resolution_s: float
    start_slot: int | None = None  # the slot (of resolution_s) of rates[0]
    rates: list[float | None] = field(default_factory=list)

    def add(self, t: float, rate: float) -> None:
        slot = math.floor(t / self.resolution_s + _EPS)
        if self.start_slot is None:
            self.start_slot = slot
        if slot < self.start_slot:
            return  # before the history (the clock stepped back): no place for it
        while slot - self.start_slot >= HISTORY_POINTS:
            self._halve()
            slot = math.floor(t / self.resolution_s + _EPS)
        j = slot - self.start_slot
        self.rates.extend([None] * (j + 1 - len(self.rates)))
        previous = self.rates[j]
        self.rates[j] = rate if previous is None else (previous + rate) / 2.0

    def span_s(self) -> float:
        return len(self.rates) * self.resolution_s

    def _halve(self) -> None:
        assert self.start_slot is not None
        if self.start_slot % 2:  # pairs aligned on the coarser slots
            self.rates.insert(0, None)
            self.start_slot -= 1
        pairs = [self.rates[i:i + 2] for i in range(0, len(self.rates), 2)]
        self.rates = [_mean(p) for p in pairs]
        self.start_slot //= 2
        self.resolution_s *= 2.0

    def to_state(self) -> dict[str, Any]:
        return {"resolutionS": self.resolution_s, "startSlot": self.start_slot,
                "rates": [None if x is None else short(x) for x in self.rates]}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> RateHistory:
        start = state["startSlot"]
        return cls(float(state["resolutionS"]), None if start is None else int(start),
                   [None if x is None else float(x) for x in state["rates"]])


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def detect_period(rates: list[float | None], resolution_s: float, shortest_s: float) -> float | None:
    """The period the rates recur with, or None: the lag of the autocorrelation's highest peak past its
    first fall below zero, where that peak reaches :data:`PERIOD_CORRELATION` and the history holds
    :data:`PERIODS_TO_DETECT` periods of it; at least ``shortest_s``. A load without a pattern (noise,
    random steps, a trend) has no such peak."""
    values = np.array(_filled(rates), dtype=float)
    n = len(values)
    if n < 8:
        return None
    x = values - values.mean()
    if float(np.dot(x, x)) <= _EPS:
        return None  # a constant load: nothing recurs but the constant
    spectrum = np.fft.rfft(x, 2 * n)
    acf = np.fft.irfft(spectrum * np.conj(spectrum))[:n]
    acf = acf / (n - np.arange(n))  # unbiased: each lag over the pairs it has
    acf = acf / acf[0]
    below = np.flatnonzero(acf < 0.0)
    if not below.size:
        return None
    longest = int(n / PERIODS_TO_DETECT)
    first = max(int(below[0]), math.ceil(shortest_s / resolution_s))
    if first >= longest:
        return None
    lag = first + int(np.argmax(acf[first:longest + 1]))
    peak = float(acf[lag])
    if peak < PERIOD_CORRELATION or lag in (first, longest):  # no peak inside: still rising or falling
        return None
    return lag * resolution_s
