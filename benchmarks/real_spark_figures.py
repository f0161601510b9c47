"""The real-Spark benchmark's loads, and its figures from a run's Spark event log alone: executors
added and removed, task ends, the query's progress and sparkscale's scaling events, over the load's
window. No Spark here: ``bench_real_spark.py`` runs the applications, this reads what they wrote.
"""

from __future__ import annotations

import math
import random
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# figures.py and runner.py sit next to this file; benchmarks/ is a folder of scripts, not a package.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from figures import Timeline, figures
from runner import epoch, json_value

# The cluster (bench_real_spark.start_cluster): enough one-core executors for the peak, little
# memory each; the oracle is bounded by it.
WORKERS = 2
CORES_PER_WORKER = 3
MAX_EXECUTORS = WORKERS * CORES_PER_WORKER
UTILIZATION_TARGET = 0.7  # sparkscale's default utilization.target: the oracle sizes for it too
BACKLOG_THRESHOLD_S = 6.0
SCALE_DOWN_INTERVAL_S = 30.0  # also the yardstick for flaps, for every policy

# Consecutive executor-count changes in the same direction less than this apart are one action:
# executors asked for together register one by one over a few seconds.
ACTION_MERGE_S = 5.0
PROGRESS_EVENT = "org.apache.spark.sql.streaming.StreamingQueryListener$QueryProgressEvent"
SCALING_EVENT = "io.sparkscale.bridge.ScalingEvent"


# --------------------------------------------------------------------------------------- loads
@dataclass(frozen=True)
class Load:
    """Arrivals of one run: ``schedule`` is what the source gets (piecewise-constant rows/s from
    each offset in seconds), ``clean`` the noise-free rate the oracle is sized on (same form)."""

    name: str
    title: str
    duration_s: float
    schedule: tuple[tuple[float, float], ...]
    clean: tuple[tuple[float, float], ...]
    steps: tuple[float, ...] = ()
    # The dynamic policies start on the oracle's executors for the first rate (as after a long
    # run at it) instead of on one: the load is about what comes after, not about a cold start.
    start_sized: bool = False


def rate_at(schedule: Sequence[tuple[float, float]], t: float) -> float:
    """The piecewise-constant rate in force at offset ``t`` (the first one before it starts)."""
    rate = schedule[0][1]
    for start, value in schedule:
        if start > t:
            break
        rate = value
    return rate


def rows_between(schedule: Sequence[tuple[float, float]], a: float, b: float) -> float:
    """Rows the schedule brings between offsets ``a`` and ``b`` (``b`` may be before ``a``)."""
    if b < a:
        return -rows_between(schedule, b, a)
    total = 0.0
    for i, (start, value) in enumerate(schedule):
        end = schedule[i + 1][0] if i + 1 < len(schedule) else math.inf
        lo, hi = max(a, start if i else -math.inf), min(b, end)
        if hi > lo:
            total += value * (hi - lo)
    return total


def step_load(duration_s: float, low: float = 30.0, high: float = 120.0) -> Load:
    up, down = round(0.2 * duration_s), round(0.6 * duration_s)
    schedule = ((0.0, low), (float(up), high), (float(down), low))
    return Load("step", f"step {low:g} -> {high:g} -> {low:g} rows/s", duration_s, schedule, schedule,
                (float(up), float(down)))


def fall_load(duration_s: float, high: float = 120.0, low: float = 30.0) -> Load:
    """The load falls /4 after the first 30 % and stays low: what happens to executors nobody
    needs any more (Spark's dynamic allocation gives back only executors idle for its timeout)."""
    down = round(0.3 * duration_s)
    schedule = ((0.0, high), (float(down), low))
    return Load("fall", f"fall {high:g} -> {low:g} rows/s", duration_s, schedule, schedule, (float(down),),
                start_sized=True)


def day_load(duration_s: float, low: float = 15.0, high: float = 120.0, seed: int = 14,
             segment_s: float = 2.0) -> Load:
    """A diurnal cosine (night, noon, night) over ``duration_s``, with seeded noise: each
    ``segment_s`` the rate is off the clean curve by a Gaussian 10 % (clipped at 25 %)."""
    rng = random.Random(seed)

    def clean(t: float) -> float:
        return low + (high - low) * (1 - math.cos(2 * math.pi * t / duration_s)) / 2

    starts = [i * segment_s for i in range(math.ceil(duration_s / segment_s))]
    noise = [max(-0.25, min(0.25, rng.gauss(0.0, 0.10))) for _ in starts]
    schedule = tuple((s, round(clean(s + segment_s / 2) * (1 + n), 1))
                     for s, n in zip(starts, noise, strict=True))
    clean_steps = tuple((float(s), clean(s + 0.5)) for s in range(math.ceil(duration_s)))
    return Load("day", f"compressed day {low:g}..{high:g} rows/s, 10 % noise", duration_s, schedule,
                clean_steps)


