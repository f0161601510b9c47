"""Feeds the "Autoscaler" tab of the Spark driver UI.

Python pushes, Java renders: at the end of every control tick :meth:`UiPublisher.observe` builds one
JSON document and hands it to the bridge (``SparkscaleBridge.publishStatus``), which keeps only the
latest; the tab parses and renders it when someone opens the page (``jvm-bridge/.../StatusPage.java``
and ``SvgChart.java``). Nothing crosses py4j per page view, and nothing is rendered nobody looks at.

Document schema (times in epoch seconds, rates in rows/s; ``null`` where unknown)::

    {"version": 1, "app": str, "published": float,
     "config": {"interval_s", "min_executors", "max_executors",
                "utilization_min", "utilization_max", "utilization_target"},
     "status": Autoscaler.status(),
     "queries": [{"id", "name", "active", "utilization", "backlog", "input_rate", "processed_rate",
                  "arrival_rate", "required_slots", "backlog_mode", "note", "evaluated_at"}],
     "decisions": [{"time", "first_time", "count", "action", "from_executors", "to_executors",
                    "reason", "applied", "limited_by", "utilization"}],   # oldest first
     "timeline": [{"t", "live", "target", "input_rate", "processed_rate", "arrival_rate",
                   "backlog", "utilization", "queries": {label: utilization}}]}   # oldest first

``decisions`` keeps every action and collapses each run of consecutive "none" decisions into one
entry (``count`` of them, from ``first_time`` to ``time``, with the latest reason), so the last
100 entries reach back past hours of steady state. In the queries table, ``input_rate`` and
``processed_rate`` are Spark's own (the last progress event); in the timeline, ``processed_rate``
is rows completed per second from the cumulative counters over the trailing metrics window (so a
batch completing does not show as a spike), and ``arrival_rate`` adds the backlog's growth over
the same span: the load the executors must follow.

Cost per tick: one status() call, a few dict operations and the serialization of ONE new timeline
point (earlier points and decisions are kept serialized), then one py4j call with the joined text.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .decisions import Decision, Evaluation
from .metrics import MetricSample

if TYPE_CHECKING:
    from .control_loop import Autoscaler

log = logging.getLogger("sparkscale")

MAX_POINTS = 720
MAX_DECISIONS = 100
RATE_TICKS = 5  # rates span at least this many ticks (and at least the metrics window)
MAX_COUNTERS = 512


class StatusSink(Protocol):
    """What the publisher needs from :class:`~sparkscale_listener.bridge.JvmBridge`."""

    def publish_status(self, json_text: str) -> None: ...


@dataclass(frozen=True)
class _Counters:
    time: float
    rows: dict[str, int]
    backlog: dict[str, float]


class UiPublisher:
    """Observer of the control loop that publishes the Autoscaler tab's document.

    Call :meth:`observe` at the end of every control tick (from the control-loop thread). It never
    raises: a failure is logged (once per distinct message) and the next tick tries again.
    """

    def __init__(self, sink: StatusSink, max_points: int = MAX_POINTS,
                 max_decisions: int = MAX_DECISIONS) -> None:
        self._sink = sink
        self._points: deque[str] = deque(maxlen=max_points)  # serialized timeline points
        self._decisions: deque[dict[str, Any]] = deque(maxlen=max_decisions)
        self._decision_json: deque[str] = deque(maxlen=max_decisions)
        self._counters: deque[_Counters] = deque(maxlen=MAX_COUNTERS)
        self._query_evaluations: dict[str, dict[str, Any]] = {}
        self._seeded = False
        self._last_error: str | None = None
        self.published = 0  # documents handed to the sink (for tests and diagnostics)

    def __call__(self, autoscaler: Autoscaler, sample: MetricSample | None,
                 decisions: Sequence[Decision]) -> None:
        self.observe(autoscaler, sample, decisions)

    def observe(self, autoscaler: Autoscaler, sample: MetricSample | None,
                decisions: Sequence[Decision] = ()) -> None:
        """Record this tick (its sample and every decision it made, a rollback included) and
        publish the document. ``sample`` may be None and ``decisions`` empty (a tick that failed
        or had no baseline yet): the status is published anyway."""
        try:
            self._sink.publish_status(self._document(autoscaler, sample, decisions))
            self.published += 1
            self._last_error = None
        except Exception as exc:  # the UI is a convenience: never let it break the control loop
            message = f"{type(exc).__name__}: {exc}"
            if message != self._last_error:
                log.warning("sparkscale: could not publish the UI status (will retry every tick): %s",
                            message, exc_info=True)
                self._last_error = message

    # ------------------------------------------------------------------ the document
    def _document(self, autoscaler: Autoscaler, sample: MetricSample | None,
                  decisions: Sequence[Decision]) -> str:
        status = autoscaler.status()
        if not self._seeded:
            # Decisions made before this publisher was attached: taken once, later ones one by one.
            self._seeded = True
            history = autoscaler.decisions()
            if decisions:
                history = history[:max(0, len(history) - len(decisions))]
            for d in history:
                self._add_decision(_compact(d))
        for decision in decisions:
            self._add_decision(_compact_decision(decision))
        config = autoscaler.config
        if sample is not None:
            window_s = max(config.metrics_window_s, RATE_TICKS * config.interval_s)
            evaluation = decisions[-1].evaluation if decisions else None
            self._add_point(sample, status, evaluation, window_s)
        head = {
            "version": 1,
            "app": autoscaler.app_name,
            "published": time.time(),
            "config": {
                "interval_s": config.interval_s,
                "min_executors": config.min_executors,
                "max_executors": config.max_executors,
                "utilization_min": config.utilization_min,
                "utilization_max": config.utilization_max,
                "utilization_target": config.utilization_target,
            },
            "status": status,
            "queries": self._queries(sample),
        }
        # default=str: a stray non-JSON value (a numpy float, a datetime) must not cost the page.
        text = json.dumps(head, default=str)
        return (text[:-1] + ', "decisions": [' + ",".join(self._decision_json) + '], "timeline": ['
                + ",".join(self._points) + "]}")

    def _add_decision(self, entry: dict[str, Any]) -> None:
        last = self._decisions[-1] if self._decisions else None
        if entry["action"] == "none" and last is not None and last["action"] == "none":
            # Collapse runs of "nothing to do": keep the latest reason, count them.
            last.update(time=entry["time"], reason=entry["reason"], utilization=entry["utilization"],
                        limited_by=entry["limited_by"], count=last["count"] + 1)
            self._decision_json[-1] = json.dumps(last, default=str)
            return
        self._decisions.append(entry)
        self._decision_json.append(json.dumps(entry, default=str))

    def _add_point(self, sample: MetricSample, status: dict[str, Any], evaluation: Evaluation | None,
                   window_s: float) -> None:
        rows = {qid: q.input_rows for qid, q in sample.queries.items()}
        backlog = {qid: float(q.backlog) for qid, q in sample.queries.items() if q.backlog is not None}
        self._counters.append(_Counters(sample.time, rows, backlog))
        while len(self._counters) > 2 and self._counters[1].time <= sample.time - window_s:
            self._counters.popleft()
        processed = arrival = None
        first = self._counters[0]
        dt = sample.time - first.time
        if dt > 0:
            # Per query and only over queries present at both ends: a query that started or
            # stopped in between must not look like a burst or a drop.
            processed = sum(max(0, rows[q] - first.rows[q]) for q in rows if q in first.rows) / dt
            growth = sum(backlog[q] - first.backlog[q] for q in backlog if q in first.backlog) / dt
            arrival = max(0.0, processed + growth)
        ready = evaluation is not None and evaluation.ready
        utilization: dict[str, float | None] = {}
        if evaluation is not None and ready:
            for qid, qe in evaluation.queries.items():
                utilization[_label(qid, qe.name)] = _finite(qe.utilization)
                self._query_evaluations[qid] = {
                    "utilization": _finite(qe.utilization), "arrival_rate": _finite(qe.target_rate),
                    "required_slots": _finite(qe.required_slots), "backlog_mode": qe.backlog_mode,
                    "note": qe.note, "evaluated_at": evaluation.time}
        point = {
            "t": sample.time,
            "live": sample.cluster.live_executors,
            # Before the baseline the target is not the autoscaler's yet.
            "target": status.get("target_executors") if status.get("initial_executors") is not None else None,
            "input_rate": _finite(sum(q.input_rate for q in sample.queries.values())),
            "processed_rate": _finite(processed),
            "arrival_rate": _finite(arrival),
            "backlog": sum(backlog.values()) if backlog else None,
            "utilization": _finite(evaluation.utilization) if evaluation is not None and ready else None,
            "queries": utilization,
        }
        self._points.append(json.dumps(point, default=str))

    def _queries(self, sample: MetricSample | None) -> list[dict[str, Any]]:
        if sample is None:
            return []
        out = []
        for qid, q in sample.queries.items():
            # The latest ready evaluation of the query: not-ready ticks (stabilization after a
            # change) would otherwise blank the table.
            ev = self._query_evaluations.get(qid, {})
            out.append({"id": qid, "name": q.name, "active": q.active, "backlog": _finite(q.backlog),
                        "input_rate": _finite(q.input_rate), "processed_rate": _finite(q.processed_rate),
                        "utilization": ev.get("utilization"), "arrival_rate": ev.get("arrival_rate"),
                        "required_slots": ev.get("required_slots"),
                        "backlog_mode": ev.get("backlog_mode", False), "evaluated_at": ev.get("evaluated_at"),
                        "note": ev.get("note", "") or (q.exception or "")})
        return out


def _compact_decision(d: Decision) -> dict[str, Any]:
    ev = d.evaluation
    return {"time": d.time, "first_time": d.time, "count": 1, "action": d.action,
            "from_executors": d.from_executors, "to_executors": d.to_executors, "reason": d.reason,
            "applied": d.applied, "limited_by": d.limited_by,
            "utilization": _finite(ev.utilization) if ev is not None else None}


def _compact(d: dict[str, Any]) -> dict[str, Any]:
    """A decision dict from Autoscaler.decisions(), without the bulky per-query evaluation."""
    return {"time": d.get("time"), "first_time": d.get("time"), "count": 1, "action": d.get("action"),
            "from_executors": d.get("from_executors"), "to_executors": d.get("to_executors"),
            "reason": d.get("reason", ""), "applied": bool(d.get("applied")),
            "limited_by": d.get("limited_by"), "utilization": _finite(d.get("utilization"))}


def _label(query_id: str, name: str | None) -> str:
    return name or query_id[:8]


def _finite(value: float | None) -> float | None:
    """JSON has no NaN/Infinity: unknown and unbounded values travel as null."""
    if value is None:
        return None
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None
