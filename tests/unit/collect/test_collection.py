"""Collection without Spark: backlog parsing, the progress recorder, and MetricSample assembly.

Progress JSON below is recorded from pyspark 4.3.0 (the `sparkscale_test` Python source and the
built-in `rate` source) or follows the documented shape of Kafka, file and Delta sources.
"""

from __future__ import annotations

import copy
import itertools
import json
import logging
import random
from typing import Any

import pytest

from sparkscale_listener.collect.backlog import offset_difference, query_backlog, source_backlog
from sparkscale_listener.collect.batches import BatchRecords
from sparkscale_listener.collect.collector import MetricCollector, SparkMetricCollector
from sparkscale_listener.collect.progress import MAX_BATCH_IDS, BatchProgress, ProgressRecorder
from sparkscale_listener.collect.snapshot import BatchTasks, BridgeSnapshot
from sparkscale_listener.config.core import AutoscalerConfig
from sparkscale_listener.config.plugins import PluginContext
from sparkscale_listener.metrics import (
    ExecutorInfo,
    ExecutorTimeline,
    InFlightBatch,
    LatestOffsets,
    MetricSample,
    SourceBacklog,
)
from sparkscale_listener.testing.source import ArrivalClock, _parse_control

QID = "76067d42-123f-41a8-8582-9c401264d7c2"

# Recorded: StreamingQueryProgress.json of a query reading the sparkscale_test source.
PYTHON_SOURCE_PROGRESS = json.loads("""
{"id": "76067d42-123f-41a8-8582-9c401264d7c2", "runId": "575e3e31-d007-48ed-bd17-9187888283dd",
 "name": "proto", "timestamp": "2026-11-22T04:28:54.221Z", "batchId": 2, "batchDuration": 315,
 "numInputRows": 200, "inputRowsPerSecond": 101.3, "processedRowsPerSecond": 152.4,
 "durationMs": {"addBatch": 168, "commitOffsets": 46, "getBatch": 0, "latestOffset": 4,
                "queryPlanning": 22, "triggerExecution": 314, "walCommit": 73},
 "stateOperators": [],
 "sources": [{"description":
   "org.apache.spark.sql.execution.datasources.v2.python.PythonMicroBatchStreamWithAdmissionControl@28c0b47e",
   "startOffset": {"offset": 232}, "endOffset": {"offset": 432}, "latestOffset": {"offset": 4112},
   "numInputRows": 200, "inputRowsPerSecond": 101.3, "processedRowsPerSecond": 152.4}],
 "sink": {"description": "NoopTable", "numOutputRows": 200}}
""")

# Recorded: the built-in rate source (latest == end, always).
RATE_SOURCE = {"description": "RateStreamV2[rowsPerSecond=10, rampUpTimeSeconds=0, numPartitions=default",
               "startOffset": 2, "endOffset": 3, "latestOffset": 3, "numInputRows": 10,
               "inputRowsPerSecond": 909.1, "processedRowsPerSecond": 36.0}

KAFKA_SOURCE = {
    "description": "KafkaV2[Subscribe[orders]]",
    "startOffset": {"orders": {"0": 100, "1": 90}},
    "endOffset": {"orders": {"0": 120, "1": 98}},
    "latestOffset": {"orders": {"0": 150, "1": 110}},
    "numInputRows": 28,
    "metrics": {"avgOffsetsBehindLatest": "21.0", "maxOffsetsBehindLatest": "30",
                "minOffsetsBehindLatest": "12"},
}


def progress(batch_id: int, rows: int, duration: int = 300, latest: int | None = None,
             end: int | None = None, qid: str = QID, name: str = "proto") -> dict[str, Any]:
    p = copy.deepcopy(PYTHON_SOURCE_PROGRESS)
    p.update(id=qid, name=name, batchId=batch_id, numInputRows=rows)
    p["durationMs"]["triggerExecution"] = duration
    src = p["sources"][0]
    end = (batch_id + 1) * rows if end is None else end
    src["endOffset"] = {"offset": end}
    src["latestOffset"] = {"offset": end if latest is None else latest}
    return p


# --- backlog parsing --------------------------------------------------------------------------

