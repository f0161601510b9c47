"""A driver killed mid-run and restarted, with the SQLite state store, on a real multi-executor
cluster: the first driver (its own process, see tests/restart_driver.py) scales up under load and
is killed with SIGKILL, no clean stop; the second driver of the same application takes the state
over once the first one's heartbeat has gone stale, starts at the target the first one left
healthy (not at initialExecutors), and the query resumes from its checkpoint with every row
written once. (A pause and a rolled-back scaling surviving a restart: tests/unit/sim/test_restart.py.)

Every wait is a condition with a generous deadline.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from restart_driver import session

from sparkscale_listener import autoscaler
from sparkscale_listener.spark.bridge import JvmBridge
from sparkscale_listener.testing.demo import StreamingJob, exactly_once, read_event_log, wait_for

pytestmark = pytest.mark.spark
DRIVER = Path(__file__).resolve().parents[1] / "restart_driver.py"


def test_a_killed_driver_restarts_at_the_last_healthy_target_with_every_row_once(tmp_path: Path) -> None:
    log = (tmp_path / "first-driver.log").open("w+")
    first = subprocess.Popen([sys.executable, str(DRIVER), str(tmp_path)], stdout=subprocess.PIPE,
                             stderr=log, text=True, start_new_session=True)
    try:
        line = ""
        deadline = time.monotonic() + 420
        while not line.startswith("HEALTHY") and time.monotonic() < deadline and first.poll() is None:
            line = first.stdout.readline() if first.stdout else ""
        assert line.startswith("HEALTHY"), f"the first driver did not scale up: {line!r}, see {log.name}"
        healthy = int(line.split()[1])
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the driver crashes: Python, its JVM, the executors
        first.wait(60)
        log.close()
    killed_at = time.monotonic()

    spark = session(tmp_path, "second")
    scaler = autoscaler(spark)
    job = StreamingJob(spark, tmp_path, rows_per_second=30).start()  # same checkpoint
    try:
        wait_for(lambda: scaler.status()["initial_executors"] is not None, 120, what="the baseline")
        restored_s = time.monotonic() - killed_at
        status = scaler.status()
        assert status["initial_executors"] == healthy, (status, healthy)  # not initialExecutors=1
        done = job.query.lastProgress["batchId"] if job.query.lastProgress else -1
        wait_for(lambda: job.query.lastProgress and job.query.lastProgress["batchId"] >= done + 2, 120,
                 what="two batches of the restarted query")
        job.stop()
        failed = JvmBridge(spark.sparkContext).snapshot()["totals"]["tasksFailed"]
        ids = job.written_ids()
        assert ids and exactly_once(ids), "every row of both runs written exactly once"
        print(f"FIGURES driver-killed: rows_out={len(ids)} (ids 0..n-1, each once) "
              f"failed_tasks_after_restart={failed} healthy_target={healthy} "
              f"restored_target={status['initial_executors']} restored_after_s={restored_s:.0f}")
    finally:
        job.stop()
        spark.stop()
    baseline = [e for e in read_event_log(tmp_path / "second")
                if e["Event"].endswith("AutoscalerEvent") and e["reason"].startswith("baseline")]
    assert baseline and f"restored last healthy target {healthy}" in baseline[0]["reason"], baseline
