"""The driver gauges: what each tick sets and removes, and the Prometheus text of /autoscaler/metrics
(no Spark; both endpoints are scraped on a real job in tests/integration/test_ui_and_metrics.py)."""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from harness import query, sample
from sparkscale_listener.decisions import Decision, Evaluation, QueryEvaluation
from sparkscale_listener.forecast import QueryForecast
from sparkscale_listener.metrics import MetricSample
from sparkscale_listener.observe.gauges import GAUGES, GaugePublisher, metrics_table, render_prometheus

ORDERS = 'orders "eu"'  # a query name that needs escaping in a Prometheus label


class _Sink:
    def __init__(self) -> None:
        self.values: dict[str, float] = {}
        self.sets: list[str] = []
        self.removed: list[str] = []
        self.text = ""
        self.calls = 0

    def publish_gauges(self, values: Mapping[str, float], removed: Sequence[str], text: str) -> None:
        self.calls += 1
        for name in removed:
            self.values.pop(name, None)
            self.removed.append(name)
        self.values.update(values)
        self.sets += list(values)
        self.text = text


def _evaluated(t: float, qid: str, name: str | None, utilization: float, rate: float,
               arrival: float) -> Decision:
    qe = QueryEvaluation(qid, name, input_rate=rate, backlog=None, backlog_growth_rate=0.0,
                         target_rate=arrival, catch_up_rate=0.0, slot_seconds_per_row=0.01,
                         required_slots=1.0,
                         utilization=utilization, parallelism_cap=None, capped=False, backlog_mode=False)
    evaluation = Evaluation(t, ready=True, current_executors=2, recommended_executors=2, required_slots=1.0,
                            utilization=utilization, backlog_mode=False, queries={qid: qe})
    return Decision(t, "none", 2, 2, "inside the band", evaluation=evaluation)


def _sample(t: float, backlog: float | None, active: bool = True, rate: float = 50.0) -> MetricSample:
    return sample(t, live=2, queries=[query("id-1", name='orders "eu"', backlog=backlog, processed_rate=rate,
                                            active=active)])


def test_a_tick_sets_the_application_and_query_gauges() -> None:
    sink = _Sink()
    publisher = GaugePublisher(sink)
    publisher.publish(_sample(100.0, backlog=600.0), _evaluated(100.0, "id-1", ORDERS, 0.6, 80.0, 120.0),
                      target=3, requested_total=3, paused=False)
    q = "query.orders__eu_."  # the name made safe for Graphite and JMX
    assert sink.values == {
        "targetExecutors": 3.0, "liveExecutors": 2.0, "pendingExecutors": 1.0, "paused": 0.0,
        "lastTickTime": 100.0, "utilization": 0.6, "backlog": 600.0,
        q + "processedRowsPerSecond": 80.0, q + "backlogRows": 600.0,
        q + "backlogSeconds": 5.0,  # 600 rows at 120 rows/s arriving
        q + "utilization": 0.6}
    text = sink.text
    assert 'sparkscale_query_backlog_seconds{query="orders \\"eu\\""} 5.0\n' in text
    assert "sparkscale_target_executors 3.0\n" in text


def test_before_its_first_evaluation_a_query_has_spark_s_rate_and_no_backlog_seconds() -> None:
    sink = _Sink()
    GaugePublisher(sink).publish(_sample(1.0, backlog=10.0, rate=42.0), None, 1, 1, False)
    q = "query.orders__eu_."  # the name made safe for Graphite and JMX
    assert sink.values[q + "processedRowsPerSecond"] == 42.0 and sink.values[q + "backlogRows"] == 10.0
    assert q + "backlogSeconds" not in sink.values and q + "utilization" not in sink.values
    assert "utilization" not in sink.values  # unknown: never set, so Spark's gauge reads NaN
    assert "sparkscale_query_backlog_seconds" not in sink.text
    assert "sparkscale_utilization_ratio" not in sink.text


