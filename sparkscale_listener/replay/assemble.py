"""Assembling the records of an application from its events, one event at a time (pure).

:mod:`.eventlog` reads the lines and calls one method per needed event; :meth:`Assembler.build`
then joins what belongs together (tasks to batches through their jobs, backlogs through the
batches before them) and writes the assumptions. Task attribution: a job of a micro-batch carries
the local properties ``sql.streaming.queryId`` and ``streaming.sql.batchId`` (and its run id as
the job group); its ``Stage IDs`` map each task's stage to it, as ``SparkscaleListener`` does live.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from ..metrics import ExecutorTimeline
from .assembled import JobEvents, QueryRun
from .batches import TaskSums, epoch_seconds, frozen
from .records import (
    ExecutorRecord,
    JobRecord,
    RecordedApplication,
    RecordedAutoscalerEvent,
    RecordedScaling,
    RecordedTick,
)
from .timeline import application_assumptions, build_queries

QUERY_ID_KEY = "sql.streaming.queryId"
BATCH_ID_KEY = "streaming.sql.batchId"
JOB_GROUP_KEY = "spark.jobGroup.id"  # a streaming query's jobs run in the group named by its run id
DRIVER = "driver"


class Assembler:
    """The state built from the events read so far: one method per needed event type (called by
    :mod:`.eventlog`), and :meth:`build` for the records once the log is read."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.events_seen = 0
        self.app: dict[str, Any] = {}
        self.conf: dict[str, str] | None = None
        self.executors: dict[str, dict[str, Any]] = {}
        self.jobs: dict[int, JobEvents] = {}
        self.stage_job: dict[int, int] = {}
        self.tasks: dict[Any, TaskSums] = {}  # (query, run, batch) | (query, run) | job id | None
        self.runs: dict[str, QueryRun] = {}
        self.scalings: list[RecordedScaling] = []
        self.autoscaler_events: list[RecordedAutoscalerEvent] = []
        self.ticks: list[RecordedTick] = []
        self.assumptions: list[str] = []
        self.is_truncated = False
        self.clock = -math.inf  # the latest time (epoch s) any event so far carried

    # ------------------------------------------------------------------ reading helpers

    def assume(self, sentence: str) -> None:
        if sentence not in self.assumptions:
            self.assumptions.append(sentence)

    def truncated(self, sentence: str) -> None:
        self.is_truncated = True
        self.assume(sentence)

    def _clock_or_none(self) -> float | None:
        return self.clock if math.isfinite(self.clock) else None

    def _at(self, millis: Any) -> float | None:
        if not isinstance(millis, (int, float)) or millis <= 0:
            return None
        t = millis / 1000.0
        self.clock = max(self.clock, t)
        return t

    def _run(self, event: Mapping[str, Any]) -> QueryRun:
        run_id = str(event["runId"])
        run = self.runs.get(run_id)
        if run is None:
            run = self.runs[run_id] = QueryRun(str(event["id"]), run_id)
        return run

    # ------------------------------------------------------------------ application and executors

    def log_start(self, event: dict[str, Any]) -> None:
        self.app["spark_version"] = event.get("Spark Version")

    def application_start(self, event: dict[str, Any]) -> None:
        self.app.update(app_id=event.get("App ID"), name=event.get("App Name"), user=event.get("User"),
                        attempt_id=event.get("App Attempt ID"), start_time=self._at(event.get("Timestamp")))

    def application_end(self, event: dict[str, Any]) -> None:
        self.app["end_time"] = self._at(event.get("Timestamp"))

    def environment_update(self, event: dict[str, Any]) -> None:
        properties = event.get("Spark Properties") or {}
        if isinstance(properties, list):  # [[key, value], ...] in some writers
            properties = dict(properties)
        self.conf = {str(k): str(v) for k, v in properties.items()}

    def executor_added(self, event: dict[str, Any]) -> None:
        info = event.get("Executor Info") or {}
        executor_id = str(event["Executor ID"])
        self.executors[executor_id] = {
            "host": info.get("Host"), "cores": info.get("Total Cores"),
            "added_time": self._at(event.get("Timestamp")), "removed_time": None, "removed_reason": None}

    def executor_removed(self, event: dict[str, Any]) -> None:
        executor = self.executors.setdefault(str(event["Executor ID"]), {
            "host": None, "cores": None, "added_time": None, "removed_time": None, "removed_reason": None})
        executor["removed_time"] = self._at(event.get("Timestamp"))
        executor["removed_reason"] = event.get("Removed Reason")

    # ------------------------------------------------------------------ jobs and tasks

    def job_start(self, event: dict[str, Any]) -> None:
        job_id = int(event["Job ID"])
        properties = event.get("Properties") or {}
        query_id = properties.get(QUERY_ID_KEY)
        tag = None
        if query_id is not None:
            batch = properties.get(BATCH_ID_KEY)
            tag = (str(query_id), properties.get(JOB_GROUP_KEY), int(batch) if batch is not None else None)
        description = properties.get("spark.job.description") or properties.get(JOB_GROUP_KEY)
        self.jobs[job_id] = JobEvents(job_id, tag, description, self._at(event.get("Submission Time")))
        for stage_id in event.get("Stage IDs") or ():
            self.stage_job[int(stage_id)] = job_id

    def job_end(self, event: dict[str, Any]) -> None:
        job = self.jobs.get(int(event["Job ID"]))
        if job is not None:
            job.completion_time = self._at(event.get("Completion Time"))
            result = event.get("Job Result") or {}
            job.succeeded = result.get("Result") == "JobSucceeded"

    def task_end(self, event: dict[str, Any]) -> None:
        reason = (event.get("Task End Reason") or {}).get("Reason")
        if reason == "Resubmitted":  # bookkeeping for a task already counted (its output was lost)
            return
        info = event["Task Info"]
        launch, finish = info.get("Launch Time") or 0, info.get("Finish Time") or 0
        if launch <= 0 or finish <= 0:
            return
        self.clock = max(self.clock, finish / 1000.0)
        job_id = self.stage_job.get(int(event["Stage ID"]))
        job = self.jobs.get(job_id) if job_id is not None else None
        if job is None:
            key: Any = None
        elif job.tag is None:
            key = job_id
        else:
            query_id, run_id, batch_id = job.tag
            key = (query_id, run_id, batch_id) if batch_id is not None else (query_id, run_id)
        sums = self.tasks.get(key)
        if sums is None:
            sums = self.tasks[key] = TaskSums()
        metrics = event.get("Task Metrics") or {}
        sums.task_ms += max(0, finish - launch)
        sums.run_ms += metrics.get("Executor Run Time") or 0
        sums.tasks += 1
        sums.failed += reason != "Success"
        sums.executors.add(str(info.get("Executor ID")))
        sums.first_launch = min(sums.first_launch, launch)
        sums.last_finish = max(sums.last_finish, finish)

    # ------------------------------------------------------------------ streaming queries

    def query_started(self, event: dict[str, Any]) -> None:
        run = self._run(event)
        run.name = event.get("name")
        stamp = event.get("timestamp")
        run.start_time = epoch_seconds(stamp) if stamp else self._clock_or_none()

    def query_progress(self, event: dict[str, Any]) -> None:
        progress = event["progress"]
        run = self._run(progress)
        run.name = progress.get("name", run.name)
        self.clock = max(self.clock, epoch_seconds(progress["timestamp"]))
        run.progress.append(progress)

    def query_idle(self, event: dict[str, Any]) -> None:
        stamp = event.get("timestamp")
        if stamp:
            self._run(event).idle_times.append(epoch_seconds(stamp))

    def query_terminated(self, event: dict[str, Any]) -> None:
        run = self._run(event)
        # The event carries no time: the latest time before it is the best known.
        run.end_time = self._clock_or_none()
        run.exception = event.get("exception")

    # ------------------------------------------------------------------ what sparkscale wrote

    def _bridge_time(self, event: Mapping[str, Any]) -> float:
        return self._at(event.get("timestampMs")) or self._clock_or_none() or 0.0

    def scaling_event(self, event: dict[str, Any]) -> None:
        self.scalings.append(RecordedScaling(
            self._bridge_time(event), str(event["action"]), int(event["fromExecutors"]),
            int(event["toExecutors"]), str(event.get("reason") or ""), bool(event.get("applied")),
            event.get("mode"), frozen(event.get("details"))))

    def autoscaler_event(self, event: dict[str, Any]) -> None:
        self.autoscaler_events.append(RecordedAutoscalerEvent(
            self._bridge_time(event), str(event["kind"]), event.get("severity"),
            str(event.get("reason") or ""), frozen(event.get("details"))))

    def autoscaler_tick(self, event: dict[str, Any]) -> None:
        self.ticks.append(RecordedTick(
            self._bridge_time(event), frozen(event.get("point")), frozen(event.get("decision")),
            frozen(event.get("status")), tuple(frozen(q) for q in event.get("queries") or ()),
            frozen(event.get("config"))))

    # ------------------------------------------------------------------ the record

    def build(self, in_progress: bool) -> RecordedApplication:
        conf = self.conf or {}
        queries = build_queries(self)
        executors = self._executors(conf)
        jobs = tuple(JobRecord(j.job_id, j.description, j.submission_time, j.completion_time, j.succeeded,
                               self.tasks[j.job_id].record() if j.job_id in self.tasks else None)
                     for j in sorted(self.jobs.values(), key=lambda j: j.job_id) if j.tag is None)
        for sentence in application_assumptions(self, in_progress, queries):
            self.assume(sentence)
        # An executor whose addition the log lacks counts only its removal.
        timeline = ExecutorTimeline((e.added_time for e in executors if e.added_time is not None),
                                    (e.removed_time for e in executors if e.removed_time is not None))
        return RecordedApplication(
            path=self.path, app_id=self.app.get("app_id"), name=self.app.get("name"),
            attempt_id=self.app.get("attempt_id"), spark_version=self.app.get("spark_version"),
            user=self.app.get("user"), start_time=self.app.get("start_time"),
            end_time=self.app.get("end_time"), last_event_time=self._clock_or_none(),
            conf=MappingProxyType(conf),
            executors=executors, queries=queries, jobs=jobs, scalings=tuple(self.scalings),
            autoscaler_events=tuple(self.autoscaler_events), ticks=tuple(self.ticks),
            assumptions=tuple(self.assumptions), truncated=self.is_truncated,
            _timeline=timeline)

    def _executors(self, conf: Mapping[str, str]) -> tuple[ExecutorRecord, ...]:
        """The executors announced, plus any that ran tasks (or were removed) unannounced."""
        ran = set().union(*(s.executors for s in self.tasks.values())) if self.tasks else set()
        for executor_id in ran - set(self.executors):
            self.executors[executor_id] = {"host": None, "cores": None, "added_time": None,
                                           "removed_time": None, "removed_reason": None}
        configured = conf.get("spark.executor.cores")
        for executor_id, e in sorted(self.executors.items()):
            if e["added_time"] is not None:
                continue
            if executor_id == DRIVER:
                master = conf.get("spark.master", "")
                self.assume(f"tasks ran in the driver (master {master or 'unknown'}, local mode): the driver "
                            "is counted as one executor, of the size local[N] gives it")
                e["cores"] = _local_cores(master)
                continue
            e["cores"] = int(configured) if configured and configured.isdigit() else None
            size = f"taken as spark.executor.cores={e['cores']}" if e["cores"] else "unknown"
            self.assume(f"executor {executor_id} ran tasks or was removed, but its addition is not in the "
                        f"log: its size is {size}, its start unknown")
        records = [ExecutorRecord(executor_id, e["host"], e["cores"], e["added_time"], e["removed_time"],
                                  e["removed_reason"]) for executor_id, e in self.executors.items()]
        records.sort(key=lambda e: (e.added_time is None, e.added_time or 0.0))
        return tuple(records)


def _local_cores(master: str) -> int | None:
    inside = master[master.find("[") + 1:master.find("]")] if master.startswith("local[") else ""
    if inside.split(",")[0].isdigit():
        return int(inside.split(",")[0])
    return None
