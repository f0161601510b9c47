"""The smoke test of an older Spark line, run by tests/integration/test_spark_versions.py in that
line's virtualenv (tests/spark_lines.py), so the driver runs that line's pyspark and loads its jar.

    python tests/older_line_smoke.py WORKDIR BOOTSTRAP TOPIC RECORDS JAR[,JAR...] CONF_JSON

The topic already holds RECORDS records (a backlog waiting at start); JAR... is Spark's Kafka
connector for this line; CONF_JSON holds the suite's autoscaler settings (tests/spark_cluster.py's
FAST: this script imports nothing of the tests, which need the newest pyspark).

The job is the one in ``examples/kafka_job.py`` on a ``local-cluster`` of up to 3 one-core
executors. It runs until the autoscaler scaled up for the backlog, every record reached the sink,
and the idle executors were given back (a scale-down after the scale-up); then it prints
``RESULT {json}``: the Spark version, the applied actions with their reasons, the sink's count and
distinct keys, failed tasks, and the ScalingEvents in the event log.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from examples.kafka_job import build_session, enrich, read_topic, start_query  # noqa: E402
from sparkscale_listener import autoscaler  # noqa: E402
from sparkscale_listener.spark.bridge import JvmBridge  # noqa: E402


def smoke_conf(workdir: Path, fast: dict[str, str]) -> dict[str, str]:
    """A 3-worker local-cluster of 1-core executors, 1 to 3 of them, with the suite's ``fast``
    settings and a plain-JSON event log under ``workdir/events``. The backlog is to be worked off
    within 10 s: with 30 s, one Spark 4.0 executor (the limit's 300 rows a batch in about 4 s)
    was at 0.89 of what the catch-up asked, inside the band, and no scale-up came."""
    return {
        "spark.master": "local-cluster[3,1,1024]", "spark.executor.cores": "1",
        "spark.executor.memory": "512m", "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.eventLog.enabled": "true", "spark.eventLog.dir": str(workdir / "events"),
        "spark.eventLog.compress": "false",
        "spark.sparkscale.minExecutors": "1", "spark.sparkscale.maxExecutors": "3",
        "spark.sparkscale.initialExecutors": "1", "spark.sparkscale.catchUpDuration": "10s",
        "spark.sparkscale.provisioningTimeout": "60s", **fast,
    }


def read_events(events_dir: Path) -> list[dict[str, Any]]:
    """The event logs' events (a Spark 4 log rolls: a folder, with hidden files beside the logs)."""
    events = []
    for log in sorted(events_dir.rglob("*")):
        if log.is_file() and not log.name.startswith("."):
            events += [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return events


def consumed(query: Any) -> int:
    """Offsets the query has read and committed (its last end offsets, summed)."""
    progress = query.lastProgress
    if not progress:
        return 0
    total = 0
    for source in progress.get("sources", []):
        end = source.get("endOffset")
        end = json.loads(end) if isinstance(end, str) else end
        for partitions in (end or {}).values():
            total += sum(partitions.values())
    return total


def main(workdir: Path, bootstrap: str, topic: str, records: int, jars: list[str], fast: dict[str, str],
         deadline_s: float = 420.0) -> int:
    (workdir / "events").mkdir(parents=True, exist_ok=True)
    spark = build_session("sparkscale-smoke", connector_jars=jars, conf=smoke_conf(workdir, fast))
    spark.sparkContext.setLogLevel("ERROR")
    scaler = autoscaler(spark)
    version = spark.version
    frame = enrich(read_topic(spark, bootstrap, topic, max_offsets_per_trigger=300), 0.01)
    query = start_query(frame, workdir / "out", workdir / "checkpoint", name="smoke", trigger="1 second")
    start = time.monotonic()
    try:
        def actions() -> list[str]:
            return [d["action"] for d in scaler.decisions() if d["applied"]]

        def wait(condition: Any, what: str) -> None:
            while not condition():
                if query.exception() is not None:
                    raise RuntimeError(f"the query failed: {query.exception()}")
                if time.monotonic() - start > deadline_s:
                    raise TimeoutError(f"timed out waiting for {what}; applied: {actions()}, "
                                       f"consumed {consumed(query)}")
                time.sleep(0.5)

        wait(lambda: "scale_up" in actions(), "a scale-up for the backlog")
        wait(lambda: consumed(query) >= records, f"all {records} records read")
        # The bridge reads the topic's latest offsets between batches (this line's connector classes,
        # by reflection): the records the topic holds, over its partitions.
        bridge = JvmBridge(spark.sparkContext)
        wait(lambda: query.id in bridge.poll().source_offsets, "the topic's latest offsets, read")
        reading = bridge.poll().source_offsets[query.id]
        wait(lambda: "scale_down" in actions()[actions().index("scale_up"):],
             "a scale-down once the backlog was worked off")
        query.stop()
        sink = spark.read.json(str(workdir / "out"))
        count, distinct = sink.count(), sink.select("key").distinct().count()
        failed = JvmBridge(spark.sparkContext).snapshot()["totals"]["tasksFailed"]
        applied = [(d["action"], d["reason"]) for d in scaler.decisions() if d["applied"]]
    finally:
        if query.isActive:
            query.stop()
        spark.stop()
    # Read after stop: the event log is complete then (Spark 4 writes rolling logs: a folder).
    scaling = [{"action": e.get("action"), "reason": e.get("reason")} for e in read_events(workdir / "events")
               if str(e.get("Event", "")).endswith("ScalingEvent")]
    result = {"spark": version, "applied": applied, "count": count, "distinct": distinct,
              "latest_offsets": [reading.offsets, reading.partitions],
              "failed_tasks": failed, "scaling_events": scaling, "seconds": round(time.monotonic() - start)}
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    work, bootstrap_servers, topic_name, count_text, jar_list, conf_json = sys.argv[1:7]
    raise SystemExit(main(Path(work), bootstrap_servers, topic_name, int(count_text), jar_list.split(","),
                          json.loads(conf_json)))
