"""A streaming job as a user submits it to YARN:
``spark-submit --master yarn yarn_job.py WORKDIR RM_URL [KEY=VALUE ...]``.

It has the user's one line (``autoscale(SparkSession.builder...)``) and nothing else of ours on the
command line. Its queue has room for its ApplicationMaster and 2 executors; it starts with 1. Once
the autoscaler has learnt what a batch costs, the load steps high, then low, and each phase lasts
until the autoscaler answered it:

1. high: a scale-up beyond what the queue can hold; the missing executors never arrive, and the
   autoscaler holds at the 2 the queue gave (a capacity limit);
2. low: a scale-down, whose executor YARN's container is released.

At the end of each phase it records what the ResourceManager says of the application (its
running containers: the ApplicationMaster's and the executors'), then writes ``result.json`` in
WORKDIR (and prints it as ``RESULT {json}``, the driver's stdout in client mode): the applied
actions, the capacity limit, the containers, and the exactly-once check. The KEY=VALUE settings
override the job's own (the tests' faster ones). Used by tests/integration/test_yarn.py.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from sparkscale_listener import autoscale, autoscaler, stop_autoscaler
from sparkscale_listener.testing.demo import (
    DEMO_SPARKSCALE_CONF,
    StreamingJob,
    cost_learned,
    exactly_once,
    quiet_executor_removal_noise,
    wait_for,
)


def app_report(rm_url: str, app_id: str) -> dict[str, Any]:
    """The ResourceManager's report of this application (REST: /ws/v1/cluster/apps/<id>)."""
    request = urllib.request.Request(f"{rm_url}/ws/v1/cluster/apps/{app_id}",
                                     headers={"Accept": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        app = json.load(response)["app"]
    return {k: app.get(k) for k in ("queue", "state", "runningContainers", "allocatedMB")}


def main(workdir: Path, rm_url: str, settings: dict[str, str] | None = None) -> int:
    started = time.monotonic()
    (workdir / "events").mkdir(parents=True, exist_ok=True)
    builder = (SparkSession.builder.appName("sparkscale-yarn")
               .config("spark.eventLog.enabled", "true")
               .config("spark.eventLog.dir", str(workdir / "events"))
               .config("spark.eventLog.compress", "false")
               .config("spark.ui.showConsoleProgress", "false"))
    for key, value in DEMO_SPARKSCALE_CONF.items():
        builder = builder.config(key, value)
    # The queue's second executor took over 20 s to register once on a busy 2-core machine: the
    # limit then held at 1, and the scale-down phase had nothing to give back.
    builder = (builder.config("spark.sparkscale.maxExecutors", "4")
               .config("spark.sparkscale.provisioningTimeout", "30s")
               .config("spark.sparkscale.scaleDownInterval", "8s"))
    for key, value in (settings or {}).items():
        builder = builder.config(key, value)
    spark = autoscale(builder)  # the one line
    spark.sparkContext.setLogLevel("ERROR")
    quiet_executor_removal_noise(spark)
    scaler = autoscaler(spark)
    app_id = spark.sparkContext.applicationId
    job = StreamingJob(spark, workdir).start()
    reports: dict[str, dict[str, Any]] = {}
    phases: dict[str, float] = {"session": time.monotonic() - started}
    try:
        def applied() -> list[dict[str, Any]]:
            return [d for d in scaler.decisions() if d["applied"]]

        def settled() -> bool:
            if not job.query.isActive:  # fail now, not at the deadline
                raise RuntimeError(f"the query stopped: {job.query.exception()}")
            status = scaler.status()
            return status["live_executors"] == status["target_executors"] and status["pending_executors"] == 0

        def containers_match() -> bool:
            # YARN reports a container released once the executor's JVM has exited.
            return app_report(rm_url, app_id)["runningContainers"] == 1 + scaler.status()["live_executors"]

        # The cost learnt at the job's first 20 rows/s: at 230 rows/s one executor's batches take
        # seconds each, and the backlog built while they taught it took the low phase half a minute
        # to drain.
        wait_for(lambda: cost_learned(scaler), 120, poll_s=0.5, what="the model of the query's batch cost")
        phases["cost_learned"] = time.monotonic() - started
        # 1 slot does ~100 rows/s at 10 ms a row: 230 rows/s asks for more than the queue's 2, and
        # the backlog the 2 build meanwhile stays small enough to drain within seconds at low load.
        job.set_rate(230)
        print("load 230 rows/s (high: scale up past the queue's room)", flush=True)
        wait_for(lambda: scaler.status()["capacity_limit"] and settled(), 240, poll_s=0.5,
                 what="a capacity limit, held at what the queue gave")
        held = scaler.status()["capacity_limit"]["executors"]
        if held != 2:  # fail now, not after waiting for a scale-down from 1
            raise RuntimeError(f"the limit held at {held} executors, not the queue's 2: "
                               "one registered after provisioningTimeout")
        wait_for(containers_match, 60, what="YARN to report one container per executor")
        reports["at_capacity"] = app_report(rm_url, app_id)
        phases["at_capacity"] = time.monotonic() - started
        print(f"  {scaler.status()['capacity_limit']}; YARN: {reports['at_capacity']}", flush=True)
        # Each 1-second batch pays a fixed cost per task (6 of them); at 5 rows/s that is most of
        # what it does, and well within one executor.
        job.set_rate(5)
        print("load 5 rows/s (low: scale down)", flush=True)
        wait_for(lambda: "scale_down" in [d["action"] for d in applied()] and settled(), 240, poll_s=0.5,
                 what="a scale-down after the capacity limit")
        wait_for(containers_match, 60, what="YARN to report the scaled-down executor's container released")
        reports["after_scale_down"] = app_report(rm_url, app_id)
        phases["scaled_down"] = time.monotonic() - started
        print(f"  YARN: {reports['after_scale_down']}", flush=True)
        return finish(spark, scaler, job, workdir, app_id, reports, phases)
    finally:
        job.stop()
        spark.stop()


def finish(spark: SparkSession, scaler: Any, job: StreamingJob, workdir: Path, app_id: str,
           reports: dict[str, dict[str, Any]], phases: dict[str, float]) -> int:
    """Stop the query, read the sink back, write result.json (and print it)."""
    job.stop()
    decisions, status = [d for d in scaler.decisions() if d["applied"]], scaler.status()
    stop_autoscaler(spark)  # reading the sink back is a batch job: not one to scale for
    ids = job.written_ids()
    result = {"app_id": app_id,
              "applied": [{k: d[k] for k in ("action", "from_executors", "to_executors", "reason")}
                          for d in decisions],
              "rows": len(ids), "exactly_once": exactly_once(ids), "yarn": reports, "phases_s": phases,
              "status": {k: v for k, v in status.items() if k != "last_decision"}}
    text = json.dumps(result, default=str)
    (workdir / "result.json").write_text(text, encoding="utf-8")
    print("RESULT " + text, flush=True)
    return 0 if result["exactly_once"] else 1


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1]), sys.argv[2],
                          settings=dict(arg.split("=", 1) for arg in sys.argv[3:])))