def test_numeric_offsets() -> None:
    b = source_backlog({"description": "MemoryStream[value]", "endOffset": 10, "latestOffset": 25})
    assert b == SourceBacklog("MemoryStream[value]", 15.0, "rows")


def test_numeric_offsets_as_json_text_and_negative_clamped() -> None:
    assert source_backlog({"description": "x", "endOffset": "40", "latestOffset": "25"}).backlog == 0.0
    assert source_backlog({"description": "x", "endOffset": "{\"offset\": 5}",
                           "latestOffset": "{\"offset\": 9}"}).backlog == 4.0


def test_python_source_offsets_recorded() -> None:
    b = source_backlog(PYTHON_SOURCE_PROGRESS["sources"][0])
    assert b.backlog == 4112 - 432
    assert b.unit == "rows"


def test_nested_per_partition_offsets_sum_matching_paths() -> None:
    b = source_backlog(KAFKA_SOURCE)
    assert b.backlog == (150 - 120) + (110 - 98)
    assert b.unit == "offsets"
    # A partition only in latest (just created) is ignored; a negative partition counts as 0.
    assert offset_difference({"t": {"0": 10, "1": 50}}, {"t": {"0": 15, "1": 40, "2": 7}}) == 5.0
    # Nothing comparable: None.
    assert offset_difference({"a": 1}, {"b": 2}) is None
    assert offset_difference({"a": "x"}, {"a": "y"}) is None


def test_kafka_metrics_when_offsets_not_comparable() -> None:
    src = dict(KAFKA_SOURCE, latestOffset=None)
    # avg x partitions (from the end offset) is the exact sum.
    assert source_backlog(src) == SourceBacklog(KAFKA_SOURCE["description"], 42.0, "offsets")
    # Without a per-partition end offset: the max is the best lower bound.
    src2 = dict(src, endOffset=None)
    assert source_backlog(src2).backlog == 30.0
    src3 = {"description": "KafkaV2[Subscribe[x]]", "endOffset": None, "latestOffset": None,
            "metrics": {"maxOffsetsBehindLatest": "not a number"}}
    assert source_backlog(src3).backlog is None


def test_file_source_metrics() -> None:
    delta = {"description": "DeltaSource[file:/tmp/events]",
             "startOffset": {"sourceVersion": 1, "reservoirId": "r", "reservoirVersion": 3, "index": -1},
             "endOffset": {"sourceVersion": 1, "reservoirId": "r", "reservoirVersion": 7, "index": -1},
             "latestOffset": None,
             "metrics": {"numFilesOutstanding": "12", "numBytesOutstanding": "3400"}}
    assert source_backlog(delta) == SourceBacklog(delta["description"], 12.0, "files")
    # Delta without metrics: table versions are no backlog.
    no_metrics = dict(delta, metrics={}, latestOffset=dict(delta["endOffset"], reservoirVersion=9))
    assert source_backlog(no_metrics).backlog is None
    # Spark's own file source has no latest offset and no metrics.
    files = {"description": "FileStreamSource[file:/tmp/in]", "startOffset": {"logOffset": 1},
             "endOffset": {"logOffset": 2}, "latestOffset": None, "metrics": {}}
    assert source_backlog(files).backlog is None


def test_rate_sources_report_no_backlog() -> None:
    assert source_backlog(RATE_SOURCE).backlog is None
    per_batch = {"description": "RatePerMicroBatchStream[rowsPerBatch=10, numPartitions=2, "
                 "startTimestamp=0, advanceMsPerBatch=1000]", "endOffset": {"offset": 10},
                 "latestOffset": {"offset": 20}}
    assert source_backlog(per_batch).backlog is None


@pytest.mark.parametrize("src", [
    {"description": "x", "endOffset": "not json {", "latestOffset": "{]"},
    {"description": "x", "endOffset": [1, 2], "latestOffset": [3, 4]},
    {"description": "x", "endOffset": True, "latestOffset": False},
    {"description": "x", "endOffset": 5, "latestOffset": None},
    {"description": "x", "endOffset": 5, "latestOffset": "null"},
    {"description": "x", "endOffset": 5, "latestOffset": {"offset": 9}},
    {"description": None, "metrics": "garbage"},
    {},
])
def test_malformed_offsets_give_none(src: dict[str, Any]) -> None:
    assert source_backlog(src).backlog is None


