"""Executor provisioning: how long a requested executor takes to register, and when a change has
settled enough to measure again.

On Spark nothing restarts when executors are added: the next micro-batch simply uses them. What
Flink calls restart time becomes provisioning time (request -> registered), which the evaluator
adds to the capacity a backlog needs. The tracker learns it from every scale-up, a timeout counting
as the time waited, and keeps the observations in the state store so that a restarted driver starts
from them. A scale-up sized on too short a time falls behind, so the estimate is a high percentile
of recent observations (capped at ``provisioningTimeout``), not their median, and an observation
ends when the last requested executor registered, not at the tick that noticed it.

On Kubernetes the executors of one request do not all start together: Spark creates their pods in
batches (``spark.kubernetes.allocation.batch.size`` pods, the next batch ``batch.delay`` later). A
scale-up of more pods than a batch takes that much longer whatever the cluster does: the tracker
expects it, waits for it before calling a shortfall, and learns the time of one batch (the wait of
the later batches taken off), so a small scale-up is not expected to take as long as a large one.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..config.core import AutoscalerConfig
from ..decisions import ScalingRecord
from ..metrics import KILLED_BY_DRIVER, ExecutorInfo
from ..state.autoscaler_state import AutoscalerState
from .capacity import Shortfall

_KEPT_OBSERVATIONS = 50
# The ids of executors the autoscaler removed, newest, at least this many (executor ids are never
# reused); and at least twice maxExecutors, so a scale-down of every executor is still known when
# its removals land.
_KEPT_REMOVALS = 1000
RECENT_OBSERVATIONS = 20
PERCENTILE = 0.9


@dataclass(frozen=True)
class AllocationBatches:
    """How the cluster manager starts a request's executors: ``size`` at a time, ``delay_s`` apart
    (Kubernetes); without it, all at once."""

    size: int
    delay_s: float

    def wait_s(self, executors: int) -> float:
        """The time the batches after the first one add to a request of ``executors``."""
        return max(0, math.ceil(executors / max(1, self.size)) - 1) * self.delay_s

    def describe(self) -> str:
        return f"pods created {self.size} at a time, {self.delay_s:g} s apart"


@dataclass(frozen=True)
class Settled:
    """A change that arrived (or timed out): when measuring may resume, and the shortfall of a
    scale-up whose executors did not all arrive (else None)."""

    window_start: float
    shortfall: Shortfall | None = None


@dataclass
class PendingChange:
    """An applied change whose requested executors have not all registered (or left) yet."""

    record: ScalingRecord
    requested_total: int
    requested_at: float
    batch_wait_s: float = 0.0  # what the allocation batches after the first add to its wait

    @property
    def adds(self) -> bool:
        return self.record.to_executors > self.record.from_executors


def next_window_start(config: AutoscalerConfig, change_time: float, settled_time: float | None,
                      now: float) -> float:
    """The first sample time the evaluator may use after an executor change at ``change_time``.

    ``settled_time`` is when the live executor count first reached the new target (requested
    executors registered, or killed ones gone); None while it has not. Measuring resumes
    ``stabilizationInterval`` after that, since new executors need a batch or two to warm up.
    Executors that never arrive stop the wait at ``provisioningTimeout``. Returns ``math.inf``
    while still waiting (the evaluator then reports not ready).
    """
    if settled_time is None:
        if now - change_time >= config.provisioning_timeout_s:
            return change_time + config.provisioning_timeout_s + config.stabilization_interval_s
        return math.inf
    return max(change_time, settled_time) + config.stabilization_interval_s


class ProvisioningTracker:
    """Follows the change in flight and learns request -> registered times."""

    def __init__(self, config: AutoscalerConfig, state: AutoscalerState,
                 batches: AllocationBatches | None = None) -> None:
        self.config = config
        self.state = state
        self.batches = batches
        self.pending: PendingChange | None = None
        self.observations: list[float] = []
        # The executors the autoscaler removed. A decommission of any other is the cluster's (a node
        # drained): the executor is lost, and its replacement on its way like any other's.
        self._removed_by_us: dict[str, None] = {}  # (insertion-ordered: the oldest dropped first)
        self._kept_removals = max(_KEPT_REMOVALS, 2 * config.max_executors)

    def restore(self) -> None:
        """Start from the observations a previous driver of this application stored."""
        self.observations = self.state.provisioning_seconds(limit=RECENT_OBSERVATIONS)

    def time_s(self) -> float:
        """The 90th percentile (nearest rank) of the recent request -> registered observations,
        at most ``provisioningTimeout``; ``provisioningTime`` until one was made."""
        recent = sorted(self.observations[-RECENT_OBSERVATIONS:])
        if not recent:
            return min(self.config.provisioning_time_s, self.config.provisioning_timeout_s)
        rank = max(1, math.ceil(PERCENTILE * len(recent)))
        return min(recent[rank - 1], self.config.provisioning_timeout_s)

    def removed_by_us(self, executor_ids: Iterable[str]) -> None:
        """Note executors the autoscaler removed (killed or decommissioned)."""
        for executor_id in executor_ids:
            self._removed_by_us[executor_id] = None
        while len(self._removed_by_us) > self._kept_removals:
            del self._removed_by_us[next(iter(self._removed_by_us))]

    def _lost_since(self, e: ExecutorInfo, since: float) -> bool:
        """Removed from outside at or after ``since``: not killed by the driver (ours, or someone's
        deliberate kill, which Spark does not replace), not one the autoscaler removed."""
        return e.lost_since(since, (KILLED_BY_DRIVER,)) and e.executor_id not in self._removed_by_us

    def start(self, record: ScalingRecord, requested_total: int, now: float) -> None:
        """A change was requested; measuring stops until it settles (see :meth:`settle`)."""
        adding = max(0, requested_total - record.from_executors)
        batch_wait = self.batches.wait_s(adding) if self.batches is not None else 0.0
        self.pending = PendingChange(record, requested_total, now, batch_wait)

    def expected_s(self, change: PendingChange) -> float:
        """How long the change's executors are expected to take: the learned time of one batch and
        the wait of the batches after it."""
        return self.time_s() + change.batch_wait_s

    def waiting_for(self, now: float, live: int) -> str | None:
        """Why the target is not reached yet, while a scale-up's executors are on their way."""
        change = self.pending
        if change is None or not change.adds or live >= change.requested_total:
            return None
        waited = now - change.requested_at
        expected = self.expected_s(change)
        batches = f"; {self.batches.describe()}" if self.batches is not None and change.batch_wait_s else ""
        state = (f"expected within {expected:.0f} s" if waited <= expected
                 else f"longer than the {expected:.0f} s expected (pods waiting for room or a new node?)")
        limit = self.config.provisioning_timeout_s + change.batch_wait_s
        return (f"{change.requested_total - live} of {change.requested_total} requested executors not "
                f"registered yet: asked {waited:.0f} s ago, {state}{batches}; fewer than asked after "
                f"{limit:.0f} s are a capacity limit")

    def settle(self, now: float, live: int, target: int,
               executors: Sequence[ExecutorInfo] = ()) -> Settled | None:
        """What settled once the pending change arrived (or timed out), else None.

        A scale-up has arrived when every requested executor registered, a scale-down when no
        more than the target are live. Executors that never arrive stop the wait at
        ``provisioningTimeout`` (recorded as an observation of that length), and fewer than
        requested then is the cluster's capacity (the shortfall). An executor lost from outside
        meanwhile (a decommission too, unless of an executor the autoscaler removed) starts that
        wait again: the cluster manager replaces it, and its replacement needs a provisioning time
        of its own; judged sooner, a replacement still on its way would read as the cluster's
        limit. ``executors`` (with registration and removal times) tell when the last one
        registered and which were lost.
        """
        change = self.pending
        if change is None:
            return None
        # Executors beyond the target are leaving (a standalone master starts one on every free
        # core before the first request reaches it; the converge step removes them): batches
        # meanwhile run on executors coming and going, and the new size is not measured yet.
        arrived = (change.requested_total <= live <= max(target, change.requested_total)
                   if change.adds else live <= target)
        since = change.requested_at
        if change.adds:
            lost = [e.removed_time for e in executors
                    if e.removed_time is not None and self._lost_since(e, change.requested_at)]
            since = max([since, *lost])
        timed_out = now - since >= self.config.provisioning_timeout_s + change.batch_wait_s
        if not (arrived or timed_out):
            return None
        shortfall = None
        if change.adds:
            took = now - change.requested_at
            if arrived:
                # Until the last one asked for registered (not the extras or replacements that
                # came after it).
                before = sum(1 for e in executors if e.added_time < change.requested_at
                             and (e.removed_time is None or e.removed_time >= change.requested_at))
                registered = sorted(e.added_time for e in executors if e.removed_time is None
                                    and change.requested_at <= e.added_time <= now)
                asked = change.requested_total - before
                if registered and asked > 0:
                    took = registered[min(asked, len(registered)) - 1] - change.requested_at
            took = max(0.0, took - change.batch_wait_s)  # the time of one batch
            self.observations = [*self.observations, took][-_KEPT_OBSERVATIONS:]
            self.state.record_provisioning(now, took, change.record.to_executors,
                                           timed_out=not arrived)
            if live < change.requested_total:
                shortfall = Shortfall(now, change.requested_total, live)
        self.pending = None
        return Settled(next_window_start(self.config, change.requested_at, now if arrived else None, now),
                       shortfall)

    @property
    def waiting(self) -> bool:
        return self.pending is not None

    def __repr__(self) -> str:
        pending = "none" if self.pending is None else f"{self.pending.requested_total} requested"
        return f"ProvisioningTracker(time_s={self.time_s():g}, pending={pending})"


__all__ = ["AllocationBatches", "PendingChange", "ProvisioningTracker", "Settled"]
