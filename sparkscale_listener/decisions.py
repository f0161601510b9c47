"""What evaluation produces and what the control loop acts on.

:class:`Evaluation` is the evaluator's view (demand per query, a recommended executor count);
:class:`Decision` is the policy's verdict after the utilization band, delays, limits, mode and
excluded periods. Every decision, "none" included, carries a reason a person can read.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from .config.core import AutoscalerConfig

Action = Literal["scale_up", "scale_down", "none", "rollback"]
_EPS = 1e-9


def executors_for(slots: float, slots_per_executor: int) -> int:
    """The fewest executors whose task slots hold ``slots`` (0 for none)."""
    return math.ceil(slots / max(1, slots_per_executor) - _EPS) if slots > 0 else 0


@dataclass(frozen=True)
class ScalingRecord:
    """One applied executor change, remembered for stabilization, checkers and ineffective-scale-up
    detection."""

    time: float
    action: Action
    from_executors: int
    to_executors: int
    reason: str
    # Per query: processed rows/s before the change and the rate the change promised.
    rate_before: dict[str, float] = field(default_factory=dict)
    promised_rate: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class ScalingContext:
    """What the control loop tells the evaluator and policy at each tick."""

    now: float
    config: AutoscalerConfig
    current_target: int  # the executor total the autoscaler has asked for (or found at start)
    live_executors: int
    pending_executors: int  # requested, not yet registered
    cores_per_executor: int
    window_start: float  # samples older than this must not be used (start / last change)
    provisioning_time_s: float  # learned request -> registered time
    last_scaling: ScalingRecord | None = None
    task_cpus: int = 1  # spark.task.cpus: the cores one task occupies
    # Task slots of the live executors, from each one's own cores (executors may differ in size);
    # None: live_executors x slots_per_executor.
    live_slots: int | None = None
    # Rows/s each query processed over the window (counter deltas): the measure a scale-up's
    # effect is judged by, the same one its "before" rate was taken with.
    processed_rates: dict[str, float] = field(default_factory=dict)

    @property
    def slots_per_executor(self) -> int:
        """Task slots one more executor brings: its cores (``spark.executor.cores``) divided by
        ``spark.task.cpus``."""
        return max(1, self.cores_per_executor // max(1, self.task_cpus))

    @property
    def slots(self) -> int:
        """Task slots of the live executors: what the load is measured against."""
        if self.live_slots is not None:
            return self.live_slots
        return self.live_executors * self.slots_per_executor


@dataclass(frozen=True)
class QueryEvaluation:
    query_id: str
    name: str | None
    input_rate: float  # rows/s read by the query over the window
    backlog: float | None
    backlog_growth_rate: float  # rows/s the backlog grew by over the window (negative: shrinking)
    target_rate: float  # input_rate + backlog growth: the arrival rate
    catch_up_rate: float  # backlog / catchUpDuration
    slot_seconds_per_row: float | None  # busy task time per row; None: not measurable yet
    true_processing_rate_per_slot: float | None  # rows/s one fully busy slot handles
    required_slots: float  # slots needed at the target utilization (after the parallelism cap)
    utilization: float | None  # required work / current slots, before the target headroom
    parallelism_cap: int | None
    capped: bool  # the cap, not demand, limits required_slots
    backlog_mode: bool
    note: str = ""


@dataclass(frozen=True)
class Evaluation:
    time: float
    ready: bool  # False: not enough data (window not full, stabilizing); no decision
    current_executors: int
    recommended_executors: int  # before delays/limits of the policy, after min/max clamp
    required_slots: float
    # Busy fraction the arrival rate needs of the current slots left after the catch-up capacity
    # (evaluation.band_utilization): the number the policy's band is applied to.
    utilization: float | None
    backlog_mode: bool
    queries: dict[str, QueryEvaluation] = field(default_factory=dict)
    reason: str = ""


@dataclass(frozen=True)
class Decision:
    time: float
    action: Action
    from_executors: int
    to_executors: int
    reason: str
    applied: bool = False  # True once the realizer carried it out
    evaluation: Evaluation | None = None
    limited_by: str | None = None  # "maxExecutors", "minExecutors", "parallelism", "scaleUp.maxFactor" ...


def decision_to_dict(decision: Decision) -> dict[str, Any]:
    out: dict[str, Any] = {
        "time": decision.time,
        "action": decision.action,
        "from_executors": decision.from_executors,
        "to_executors": decision.to_executors,
        "reason": decision.reason,
        "applied": decision.applied,
        "limited_by": decision.limited_by,
    }
    ev = decision.evaluation
    if ev is not None:
        out["utilization"] = ev.utilization
        out["required_slots"] = ev.required_slots
        out["backlog_mode"] = ev.backlog_mode
        out["queries"] = {q: asdict(e) for q, e in ev.queries.items()}
    return out
