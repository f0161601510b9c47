"""What ``autoscaler(spark).status()`` and ``.decisions()`` return: dicts (JSON-ready, compared and
converted as dicts always were) with typed attributes for their main keys, that print for a person
at a prompt: local times, rounded figures, one line per decision."""

from __future__ import annotations

import time
from typing import Any

from . import readable


def clock_time(epoch_s: float) -> str:
    """``14:03:27`` in local time (with the date when not today)."""
    stamp = time.localtime(epoch_s)
    today = time.localtime()
    same_day = stamp[:3] == today[:3]
    return time.strftime("%H:%M:%S" if same_day else "%Y-%m-%d %H:%M:%S", stamp)


class DecisionView(dict[str, Any]):
    """One decision. Keys: ``time`` (epoch seconds), ``action`` (``scale_up``, ``scale_down``,
    ``rollback``, ``none``), ``from_executors``, ``to_executors``, ``reason`` (a one-line headline),
    ``details`` (the figures behind it), ``applied``, ``limited_by``; with an evaluation behind it
    ``utilization``, ``recommended_executors``, ``required_slots``, ``backlog_mode`` and ``queries``;
    for a change ``predictions`` (and, once measured, ``outcomes``) per query."""

    @property
    def time(self) -> float:
        return float(self["time"])

    @property
    def action(self) -> str:
        return str(self["action"])

    @property
    def from_executors(self) -> int:
        return int(self["from_executors"])

    @property
    def to_executors(self) -> int:
        return int(self["to_executors"])

    @property
    def reason(self) -> str:
        return str(self["reason"])

    @property
    def details(self) -> str:
        return str(self.get("details") or "")

    @property
    def applied(self) -> bool:
        return bool(self["applied"])

    def __str__(self) -> str:
        state = "applied" if self.applied else ("recommended" if self.action != "none" else "")
        head = f"{clock_time(self.time)}  {self.action} {self.from_executors} -> {self.to_executors}"
        return f"{head}{f' ({state})' if state else ''}: {self.reason}"

    __repr__ = __str__


class DecisionList(list[DecisionView]):
    """Decisions, oldest first; prints one line each."""

    def __str__(self) -> str:
        return "\n".join(str(d) for d in self) if self else "(no decision yet)"

    __repr__ = __str__


class Status(dict[str, Any]):
    """Where the autoscaler stands. Keys: ``mode``, ``target_executors``, ``initial_executors``,
    ``live_executors``, ``pending_executors``, ``paused``, ``pause_reason``, ``stopped``,
    ``last_decision`` (a :class:`DecisionView`), ``last_scaling``, ``provisioning_time_s``,
    ``blocked_queries``, ``healthy_target``, ``capacity_limit``, ``request_failure``,
    ``events_lost``, ``errors``, ``last_error``."""

    @property
    def mode(self) -> str:
        return str(self["mode"])

    @property
    def target_executors(self) -> int:
        return int(self["target_executors"])

    @property
    def live_executors(self) -> int:
        return int(self["live_executors"])

    @property
    def pending_executors(self) -> int:
        return int(self["pending_executors"])

    @property
    def paused(self) -> bool:
        return bool(self["paused"])

    @property
    def last_decision(self) -> DecisionView | None:
        return self.get("last_decision")

    def __str__(self) -> str:
        pending = f", {self.pending_executors} pending" if self.pending_executors else ""
        lines = [f"sparkscale ({self.mode}): {readable.executors(self.live_executors)} live, "
                 f"target {self.target_executors}{pending}"]
        if self.get("stopped"):
            lines.append(f"stopped after repeated rollbacks: {self.get('pause_reason')} (resume() lifts it)")
        elif self.paused:
            lines.append(f"paused: {self.get('pause_reason')}")
        if self.last_decision is not None:
            lines.append(f"last decision: {self.last_decision}")
        if self.get("capacity_limit"):
            lines.append(f"capacity limit: {self['capacity_limit']}")
        if self.get("request_failure"):
            lines.append(f"cluster manager: {self['request_failure']}")
        blocked = self.get("blocked_queries") or {}
        for query, why in blocked.items():
            lines.append(f"scale-ups blocked for {query}: {why}")
        if self.get("provisioning_time_s") is not None:
            register = readable.seconds(float(self["provisioning_time_s"]))
            lines.append(f"new executors take {register} to register")
        if self.get("events_lost"):
            lines.append(f"listener events lost: {self['events_lost']}")
        if self.get("errors"):
            lines.append(f"errors: {self['errors']}, the last: {self.get('last_error')}")
        return "\n".join(lines)

    __repr__ = __str__
