"""Feeds the "Autoscaler" tab: on the driver UI while the job runs, and in the History Server after.

Python pushes, Java renders: at the end of every control tick :meth:`UiPublisher.observe` builds one
JSON document and hands it to the bridge (``SparkscaleBridge.publishStatus``), which keeps only the
latest; the tab parses and renders it when someone opens the page (``jvm-bridge/.../StatusPage.java``
and ``SvgChart.java``), and the open page fetches itself again once per control interval. Nothing
crosses py4j per page view, and nothing is rendered nobody looks at.

For the History Server, :class:`TickSummaries` posts some ticks to the event log as
``io.sparkscale.bridge.AutoscalerTick`` events (through the listenerBus event handler's bus): the
first, every one that changed the executors or the pause state, and otherwise one per
``spark.sparkscale.events.tickInterval``. With the scaling events and the other autoscaler events
already in the log, they are what ``HistoryDocument.java`` rebuilds this same document from.

Document schema (times in epoch seconds, rates in rows/s; ``null`` where unknown)::

    {"version": 1, "app": str, "published": float,
     "config": {"interval_s", "min_executors", "max_executors",
                "utilization_max", "utilization_target"},
     "status": Autoscaler.status(),
     "queries": [{"id", "name", "active", "utilization", "backlog", "input_rate", "processed_rate",
                  "arrival_rate", "required_slots", "backlog_mode", "note", "evaluated_at"}],
     "decisions": [{"time", "first_time", "count", "action", "from_executors", "to_executors",
                    "reason", "applied", "limited_by", "utilization"}],   # oldest first
     "timeline": [{"t", "live", "target", "input_rate", "processed_rate", "arrival_rate",
                   "backlog", "utilization", "queries": {label: utilization}}]}   # oldest first

A tick event (``AutoscalerTick``)::

    {"point": <a timeline point>,
     "queries": [{"name", "backlog", "processed_rate", "arrival_rate", "utilization", "required_slots",
                  and when they say something: "id" (not the name), "active": false,
                  "backlog_mode": true, "note"}],
     "decision": {"action": "none", "count", "first_time", "time", "executors", "reason",
                  "limited_by" (when set)},
     "status": {"mode", "pending_executors", "provisioning_time_s",
                and when set: "paused", "pause_reason", "stopped", "errors"},
     "config": <the config object, in the first tick event only>}

where ``decision`` stands for the decisions to do nothing since the previous tick event (``count``
of them, the latest one's reason; applied and recommended actions are ScalingEvents of their own),
and the point's utilizations are the latest evaluated ones when the tick itself was not evaluated
(stabilizing after a change). Numbers are cut to 4 significant digits, reasons to 160 characters.

``decisions`` keeps every action and collapses each run of consecutive "none" decisions into one
entry (``count`` of them, from ``first_time`` to ``time``, with the latest reason), so the last
100 entries reach back past hours of steady state. In the queries table, ``input_rate`` and
``processed_rate`` are Spark's own (the last progress event); in the timeline, ``processed_rate``
is rows completed per second from the cumulative counters over the trailing metrics window (so a
batch completing does not show as a spike), and ``arrival_rate`` adds the backlog's growth over
the same span: the load the executors must follow.

Cost per tick: one status() call, a few dict operations and the serialization of ONE new timeline
point (earlier points and decisions are kept serialized), then one py4j call with the joined text;
a posted tick event costs one more py4j call and a line of about 0.7 KB in the event log.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ..decisions import Decision, Evaluation
from ..metrics import MetricSample

if TYPE_CHECKING:
    from ..control_loop import Autoscaler

log = logging.getLogger("sparkscale")

MAX_POINTS = 720
MAX_DECISIONS = 100
RATE_TICKS = 5  # rates span at least this many ticks (and at least the metrics window)
MAX_COUNTERS = 512
# A tick event is stored for the life of the event log: reasons and notes are cut to this many
# characters (scaling events keep theirs whole), numbers to 4 significant digits.
MAX_REASON = 160
MAX_NOTE = 120


class StatusSink(Protocol):
    """What the publisher needs from :class:`~sparkscale_listener.spark.bridge.JvmBridge`."""

    def publish_status(self, json_text: str) -> None: ...

    def post_tick_event(self, summary_json: str) -> None: ...


class TickSummaries:
    """Which ticks go to the event log, as ``AutoscalerTick`` events: the first one, every one whose
    executors (live or target) or pause state differ from the last one posted, and otherwise at
    most one per ``interval_s`` (0: every tick). Every tick's "none" decisions are counted into the
    next event posted, so the History Server's decision table can show the runs of them."""

    def __init__(self, post: Callable[[str], None], interval_s: float) -> None:
        self._post = post
        self.interval_s = interval_s
        self._last_time: float | None = None
        self._last_state: tuple[Any, ...] | None = None
        self._config_posted = False
        self._idle: dict[str, Any] | None = None  # the "none" decisions since the last event
        self.posted = 0  # events posted, and their bytes (what the event log grows by, before the
        self.bytes = 0  # few bytes of Spark's own envelope): for the tests and the README's figures

    def offer(self, point: dict[str, Any], decisions: Sequence[Decision], status: dict[str, Any],
              queries: list[dict[str, Any]], config: dict[str, Any]) -> bool:
        """Post this tick (True) or only remember its decisions (False)."""
        for d in decisions:
            if d.action != "none":
                continue
            reason = d.reason if len(d.reason) <= MAX_REASON else d.reason[:MAX_REASON - 3] + "..."
            if self._idle is None:
                self._idle = {"action": "none", "count": 0, "first_time": d.time}
            self._idle.update(count=self._idle["count"] + 1, time=d.time, executors=d.to_executors,
                              reason=reason)
            if d.limited_by:
                self._idle["limited_by"] = d.limited_by
            else:
                self._idle.pop("limited_by", None)
        now = point["t"]
        state = (point["live"], point["target"], bool(status.get("paused")), bool(status.get("stopped")))
        due = (self._last_time is None or state != self._last_state
               or now - self._last_time >= self.interval_s)
        if not due:
            return False
        event: dict[str, Any] = {
            "point": {k: v if k == "t" else _rounded(v) for k, v in point.items()},
            "decision": self._idle or {"action": "none", "count": 0},
            "status": _tick_status(status), "queries": [_tick_query(q) for q in queries]}
        if not self._config_posted:
            event["config"] = config
        text = json.dumps(event, default=str, separators=(",", ":"))  # compact: it is stored
        self._post(text)
        self._config_posted = True
        self._last_time, self._last_state, self._idle = now, state, None
        self.posted += 1
        self.bytes += len(text.encode())
        return True


