"""Queries that share the executors: the task time of other queries' batches that ran beside each
batch, and the arrivals each batch shows.

A batch of one query that ran while another query's tasks held slots took longer than its own work
explains; the evaluator gives each batch that concurrent task time (:class:`~.model.Concurrent`)
when it measures the query's cost, so the sweep here tells it how much there was. One sweep over
every query's task phases (task time spread evenly over each phase, integrated per batch), redone
only from the first batch that is new or changed since the last tick.
"""

from __future__ import annotations

import bisect
import itertools
import math
import operator
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from .metrics import BatchRecord, QueryMetrics, same_objects

_EPS = 1e-9


# A batch and the task time and tasks of other queries' batches that ran alongside it.
Alongside = tuple[BatchRecord, float, int]


class Swept(NamedTuple):
    """One query's batches as :func:`with_concurrency` returns them, each with the others' task
    time and tasks that ran alongside it (the same object for a batch that did not change: an
    unchanged batch needs no second look)."""

    batches: list[Alongside]

    def records(self) -> list[BatchRecord]:
        """The batches as records carrying what ran alongside (the replay's)."""
        return [_beside(b, task_s, tasks) if task_s else b for b, task_s, tasks in self.batches]


class Given(NamedTuple):
    """One query's batches as :func:`with_concurrency` was given them last time, their ends and
    what it returned for them (in the same order); ``alone``: it was the only query then (no ends,
    and no sweep's figures: the sweep does not take it)."""

    batches: tuple[BatchRecord, ...]
    ends: list[float]
    swept: list[Alongside]
    alone: bool = False


