"""Executor provisioning: how long a requested executor takes to register, and when a change has
settled enough to measure again.

On Spark nothing restarts when executors are added: the next micro-batch simply uses them. What
Flink calls restart time becomes provisioning time (request -> registered), which the evaluator
adds to the capacity a backlog needs. The tracker learns it from every scale-up that arrived, and
keeps the learned values in the state store so that a restarted driver starts from them.
"""

from __future__ import annotations

from dataclasses import dataclass

from .config import AutoscalerConfig
from .decisions import ScalingRecord
from .policy import next_window_start
from .state import AutoscalerState

DEFAULT_PROVISIONING_TIME_S = 10.0
_KEPT_OBSERVATIONS = 50
_MEDIAN_OF_LAST = 10


@dataclass
class PendingChange:
    """An applied change whose requested executors have not all registered (or left) yet."""

    record: ScalingRecord
    requested_total: int
    requested_at: float

    @property
    def adds(self) -> bool:
        return self.record.to_executors > self.record.from_executors


class ProvisioningTracker:
    """Follows the change in flight and learns request -> registered times."""

    def __init__(self, config: AutoscalerConfig, state: AutoscalerState) -> None:
        self.config = config
        self.state = state
        self.pending: PendingChange | None = None
        self.observations: list[float] = state.provisioning_seconds(limit=_MEDIAN_OF_LAST)

    def time_s(self) -> float:
        """Median of the recent request -> registered observations (Flink's restart time)."""
        recent = sorted(self.observations[-_MEDIAN_OF_LAST:])
        return recent[len(recent) // 2] if recent else DEFAULT_PROVISIONING_TIME_S

    def start(self, record: ScalingRecord, requested_total: int, now: float) -> None:
        """A change was requested; measuring stops until it settles (see :meth:`settle`)."""
        self.pending = PendingChange(record, requested_total, now)

    def settle(self, now: float, live: int, target: int) -> float | None:
        """The next window start once the pending change arrived (or timed out), else None.

        A scale-up has arrived when every requested executor registered, a scale-down when no
        more than the target are live. Executors that never arrive stop the wait at
        ``provisioningTimeout``.
        """
        change = self.pending
        if change is None:
            return None
        arrived = live >= change.requested_total if change.adds else live <= target
        timed_out = now - change.requested_at >= self.config.provisioning_timeout_s
        if not (arrived or timed_out):
            return None
        if arrived and change.adds:
            took = now - change.requested_at
            self.observations = [*self.observations, took][-_KEPT_OBSERVATIONS:]
            self.state.record_provisioning(now, took, change.record.to_executors)
        self.pending = None
        return next_window_start(self.config, change.requested_at, now if arrived else None, now)

    @property
    def waiting(self) -> bool:
        return self.pending is not None

    def __repr__(self) -> str:
        pending = "none" if self.pending is None else f"{self.pending.requested_total} requested"
        return f"ProvisioningTracker(time_s={self.time_s():g}, pending={pending})"


__all__ = ["DEFAULT_PROVISIONING_TIME_S", "PendingChange", "ProvisioningTracker"]