def test_query_backlog_sums_known_sources() -> None:
    total, per_source = query_backlog([RATE_SOURCE, KAFKA_SOURCE, PYTHON_SOURCE_PROGRESS["sources"][0]])
    assert total == 42.0 + (4112 - 432)
    assert [s.backlog for s in per_source] == [None, 42.0, 4112 - 432]
    assert query_backlog([RATE_SOURCE]) == (None, (source_backlog(RATE_SOURCE),))
    assert query_backlog(None) == (None, ())


# --- the recorder -----------------------------------------------------------------------------

def test_recorder_counts_batches_once_and_keeps_latest_gauges() -> None:
    r = ProgressRecorder()
    r.record_started(QID, "proto", "run-1", now=100.0)
    r.record_progress(progress(0, 50, duration=1000, latest=50), now=101.0)
    r.record_progress(progress(1, 200, duration=400, end=250, latest=900), now=102.0)
    r.record_progress(progress(1, 200, duration=400, end=250, latest=950), now=102.5)  # replayed
    r.record_progress(progress(2, 200, duration=350, end=450, latest=1200), now=103.0)
    q = r.get(QID)
    assert q is not None
    assert (q.batches, q.input_rows, q.batch_duration_ms) == (3, 450, 1750.0)
    assert q.batch_ids == (0, 1, 2)
    assert q.last_batch_id == 2
    assert q.backlog == 750.0
    assert q.last_batch_duration_ms == 350.0
    assert q.last_progress_time == 103.0
    assert q.input_rate == PYTHON_SOURCE_PROGRESS["inputRowsPerSecond"]
    assert q.active and q.exception is None and q.name == "proto"


def test_recorder_idle_terminated_restart() -> None:
    r = ProgressRecorder()
    r.record_progress(progress(0, 10, latest=30, end=10), now=1.0)  # no start event: attached late
    assert r.get(QID).active
    r.record_idle(QID, now=5.0)
    q = r.get(QID)
    assert q.last_progress_time == 5.0 and q.backlog == 0.0 and q.input_rate == 0.0
    assert q.backlog_sources[0].backlog == 0.0
    r.record_terminated(QID, "java.lang.ArithmeticException: / by zero", now=6.0)
    q = r.get(QID)
    assert not q.active and q.failed_batches == 1 and "ArithmeticException" in q.exception
    r.record_progress(progress(1, 10), now=6.5)  # a straggler does not revive it
    assert not r.get(QID).active
    r.record_started(QID, "proto", "run-2", now=10.0)
    q = r.get(QID)
    assert q.active and q.exception is None and q.failed_batches == 1 and q.run_id == "run-2"
    r.record_terminated(QID, None, now=20.0)
    assert r.get(QID).failed_batches == 1


def test_recorder_memory_is_bounded() -> None:
    r = ProgressRecorder()
    for b in range(MAX_BATCH_IDS + 50):
        r.record_progress(progress(b, 1), now=float(b))
    q = r.get(QID)
    assert q.batches == MAX_BATCH_IDS + 50
    assert len(q.batch_ids) == MAX_BATCH_IDS and q.batch_ids[-1] == MAX_BATCH_IDS + 49
    for i in range(100):
        r.record_terminated(f"q{i}", None, now=float(i))
    assert len(r.snapshot()) <= 65


def test_recorder_callbacks_never_raise(caplog: pytest.LogCaptureFixture) -> None:
    class Broken:
        @property
        def progress(self) -> Any:
            raise RuntimeError("py4j gone")

    r = ProgressRecorder()
    with caplog.at_level(logging.WARNING):
        r.onQueryProgress(Broken())  # type: ignore[arg-type]
    assert "could not record" in caplog.text
    assert r.snapshot() == {}


def test_trigger_interval() -> None:
    r = ProgressRecorder()
    r.set_trigger_interval(QID, 1000)
    assert r.get(QID).trigger_interval_ms == 1000.0
    r.set_trigger_interval(QID, 0)  # the default trigger
    assert r.get(QID).trigger_interval_ms is None


# --- the collector ----------------------------------------------------------------------------

