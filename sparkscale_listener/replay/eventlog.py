"""Reading a Spark event log into a :class:`~.records.RecordedApplication`: what the application did.

``read_event_log(path)`` takes one application's log (a file or a rolling-log folder, plain or in
any of Spark's codecs, see :mod:`.codecs`) and keeps what a replay of the autoscaler needs: the
configuration, the executors over time, every streaming batch with its durations, rows, sources,
backlog (counted as the autoscaler counts it, :func:`~..collect.backlog.query_backlog`) and task
time, the jobs outside streaming queries, and what sparkscale itself wrote (scaling events,
autoscaler events, tick summaries). Whatever the log lacks is said in ``assumptions``.

Speed: a log is mostly events the replay does not need (SQL plans, stage and task-start events);
each line's event type is read from its first bytes and only needed events are JSON-parsed.
A bad file gives an :class:`~.records.EventLogError` naming it and the line (or byte); a log cut
mid-line or mid-block (still being written) is read up to there, with an assumption saying so.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from os import PathLike
from pathlib import Path
from typing import Any

from .assemble import Assembler
from .codecs import LogFile, Truncated, decompressed_chunks, find_log_files, sniff_foreign
from .records import EventLogError, RecordedApplication

STREAMING = "org.apache.spark.sql.streaming.StreamingQueryListener$"
BRIDGE = "io.sparkscale.bridge."
# Spark writes every event as {"Event":"<type>",...}: the type is read without parsing the line.
_PREFIX = b'{"Event":"'

Progress = Callable[[int, int], None]


def read_event_log(path: str | PathLike[str], progress: Progress | None = None) -> RecordedApplication:
    """Read one application's event log; ``progress(done_bytes, total_bytes)`` is called as the
    files are read (bytes on disk, so compressed bytes for a compressed log)."""
    root = Path(path)
    logs = find_log_files(root)
    total, done = logs.total_bytes, 0

    def read(n: int) -> None:
        nonlocal done
        done += n
        if progress is not None:
            progress(done, total)

    assembler = Assembler(str(root))
    for number, log in enumerate(logs.files):
        if log.compacted:
            assembler.assume(f"{log.path.name} is a History Server compaction of the files before it: the "
                             "jobs and tasks that had finished by then are not in it, so task time before it "
                             "is missing")
        _read_file(log, assembler, read, first=number == 0)
    if progress is not None and done < total:
        progress(total, total)
    if not assembler.events_seen:
        if assembler.is_truncated:
            raise EventLogError(str(root), "nothing readable yet: it ends inside its first compressed block "
                                "(still being written, or cut)")
        raise EventLogError(str(root), "holds no Spark listener event: not an event log")
    return assembler.build(in_progress=logs.in_progress)


def _read_file(log: LogFile, assembler: Assembler, read: Callable[[int], None], first: bool) -> None:
    name = str(log.path)
    pending = b""  # the start of a line whose end is in the next chunk
    line_number = 0
    checked = not first
    try:
        for chunk in decompressed_chunks(log, read):
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop()
            for line in lines:
                line_number += 1
                if not checked:
                    checked = _check_first_line(line, name, line_number, log)
                _handle(line, name, line_number, assembler)
    except Truncated as cut:
        assembler.truncated(f"{log.path.name} ends inside a compressed block (byte {cut.offset}): it was "
                            "still being written, or was cut; what follows the last whole block is lost")
    if pending.strip():
        line_number += 1
        if not checked:
            _check_first_line(pending, name, line_number, log)
        try:
            event = json.loads(pending)
        except ValueError:
            assembler.truncated(f"{log.path.name} ends with a half-written line ({line_number}): it was "
                                "still being written, or was cut; that line is ignored")
            return
        _dispatch(event, name, line_number, assembler)


def _check_first_line(line: bytes, name: str, line_number: int, log: LogFile) -> bool:
    """The first non-blank line must be a JSON listener event; anything else is not an event log."""
    if not line.strip():
        return False
    if line.startswith(_PREFIX):
        return True
    foreign = sniff_foreign(line)
    if foreign:
        raise EventLogError(name, f"is {foreign}", offset=0)
    try:
        event = json.loads(line)
    except ValueError:
        codec = f" (after {log.codec} decompression)" if log.codec else ""
        raise EventLogError(name, f"not a Spark event log: not a JSON event{codec}, starts {line[:40]!r}",
                            line=line_number) from None
    if not isinstance(event, dict) or "Event" not in event:
        raise EventLogError(name, 'not a Spark event log: a JSON line without an "Event" field',
                            line=line_number)
    return True


def _handle(line: bytes, name: str, line_number: int, assembler: Assembler) -> None:
    if line.startswith(_PREFIX):
        end = line.find(b'"', len(_PREFIX))
        if line[len(_PREFIX):end] not in _WANTED:
            assembler.events_seen += 1
            return
    elif not line.strip():
        return
    try:
        event = json.loads(line)
    except ValueError as e:
        raise EventLogError(name, f"not valid JSON ({e}): starts {line[:60]!r}", line=line_number) from None
    _dispatch(event, name, line_number, assembler)


def _dispatch(event: Any, name: str, line_number: int, assembler: Assembler) -> None:
    if not isinstance(event, dict) or not isinstance(event.get("Event"), str):
        raise EventLogError(name, 'a JSON line that is not a listener event (no "Event" field)',
                            line=line_number)
    assembler.events_seen += 1
    handler = _HANDLERS.get(event["Event"])
    if handler is None:
        return
    try:
        handler(assembler, event)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise EventLogError(name, f"a {event['Event']} event without the fields Spark writes "
                            f"({type(e).__name__}: {e})", line=line_number) from None


_HANDLERS: dict[str, Callable[[Assembler, dict[str, Any]], None]] = {
    "SparkListenerLogStart": Assembler.log_start,
    "SparkListenerApplicationStart": Assembler.application_start,
    "SparkListenerApplicationEnd": Assembler.application_end,
    "SparkListenerEnvironmentUpdate": Assembler.environment_update,
    "SparkListenerExecutorAdded": Assembler.executor_added,
    "SparkListenerExecutorRemoved": Assembler.executor_removed,
    "SparkListenerJobStart": Assembler.job_start,
    "SparkListenerJobEnd": Assembler.job_end,
    "SparkListenerTaskEnd": Assembler.task_end,
    STREAMING + "QueryStartedEvent": Assembler.query_started,
    STREAMING + "QueryProgressEvent": Assembler.query_progress,
    STREAMING + "QueryIdleEvent": Assembler.query_idle,
    STREAMING + "QueryTerminatedEvent": Assembler.query_terminated,
    BRIDGE + "ScalingEvent": Assembler.scaling_event,
    BRIDGE + "AutoscalerEvent": Assembler.autoscaler_event,
    BRIDGE + "AutoscalerTick": Assembler.autoscaler_tick,
}
_WANTED = frozenset(name.encode() for name in _HANDLERS)
