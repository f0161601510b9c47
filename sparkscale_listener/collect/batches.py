"""Per-batch records for the performance model: each completed batch's progress (start, duration,
rows, backlog) joined with what its tasks did (task time, tasks, executors, task phase) as the JVM
listener attributed them through the batch's job properties, and with the executors that were live
when it ran."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..metrics import BatchRecord, ExecutorTimeline
from ..spark.bridge import BatchTasks
from .progress import BatchProgress


def batch_records(batches: Sequence[BatchProgress], jvm_batches: Mapping[str, BatchTasks],
                  executors: ExecutorTimeline) -> tuple[BatchRecord, ...]:
    """The query's recent batches as :class:`BatchRecord` s, oldest first.

    ``jvm_batches`` maps a batch id (text) to what its tasks did, as the bridge's snapshot gives it;
    ``executors``: the application's executors' registrations and removals (removed ones kept a
    while). A batch an executor joined before or during may run that executor's first tasks
    (Python workers starting, classes loading), which says nothing of the cost."""
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
            executors=executors.live_at(b.start) or None,
            fresh_executors=executors.joined_during(previous.start if previous else b.start, b.end)))
        previous = b
    return tuple(out)
