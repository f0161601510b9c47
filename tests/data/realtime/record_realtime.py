"""Record how a Spark 4 real-time-mode query looks to a driver: its progress and its tasks.

Run on purpose (through the machine's heavy-run lock), never by pytest:

    /work/shared/tools/serial .venv/bin/python tests/data/realtime/record_realtime.py [WORKDIR]

A real Kafka broker (tests/kafka_broker.py), Spark's own Kafka connector, and a ``local-cluster``
of 3 one-core executors. One real-time-mode query (``trigger(realTime=...)``) reads a topic of
2 partitions and writes another topic (Kafka to Kafka, update mode: what real-time mode allows).
The script then

1. lets it run a few batches;
2. starts a micro-batch query (a 2-second processing-time trigger, file sink) in the same
   application and lets both run;
3. kills, through ``SparkContext.killExecutor`` (the call a scale-down makes), an executor that
   runs one of the real-time query's tasks, and watches what the batch does.

Everything the listeners saw is written next to this file: ``progress.json`` (the real-time
query's progress events as a StreamingQueryListener received them, with the wall time of
arrival), ``tasks.json`` (task starts and ends, stages and jobs, executors added and removed, in
the order of the event log, with the phase marks), ``summary.json`` (what the script observed,
e.g. whether the query survived the kill). README.md says what they show.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from kafka_broker import KafkaBroker, connector_jars  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql.streaming import StreamingQueryListener  # noqa: E402

from sparkscale_listener.spark.jars import installed_versions  # noqa: E402
from sparkscale_listener.testing.demo import read_event_log, wait_for  # noqa: E402

KEPT_EVENTS = ("SparkListenerTaskStart", "SparkListenerTaskEnd", "SparkListenerStageSubmitted",
               "SparkListenerStageCompleted", "SparkListenerJobStart", "SparkListenerJobEnd",
               "SparkListenerExecutorAdded", "SparkListenerExecutorRemoved")


class Recorder(StreamingQueryListener):
    """Every query event with its wall time of arrival in the driver."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def _add(self, kind: str, payload: dict[str, Any]) -> None:
        with self.lock:
            self.events.append({"received_at": time.time(), "event": kind, **payload})

    def onQueryStarted(self, event: Any) -> None:
        self._add("started", {"id": str(event.id), "name": event.name})

    def onQueryProgress(self, event: Any) -> None:
        self._add("progress", {"progress": json.loads(event.progress.json)})

    def onQueryIdle(self, event: Any) -> None:
        self._add("idle", {"id": str(event.id)})

    def onQueryTerminated(self, event: Any) -> None:
        self._add("terminated", {"id": str(event.id), "exception": event.exception})


def compact_listener_event(e: dict[str, Any]) -> dict[str, Any]:
    kind = e["Event"].removeprefix("SparkListener")
    if kind in ("TaskStart", "TaskEnd"):
        info = e["Task Info"]
        out = {"event": kind, "stage": e["Stage ID"], "stage_attempt": e["Stage Attempt ID"],
               "task": info["Task ID"], "partition": info.get("Partition ID", info.get("Index")),
               "attempt": info["Attempt"], "executor": info["Executor ID"], "launch": info["Launch Time"]}
        if kind == "TaskEnd":
            reason = e.get("Task End Reason") or {}
            out.update(finish=info["Finish Time"], failed=info["Failed"], killed=info["Killed"],
                       reason=reason.get("Reason"),
                       reason_detail=(reason.get("Loss Reason") or reason.get("Kill Reason")
                                      or reason.get("Description") or reason.get("Class Name")),
                       records_read=next((a["Value"] for a in info.get("Accumulables", [])
                                          if a.get("Name") == "internal.metrics.input.recordsRead"), None))
        return out
    if kind in ("StageSubmitted", "StageCompleted"):
        info = e["Stage Info"]
        return {"event": kind, "stage": info["Stage ID"], "attempt": info["Stage Attempt ID"],
                "name": info["Stage Name"][:60], "tasks": info["Number of Tasks"],
                "submitted": info.get("Submission Time"), "completed": info.get("Completion Time"),
                "failure": (info.get("Failure Reason") or "")[:300] or None}
    if kind in ("JobStart", "JobEnd"):
        props = e.get("Properties") or {}
        out = {"event": kind, "job": e["Job ID"],
               "time": e.get("Submission Time") if kind == "JobStart" else e.get("Completion Time")}
        if kind == "JobStart":
            out.update(stages=e.get("Stage IDs"), query=props.get("sql.streaming.queryId"),
                       batch=props.get("streaming.sql.batchId"),
                       description=(props.get("spark.job.description") or "")[:80])
        else:
            result = e.get("Job Result") or {}
            out.update(result=result.get("Result"),
                       exception=(result.get("Exception") or {}).get("Message", "")[:300] or None)
        return out
    if kind == "ExecutorAdded":
        return {"event": kind, "executor": e["Executor ID"], "time": e["Timestamp"]}
    return {"event": kind, "executor": e["Executor ID"], "time": e["Timestamp"],
            "reason": e.get("Removed Reason")}