def with_concurrency(queries: Sequence[QueryMetrics],
                     known: dict[str, dict[int, Alongside]] | None = None,
                     given: dict[str, Given] | None = None) -> dict[str, Swept]:
    """Each query's recent batches with the task time of the other queries' batches that ran
    alongside (the share of each that overlapped its task phase, as if its tasks were spread evenly
    over it). One sweep: the others' share is everyone's spread task time over the batch's phase
    minus its own query's. Figures, not new records: a thousand batches a tick at 100 queries.

    ``known``: what was returned last time, by query and batch id (updated in place). Batches
    that ended before the first batch that is new or changed since (a task end that came late)
    overlap nothing that changed: their figures stand, and only the rest is swept again.
    ``given`` (with ``known``; updated in place): what each query's batches were last time. The
    collector hands unchanged batches over as the same objects, so those are known unchanged
    without comparing them field by field, and their ends and figures are the last ones."""
    given = {} if known is None or given is None else given
    known = {} if known is None else known
    if len(queries) < 2:
        return {q.query_id: _alone(q, given) for q in queries}
    cutoff = math.inf
    # Per query: its batches given last time (or None), where they start among them, how many
    # leading batches are those very objects, and how many are unchanged.
    previous: list[tuple[Given | None, int, int, int]] = []
    for q in queries:
        batches = q.recent_batches
        before = known.get(q.query_id)
        last = given.get(q.query_id) if before else None
        last = None if last is not None and last.alone else last
        k, same = same_objects(batches, last.batches if last is not None else None)
        i = same
        while i < len(batches) and _same_batch(((before or {}).get(batches[i].batch_id) or (None,))[0],
                                               batches[i]):
            i += 1
        if i < len(batches):
            cutoff = min(cutoff, batches[i].start)
        previous.append((last, k, same, i))
    # The batches swept again (from `split` on where ends are in order) and their ends, and every
    # batch whose phase reaches into theirs.
    ends: list[list[float]] = []
    again: list[tuple[Sequence[BatchRecord], list[float]]] = []
    splits: list[int | None] = []
    for q, (last, k, same, _) in zip(queries, previous, strict=True):
        batches = q.recent_batches
        es = [b.start + b.duration_s for b in batches[same:]]  # BatchRecord.end
        if last is not None and same:
            es = last.ends[k:k + same] + es
        split: int | None = bisect.bisect_right(es, cutoff)
        if max(es[:split], default=-math.inf) <= cutoff and min(es[split:], default=math.inf) > cutoff:
            again.append((batches[split:], es[split:]))
        else:
            split = None
            picked = [e > cutoff for e in es]
            again.append((list(itertools.compress(batches, picked)), list(itertools.compress(es, picked))))
        ends.append(es)
        splits.append(split)
    mine = _Phases([b for batches, _ in again for b in batches], [e for _, es in again for e in es])
    of_mine = np.repeat(np.arange(len(queries)), [len(batches) for batches, _ in again])
    earliest = float(mine.starts.min(initial=math.inf))
    if earliest >= cutoff:  # (as usual) every batch reaching into them is swept again itself
        reaching = mine.ends > earliest
        everyone, owner = mine.where(reaching), of_mine[reaching]
    else:
        reach = [[e > earliest for e in es] for es in ends]
        everyone = _Phases([b for q, r in zip(queries, reach, strict=True)
                            for b in itertools.compress(q.recent_batches, r)],
                           [e for es, r in zip(ends, reach, strict=True) for e in itertools.compress(es, r)])
        owner = np.repeat(np.arange(len(queries)), [sum(r) for r in reach])
    # Row per query: its own share, spread the same way, minus from everyone's.
    own = _each_own(everyone, owner, len(queries), mine.starts, mine.ends, of_mine)
    beside = np.maximum(_Spread(everyone).between(mine.starts, mine.ends) - own, 0.0)
    beside_s, beside_tasks = beside[:, 0].tolist(), beside[:, 1].tolist()
    out: dict[str, Swept] = {}
    at = 0
    for q, (batches, _), es, split, (last, k, same, unchanged) in zip(queries, again, ends, splits, previous,
                                                                      strict=True):
        before = known.get(q.query_id, {})
        if split is not None and last is not None and split <= same:
            kept = last.swept[k:k + split]  # the leading ones, the same objects as last time
        else:
            # A batch never swept can end before the cutoff when ends are out of order (the driver's
            # clock stepped back): kept without others' task time (KeyError every tick, before).
            kept = [before.get(b.batch_id) or (b, b.concurrent_task_s, b.concurrent_tasks)
                    for b, e in zip(q.recent_batches, es, strict=True) if e <= cutoff]
        enriched = []
        upto = at + len(batches)
        for b, task_s, tasks in zip(batches, beside_s[at:upto], beside_tasks[at:upto], strict=True):
            task_s = task_s if task_s > _SPREAD_EPS else 0.0
            tasks = round(tasks) if task_s else 0
            seen = before.get(b.batch_id)
            # (The sweep's sums move in the last digits as batches come and go: not a change.)
            if (seen is None or not _same_batch(seen[0], b) or seen[2] != tasks
                    or not math.isclose(seen[1], task_s, rel_tol=1e-6, abs_tol=1e-9)):
                seen = (b, task_s, tasks) if task_s else (b, b.concurrent_task_s, b.concurrent_tasks)
            enriched.append(seen)
        at = upto
        swept = kept + enriched
        out[q.query_id] = Swept(swept)
        if split is not None and last is not None and split <= same and len(last.batches) == k + same:
            # Last time's figures less those dropped since, and the ones swept again.
            for b, _, _ in last.swept[:k]:
                del before[b.batch_id]
            before.update((b[0].batch_id, b) for b in enriched)
        else:
            known[q.query_id] = {b[0].batch_id: b for b in swept}
        # Every figure above is of its batch as given now when the kept ones are among the leading
        # batches found unchanged (ends in order, as one query's batches run): the next tick may
        # take the same objects for unchanged.
        if split is not None and split <= unchanged:
            given[q.query_id] = Given(q.recent_batches, es, swept)
        else:
            given.pop(q.query_id, None)
    return out


