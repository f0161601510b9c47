"""A batch job sharing the application with a streaming query, on a real multi-executor cluster:
its pending and running tasks count as demand (as Spark's own dynamic allocation counts them), so
the autoscaler neither scales the application down to the quiet query's needs nor kills the
executors the batch job runs on; once the batch job is done, the executors go back.

Every wait is a condition with a generous deadline.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from spark_cluster import applied, fast_conf

from sparkscale_listener import autoscaler
from sparkscale_listener.spark.bridge import JvmBridge
from sparkscale_listener.testing.demo import StreamingJob, build_session, wait_for

pytestmark = pytest.mark.spark


def sleepy(seconds: float) -> Any:
    def task(x: int) -> int:
        time.sleep(seconds)
        return x
    return task


def test_a_batch_job_keeps_the_executors_its_tasks_need(tmp_path: Path) -> None:
    spark = build_session("it-mixed", fast_conf(tmp_path, extra={
        "spark.sparkscale.initialExecutors": "2",
    }))
    scaler = autoscaler(spark)
    sc = spark.sparkContext
    # A quiet query: alone, it would be scaled down to 1 executor.
    job = StreamingJob(spark, tmp_path, rows_per_second=5, partitions=2).start()
    finished = threading.Event()
    counts: list[int] = []
    done_at: list[float] = []

    def batch() -> None:  # three batch jobs in a row, 24 tasks of 3 s each on 1-core executors
        try:
            sc.setJobGroup("nightly-report", "a batch job beside the query")
            for _ in range(3):
                counts.append(sc.parallelize(range(24), 24).map(sleepy(3.0)).count())
        finally:
            done_at.append(time.time())
            finished.set()

    try:
        wait_for(lambda: scaler.status()["target_executors"] == 2, 120, what="the baseline of 2 executors")
        failed_before = JvmBridge(sc).snapshot()["totals"]["tasksFailed"]
        worker = threading.Thread(target=batch, daemon=True)
        worker.start()
        wait_for(lambda: [d for d in applied(scaler, "scale_up") if "other jobs" in d["reason"]], 150,
                 what="a scale-up for the batch job's tasks")
        up = next(d for d in applied(scaler, "scale_up") if "other jobs" in d["reason"])
        assert up["to_executors"] == 3, up  # 24 tasks want more than maxExecutors=3 slots
        wait_for(finished.is_set, 400, what="the batch jobs to finish")
        assert counts == [24, 24, 24]
        during = [d for d in applied(scaler, "scale_down") if up["time"] <= d["time"] <= done_at[0]]
        assert not during, ("no scale-down while the batch job ran", during)
        assert JvmBridge(sc).snapshot()["totals"]["tasksFailed"] == failed_before, \
            "no task of the batch job failed (no busy executor was removed)"
        wait_for(lambda: applied(scaler, "scale_down") and scaler.status()["live_executors"] == 1, 240,
                 what="the quiet query's 1 executor once the batch job is done")
    finally:
        job.stop()
        spark.stop()