def snapshot(time_ms: float = 1_000_000.0, batches: dict[str, float] | None = None,
             **overrides: Any) -> dict[str, Any]:
    """A snapshot in the JVM's JSON; ``batches``: busy ms by batch id."""
    snap = {
        "timeMs": time_ms, "appId": "app-1", "coresPerExecutor": 2,
        "executors": {
            "1": {"host": "h1", "cores": 2, "addedMs": 900_000.0, "removedMs": None, "removedReason": None,
                  "runningTasks": 1, "busyMs": 10.0, "tasksFinished": 3, "tasksFailed": 0, "gcMs": 1.0,
                  "runMs": 9.0, "heapUsedBytes": 256, "heapMaxBytes": 1024},
            "2": {"host": "h2", "cores": 2, "addedMs": 950_000.0, "removedMs": None, "removedReason": None,
                  "runningTasks": 0, "busyMs": 0.0, "tasksFinished": 0, "tasksFailed": 1, "gcMs": 0.0,
                  "runMs": 0.0, "heapUsedBytes": 768, "heapMaxBytes": 1024},
            "10": {"host": "h3", "cores": 2, "addedMs": 920_000.0, "removedMs": 990_000.0,
                   "removedReason": "killed by sparkscale", "runningTasks": 0, "busyMs": 0.0,
                   "tasksFinished": 0, "tasksFailed": 0, "gcMs": 0.0, "runMs": 0.0,
                   "heapUsedBytes": 1000, "heapMaxBytes": 1024},
            "0": {"host": "h0", "cores": 2, "addedMs": 1000.0, "removedMs": 2000.0, "removedReason": "lost",
                  "heapUsedBytes": -1, "heapMaxBytes": -1},
            "3": {"host": "h4", "cores": 2, "addedMs": 999_000.0, "removedMs": None, "removedReason": None,
                  "heapUsedBytes": -1, "heapMaxBytes": 1024},
        },
        "totals": {"slotMs": 5000.0, "busyMs": 1234.0, "tasksFinished": 40, "tasksFailed": 2, "gcMs": 20.0,
                   "runMs": 1100.0, "executorsAdded": 5, "executorsRemoved": 2},
        "queries": {QID: {"busyMs": 900.0, "tasksFinished": 30, "tasksFailed": 1, "runMs": 800.0,
                          "jobsFailed": 0, "maxStageTasks": 8,
                          "batches": {b: {"busyMs": ms, "tasks": 4, "executors": 2, "firstLaunchMs": 990_000,
                                          "lastEndMs": 991_000, "stages": 1}
                                      for b, ms in (batches or {}).items()}}},
    }
    snap.update(overrides)
    return snap


class FakeBridge:
    """The JVM bridge's poll() over a snapshot written as the JVM's JSON."""

    def __init__(self, snap: dict[str, Any]) -> None:
        self.snap = snap

    def poll(self) -> BridgeSnapshot:
        return BridgeSnapshot.from_json(self.snap)


def make_collector(snap: dict[str, Any]) -> tuple[SparkMetricCollector, ProgressRecorder, FakeBridge]:
    recorder = ProgressRecorder()
    bridge = FakeBridge(snap)
    config = AutoscalerConfig()
    context = PluginContext(config, config.module("collector."), bridge=bridge, recorder=recorder)
    return SparkMetricCollector(context), recorder, bridge


def test_sample_cluster_from_snapshot() -> None:
    collector, _, _ = make_collector(snapshot())
    sample = collector.collect(now=1000.0)
    assert isinstance(sample, MetricSample) and sample.time == 1000.0
    c = sample.cluster
    assert c.live_executors == 3 and c.cores_per_executor == 2
    # Live ones plus the recently removed "10"; "0" was removed long ago.
    assert [e.executor_id for e in c.executors] == ["1", "2", "3", "10"]
    removed = c.executors[-1]
    assert (removed.added_time, removed.removed_time, removed.removed_reason) == (
        920.0, 990.0, "killed by sparkscale")
    assert c.executors[0].added_time == 900.0 and c.executors[0].removed_time is None
    assert c.executors[0].heap_used_ratio == 0.25 and c.executors[2].heap_used_ratio is None
    assert c.heap_used_ratio == 0.75  # max over live only: the removed one had 1000/1024
    assert (c.slot_ms, c.busy_ms, c.tasks_finished, c.tasks_failed) == (5000.0, 1234.0, 40, 2)
    assert (c.gc_ms, c.run_ms, c.executors_added, c.executors_removed) == (20.0, 1100.0, 5, 2)


