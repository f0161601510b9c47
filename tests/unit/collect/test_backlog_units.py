"""Backlog units and nonsense lags, without Spark: recorded progress JSON through the recorder,
the collector and the evaluator.

The Kafka progress below was recorded from pyspark 4.3.0 with Spark's spark-sql-kafka-0-10
connector reading the tests' KRaft broker (tests/kafka_broker.py); the nonsense variants change
only the offsets that make a lag impossible. Delta progress follows its documented shape.
"""

from __future__ import annotations

import copy
import json
import logging
from datetime import datetime, timezone
from typing import Any

import pytest

from harness import cfg, scaling_context
from sparkscale_listener.collect.backlog import (
    batch_rows_per_unit,
    kafka_lag,
    query_backlog,
    source_backlog,
    source_units_read,
)
from sparkscale_listener.collect.collector import SparkMetricCollector
from sparkscale_listener.collect.progress import ProgressRecorder
from sparkscale_listener.collect.snapshot import BridgeSnapshot
from sparkscale_listener.config.core import AutoscalerConfig
from sparkscale_listener.config.plugins import PluginContext
from sparkscale_listener.evaluator import MicroBatchEvaluator
from sparkscale_listener.metrics import SourceBacklog, finite_float

QID = "41978ea5-ea75-496e-8bd4-b9ad11de5454"

# Recorded: a batch of a query reading a 4-partition topic with maxOffsetsPerTrigger=200.
KAFKA_PROGRESS = json.loads("""
{"id": "41978ea5-ea75-496e-8bd4-b9ad11de5454", "runId": "b942046f-b239-4c58-afe1-1f686e921ffa",
 "name": "orders", "timestamp": "2026-11-22T19:22:58.012Z", "batchId": 1, "batchDuration": 646,
 "numInputRows": 199, "inputRowsPerSecond": 42.0, "processedRowsPerSecond": 308.0,
 "durationMs": {"addBatch": 420, "commitOffsets": 52, "getBatch": 0, "latestOffset": 31,
                "queryPlanning": 40, "triggerExecution": 646, "walCommit": 61},
 "stateOperators": [],
 "sources": [{"description": "KafkaV2[Subscribe[orders]]",
   "startOffset": "{\\"orders\\": {\\"0\\": 53, \\"1\\": 50, \\"2\\": 51, \\"3\\": 45}}",
   "endOffset": "{\\"orders\\": {\\"0\\": 106, \\"1\\": 100, \\"2\\": 102, \\"3\\": 90}}",
   "latestOffset": "{\\"orders\\": {\\"0\\": 133, \\"1\\": 126, \\"2\\": 128, \\"3\\": 113}}",
   "numInputRows": 199, "inputRowsPerSecond": 42.0, "processedRowsPerSecond": 308.0,
   "metrics": {"avgOffsetsBehindLatest": "25.5", "maxOffsetsBehindLatest": "27",
               "minOffsetsBehindLatest": "23"}}],
 "sink": {"description": "FileSink[file:/tmp/kb2/out]", "numOutputRows": 199}}
""")

# Recorded: the first batch of a query from "earliest" (no start offset yet).
KAFKA_FIRST_BATCH = {
    "description": "KafkaV2[Subscribe[orders]]", "startOffset": "null",
    "endOffset": "{\"orders\": {\"0\": 62, \"1\": 38}}",
    "latestOffset": "{\"orders\": {\"0\": 62, \"1\": 38}}",
    "numInputRows": 100, "inputRowsPerSecond": 0.0, "processedRowsPerSecond": 28.1,
    "metrics": {"avgOffsetsBehindLatest": "0.0", "maxOffsetsBehindLatest": "0",
                "minOffsetsBehindLatest": "0"}}

# Recorded: failOnDataLoss=false, the topic deleted and made again under the query: its offsets went
# backwards (start 62/38, end 5/5).
KAFKA_RECREATED = {
    "description": "KafkaV2[Subscribe[orders]]", "startOffset": "{\"orders\": {\"0\": 62, \"1\": 38}}",
    "endOffset": "{\"orders\": {\"0\": 5, \"1\": 5}}",
    "latestOffset": "{\"orders\": {\"0\": 5, \"1\": 5}}",
    "numInputRows": 0, "inputRowsPerSecond": 0.0, "processedRowsPerSecond": 0.0,
    "metrics": {"avgOffsetsBehindLatest": "0.0", "maxOffsetsBehindLatest": "0",
                "minOffsetsBehindLatest": "0"}}

DELTA = {"description": "DeltaSource[file:/tmp/events]",
         "startOffset": {"sourceVersion": 1, "reservoirId": "r", "reservoirVersion": 7, "index": 3,
                         "isStartingVersion": False},
         "endOffset": {"sourceVersion": 1, "reservoirId": "r", "reservoirVersion": 7, "index": 7,
                       "isStartingVersion": False},
         "latestOffset": None, "numInputRows": 400,
         "metrics": {"numFilesOutstanding": "12", "numBytesOutstanding": "3400"}}


