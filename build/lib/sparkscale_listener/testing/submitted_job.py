"""A streaming job as a user submits it: ``spark-submit --master spark://... submitted_job.py WORKDIR``.

It has the user's one line and nothing else of ours on the command line: no ``--jars``, no
``--conf spark.plugins``. The load steps low -> high -> low; the job prints the timeline, then one
line ``RESULT {json}`` with the applied actions and the exactly-once check, and exits 0 when it saw
at least one scale-up and one scale-down after it. Used by the spark-submit test on a standalone
Master and Worker started as separate daemons.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pyspark.sql import SparkSession

from sparkscale_listener import autoscale, autoscaler
from sparkscale_listener.testing.demo import (
    DEMO_SPARKSCALE_CONF,
    DEMO_STEPS,
    StreamingJob,
    exactly_once,
    quiet_executor_removal_noise,
    timeline,
)


def main(workdir: Path) -> int:
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
    spark = autoscale(builder)  # the one line
    spark.sparkContext.setLogLevel("ERROR")
    quiet_executor_removal_noise(spark)
    scaler = autoscaler(spark)
    job = StreamingJob(spark, workdir).start()
    try:
        def applied() -> list[dict]:
            return [d for d in scaler.decisions() if d["applied"]]

        def up_then_down() -> bool:
            if not job.query.isActive:  # fail now, not at the deadline
                raise RuntimeError(f"the query stopped: {job.query.exception()}")
            actions = [d["action"] for d in applied()]
            return "scale_up" in actions and "scale_down" in actions[actions.index("scale_up"):]

        for _ in timeline(job, scaler, DEMO_STEPS, up_then_down, deadline_s=300):
            pass
        job.stop()
        ids = job.written_ids()
        result = {"applied": [{k: d[k] for k in ("action", "from_executors", "to_executors", "reason")}
                              for d in applied()],
                  "rows": len(ids), "exactly_once": exactly_once(ids),
                  "status": {k: v for k, v in scaler.status().items() if k != "last_decision"}}
        print("RESULT " + json.dumps(result, default=str), flush=True)
        return 0 if up_then_down() and result["exactly_once"] else 1
    finally:
        job.stop()
        spark.stop()


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1])))
