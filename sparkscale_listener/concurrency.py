"""Queries that share the executors: the task time of other queries' batches that ran beside each
batch, and the arrivals each batch shows.

A batch of one query that ran while another query's tasks held slots took longer than its own work
explains; the evaluator gives each batch that concurrent task time (:class:`~.model.Concurrent`)
when it measures the query's cost, so the sweep here tells it how much there was. One sweep over
every query's task phases (task time spread evenly over each phase, integrated per batch), redone
only from the first batch that is new or changed since the last tick.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import replace

import numpy as np

from .metrics import BatchRecord, QueryMetrics

_EPS = 1e-9


def with_concurrency(queries: Sequence[QueryMetrics],
                     known: dict[str, dict[int, BatchRecord]] | None = None) -> dict[str, list[BatchRecord]]:
    """Each query's recent batches with the task time of the other queries' batches that ran
    alongside (the share of each that overlapped its task phase, as if its tasks were spread evenly
    over it). One sweep: the others' share is everyone's spread task time over the batch's phase
    minus its own query's.

    ``known``: the records returned last time, by query and batch id (updated in place). Batches
    that ended before the first batch that is new or changed since (a task end that came late)
    overlap nothing that changed: their records stand, and only the rest is swept again."""
    if len(queries) < 2:
        return {q.query_id: list(q.recent_batches) for q in queries}
    known = {} if known is None else known
    cutoff = math.inf
    for q in queries:
        before = known.get(q.query_id, {})
        for b in q.recent_batches:
            if not _same_batch(before.get(b.batch_id), b):
                cutoff = min(cutoff, b.start)
                break
    # The batches swept again, and every batch whose phase reaches into theirs.
    again = {q.query_id: [b for b in q.recent_batches if b.end > cutoff] for q in queries}
    phases = {qid: _Phases(batches) for qid, batches in again.items()}
    earliest = min((float(p.starts.min()) for p in phases.values() if p.starts.size), default=math.inf)
    alongside = {q.query_id: _Phases([b for b in q.recent_batches if b.end > earliest]) for q in queries}
    everyone = _Spread(_Phases.joined(alongside.values()))
    out: dict[str, list[BatchRecord]] = {}
    for q in queries:
        before = known.get(q.query_id, {})
        kept = [before[b.batch_id] for b in q.recent_batches if b.end <= cutoff]
        mine = phases[q.query_id]
        enriched = []
        if mine.starts.size:
            beside = np.maximum(everyone.between(mine.starts, mine.ends)
                                - _Spread(alongside[q.query_id]).between(mine.starts, mine.ends), 0.0)
            for b, (task_s, tasks) in zip(again[q.query_id], beside.tolist(), strict=True):
                task_s = task_s if task_s > _SPREAD_EPS else 0.0
                tasks = round(tasks) if task_s else 0
                seen = before.get(b.batch_id)
                # (The sweep's sums move in the last digits as batches come and go: not a change.)
                if (not _same_batch(seen, b) or seen is None or seen.concurrent_tasks != tasks
                        or not math.isclose(seen.concurrent_task_s, task_s, rel_tol=1e-6, abs_tol=1e-9)):
                    seen = replace(b, concurrent_task_s=task_s, concurrent_tasks=tasks) if task_s else b
                enriched.append(seen)
        out[q.query_id] = kept + enriched
        known[q.query_id] = {b.batch_id: b for b in out[q.query_id]}
    return out


def _same_batch(seen: BatchRecord | None, b: BatchRecord) -> bool:
    """The record kept is of this batch as it is now: a completed batch changes only by task ends
    that reach the listener late."""
    return (seen is not None and seen.task_s == b.task_s and seen.tasks == b.tasks
            and seen.duration_s == b.duration_s and seen.task_wall_s == b.task_wall_s)


# Below this many task-seconds the others' share is rounding noise of the sweep.
_SPREAD_EPS = 1e-6


class _Phases:
    """The task phases of batches as arrays (first task launch, or the batch's start, to its end),
    with their task time and tasks."""

    def __init__(self, batches: Sequence[BatchRecord] = ()) -> None:
        rows = [(b.end - b.task_wall_s if b.task_wall_s is not None else b.start, b.end,
                 b.task_s or 0.0, float(b.tasks or 0)) for b in batches]
        table = np.array(rows, dtype=float).reshape(-1, 4)
        self.starts, self.ends, self.task_s, self.tasks = table.T

    @classmethod
    def joined(cls, parts: Iterable[_Phases]) -> _Phases:
        joined = cls()
        parts = list(parts)
        joined.starts, joined.ends, joined.task_s, joined.tasks = (
            np.concatenate([getattr(p, name) for p in parts])
            for name in ("starts", "ends", "task_s", "tasks"))
        return joined


class _Spread:
    """Task time (and tasks) spread evenly over task phases, integrated over any intervals:
    piecewise-linear cumulative sums over the sorted phase boundaries."""

    def __init__(self, phases: _Phases) -> None:
        keep = (phases.task_s > 0) & (phases.ends - phases.starts > _EPS)
        t0, t1 = phases.starts[keep], phases.ends[keep]
        width = t1 - t0
        rates = np.column_stack([phases.task_s[keep] / width, phases.tasks[keep] / width])
        times = np.unique(np.concatenate([t0, t1]))
        # Each phase adds its rate (per second) from its start and takes it away at its end.
        steps = np.zeros((len(times), 2))
        np.add.at(steps, np.searchsorted(times, t0), rates)
        np.add.at(steps, np.searchsorted(times, t1), -rates)
        self._times = times
        self._rates = np.cumsum(steps, axis=0)  # in force from times[i] to times[i + 1]
        self._cumulative = np.vstack([np.zeros((1, 2)),
                                      np.cumsum(self._rates[:-1] * np.diff(times)[:, None], axis=0)])

    def _integral(self, t: np.ndarray) -> np.ndarray:
        if not len(self._times):
            return np.zeros((len(t), 2))
        i = np.searchsorted(self._times, t, side="right") - 1
        inside = i >= 0
        i = np.maximum(i, 0)
        value = self._cumulative[i] + self._rates[i] * (t - self._times[i])[:, None]
        return np.where(inside[:, None], value, 0.0)

    def between(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """(task-seconds, tasks) spread over each [a, b]: one row per interval."""
        return self._integral(b) - self._integral(a)


def batch_arrivals(batches: Sequence[BatchRecord]) -> list[tuple[float, float, float]]:
    """(start, rows that arrived since the previous batch started, seconds since it started) of
    each batch that directly follows its predecessor."""
    out = []
    for previous, b in itertools.pairwise(batches):
        if b.since_previous_s and b.since_previous_s > 0 and b.batch_id == previous.batch_id + 1:
            arrivals = b.arrivals(previous.backlog)
            if arrivals is not None:
                out.append((b.start, arrivals, b.since_previous_s))
    return out