def kafka_source(start: dict[str, int] | None, end: dict[str, int], latest: dict[str, int],
                 rows: int, topic: str = "orders") -> dict[str, Any]:
    source = copy.deepcopy(KAFKA_PROGRESS["sources"][0])
    source.update(startOffset=json.dumps({topic: start}) if start is not None else "null",
                  endOffset=json.dumps({topic: end}), latestOffset=json.dumps({topic: latest}),
                  numInputRows=rows)
    return source


def progress(batch_id: int, sources: list[dict[str, Any]], duration_ms: float = 1000.0,
             start: float | None = None) -> dict[str, Any]:
    """A batch's progress; it started ``start`` epoch seconds (default: its id, a batch a second)."""
    p = copy.deepcopy(KAFKA_PROGRESS)
    rows = sum(finite_float(s.get("numInputRows")) for s in sources)
    started = datetime.fromtimestamp(float(batch_id) if start is None else start, tz=timezone.utc)
    p.update(batchId=batch_id, sources=sources, numInputRows=rows,
             timestamp=started.isoformat(timespec="milliseconds").replace("+00:00", "Z"))
    p["durationMs"]["triggerExecution"] = duration_ms
    return p


# --- Kafka: offsets and rows ------------------------------------------------------------------

def test_recorded_kafka_lag_is_in_offsets_and_one_row_per_offset_read() -> None:
    source = KAFKA_PROGRESS["sources"][0]
    raw = source_backlog(source)
    assert raw == SourceBacklog("KafkaV2[Subscribe[orders]]", 27 + 26 + 26 + 23, "offsets")
    assert source_units_read(source) == 53 + 50 + 51 + 45
    assert batch_rows_per_unit(source) == 1.0
    backlog, (converted,) = query_backlog([source])
    assert backlog == 102.0 and converted.rows == 102.0 and converted.rows_per_unit == 1.0
    assert converted.problem is None


def test_a_first_batch_counts_one_row_per_offset_until_a_batch_shows_otherwise() -> None:
    assert source_units_read(KAFKA_FIRST_BATCH) is None  # no start offset to measure from
    lagging = dict(KAFKA_FIRST_BATCH, latestOffset="{\"orders\": {\"0\": 100, \"1\": 90}}")
    backlog, (source,) = query_backlog([lagging])
    assert backlog == 38 + 52 and source.rows_per_unit == 1.0


def test_transaction_markers_make_fewer_rows_than_offsets_and_the_recorder_learns_it() -> None:
    recorder = ProgressRecorder()
    # Each batch reads 100 offsets holding 80 records (a transactional producer's commit markers
    # take the rest); the lag is 1000 offsets.
    for batch in range(5):
        lo, hi = 100 * batch, 100 * (batch + 1)
        source = kafka_source({"0": lo}, {"0": hi}, {"0": hi + 1000}, rows=80)
        recorder.record_progress(progress(batch, [source]), now=float(batch))
    q = recorder.get(QID)
    assert recorder.rows_per_unit(QID) == {"KafkaV2[Subscribe[orders]]": pytest.approx(0.8)}
    assert q.backlog == pytest.approx(800.0)
    assert q.backlog_sources[0].backlog == 1000.0 and q.backlog_sources[0].unit == "offsets"
    # A batch that read nothing, or whose offsets went backwards, teaches nothing.
    recorder.record_progress(progress(5, [KAFKA_RECREATED]), now=5.0)
    assert recorder.rows_per_unit(QID) == {"KafkaV2[Subscribe[orders]]": pytest.approx(0.8)}
    # More rows than offsets is impossible for Kafka: not a measurement.
    assert batch_rows_per_unit(kafka_source({"0": 0}, {"0": 10}, {"0": 10}, rows=11)) is None


def test_the_arrival_rate_and_the_backlog_are_counted_in_the_same_rows() -> None:
    """The evaluator's arrival rate is rows read + backlog growth: with 0.8 rows per offset, a lag
    growing by 100 offsets a second grows by 80 rows a second, not 100."""
    recorder = ProgressRecorder()
    bridge = _Bridge()
    config = cfg(metricsWindow="20s", interval="1s")
    collector = SparkMetricCollector(PluginContext(config, config.module("collector."), bridge=bridge,
                                                   recorder=recorder))
    history = []
    for batch in range(30):
        t = float(batch)
        lo, hi = 100 * batch, 100 * (batch + 1)
        source = kafka_source({"0": lo}, {"0": hi}, {"0": hi + 100 * batch}, rows=80)
        bridge.batches[str(batch)] = 80 * 5.0  # 5 ms of task time per row
        recorder.record_progress(progress(batch, [source]), now=t)
        history.append(collector.collect(t))
    evaluation = MicroBatchEvaluator().evaluate(history, scaling_context(29.0, cfg=config))
    q = evaluation.queries[QID]
    assert q.input_rate == pytest.approx(80.0, rel=0.05)
    assert q.backlog_growth_rate == pytest.approx(80.0, rel=0.05)
    assert q.target_rate == pytest.approx(160.0, rel=0.05)
    assert q.backlog == pytest.approx(0.8 * 100 * 29)


