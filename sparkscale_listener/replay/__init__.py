"""Replaying a recorded application: what sparkscale would have done on a job that already ran.

The foundation is reading the application's Spark event log into typed records
(:func:`read_event_log` -> :class:`RecordedApplication`); :func:`replay` and :func:`compare` run the
real autoscaler over it with any settings (:mod:`.run`), :mod:`.report` presents the result and
``python -m sparkscale_listener replay`` (:mod:`.cli`) does both.
"""

from .eventlog import read_event_log
from .records import (
    BatchRecord,
    EventLogError,
    ExecutorRecord,
    JobRecord,
    QueryRecord,
    RecordedApplication,
    RecordedAutoscalerEvent,
    RecordedScaling,
    RecordedTick,
    SourceRecord,
    TaskTime,
)
from .run import Comparison, ReplayRun, compare, replay

__all__ = ["BatchRecord", "Comparison", "EventLogError", "ExecutorRecord", "JobRecord", "QueryRecord",
           "RecordedApplication", "RecordedAutoscalerEvent", "RecordedScaling", "RecordedTick",
           "ReplayRun", "SourceRecord", "TaskTime", "compare", "read_event_log", "replay"]
