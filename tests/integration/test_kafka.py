"""Kafka end to end: a real broker (tests/kafka_broker.py), Spark's own Kafka connector, the job of
``examples/kafka_job.py`` on a real multi-executor cluster (local-cluster), and the autoscaler
deciding from the topic's lag.

Every record is ``k<id>`` -> ``<id>``; each scenario ends with every record in the file sink
exactly once (count and distinct keys) and no failed task. The scenarios share one application with
the connector (conftest.py's ``cluster``), each with an autoscaler of its own. Every wait is a
condition with a generous deadline; nothing here depends on how fast the machine is beyond those
deadlines. (The older Spark lines read Kafka in their smoke tests, test_spark_versions.py: a
backlog waiting at start, the scale-up sized from it and the scale-down once it is worked off.)
"""

from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pyspark
import pytest
from kafka_broker import KafkaBroker, KeyedProducer, connector_jars
from pyspark.sql.streaming import DataStreamWriter
from spark_cluster import SharedCluster, applied
from spark_lines import REPO

from examples.kafka_job import enrich, read_topic, start_query
from sparkscale_listener import stop_autoscaler
from sparkscale_listener.collect.backlog import kafka_lag
from sparkscale_listener.collect.snapshot import SourceOffsets
from sparkscale_listener.spark.bridge import JvmBridge
from sparkscale_listener.spark.jars import installed_versions
from sparkscale_listener.testing.demo import cost_learned, wait_for, wait_for_autoscaler

pytestmark = pytest.mark.spark

COST_S = 0.01  # per record: one 1-core executor reads about 100 records/s
MAX_OFFSETS = 500  # per micro-batch: five seconds of work for one executor
# Every batch pays a fixed price per task (8 partitions: 8 tasks, each with a Python worker and a
# file to write): a trigger of a few seconds keeps that small next to the records' own work.
TRIGGER = "2 seconds"


@pytest.fixture(scope="module")
def connector() -> list[Path]:
    """Spark's Kafka connector for the Spark of this process, as jars for spark.jars."""
    spark_version, scala = installed_versions()
    version, jars = connector_jars(spark_version, scala, Path(pyspark.__file__).parent / "jars")
    assert version.split(".")[0] == spark_version.split(".")[0], (version, spark_version)
    return jars


