"""Figures of merit of one autoscaling run against an oracle, shared by the simulated and the
real-Spark decision benchmarks (depends on numpy only), and the name both give sparkscale run at
another ``utilization.target`` (:func:`other_target`).

A run is a :class:`Timeline` of samples. Every figure integrating over time treats a sample as
holding from its time to the next sample's (sample-and-hold): sample ``i`` weighs
``t[i+1] - t[i]``, the last one nothing, so a run covers ``t[-1] - t[0]`` seconds. Samples need
not be evenly spaced (a real run samples whenever it can).

Keys of :func:`figures` (stable; new ones may be added):

=============================  ==================================================================
``duration_s``                 ``t[-1] - t[0]``
``executor_s``                 integral of the live executors over time
``oracle_executor_s``          integral of the oracle over time
``executor_s_vs_oracle``       ``executor_s / oracle_executor_s`` (nan if the oracle integral is 0)
``mean_executors``             ``executor_s / duration_s``
``lag_over_threshold_share``   share of the time with more than ``backlog_threshold_s`` of input
                               waiting (``lag_s > threshold``)
``lag_over_half_share``        share of the time with more than half of it (the peaks a steady
                               load should stay under)
``lag_p99_s``                  the lag exceeded 1 % of the time (time-weighted): the peaks,
                               without a single transient
``max_lag_s``                  largest ``lag_s``
``under_oracle_share``         share of the time with fewer live executors than the oracle
``actions``                    scaling actions (entries of ``actions`` whose target differs)
``scale_ups`` / ``scale_downs``
``flaps``                      consecutive actions in opposite directions less than
                               ``scale_down_interval_s`` apart (one per such pair)
``failed_tasks``               as given
``steps``                      how many ``steps`` were given
``steps_converged``            how many of them converged (see below)
``max_actions_to_converge``    largest ``step_<i>_actions`` (nan if a step never converged)
``max_time_to_converge_s``     largest ``step_<i>_time_to_converge_s`` (nan likewise)
``step_<i>_actions``           actions from step ``i`` up to its convergence (nan if none)
``step_<i>_time_to_converge_s``  seconds from step ``i`` to its convergence (nan if none)
``step_<i>_actions_after``     every action from step ``i`` to the next step (or the end)
=============================  ==================================================================

Convergence after a step at time ``s``: the first sample time ``c >= s`` from which the live
executors stay within 1 of the oracle at every sample until the next step (or the end of the
run). A step whose oracle is at most 1 away from where the executors already were converges at
once, with 0 actions. The actions counted are those with ``s <= time <= c``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["OTHER_TARGET", "Timeline", "figures", "flaps", "other_target", "sample_weights",
           "weighted_quantile"]


# A policy of the decision benchmarks: sparkscale at another utilization.target, "sparkscale-u0.8".
OTHER_TARGET = "sparkscale-u"


def other_target(policy: str) -> float | None:
    """The utilization.target of a ``sparkscale-u<target>`` policy; None for another policy. A
    target out of (0, 1] raises ValueError."""
    if not policy.startswith(OTHER_TARGET):
        return None
    try:
        target = float(policy[len(OTHER_TARGET):])
    except ValueError:
        target = math.nan
    if not 0.0 < target <= 1.0:
        raise ValueError(f"policy {policy!r}: the utilization target after {OTHER_TARGET!r} must be a number "
                         "in (0, 1], e.g. sparkscale-u0.8")
    return target


@dataclass(frozen=True)
class Timeline:
    """One run of one policy: samples at ``t`` (seconds from the start, increasing)."""

    t: Sequence[float]  # seconds from the start
    executors: Sequence[float]  # live executors at t
    load: Sequence[float]  # rows/s arriving at t
    lag_s: Sequence[float]  # lag at t, in seconds (each benchmark says how it counts it)
    actions: Sequence[tuple[float, int, int]]  # (time, from_executors, to_executors)
    failed_tasks: int = 0

    def __post_init__(self) -> None:
        n = len(self.t)
        if not (len(self.executors) == len(self.load) == len(self.lag_s) == n):
            raise ValueError("t, executors, load and lag_s must have the same length")
        if n and np.any(np.diff(np.asarray(self.t, dtype=float)) < 0):
            raise ValueError("t must not decrease")


def sample_weights(t: Sequence[float]) -> np.ndarray:
    """Seconds each sample holds for: ``t[i+1] - t[i]``, and 0 for the last."""
    times = np.asarray(t, dtype=float)
    if times.size == 0:
        return times
    return np.append(np.diff(times), 0.0)


def weighted_quantile(values: Sequence[float] | np.ndarray, weights: np.ndarray, q: float) -> float:
    """The smallest value that ``q`` of the total weight is at or below (nan without weight)."""
    v, w = np.asarray(values, dtype=float), np.asarray(weights, dtype=float)
    if not w.size or w.sum() <= 0:
        return math.nan
    order = np.argsort(v, kind="stable")
    cumulative = np.cumsum(w[order])
    return float(v[order][np.searchsorted(cumulative, q * cumulative[-1] - 1e-12)])


def flaps(actions: Sequence[tuple[float, int, int]], scale_down_interval_s: float) -> int:
    """Consecutive actions in opposite directions closer than ``scale_down_interval_s``."""
    moves = [(time, int(np.sign(to - frm))) for time, frm, to in actions if to != frm]
    return sum(1 for (t0, d0), (t1, d1) in itertools.pairwise(moves)
               if d0 != d1 and t1 - t0 < scale_down_interval_s)


def _convergence(t: np.ndarray, executors: np.ndarray, oracle: np.ndarray, start: float,
                 end: float) -> float | None:
    """The first sample time in [start, end) from which executors stay within 1 of the oracle
    until ``end``; None if there is none."""
    inside = (t >= start) & (t < end)
    idx = np.flatnonzero(inside)
    if idx.size == 0:
        return None
    ok = np.abs(executors[idx] - oracle[idx]) <= 1.0 + 1e-9
    if not ok[-1]:
        return None
    bad = np.flatnonzero(~ok)
    first = 0 if bad.size == 0 else bad[-1] + 1
    return float(t[idx[first]])


def figures(run: Timeline, oracle: Sequence[float], backlog_threshold_s: float,
            scale_down_interval_s: float, steps: Sequence[float] = ()) -> dict[str, float]:
    """The figures of ``run`` against ``oracle`` (the fewest sufficient executors at each sample
    of ``run.t``); ``steps`` are the times of load steps to measure convergence after. The keys
    are listed in the module docstring."""
    t = np.asarray(run.t, dtype=float)
    executors = np.asarray(run.executors, dtype=float)
    lag = np.asarray(run.lag_s, dtype=float)
    best = np.asarray(oracle, dtype=float)
    if best.shape != t.shape:
        raise ValueError(f"oracle has {best.size} samples, the run {t.size}")
    w = sample_weights(t)
    duration = float(w.sum())
    executor_s = float(np.dot(w, executors))
    oracle_s = float(np.dot(w, best))
    nan = math.nan
    actions = [(float(time), int(frm), int(to)) for time, frm, to in run.actions if to != frm]
    out: dict[str, float] = {
        "duration_s": duration,
        "executor_s": executor_s,
        "oracle_executor_s": oracle_s,
        "executor_s_vs_oracle": executor_s / oracle_s if oracle_s > 0 else nan,
        "mean_executors": executor_s / duration if duration > 0 else nan,
        "lag_over_threshold_share": (float(np.dot(w, lag > backlog_threshold_s)) / duration
                                     if duration > 0 else nan),
        "lag_over_half_share": (float(np.dot(w, lag > backlog_threshold_s / 2.0)) / duration
                                if duration > 0 else nan),
        "lag_p99_s": weighted_quantile(lag, w, 0.99),
        "max_lag_s": float(lag.max()) if lag.size else nan,
        "under_oracle_share": (float(np.dot(w, executors < best - 1e-9)) / duration
                               if duration > 0 else nan),
        "actions": float(len(actions)),
        "scale_ups": float(sum(1 for _, frm, to in actions if to > frm)),
        "scale_downs": float(sum(1 for _, frm, to in actions if to < frm)),
        "flaps": float(flaps(actions, scale_down_interval_s)),
        "failed_tasks": float(run.failed_tasks),
        "steps": float(len(steps)),
    }
    ordered = sorted(float(s) for s in steps)
    end_of_run = float(t[-1]) + 1e-9 if t.size else 0.0
    converged = 0
    worst_actions = worst_time = 0.0
    for i, step in enumerate(ordered):
        window_end = ordered[i + 1] if i + 1 < len(ordered) else end_of_run
        at = _convergence(t, executors, best, step, window_end)
        out[f"step_{i}_actions_after"] = float(sum(1 for time, _, _ in actions
                                                   if step <= time < window_end))
        if at is None:
            out[f"step_{i}_actions"] = out[f"step_{i}_time_to_converge_s"] = nan
            worst_actions = worst_time = nan
            continue
        converged += 1
        n_actions = float(sum(1 for time, _, _ in actions if step <= time <= at))
        out[f"step_{i}_actions"] = n_actions
        out[f"step_{i}_time_to_converge_s"] = at - step
        worst_actions = max(worst_actions, n_actions)  # nan stays nan
        worst_time = max(worst_time, at - step)
    out["steps_converged"] = float(converged)
    out["max_actions_to_converge"] = worst_actions if ordered else nan
    out["max_time_to_converge_s"] = worst_time if ordered else nan
    return out
