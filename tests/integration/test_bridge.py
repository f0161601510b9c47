"""The JVM bridge against a real local-cluster (2 executor JVMs, 1 core each).

One SparkSession serves the whole module (starting one costs ~15-20 s on 2 cores), so the tests run in
file order: the streaming test runs before the kill test, and the event-log test, which stops the
session, comes last. pyspark keeps one driver JVM per Python process and puts ``spark.jars`` on its
classpath only when it launches it: if another module started Spark first without the jar, these tests
skip (run them in their own process: ``pytest tests/integration/test_bridge.py``).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from py4j.java_gateway import JavaClass
from py4j.protocol import Py4JJavaError
from spark_cluster import QUICK_REMOVAL

from sparkscale_listener.collect.snapshot import BridgeSnapshot, ExecutorSnapshot, record_fields
from sparkscale_listener.spark import bridge as bridge_module
from sparkscale_listener.spark import jars as bridge_jars
from sparkscale_listener.spark.bridge import PLUGIN_CLASS, BridgeNotInstalledError, JvmBridge

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[2]
T = TypeVar("T")


def wait_for(probe: Callable[[], T], ok: Callable[[T], bool], what: str, timeout: float = 60.0) -> T:
    """Poll until ok(probe()) or fail with the last value seen: listener events arrive asynchronously."""
    deadline = time.monotonic() + timeout
    value = probe()
    while not ok(value):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last value: {value!r}")
        time.sleep(0.1)
        value = probe()
    return value


def live(snapshot: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in snapshot["executors"].items() if v["removedMs"] is None}


@pytest.fixture(scope="session")
def bridge_jar() -> Path:
    """The packaged jar of the installed Spark (``make test`` builds them first)."""
    jar = bridge_jars.bridge_jar()
    src = REPO / "jvm-bridge" / "src"
    sources = [*(p for p in src.rglob("*.java") if src / "test" not in p.parents),
               *(REPO / "jvm-bridge").rglob("pom.xml")]
    assert not any(s.stat().st_mtime > jar.stat().st_mtime for s in sources), \
        f"{jar} is older than the Java sources: run `make bridge`"
    return jar


@dataclass
class Env:
    spark: Any
    bridge: JvmBridge
    event_dir: Path


@pytest.fixture(scope="module")
def env(bridge_jar: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    if SparkContext._jvm is not None:
        probe = SparkContext._jvm.io.sparkscale.bridge.SparkscaleBridge
        if not isinstance(probe, JavaClass):
            pytest.skip("a driver JVM without the bridge jar already runs in this process")
    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()

    event_dir = tmp_path_factory.mktemp("eventlog")
    spark = (
        SparkSession.builder.master("local-cluster[2,1,1024]")
        .appName("sparkscale-bridge-test")
        .config("spark.jars", str(bridge_jar))
        .config("spark.plugins", PLUGIN_CLASS)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.eventLog.enabled", "true")
        .config("spark.eventLog.dir", str(event_dir))
        .config("spark.eventLog.rolling.enabled", "false")  # one plain file to read back
        .config("spark.eventLog.compress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config(map=QUICK_REMOVAL)  # an executor killed leaves in 1 s, not 5
        # JMX makes the driver's metric registry readable from here through py4j.
        .config("spark.metrics.conf.driver.sink.jmx.class", "org.apache.spark.metrics.sink.JmxSink")
        .getOrCreate()
    )
    try:
        yield Env(spark, JvmBridge(spark.sparkContext), event_dir)
    finally:
        spark.stop()


def test_plugin_installed_and_sees_both_executors(env: Env) -> None:
    assert env.bridge.installed()
    snap = wait_for(env.bridge.snapshot, lambda s: len(live(s)) == 2, "2 live executors")
    assert snap["appId"] == env.spark.sparkContext.applicationId
    assert snap["coresPerExecutor"] == 1
    assert abs(snap["timeMs"] / 1000 - time.time()) < 600  # epoch milliseconds, not seconds or nanos
    for executor_id, e in live(snap).items():
        assert executor_id != "driver"
        assert e["cores"] == 1
        assert e["host"]
        assert e["addedMs"] <= snap["timeMs"]
        assert e["heapMaxBytes"] == 1024 * 1024 * 1024
        assert e["runningTasks"] == 0
    totals = snap["totals"]
    assert totals["executorsAdded"] == 2
    assert totals["executorsRemoved"] == 0
    assert totals["slotMs"] > 0


def test_replies_to_python_go_out_without_delay_on_every_gateway_connection(env: Env) -> None:
    """py4j leaves Nagle's algorithm on, so each reply over 8 KB waited 44 ms for a delayed ACK:
    once the bridge is used, the gateway's connections send at once, and so does one that a new
    Python thread opens later (PySpark gives each thread a connection of its own, closed when the
    thread ends: each connection is found by its port while its thread lives)."""
    jvm, gateway = env.spark.sparkContext._jvm, env.spark.sparkContext._gateway
    field = jvm.java.lang.Class.forName("py4j.GatewayServer").getDeclaredField("connections")
    field.setAccessible(True)

    def this_threads_connection_sends_at_once() -> bool:
        """The JVM's end of the calling thread's connection, found by its port, has TCP_NODELAY."""
        connections = jvm.java.util.ArrayList(field.get(gateway.java_gateway_server))  # a copy
        # (That call opened this thread's connection if it had none.)
        port = gateway._gateway_client.get_thread_connection().socket.getsockname()[1]
        for connection in connections:
            socket = connection.getSocket()
            if socket.getPort() == port:
                return bool(socket.getTcpNoDelay())
        raise AssertionError(f"no gateway connection from port {port}")

    env.bridge.poll()
    assert this_threads_connection_sends_at_once()
    seen: list[bool] = []
    thread = threading.Thread(target=lambda: seen.append(this_threads_connection_sends_at_once()))
    thread.start()
    thread.join(60)
    assert seen == [True]


def test_missing_class_is_not_installed(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    # py4j answers an unknown class with a JavaPackage: that must read as "not installed", not explode.
    monkeypatch.setattr(bridge_module, "BRIDGE_CLASS", "io.sparkscale.bridge.NoSuchClass")
    absent = JvmBridge(env.spark.sparkContext)
    assert absent.installed() is False
    with pytest.raises(BridgeNotInstalledError):
        absent.snapshot()
    with pytest.raises(BridgeNotInstalledError):
        absent.request_total_executors(2)


def test_batch_job_counts_tasks_and_busy_time(env: Env) -> None:
    before = env.bridge.snapshot()
    env.spark.range(0, 100_000, numPartitions=4).selectExpr("sum(id)").collect()

    snap = wait_for(
        env.bridge.snapshot,
        lambda s: s["totals"]["tasksFinished"] >= before["totals"]["tasksFinished"] + 4
        and all(e["runningTasks"] == 0 for e in s["executors"].values()),
        "the 4 tasks of the batch job to finish",
    )
    totals = snap["totals"]
    assert totals["busyMs"] > before["totals"]["busyMs"]
    assert totals["runMs"] > before["totals"]["runMs"]
    assert totals["tasksFailed"] == 0
    # Nothing is running and nothing was removed: the executors add up to the totals exactly.
    execs = snap["executors"].values()
    assert sum(e["tasksFinished"] for e in execs) == totals["tasksFinished"]
    assert sum(e["busyMs"] for e in execs) == totals["busyMs"]
    # One slot per executor: busy time can never exceed the slot time it ran in.
    assert totals["busyMs"] <= totals["slotMs"]
    # A batch job carries no streaming query id.
    assert snap["queries"] == before["queries"]


def test_streaming_query_attributed_per_query_and_batch(env: Env) -> None:
    query = (
        env.spark.readStream.format("rate")
        .option("rowsPerSecond", 100)
        .option("numPartitions", 2)
        .load()
        .writeStream.format("noop")
        .queryName("bridge_rate")
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    def progress() -> Any:
        env.bridge.poll()  # each poll takes the batches changed since the previous one
        return query.lastProgress

    try:
        wait_for(progress, lambda p: p is not None and p["batchId"] >= 3, "4 micro-batches")
    finally:
        query.stop()
    done = {str(p["batchId"]) for p in query.recentProgress}
    query_id = str(query.id)

    def batches_seen(s: BridgeSnapshot) -> bool:
        q = s.queries.get(query_id)
        return q is not None and done <= set(q.batches) and all(q.batches[b].tasks > 0 for b in done)

    snap = wait_for(env.bridge.poll, batches_seen, f"batches {sorted(done)} of query {query_id}")
    q = snap.queries[query_id]
    assert q.busy_ms > 0
    assert q.run_ms > 0
    assert q.tasks_finished >= len(done)  # at least one task per batch (an empty batch writes 1 partition)
    assert q.max_stage_tasks == 2  # numPartitions of the rate source
    assert all(int(b) <= max(int(d) for d in done) + 1 for b in q.batches)
    assert sum(b.busy_ms for b in q.batches.values()) <= q.busy_ms
    assert snap.totals.busy_ms >= q.busy_ms
    for batch_id in done:
        batch = q.batches[batch_id]
        assert batch.stages >= 1 and 1 <= batch.executors <= 2
        assert batch.first_launch_ms is not None and batch.last_end_ms is not None
        assert batch.first_launch_ms <= batch.last_end_ms <= snap.time_ms
    # The polls' batches, put together from what changed between them, are the listener's own.
    whole = BridgeSnapshot.from_json(env.bridge.snapshot())
    assert env.bridge.poll().queries[query_id].batches == whole.queries[query_id].batches


def test_failing_streaming_query_reports_task_and_job_failures(env: Env) -> None:
    query = (
        env.spark.readStream.format("rate")
        .option("rowsPerSecond", 100)
        .option("numPartitions", 1)
        .load()
        .selectExpr("raise_error(concat('sparkscale-boom-', value))")
        .writeStream.format("noop")
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    with pytest.raises(Exception, match="sparkscale-boom"):
        query.awaitTermination(60)  # returns False (and fails this test) if the query never fails
    query_id = str(query.id)

    def failed(s: dict[str, Any]) -> bool:
        q = s["queries"].get(query_id)
        return q is not None and q["jobsFailed"] >= 1 and q["tasksFailed"] >= 1

    snap = wait_for(env.bridge.snapshot, failed, f"a failed job of query {query_id}")
    assert snap["executors"] and sum(e["tasksFailed"] for e in snap["executors"].values()) >= 1
    assert snap["totals"]["tasksFailed"] >= snap["queries"][query_id]["tasksFailed"]


def test_gauges_reach_the_metrics_system(env: Env) -> None:
    sc = env.spark.sparkContext
    jvm = sc._jvm
    # "backlog.bridge_rate" is not registered at init: it is when first set.
    env.bridge.publish_gauges({"targetExecutors": 3, "backlog.bridge_rate": 42.5}, [], "# one tick\n")

    mbean = jvm.java.lang.Class.forName("com.codahale.metrics.jmx.JmxReporter$JmxGaugeMBean")
    server = jvm.java.lang.management.ManagementFactory.getPlatformMBeanServer()

    def gauge(name: str) -> float:
        object_name = jvm.javax.management.ObjectName(
            f"metrics:name={sc.applicationId}.driver.plugin.{PLUGIN_CLASS}.{name},type=gauges")
        return float(jvm.javax.management.JMX.newMBeanProxy(server, object_name, mbean).getValue())

    assert gauge("targetExecutors") == 3.0
    assert gauge("backlog.bridge_rate") == 42.5
    unset = gauge("utilization")  # registered at init, never set
    assert unset != unset  # NaN
    assert env.bridge.latest_metrics() == "# one tick\n"
    env.bridge.publish_gauges({"targetExecutors": 2}, ["backlog.bridge_rate"], "# the next tick\n")
    assert gauge("targetExecutors") == 2.0
    with pytest.raises(Py4JJavaError, match="InstanceNotFoundException"):  # removed: gone from every sink
        gauge("backlog.bridge_rate")
    assert env.bridge.latest_metrics() == "# the next tick\n"


def test_decommission_refused_without_decommission_enabled(env: Env) -> None:
    # Without spark.decommission.enabled the executor would ignore the request while the driver stops
    # scheduling on it: the bridge must refuse rather than leave a zombie.
    some = next(iter(live(env.bridge.snapshot())))
    assert env.bridge.decommission_executors([some]) == []
    assert env.bridge.decommission_executors([]) == []


def test_a_task_whose_end_event_was_lost_ages_out(env: Env) -> None:
    # Spark drops listener events when a queue is full. A task whose end never arrives would stay
    # "running" forever: busy time growing without bound, its executor never idle. Fed Spark's
    # own events (parsed by its JsonProtocol) into a fresh listener, without the task's end.
    jvm = env.spark.sparkContext._jvm
    listener = jvm.io.sparkscale.bridge.SparkscaleListener(env.spark.sparkContext._jsc.sc().conf())
    t0 = 1_700_000_000_000
    task = {"Task ID": 9001, "Index": 0, "Attempt": 0, "Partition ID": 0, "Launch Time": t0,
            "Executor ID": "7", "Host": "h", "Locality": "PROCESS_LOCAL", "Speculative": False,
            "Getting Result Time": 0, "Finish Time": 0, "Failed": False, "Killed": False,
            "Accumulables": []}
    events = [
        {"Event": "SparkListenerExecutorAdded", "Timestamp": t0, "Executor ID": "7",
         "Executor Info": {"Host": "h", "Total Cores": 2, "Log Urls": {}}},
        {"Event": "SparkListenerTaskStart", "Stage ID": 900, "Stage Attempt ID": 0, "Task Info": task},
        {"Event": "SparkListenerStageCompleted", "Stage Info": {
            "Stage ID": 900, "Stage Attempt ID": 0, "Stage Name": "lost", "Number of Tasks": 1,
            "RDD Info": [], "Parent IDs": [], "Details": "", "Submission Time": t0,
            "Completion Time": t0 + 1000, "Accumulables": [], "Resource Profile Id": 0}},
    ]
    handlers = {"SparkListenerExecutorAdded": listener.onExecutorAdded,
                "SparkListenerTaskStart": listener.onTaskStart,
                "SparkListenerStageCompleted": listener.onStageCompleted}
    for event in events:
        handlers[event["Event"]](jvm.org.apache.spark.util.JsonProtocol.sparkEventFromJson(json.dumps(event)))

    # A row of the executors' table: the id, then the fields in their declared order.
    running = 1 + list(record_fields(ExecutorSnapshot)).index("runningTasks")

    def at(ms: int) -> tuple[int, float, int]:
        snap = listener.snapshot("app", t0 + ms)
        executor = next(row for row in snap.get("executors") if row[0] == "7")
        totals = snap.get("totals")
        return executor[running], totals.get("busyMs"), totals.get("tasksAgedOut")

    # Within the grace a straggler may still end; it ran at most until its stage completed.
    assert at(20_000) == (1, 1000.0, 0)
    assert at(31_000) == (0, 1000.0, 1)  # 30 s after its stage completed: its end was lost
    assert at(90_000) == (0, 1000.0, 1)  # its busy time neither grows nor goes back


def test_an_idle_executor_holding_a_running_jobs_shuffle_output_is_not_killed(env: Env,
                                                                               tmp_path: Path) -> None:
    # A two-stage job whose single reduce task waits for a file: while it waits, the executor
    # not running it is idle but holds map output of the job. Killing it would make the reduce
    # side fail to fetch that output (FetchFailed) and re-run the map stage.
    import threading

    assert env.bridge.request_total_executors(2) is True
    wait_for(env.bridge.snapshot, lambda s: len(live(s)) == 2, "2 live executors")
    release = tmp_path / "release"
    failed_before = env.bridge.snapshot()["totals"]["tasksFailed"]

    def slow_map(x: int) -> tuple[int, int]:
        import time as t
        t.sleep(0.5)  # long enough that both single-core executors take map tasks
        return x % 2, x

    def wait_for_release(kv: tuple[int, Any]) -> int:
        import os
        import time as t
        deadline = t.monotonic() + 120
        while not os.path.exists(str(release)) and t.monotonic() < deadline:
            t.sleep(0.1)
        return len(list(kv[1]))

    sc = env.spark.sparkContext
    result: list[Any] = []
    job = threading.Thread(target=lambda: result.append(
        sc.parallelize(range(8), 8).map(slow_map).groupByKey(1).map(wait_for_release).collect()))
    job.start()
    try:
        both = set(live(env.bridge.snapshot()))
        holders = wait_for(env.bridge.shuffle_holders, lambda h: h == both, "map output on both executors")
        snap = wait_for(env.bridge.snapshot, lambda s: sum(e["runningTasks"] for e in live(s).values()) == 1,
                        "the one reduce task")
        idle = next(k for k, e in live(snap).items() if e["runningTasks"] == 0)
        assert snap["executors"][idle]["liveShuffleJobs"] == 1
        assert env.bridge.kill_idle_executors([idle]) == []
        assert idle in holders and idle in live(env.bridge.snapshot())
    finally:
        release.touch()
        job.join(120)
    assert sorted(result[0]) == [4, 4]
    wait_for(env.bridge.shuffle_holders, lambda h: h == set(), "no holders once the job ended")
    assert all(e["liveShuffleJobs"] == 0 for e in live(env.bridge.snapshot()).values())
    assert env.bridge.snapshot()["totals"]["tasksFailed"] == failed_before


def test_kill_idle_executor_is_seen_removed(env: Env) -> None:
    # Baseline first (a kill before any request would leave the cluster manager a target of
    # zero: the empty-target trap), then kill one idle executor.
    assert env.bridge.request_total_executors(2) is True
    snap = wait_for(env.bridge.snapshot, lambda s: len(live(s)) == 2, "2 live executors")
    victim = next(k for k, e in live(snap).items() if e["runningTasks"] == 0)
    assert env.bridge.kill_executors([victim]) == [victim]

    snap = wait_for(
        env.bridge.snapshot,
        lambda s: s["executors"][victim]["removedMs"] is not None,
        f"executor {victim} to be removed",
    )
    removed = snap["executors"][victim]
    assert removed["removedReason"]
    assert removed["addedMs"] <= removed["removedMs"] <= snap["timeMs"]
    assert snap["totals"]["executorsRemoved"] == 1
    assert list(live(snap)) == [k for k in snap["executors"] if k != victim]


def test_a_busy_executor_named_for_removal_goes_when_its_task_ends(env: Env) -> None:
    # A scale-down whose excess executors are busy when the control loop looks: the bridge removes
    # them when their last running task ends, not at a later tick that may find them busy again.
    assert env.bridge.request_total_executors(2) is True
    wait_for(env.bridge.snapshot, lambda s: len(live(s)) == 2, "2 live executors")
    failed_before = env.bridge.snapshot()["totals"]["tasksFailed"]
    counts: list[int] = []

    def job() -> None:
        def slow(x: int) -> int:
            import time as t
            t.sleep(3.0)
            return x
        counts.append(env.spark.sparkContext.parallelize(range(2), 2).map(slow).count())

    worker = threading.Thread(target=job, daemon=True)
    worker.start()
    snap = wait_for(env.bridge.snapshot,
                    lambda s: len(live(s)) == 2 and all(e["runningTasks"] for e in live(s).values()),
                    "a task on each executor")
    victim = max(live(snap), key=int)
    assert env.bridge.request_total_executors(1) is True
    env.bridge.remove_when_idle([victim], 1)
    assert env.bridge.removed_when_idle() == []  # its task still runs
    snap = wait_for(env.bridge.snapshot, lambda s: s["executors"][victim]["removedMs"] is not None,
                    f"executor {victim} removed once its task ended")
    worker.join(60)
    assert counts == [2]  # its task was not lost
    assert env.bridge.removed_when_idle() == [victim]
    assert snap["totals"]["tasksFailed"] == failed_before
    assert len(live(snap)) == 1


def test_events_reach_the_event_log(env: Env) -> None:
    sc = env.spark.sparkContext
    details = {"queries": {"bridge_rate": {"backlog": 10}}, "ratio": 0.5, "unknown": float("nan")}
    env.bridge.post_scaling_event("scale_up", 1, 2, "backlog growing", True, "apply", details)
    env.bridge.post_autoscaler_event("pause", "warning", "memory pressure", {"heapRatio": 0.93})
    env.spark.stop()  # drains the listener bus into the event log

    assert env.bridge.installed() is False
    assert env.bridge.snapshot() == {}
    assert env.bridge.request_total_executors(3) is False
    env.bridge.publish_gauges({"targetExecutors": 1}, [], "")  # no-op, no error

    logs = [p for p in env.event_dir.iterdir() if p.is_file()]
    assert len(logs) == 1, logs
    lines = logs[0].read_text().splitlines()
    scaling = [json.loads(x) for x in lines if '"Event":"io.sparkscale.bridge.ScalingEvent"' in x]
    other = [json.loads(x) for x in lines if '"Event":"io.sparkscale.bridge.AutoscalerEvent"' in x]
    assert len(scaling) == 1 and len(other) == 1
    event = scaling[0]
    assert event["action"] == "scale_up"
    assert event["fromExecutors"] == 1
    assert event["toExecutors"] == 2
    assert event["reason"] == "backlog growing"
    assert event["applied"] is True
    assert event["mode"] == "apply"
    assert event["timestampMs"] > 0
    # Details are embedded as JSON, not as an escaped string; NaN survives as a string.
    assert event["details"] == {"queries": {"bridge_rate": {"backlog": 10}}, "ratio": 0.5, "unknown": "NaN"}
    assert other[0]["kind"] == "pause" and other[0]["severity"] == "warning"
    assert other[0]["details"] == {"heapRatio": 0.93}

    # The history server reads it back through the same JsonProtocol (the JVM outlives the context).
    line = next(x for x in lines if '"Event":"io.sparkscale.bridge.ScalingEvent"' in x)
    back = sc._jvm.org.apache.spark.util.JsonProtocol.sparkEventFromJson(line)
    assert back.getClass().getName() == "io.sparkscale.bridge.ScalingEvent"
    assert back.toExecutors() == 2  # a record: accessor methods, not fields
    assert back.details().get("ratio") == 0.5
