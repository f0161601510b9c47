"""Errors of our own code: counted, logged with their stack, and reported as an ``error`` event.

The user's query must never suffer for a bug of ours: the control loop catches what any stage
raises, reports it here, and goes on with the next tick; ``status()`` shows the count and the last.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from .events import AutoscalerEvent, EventDispatcher

log = logging.getLogger("sparkscale")


class ErrorReporter:
    def __init__(self, events: EventDispatcher, mode: str, clock: Callable[[], float]) -> None:
        self.events = events
        self.mode = mode
        self.clock = clock
        self.count = 0
        self.last: str | None = None  # "where: Type: message" of the last one

    def report(self, now: float, where: str, exc: BaseException) -> None:
        self.count += 1
        self.last = f"{where}: {type(exc).__name__}: {exc}"
        log.exception("error in %s (the query goes on; next tick as usual)", where)
        try:
            self.events.emit(AutoscalerEvent(now, "error", self.last, situation=f"error:{where}",
                                             severity="error", details={"mode": self.mode}))
        except Exception:
            log.exception("could not report the error")

    def report_now(self, where: str, exc: BaseException) -> None:
        """:meth:`report` at the clock's time (for callers that have no tick time, e.g. state)."""
        self.report(self.clock(), where, exc)