def _alone(q: QueryMetrics, given: dict[str, Given]) -> Swept:
    """A query with none beside it: its batches as they are, the same objects for the batches
    given as the same objects last time (as the sweep returns them, so the learner skips them
    unread). Only what this function made is taken again (a sweep's figures were of other
    queries' batches); the sweep's own ``known`` figures stand for when others come back."""
    last = given.get(q.query_id)
    last = last if last is not None and last.alone else None
    k, same = same_objects(q.recent_batches, last.batches if last is not None else None)
    swept = ((last.swept[k:k + same] if last is not None else [])
             + [(b, b.concurrent_task_s, b.concurrent_tasks) for b in q.recent_batches[same:]])
    given[q.query_id] = Given(q.recent_batches, [], swept, alone=True)
    return Swept(swept)


def _beside(b: BatchRecord, task_s: float, tasks: int) -> BatchRecord:
    """``replace(b, concurrent_task_s=task_s, concurrent_tasks=tasks)`` without its __init__ (a
    thousand records a tick at 100 queries)."""
    record = object.__new__(type(b))
    fields = b.__dict__.copy()  # a copy of the dict, then two keys: cheaper than update() with keywords
    fields["concurrent_task_s"] = task_s
    fields["concurrent_tasks"] = tasks
    object.__setattr__(record, "__dict__", fields)  # (frozen: its own __setattr__ refuses)
    return record


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

    starts: np.ndarray
    ends: np.ndarray
    task_s: np.ndarray
    tasks: np.ndarray

    def __init__(self, batches: Sequence[BatchRecord], ends: Sequence[float]) -> None:
        """Of ``batches``, which end at ``ends``: built as columns (a tuple per batch, a thousand a
        tick at 100 queries, was garbage for the collector to scan)."""
        self.starts = np.array([e - b.task_wall_s if b.task_wall_s is not None else b.start
                                for b, e in zip(batches, ends, strict=True)], dtype=float)
        self.ends = np.array(ends, dtype=float)
        self.task_s = np.array([b.task_s or 0.0 for b in batches], dtype=float)
        self.tasks = np.array([float(b.tasks or 0) for b in batches], dtype=float)

    def where(self, mask: np.ndarray) -> _Phases:
        """The phases where ``mask`` holds."""
        picked = object.__new__(_Phases)
        picked.starts, picked.ends, picked.task_s, picked.tasks = (
            self.starts[mask], self.ends[mask], self.task_s[mask], self.tasks[mask])
        return picked


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


def _each_own(phases: _Phases, owner: np.ndarray, owners: int, a: np.ndarray, b: np.ndarray,
              asker: np.ndarray) -> np.ndarray:
    """``_Spread(phases of owner asker[j]).between(a[j], b[j])`` for every j, all owners at once: a
    row per owner, padded, so that each row's sums are its own, taken in the same order as the
    _Spread of its phases alone takes them (the same figures, to the last digit)."""
    keep = (phases.task_s > 0) & (phases.ends - phases.starts > _EPS)
    t0, t1, rows = phases.starts[keep], phases.ends[keep], owner[keep]
    width = t1 - t0
    rates = np.column_stack([phases.task_s[keep] / width, phases.tasks[keep] / width])
    # Each row's distinct boundary times, ascending (np.unique per row), and each boundary's place.
    values, of_row = np.concatenate([t0, t1]), np.concatenate([rows, rows])
    order = np.lexsort((values, of_row))
    v, r = values[order], of_row[order]
    new = np.ones(len(v), dtype=bool)
    new[1:] = (r[1:] != r[:-1]) | (v[1:] != v[:-1])
    counts = np.bincount(r[new], minlength=owners)
    firsts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    place_sorted = np.cumsum(new) - 1 - firsts[r]
    place = np.empty_like(place_sorted)
    place[order] = place_sorted
    times = np.zeros((owners, max(1, int(counts.max(initial=0)))))
    times[r[new], place_sorted[new]] = v[new]
    last = np.where(counts > 0, times[np.arange(owners), np.maximum(counts - 1, 0)], 0.0)
    times = np.where(np.arange(times.shape[1]) < counts[:, None], times, last[:, None])  # zero-width padding
    steps = np.zeros((*times.shape, 2))
    np.add.at(steps, (rows, place[:len(t0)]), rates)
    np.add.at(steps, (rows, place[len(t0):]), -rates)
    in_force = np.cumsum(steps, axis=1)
    cumulative = np.concatenate([np.zeros((owners, 1, 2)),
                                 np.cumsum(in_force[:, :-1] * np.diff(times, axis=1)[:, :, None], axis=1)],
                                axis=1)
    # Boundaries of the asker's row at or before t (searchsorted, side="right"), by rank in all of them.
    every = v[new]
    ranked = np.unique(every)
    keys = r[new] * (len(ranked) + 1) + np.searchsorted(ranked, every)

    def integral(t: np.ndarray) -> np.ndarray:
        seen = (np.searchsorted(keys, asker * (len(ranked) + 1) + np.searchsorted(ranked, t, side="right"))
                - firsts[asker])
        i = seen - 1
        inside = i >= 0
        i = np.maximum(i, 0)
        value = cumulative[asker, i] + in_force[asker, i] * (t - times[asker, i])[:, None]
        return np.where(inside[:, None], value, 0.0)

    return integral(b) - integral(a)


