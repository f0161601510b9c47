"""Feeds the "Autoscaler" tab (on the driver UI while the job runs, in the History Server after) with
the one thing only Python knows: a summary of each control tick.

The tab's document is built in the JVM (``jvm-bridge/.../TabDocument.java``) from the autoscaler's
listener events, the same way live and in the History Server, as Spark's own tabs are: these tick
summaries (``io.sparkscale.bridge.AutoscalerTick``), the ScalingEvents and the AutoscalerEvents (the
``listenerBus`` event handler posts those). :class:`UiPublisher` posts one summary per tick while
the driver has a UI, so the live chart has every tick; :class:`TickSummaries` decides which of them
the event log keeps: the first, every one that changed the executors (live or target) or the pause
state, and otherwise one per ``spark.sparkscale.events.tickInterval``. The others are posted "live
only" (the JVM event's ``logEvent`` is false), so the event log grows by about 1 MB a day whatever
the control interval.

A summary's fields are declared once, as ``$defs/tick`` in
``jvm-bridge/src/main/resources/io/sparkscale/bridge/tab/autoscaler-tab.schema.json``
(tests/unit/observe/test_ui.py checks every summary posted against it). In short: ``point`` (the
chart's point: time, executors, rates, backlog, utilization, and the forecast rows/s for now of the
queries that have one, ``forecast_applied`` when one is applied), ``queries`` (the queries table),
``status`` (mode, pending executors, pause, errors; members that are false or empty left out),
``decision`` (the decisions to do nothing since the previous logged summary: how many, their first
and latest time, the latest reason; actions are ScalingEvents of their own) and ``config`` (the
settings the tab shows, in the first summary).

In ``queries``, ``input_rate`` and ``processed_rate`` are Spark's own (the last progress event); in
``point``, ``processed_rate`` is rows completed per second from the cumulative counters over the
trailing metrics window (so a batch completing does not show as a spike), and ``arrival_rate`` adds
the backlog's growth over the same span: the load the executors must follow. Utilizations are the
latest evaluated ones: after a change the evaluator waits for a full window, and a summary without
them would leave a hole in the chart (``evaluated_at`` says when they were evaluated then).
Numbers are cut to 4 significant digits, reasons and notes to a few lines: a logged summary is kept
for the life of the event log (about 0.76 KB each).

Cost per tick: one status() call, a few dict operations, one small JSON text and one py4j call.
"""

from __future__ import annotations

import json
import logging
import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .. import readable
from ..config.core import AutoscalerConfig
from ..decisions import Decision, Evaluation
from ..metrics import MetricSample
from ..views import Status

log = logging.getLogger("sparkscale")

RATE_TICKS = 5  # rates span at least this many ticks (and at least the metrics window)
MAX_COUNTERS = 512
# Reasons and notes are cut to this many characters (scaling events keep theirs whole).
MAX_REASON = 160
MAX_NOTE = 120


class Observed(Protocol):
    """What the publisher reads of the :class:`~sparkscale_listener.control_loop.Autoscaler` that
    calls it each tick (the loop sits above this module and hands itself in)."""

    config: AutoscalerConfig

    def status(self, brief: bool = False) -> Status: ...


class TickSink(Protocol):
    """What the publisher needs from :class:`~sparkscale_listener.spark.bridge.JvmBridge`."""

    def post_tick_event(self, summary_json: str, logged: bool) -> None: ...


class TickSummaries:
    """Which tick summaries the event log keeps: the first one, every one whose executors (live or
    target) or pause state differ from the last one kept, and otherwise at most one per
    ``interval_s`` (0: every tick). Also the run of "none" decisions since the last one kept, which
    every summary carries, so the History Server's decision table loses none of them."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._last_time: float | None = None
        self._last_state: tuple[Any, ...] | None = None
        self._run: dict[str, Any] = {"action": "none", "count": 0}
        self.logged = 0  # summaries kept, and their bytes (what the event log grows by, before the
        self.bytes = 0  # few bytes of Spark's envelope): for the tests and the README's figures

    def count(self, decisions: Sequence[Decision]) -> None:
        """Add a tick's decisions to do nothing to the run."""
        for d in decisions:
            if d.action != "none":
                continue
            run = self._run
            if not run["count"]:
                run["first_time"] = d.time
            run.update(count=run["count"] + 1, time=d.time, executors=d.to_executors,
                       reason=_cut(d.reason, MAX_REASON))
            if d.limited_by:
                run["limited_by"] = d.limited_by
            else:
                run.pop("limited_by", None)

    def run(self) -> dict[str, Any]:
        return dict(self._run)

    def due(self, point: dict[str, Any], status: dict[str, Any]) -> bool:
        """Whether the event log keeps this tick's summary."""
        return (self._last_time is None or _state(point, status) != self._last_state
                or point["t"] - self._last_time >= self.interval_s)

    def kept(self, point: dict[str, Any], status: dict[str, Any], size: int) -> None:
        """The summary of this tick went to the event log: the next run starts."""
        self._last_time = point["t"]
        self._last_state = _state(point, status)
        self._run = {"action": "none", "count": 0}
        self.logged += 1
        self.bytes += size


