"""Driver gauges: the autoscaler's state as metrics, set once per control tick, in two places.

- **Spark's metrics system**, through the plugin's metric registry: every configured sink (JMX,
  Graphite, CSV, Spark's PrometheusServlet...) shows them under the driver's
  ``plugin.io.sparkscale.bridge.SparkscalePlugin`` source, named as in :data:`GAUGES`
  (``query.<query>.backlogRows`` for per-query ones, the query's name with anything but letters,
  digits, ``_`` and ``-`` replaced by ``_``: a dot would nest the name in Graphite, and quotes,
  colons or commas break JMX object names).
- **``/autoscaler/metrics`` on the driver UI**, in the Prometheus text format: snake_case names with
  their unit, a ``query`` label instead of the query in the name, and help text on every family.
  Spark's PrometheusServlet cannot give that (no HELP lines, the plugin's class name inside every
  series name), so its output fails ``promtool check metrics`` whatever the gauges are called; this
  one passes.

:data:`GAUGES` is the one list of them: the metrics table of docs/observability.md is generated
from it and a test keeps the two in sync. A query's gauges are removed, from both places, when the
query stops.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from ..decisions import Decision
from ..forecast import QueryForecast
from ..metrics import MetricSample

QUERY = "{query}"  # stands for the query's name (its id when it has none) in a per-query gauge's name
_UNSAFE_IN_METRIC_NAME = re.compile(r"[^A-Za-z0-9_-]")


@dataclass(frozen=True)
class Gauge:
    name: str  # in Spark's metrics system, under the plugin's source
    prometheus: str  # on /autoscaler/metrics (per-query ones with a `query` label)
    unit: str
    meaning: str

    @property
    def per_query(self) -> bool:
        return QUERY in self.name

    def metric_name(self, query: str | None = None) -> str:
        """The name in Spark's metrics system (``query`` fills a per-query gauge's name)."""
        if not self.per_query:
            return self.name
        return self.name.replace(QUERY, _UNSAFE_IN_METRIC_NAME.sub("_", query or ""))


GAUGES: tuple[Gauge, ...] = (
    Gauge("targetExecutors", "sparkscale_target_executors", "executors",
          "the executor total the autoscaler asks the cluster manager for"),
    Gauge("liveExecutors", "sparkscale_live_executors", "executors", "executors registered now"),
    Gauge("pendingExecutors", "sparkscale_pending_executors", "executors",
          "executors requested and not registered yet"),
    Gauge("utilization", "sparkscale_utilization_ratio", "ratio",
          "at the last evaluation, the highest query utilization, or all queries' task time (arrivals "
          "plus backlog catch-up) per task slot when that is higher: 1 = no headroom left, above 1 = "
          "more than the executors can do"),
    Gauge("paused", "sparkscale_paused", "0 or 1",
          "1 while automatic scaling is paused or stopped after rollbacks"),
    Gauge("backlog", "sparkscale_backlog_rows", "rows",
          "rows waiting in the sources of all queries that report a backlog"),
    Gauge("lastTickTime", "sparkscale_last_tick_timestamp_seconds", "seconds (Unix time)",
          "when the last control tick ran; alert on its age to catch a stopped control loop"),
    Gauge(f"query.{QUERY}.processedRowsPerSecond", "sparkscale_query_processed_rows_per_second", "rows/s",
          "rows the query processed per second over the metrics window (before its first evaluation: "
          "Spark's processedRowsPerSecond of its last batch)"),
    Gauge(f"query.{QUERY}.backlogRows", "sparkscale_query_backlog_rows", "rows",
          "rows waiting in the query's sources (absent when no source reports a backlog)"),
    Gauge(f"query.{QUERY}.backlogSeconds", "sparkscale_query_backlog_seconds", "seconds",
          "the backlog in seconds of input: backlog rows / arrival rate (what backlogThreshold is "
          "compared with)"),
    Gauge(f"query.{QUERY}.utilization", "sparkscale_query_utilization_ratio", "ratio",
          "at its last evaluation, the query's arrivals (plus backlog catch-up) over what the executors "
          "can do for it: a batch period's worth (the trigger interval, or half of backlogThreshold "
          "where longer or without a trigger) over the rows a batch can read and still end within the "
          "period (1 = a batch of the arrivals just ends within it), or at the arrivals themselves "
          "over a quarter of backlogThreshold where that reads higher"),
    Gauge(f"query.{QUERY}.forecastRowsPerSecond", "sparkscale_query_forecast_rows_per_second", "rows/s",
          "the arrivals its forecast (forecast.mode shadow or on) gives for now, beside what it processed "
          "(absent until a period is learnt)"),
    Gauge(f"query.{QUERY}.forecastError", "sparkscale_query_forecast_error_ratio", "ratio",
          "its recent forecasts' misses over the arrivals that came, each forecast a horizon ahead (absent "
          "until checked)"),
    Gauge(f"query.{QUERY}.forecastApplied", "sparkscale_query_forecast_applied", "0 or 1",
          "1 while its forecast is applied (forecast.mode=on, its error within forecast.maxError), "
          "0 in shadow"),
)
_BY_NAME = {g.name: g for g in GAUGES}
(PROCESSED, BACKLOG_ROWS, BACKLOG_SECONDS, UTILIZATION, FORECAST, FORECAST_ERROR,
 FORECAST_APPLIED) = (g.name for g in GAUGES if g.per_query)
# Published only once the query's forecast has learnt its period (minutes to days of history).
FORECAST_GAUGES = frozenset((FORECAST, FORECAST_ERROR, FORECAST_APPLIED))


class GaugeSink(Protocol):
    """What the publisher needs from :class:`~sparkscale_listener.spark.bridge.JvmBridge`."""

    def publish_gauges(self, values: Mapping[str, float], removed: Sequence[str], text: str) -> None: ...


class GaugePublisher:
    """Sets the gauges once per tick, removes those of stopped queries, and publishes the
    Prometheus text of all of them. A value not known yet (no evaluation so far, no backlog
    reported) is not set: Spark's gauge then reads NaN and the Prometheus series is absent."""

    def __init__(self, sink: GaugeSink) -> None:
        self._sink = sink
        self._app: dict[str, float] = {}
        self._queries: dict[str, dict[str, float]] = {}  # query label -> gauge name -> value
        self._arrival: dict[str, float] = {}  # query label -> arrival rate at its last evaluation
        self._sent: dict[str, float] = {}  # what the JVM holds: unchanged values cost no py4j call

    def publish(self, sample: MetricSample, decision: Decision | None, target: int,
                requested_total: int, paused: bool,
                forecasts: Mapping[str, QueryForecast] | None = None) -> None:
        live = sample.cluster.live_executors
        app = {"targetExecutors": float(target), "liveExecutors": float(live),
               "pendingExecutors": float(max(0, requested_total - live)),
               "paused": 1.0 if paused else 0.0, "lastTickTime": float(sample.time)}
        evaluation = decision.evaluation if decision is not None else None
        ready = evaluation is not None and evaluation.ready
        if evaluation is not None and evaluation.utilization is not None:
            app["utilization"] = float(evaluation.utilization)
        total = 0.0
        queries: dict[str, dict[str, float]] = {}
        for q in sample.queries.values():
            if not q.active:
                continue  # a stopped query: its gauges are removed below
            label = q.name or q.query_id
            old = self._queries.get(label, {})
            # Evaluated figures stay until the next evaluation (none while stabilizing after a change).
            values = {k: v for k, v in old.items() if k in (PROCESSED, UTILIZATION)}
            qe = evaluation.queries.get(q.query_id) if evaluation is not None and ready else None
            if qe is not None:
                values[PROCESSED] = qe.input_rate
                self._arrival[label] = qe.target_rate
                if qe.utilization is not None:
                    values[UTILIZATION] = qe.utilization
            elif label not in self._arrival:
                values[PROCESSED] = q.processed_rate  # not evaluated yet: Spark's own figure
            backlog, _ = sample.backlog_of(q)
            if backlog is not None:
                total += backlog
                values[BACKLOG_ROWS] = float(backlog)
                arrival = self._arrival.get(label)
                if backlog == 0:
                    values[BACKLOG_SECONDS] = 0.0
                elif arrival is not None and arrival > 0:
                    values[BACKLOG_SECONDS] = backlog / arrival
            forecast = (forecasts or {}).get(q.query_id)
            if forecast is not None:
                values[FORECAST] = forecast.rate_now
                values[FORECAST_APPLIED] = 1.0 if forecast.applied else 0.0
                if forecast.error is not None:
                    values[FORECAST_ERROR] = forecast.error
            queries[label] = {k: float(v) for k, v in values.items() if _finite(v)}
        app["backlog"] = total
        removed: list[str] = []
        for label, old in self._queries.items():
            for name in old.keys() - queries.get(label, {}).keys():
                metric = _BY_NAME[name].metric_name(label)
                removed.append(metric)
            if label not in queries:
                self._arrival.pop(label, None)
        self._queries = queries
        self._app.update({k: v for k, v in app.items() if _finite(v)})
        current = dict(self._app)
        for label, values in self._queries.items():
            current.update({_BY_NAME[name].metric_name(label): value for name, value in values.items()})
        changed = {metric: value for metric, value in current.items() if self._sent.get(metric) != value}
        # One call a tick, whatever the queries (a py4j round trip per gauge cost 60 ms at 100).
        self._sink.publish_gauges(changed, removed, render_prometheus(self._app, self._queries))
        for metric in removed:
            self._sent.pop(metric, None)
        self._sent.update(changed)


