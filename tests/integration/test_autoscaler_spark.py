"""The autoscaler end to end on a real multi-executor cluster (local-cluster: real executor JVMs
under an in-process standalone Master).

The scenarios on a cluster share one application, each with an autoscaler of its own: a batch job
sharing the application with a quiet query (its pending and running tasks count as demand, as
Spark's own dynamic allocation counts them, so the executors it runs on are neither taken away nor
killed), two stateful queries with shuffles sized together, scaled up and down with exact
results and no failed task, and a recurring ramp met by a pre-scale once its forecast is learnt
and checked. (How two queries' figures make one target, and holding still under a
steady noisy load, are the evaluator's and simulator's tests; on real Spark the Kafka, file-stream
and faults files hold a steady load too. Up and down under one query's load with every row once:
tests/integration/test_kubernetes.py, on pods.)

Every wait is a condition with a deadline; no test depends on how fast this machine is beyond the
generous deadlines."""

from __future__ import annotations

import json
import math
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pyspark import SparkContext
from pyspark.sql import SparkSession
from spark_cluster import SharedCluster, applied

from sparkscale_listener import ConfigError, autoscale, autoscaler
from sparkscale_listener.spark.bridge import BridgeNotInstalledError
from sparkscale_listener.testing import source as testing_source
from sparkscale_listener.testing.demo import (
    StreamingJob,
    cost_learned,
    read_event_log,
    wait_for,
    wait_for_autoscaler,
)

pytestmark = pytest.mark.spark
# The scenarios on a cluster share one application (conftest.py's ``cluster``), each with its own
# autoscaler: 3 one-core executors at most, 1 at the start.
CLUSTER = {"workers": 3}


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("spark.sparkscale.minExecutors", "two", "not an integer"),
        ("spark.sparkscale.utilization.target", "1.5", "0 < x <= 1"),
        ("spark.sparkscale.interval", "10 parsecs", "not a valid duration"),
        ("spark.sparkscale.mode", "turbo", "autoscale, recommend, reactive"),
        ("spark.sparkscale.maxExecuters", "4", "not a known key"),
        ("spark.sparkscale.metricsWindow", "-5s", "is negative"),
    ],
)
def test_bad_configuration_fails_before_the_session_starts(key: str, value: str, expected: str) -> None:
    builder = SparkSession.builder.master("local-cluster[1,1,1024]").config(key, value)
    with pytest.raises(ConfigError) as err:
        autoscale(builder)
    assert key in str(err.value) and value in str(err.value) and expected in str(err.value)
    assert SparkContext._active_spark_context is None  # nothing was started


def test_min_greater_than_max_fails_before_the_session_starts() -> None:
    builder = (SparkSession.builder.master("local-cluster[1,1,1024]")
               .config("spark.sparkscale.minExecutors", "5").config("spark.sparkscale.maxExecutors", "2"))
    with pytest.raises(ConfigError, match=r"minExecutors=5 is greater than .*maxExecutors=2"):
        autoscale(builder)
    assert SparkContext._active_spark_context is None


def test_dynamic_allocation_is_refused() -> None:
    builder = (SparkSession.builder.master("local-cluster[1,1,1024]")
               .config("spark.dynamicAllocation.enabled", "true"))
    with pytest.raises(ConfigError, match=r"spark\.dynamicAllocation\.enabled=true"):
        autoscale(builder)
    assert SparkContext._active_spark_context is None