@pytest.fixture(scope="module")
def cluster(connector: list[Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedCluster]:
    """The scenarios' one application, with the connector on its class path (as examples/kafka_job.py
    puts it there: spark.jars)."""
    conf = {"spark.jars": ",".join(str(j) for j in connector),
            "spark.sql.streaming.numRecentProgressUpdates": "1000",
            # Four 2-second batches in a window: the per-batch cost of 8 tasks averages out.
            "spark.sparkscale.metricsWindow": "8s",
            # Kafka's source asks for each partition's task to run on the executor its hash picks
            # among those the driver knows (where its cached consumer lives); Spark's delay scheduling
            # then holds the task up to 3 s for that executor. In one suite run three executors read
            # no faster than one (batches of 500 records ~6 s, against ~2.7 s in other runs), as if
            # tasks waited on executors busy or gone; these scenarios are about decisions, so a task
            # runs wherever a slot is free.
            "spark.locality.wait": "0s"}
    with SharedCluster(tmp_path_factory.mktemp("kafka-cluster"), "it-kafka", conf=conf) as shared:
        yield shared


def start_job(spark: Any, broker: KafkaBroker, topic: str, workdir: Path, **options: str) -> Any:
    frame = read_topic(spark, broker.bootstrap, topic, MAX_OFFSETS, options=options)
    return start_query(enrich(frame, COST_S), workdir / f"{topic}-out", workdir / f"{topic}-checkpoint",
                       name=topic, trigger=TRIGGER)


def offsets(source: dict[str, Any], key: str) -> dict[str, Any] | None:
    value = source.get(key)
    return json.loads(value) if isinstance(value, str) else value


def lag(progress: dict[str, Any] | None) -> float | None:
    """The topic's lag in offsets at the start of the progress's batch."""
    if not progress:
        return None
    source = progress["sources"][0]
    return kafka_lag(offsets(source, "endOffset"), offsets(source, "latestOffset"))[0]


def consumed(query: Any) -> int:
    """Offsets read by the query's completed batches (its last end offsets, summed)."""
    progress = query.lastProgress
    end = offsets(progress["sources"][0], "endOffset") if progress else None
    return int(sum(sum(partitions.values()) for partitions in (end or {}).values()))


def query_evaluation(decision: dict[str, Any], name: str) -> dict[str, Any]:
    return next(q for q in (decision.get("queries") or {}).values() if q["name"] == name)


def finish(cluster: SharedCluster, query: Any, producer: KeyedProducer, workdir: Path, topic: str,
           failed_before: int) -> None:
    """Stop producing, let the query read everything, stop it; then every record is in the sink
    exactly once and no task failed since ``failed_before``. (Records of a topic are k0, k1, ...: a
    producer that continued another one's ids ends at the topic's total.)"""
    producer.close()
    sent = producer.next_id
    wait_for(lambda: consumed(query) >= sent or query.exception(), 300,
             what=f"the query to read all {sent} records")
    assert query.exception() is None, query.exception()
    query.stop()
    # Reading the sink back is a batch job of many tasks: not one for the scenario's autoscaler to
    # scale up for (the next scenario would start by removing what it added).
    stop_autoscaler(cluster.spark)
    # One job: the keys with a schema given (no job to infer it, no second one to count).
    sink = cluster.spark.read.schema("key string").json(str(workdir / f"{topic}-out"))
    keys = [row.key for row in sink.collect()]
    assert len(keys) == sent, "each record written once"
    assert set(keys) == {f"k{i}" for i in range(sent)}, "every record written"
    assert cluster.tasks_failed() == failed_before


def lag_timeline(query: Any) -> list[tuple[float, float]]:
    """(epoch seconds when the batch's progress was reported, lag in offsets at that batch)."""
    out = []
    for p in query.recentProgress:
        value = lag(p)
        if value is None:
            continue
        started = datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp()
        out.append((started + p["durationMs"].get("triggerExecution", 0) / 1000.0, value))
    return out


def tear_down(scaler: Any, query: Any, producer: KeyedProducer) -> None:
    """After a scenario, passed or not: its story in the log, then producer and query stopped."""
    show(scaler, query)
    producer.__exit__(None, None, None)
    query.stop()


def show(scaler: Any, query: Any) -> None:
    """What happened, for the log of a failing test: decisions that did something, and the lag."""
    for d in scaler.decisions():
        if d["action"] != "none" or d["applied"]:
            notes = [q["note"] for q in (d.get("queries") or {}).values()]
            print(f"{d['time']:.0f} {d['action']} {d['from_executors']}->{d['to_executors']} "
                  f"applied={d['applied']}: {d['reason'][:400]} | {notes}")
    print("lag:", [(round(t) % 1000, int(v)) for t, v in lag_timeline(query)])
    # Each batch's rows and seconds: whether the executors were slow or too few.
    took = [(p["numInputRows"], round(p["durationMs"].get("triggerExecution", 0) / 1000, 1))
            for p in query.recentProgress]
    print("batches (rows, s):", took)


def test_lag_drives_a_scale_up_and_executors_return_after_the_load_falls(
        broker: KafkaBroker, cluster: SharedCluster, tmp_path: Path) -> None:
    topic = "orders8"
    broker.create_topic(topic, 8)
    # Executors given back in one step, not halved tick by tick, after a short delay: the test is
    # about whether, not how or when.
    scaler = cluster.scenario(**{"scaleDown.maxFactor": "1.0", "scaleDownInterval": "4s"})
    spark, failed_before = cluster.spark, cluster.tasks_failed()
    producer = broker.producer(topic)
    producer.set_rate(20)
    query = start_job(spark, broker, topic, tmp_path)
    try:
        wait_for(lambda: scaler.status()["live_executors"] == 1 and len(scaler.decisions()) >= 3, 120,
                 what="the baseline of 1 executor and the first decisions")
        assert not applied(scaler, "scale_up"), "the low load fits one executor"
        producer.set_rate(100)  # more than one executor reads (about 75/s): the lag grows
        stepped = time.time()
        up = wait_for(lambda: next(iter(applied(scaler, "scale_up")), None), 180,
                      what="a scale-up for the growing lag")
        assert up["to_executors"] > up["from_executors"]
        evaluation = query_evaluation(up, topic)
        # Sized for the load that came: the arrivals at the new rate (two batches show them, often
        # before the lag is worth a catch-up; each batch may read all that waits, so Kafka shows no
        # lag, only longer batches), or else the lag as part of the demand, named in the reason (its
        # catch-up, or the backlog itself once it is past backlogThreshold).
        if evaluation["target_rate"] < 90:
            assert evaluation["backlog"] > 0, evaluation
            demand = evaluation["target_rate"] + evaluation["catch_up_rate"]
            assert demand > evaluation["input_rate"], evaluation
            assert re.search(r"catch-up [\d.,]+ rows/s|backlog [\d.,]+k? rows", up["reason"]), up
        wait_for(lambda: scaler.status()["live_executors"] >= 2, 120, what="the added executors")
        # Still at the high load: the larger cluster works the lag off, until a batch reads all
        # that waits (no lag at its start) instead of its maxOffsetsPerTrigger.
        wait_for(lambda: lag(query.lastProgress) == 0, 300,
                 what="the lag to be worked off at the high load")
        # The step is answered in one direction only: no executor given back while the lag was there.
        assert not [d for d in applied(scaler, "scale_down") if d["time"] > stepped], scaler.decisions()[-5:]
        # The load falls away. (A trickle of records would do as well on a quiet machine; on a busy
        # one each of the 8 tasks of a batch costs tenths of a second however few its records, and
        # that fixed cost keeps more than one executor busy.)
        producer.set_rate(0)
        # Between batches the bridge reads the topic's latest offsets: all that was sent, over its 8
        # partitions (the arrivals a batch will read, before it completes).
        bridge = JvmBridge(spark.sparkContext)
        def latest_offsets() -> float:
            return (bridge.poll().source_offsets.get(query.id) or SourceOffsets()).offsets

        wait_for(lambda: latest_offsets() == producer.next_id, 60,
                 what="the bridge's reading of the topic's latest offsets")
        assert bridge.poll().source_offsets[query.id].partitions == 8
        wait_for_autoscaler(
            scaler, lambda: applied(scaler, "scale_down") and scaler.status()["live_executors"] == 1,
            240, what="executors given back after the load fell")
        down = applied(scaler, "scale_down")[-1]
        assert down["time"] > up["time"] and down["to_executors"] < down["from_executors"]
        finish(cluster, query, producer, tmp_path, topic, failed_before)
    finally:
        tear_down(scaler, query, producer)
    events = cluster.events("ScalingEvent")
    # The event log holds the scale-up with the decision's reason.
    assert any(e["action"] == "scale_up" and e["reason"] == up["reason"] for e in events), events
    assert any(e["action"] == "scale_down" for e in events), events


def test_a_two_partition_topic_never_gets_more_slots_than_it_can_use(
        broker: KafkaBroker, cluster: SharedCluster, tmp_path: Path) -> None:
    scaler = cluster.scenario()
    spark, failed_before = cluster.spark, cluster.tasks_failed()
    topic = "narrow"
    broker.create_topic(topic, 2)
    producer = broker.producer(topic)
    producer.set_rate(20)
    query = start_job(spark, broker, topic, tmp_path)
    try:
        # Learnt at the low rate's short batches; then a backlog (a batch's worth: 160 records/s
        # alone bind the cap, and every waiting record is one more to drain at the end), and 1.6
        # slot-seconds a second:
        # 2.3 slots at the 0.7 target, over the topic's 2 partitions whatever the backlog's catch-up
        # adds (at 100 records/s a run sized 1.4 slots once the waiting records were read, and no
        # decision was capped); two 1-core executors still keep up (about 180 records/s).
        wait_for(lambda: cost_learned(scaler), 120, what="the model of the query's batch cost")
        producer.send(500)
        producer.set_rate(160)

        def capped_decisions() -> list[dict[str, Any]]:
            return [d for d in scaler.decisions() if d.get("queries")
                    and query_evaluation(d, topic)["capped"]]

        wait_for(lambda: len(capped_decisions()) >= 3 and scaler.status()["live_executors"] == 2, 240,
                 what="decisions capped at the topic's 2 partitions, on 2 executors")
        for d in scaler.decisions():
            assert d["to_executors"] <= 2, d  # 1 core each: 2 executors are 2 slots
            if d.get("queries"):
                evaluation = query_evaluation(d, topic)
                assert evaluation["required_slots"] <= 2 + 1e-9, evaluation
                assert evaluation["parallelism_cap"] in (None, 2), evaluation
        assert "capped at 2 parallel tasks" in capped_decisions()[-1]["details"]
        producer.set_rate(0)
        finish(cluster, query, producer, tmp_path, topic, failed_before)
    finally:
        tear_down(scaler, query, producer)


def test_kafka_errors_are_the_querys_own_and_the_autoscaler_carries_on(
        broker: KafkaBroker, cluster: SharedCluster, tmp_path: Path) -> None:
    broker.create_topic("short", 2)
    with broker.producer("short") as records:
        records.send(50)
    scaler = cluster.scenario()
    spark = cluster.spark
    # Offsets out of range: the query asks for offsets the log never had.
    frame = read_topic(spark, broker.bootstrap, "short", MAX_OFFSETS,
                       starting_offsets=json.dumps({"short": {"0": 5000, "1": 5000}}))
    beyond = start_query(frame, tmp_path / "beyond-out", tmp_path / "beyond-checkpoint", name="beyond",
                         trigger="1 second")
    # The topic deleted under a running query: started beside the failing one (their starts
    # overlap), deleted only once the out-of-range query has failed on its own error.
    doomed = start_job(spark, broker, "short", tmp_path)
    wait_for(lambda: not beyond.isActive, 120, what="the out-of-range query to fail")
    assert "Some data may have been lost" in str(beyond.exception())
    wait_for(lambda: consumed(doomed) >= 50, 120, what="the query to read the topic")
    broker.delete_topic("short")
    wait_for(lambda: not doomed.isActive, 180, what="the query to fail on the deleted topic")
    assert "UnknownTopicOrPartition" in str(doomed.exception())

    # The autoscaler kept deciding, with no error of its own and no backlog from either.
    decided = len(scaler.decisions())
    wait_for(lambda: len(scaler.decisions()) >= decided + 2, 60, what="two more decisions")
    status = scaler.status()
    assert status["errors"] == 0 and status["last_error"] is None, status
    assert not [d for d in scaler.decisions() if d["action"] != "none"], scaler.decisions()[-3:]
    for d in scaler.decisions():
        for q in (d.get("queries") or {}).values():
            assert not q["backlog_mode"] and not q["catch_up_rate"], q


@pytest.mark.skipif("realTime" not in inspect.signature(DataStreamWriter.trigger).parameters,
                    reason="this PySpark has no real-time mode (trigger(realTime=...) came with Spark 4.1)")
def test_a_real_time_mode_query_holds_a_slot_per_partition_and_no_more(
        broker: KafkaBroker, cluster: SharedCluster, tmp_path: Path) -> None:
    """Spark 4's real-time mode: a batch runs one task per Kafka partition for the batch's whole
    duration, so its executors are busy all the time whatever the load. Sized on a slot per task:
    2 partitions on 1-core executors hold 2 executors, never more from that busy time, never fewer;
    Kafka to Kafka (what the mode allows), every record once and no failed task."""
    source, sink = "rt-in", "rt-out"
    broker.create_topic(source, 2)
    broker.create_topic(sink, 2)
    scaler = cluster.scenario(initialExecutors="2", maxExecutors="3")
    spark, failed_before = cluster.spark, cluster.tasks_failed()
    producer = broker.producer(source)
    producer.set_rate(50)
    frame = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap)
             .option("subscribe", source).option("startingOffsets", "earliest").load())
    query = (frame.selectExpr("key", "value").writeStream.format("kafka").queryName("rt")
             .option("kafka.bootstrap.servers", broker.bootstrap).option("topic", sink)
             .option("checkpointLocation", str(tmp_path / "rt-checkpoint"))
             # 5 s batches, the mode's shortest (realTimeMode.minBatchDuration): boundaries sooner.
             .outputMode("update").trigger(realTime="5 seconds").start())
    try:
        def sized_on_its_tasks() -> list[dict[str, Any]]:
            return [d for d in scaler.decisions() if "real-time-mode tasks" in (d["reason"] or "")]

        # Decisions across one batch boundary at least (5 s batches, 1 s ticks); its tasks hold
        # 2 slots throughout.
        wait_for(lambda: len(sized_on_its_tasks()) >= 8 or query.exception(), 300,
                 what="decisions sized on the real-time query's tasks")
        assert query.exception() is None, query.exception()
        for d in sized_on_its_tasks():
            assert d["recommended_executors"] == 2 and d["required_slots"] == pytest.approx(2.0), d
        assert not applied(scaler), applied(scaler)
        status = scaler.status()
        assert status["target_executors"] == 2 and status["live_executors"] == 2, status
        producer.close()
        sent = producer.next_id
        wait_for(lambda: consumed(query) >= sent or query.exception(), 120,
                 what=f"the query to read all {sent} records")
        assert query.exception() is None, query.exception()
        query.stop()
        written = (spark.read.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap)
                   .option("subscribe", sink).option("startingOffsets", "earliest").load()
                   .selectExpr("CAST(key AS STRING) AS key"))
        keys = [row.key for row in written.collect()]
        assert len(keys) == sent, "each record written once"
        assert set(keys) == {f"k{i}" for i in range(sent)}, "every record written"
        assert cluster.tasks_failed() == failed_before
    finally:
        tear_down(scaler, query, producer)


def test_a_job_without_the_connector_fails_with_sparks_own_message(tmp_path: Path) -> None:
    # A fresh driver JVM (this process's already has the connector on its class path).
    script = (
        "from pyspark.sql import SparkSession\n"
        "from sparkscale_listener import autoscale, autoscaler\n"
        "spark = autoscale(SparkSession.builder.master('local[1]').config('spark.ui.enabled', 'false'))\n"
        "try:\n"
        "    spark.readStream.format('kafka').option('kafka.bootstrap.servers', '127.0.0.1:9')"
        ".option('subscribe', 'x').load()\n"
        "except Exception as err:\n"
        "    print('ERROR', type(err).__name__, str(err).splitlines()[0])\n"
        "print('STATUS', autoscaler(spark).status()['errors'])\n"
        "spark.stop()\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    run = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "ERROR AnalysisException" in run.stdout and "kafka" in run.stdout.lower(), run.stdout
    assert "STATUS 0" in run.stdout
