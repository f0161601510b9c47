"""Per-batch records for the performance model: each completed batch's progress (start, duration,
rows, backlog) joined with what its tasks did (task time, tasks, executors, task phase) as the JVM
listener attributed them through the batch's job properties, and with the executors that were live
when it ran."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..metrics import BatchRecord, ExecutorInfo
from ..spark.bridge import BatchTasks
from .progress import BatchProgress


def batch_records(batches: Sequence[BatchProgress], jvm_batches: Mapping[str, BatchTasks],
                  executors: Sequence[ExecutorInfo]) -> tuple[BatchRecord, ...]:
    """The query's recent batches as :class:`BatchRecord` s, oldest first.

    ``jvm_batches`` maps a batch id (text) to what its tasks did, as the bridge's snapshot gives it;
    ``executors`` are the application's executors with their registration and removal times
    (removed ones kept a while)."""
    out = []
    previous: BatchProgress | None = None
    for b in batches:
        tasks = jvm_batches.get(str(b.batch_id))
        since = (b.start - previous.start if previous is not None and previous.batch_id == b.batch_id - 1
                 else None)
        wall_s = None
        if tasks is not None and tasks.first_launch_ms is not None and tasks.last_end_ms is not None \
                and tasks.last_end_ms >= tasks.first_launch_ms > 0:
            wall_s = (tasks.last_end_ms - tasks.first_launch_ms) / 1000.0
        out.append(BatchRecord(
            batch_id=b.batch_id, start=b.start, duration_s=b.duration_s, rows=b.rows,
            since_previous_s=since if since is not None and since > 0 else None, backlog=b.backlog,
            task_s=tasks.busy_ms / 1000.0 if tasks is not None else None,
            tasks=tasks.tasks if tasks is not None and tasks.tasks > 0 else None,
            task_wall_s=wall_s,
            executors_used=tasks.executors if tasks is not None and tasks.executors > 0 else None,
            executors=_live_at(executors, b.start),
            fresh_executors=_joined_during(executors, previous.start if previous else b.start, b.end)))
        previous = b
    return tuple(out)


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
