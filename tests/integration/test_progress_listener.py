"""The progress recorder and the `sparkscale_test` source on a real, small Spark (local[2]).

No JVM bridge is needed: the collector gets a fake snapshot, so only the Python listener side and
the trigger-interval lookup touch Spark. Every wait is on a condition with a deadline (the first
micro-batch alone can take 10 s on a 2-core machine while Python workers start).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from sparkscale_listener.collect.collector import SparkMetricCollector
from sparkscale_listener.collect.progress import ProgressRecorder, QueryProgress
from sparkscale_listener.collect.snapshot import BridgeSnapshot
from sparkscale_listener.config.core import AutoscalerConfig
from sparkscale_listener.config.plugins import PluginContext
from sparkscale_listener.spark.bridge import JvmBridge
from sparkscale_listener.testing.source import register, set_rate

pytestmark = pytest.mark.spark

T = TypeVar("T")
DEADLINE_S = 180.0


def wait_for(probe: Callable[[], T], ok: Callable[[T], bool], what: str,
             timeout: float = DEADLINE_S) -> T:
    deadline = time.monotonic() + timeout
    value = probe()
    while not ok(value):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last: {value!r}")
        time.sleep(0.2)
        value = probe()
    return value


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from pyspark.sql import SparkSession

    existing = SparkSession.getActiveSession()
    session = existing or (SparkSession.builder.master("local[2]")
                           .appName("sparkscale-progress-test")
                           .config("spark.ui.enabled", "false")
                           .config("spark.sql.shuffle.partitions", "2")
                           .getOrCreate())
    register(session)
    yield session
    if existing is None:
        session.stop()


@pytest.fixture()
def recorder(spark: Any) -> Iterator[ProgressRecorder]:
    r = ProgressRecorder()
    r.attach(spark)
    yield r
    r.detach()


class FakeBridge:
    """The JVM bridge without its jar: no executors, but the real trigger lookup."""

    trigger_interval_ms = staticmethod(JvmBridge.trigger_interval_ms)

    def poll(self) -> BridgeSnapshot:
        return BridgeSnapshot.from_json({"timeMs": int(time.time() * 1000), "coresPerExecutor": 1,
                                         "executors": {}, "totals": {}, "queries": {}})


def test_recorder_sees_batches_rows_and_backlog(spark: Any, recorder: ProgressRecorder,
                                                tmp_path: Path) -> None:
    control = tmp_path / "rate"
    set_rate(str(control), 1000)  # arrivals far above what 100 rows per 0.5 s batch can read
    name = "sparkscale_progress_it"
    df = (spark.readStream.format("sparkscale_test")
          .option("rowsPerSecond", "1")  # the control file overrides it
          .option("controlFile", str(control))
          .option("maxRowsPerBatch", "100")
          .option("partitions", "2")
          .option("costMs", "0.2")
          .load())
    query = (df.writeStream.format("memory").queryName(name)
             .option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(processingTime="500 milliseconds").start())
    qid = str(query.id)
    try:
        def state() -> QueryProgress | None:
            return recorder.get(qid)

        p = wait_for(state, lambda s: s is not None and s.batches >= 3 and s.input_rows > 0
                     and (s.backlog or 0) > 0, "three batches with a backlog")
        assert p.name == name and p.active
        assert p.input_rows <= 100 * p.batches  # admission control holds
        assert p.batch_duration_ms > 0 and p.last_batch_duration_ms is not None
        assert p.backlog_sources[0].unit == "rows"

        # Exactly once, in order: the sink holds ids 0..n-1 (it may be ahead of the events).
        ids = [r.id for r in spark.sql(f"SELECT id FROM {name} ORDER BY id").collect()]
        assert ids == list(range(len(ids))) and len(ids) >= p.input_rows

        config = AutoscalerConfig()
        collector = SparkMetricCollector(PluginContext(config, config.module("collector."), spark=spark,
                                                       bridge=FakeBridge(), recorder=recorder))
        q = collector.collect(time.time()).queries[qid]
        assert q.trigger_interval_ms == 500.0
        assert q.backlog is not None and q.backlog > 0 and q.input_rows >= p.input_rows

        # Stop arrivals: the source's latest offset stops moving (two batches agree on it; while
        # rows arrive, consecutive batches always see a larger one).
        set_rate(str(control), 0)

        def latest_offsets() -> list[tuple[int, int]]:
            return [(pr["batchId"], json.loads(pr.json)["sources"][0]["latestOffset"]["offset"])
                    for pr in query.recentProgress[-2:]]

        wait_for(latest_offsets, lambda xs: len(xs) == 2 and xs[0][0] != xs[1][0] and xs[0][1] == xs[1][1],
                 "arrivals to stop")
    finally:
        query.stop()
    final = wait_for(state, lambda s: s is not None and not s.active, "the termination event")
    assert final.exception is None and final.failed_batches == 0


def test_recorder_sees_query_failure(spark: Any, recorder: ProgressRecorder, tmp_path: Path) -> None:
    control = tmp_path / "rate"
    set_rate(str(control), 100)
    df = (spark.readStream.format("sparkscale_test").option("controlFile", str(control))
          .option("maxRowsPerBatch", "20").load()
          .selectExpr("id", "assert_true(id < 30, 'sparkscale test failure') AS ok"))
    query = df.writeStream.format("noop").trigger(processingTime="200 milliseconds").start()
    qid = str(query.id)
    try:
        final = wait_for(lambda: recorder.get(qid), lambda s: s is not None and not s.active,
                         "the query to fail")
    finally:
        query.stop()
    assert final.exception is not None and "sparkscale test failure" in final.exception
    assert final.failed_batches == 1
    assert final.batches >= 1  # the first batch (ids 0..19) completed before the failure
