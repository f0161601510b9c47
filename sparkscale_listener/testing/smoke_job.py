"""A smoke job that runs on every supported Spark line (3.5 and 4.x): start, scale up, scale
down, and a ScalingEvent in the event log.

``python smoke_job.py WORKDIR`` runs a ``local-cluster`` of up to 3 one-core executors. The
query reads the built-in ``rate`` source (every Spark has it) through a Python UDF that sleeps a
controllable time per row: the cost is read from ``WORKDIR/cost`` (seconds per row), so the job
turns the load up by raising the cost, and down by lowering it. Prints ``RESULT {json}`` and exits
0 when it saw a scale-up and a scale-down after it.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql.functions import col, udf
from pyspark.sql.types import LongType

# Absolute imports: this file runs as a script (``python smoke_job.py``), outside its package.
from sparkscale_listener import autoscale, autoscaler

_cost = {"value": 0.0, "checked": 0.0}


def _cost_per_row(path: str) -> float:
    now = time.monotonic()
    if now - _cost["checked"] > 1.0:  # re-read once a second per Python worker
        _cost["checked"] = now
        try:
            _cost["value"] = float(Path(path).read_text())
        except (OSError, ValueError):
            pass
    return _cost["value"]


def smoke_conf(workdir: Path) -> dict[str, str]:
    """A 3-worker local-cluster of 1-core executors that scales fast, with a plain-JSON event log
    under ``workdir/events`` (the smoke jobs of every supported Spark line share it)."""
    return {
        "spark.master": "local-cluster[3,1,1024]", "spark.executor.cores": "1",
        "spark.executor.memory": "512m", "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.eventLog.enabled": "true", "spark.eventLog.dir": str(workdir / "events"),
        "spark.eventLog.compress": "false",
        "spark.sparkscale.minExecutors": "1", "spark.sparkscale.maxExecutors": "3",
        "spark.sparkscale.initialExecutors": "1", "spark.sparkscale.interval": "2s",
        "spark.sparkscale.metricsWindow": "10s", "spark.sparkscale.stabilizationInterval": "4s",
        "spark.sparkscale.provisioningTimeout": "60s",
    }


def main(workdir: Path, deadline_s: float = 420.0) -> int:
    (workdir / "events").mkdir(parents=True, exist_ok=True)
    cost_file = workdir / "cost"
    cost_file.write_text("0.001")
    conf = smoke_conf(workdir) | {"spark.sql.shuffle.partitions": "2",
                                  "spark.sparkscale.scaleDownInterval": "12s"}
    builder = SparkSession.builder.appName("sparkscale-smoke")
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = autoscale(builder)
    spark.sparkContext.setLogLevel("ERROR")
    scaler = autoscaler(spark)
    version = spark.version
    path = str(cost_file)

    @udf(LongType())
    def work(value: int) -> int:
        time.sleep(_cost_per_row(path))
        return value

    query = (spark.readStream.format("rate").option("rowsPerSecond", 40).option("numPartitions", 6).load()
             .select(work(col("value")).alias("value"))
             .writeStream.format("noop").trigger(processingTime="1 second").start())
    start = time.monotonic()
    try:
        def actions() -> list[str]:
            return [d["action"] for d in scaler.decisions() if d["applied"]]

        def wait(condition: object, what: str) -> None:
            while not condition():  # type: ignore[operator]
                if time.monotonic() - start > deadline_s:
                    raise TimeoutError(f"timed out waiting for {what}; applied: {actions()}")
                time.sleep(1.0)

        cost_file.write_text("0.05")  # 40 rows/s x 50 ms = 2 busy slots on 1 executor
        wait(lambda: "scale_up" in actions(), "a scale-up")
        cost_file.write_text("0.001")
        wait(lambda: "scale_down" in actions()[actions().index("scale_up"):], "a scale-down after it")
        applied = actions()
    finally:
        query.stop()
        spark.stop()
    # Read after stop: the event log is complete then. Spark 4 writes rolling logs (a folder).
    events = []
    for log in (workdir / "events").rglob("*"):
        if log.is_file() and not log.name.startswith("."):
            events += [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    scaling = [e for e in events if e.get("Event") == "io.sparkscale.bridge.ScalingEvent"]
    result = {"spark": version, "applied": applied, "scaling_events": len(scaling),
              "seconds": round(time.monotonic() - start)}
    print("RESULT " + json.dumps(result), flush=True)
    return 0 if scaling else 1


if __name__ == "__main__":
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    raise SystemExit(main(Path(sys.argv[1])))
