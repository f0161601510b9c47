"""The pause after a rollback, and the stop after too many of them.

A rollback pauses automatic scaling for ``rollback.pauseDuration`` (or until the application
restarts); ``rollback.maxRollbacks`` rollbacks within ``rollback.window`` stop it until the user
calls ``resume()``. Reading the pause never changes it: an expired pause is simply not in force.
"""

from __future__ import annotations

import math
from typing import Any

from ..config.core import AutoscalerConfig
from .checker import format_seconds


class ScalingPause:
    """Whether automatic scaling may act, and why not."""

    def __init__(self, config: AutoscalerConfig) -> None:
        self.config = config
        self.stopped = False
        self.stop_reason: str | None = None
        self.last_rollback: dict[str, Any] | None = None
        self._rollback_times: list[float] = []
        self._until: float | None = None
        self._until_restart = False
        self._reason: str | None = None

    def active(self, now: float) -> bool:
        """True while automatic scaling must not act: stopped, paused until restart, or within a
        timed pause."""
        return (self.stopped or self._until_restart
                or (self._until is not None and now < self._until))

    def reason(self, now: float) -> str | None:
        """Why scaling is paused or stopped at ``now``, else None."""
        if self.stopped:
            return self.stop_reason
        return self._reason if self.active(now) else None

    def record_rollback(self, now: float, checker: str, reason: str) -> None:
        """A rollback is being made: pause for ``rollback.pauseDuration``, and stop once
        ``rollback.maxRollbacks`` fell within ``rollback.window``."""
        window = self.config.rollback_window_s
        self._rollback_times = [t for t in self._rollback_times if t > now - window] + [now]
        self.last_rollback = {"time": now, "checker": checker, "reason": reason}
        count = len(self._rollback_times)
        if count >= self.config.rollback_max:
            self.stopped = True
            self.stop_reason = (f"{count} rollbacks within {format_seconds(window)} (rollback.maxRollbacks="
                                f"{self.config.rollback_max}); automatic scaling stopped until "
                                f"resume(). Last: {checker}: {reason}")
        self.pause(now, f"rolled back after {checker}: {reason}")

    def pause(self, now: float, reason: str) -> None:
        """Pause for ``rollback.pauseDuration`` (or until restart) without counting a rollback; a
        longer pause in force is kept."""
        pause = self.config.rollback_pause_s
        if pause is None:
            self._until_restart = True
        else:
            until = now + pause
            current = self._until if self._until is not None and self._until > now else until
            self._until = max(until, current)
        self._reason = reason

    def resume(self, now: float) -> bool:
        """Clear any pause and stop, and forget past rollbacks (the user takes responsibility).
        True when something was in force."""
        was = self.active(now)
        self.stopped = False
        self.stop_reason = None
        self._until = None
        self._until_restart = False
        self._reason = None
        self._rollback_times = []
        return was

    # --- persistence --------------------------------------------------------------------------

    def to_state(self) -> dict[str, Any]:
        """JSON-serializable state; a pause until restart is left out on purpose."""
        return {
            "rollback_times": list(self._rollback_times),
            "last_rollback": dict(self.last_rollback) if self.last_rollback else None,
            "paused_until": self._until,
            "pause_reason": self._reason if self._until is not None else None,
            "stopped": self.stopped,
            "stop_reason": self.stop_reason,
        }

    def load_state(self, state: dict[str, Any]) -> None:
        """Load what :meth:`to_state` produced. Missing or malformed entries keep defaults."""
        times = state.get("rollback_times")
        times = times if isinstance(times, list) else []
        self._rollback_times = sorted(t for t in (_number(v) for v in times) if t is not None)
        last = state.get("last_rollback")
        self.last_rollback = dict(last) if isinstance(last, dict) else None
        self._until = _number(state.get("paused_until"))
        reason = state.get("pause_reason")
        self._reason = (str(reason) if reason else "paused before a restart") \
            if self._until is not None else None
        self._until_restart = False
        self.stopped = state.get("stopped") is True
        stop_reason = state.get("stop_reason")
        self.stop_reason = (str(stop_reason) if stop_reason else
                            "automatic scaling stopped before a restart; call resume()") \
            if self.stopped else None


def _number(value: Any) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    return float(value) if ok and math.isfinite(value) else None
