"""What ``autoscaler(spark).status()`` and ``.decisions()`` return: dicts (JSON-ready, compared and
converted as dicts always were) with typed attributes for their main keys, that print for a person
at a prompt: local times, rounded figures, one line per decision."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from . import readable

T = TypeVar("T")


class _Key(Generic[T]):
    """A typed attribute reading the dict key of its own name: ``view.action == view["action"]``."""

    def __init__(self, convert: Callable[[Any], T]) -> None:
        self.convert = convert

    def __set_name__(self, owner: type, name: str) -> None:
        self.key = name

    def __get__(self, view: dict[str, Any], owner: type | None = None) -> T:
        return self.convert(view[self.key])


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

    time = _Key(float)
    action = _Key(str)
    from_executors = _Key(int)
    to_executors = _Key(int)
    reason = _Key(str)
    details = _Key(lambda value: str(value or ""))
    applied = _Key(bool)

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
    ``waiting_for`` (why requested executors are not all there yet, or None), ``blocked_queries``,
    ``healthy_target``, ``capacity_limit``, ``request_failure``, ``events_lost``, ``errors``,
    ``last_error``."""

    mode = _Key(str)
    target_executors = _Key(int)
    live_executors = _Key(int)
    pending_executors = _Key(int)
    paused = _Key(bool)
    last_decision: _Key[DecisionView | None] = _Key(lambda value: value)

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
