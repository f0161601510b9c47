"""The application of the Kubernetes cluster-mode test (tests/integration/test_kubernetes.py), submitted
with ``spark-submit --deploy-mode cluster``: its driver runs in a pod the test kubelet starts, and its
settings come from spark-submit's ``--conf`` only (the user's one line is all the code says).

``cluster_job.py WORKDIR first``: runs at the 2 executors its ``minExecutors`` asks for (a size
that is healthy once it runs: the baseline), writes ``first.json`` then, and runs until its pod is
killed. ``cluster_job.py WORKDIR second``: the restarted driver;
resumes the query from its checkpoint for two batches, stops, and writes ``second.json``: the
executor target it started at, whether every row reached the sink once, its failed tasks.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from pyspark.sql import SparkSession

from sparkscale_listener import autoscale, autoscaler
from sparkscale_listener.spark.bridge import JvmBridge
from sparkscale_listener.testing.demo import StreamingJob, exactly_once, wait_for


def write(path: Path, value: dict[str, object]) -> None:
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(value), encoding="utf-8")
    partial.rename(path)  # whole or absent: the test reads it as soon as it exists


def main(workdir: Path, run: str) -> None:
    spark = autoscale(SparkSession.builder)
    scaler = autoscaler(spark)
    job = StreamingJob(spark, workdir, name="k8s-cluster", rows_per_second=30).start()
    wait_for(lambda: scaler.status()["initial_executors"] is not None, 180, what="the baseline")
    app = {"app_id": spark.sparkContext.applicationId, "initial": scaler.status()["initial_executors"]}
    if run == "second":
        done = job.query.lastProgress["batchId"] if job.query.lastProgress else -1
        wait_for(lambda: job.query.lastProgress and job.query.lastProgress["batchId"] >= done + 2, 120,
                 what="two batches of the resumed query")
        job.stop()
        ids = job.written_ids()
        failed = JvmBridge(spark.sparkContext).snapshot()["totals"]["tasksFailed"]
        write(workdir / "second.json", {**app, "rows": len(ids), "exactly_once": exactly_once(ids),
                                        "failed_tasks": failed})
        spark.stop()
        return
    wait_for(lambda: scaler.status()["live_executors"] == 2 and scaler.status()["healthy_target"] == 2, 180,
             what="2 executors running, the healthy size")
    write(workdir / "first.json", {**app, "healthy": scaler.status()["healthy_target"]})
    while True:  # under load, until the pod is killed
        time.sleep(1)


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
