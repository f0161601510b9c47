"""A driver restart with the SQLite state store, on a real multi-executor cluster: the second
driver of the same application starts at the target the first one left healthy (not at
initialExecutors), and the query resumes from its checkpoint with every row written once.

Every wait is a condition with a generous deadline.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sparkscale_listener import autoscaler
from sparkscale_listener.testing.demo import (
    StreamingJob,
    build_session,
    cluster_conf,
    exactly_once,
    read_event_log,
    wait_for,
)

pytestmark = pytest.mark.spark


def session(tmp_path: Path, run: str) -> Any:
    conf = cluster_conf(tmp_path, extra={
        "spark.ui.enabled": "false",
        "spark.eventLog.dir": str(tmp_path / run),
        "spark.sparkscale.stateStore.class": "sqlite",
        "spark.sparkscale.stateStore.sqlite.path": str(tmp_path / "sparkscale.db"),
        "spark.sparkscale.checkers": "",  # a scaling is healthy at once: the restart is the subject
    })
    (tmp_path / run).mkdir(exist_ok=True)
    return build_session("it-restart", conf)


def test_a_restarted_driver_resumes_at_the_last_healthy_target(tmp_path: Path) -> None:
    spark = session(tmp_path, "first")
    scaler = autoscaler(spark)
    job = StreamingJob(spark, tmp_path, rows_per_second=30).start()
    try:
        wait_for(lambda: scaler.status()["target_executors"] == 1, 120, what="the baseline of 1 executor")
        job.set_rate(220)
        wait_for(lambda: (scaler.status()["healthy_target"] or 0) > 1, 180,
                 what="a scale-up, confirmed healthy")
        healthy = scaler.status()["healthy_target"]
        job.stop()
    finally:
        job.stop()
        spark.stop()  # a clean stop: the state's owner lease is released

    spark = session(tmp_path, "second")
    scaler = autoscaler(spark)
    job = StreamingJob(spark, tmp_path, rows_per_second=30).start()  # same checkpoint
    try:
        wait_for(lambda: scaler.status()["initial_executors"] is not None, 120, what="the baseline")
        status = scaler.status()
        assert status["initial_executors"] == healthy, (status, healthy)  # not initialExecutors=1
        done = job.query.lastProgress["batchId"] if job.query.lastProgress else -1
        wait_for(lambda: job.query.lastProgress and job.query.lastProgress["batchId"] >= done + 2, 120,
                 what="two batches of the restarted query")
        job.stop()
        ids = job.written_ids()
        assert ids and exactly_once(ids), "every row of both runs written exactly once"
    finally:
        job.stop()
        spark.stop()
    baseline = [e for e in read_event_log(tmp_path / "second")
                if e["Event"].endswith("AutoscalerEvent") and e["reason"].startswith("baseline")]
    assert baseline and f"restored last healthy target {healthy}" in baseline[0]["reason"], baseline
