"""Read-and-scale smoke through Spark's own Kafka connector, run by tests/integration/test_kafka.py
once per older Spark line, in that line's virtualenv.

    python tests/kafka/smoke_job.py WORKDIR BOOTSTRAP TOPIC RECORDS JAR[,JAR...]

The topic already holds RECORDS records (a backlog waiting at start). The job is the one in
``examples/kafka_job.py`` on a ``local-cluster`` of up to 3 one-core executors; it runs until the
autoscaler scaled up for the backlog and every record reached the sink, then prints
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

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from examples.kafka_job import build_session, enrich, read_topic, start_query  # noqa: E402
from sparkscale_listener import autoscaler  # noqa: E402
from sparkscale_listener.spark.bridge import JvmBridge  # noqa: E402
from sparkscale_listener.testing.smoke_job import smoke_conf  # noqa: E402


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


def main(workdir: Path, bootstrap: str, topic: str, records: int, jars: list[str],
         deadline_s: float = 420.0) -> int:
    (workdir / "events").mkdir(parents=True, exist_ok=True)
    conf = smoke_conf(workdir) | {"spark.sparkscale.catchUpDuration": "30s"}
    spark = build_session("sparkscale-kafka-smoke", connector_jars=jars, conf=conf)
    spark.sparkContext.setLogLevel("ERROR")
    scaler = autoscaler(spark)
    version = spark.version
    frame = enrich(read_topic(spark, bootstrap, topic, max_offsets_per_trigger=300), 0.01)
    query = start_query(frame, workdir / "out", workdir / "checkpoint", name="kafka-smoke",
                        trigger="1 second")
    start = time.monotonic()
    try:
        def applied() -> list[dict[str, Any]]:
            return [d for d in scaler.decisions() if d["applied"]]

        def wait(condition: Any, what: str) -> None:
            while not condition():
                if query.exception() is not None:
                    raise RuntimeError(f"the query failed: {query.exception()}")
                if time.monotonic() - start > deadline_s:
                    raise TimeoutError(f"timed out waiting for {what}; applied: "
                                       f"{[d['action'] for d in applied()]}, consumed {consumed(query)}")
                time.sleep(1.0)

        wait(lambda: any(d["action"] == "scale_up" for d in applied()), "a scale-up for the backlog")
        wait(lambda: consumed(query) >= records, f"all {records} records read")
        query.stop()
        sink = spark.read.json(str(workdir / "out"))
        count, distinct = sink.count(), sink.select("key").distinct().count()
        failed = JvmBridge(spark.sparkContext).snapshot()["totals"]["tasksFailed"]
        actions = [(d["action"], d["reason"]) for d in applied()]
    finally:
        if query.isActive:
            query.stop()
        spark.stop()
    events = []
    for log in (workdir / "events").rglob("*"):
        if log.is_file() and not log.name.startswith("."):
            events += [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    scaling = [{"action": e.get("action"), "reason": e.get("reason")} for e in events
               if str(e.get("Event", "")).endswith("ScalingEvent")]
    result = {"spark": version, "applied": actions, "count": count, "distinct": distinct,
              "failed_tasks": failed, "scaling_events": scaling, "seconds": round(time.monotonic() - start)}
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    work, bootstrap_servers, topic_name, count_text, jar_list = sys.argv[1:6]
    raise SystemExit(main(Path(work), bootstrap_servers, topic_name, int(count_text), jar_list.split(",")))