def render_prometheus(app: Mapping[str, float], queries: Mapping[str, Mapping[str, float]]) -> str:
    """The Prometheus text exposition (format 0.0.4) of these values: one HELP and TYPE line per
    family that has a sample, per-query samples labelled ``query``; unknown values are left out."""
    lines: list[str] = []
    for gauge in GAUGES:
        if gauge.per_query:
            samples = [(f'{{query="{_label_value(label)}"}}', values[gauge.name])
                       for label, values in sorted(queries.items()) if _finite(values.get(gauge.name))]
        else:
            samples = [("", app[gauge.name])] if _finite(app.get(gauge.name)) else []
        if not samples:
            continue
        lines.append(f"# HELP {gauge.prometheus} {_help_text(gauge)}")
        lines.append(f"# TYPE {gauge.prometheus} gauge")
        lines.extend(f"{gauge.prometheus}{labels} {float(value)!r}" for labels, value in samples)
    return "\n".join(lines) + "\n" if lines else ""


def metrics_table() -> str:
    """The table of every gauge (docs/observability.md; a test checks it is current)."""
    rows = ["| Spark metrics system (`plugin.io.sparkscale.bridge.SparkscalePlugin.`) | "
            "`/autoscaler/metrics` | unit | meaning |", "|---|---|---|---|"]
    for g in GAUGES:
        name = g.name.replace(QUERY, "<query>")
        prometheus = g.prometheus + ('{query="<query>"}' if g.per_query else "")
        rows.append(f"| `{name}` | `{prometheus}` | {g.unit} | {g.meaning} |")
    return "\n".join(rows)


def _help_text(gauge: Gauge) -> str:
    text = f"{gauge.meaning[0].upper()}{gauge.meaning[1:]} ({gauge.unit})."
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)
