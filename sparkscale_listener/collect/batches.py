"""Per-batch records for the performance model: each completed batch's progress (start, duration,
rows, backlog) joined with what its tasks did (task time, tasks, executors, task phase) as the JVM
listener attributed them through the batch's job properties, and with the executors that were live
when it ran."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ..metrics import BatchRecord, ExecutorInfo, finite_float
from .progress import BatchProgress


def batch_records(batches: Sequence[BatchProgress], jvm_batches: Mapping[str, Any],
                  executors: Sequence[ExecutorInfo]) -> tuple[BatchRecord, ...]:
    """The query's recent batches as :class:`BatchRecord` s, oldest first.

    ``jvm_batches`` maps a batch id (text) to its task figures: a number (task time in ms, from a
    bridge that counts only that) or an object with ``busyMs``, ``tasks``, ``executors``,
    ``firstLaunchMs`` and ``lastEndMs``. ``executors`` are the application's executors with their
    registration and removal times (removed ones kept a while)."""
    out = []
    previous: BatchProgress | None = None
    for b in batches:
        tasks = _task_figures(jvm_batches.get(str(b.batch_id)))
        since = (b.start - previous.start if previous is not None and previous.batch_id == b.batch_id - 1
                 else None)
        out.append(BatchRecord(
            batch_id=b.batch_id, start=b.start, duration_s=b.duration_s, rows=b.rows,
            since_previous_s=since if since is not None and since > 0 else None, backlog=b.backlog,
            task_s=tasks.get("task_s"), tasks=tasks.get("tasks"), task_wall_s=tasks.get("wall_s"),
            executors_used=tasks.get("executors"), executors=_live_at(executors, b.start),
            fresh_executors=_joined_during(executors, previous.start if previous else b.start, b.end)))
        previous = b
    return tuple(out)


def _task_figures(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        busy = finite_float(value, math.nan)
        return {} if math.isnan(busy) else {"task_s": busy / 1000.0}
    out: dict[str, Any] = {}
    busy = finite_float(value.get("busyMs"), math.nan)
    if not math.isnan(busy):
        out["task_s"] = busy / 1000.0
    for key, name in (("tasks", "tasks"), ("executors", "executors")):
        n = finite_float(value.get(key), math.nan)
        if not math.isnan(n) and n > 0:
            out[name] = int(n)
    first = finite_float(value.get("firstLaunchMs"), math.nan)
    last = finite_float(value.get("lastEndMs"), math.nan)
    if not math.isnan(first) and not math.isnan(last) and last >= first > 0:
        out["wall_s"] = (last - first) / 1000.0
    return out


def _live_at(executors: Sequence[ExecutorInfo], t: float) -> int | None:
    """Executors registered by ``t`` and not removed before it; None when none is known."""
    if not executors:
        return None
    live = sum(1 for e in executors if e.added_time <= t and (e.removed_time is None or e.removed_time > t))
    return live or None


def _joined_during(executors: Sequence[ExecutorInfo], since: float, until: float) -> bool:
    """An executor registered after ``since`` and before ``until``: a batch in that span may run
    its first tasks (Python workers starting, classes loading), which says nothing of the cost."""
    return any(since < e.added_time <= until for e in executors)
