"""Per-batch records for the performance model: each completed batch's progress (start, duration,
rows, backlog) joined with what its tasks did (task time, tasks, executors, task phase) as the JVM
listener attributed them through the batch's job properties, and with the executors that were live
when it ran.

:class:`BatchRecords` keeps each query's records between ticks: a tick brings a new batch or two
per query, and building all 64 of them again for each of 100 queries was half of a ``collect()``'s
own time."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from ..metrics import BatchRecord, ExecutorTimeline
from .progress import BatchProgress
from .snapshot import BatchTasks


def _record(b: BatchProgress, previous: BatchProgress | None, tasks: BatchTasks | None,
            executors: ExecutorTimeline) -> BatchRecord:
    """One batch's record. ``tasks``: what its tasks did, as the bridge's snapshot gives it;
    ``executors``: the application's registrations and removals (removed ones kept a while). A batch
    an executor joined before or during may run that executor's first tasks (Python workers
    starting, classes loading), which says nothing of the cost."""
    since = (b.start - previous.start if previous is not None and previous.batch_id == b.batch_id - 1
             else None)
    wall_s = None
    if tasks is not None and tasks.first_launch_ms is not None and tasks.last_end_ms is not None \
            and tasks.last_end_ms >= tasks.first_launch_ms > 0:
        wall_s = (tasks.last_end_ms - tasks.first_launch_ms) / 1000.0
    return BatchRecord(
        batch_id=b.batch_id, start=b.start, duration_s=b.duration_s, rows=b.rows,
        since_previous_s=since if since is not None and since > 0 else None, backlog=b.backlog,
        task_s=tasks.busy_ms / 1000.0 if tasks is not None else None,
        tasks=tasks.tasks if tasks is not None and tasks.tasks > 0 else None,
        task_wall_s=wall_s,
        executors_used=tasks.executors if tasks is not None and tasks.executors > 0 else None,
        executors=executors.live_at(b.start) or None,
        fresh_executors=executors.joined_during(previous.start if previous else b.start, b.end))


class BatchRecords:
    """Each query's recent batches as :class:`BatchRecord` s, oldest first, tick after tick,
    building only the records of batches that are new or changed: a record is kept while its
    batch's progress, its predecessor's and its tasks are the same objects as when it was built
    (the recorder and the bridge's poll hand the unchanged ones over as they were) and the
    executors' timeline is the same."""

    def __init__(self) -> None:
        self._timeline: ExecutorTimeline | None = None
        # query id -> batch id -> (its progress, its predecessor's, its tasks, the record)
        self._kept: dict[str, dict[int, tuple[BatchProgress, BatchProgress | None, BatchTasks | None,
                                              BatchRecord]]] = {}

    def of(self, query_id: str, batches: Sequence[BatchProgress], jvm_batches: Mapping[str, BatchTasks],
           executors: ExecutorTimeline) -> tuple[BatchRecord, ...]:
        if executors is not self._timeline:
            if executors != self._timeline:  # an executor came or went: every batch's may differ
                self._kept.clear()
            self._timeline = executors  # the next query of this collect() finds it by identity
        kept = self._kept.get(query_id, {})
        now: dict[int, tuple[BatchProgress, BatchProgress | None, BatchTasks | None, BatchRecord]] = {}
        previous: BatchProgress | None = None
        for b in batches:
            tasks = jvm_batches.get(str(b.batch_id))
            entry = kept.get(b.batch_id)
            if entry is None or entry[0] is not b or entry[1] is not previous or entry[2] is not tasks:
                entry = (b, previous, tasks, _record(b, previous, tasks, executors))
            now[b.batch_id] = entry
            previous = b
        self._kept[query_id] = now
        return tuple(entry[3] for entry in now.values())

    def keep_only(self, query_ids: Iterable[str]) -> None:
        """Forget the queries not among ``query_ids``."""
        keep = set(query_ids)
        for query_id in [q for q in self._kept if q not in keep]:
            del self._kept[query_id]