def test_cores_fall_back_to_executor_cores() -> None:
    collector, _, _ = make_collector(snapshot(coresPerExecutor=None))
    assert collector.collect(now=0.0).cluster.cores_per_executor == 2


def test_tasks_aged_out_are_lost_events_only_once_sparks_bus_dropped_some() -> None:
    # Without a dropped event, a task aged out was slow, not lost (a zombie task of a failed stage
    # attempt; its end comes later): no window is measured afresh for it.
    def lost(dropped: int) -> int:
        snap = snapshot(listenerEventsDropped=dropped)
        snap["totals"]["tasksAgedOut"] = 2
        return make_collector(snap)[0].collect(1000.0).cluster.events_lost
    assert lost(0) == 0
    assert lost(3) == 5


def test_batch_busy_attribution_keeps_aged_out_batches() -> None:
    collector, recorder, bridge = make_collector(snapshot(batches={"0": 100.0, "1": 50.0}))
    recorder.record_progress(progress(0, 10), now=1.0)
    q = collector.collect(now=1.0).queries[QID]
    assert q.batch_busy_ms == 100.0  # batch 1 runs in the JVM but has not completed yet
    assert (q.busy_ms, q.tasks_finished, q.tasks_failed, q.max_stage_tasks) == (900.0, 30, 1, 8)

    # Batch 1 completes; the JVM's late task ends raise its busy time afterwards.
    recorder.record_progress(progress(1, 10), now=2.0)
    assert collector.collect(now=2.0).queries[QID].batch_busy_ms == 150.0
    bridge.snap = snapshot(batches={"0": 100.0, "1": 80.0})
    assert collector.collect(now=3.0).queries[QID].batch_busy_ms == 180.0

    # Batches 0 and 1 age out of the JVM's window: their busy time stays counted.
    recorder.record_progress(progress(2, 10), now=4.0)
    bridge.snap = snapshot(batches={"2": 20.0})
    q = collector.collect(now=4.0).queries[QID]
    assert q.batch_busy_ms == 200.0
    assert (q.batches, q.input_rows) == (3, 30)
    # Nothing new: stable.
    assert collector.collect(now=5.0).queries[QID].batch_busy_ms == 200.0


def test_a_batch_handed_over_unchanged_is_counted_once_it_completes_and_only_once() -> None:
    # The bridge hands an unchanged batch over as the same object poll after poll: one seen while
    # it ran (not completed in the recorder's view) is counted when it completes, then not again.
    collector, recorder, bridge = make_collector(snapshot(batches={"0": 100.0, "1": 50.0}))
    same = BridgeSnapshot.from_json(bridge.snap)
    bridge.poll = lambda: same  # type: ignore[method-assign]
    recorder.record_progress(progress(0, 10), now=1.0)
    assert collector.collect(now=1.0).queries[QID].batch_busy_ms == 100.0
    recorder.record_progress(progress(1, 10), now=2.0)
    assert collector.collect(now=2.0).queries[QID].batch_busy_ms == 150.0
    assert collector.collect(now=3.0).queries[QID].batch_busy_ms == 150.0


def test_a_jvm_batch_key_counts_only_as_spark_writes_a_batch_id() -> None:
    # A job that sets streaming.sql.batchId itself may write "007" or a Unicode digit: neither is
    # batch 7 or batch 2, and neither may break the collection.
    collector, recorder, _ = make_collector(snapshot(batches={"7": 100.0, "007": 30.0, "\u00b2": 40.0}))
    recorder.record_progress(progress(2, 10), now=1.0)
    recorder.record_progress(progress(7, 10), now=1.0)
    assert collector.collect(now=1.0).queries[QID].batch_busy_ms == 100.0


