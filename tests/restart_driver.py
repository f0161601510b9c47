"""The drivers of the restart test (tests/integration/test_restart_spark.py).

The first one runs in its own process so that the test can kill it like a crashed driver (SIGKILL
to its process group: Python, the driver JVM and, on local-cluster, the executors with it):
``python tests/restart_driver.py WORKDIR``. It scales up under load, prints ``HEALTHY <target>``
once the scale-up is confirmed healthy, and keeps the query running until it is killed.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from spark_cluster import fast_conf

from sparkscale_listener import autoscaler
from sparkscale_listener.testing.demo import StreamingJob, build_session, cost_learned, wait_for


def session(workdir: Path, run: str) -> Any:
    """Both drivers' settings: the same SQLite state file and query checkpoint."""
    conf = fast_conf(workdir, extra={
        "spark.eventLog.dir": str(workdir / run),
        "spark.sparkscale.stateStore": "sqlite",
        "spark.sparkscale.stateStore.sqlite.path": str(workdir / "sparkscale.db"),
        "spark.sparkscale.checkers": "",  # a scaling is healthy at once: the restart is the subject
    })
    (workdir / run).mkdir(exist_ok=True)
    return build_session("it-restart", conf)


def first_driver(workdir: Path) -> None:
    spark = session(workdir, "first")
    scaler = autoscaler(spark)
    job = StreamingJob(spark, workdir, rows_per_second=30).start()
    wait_for(lambda: scaler.status()["target_executors"] == 1, 120, what="the baseline of 1 executor")
    # Learnt at the low rate's short batches (on 1 executor the high rate's take ~4 s each).
    wait_for(lambda: cost_learned(scaler), 120, what="the model of the query's batch cost")
    job.set_rate(220)
    wait_for(lambda: (scaler.status()["healthy_target"] or 0) > 1, 180, what="a scale-up, confirmed healthy")
    print(f"HEALTHY {scaler.status()['healthy_target']}", flush=True)
    while True:  # mid-run, under load, until killed
        time.sleep(1)


if __name__ == "__main__":
    first_driver(Path(sys.argv[1]))