def oracle_executors(rate: float, cost_s_per_row: float, target: float = UTILIZATION_TARGET,
                     limit: int = MAX_EXECUTORS) -> int:
    """The fewest one-core executors keeping slot utilization at ``target`` for ``rate``."""
    return max(1, min(limit, math.ceil(rate * cost_s_per_row / target - 1e-9)))


# --------------------------------------------------------------------------- event-log parsing
@dataclass(frozen=True)
class Batch:
    start: float  # epoch s: the trigger's start (the progress timestamp)
    end: float  # epoch s: start + triggerExecution
    start_offset: int
    end_offset: int
    latest_offset: int | None  # rows the source had generated when the batch planned
    rows: int


@dataclass(frozen=True)
class Task:
    launch: float
    finish: float
    failed: bool
    killed: bool


@dataclass
class RunLog:
    """What one application's event log says, times in epoch seconds."""

    executor_changes: list[tuple[float, int, str]] = field(default_factory=list)  # (t, +1/-1, id)
    tasks: list[Task] = field(default_factory=list)
    batches: list[Batch] = field(default_factory=list)
    scaling_events: list[dict[str, Any]] = field(default_factory=list)
    app_start: float | None = None


def source_offset(value: Any) -> int | None:
    """The test source's offset, ``{"offset": n}``, given as an object or as its JSON text."""
    value = json_value(value)
    if isinstance(value, dict) and "offset" in value:
        return int(value["offset"])
    return None


def parse_event_log(events: Iterable[Mapping[str, Any]]) -> RunLog:
    log = RunLog()
    for e in events:
        kind = e.get("Event")
        if kind == "SparkListenerApplicationStart":
            log.app_start = e["Timestamp"] / 1000.0
        elif kind == "SparkListenerExecutorAdded":
            log.executor_changes.append((e["Timestamp"] / 1000.0, +1, str(e["Executor ID"])))
        elif kind == "SparkListenerExecutorRemoved":
            log.executor_changes.append((e["Timestamp"] / 1000.0, -1, str(e["Executor ID"])))
        elif kind == "SparkListenerTaskEnd":
            info = e["Task Info"]
            log.tasks.append(Task(info["Launch Time"] / 1000.0, info["Finish Time"] / 1000.0,
                                  bool(info.get("Failed")), bool(info.get("Killed"))))
        elif kind == PROGRESS_EVENT:
            p = e["progress"]
            sources = p.get("sources") or [{}]
            start = epoch(p["timestamp"])
            duration_ms = (p.get("durationMs") or {}).get("triggerExecution", p.get("batchDuration", 0))
            start_offset = source_offset(sources[0].get("startOffset"))
            end_offset = source_offset(sources[0].get("endOffset"))
            if end_offset is None:
                continue
            log.batches.append(Batch(start, start + duration_ms / 1000.0,
                                     end_offset if start_offset is None else start_offset, end_offset,
                                     source_offset(sources[0].get("latestOffset")),
                                     int(p.get("numInputRows", 0))))
        elif kind == SCALING_EVENT:
            log.scaling_events.append(dict(e))
    log.executor_changes.sort()
    log.batches.sort(key=lambda b: b.end)
    return log


def live_executors(changes: Sequence[tuple[float, int, str]], t: float) -> int:
    return sum(delta for at, delta, _ in changes if at <= t)


def merged_actions(changes: Sequence[tuple[float, int, str]], t0: float, t1: float,
                   merge_s: float = ACTION_MERGE_S) -> list[tuple[float, int, int]]:
    """Executor-count changes within [t0, t1] as actions (time from t0, from, to): consecutive
    changes in one direction less than ``merge_s`` apart are one action."""
    count = live_executors(changes, t0)
    actions: list[list[float]] = []  # [time, from, to, last change]
    for at, delta, _ in changes:
        if not t0 < at <= t1:
            continue
        last = actions[-1] if actions else None
        if last is not None and (last[2] - last[1]) * delta > 0 and at - last[3] < merge_s:
            last[2] += delta
            last[3] = at
        else:
            actions.append([at, count, count + delta, at])
        count += delta
    return [(a[0] - t0, int(a[1]), int(a[2])) for a in actions if a[1] != a[2]]