def test_the_running_batch_is_the_one_after_the_latest_completed_once_a_task_of_it_ended() -> None:
    collector, recorder, bridge = make_collector(snapshot(batches={"0": 100.0, "1": 50.0}))
    assert collector.collect(now=1.0).queries == {}  # no progress yet: no query to speak of
    recorder.record_progress(progress(0, 10), now=1.0)
    flight = collector.collect(now=1.0).queries[QID].in_flight
    assert flight == InFlightBatch(batch_id=1, first_launch=990.0, tasks_ended=4, task_s=0.05)
    recorder.record_progress(progress(1, 10), now=2.0)  # batch 1 completed; 2 has no task ended
    assert collector.collect(now=2.0).queries[QID].in_flight is None
    bridge.snap = snapshot(batches={"1": 50.0, "2": 70.0})
    assert collector.collect(now=3.0).queries[QID].in_flight.batch_id == 2  # type: ignore[union-attr]


def test_the_sources_latest_offsets_come_with_the_query_while_it_is_active() -> None:
    read = {QID: {"timeMs": 995_500, "offsets": 12_345.0, "partitions": 8}}
    collector, recorder, bridge = make_collector(snapshot(sourceOffsets=read))
    recorder.record_progress(progress(0, 10), now=1.0)
    assert collector.collect(now=1.0).queries[QID].latest_offsets == LatestOffsets(995.5, 12_345.0, 8)
    bridge.snap = snapshot()  # not read (yet, or not a Kafka query)
    assert collector.collect(now=2.0).queries[QID].latest_offsets is None


def test_query_unknown_to_jvm_and_trigger_interval() -> None:
    collector, recorder, _ = make_collector(snapshot(queries={}))
    recorder.record_progress(progress(0, 10, latest=40), now=1.0)
    recorder.set_trigger_interval(QID, 2000)
    q = collector.collect(now=1.0).queries[QID]
    assert (q.busy_ms, q.batch_busy_ms, q.max_stage_tasks) == (0.0, 0.0, None)
    assert q.backlog == 30.0 and q.trigger_interval_ms == 2000.0 and q.name == "proto"


def test_external_metrics_and_their_failures(caplog: pytest.LogCaptureFixture) -> None:
    class External(SparkMetricCollector):
        def query_external_metrics(self, now: float) -> dict[str, float]:
            return {"backlog.proto": 12, "bad": "n/a"}  # type: ignore[dict-item]

    class Failing(SparkMetricCollector):
        def query_external_metrics(self, now: float) -> dict[str, float]:
            raise ConnectionError("queue service down")

    def context() -> PluginContext:
        config = AutoscalerConfig()
        return PluginContext(config, config.module("collector."), bridge=FakeBridge(snapshot()),
                             recorder=ProgressRecorder())

    ok = External(context())
    with caplog.at_level(logging.WARNING):
        assert ok.collect(now=1.0).external == {"backlog.proto": 12.0}
        sample = Failing(context()).collect(1.0)
    assert sample.external == {} and sample.cluster.live_executors == 3
    assert "queue service down" in caplog.text


def test_default_external_metrics_and_interface() -> None:
    class Minimal(MetricCollector):
        def collect(self, now: float) -> MetricSample:
            raise NotImplementedError

    assert Minimal().query_external_metrics(0.0) == {}
    with pytest.raises(TypeError):
        MetricCollector()  # type: ignore[abstract]


def test_close_detaches_listener() -> None:
    class Streams:
        def __init__(self) -> None:
            self.listeners: list[Any] = []

        def addListener(self, listener: Any) -> None:
            self.listeners.append(listener)

        def removeListener(self, listener: Any) -> None:
            self.listeners.remove(listener)

        def get(self, qid: str) -> Any:
            raise RuntimeError("no JVM here")

    class Spark:
        streams = Streams()

    recorder = ProgressRecorder()
    config = AutoscalerConfig()
    collector = SparkMetricCollector(PluginContext(config, config.module("collector."), spark=Spark(),
                                                   bridge=FakeBridge(snapshot()), recorder=recorder))
    assert Spark.streams.listeners == [recorder]
    recorder.record_progress(progress(0, 1), now=1.0)
    assert collector.collect(now=1.0).queries[QID].trigger_interval_ms is None  # lookup failure ignored
    collector.close()
    collector.close()
    assert Spark.streams.listeners == []


# --- the testing source's arrival clock (pure) -------------------------------------------------