@dataclass(frozen=True)
class _Counters:
    time: float
    rows: dict[str, int]
    backlog: dict[str, float]


class UiPublisher:
    """Observer of the control loop that publishes the Autoscaler tab's document (``live_tab``) and
    posts the tick events for the History Server's tab (with the listenerBus event handler).

    Call :meth:`observe` at the end of every control tick (from the control-loop thread). It never
    raises: a failure is logged (once per distinct message) and the next tick tries again.
    """

    def __init__(self, sink: StatusSink, max_points: int = MAX_POINTS,
                 max_decisions: int = MAX_DECISIONS, live_tab: bool = True) -> None:
        self._sink = sink
        self.live_tab = live_tab  # False (no driver UI): only the tick events are posted
        self.ticks: TickSummaries | None = None  # made on the first tick, from the configuration
        self._points: deque[str] = deque(maxlen=max_points)  # serialized timeline points
        self._decisions: deque[dict[str, Any]] = deque(maxlen=max_decisions)
        self._decision_json: deque[str] = deque(maxlen=max_decisions)
        self._counters: deque[_Counters] = deque(maxlen=MAX_COUNTERS)
        self._query_evaluations: dict[str, dict[str, Any]] = {}
        self._utilization: float | None = None  # the application's, at the latest ready evaluation
        self._seeded = False
        self._last_errors: dict[str, str] = {}  # what failed -> its last message (logged once)
        self.published = 0  # documents handed to the sink (for tests and diagnostics)

    def __call__(self, autoscaler: Autoscaler, sample: MetricSample | None,
                 decisions: Sequence[Decision]) -> None:
        self.observe(autoscaler, sample, decisions)

    def observe(self, autoscaler: Autoscaler, sample: MetricSample | None,
                decisions: Sequence[Decision] = ()) -> None:
        """Record this tick (its sample and every decision it made, a rollback included), publish
        the document and offer the tick to the event log. ``sample`` may be None and ``decisions``
        empty (a tick that failed or had no baseline yet): the status is published anyway."""
        what = "publish the UI status"
        try:
            document = self._document(autoscaler, sample, decisions)
            if self.live_tab:
                self._sink.publish_status(document)
                self.published += 1
            self._last_errors.pop(what, None)
        except Exception as exc:  # the UI is a convenience: never let it break the control loop
            self._warn(what, exc)

    def _warn(self, what: str, exc: Exception) -> None:
        """Log a failure once per distinct message (it is retried every tick)."""
        message = f"{type(exc).__name__}: {exc}"
        if self._last_errors.get(what) != message:
            log.warning("sparkscale: could not %s (will retry every tick): %s", what, message,
                        exc_info=True)
            self._last_errors[what] = message

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
        settings = {
            "interval_s": config.interval_s,
            "min_executors": config.min_executors,
            "max_executors": config.max_executors,
            "utilization_max": config.utilization_max,
            "utilization_target": config.utilization_target,
        }
        queries = self._queries(sample)
        if sample is not None:
            window_s = max(config.metrics_window_s, RATE_TICKS * config.interval_s)
            evaluation = decisions[-1].evaluation if decisions else None
            point = self._add_point(sample, status, evaluation, window_s)
            if self.ticks is None and "listenerbus" in (h.lower() for h in config.event_handlers):
                self.ticks = TickSummaries(self._sink.post_tick_event, config.event_tick_interval_s)
            if self.ticks is not None:
                try:
                    self.ticks.offer(self._tick_point(point, sample), decisions, status, queries, settings)
                    self._last_errors.pop("post a tick event", None)
                except Exception as exc:  # the live tab must not suffer for the event log
                    self._warn("post a tick event", exc)
        if not self.live_tab:
            return ""  # no tab to show it
        head = {
            "version": 1,
            "app": autoscaler.app_name,
            "published": time.time(),
            "config": settings,
            "status": status,
            "queries": queries,
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
                   window_s: float) -> dict[str, Any]:
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
            self._utilization = _finite(evaluation.utilization)
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
        return point

    def _tick_point(self, point: dict[str, Any], sample: MetricSample) -> dict[str, Any]:
        """The point for a tick event: at a tick without a ready evaluation (stabilizing after a
        change), the latest evaluated utilization. The live chart draws every tick, so a gap
        there is a few ticks; tick events are sparse, and one without utilization would be a
        hole as long as the tick-summary interval."""
        if point["utilization"] is not None:
            return point
        latest = {_label(qid, q.name): self._query_evaluations[qid]["utilization"]
                  for qid, q in sample.queries.items() if q.active and qid in self._query_evaluations}
        return {**point, "utilization": self._utilization, "queries": latest}

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


