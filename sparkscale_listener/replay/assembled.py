"""What :class:`~.assemble.Assembler` has gathered from the events, as the steps after it read it.

The assembler fills these while it reads the log; :mod:`.timeline` turns them into records. Both
import this module and not each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from .batches import TaskSums


@dataclass
class QueryRun:
    """One run of a streaming query (a run id) as its events tell it."""

    query_id: str
    run_id: str
    name: str | None = None
    start_time: float | None = None
    end_time: float | None = None
    exception: str | None = None
    progress: list[dict[str, Any]] = field(default_factory=list)
    idle_times: list[float] = field(default_factory=list)


@dataclass
class JobEvents:
    """One job as its events tell it."""

    job_id: int
    tag: tuple[str, str | None, int | None] | None  # (query id, run id, batch id) of a streaming job
    description: str | None
    submission_time: float | None
    completion_time: float | None = None
    succeeded: bool | None = None


class Assembled(Protocol):
    """The part of the assembler's state that the timelines and the assumptions read."""

    app: dict[str, Any]
    conf: dict[str, str] | None
    executors: dict[str, dict[str, Any]]
    jobs: dict[int, JobEvents]
    tasks: dict[Any, TaskSums]
    runs: dict[str, QueryRun]
    clock: float

    def assume(self, sentence: str) -> None: ...