def test_arrival_clock_integrates_rate_steps() -> None:
    clock = ArrivalClock(rate=100.0, start_time=0.0)
    assert clock.rows_at(2.0) == 200.0
    clock.change_rate(3.0, 1000.0, now=5.0)  # change noticed late: still timed at t=3
    assert clock.available(5.0) == 300.0 + 2000.0
    clock.change_rate(1.0, 0.0, now=6.0)  # before rows already handed out: from t=5 on
    assert clock.rows_at(10.0) == 2300.0
    assert clock.available(4.0) == 1300.0  # a stale clock reading cannot move anything
    clock.change_rate(7.0, 10.0, now=8.0)
    assert clock.rows_at(9.0) == 2320.0
    assert clock.time_of_row(150.0) == 1.5
    assert clock.time_of_row(300.0 + 500.0) == 3.5
    assert clock.segments_for(100, 200) == [clock.segments[0]]


def test_control_file_parsing() -> None:
    text = "250\n1700000000.5 500\ngarbage\n1700000001 -3\n"
    assert _parse_control(text, mtime=42.0) == [(42.0, 250.0), (1700000000.5, 500.0)]


def test_testing_source_reader_offsets_partitions_rows(tmp_path: Any) -> None:
    import time

    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

    from sparkscale_listener.testing.source import SparkscaleTestReader, set_rate

    control = tmp_path / "rate"
    set_rate(str(control), 50)
    # Spark hands options over lower-cased; mixed case works too.
    reader = SparkscaleTestReader({"rowsPerSecond": "1", "controlFile": str(control),
                                   "MAXROWSPERBATCH": "100", "partitions": "3", "costMs": "1",
                                   "costMode": "sleep"})
    assert reader.getDefaultReadLimit() == ReadMaxRows(100)
    assert reader.initialOffset() == {"offset": 0}
    reader.clock = ArrivalClock(50.0, start_time=time.time() - 10.0)  # 10 s of arrivals: 500 rows
    assert reader.latestOffset({"offset": 0}, ReadMaxRows(100)) == {"offset": 100}
    assert reader.latestOffset({"offset": 0}, ReadAllAvailable())["offset"] >= 500
    assert reader.reportLatestOffset()["offset"] >= 500
    # Restart from a checkpoint ahead of this reader's clock: continue from there, no burst.
    assert reader.latestOffset({"offset": 10_000}, ReadMaxRows(100))["offset"] <= 10_100

    parts = reader.partitions({"offset": 7}, {"offset": 17})
    assert [(p.lo, p.hi) for p in parts] == [(7, 10), (10, 13), (13, 17)]
    assert reader.partitions({"offset": 5}, {"offset": 5}) == []
    rows = [row for p in parts for row in reader.read(p)]
    assert [r[0] for r in rows] == list(range(7, 17))
    assert all(a[1] <= b[1] for a, b in itertools.pairwise(rows))  # arrival times in order

    set_rate(str(control), 0)
    before = reader.reportLatestOffset()["offset"]
    assert reader.reportLatestOffset()["offset"] == before  # arrivals stopped

    with pytest.raises(ValueError, match="costMode"):
        SparkscaleTestReader({"costMode": "gpu"})


def test_recorder_wakes_the_control_loop_when_a_batch_shows_arrivals_rising() -> None:
    woken: list[int] = []
    r = ProgressRecorder()
    r.on_rise = lambda: woken.append(len(woken))
    r.record_started(QID, "proto", "run-1", now=100.0)
    offset = 0

    def batch(batch_id: int, rows: int, waiting: int = 0) -> None:
        nonlocal offset
        offset += rows
        p = progress(batch_id, rows, end=offset, latest=offset + waiting)
        p["timestamp"] = f"2026-11-22T04:28:{2 * batch_id:02d}.000Z"  # a 2 s trigger
        r.record_progress(p, now=100.0 + 2 * batch_id)

    for i in range(6):
        batch(i, 100 + (10 if i % 2 else -10))  # steady, with noise
    assert not woken
    batch(6, 140)  # 1.4x: noise, not a step
    assert not woken
    batch(7, 1000)  # x10: a step
    assert woken == [0]
    # A read limit that binds: every batch reads 1,000 rows, and the rest shows as a growing backlog.
    for i in range(8, 13):
        batch(i, 1000)
    woken.clear()
    batch(13, 1000, waiting=4000)
    assert woken == [0]


