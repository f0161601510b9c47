"""Per-query timelines from the assembled events, and the sentences saying what the log lacks (pure).

A run's progress events become its batches, each joined with its tasks and with its backlog in
rows (rows per Kafka offset learned over the query's earlier batches, as the autoscaler's recorder
does); the trigger interval, which no event records, is inferred from the spacing of batch starts.
"""

from __future__ import annotations

import itertools
import statistics
from collections import deque
from collections.abc import Sequence
from datetime import datetime, timezone

from .assembled import Assembled, QueryRun
from .batches import batch_record, epoch_seconds, input_rows, merged, source_records
from .records import BatchRecord, QueryRecord, TaskTime

# Fewer waited gaps than this between batches say nothing reliable about the trigger.
MIN_GAPS = 3


def build_queries(a: Assembled) -> tuple[QueryRecord, ...]:
    samples: dict[str, dict[str, deque[tuple[float, float]]]] = {}
    seen: dict[str, set[int]] = {}
    records = []
    for run in sorted(a.runs.values(), key=_run_order):
        query_samples = samples.setdefault(run.query_id, {})
        query_seen = seen.setdefault(run.query_id, set())
        run_seen: set[int] = set()
        batches, idle = [], []
        for progress in run.progress:
            batch_id = int(progress["batchId"])
            # Older Spark reports triggers that found no data as progress without addBatch.
            executed = "addBatch" in (progress.get("durationMs") or {}) or input_rows(progress) > 0
            # Rows per offset are learned once per batch id of the query, as the recorder does.
            learn = executed and batch_id not in query_seen
            sources, backlog, problem = source_records(progress, query_samples, learn)
            if not executed:
                idle.append(batch_record(progress, sources, backlog, problem, None))
                continue
            query_seen.add(batch_id)
            if batch_id in run_seen:
                continue  # a batch reported twice: the first report stands
            run_seen.add(batch_id)
            tasks = _tasks(a, (run.query_id, run.run_id, batch_id), (run.query_id, None, batch_id))
            batches.append(batch_record(progress, sources, backlog, problem, tasks))
        batches.sort(key=lambda b: b.batch_id)
        record = QueryRecord(
            query_id=run.query_id, run_id=run.run_id, name=run.name,
            start_time=run.start_time if run.start_time is not None else (
                batches[0].timestamp if batches else None),
            end_time=run.end_time, exception=run.exception, batches=tuple(batches), idle_reports=tuple(idle),
            idle_times=tuple(run.idle_times), trigger_interval_s=infer_trigger_interval(batches),
            other_task_time=_other_tasks(a, run, {b.batch_id for b in batches}))
        for sentence in query_assumptions(a, run, record):
            a.assume(sentence)
        records.append(record)
    return tuple(records)


def _run_order(run: QueryRun) -> float:
    if run.start_time is not None:
        return run.start_time
    return epoch_seconds(run.progress[0]["timestamp"]) if run.progress else float("inf")


def _tasks(a: Assembled, *keys: object) -> TaskTime | None:
    for key in keys:
        sums = a.tasks.get(key)
        if sums is not None:
            return sums.record()
    return None


def _other_tasks(a: Assembled, run: QueryRun, batch_ids: set[int]) -> TaskTime | None:
    """Tasks of the run's jobs outside its recorded batches: jobs without a batch id, and batches
    that have no progress event (stopped or cut mid-batch)."""
    parts = [sums for key, sums in a.tasks.items()
             if isinstance(key, tuple) and key[0] == run.query_id and key[1] in (run.run_id, None)
             and (len(key) == 2 or key[2] not in batch_ids)]
    return merged(parts).record() if parts else None


