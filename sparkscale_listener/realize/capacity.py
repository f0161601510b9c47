"""The capacity limit: the cluster gave fewer executors than a scale-up requested.

Executors that do not all arrive within ``provisioningTimeout`` (a full queue, a quota) are not a
failed scaling but the cluster's limit: the target is held at what arrived, and scale-ups stop
there until ``capacityRetryInterval`` has passed; then one asks for more again.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..config import AutoscalerConfig
from ..decisions import Decision


@dataclass(frozen=True)
class Shortfall:
    """A scale-up whose executors did not all arrive within ``provisioningTimeout``: the cluster
    gave ``live`` of the ``requested`` executors."""

    time: float
    requested: int
    live: int


class CapacityLimit:
    """The shortfall in force, if any, and what it allows."""

    def __init__(self, config: AutoscalerConfig) -> None:
        self.config = config
        self.shortfall: Shortfall | None = None
        self.retry_at = 0.0

    def hold(self, now: float, shortfall: Shortfall) -> int:
        """Record the shortfall; the target to hold at (what arrived, at least minExecutors)."""
        self.shortfall = shortfall
        self.retry_at = now + self.config.capacity_retry_s
        return max(shortfall.live, self.config.min_executors)

    def expire(self, now: float) -> Shortfall | None:
        """Lift the limit once its retry time came; the shortfall lifted, else None."""
        if self.shortfall is None or now < self.retry_at:
            return None
        lifted, self.shortfall = self.shortfall, None
        return lifted

    def cap(self, now: float, decision: Decision, current: int) -> Decision:
        """A scale-up capped at what the cluster gave (unchanged once the limit expired: call
        :meth:`expire` first)."""
        s = self.shortfall
        if s is None or decision.action != "scale_up" or decision.to_executors <= s.live:
            return decision
        why = (f"capacity limit: the cluster gave {s.live} of {s.requested} requested executors "
               f"at t={s.time:.0f}s; retrying in {self.retry_at - now:.0f}s")
        if s.live <= current:
            return replace(decision, to_executors=current, reason=f"{decision.reason}; not applied: {why}",
                           limited_by="capacity")
        return replace(decision, to_executors=s.live, reason=f"{decision.reason}; limited by {why}",
                       limited_by="capacity")

    def status(self, now: float) -> dict[str, Any] | None:
        """The limit in force (for status()), or None."""
        s = self.shortfall
        if s is None:
            return None
        return {"executors": s.live, "requested": s.requested, "since": s.time,
                "retry_in_s": max(0.0, self.retry_at - now)}