# --- files: rows per file learned from progress -------------------------------------------------

def test_files_are_not_counted_until_a_batch_shows_rows_per_file() -> None:
    spanning = dict(DELTA, endOffset=dict(DELTA["endOffset"], reservoirVersion=9, index=0))
    assert source_units_read(spanning) is None  # a batch across table versions: files unknown
    backlog, (files,) = query_backlog([spanning])
    assert backlog is None and files.backlog == 12.0 and files.rows is None
    assert not files.nonsense and "12 files behind, not counted" in files.problem
    # Together with a Kafka source: the Kafka part counts, the files are reported beside it.
    backlog, per_source = query_backlog([KAFKA_PROGRESS["sources"][0], spanning])
    assert backlog == 102.0 and per_source[1].problem

    # A batch within one version read files 4..7: 400 rows in 4 files.
    assert source_units_read(DELTA) == 4.0
    recorder = ProgressRecorder()
    recorder.record_progress(progress(0, [DELTA]), now=1.0)
    recorder.record_progress(progress(1, [spanning]), now=2.0)
    q = recorder.get(QID)
    assert q.backlog == 12 * 100.0 and q.backlog_problem is None
    assert q.backlog_sources[0].rows_per_unit == 100.0


# --- lags that make no sense ---------------------------------------------------------------------

NONSENSE = {
    "latest behind end (topic recreated)": (
        kafka_source({"0": 100, "1": 90}, {"0": 120, "1": 98}, {"0": 5, "1": 110}, rows=28), "negative lag"),
    "end offset -2 (larger than the log)": (
        kafka_source({"0": 0, "1": 90}, {"0": -2, "1": 98}, {"0": 400, "1": 110}, rows=8),
        "larger than its log"),
    "negative latest offset": (
        kafka_source({"0": 100}, {"0": 120}, {"0": -1}, rows=20), "negative latest offset"),
    "partition gone from latest": (
        kafka_source({"0": 100, "1": 90}, {"0": 120, "1": 98}, {"0": 150}, rows=28), "missing"),
    "negative lag metric": (
        {"description": "KafkaV2[Subscribe[orders]]", "endOffset": None, "latestOffset": None,
         "metrics": {"maxOffsetsBehindLatest": "-40", "avgOffsetsBehindLatest": "-20"}}, "negative lag"),
    "negative files outstanding": (dict(DELTA, metrics={"numFilesOutstanding": "-3"}), "negative backlog"),
}


@pytest.mark.parametrize("case", list(NONSENSE))
def test_a_nonsense_lag_is_no_backlog_and_says_why(case: str) -> None:
    source, why = NONSENSE[case]
    parsed = source_backlog(source)
    assert parsed.backlog is None and parsed.nonsense and why in parsed.problem
    # It makes the whole query's backlog unknown, even beside a source whose backlog is fine.
    backlog, per_source = query_backlog([KAFKA_PROGRESS["sources"][0], source])
    assert backlog is None and per_source[1].nonsense
    recorder = ProgressRecorder()
    recorder.record_progress(progress(0, [KAFKA_PROGRESS["sources"][0], source]), now=1.0)
    q = recorder.get(QID)
    assert q.backlog is None and q.backlog_problem.startswith("no backlog signal: ")
    assert why in q.backlog_problem


def test_new_partitions_only_in_the_latest_offsets_are_not_a_lag_yet() -> None:
    assert kafka_lag({"t": {"0": 10}}, {"t": {"0": 15, "1": 700}}) == (5.0, None)
    assert kafka_lag(None, {"t": {"0": 1}}) == (None, None)  # nothing to compare: not nonsense


def test_a_nonsense_lag_replaces_a_good_one_and_an_idle_event_does_not_make_it_zero() -> None:
    recorder = ProgressRecorder()
    recorder.record_progress(progress(0, [KAFKA_PROGRESS["sources"][0]]), now=1.0)
    assert recorder.get(QID).backlog == 102.0
    recorder.record_progress(progress(1, [NONSENSE["latest behind end (topic recreated)"][0]]), now=2.0)
    assert recorder.get(QID).backlog is None  # not the stale 102
    recorder.record_idle(QID, now=3.0)
    q = recorder.get(QID)
    assert q.backlog is None and q.backlog_problem.startswith("no backlog signal")
    recorder.record_progress(progress(2, [KAFKA_PROGRESS["sources"][0]]), now=4.0)
    assert recorder.get(QID).backlog == 102.0 and recorder.get(QID).backlog_problem is None


