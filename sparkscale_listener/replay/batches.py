"""Turning one streaming progress event, and a batch's task events, into records (pure).

A progress becomes a :class:`~.records.BatchRecord` with its sources and its backlog in rows
(the autoscaler's own count: :func:`~..collect.backlog.query_backlog`, with rows per offset
learned over the query's batches as its recorder learns them); task events are summed per batch.
"""

from __future__ import annotations

import json
import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from types import MappingProxyType
from typing import Any

from ..collect.backlog import (
    backlog_problem,
    batch_rows_per_unit,
    learned_rows_per_unit,
    query_backlog,
    source_units_read,
)
from ..collect.progress import UNIT_SAMPLES
from .records import BatchRecord, SourceRecord, TaskTime


@dataclass
class TaskSums:
    """Running sums of the tasks of one batch or job."""

    task_ms: float = 0.0
    run_ms: float = 0.0
    tasks: int = 0
    failed: int = 0
    executors: set[str] = field(default_factory=set)
    first_launch: float = math.inf
    last_finish: float = -math.inf

    def record(self) -> TaskTime:
        return TaskTime(self.task_ms, self.run_ms, self.tasks, self.failed, tuple(sorted(self.executors)),
                        self.first_launch / 1000.0, self.last_finish / 1000.0)


def merged(parts: list[TaskSums]) -> TaskSums:
    out = TaskSums()
    for part in parts:
        out.task_ms += part.task_ms
        out.run_ms += part.run_ms
        out.tasks += part.tasks
        out.failed += part.failed
        out.executors |= part.executors
        out.first_launch = min(out.first_launch, part.first_launch)
        out.last_finish = max(out.last_finish, part.last_finish)
    return out


def epoch_seconds(iso: str) -> float:
    """A progress timestamp (``2024-05-01T12:00:00.123Z``) -> epoch seconds."""
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).astimezone(timezone.utc).timestamp()


def frozen(value: Any) -> Mapping[str, Any]:
    return MappingProxyType(dict(value)) if isinstance(value, Mapping) else MappingProxyType({})


def source_records(progress: Mapping[str, Any], samples: dict[str, deque[tuple[float, float]]],
                   learn: bool) -> tuple[tuple[SourceRecord, ...], float | None, str | None]:
    """A progress's sources, and the query's backlog in rows after it: the autoscaler's own count,
    with the rows per offset learned over the query's recent batches as its recorder learns them
    (``learn``: this progress is a batch whose reading is to be learned from)."""
    raw = [s for s in progress.get("sources") or () if isinstance(s, Mapping)]
    if learn:
        for source in raw:
            ratio = batch_rows_per_unit(source)
            if ratio is not None:
                units = source_units_read(source) or 0.0
                rows = _number(source.get("numInputRows")) or 0.0
                if units:
                    samples.setdefault(str(source.get("description") or ""),
                                       deque(maxlen=UNIT_SAMPLES)).append((rows, float(units)))
    backlog, per_source = query_backlog(raw, learned_rows_per_unit(samples))
    records = tuple(SourceRecord(
        description=str(s.get("description") or ""), start_offset=_offset(s.get("startOffset")),
        end_offset=_offset(s.get("endOffset")), latest_offset=_offset(s.get("latestOffset")),
        num_input_rows=int(_number(s.get("numInputRows")) or 0),
        input_rows_per_second=_number(s.get("inputRowsPerSecond")),
        processed_rows_per_second=_number(s.get("processedRowsPerSecond")),
        metrics=frozen(s.get("metrics")), backlog=b)
        for s, b in zip(raw, per_source, strict=True))
    return records, backlog, backlog_problem(per_source)


def batch_record(progress: Mapping[str, Any], sources: tuple[SourceRecord, ...], backlog: float | None,
                 problem: str | None, tasks: TaskTime | None) -> BatchRecord:
    durations = {str(k): float(v) for k, v in (progress.get("durationMs") or {}).items()
                 if _number(v) is not None}
    sink = progress.get("sink")
    return BatchRecord(
        batch_id=int(progress["batchId"]), timestamp=epoch_seconds(progress["timestamp"]),
        duration_ms=MappingProxyType(durations), num_input_rows=int(input_rows(progress)),
        input_rows_per_second=_summed(progress, sources, "inputRowsPerSecond", "input_rows_per_second"),
        processed_rows_per_second=_summed(progress, sources, "processedRowsPerSecond",
                                          "processed_rows_per_second"),
        sources=sources, backlog_rows=backlog, backlog_problem=problem,
        sink=str(sink.get("description")) if isinstance(sink, Mapping) else None, tasks=tasks)


def input_rows(progress: Mapping[str, Any]) -> float:
    """A progress's rows read. The event log's progress has no top-level ``numInputRows`` (Spark
    computes it from the sources, and the log's JSON holds fields only): the sources' sum."""
    rows = _number(progress.get("numInputRows"))
    if rows is not None:
        return rows
    return sum(_number(s.get("numInputRows")) or 0.0
               for s in progress.get("sources") or () if isinstance(s, Mapping))


def _summed(progress: Mapping[str, Any], sources: tuple[SourceRecord, ...], key: str, field_name: str,
            ) -> float | None:
    """A query-level rate: as reported, else the sum of its sources' (Spark's own definition)."""
    value = _number(progress.get(key))
    if value is not None:
        return value
    rates = [getattr(s, field_name) for s in sources]
    return sum(rates) if rates and all(r is not None for r in rates) else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None


def _offset(value: Any) -> Any:
    """An offset as the progress reports it (a JSON value, or its JSON text) -> a JSON value."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value