def test_a_failing_wake_never_reaches_the_listener(caplog: pytest.LogCaptureFixture) -> None:
    r = ProgressRecorder()

    def broken() -> None:
        raise RuntimeError("no loop")

    r.on_rise = broken
    for i, rows in enumerate([100, 100, 100, 100, 2000]):
        p = progress(i, rows, end=100 * (i + 1) + (1900 if i == 4 else 0))
        p["timestamp"] = f"2026-11-22T04:28:{2 * i:02d}.000Z"
        with caplog.at_level(logging.WARNING, logger="sparkscale"):
            r.record_progress(p, now=100.0 + i)
    assert "could not wake the control loop" in caplog.text
    assert r.get(QID).batches == 5


def test_the_executor_timeline_answers_as_asking_every_executor_would() -> None:
    """Live at a batch's start and joined during it, by binary search, against the definitions
    asked executor by executor; ties at the boundaries, removals stamped before the addition (lost
    events) and an empty cluster included."""
    rng = random.Random(7)
    times = [float(t) for t in range(0, 40, 2)]  # coarse, so batch starts hit additions exactly
    executors = []
    for i in range(60):
        added = rng.choice(times)
        removed = rng.choice([None, None, added, added + rng.choice(times), added - 3.0])
        executors.append(ExecutorInfo(str(i), host="h", cores=1, running_tasks=0, added_time=added,
                                      removed_time=removed))
    timeline = ExecutorTimeline.of(executors)
    for t in [*times, -1.0, 1.0, 100.0]:
        live = sum(1 for e in executors
                   if e.added_time <= t and (e.removed_time is None or e.removed_time > t))
        assert timeline.live_at(t) == live, t
        for since in (t - 2.0, t - 0.5, t):
            joined = any(since < e.added_time <= t for e in executors)
            assert timeline.joined_during(since, t) == joined, (since, t)
    assert ExecutorTimeline.of([]).live_at(5.0) == 0
    assert not ExecutorTimeline.of([]).joined_during(0.0, 5.0)


def test_batch_records_kept_between_ticks_are_those_built_afresh() -> None:
    """Tick after tick, the records kept for unchanged batches and built for new or changed ones
    (tasks that ended late, an executor that came) equal building every record again; a query gone
    is forgotten."""
    def progress_of(n: int) -> list[BatchProgress]:
        return [BatchProgress(i, 100.0 + 2 * i, 1.5, 100 + i, None) for i in range(n)]

    def tasks_of(n: int, busy: float = 300.0) -> dict[str, BatchTasks]:
        return {str(i): BatchTasks(busy, 4, 2, int((100 + 2 * i) * 1000), int((101 + 2 * i) * 1000), 1)
                for i in range(n)}

    one = ExecutorTimeline([50.0, 50.0], [])
    two = ExecutorTimeline([50.0, 50.0, 109.0], [])
    records = BatchRecords()
    batches, tasks = progress_of(5), tasks_of(5)
    six = [*batches, *progress_of(6)[5:]]
    late = tasks | tasks_of(6) | {"4": BatchTasks(900.0, 4, 2, 108_000, 109_500, 1)}
    ticks = [
        (batches, tasks, one),
        (batches, tasks, ExecutorTimeline([50.0, 50.0], [])),  # the same timeline, a new object
        (six, tasks | tasks_of(6), one),  # a new batch
        (six, late, one),  # a batch's tasks ended late
        (six, late, two),  # an executor came: batch 4 ran its first tasks, batch 5 on 3 executors
        (six[1:], late, two),  # the oldest batch went
        (six[1:], {k: v for k, v in late.items() if k != "2"}, two),  # batch 2's tasks aged out in the JVM
        ([*six[1:], BatchProgress(2, 120.0, 1.5, 7, None)], late, two),  # a batch id again (a fresh run)
    ]
    for tick, (b, t, timeline) in enumerate(ticks):
        kept = records.of("q", b, t, timeline)
        assert kept == BatchRecords().of("q", b, t, timeline), tick  # a fresh keeper builds every record
    assert records.of("q", six, late, two)[4].fresh_executors
    records.keep_only(["other"])
    assert records._kept == {}