def test_a_stopped_query_loses_its_gauges_and_the_application_keeps_its_own() -> None:
    sink = _Sink()
    publisher = GaugePublisher(sink)
    publisher.publish(_sample(1.0, 5.0), _evaluated(1.0, "id-1", 'orders "eu"', 0.5, 10.0, 10.0), 2, 2, False)
    publisher.publish(_sample(2.0, 5.0, active=False), None, 2, 2, False)
    assert sorted(sink.removed) == sorted(f"query.orders__eu_.{suffix}" for suffix in
                                          ("processedRowsPerSecond", "backlogRows", "backlogSeconds",
                                           "utilization"))
    assert not any(name.startswith("query.") for name in sink.values)
    assert "query=" not in sink.text and "sparkscale_target_executors 2.0" in sink.text
    assert sink.values["backlog"] == 0.0


def test_unchanged_values_are_not_sent_again() -> None:
    sink = _Sink()
    publisher = GaugePublisher(sink)
    publisher.publish(_sample(1.0, 5.0), None, 2, 2, False)
    sink.sets.clear()
    publisher.publish(_sample(2.0, 5.0), None, 2, 2, False)
    assert sink.sets == ["lastTickTime"]  # a dozen values not sent again
    assert sink.calls == 2  # one call a tick


def test_prometheus_text_has_one_help_and_type_per_family_and_leaves_unknown_values_out() -> None:
    rows = "query.{query}.backlogRows"
    text = render_prometheus({"targetExecutors": 2.0, "utilization": math.nan},
                             {"a": {rows: 1.0}, "b\n": {rows: 2.0}})
    assert text.splitlines() == [
        "# HELP sparkscale_target_executors The executor total the autoscaler asks the cluster manager for "
        "(executors).",
        "# TYPE sparkscale_target_executors gauge",
        "sparkscale_target_executors 2.0",
        "# HELP sparkscale_query_backlog_rows Rows waiting in the query's sources (absent when no source "
        "reports a backlog) (rows).",
        "# TYPE sparkscale_query_backlog_rows gauge",
        'sparkscale_query_backlog_rows{query="a"} 1.0',
        'sparkscale_query_backlog_rows{query="b\\n"} 2.0',
    ]
    assert render_prometheus({}, {}) == ""


def test_every_gauge_has_a_unit_a_meaning_and_a_prometheus_name_with_its_unit() -> None:
    assert len({g.name for g in GAUGES}) == len({g.prometheus for g in GAUGES}) == len(GAUGES)
    for g in GAUGES:
        assert g.unit and g.meaning and g.prometheus.startswith("sparkscale_")
        assert g.prometheus == g.prometheus.lower()
    table = metrics_table()
    assert all(f"`{g.prometheus}" in table for g in GAUGES)


def test_the_prometheus_text_passes_promtool() -> None:
    promtool = shutil.which("promtool") or shutil.which("promtool", path=str(Path(sys.executable).parent))
    if promtool is None:
        pytest.skip("promtool not found: `make promtool` copies it into the venv from Debian's prometheus "
                    "package (apt-get download prometheus)")
    sink = _Sink()
    publisher = GaugePublisher(sink)
    forecast = QueryForecast("id-1", 1200.0, False, 130.0, 40.0, 180.0, 130.0, 180.0, 130.0, 180.0, 130.0,
                             0.06, 3.0, True, "applied")
    publisher.publish(_sample(100.0, backlog=600.0), _evaluated(100.0, "id-1", ORDERS, 0.6, 80.0, 120.0),
                      target=3, requested_total=3, paused=False, forecasts={"id-1": forecast})
    assert all(f"# HELP {g.prometheus} " in sink.text for g in GAUGES)
    check = subprocess.run([promtool, "check", "metrics"], input=sink.text, capture_output=True, text=True,
                           timeout=60)
    assert check.returncode == 0 and not (check.stdout + check.stderr).strip(), check
