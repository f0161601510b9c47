"""Stateful queries with a shuffle under scale-up and scale-down, on a real multi-executor cluster.

Two queries share the executors, one on Spark's default state store and one on RocksDB; each
deduplicates its input (every row arrives twice) and counts rows per event-time window and key,
with a watermark, so each micro-batch shuffles into stateful operators. Event time is derived from
the row id, so the exact result is known whatever the arrival times: each window and key holds a
fixed number of ids. Removing an executor between a batch's map and reduce stages would lose map
output (FetchFailed, a failed task, the map stage re-run); the realizer removes none that holds
shuffle output of a running job, so the run must end with 0 failed tasks and exact counts.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from spark_cluster import fast_conf

from sparkscale_listener import autoscaler
from sparkscale_listener.spark.bridge import JvmBridge
from sparkscale_listener.testing import source as testing_source
from sparkscale_listener.testing.demo import (
    build_session,
    read_event_log,
    wait_for,
    wait_for_autoscaler,
)

pytestmark = pytest.mark.spark

STORES = {
    "hdfs": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
    "rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
}
IDS_PER_SECOND = 20  # event time = EPOCH_S + id / 20 s
# Not 0: a row at event time 0 equals the first batch's watermark (0) and counts as late.
EPOCH_S = 1_000_000
WINDOW_S = 5
KEYS = 3
# Every stateful task opens its state store: a fixed cost of the batch whatever its rows. On a slow
# or loaded machine it approaches a 2 s trigger at any size, and the model then rightly holds the
# executors at the low rate (they would be needed to finish in time); 4 s leaves it room.
TRIGGER_S = 4


def expected_counts(windows: int) -> Counter[tuple[int, int]]:
    """(window start in s, key) -> rows, for the first ``windows`` windows of event time."""
    counts: Counter[tuple[int, int]] = Counter()
    for i in range(windows * WINDOW_S * IDS_PER_SECOND):
        counts[(EPOCH_S + i // IDS_PER_SECOND // WINDOW_S * WINDOW_S, i % KEYS)] += 1
    return counts


class StatefulQuery:
    def __init__(self, spark: Any, workdir: Path, store: str) -> None:
        self.spark, self.store = spark, store
        self.control = workdir / f"{store}.rate"
        self.out = workdir / f"{store}-out"
        self.checkpoint = workdir / f"{store}-checkpoint"
        testing_source.set_rate(str(self.control), 20)
        self.query: Any = None

    def start(self) -> StatefulQuery:
        from pyspark.sql import functions as F

        testing_source.register(self.spark)
        # The provider is fixed per query when it starts (and kept in its checkpoint).
        self.spark.conf.set("spark.sql.streaming.stateStore.providerClass", STORES[self.store])
        rows = (self.spark.readStream.format(testing_source.NAME)
                .option("controlFile", str(self.control)).option("rowsPerSecond", "20")
                .option("maxRowsPerBatch", "800").option("partitions", "3")
                .option("costMs", "10").option("costMode", "sleep").load())
        twice = rows.select(F.explode(F.array(F.col("id"), F.col("id"))).alias("id"))
        timed = twice.select("id", (F.col("id") % KEYS).alias("key"),
                             F.timestamp_seconds(F.col("id") / IDS_PER_SECOND + EPOCH_S).alias("ets"))
        counts = (timed.withWatermark("ets", "2 seconds").dropDuplicates(["id", "ets"])
                  .groupBy(F.window("ets", f"{WINDOW_S} seconds"), "key").count())
        self.query = (counts.select(F.col("window.start").alias("start"), "key", "count")
                      .writeStream.format("json").outputMode("append").queryName(f"stateful-{self.store}")
                      .option("path", str(self.out)).option("checkpointLocation", str(self.checkpoint))
                      .trigger(processingTime=f"{TRIGGER_S} seconds").start())
        return self

    def set_rate(self, rows_per_second: float) -> None:
        testing_source.set_rate(str(self.control), rows_per_second)

    def results(self) -> list[tuple[int, int, int]]:
        frame = self.spark.read.schema("start timestamp, key long, count long").json(str(self.out))
        return [(int(r.start.timestamp()), r.key, r["count"]) for r in frame.collect()]


def check_exact(query: StatefulQuery) -> int:
    """Every emitted (window, key) once, with the exact count; returns the windows emitted."""
    rows = query.results()
    seen = Counter((start, key) for start, key, _ in rows)
    assert all(n == 1 for n in seen.values()), f"{query.store}: a window emitted twice"
    windows = len({start for start, _, _ in rows})
    expected = expected_counts(windows)
    got = {(start, key): count for start, key, count in rows}
    assert got == dict(expected), f"{query.store}: counts differ from the unscaled result"
    return windows


def test_stateful_queries_with_shuffles_scale_up_and_down_with_exact_results(tmp_path: Path) -> None:
    # Two shuffle partitions: each task of a stateful operator opens a state store, a fixed cost
    # that would otherwise keep a second executor busy at the low load.
    spark = build_session("it-stateful", fast_conf(tmp_path, extra={"spark.sql.shuffle.partitions": "2"}))
    scaler = autoscaler(spark)
    queries = [StatefulQuery(spark, tmp_path, store).start() for store in STORES]
    started = time.monotonic()
    try:
        wait_for(lambda: scaler.status()["live_executors"] == 1, 120, what="the baseline of 1 executor")
        for q in queries:
            q.set_rate(110)  # together > 2x what one executor does: a backlog grows
        wait_for_autoscaler(scaler, lambda: scaler.status()["live_executors"] >= 2, 180,
                            what="a scale-up for the backlog")
        peak = [scaler.status()["live_executors"]]

        def scaled_down() -> bool:
            live = scaler.status()["live_executors"]
            peak[0] = max(peak[0], live)
            return live < peak[0] and any(d["applied"] and d["action"] == "scale_down"
                                          for d in scaler.decisions())

        for q in queries:
            q.set_rate(5)
        # Each stateful task opens its state store, a fixed cost that can keep a second executor
        # busy even at a low rate on a loaded machine: any applied scale-down that removed an
        # executor while the batches shuffle is the point here, not reaching 1.
        wait_for_autoscaler(scaler, scaled_down, 360, what="a scale-down that removed an executor")
        snapshot = JvmBridge(spark.sparkContext).snapshot()
        for q in queries:
            q.query.stop()
        windows = {q.store: check_exact(q) for q in queries}
        decisions = [d for d in scaler.decisions() if d["applied"]]
        print(f"FIGURES stateful: windows={windows} failed_tasks={snapshot['totals']['tasksFailed']} "
              f"actions={len(decisions)} rollbacks={sum(d['action'] == 'rollback' for d in decisions)} "
              f"run_s={time.monotonic() - started:.0f}")
        assert all(n >= 4 for n in windows.values()), f"too few windows closed to compare: {windows}"
        assert snapshot["totals"]["tasksFailed"] == 0, "no task may fail, FetchFailed included"
        assert not [d for d in decisions if d["action"] == "rollback"]
    finally:
        for q in queries:
            if q.query is not None and q.query.isActive:
                q.query.stop()
        spark.stop()
    task_ends = [e for e in read_event_log(tmp_path / "events") if e["Event"] == "SparkListenerTaskEnd"]
    reasons = Counter(e["Task End Reason"]["Reason"] for e in task_ends)
    assert set(reasons) <= {"Success", "TaskKilled"}, f"task ends other than success: {reasons}"
