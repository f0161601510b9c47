"""A streaming job as a user submits it: ``spark-submit --master spark://... submitted_job.py WORKDIR``.

It has the user's one line and nothing else of ours on the command line: no ``--jars``, no
``--conf spark.plugins``; settings after WORKDIR (``KEY=VALUE ...``) override the job's own. The
load steps low -> high; the job prints each phase, then one line ``RESULT {json}`` with the
applied actions and the exactly-once check. Each load phase lasts until the autoscaler answered it:
a scale-down (what the Worker handed over at start is more than the low load needs), then a
scale-up. (A scale-down after a scale-up is the local-cluster tests' business.) Used by the
spark-submit test on a standalone Master and Worker started as separate daemons.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pyspark.sql import SparkSession

# Absolute imports: spark-submit runs this file as a script (the test copies it out of the package).
from sparkscale_listener import autoscale, autoscaler
from sparkscale_listener.testing.demo import (
    DEMO_SPARKSCALE_CONF,
    StreamingJob,
    exactly_once,
    quiet_executor_removal_noise,
    wait_for,
)


def main(workdir: Path, settings: dict[str, str]) -> int:
    (workdir / "events").mkdir(parents=True, exist_ok=True)
    builder = (SparkSession.builder.appName("sparkscale-submitted")
               .config("spark.eventLog.enabled", "true")
               .config("spark.eventLog.dir", str(workdir / "events"))
               .config("spark.eventLog.compress", "false")
               .config("spark.ui.showConsoleProgress", "false"))
    for key, value in DEMO_SPARKSCALE_CONF.items():
        # Keep what the Worker hands us at start; take minExecutors from spark-submit's --conf.
        if key not in ("spark.sparkscale.initialExecutors", "spark.sparkscale.minExecutors"):
            builder = builder.config(key, value)
    # Three idle executors still pay every task's fixed cost (a Python worker, the sink's file), so
    # the recommendation at low load wavers; a short delay lets the scale-down through.
    builder = builder.config("spark.sparkscale.scaleDownInterval", "8s")
    for key, value in settings.items():  # the caller's, after the job's own (a test's faster ones)
        builder = builder.config(key, value)
    spark = autoscale(builder)  # the one line
    spark.sparkContext.setLogLevel("ERROR")
    quiet_executor_removal_noise(spark)
    scaler = autoscaler(spark)
    job = StreamingJob(spark, workdir).start()
    try:
        def applied() -> list[dict]:
            return [d for d in scaler.decisions() if d["applied"]]

        def actions() -> list[str]:
            if not job.query.isActive:  # fail now, not at the deadline
                raise RuntimeError(f"the query stopped: {job.query.exception()}")
            return [d["action"] for d in applied()]

        # Each load phase lasts until the autoscaler has answered it (or the deadline passes):
        # the Worker's cores at start are more than the low load needs, the high load needs more
        # than what is left.
        phases = ((30, "low: give back what the load does not need",
                   lambda a: "scale_down" in a),
                  (220, "high: scale up",
                   lambda a: "scale_up" in a))
        for rate, what, answered in phases:
            job.set_rate(rate)
            print(f"load {rate} rows/s ({what})", flush=True)
            wait_for(lambda answered=answered: answered(actions()), 240, poll_s=0.5, what=what)
            print(f"  {scaler.status()['last_decision']['reason'][:160]}", flush=True)
        job.stop()
        ids = job.written_ids()
        result = {"applied": [{k: d[k] for k in ("action", "from_executors", "to_executors", "reason")}
                              for d in applied()],
                  "rows": len(ids), "exactly_once": exactly_once(ids),
                  "status": {k: v for k, v in scaler.status().items() if k != "last_decision"}}
        print("RESULT " + json.dumps(result, default=str), flush=True)
        return 0 if result["exactly_once"] else 1
    finally:
        job.stop()
        spark.stop()


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1]), dict(arg.split("=", 1) for arg in sys.argv[2:])))
