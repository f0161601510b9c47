"""What a simulation records: a point per control tick (:class:`TimelinePoint`, per query
:class:`QueryPoint`), the control loop's decisions and events (:class:`SimResult`), and the
running batches other policies size on (:class:`BatchView`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..decisions import Decision, ScalingRecord
from ..observe.events import AutoscalerEvent
from .tolerance import EPS


@dataclass(frozen=True)
class BatchView:
    """A batch whose tasks are running (its driver-side planning done), for policies that size on
    tasks the way Spark's own dynamic allocation does."""

    query: str
    started: float  # when the batch started (planning included)
    tasks: int  # tasks of its stage (the query's partitions)
    tasks_left: int  # not finished yet: running or pending (the fluid work left, in tasks)
    running_slots: float  # slots its tasks hold now


@dataclass(frozen=True)
class QueryPoint:
    load: float  # arrival rate (noise included) at the tick, rows/s
    backlog: float  # ground truth: rows arrived and not yet read by a batch
    reported_backlog: float | None  # what the query's progress reported
    processed_rate: float  # rows/s of batches completed since the previous tick
    utilization: float  # the query's task time / cluster slot time since the previous tick
    slots_used_max: float  # most slots its tasks held at once since the previous tick
    active: bool = True  # False once the query terminated
    # Ground truth: the age of the oldest row that arrived and no completed batch has read yet
    # (rows waiting in the source and rows of the batch running), seconds.
    lag_s: float = 0.0


@dataclass(frozen=True)
class TimelinePoint:
    t: float
    executors: int  # live
    target: int  # the autoscaler's target (before its baseline: the cluster manager's)
    pending: int  # requested, not registered
    slots: int
    queries: dict[str, QueryPoint]


@dataclass
class SimResult:
    timeline: list[TimelinePoint]
    # Every decision once the baseline is set, as Autoscaler.decisions() has them (unbounded): one
    # per control tick, plus each rollback just before the "paused" decision of its tick.
    decisions: list[Decision]
    actions: list[Decision]  # applied changes of the target: scale_up / scale_down / rollback
    cores_per_executor: int
    records: list[ScalingRecord] = field(default_factory=list)  # the autoscaler's ScalingRecords
    events: list[AutoscalerEvent] = field(default_factory=list)  # every event delivered

    @property
    def final_executors(self) -> int:
        return self.timeline[-1].executors if self.timeline else 0

    def executors_at(self, t: float) -> int:
        """Live executors at the last tick at or before ``t``."""
        point = None
        for p in self.timeline:
            if p.t > t + EPS:
                break
            point = p
        return point.executors if point else 0

    def actions_between(self, t0: float, t1: float) -> list[Decision]:
        return [a for a in self.actions if t0 <= a.time < t1]

    def events_of(self, *kinds: str) -> list[AutoscalerEvent]:
        """Delivered events of these kinds (``"rollback"``, ``"pause"``, ``"stopped"`` ...)."""
        return [e for e in self.events if e.kind in kinds]

    @property
    def rollbacks(self) -> list[Decision]:
        return [a for a in self.actions if a.action == "rollback"]