def _tick_status(status: dict[str, Any]) -> dict[str, Any]:
    """The part of Autoscaler.status() a tick event carries; false, zero and null members left out."""
    out: dict[str, Any] = {"mode": status.get("mode"), "pending_executors": status.get("pending_executors")}
    provisioning = _finite(status.get("provisioning_time_s"))
    if provisioning is not None:
        out["provisioning_time_s"] = _rounded(provisioning)
    if status.get("paused"):
        out.update(paused=True, pause_reason=status.get("pause_reason"))
    if status.get("stopped"):
        out["stopped"] = True
    if status.get("errors"):
        out["errors"] = status["errors"]
    return out


_TICK_QUERY_KEYS = ("name", "backlog", "processed_rate", "arrival_rate", "utilization", "required_slots")


def _tick_query(q: dict[str, Any]) -> dict[str, Any]:
    """A row of the queries table for a tick event: the id only when it is not the name, flags only
    when set, the note cut short."""
    out = {k: _rounded(q.get(k)) for k in _TICK_QUERY_KEYS}
    if q.get("id") != q.get("name"):
        out["id"] = q.get("id")
    if not q.get("active", True):
        out["active"] = False
    if q.get("backlog_mode"):
        out["backlog_mode"] = True
    note = q.get("note") or ""
    if note:
        out["note"] = note if len(note) <= MAX_NOTE else note[:MAX_NOTE - 3] + "..."
    return out


def _rounded(value: Any) -> Any:
    """Floats to 4 significant digits, inside dicts too: a chart has no use for more (times are
    not passed through here)."""
    if isinstance(value, float):
        return float(f"{value:.4g}") if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    return value


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
