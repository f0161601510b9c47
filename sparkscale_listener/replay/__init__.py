"""Replaying a recorded application: what sparkscale would have done on a job that already ran.

The foundation is reading the application's Spark event log into typed records
(:func:`read_event_log` -> :class:`RecordedApplication`).
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

__all__ = ["BatchRecord", "EventLogError", "ExecutorRecord", "JobRecord", "QueryRecord",
           "RecordedApplication", "RecordedAutoscalerEvent", "RecordedScaling", "RecordedTick",
           "SourceRecord", "TaskTime", "read_event_log"]
