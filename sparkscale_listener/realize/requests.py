"""Requests to the cluster manager that fail (a standalone Master restarting, a resource manager
unreachable): reported, and retried with backoff rather than every tick.

:class:`RequestGuard` makes each request through the realizer. An exception (a Py4J error when the
cluster manager cannot be reached) is a failed request like a refused one: reported as a
``cluster-manager-unavailable`` notice, never raised. While requests fail nothing else is asked
for until the retry is due; the wait doubles after each failure, from twice the control interval
up to ``provisioningTimeout``. The first request accepted again posts
``cluster-manager-available``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..config import AutoscalerConfig
from ..observe.events import AutoscalerEvent, EventDispatcher
from .realizer import RealizationResult, ScalingRealizer, error_text

_KEPT_ATTEMPTS = 20


@dataclass
class RequestFailure:
    """Requests are failing since ``since``; nothing is requested until ``retry_at``."""

    since: float
    what: str  # the first request that failed, e.g. "scale_up 1 -> 2"
    message: str  # the latest error
    attempts: int = 0
    retry_at: float = 0.0
    attempt_times: list[float] = field(default_factory=list)  # the last few, oldest first


class RequestGuard:
    """Makes requests through the realizer and keeps the failure state between them."""

    def __init__(self, config: AutoscalerConfig, realizer: ScalingRealizer, events: EventDispatcher,
                 details: Callable[[], dict[str, Any]]) -> None:
        self.config = config
        self.realizer = realizer
        self.events = events
        self._details = details  # the executor's event details (mode, app)
        self.failure: RequestFailure | None = None

    def backoff_s(self, attempts: int) -> float:
        """The wait after ``attempts`` failed requests: twice the interval, doubling each time, at
        most provisioningTimeout (never below the interval): a Master restart or a resource
        manager failover takes seconds to minutes, and nothing is gained by asking every tick."""
        cap = max(self.config.interval_s, self.config.provisioning_timeout_s)
        return min(cap, self.config.interval_s * 2.0 ** min(attempts, 30))

    def request(self, now: float, what: str, call: Callable[[], RealizationResult]) -> RealizationResult:
        """One request through the realizer; a failure is recorded and reported, never raised."""
        try:
            result = call()
        except Exception as exc:
            result = RealizationResult(requested_total=self.requested_total(), ok=False,
                                       message=error_text(exc))
        if result.ok:
            self._succeeded(now)
        else:
            self._failed(now, what, result.message or "the request was not accepted")
        return result

    def not_requested(self, now: float) -> RealizationResult:
        """Stands for a request not made while requests fail (the retry will carry the target)."""
        return RealizationResult(requested_total=self.requested_total(), ok=False,
                                 message=self.wait_reason(now) or "requests are failing")

    def requested_total(self) -> int:
        try:
            return self.realizer.requested_total
        except Exception:
            return 0

    def retry_due(self, now: float) -> bool:
        return self.failure is not None and now >= self.failure.retry_at

    def wait_reason(self, now: float) -> str | None:
        """Why no request is made now (requests are failing and the retry is not due), or None."""
        f = self.failure
        if f is None:
            return None
        return (f"the cluster manager did not accept the last request ({f.message}); "
                f"{f.attempts} failed attempt(s) since {f.what} "
                f"{now - f.since:.0f}s ago, next in {max(0.0, f.retry_at - now):.0f}s")

    def status(self, now: float) -> dict[str, Any] | None:
        """The failure in force, for status(), or None."""
        f = self.failure
        if f is None:
            return None
        return {"since": f.since, "first_request": f.what, "message": f.message, "attempts": f.attempts,
                "attempt_times": list(f.attempt_times), "retry_in_s": max(0.0, f.retry_at - now)}

    def _failed(self, now: float, what: str, message: str) -> None:
        failure = self.failure
        if failure is None:
            failure = self.failure = RequestFailure(since=now, what=what, message=message)
        failure.attempts += 1
        failure.message = message
        failure.attempt_times = [*failure.attempt_times, now][-_KEPT_ATTEMPTS:]
        delay = self.backoff_s(failure.attempts)
        failure.retry_at = now + delay
        first = failure.attempts == 1
        what_text = what if first else f"{failure.what} (retry {failure.attempts - 1})"
        # One situation for every failed attempt: the dispatcher reports repeats once per throttle
        # interval, the log and status() have each one.
        self.events.emit(AutoscalerEvent(
            now, "notice", f"the cluster manager did not accept {what_text}: {message}; the queries go "
            f"on with the executors they have; next attempt in {delay:g}s (backing off to at most "
            f"{self.backoff_s(10**6):g}s)", situation="cluster-manager-unavailable",
            severity="error" if first else "warning",
            details=self._details() | {"attempts": failure.attempts, "retryInS": delay}))

    def _succeeded(self, now: float) -> None:
        failure = self.failure
        if failure is None:
            return
        self.failure = None
        self.events.emit(AutoscalerEvent(
            now, "notice", f"the cluster manager accepts requests again after {now - failure.since:.0f}s "
            f"and {failure.attempts} failed attempt(s) since {failure.what}",
            situation="cluster-manager-available", details=self._details() | {"attempts": failure.attempts}))