@dataclass(frozen=True)
class _Counters:
    time: float
    rows: dict[str, int]
    backlog: dict[str, float]


class UiPublisher:
    """Observer of the control loop that posts the tick summaries: every tick while the driver has
    a UI (``live_tab``), the ones :class:`TickSummaries` picks for the event log with the
    ``listenerBus`` event handler.

    Call :meth:`observe` at the end of every control tick (from the control-loop thread). It never
    raises: a failure is logged (once per distinct message) and the next tick tries again.
    """

    def __init__(self, sink: TickSink, live_tab: bool = True) -> None:
        self._sink = sink
        self.live_tab = live_tab  # False (no driver UI): only the summaries the event log keeps are posted
        self.summaries: TickSummaries | None = None  # made on the first tick, from the configuration
        self._to_event_log = False
        self._config_posted = False
        self._counters: deque[_Counters] = deque(maxlen=MAX_COUNTERS)
        self._query_evaluations: dict[str, dict[str, Any]] = {}
        self._utilization: float | None = None  # the application's, at the latest ready evaluation
        self._last_error: str | None = None  # the last failure's message (logged once)
        self.posted = 0  # summaries posted, logged or not (for tests and diagnostics)

    def __call__(self, autoscaler: Observed, sample: MetricSample | None,
                 decisions: Sequence[Decision]) -> None:
        self.observe(autoscaler, sample, decisions)

    def observe(self, autoscaler: Observed, sample: MetricSample | None,
                decisions: Sequence[Decision] = ()) -> None:
        """Record this tick (its sample and every decision it made, a rollback included) and post
        its summary. ``sample`` may be None (a tick that failed): its decisions still count."""
        try:
            self._observe(autoscaler, sample, decisions)
            self._last_error = None
        except Exception as exc:  # the UI is a convenience: never let it break the control loop
            message = f"{type(exc).__name__}: {exc}"
            if message != self._last_error:
                log.warning("sparkscale: could not post the tick summary (will retry every tick): %s",
                            message, exc_info=True)
                self._last_error = message

    def _observe(self, autoscaler: Observed, sample: MetricSample | None,
                 decisions: Sequence[Decision]) -> None:
        config = autoscaler.config
        if self.summaries is None:
            self.summaries = TickSummaries(config.event_tick_interval_s)
            self._to_event_log = "listenerbus" in (h.lower() for h in config.event_handlers)
        self.summaries.count(decisions)
        if sample is None:
            return
        status = autoscaler.status(brief=True)
        evaluation = decisions[-1].evaluation if decisions else None
        window_s = max(config.metrics_window_s, RATE_TICKS * config.interval_s)
        point = self._point(sample, status, evaluation, window_s)
        logged = self._to_event_log and self.summaries.due(point, status)
        if not (logged or self.live_tab):
            return
        summary: dict[str, Any] = {
            "point": {k: v if k == "t" else _rounded(v) for k, v in point.items()},
            "decision": self.summaries.run(), "status": _tick_status(status),
            "queries": self._queries(sample, evaluation, status.get("forecasts") or {})}
        if not self._config_posted:
            summary["config"] = {
                "interval_s": config.interval_s,
                "min_executors": config.min_executors,
                "max_executors": config.max_executors,
                "utilization_max": config.utilization_max,
                "utilization_target": config.utilization_target,
            }
        # Compact: a logged summary is stored. default=str: a stray non-JSON value must not cost the tick.
        text = json.dumps(summary, default=str, separators=(",", ":"))
        self._sink.post_tick_event(text, logged)
        self._config_posted = True
        self.posted += 1
        if logged:
            self.summaries.kept(point, status, len(text.encode()))

    def _point(self, sample: MetricSample, status: dict[str, Any], evaluation: Evaluation | None,
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
        if evaluation is not None and evaluation.ready:
            self._utilization = _finite(evaluation.utilization)
            for qid, qe in evaluation.queries.items():
                self._query_evaluations[qid] = {
                    "utilization": _finite(qe.utilization), "arrival_rate": _finite(qe.target_rate),
                    "required_slots": _finite(qe.required_slots), "backlog_mode": qe.backlog_mode,
                    "note": qe.note, "evaluated_at": evaluation.time}
        # The forecast beside the load: each query's forecast rows/s for now, of those that have one.
        forecasts = list((status.get("forecasts") or {}).values())
        point: dict[str, Any] = {
            "t": sample.time,
            "live": sample.cluster.live_executors,
            # Before the baseline the target is not the autoscaler's yet.
            "target": status.get("target_executors") if status.get("initial_executors") is not None else None,
            "input_rate": _finite(sum(q.input_rate for q in sample.queries.values())),
            "processed_rate": _finite(processed),
            "arrival_rate": _finite(arrival),
            "backlog": sum(backlog.values()) if backlog else None,
            "utilization": self._utilization,
            "forecast_rate": _finite(sum(f["rate_now"] for f in forecasts)) if forecasts else None,
        }
        if any(f.get("applied") for f in forecasts):  # only then: the chart draws a shadow forecast apart
            point["forecast_applied"] = True
        return point

    def _queries(self, sample: MetricSample, evaluation: Evaluation | None,
                 forecasts: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
        """The queries table: per query its latest evaluation (ticks that wait for a full window after
        a change would otherwise blank it), its forecast in the note beside its load; the id only when
        it is not the name, flags only when set."""
        fresh = set(evaluation.queries) if evaluation is not None and evaluation.ready else set()
        out = []
        for qid, q in sample.queries.items():
            ev = self._query_evaluations.get(qid, {})
            row: dict[str, Any] = {
                "name": q.name, "backlog": _finite(q.backlog), "input_rate": _finite(q.input_rate),
                "processed_rate": _finite(q.processed_rate), "arrival_rate": ev.get("arrival_rate"),
                "utilization": ev.get("utilization"), "required_slots": ev.get("required_slots")}
            row = {k: v if k == "name" else _rounded(v) for k, v in row.items()}
            if qid != q.name:
                row["id"] = qid
            if not q.active:
                row["active"] = False
            if ev.get("backlog_mode"):
                row["backlog_mode"] = True
            note = ev.get("note") or q.exception or ""
            forecast = forecasts.get(qid)
            if forecast:
                said = (f"forecast {readable.rate(forecast['rate_now'])} now, "
                        f"{readable.rate(forecast['peak_rate'])} within "
                        f"{readable.seconds(forecast['horizon_s'])} ({forecast['state']})")
                note = "; ".join(x for x in (said, note) if x)
            if note:
                row["note"] = _cut(note, MAX_NOTE)
            if ev and qid not in fresh:
                row["evaluated_at"] = ev["evaluated_at"]
            out.append(row)
        return out


def _tick_status(status: dict[str, Any]) -> dict[str, Any]:
    """The part of Autoscaler.status() a summary carries; false, zero and empty members left out."""
    out: dict[str, Any] = {"mode": status.get("mode"), "pending_executors": status.get("pending_executors")}
    provisioning = _finite(status.get("provisioning_time_s"))
    if provisioning is not None:
        out["provisioning_time_s"] = _rounded(provisioning)
    if status.get("waiting_for"):
        out["waiting_for"] = _cut(str(status["waiting_for"]), MAX_REASON)
    if status.get("paused"):
        out.update(paused=True, pause_reason=status.get("pause_reason"))
    if status.get("stopped"):
        out["stopped"] = True
    if status.get("errors"):
        out["errors"] = status["errors"]
        if status.get("last_error"):
            out["last_error"] = _cut(str(status["last_error"]), MAX_REASON)
    if status.get("blocked_queries"):
        out["blocked_queries"] = {str(k): _cut(str(v), MAX_REASON)
                                  for k, v in status["blocked_queries"].items()}
    return out


def _state(point: dict[str, Any], status: dict[str, Any]) -> tuple[Any, ...]:
    """What a kept summary is due at every change of: the executors and the pause state."""
    return point["live"], point["target"], bool(status.get("paused")), bool(status.get("stopped"))


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _rounded(value: Any) -> Any:
    """Floats to 4 significant digits: a chart has no use for more (times are not passed through here)."""
    if isinstance(value, float):
        return float(f"{value:.4g}") if math.isfinite(value) else None
    return value


def _finite(value: float | None) -> float | None:
    """JSON has no NaN/Infinity: unknown and unbounded values travel as null."""
    if value is None:
        return None
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None