def infer_trigger_interval(batches: Sequence[BatchRecord]) -> float | None:
    """The processing-time trigger interval, from the gaps between batch starts where the earlier
    batch finished well before the next began (the trigger waited for its time); None when the
    batches ran back to back (no trigger, or one shorter than the batches) or are too few."""
    gaps = []
    for earlier, later in itertools.pairwise(batches):
        gap = later.timestamp - earlier.timestamp
        took = (earlier.trigger_ms or 0.0) / 1000.0
        if gap > 0 and took < 0.9 * gap:
            gaps.append(gap)
    if len(gaps) < MIN_GAPS:
        return None
    interval = statistics.median(gaps)
    return round(interval, 1) if interval >= 1.0 else round(interval, 2)


def _label(run: QueryRun) -> str:
    return f"query {run.name!r}" if run.name else f"query {run.query_id}"


def query_assumptions(a: Assembled, run: QueryRun, record: QueryRecord) -> list[str]:
    label = _label(run)
    out = []
    if run.start_time is None:
        out.append(f"{label}: no QueryStartedEvent (the log starts after it): its start is taken as its "
                   "first batch's")
    batches = record.batches
    missing = [b for b in batches if b.tasks is None]
    if batches and len(missing) == len(batches):
        out.append(f"{label}: no task events for any of its {len(batches)} batches: their task time is "
                   "unknown")
    elif missing:
        out.append(f"{label}: {len(missing)} of its {len(batches)} batches have no task events (the first at "
                   f"batch {missing[0].batch_id}): their task time is unknown")
    silent: dict[str, str] = {}
    for batch in batches:
        for source in batch.sources:
            backlog = source.backlog
            if backlog.rows is None and source.description not in silent:
                why = backlog.problem or (
                    "a generator (rate) source or one without a latest offset: nothing waits in it"
                    if backlog.backlog is None else "its unit is not rows")
                silent[source.description] = why
    for description, why in silent.items():
        out.append(f"{label}: source {description} gives no backlog in rows at least once ({why}); its "
                   "backlog is then left out of the query's")
    if len(batches) > MIN_GAPS:
        if record.trigger_interval_s is None:
            out.append(f"{label}: the log does not record the trigger interval, and too few of its batches "
                       "waited for one to infer it: taken as none (each batch starts when the previous ends)")
        else:
            out.append(f"{label}: the log does not record the trigger interval; inferred "
                       f"{record.trigger_interval_s:g} s from the spacing of its batch starts")
    done = {b.batch_id for b in batches}
    open_batches = sorted({job.tag[2] for job in a.jobs.values() if job.tag and job.tag[0] == run.query_id
                           and job.tag[1] in (run.run_id, None) and job.tag[2] is not None} - done)
    last = max(done, default=-1)
    after = [b for b in open_batches if b > last]
    if after:
        how = "it was stopped" if run.end_time is not None else "the log ends"
        out.append(f"{label}: {how} during batch {after[0]} (its jobs started, no progress event came): "
                   "that batch is left out")
    return out


def application_assumptions(a: Assembled, in_progress: bool, queries: Sequence[QueryRecord]) -> list[str]:
    out = []
    if a.app.get("end_time") is None:
        when = _iso(a.clock) if a.clock > 0 else "unknown"
        state = "still running (the log is in progress)" if in_progress else "still running, or died"
        out.append(f"the log has no SparkListenerApplicationEnd: the application was {state}; it is taken "
                   f"to end at its last event, {when}")
    if a.conf is None:
        out.append("the log has no SparkListenerEnvironmentUpdate: the Spark configuration is unknown "
                   "(spark.executor.cores unknown, spark.task.cpus taken as 1, no sparkscale settings)")
    if "spark_version" not in a.app:
        out.append("the log has no SparkListenerLogStart: the Spark version is unknown")
    unattributed = a.tasks.get(None)
    if unattributed is not None:
        out.append(f"{unattributed.tasks} tasks ({unattributed.task_ms / 1000:.0f} s) belong to no job in "
                   "the log (their job started before it): counted for no query and no job")
    if not a.executors:
        out.append("the log announces no executor and no task ran: the executors over time are unknown")
    if queries and not any(b.tasks for q in queries for b in q.batches):
        out.append("no streaming batch has task events: busy time per batch is unknown")
    return out


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="seconds")