@pytest.mark.parametrize("case", ["end offset -2 (larger than the log)",
                                  "latest behind end (topic recreated)"])
def test_no_decision_is_made_from_a_nonsense_lag(case: str) -> None:
    """Sized as if the source reported no backlog at all: neither the impossible lag nor a lag
    clamped to zero (which would free executors while the real lag is unknown) moves the target."""
    nonsense = NONSENSE[case][0]

    def run(sources_at: Any) -> Any:
        recorder, bridge = ProgressRecorder(), _Bridge()
        config = cfg(metricsWindow="10s", interval="1s")
        collector = SparkMetricCollector(PluginContext(config, config.module("collector."), bridge=bridge,
                                                       recorder=recorder))
        history = []
        for batch in range(20):
            bridge.batches[str(batch)] = 200 * 20.0  # 200 rows a batch, 20 ms of task time each
            p = progress(batch, sources_at(batch))
            p["numInputRows"] = 200
            recorder.record_progress(p, now=float(batch))
            history.append(collector.collect(float(batch)))
        return MicroBatchEvaluator().evaluate(history, scaling_context(19.0, cfg=config))

    def unreported(batch: int) -> list[dict[str, Any]]:
        return [{"description": "MemoryStream[value]", "numInputRows": 200}]

    blind = run(unreported)
    with_nonsense = run(lambda batch: [dict(nonsense, numInputRows=200)])
    q = with_nonsense.queries[QID]
    assert q.backlog is None and q.catch_up_rate == 0 and not q.backlog_mode
    assert with_nonsense.recommended_executors == blind.recommended_executors
    assert with_nonsense.required_slots == pytest.approx(blind.required_slots)


def test_the_collector_reports_a_lost_backlog_signal_once_and_its_return(
        caplog: pytest.LogCaptureFixture) -> None:
    recorder, bridge = ProgressRecorder(), _Bridge()
    config = AutoscalerConfig()
    collector = SparkMetricCollector(PluginContext(config, config.module("collector."), bridge=bridge,
                                                   recorder=recorder))
    good, bad = KAFKA_PROGRESS["sources"][0], NONSENSE["latest behind end (topic recreated)"][0]
    with caplog.at_level(logging.INFO, logger="sparkscale"):
        recorder.record_progress(progress(0, [good]), now=1.0)
        collector.collect(1.0)
        for batch in (1, 2, 3):
            recorder.record_progress(progress(batch, [bad]), now=float(batch + 1))
            sample = collector.collect(float(batch + 1))
        recorder.record_progress(progress(4, [good]), now=5.0)
        collector.collect(5.0)
    assert sample.queries[QID].backlog is None
    assert "no backlog signal" in (sample.queries[QID].backlog_problem or "")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "'orders'" in warnings[0] and "negative lag" in warnings[0]
    assert "processed rate" in warnings[0]
    assert any("usable backlog again" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("source", [
    {"description": "KafkaV2[Subscribe[x]]", "startOffset": "{\"x\": {\"0\": \"a\"}}",
     "endOffset": "{\"x\": {\"0\": 1e400}}", "latestOffset": "[1, 2]", "numInputRows": "many"},
    {"description": "KafkaV2[Subscribe[x]]", "startOffset": 5, "endOffset": {"x": 3},
     "latestOffset": {"x": "7"}, "metrics": {"avgOffsetsBehindLatest": "NaN"}},
    {"description": "DeltaSource[x]", "startOffset": {"reservoirVersion": 1, "index": "z"},
     "endOffset": {"reservoirVersion": 1, "index": None}, "metrics": {"numFilesOutstanding": "inf"}},
    {"description": 42, "sources": None, "metrics": []},
])
def test_malformed_progress_never_raises(source: dict[str, Any]) -> None:
    recorder = ProgressRecorder()
    recorder.record_progress(progress(0, [source]), now=1.0)
    q = recorder.get(QID)
    assert q is not None and q.backlog is None
    assert source_units_read(source) is None and batch_rows_per_unit(source) is None


class _Bridge:
    """The JVM snapshot the collector reads: one executor of 4 cores, the query's batch busy time."""

    def __init__(self) -> None:
        self.batches: dict[str, float] = {}

    def poll(self) -> BridgeSnapshot:
        busy = sum(self.batches.values())
        return BridgeSnapshot.from_json({
            "timeMs": 0, "coresPerExecutor": 4,
            "executors": {"1": {"cores": 4, "addedMs": 0}},
            "totals": {"busyMs": busy},
            "queries": {QID: {"busyMs": busy, "maxStageTasks": 8,
                              "batches": {b: {"busyMs": ms} for b, ms in self.batches.items()}}}})