class QueryColumns(NamedTuple):
    """One query's recent batches as columns, oldest first, and the arrivals they show."""

    # Of each batch that directly follows its predecessor: its start, the rows that arrived since
    # the previous batch started, and the seconds since it started.
    arrival_starts: list[float]
    arrival_rows: list[float]
    arrival_seconds: list[float]
    # Every batch's start, rows, duration and backlog (None: not reported).
    starts: list[float]
    rows: list[int]
    durations: list[float]
    backlogs: list[float | None]


class BatchColumns:
    """Each query's :class:`QueryColumns`, kept between ticks: the collector hands unchanged
    batches over as the same objects, so only the new batches (and the pairs with one) are read
    (every batch of every query, each tick, otherwise: at 100 queries, a large part of the tick)."""

    def __init__(self) -> None:
        # Per query: the batches given last time, whether each after the first directly follows
        # its predecessor (its arrivals are in the columns), and the columns.
        self._last: dict[str, tuple[Sequence[BatchRecord], list[bool], QueryColumns]] = {}

    def of(self, query_id: str, batches: Sequence[BatchRecord]) -> QueryColumns:
        last = self._last.get(query_id)
        k, same = same_objects(batches, last[0] if last is not None else None)
        before = last[2] if last is not None and same else None
        # The pairs among the batches given last time, and their arrivals, stand.
        pairs = max(0, same - 1) if last is not None else 0
        follows = last[1][k:k + pairs] if last is not None else []
        dropped = sum(last[1][:k]) if last is not None and pairs else 0
        kept = dropped + sum(follows)
        starts_in, rows_in, seconds_in = (
            (column[dropped:kept] if before is not None and pairs else [])  # (a slice: a new list)
            for column in ((before.arrival_starts, before.arrival_rows, before.arrival_seconds)
                           if before is not None else ((), (), ())))
        for previous, b in zip(batches[pairs:-1], batches[pairs + 1:], strict=True):
            since = b.since_previous_s
            directly = since is not None and since > 0 and b.batch_id == previous.batch_id + 1
            follows.append(directly)
            if directly:
                starts_in.append(b.start)
                rows_in.append(b.arrivals(previous.backlog))
                seconds_in.append(since)
        new = batches[same:]
        starts, rows, durations, backlogs = (
            (getattr(before, name)[k:k + same] if before is not None else [])
            + list(map(operator.attrgetter(field), new))
            for name, field in (("starts", "start"), ("rows", "rows"), ("durations", "duration_s"),
                                ("backlogs", "backlog")))
        made = QueryColumns(starts_in, rows_in, seconds_in, starts, rows, durations, backlogs)
        self._last[query_id] = (batches, follows, made)
        return made

    def forget(self, query_id: str) -> None:
        self._last.pop(query_id, None)