def executor_ids(spark: SparkSession) -> list[str]:
    ids = spark.sparkContext._jsc.sc().getExecutorIds()  # a Scala Seq
    return sorted(str(ids.apply(i)) for i in range(ids.size()))


def running_rt_executors(spark: SparkSession, query_id: str) -> dict[str, list[int]]:
    """Executor id -> partitions of the query's tasks running there now (the UI's REST API: its
    active stages whose job description names the query, and their running tasks)."""
    import urllib.request

    sc = spark.sparkContext
    ui = sc.uiWebUrl
    out: dict[str, list[int]] = {}
    with urllib.request.urlopen(f"{ui}/api/v1/applications/{sc.applicationId}/stages?status=active",
                                timeout=10) as r:
        stages = json.load(r)
    named = [st for st in stages if query_id in (st.get("description") or "")]
    for stage in named or stages:  # all active stages if none names it
        url = (f"{ui}/api/v1/applications/{sc.applicationId}/stages/{stage['stageId']}/"
               f"{stage['attemptId']}/taskList?status=RUNNING&length=100")
        with urllib.request.urlopen(url, timeout=10) as r:
            for task in json.load(r):
                out.setdefault(task["executorId"], []).append(task["index"])
    return out


def main(workdir: Path) -> int:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    import pyspark

    spark_version, scala = installed_versions()
    connector_version, jars = connector_jars(spark_version, scala, Path(pyspark.__file__).parent / "jars")
    summary: dict[str, Any] = {"spark": spark_version, "connector": connector_version, "marks": {}}
    marks = summary["marks"]
    with KafkaBroker(workdir / "kafka").start() as broker:
        for topic, partitions in (("rt-in", 2), ("rt-out", 2), ("mb-in", 2)):
            broker.create_topic(topic, partitions)
        events_dir = workdir / "events"
        events_dir.mkdir(parents=True, exist_ok=True)
        spark = (SparkSession.builder.appName("realtime-record")
                 .master("local-cluster[3,1,1024]")
                 .config("spark.executor.memory", "512m").config("spark.executor.cores", "1")
                 .config("spark.jars", ",".join(str(j) for j in jars))
                 .config("spark.eventLog.enabled", "true").config("spark.eventLog.dir", str(events_dir))
                 .config("spark.eventLog.compress", "false")
                 .config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.shuffle.partitions", "2")
                 .getOrCreate())
        spark.sparkContext.setLogLevel("WARN")
        conf = spark.conf
        summary["conf_defaults"] = {k: conf.get(k) for k in (  # no default given: Spark's own
            "spark.sql.streaming.realTimeMode.minBatchDuration",
            "spark.sql.streaming.realTimeMode.allowlistCheck",
            "spark.sql.streaming.realTimeMode.asyncProgressTrackingByDefault.enabled")}
        # The batch duration may not be below the minimum (a number of ms, or a duration).
        minimum = summary["conf_defaults"]["spark.sql.streaming.realTimeMode.minBatchDuration"] or "0"
        minimum_ms = (float(minimum[:-2]) if minimum.endswith("ms") else float(minimum[:-1]) * 1000
                      if minimum.endswith("s") else float(minimum))
        batch = f"{max(10.0, minimum_ms / 1000):g} seconds"
        summary["batch"] = batch
        recorder = Recorder()
        spark.streams.addListener(recorder)
        wait_for(lambda: len(executor_ids(spark)) >= 3, 120, what="3 executors")
        marks["executors_ready"] = time.time()
        with broker.producer("rt-in") as rt_producer, broker.producer("mb-in") as mb_producer:
            rt_producer.set_rate(50)
            frame = (spark.readStream.format("kafka")
                     .option("kafka.bootstrap.servers", broker.bootstrap)
                     .option("subscribe", "rt-in").option("startingOffsets", "earliest").load())
            rt = (frame.selectExpr("key", "upper(CAST(value AS STRING)) AS value")
                  .writeStream.format("kafka").queryName("rt")
                  .option("kafka.bootstrap.servers", broker.bootstrap).option("topic", "rt-out")
                  .option("checkpointLocation", str(workdir / "rt-checkpoint"))
                  .outputMode("update").trigger(realTime=batch).start())
            marks["rt_started"] = time.time()
            summary["rt_id"] = str(rt.id)

            def rt_progress() -> list[dict[str, Any]]:
                return [e["progress"] for e in recorder.events
                        if e["event"] == "progress" and e["progress"]["id"] == str(rt.id)]

            wait_for(lambda: len(rt_progress()) >= 3 or rt.exception(), 120, poll_s=1,
                     what="3 real-time batches")
            summary["rt_exception_phase1"] = str(rt.exception()) if rt.exception() else None
            marks["rt_three_batches"] = time.time()

            # 2. A micro-batch query beside it.
            mb_producer.set_rate(20)
            mb_frame = (spark.readStream.format("kafka")
                        .option("kafka.bootstrap.servers", broker.bootstrap)
                        .option("subscribe", "mb-in").option("startingOffsets", "earliest").load())
            mb = (mb_frame.selectExpr("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value")
                  .writeStream.format("json").queryName("mb")
                  .option("path", str(workdir / "mb-out"))
                  .option("checkpointLocation", str(workdir / "mb-checkpoint"))
                  .trigger(processingTime="2 seconds").start())
            marks["mb_started"] = time.time()
            summary["mb_id"] = str(mb.id)

            def mb_progress() -> list[dict[str, Any]]:
                return [e["progress"] for e in recorder.events
                        if e["event"] == "progress" and e["progress"]["id"] == str(mb.id)
                        and e["progress"]["numInputRows"] > 0]

            try:
                wait_for(lambda: len(mb_progress()) >= 3, 60, poll_s=1,
                         what="3 micro-batches with rows beside the real-time query")
                summary["mb_ran_beside_rt"] = True
            except TimeoutError as err:
                summary["mb_ran_beside_rt"] = f"no: {err}"
            marks["mb_three_batches"] = time.time()
            summary["running_tasks_before_kill"] = running_rt_executors(spark, str(rt.id))
            # 3. Kill an executor that runs one of the real-time query's tasks (a scale-down).
            victim = next(iter(sorted(summary["running_tasks_before_kill"])), None)
            summary["killed_executor"] = victim
            if victim is not None:
                marks["kill"] = time.time()
                summary["kill_accepted"] = bool(spark.sparkContext._jsc.sc().killExecutor(victim))
            batches_at_kill = len(rt_progress())
            try:
                wait_for(lambda: len(rt_progress()) >= batches_at_kill + 2 or rt.exception(), 90, poll_s=1,
                         what="2 more real-time batches after the kill")
            except TimeoutError as err:
                summary["after_kill_wait"] = str(err)
            marks["after_kill"] = time.time()
            summary["rt_active_after_kill"] = rt.isActive
            summary["rt_exception_after_kill"] = str(rt.exception()) if rt.exception() else None
            summary["mb_active_after_kill"] = mb.isActive
            summary["running_tasks_end"] = running_rt_executors(spark, str(rt.id)) if rt.isActive else {}
            summary["executors_end"] = executor_ids(spark)
            for q in (mb, rt):
                if q.isActive:
                    q.stop()
            marks["stopped"] = time.time()
            summary["produced"] = {"rt-in": rt_producer.produced, "mb-in": mb_producer.produced}
        summary["rt_out_offsets"] = broker.end_offsets("rt-out")
        time.sleep(1)  # the listener bus delivers the termination events
        spark.stop()
    HERE.joinpath("progress.json").write_text(json.dumps(
        [e for e in recorder.events if e["event"] != "progress" or e["progress"]["id"] == summary["rt_id"]],
        indent=1) + "\n", encoding="utf-8")
    HERE.joinpath("progress_microbatch.json").write_text(json.dumps(
        [e for e in recorder.events
         if e["event"] == "progress" and e["progress"]["id"] == summary.get("mb_id")][:3],
        indent=1) + "\n", encoding="utf-8")
    listener = [compact_listener_event(e) for e in read_event_log(events_dir)
                if e.get("Event", "").removeprefix("org.apache.spark.scheduler.") in KEPT_EVENTS]
    HERE.joinpath("tasks.json").write_text(json.dumps(listener, indent=0) + "\n", encoding="utf-8")
    HERE.joinpath("summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n",
                                             encoding="utf-8")
    print(json.dumps(summary, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="rtm-"))))