def busy_slot_seconds(tasks: Sequence[Task], t0: float, t1: float) -> float:
    """Slot time of the tasks launched within [t0, t1] (launch to finish)."""
    return sum(task.finish - task.launch for task in tasks if t0 <= task.launch <= t1)


def rows_processed(batches: Sequence[Batch], t0: float, t1: float) -> int:
    """Rows of the batches that started within [t0, t1]."""
    return sum(b.end_offset - b.start_offset for b in batches if t0 <= b.start <= t1)


def committed_at(batches: Sequence[Batch], t: float) -> int:
    """Rows committed by ``t``: the end offset of the last batch finished by then."""
    done = [b.end_offset for b in batches if b.end <= t]
    return max(done) if done else 0


def arrived_at(batches: Sequence[Batch], schedule: Sequence[tuple[float, float]], t0: float,
               t: float) -> float:
    """Rows generated by ``t``: the source's own count at the last batch that planned by ``t``
    (its latest offset), plus what the schedule brought since. Before any, from the schedule."""
    known = [b for b in batches if b.latest_offset is not None and b.start <= t]
    if not known:
        return rows_between(schedule, 0.0, t - t0)
    last = max(known, key=lambda b: b.start)
    return float(last.latest_offset or 0) + rows_between(schedule, last.start - t0, t - t0)


def oldest_waiting_s(batches: Sequence[Batch], schedule: Sequence[tuple[float, float]], t0: float,
                     t: float) -> float:
    """Seconds the oldest row not committed by ``t`` has waited: ``t`` minus when as many rows had
    arrived as are committed at ``t`` (0 when none waits). Rows waiting over the rate in force
    would say 7 s after a fall of the load from 120 to 30 rows/s for the batch of 200 rows that
    arrived in the last 1.7 s; this says 1.7 s, as a user reading the sink sees it."""
    done = committed_at(batches, t)
    if arrived_at(batches, schedule, t0, t) <= done:
        return 0.0
    lo, hi = t - 600.0, t  # arrivals only grow: the time they reached ``done`` is in between
    for _ in range(40):
        mid = (lo + hi) / 2
        if arrived_at(batches, schedule, t0, mid) <= done:
            lo = mid
        else:
            hi = mid
    return t - lo


def timeline(log: RunLog, load: Load, t0: float, sample_s: float = 1.0) -> Timeline:
    """The run as a :class:`figures.Timeline` over the load's ``[t0, t0 + duration]``: samples
    every ``sample_s`` and at every executor change (so executor-seconds are exact); lag = how
    long the oldest row not yet committed has waited (:func:`oldest_waiting_s`)."""
    t1 = t0 + load.duration_s
    times = {round(i * sample_s, 6) for i in range(int(load.duration_s / sample_s) + 1)}
    times |= {at - t0 for at, _, _ in log.executor_changes if t0 < at < t1}
    ts = sorted(x for x in times if 0.0 <= x <= load.duration_s)
    executors, rates, lags = [], [], []
    for x in ts:
        executors.append(float(live_executors(log.executor_changes, t0 + x)))
        rates.append(rate_at(load.schedule, x))
        lags.append(oldest_waiting_s(log.batches, load.schedule, t0, t0 + x))
    failed = sum(1 for task in log.tasks if task.failed and t0 <= task.launch <= t1)
    return Timeline(ts, executors, rates, lags, merged_actions(log.executor_changes, t0, t1), failed)


def oracle_for(run: Timeline, load: Load, cost_s_per_row: float) -> list[float]:
    return [float(oracle_executors(rate_at(load.clean, x), cost_s_per_row)) for x in run.t]


def run_figures(log: RunLog, load: Load, t0: float, cost_s_per_row: float
                ) -> tuple[Timeline, dict[str, float]]:
    run = timeline(log, load, t0)
    out = figures(run, oracle_for(run, load, cost_s_per_row), BACKLOG_THRESHOLD_S, SCALE_DOWN_INTERVAL_S,
                  steps=load.steps)
    t1 = t0 + load.duration_s
    rows = rows_processed(log.batches, t0, t1)
    out["slot_s_per_row"] = busy_slot_seconds(log.tasks, t0, t1) / rows if rows else math.nan
    out["scaling_events"] = float(sum(1 for e in log.scaling_events if e.get("applied")
                                      and t0 <= e.get("timestampMs", 0) / 1000.0 <= t1))
    return run, out