def test_local_master_falls_back_to_recommend_mode() -> None:
    spark = autoscale(SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false"))
    try:
        status = autoscaler(spark).status()
        assert status["mode"] == "recommend"
    finally:
        spark.stop()


def test_a_second_session_does_not_inherit_the_first_sessions_settings() -> None:
    first = autoscale(SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
                      .config("spark.sparkscale.rollback.maxRollbacks", "1"))
    assert autoscaler(first).config.rollback_max == 1
    first.stop()
    second = autoscale(SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false"))
    try:
        assert autoscaler(second).config.rollback_max == 3  # the default, not the first's 1
    finally:
        second.stop()


def test_keys_of_a_second_call_on_a_running_session_are_reported_as_ignored(tmp_path: Path) -> None:
    # A notebook cell run again with a changed key: getOrCreate() hands back the running session,
    # whose autoscaler keeps its keys. Said, not silently ignored.
    events = tmp_path / "events.jsonl"

    def builder() -> Any:
        return (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
                .config("spark.sparkscale.eventHandlers", "jsonl")
                .config("spark.sparkscale.eventHandlers.jsonl.path", str(events)))

    spark = autoscale(builder())
    try:
        assert autoscale(builder()) is spark
        assert not [line for line in events.read_text().splitlines() if "keys-ignored" in line]
        autoscale(builder().config("spark.sparkscale.maxExecutors", "7"))
        assert autoscaler(spark).config.max_executors == 10
        notices = [e for e in map(json.loads, events.read_text().splitlines())
                   if e["details"].get("situation") == "keys-ignored"]
        assert [n["reason"] for n in notices] == [
            "the autoscaler of this application is already running with its own spark.sparkscale.* "
            "keys; changed ones are ignored until the SparkSession is stopped and created again: "
            "spark.sparkscale.maxExecutors"]
    finally:
        spark.stop()


def test_running_session_without_the_bridge_is_refused_with_the_fix() -> None:
    # spark.plugins="" explicitly: a session started earlier in this process leaves its settings
    # as JVM system properties, which a new SparkConf would inherit.
    spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
             .config("spark.plugins", "").getOrCreate())
    try:
        with pytest.raises(BridgeNotInstalledError) as err:
            autoscale(spark)
        message = str(err.value)
        assert "autoscale(SparkSession.builder" in message
        # The exact flags to add, with the jar of this Spark line.
        assert "--jars " in message and "sparkscale-bridge-spark4_2.13.jar" in message
        assert "--conf spark.plugins=io.sparkscale.bridge.SparkscalePlugin" in message
    finally:
        spark.stop()


def sleepy(seconds: float) -> Any:
    def task(x: int) -> int:
        time.sleep(seconds)
        return x
    return task


def test_a_batch_job_keeps_the_executors_its_tasks_need(cluster: SharedCluster) -> None:
    # The quiet query's 1 executor in one step once the jobs are done, after a shorter delay than
    # the file's (how long it is and how far one step goes are the policy's tests').
    scaler = cluster.scenario(initialExecutors="2", scaleDownInterval="4s", **{"scaleDown.maxFactor": "1.0"})
    sc = cluster.spark.sparkContext
    # A quiet query: alone, it would be scaled down to 1 executor.
    job = StreamingJob(cluster.spark, cluster.workdir, name="quiet", rows_per_second=5, partitions=2).start()
    finished = threading.Event()
    counts: list[int] = []
    done_at: list[float] = []

    def batch() -> None:
        # Two batch jobs in a row, 24 tasks of 0.6 s each on 1-core executors: more tasks than
        # maxExecutors=3 slots, and a moment between the jobs with none pending.
        try:
            sc.setJobGroup("nightly-report", "a batch job beside the query")
            for _ in range(2):
                counts.append(sc.parallelize(range(24), 24).map(sleepy(0.6)).count())
        finally:
            done_at.append(time.time())
            finished.set()

    wait_for(lambda: scaler.status()["target_executors"] == 2 and scaler.status()["live_executors"] == 2,
             120, what="the baseline of 2 executors")
    failed_before = cluster.tasks_failed()
    worker = threading.Thread(target=batch, daemon=True)
    worker.start()
    try:
        wait_for(lambda: [d for d in applied(scaler, "scale_up") if "other jobs" in d["reason"]], 150,
                 what="a scale-up for the batch job's tasks")
        up = next(d for d in applied(scaler, "scale_up") if "other jobs" in d["reason"])
        assert up["to_executors"] == 3, up  # 24 tasks want more than maxExecutors=3 slots
        wait_for(finished.is_set, 300, what="the batch jobs to finish")
        assert counts == [24, 24]
        during = [d for d in applied(scaler, "scale_down") if up["time"] <= d["time"] <= done_at[0]]
        assert not during, ("no scale-down while the batch job ran", during)
        assert cluster.tasks_failed() == failed_before, \
            "no task of the batch job failed (no busy executor was removed)"
        wait_for_autoscaler(
            scaler, lambda: applied(scaler, "scale_down") and scaler.status()["live_executors"] == 1,
            240, what="the quiet query's 1 executor once the batch job is done")
    finally:
        finished.wait(300)
        job.stop()


# --------------------------------------------------------------------------------------------------
# Stateful queries with shuffles
# --------------------------------------------------------------------------------------------------

STORES = {
    "hdfs": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
    "rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
}
IDS_PER_SECOND = 20  # event time = EPOCH_S + id / 20 s
# Not 0: a row at event time 0 equals the first batch's watermark (0) and counts as late.
EPOCH_S = 1_000_000
WINDOW_S = 5
KEYS = 3
# Every stateful task opens its state store: a fixed cost of the batch whatever its rows. On a slow
# or loaded machine it approaches a 2 s trigger at any size, and the model then rightly holds the
# executors at the low rate (they would be needed to finish in time); 4 s leaves it room.
TRIGGER_S = 4


def expected_counts(windows: int) -> Counter[tuple[int, int]]:
    """(window start in s, key) -> rows, for the first ``windows`` windows of event time."""
    counts: Counter[tuple[int, int]] = Counter()
    for i in range(windows * WINDOW_S * IDS_PER_SECOND):
        counts[(EPOCH_S + i // IDS_PER_SECOND // WINDOW_S * WINDOW_S, i % KEYS)] += 1
    return counts


class StatefulQuery:
    def __init__(self, spark: Any, workdir: Path, store: str) -> None:
        self.spark, self.store = spark, store
        self.control = workdir / f"{store}.rate"
        self.out = workdir / f"{store}-out"
        self.checkpoint = workdir / f"{store}-checkpoint"
        testing_source.set_rate(str(self.control), 20)
        self.query: Any = None

    def start(self) -> StatefulQuery:
        from pyspark.sql import functions as F

        testing_source.register(self.spark)
        # The provider is fixed per query when it starts (and kept in its checkpoint).
        self.spark.conf.set("spark.sql.streaming.stateStore.providerClass", STORES[self.store])
        rows = (self.spark.readStream.format(testing_source.NAME)
                .option("controlFile", str(self.control)).option("rowsPerSecond", "20")
                .option("maxRowsPerBatch", "500").option("partitions", "3")
                .option("costMs", "10").option("costMode", "sleep").load())
        twice = rows.select(F.explode(F.array(F.col("id"), F.col("id"))).alias("id"))
        timed = twice.select("id", (F.col("id") % KEYS).alias("key"),
                             F.timestamp_seconds(F.col("id") / IDS_PER_SECOND + EPOCH_S).alias("ets"))
        counts = (timed.withWatermark("ets", "2 seconds").dropDuplicates(["id", "ets"])
                  .groupBy(F.window("ets", f"{WINDOW_S} seconds"), "key").count())
        self.query = (counts.select(F.col("window.start").alias("start"), "key", "count")
                      .writeStream.format("json").outputMode("append").queryName(f"stateful-{self.store}")
                      .option("path", str(self.out)).option("checkpointLocation", str(self.checkpoint))
                      .trigger(processingTime=f"{TRIGGER_S} seconds").start())
        return self

    def set_rate(self, rows_per_second: float) -> None:
        testing_source.set_rate(str(self.control), rows_per_second)

    def results(self) -> list[tuple[int, int, int]]:
        frame = self.spark.read.schema("start timestamp, key long, count long").json(str(self.out))
        return [(int(r.start.timestamp()), r.key, r["count"]) for r in frame.collect()]


def check_exact(query: StatefulQuery) -> int:
    """Every emitted (window, key) once, with the exact count; returns the windows emitted."""
    rows = query.results()
    seen = Counter((start, key) for start, key, _ in rows)
    assert all(n == 1 for n in seen.values()), f"{query.store}: a window emitted twice"
    windows = len({start for start, _, _ in rows})
    expected = expected_counts(windows)
    got = {(start, key): count for start, key, count in rows}
    assert got == dict(expected), f"{query.store}: counts differ from the unscaled result"
    return windows


def test_stateful_queries_with_shuffles_scale_up_and_down_with_exact_results(cluster: SharedCluster) -> None:
    """Two queries share the executors, one on Spark's default state store and one on RocksDB; each
    deduplicates its input (every row arrives twice) and counts rows per event-time window and key,
    with a watermark, so each micro-batch shuffles into stateful operators. Event time is derived from
    the row id, so the exact result is known whatever the arrival times. Removing an executor between
    a batch's map and reduce stages would lose map output (FetchFailed, a failed task, the map stage
    re-run); the realizer removes none that holds shuffle output of a running job, so the scenario
    must end with no failed task and exact counts."""
    spark = cluster.spark
    scaler = cluster.scenario(scaleDownInterval="4s")  # (a shorter delay: its length is the policy's tests')
    failed_before = cluster.tasks_failed()
    # Two shuffle partitions (a SQL setting, fixed in each query's checkpoint when it starts): each
    # task of a stateful operator opens a state store, a fixed cost that would otherwise keep a
    # second executor busy at the low load.
    # The session's values before, set back after (unsetting would give Spark's defaults instead).
    keys = ("spark.sql.shuffle.partitions", "spark.sql.streaming.stateStore.providerClass")
    before = {key: spark.conf.get(key, None) for key in keys}
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    queries = [StatefulQuery(spark, cluster.workdir, store).start() for store in STORES]
    started = time.monotonic()
    try:
        wait_for(lambda: scaler.status()["live_executors"] == 1, 120, what="the baseline of 1 executor")
        # Learnt at the low rate's short batches: at the high rate a batch on 1 executor takes ~10 s.
        wait_for(lambda: cost_learned(scaler), 180, what="the model of the queries' batch cost")
        for q in queries:
            q.set_rate(110)  # together > 2x what one executor does: a backlog grows
        wait_for_autoscaler(scaler, lambda: scaler.status()["live_executors"] >= 2, 180,
                            what="a scale-up for the backlog")

        def both_queries_sized() -> dict[str, Any] | None:
            for d in applied(scaler, "scale_up"):
                sized = {q["name"]: q["required_slots"] for q in (d.get("queries") or {}).values()}
                if len(sized) == 2 and all(slots > 0 for slots in sized.values()):
                    return d
            return None

        # One target for both: each query's figure, and the application's covering the larger.
        decision = wait_for(both_queries_sized, 60, what="a scale-up sized on both queries")
        per_query = {q["name"]: q["required_slots"] for q in decision["queries"].values()}
        assert set(per_query) == {f"stateful-{q.store}" for q in queries}, per_query
        assert decision["required_slots"] >= max(per_query.values()), decision
        peak = [scaler.status()["live_executors"]]

        def scaled_down() -> bool:
            live = scaler.status()["live_executors"]
            peak[0] = max(peak[0], live)
            return live < peak[0] and any(d["applied"] and d["action"] == "scale_down"
                                          for d in scaler.decisions())

        for q in queries:
            q.set_rate(5)
        # Each stateful task opens its state store, a fixed cost that can keep a second executor
        # busy even at a low rate on a loaded machine: any applied scale-down that removed an
        # executor while the batches shuffle is the point here, not reaching 1.
        wait_for_autoscaler(scaler, scaled_down, 360, what="a scale-down that removed an executor")
        for q in queries:
            q.query.stop()
        windows = {q.store: check_exact(q) for q in queries}
        failed = cluster.tasks_failed() - failed_before
        decisions = [d for d in scaler.decisions() if d["applied"]]
        print(f"FIGURES stateful: windows={windows} failed_tasks={failed} actions={len(decisions)} "
              f"rollbacks={sum(d['action'] == 'rollback' for d in decisions)} "
              f"run_s={time.monotonic() - started:.0f}")
        assert all(n >= 4 for n in windows.values()), f"too few windows closed to compare: {windows}"
        assert failed == 0, "no task may fail, FetchFailed included"
        assert not [d for d in decisions if d["action"] == "rollback"]
    finally:
        for q in queries:
            if q.query is not None and q.query.isActive:
                q.query.stop()
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)
    # The scenario's task ends in the event log (each job's end flushes it): a success or a task
    # killed when its query stopped, never a failure.
    task_ends = [e for e in read_event_log(cluster.events_dir) if e["Event"] == "SparkListenerTaskEnd"
                 and e["Task Info"]["Launch Time"] >= cluster.started_ms]
    reasons = Counter(e["Task End Reason"]["Reason"] for e in task_ends)
    assert task_ends and set(reasons) <= {"Success", "TaskKilled"}, f"task ends other than success: {reasons}"


# --------------------------------------------------------------------------------------------------
# A recurring ramp, met by a pre-scale
# --------------------------------------------------------------------------------------------------

# A compressed "day": low most of the period, a ramp to x15 for a few seconds. 40 s is the shortest
# period whose second ramp still comes after the forecast is checked enough to be applied: the profile
# forecasts once a whole period is learnt, and is applied only once 3 of its forecasts (of the slots up
# to a horizon, a provisioning time plus a batch, ahead) were checked against the arrivals that came.
PERIOD_S = 40
RAMP_S = 6  # how long each period's high phase lasts
LOW, HIGH = 10, 150  # rows/s: 0.1 and 1.5 of one 1-core executor's seconds at 10 ms a row
RAMP_TRIGGER_S = 2


def run_schedule(control: Path, changes: list[tuple[float, float]], stop: threading.Event) -> None:
    """Each (time, rows/s) written a second before its time, stamped with it: the source polls its
    control file as each batch starts (every 2 s while it keeps up) and applies a change no earlier
    than its poll, so a change written long before would start early."""
    for at, rate in changes:
        if stop.wait(max(0.0, at - 1.0 - time.time())):
            return
        testing_source.set_rate(str(control), rate, at=at)


def test_a_recurring_ramp_is_met_by_a_pre_scale_before_it_comes(cluster: SharedCluster) -> None:
    """Issue 56's forecast on real Spark: the same ramp twice, a period apart. The first is met as the
    autoscaler meets any step, after it starts (nothing is learnt yet); once the ramp is given back
    and the forecast is checked, the second is met by a pre-scale decided while the load is still
    low, a scale-up whose reason says it is one. What is asserted is the direction and the order of
    the actions against the ramps, not how early."""
    scaler = cluster.scenario(**{"forecast.mode": "on", "forecast.period": f"{PERIOD_S}s",
                                 "scaleDownInterval": "4s", "scaleDown.maxFactor": "1.0"})
    job = StreamingJob(cluster.spark, cluster.workdir, name="recurring", rows_per_second=LOW,
                       trigger_s=RAMP_TRIGGER_S).start()
    started = time.time()
    stop = threading.Event()
    try:
        wait_for(lambda: cost_learned(scaler), 120, what="the model of the query's batch cost")
        # The first ramp once the model can size it, and late enough in the forecast's first period
        # that the second comes after 3 checks (the profile is ready a period after the first
        # batches); at a trigger, so that a batch reads the new rate whole.
        first = math.ceil(max(time.time() + 4, started + 30) / RAMP_TRIGGER_S) * RAMP_TRIGGER_S
        second = first + PERIOD_S
        changes = [(first, HIGH), (first + RAMP_S, LOW), (second, HIGH), (second + RAMP_S, LOW)]
        schedule = threading.Thread(target=run_schedule, args=(job.control_file, changes, stop), daemon=True)
        schedule.start()

        def pre_scale() -> dict[str, Any] | None:
            return next((d for d in applied(scaler, "scale_up") if d["reason"].startswith("pre-scale")), None)

        # The deadline is the second ramp's end and a period more (a late pre-scale fails below).
        decided = wait_for_autoscaler(scaler, pre_scale, second + RAMP_S + PERIOD_S - time.time(),
                                      what="a pre-scale before the recurring ramp")
        forecast = scaler.status()["forecasts"][job.query.id]
        actions = [(d["action"], d["from_executors"], d["to_executors"], round(d["time"] - first, 1),
                    d["reason"][:80]) for d in applied(scaler)]
        print(f"FIGURES recurring: ramps at +0 and +{PERIOD_S} s, actions (s from the first ramp): {actions}")
        ups = [d for d in applied(scaler, "scale_up") if d["time"] >= first]
        downs = [d for d in applied(scaler, "scale_down") if d["time"] >= first]
        # The first ramp: met after it started, by a scale-up that is not a pre-scale (no profile yet).
        assert ups and not ups[0]["reason"].startswith("pre-scale"), actions
        # ... then given back before the second ramp, and the second met by a pre-scale before it.
        assert downs and ups[0]["time"] < downs[0]["time"] < decided["time"], actions
        assert decided["time"] < second, ("the pre-scale comes before the second ramp", actions)
        assert decided["from_executors"] < decided["to_executors"], decided
        assert "the load reaches" in decided["reason"] and "forecast error" in decided["reason"], decided
        assert forecast["applied"] and forecast["period_s"] == PERIOD_S, forecast
        # Seen where Spark users look: the event log's ScalingEvent says it was a pre-scale.
        events = wait_for(lambda: [e for e in cluster.events("ScalingEvent")
                                   if e.get("reason", "").startswith("pre-scale")], 30,
                          what="the pre-scale's ScalingEvent in the event log")
        assert events[0]["action"] == "scale_up", events[0]
    finally:
        stop.set()
        job.stop()
