"""Faults outside the autoscaler, on a real multi-executor cluster (issue 12, scenarios 2 and 4).

* An executor JVM killed from outside (SIGKILL) mid-batch, once while a scale-up of ours is being
  judged and once while nothing is: the cluster manager replaces it up to the autoscaler's
  target, no checker blames the scaling for it, and every row reaches the sink once.
* The standalone Master (its own daemon on loopback, with FILESYSTEM recovery so that the
  application survives its restart) stopped while a scale-up is wanted, then restarted: the
  requests fail, the autoscaler says so, retries with backoff instead of every tick, never raises,
  the query keeps running, and the target is reached once the Master is back.

Each prints a FIGURES line (``pytest -s``). Every wait is a condition with a generous deadline.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from spark_cluster import TEST_JVM_OPTIONS, applied, fast_conf, free_port, rollbacks

from sparkscale_listener import autoscaler
from sparkscale_listener.sim import RecordingEventHandler
from sparkscale_listener.spark.bridge import JvmBridge
from sparkscale_listener.testing.demo import StreamingJob, build_session, exactly_once, wait_for
from sparkscale_listener.testing.demo import wait_for_autoscaler as wait

logging.getLogger("sparkscale").setLevel(logging.INFO)  # one line per event, shown on failure
pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[2]

# Short checker windows: a scaling is judged within about half a minute, not minutes
# (executorFailures watches for provisioningTimeout + interval: still generous here, an executor
# JVM starts within 3-7 s on this machine under load, and one that is late must not look like a
# capacity limit).
FAST_CHECKERS: dict[str, str] = {
    "spark.sparkscale.provisioningTimeout": "30s",
    "spark.sparkscale.checkers.taskFailures.window": "20s",
    "spark.sparkscale.checkers.executorFailures.window": "20s",
    "spark.sparkscale.checkers.queryFailure.window": "20s",
    "spark.sparkscale.checkers.throughputRegression.window": "16s",
    "spark.sparkscale.checkers.gcPressure.window": "20s",
    "spark.sparkscale.checkers.heapUsage.window": "20s",
    "spark.sparkscale.rollback.pauseDuration": "10min",
}


# The killed-executor scenario waits out the scale-up's whole watch (the longest checker window,
# at least provisioningTimeout + interval) and throughputRegression's full window after the
# replacement: a shorter watch, still several times an executor's start, so that the kill lands
# within it and a late executor is not a capacity limit.
SHORT_WATCH: dict[str, str] = {
    "spark.sparkscale.provisioningTimeout": "20s",
    "spark.sparkscale.checkers.taskFailures.window": "15s",
    "spark.sparkscale.checkers.executorFailures.window": "15s",
    "spark.sparkscale.checkers.queryFailure.window": "15s",
    "spark.sparkscale.checkers.throughputRegression.window": "12s",
    "spark.sparkscale.checkers.gcPressure.window": "15s",
    "spark.sparkscale.checkers.heapUsage.window": "15s",
}


# ------------------------------------------------------------------------------------------------
# Helpers
# ------------------------------------------------------------------------------------------------


def live_ids(bridge: JvmBridge) -> set[str]:
    return set(bridge.executor_ids())


def record_events(scaler: Any) -> RecordingEventHandler:
    """Every event the autoscaler delivers from now on (throttled repeats excluded)."""
    recorder = RecordingEventHandler()
    scaler.events.handlers.append(recorder)
    return recorder


def bad_verdicts(recorder: RecordingEventHandler) -> list[str]:
    return [f"{e.kind}: {e.reason}" for e in recorder.events if e.kind in ("rollback", "pause", "stopped")]


def executor_pids(app_id: str) -> dict[str, int]:
    """Executor id -> pid of this application's executor JVMs (found by command line: other
    Spark applications may run on this machine)."""
    found: dict[str, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if "org.apache.spark.executor.CoarseGrainedExecutorBackend" not in args:
            continue
        if "--app-id" in args and args[args.index("--app-id") + 1] == app_id and "--executor-id" in args:
            found[args[args.index("--executor-id") + 1]] = int(entry.name)
    return found


def kill_busy_executor(bridge: JvmBridge, app_id: str, among: set[str]) -> tuple[str, float]:
    """SIGKILL the JVM of an executor in ``among`` while it runs a task (mid-batch)."""
    def busy() -> str | None:
        executors = bridge.snapshot().get("executors", {})
        running = [e for e in among if e in executors and executors[e].get("removedMs") is None
                   and int(executors[e].get("runningTasks", 0)) > 0]
        return sorted(running)[0] if running else None

    # The JVMs' pids first: a task may end in the time a process scan takes, and a kill that comes
    # after it fails no task (seen once on a loaded machine).
    pids = executor_pids(app_id)
    victim = wait_for(busy, 60, poll_s=0.1, what=f"a task running on one of executors {sorted(among)}")
    pid = pids[victim] if victim in pids else executor_pids(app_id)[victim]
    os.kill(pid, signal.SIGKILL)
    return victim, time.monotonic()


def drain_and_stop(job: StreamingJob) -> int:
    """Stop arrivals, let the query read what waits, stop it; the rows it read in all."""
    job.set_rate(0)
    # A batch planned after the rate fell to 0 (the one running now may have been planned before).
    after = (job.query.lastProgress or {}).get("batchId", -1) + 2

    def drained() -> bool:
        progress = job.query.lastProgress
        return bool(progress) and progress["batchId"] >= after and job.backlog() == 0

    wait_for(drained, 300, what="the query to read every row that arrived")
    progress = job.query.lastProgress
    job.stop()
    return int(json.loads(progress["sources"][0]["endOffset"])["offset"])


def check_exact(job: StreamingJob, rows_in: int) -> int:
    ids = job.written_ids()
    assert exactly_once(ids), "every row written exactly once"
    assert len(ids) == rows_in, (len(ids), rows_in)
    return len(ids)


# ------------------------------------------------------------------------------------------------
# Scenario 2: an executor killed from outside
# ------------------------------------------------------------------------------------------------


def test_an_executor_killed_from_outside_is_replaced_and_not_blamed_on_the_scaling(tmp_path: Path) -> None:
    spark = build_session("it-fault-killed-executor", fast_conf(tmp_path, workers=3, extra=FAST_CHECKERS | {
        "spark.sparkscale.initialExecutors": "2",
        "spark.sparkscale.minExecutors": "2",
        "spark.sparkscale.maxExecutors": "3",
        # No scale-down when the load falls after the scale-up: nothing else is judged meanwhile.
        "spark.sparkscale.scaleDownInterval": "10min",
    } | SHORT_WATCH))
    scaler = autoscaler(spark)
    events = record_events(scaler)
    bridge = JvmBridge(spark.sparkContext)
    app_id = spark.sparkContext.applicationId
    job = None
    try:
        wait(scaler, lambda: scaler.status()["target_executors"] == 2 and len(live_ids(bridge)) == 2,
             120, "the baseline of 2 executors")
        job = StreamingJob(spark, tmp_path, rows_per_second=220).start()
        wait(scaler, lambda: applied(scaler, "scale_up"), 150, "a scale-up 2 -> 3 under growing backlog")
        up = applied(scaler, "scale_up")[0]
        assert (up["from_executors"], up["to_executors"]) == (2, 3), up

        # 1. Killed while the scale-up is being judged: the executor it added, mid-batch.
        before = live_ids(bridge)
        wait(scaler, lambda: len(live_ids(bridge)) == 3, 90, "the third executor")
        added = live_ids(bridge) - before
        assert scaler.guard.watching is not None, "the scale-up is still being judged"
        victim, killed_at = kill_busy_executor(bridge, app_id, added)
        wait(scaler, lambda: victim not in live_ids(bridge) and len(live_ids(bridge)) == 3, 120,
             f"a replacement for executor {victim}")
        converge_watch = time.monotonic() - killed_at
        replaced_within = "within" if scaler.guard.watching is not None else "after"
        wait(scaler, lambda: scaler.guard.watching is None, 150, "the end of the scale-up's watch")
        status = scaler.status()
        assert not rollbacks(scaler) and not bad_verdicts(events), bad_verdicts(events)
        assert status["healthy_target"] == 3 and not status["paused"], status
        job.set_rate(60)  # 3 executors work the backlog off meanwhile (less to drain at the end)

        # 2. Killed while nothing is being judged: an original executor, mid-batch.
        victim2, killed_at2 = kill_busy_executor(bridge, app_id, live_ids(bridge))
        wait(scaler, lambda: victim2 not in live_ids(bridge) and len(live_ids(bridge)) == 3, 120,
             f"a replacement for executor {victim2}")
        converge_steady = time.monotonic() - killed_at2
        ticks = len(scaler.decisions())
        wait(scaler, lambda: len(scaler.decisions()) >= ticks + 3, 60, "three more ticks")
        status = scaler.status()
        assert status["target_executors"] == 3 and not status["paused"], status
        assert scaler.guard.watching is None
        assert not rollbacks(scaler) and not bad_verdicts(events), bad_verdicts(events)
        assert job.query.isActive and job.query.exception() is None

        rows_in = drain_and_stop(job)
        rows_out = check_exact(job, rows_in)
        failed = bridge.snapshot()["totals"]["tasksFailed"]
        # Each kill was aimed at an executor running a task; tasks last tenths of a second, so one
        # of the two may still land between tasks. At least one must have caught its task, or the
        # scenario did not test what it says.
        assert failed >= 1, "no kill failed a running task"
        print(f"FIGURES killed-executor: rows_in={rows_in} rows_out={rows_out} failed_tasks={failed} "
              f"actions={len(applied(scaler))} rollbacks={len(rollbacks(scaler))} "
              f"converge_s={converge_watch:.1f} (killed during the scale-up's watch, replaced "
              f"{replaced_within} it), "
              f"{converge_steady:.1f} (nothing judged)")
    finally:
        if job is not None:
            job.stop()
        spark.stop()


# ------------------------------------------------------------------------------------------------
# Scenario 4: the standalone Master unavailable for a while
# ------------------------------------------------------------------------------------------------


def _json(url: str) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return json.load(response)
    except (OSError, ValueError):
        return None


# What Spark's standalone Master logs when, recovering, it launches again an executor that still
# runs on a re-registering Worker (a race between its first scheduling and the Worker's report).
# The driver is then told the running executor exited, while its process keeps the Worker's core:
# the cluster cannot give the second executor, whatever is asked.
MASTER_RECOVERY_RACE = "state transfer from RUNNING to RUNNING is illegal"


def spark_lost_its_executor(standalone: Standalone, events: RecordingEventHandler) -> None:
    """When the Master's recovery race (:data:`MASTER_RECOVERY_RACE`) left no core for the scale-up:
    the autoscaler must have said so (a capacity limit, not an error), and the test ends as an
    expected failure of Spark's, not ours. Otherwise nothing: the caller's failure stands."""
    if MASTER_RECOVERY_RACE not in (standalone.work / "master.log").read_text(errors="replace"):
        return
    limits = [e for e in events.events if e.situation == "capacity-limit"]
    assert limits, ("the Master lost track of a running executor; the autoscaler said nothing of the "
                    "executors the cluster did not give", [e.reason for e in events.events])
    pytest.xfail(f"Spark's Master, recovering, relaunched a running executor ('{MASTER_RECOVERY_RACE}'): "
                 f"its core stayed taken and the cluster could not give a second; sparkscale held the "
                 f"target as a capacity limit: {limits[0].reason}")


@dataclass
class Standalone:
    """A Master and a Worker, each its own daemon process on loopback. The Master keeps its state
    in a recovery directory (spark.deploy.recoveryMode=FILESYSTEM): without it a restarted Master
    knows no application, and tells the re-registering Worker to kill the executors of one it
    does not know."""

    work: Path
    worker_cores: int
    port: int = field(default_factory=free_port)
    web: int = field(default_factory=free_port)
    master: subprocess.Popen | None = None
    worker: subprocess.Popen | None = None
    logs: list[Any] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        import pyspark

        return {**os.environ, "SPARK_HOME": os.path.dirname(pyspark.__file__), "SPARK_LOCAL_IP": "127.0.0.1",
                "SPARK_LOG_DIR": str(self.work), "PYSPARK_PYTHON": sys.executable,
                "SPARK_DAEMON_JAVA_OPTS": TEST_JVM_OPTIONS}

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen:
        log = open(self.work / f"{name}.log", "a")
        self.logs.append(log)
        return subprocess.Popen([str(Path(sys.executable).parent / "spark-class"), *args], env=self.env(),
                                stdout=log, stderr=subprocess.STDOUT)

    def start_master(self) -> None:
        properties = self.work / "master.properties"
        properties.write_text(f"spark.deploy.recoveryMode FILESYSTEM\n"
                              f"spark.deploy.recoveryDirectory {self.work / 'recovery'}\n"
                              "spark.master.rest.enabled false\n"
                              "spark.port.maxRetries 0\n")  # the same port again, or fail
        self.master = self._spawn("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                             "--port", str(self.port), "--webui-port", str(self.web),
                                             "--properties-file", str(properties)])

    def start_worker(self) -> None:
        self.worker = self._spawn("worker", ["org.apache.spark.deploy.worker.Worker", self.url, "--host",
                                             "127.0.0.1", "--cores", str(self.worker_cores), "--memory", "2g",
                                             "--webui-port", str(free_port()),
                                             "--work-dir", str(self.work / "worker")])

    def master_state(self) -> dict[str, Any] | None:
        return _json(f"http://127.0.0.1:{self.web}/json/")

    def stop_master(self) -> None:
        assert self.master is not None
        self.master.terminate()
        self.master.wait(timeout=60)

    def stop(self) -> None:
        for process in (self.worker, self.master):
            if process is not None and process.poll() is None:
                process.terminate()
        for process in (self.worker, self.master):
            if process is None:
                continue
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=30)
        for log in self.logs:
            log.close()


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[Standalone]:
    work = tmp_path / "standalone"
    work.mkdir()
    cluster = Standalone(work, worker_cores=2)
    try:
        cluster.start_master()
        cluster.start_worker()
        wait_for(lambda: (cluster.master_state() or {}).get("aliveworkers", 0) >= 1, 120,
                 what="the Worker to register with the Master")
        yield cluster
    finally:
        cluster.stop()


def request_failure(scaler: Any) -> dict[str, Any] | None:
    return scaler.status()["request_failure"]


def test_the_master_unavailable_for_a_while(standalone: Standalone, tmp_path: Path) -> None:
    spark = build_session("it-fault-master-down", fast_conf(tmp_path, extra=FAST_CHECKERS | {
        "spark.master": standalone.url,
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.sparkscale.initialExecutors": "1",
        "spark.sparkscale.maxExecutors": "2",
    }))
    scaler = autoscaler(spark)
    events = record_events(scaler)
    bridge = JvmBridge(spark.sparkContext)
    app_id = spark.sparkContext.applicationId
    job = None
    try:
        # The Master hands the application both cores at start; the autoscaler keeps 1.
        wait(scaler, lambda: scaler.status()["target_executors"] == 1 and len(live_ids(bridge)) == 1,
             120, "the baseline of 1 executor")
        job = StreamingJob(spark, tmp_path, rows_per_second=30).start()
        wait(scaler, lambda: (job.query.lastProgress or {}).get("batchId", -1) >= 3, 90, "a few batches")

        standalone.stop_master()
        down_at = time.monotonic()
        # One executor (about 100 rows/s) is not enough: a scale-up is wanted while the Master is down.
        # (130 rows/s are within the band on two executors, not on the target's one: see below.)
        job.set_rate(130)
        failing_from: list[int] = []  # the query's batch when the first request had failed

        def three_failures() -> bool:
            attempts = (request_failure(scaler) or {}).get("attempts", 0)
            if attempts and not failing_from:
                failing_from.append(job.query.lastProgress["batchId"])
            return attempts >= 3

        wait(scaler, three_failures, 150, "three failed requests for the scale-up")
        failure = request_failure(scaler)
        assert failure is not None
        times = failure["attempt_times"]
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert gaps == sorted(gaps) and gaps[-1] > gaps[0], f"backoff: {gaps}"
        ticks_while_down = [d for d in scaler.decisions() if d["time"] >= times[0]]
        assert len(ticks_while_down) > len(times), "not a request every tick"
        last = scaler.status()["last_decision"]
        assert last["action"] == "scale_up" and not last["applied"], last
        assert "cluster manager" in last["reason"], last["reason"]
        first = next(e for e in events.events if e.situation == "cluster-manager-unavailable")
        assert first.severity == "error" and "1 -> 2" in first.reason, first
        # The query goes on with the executor it has: two batches since the requests began failing
        # (counted from then, not from now: by now they have mostly run, and the Master is
        # restarted a couple of seconds sooner).
        wait(scaler, lambda: job.query.lastProgress["batchId"] >= failing_from[0] + 2, 90,
             "two batches while the Master is down")
        assert scaler.status()["target_executors"] == 1

        standalone.start_master()
        restarted_at = time.monotonic()
        restarted_ms = time.time() * 1000.0
        try:
            wait(scaler, lambda: (scaler.status()["target_executors"] == 2 and len(live_ids(bridge)) == 2
                                  and request_failure(scaler) is None), 180,
                 "the scale-up to 2 once the Master is back")
        except AssertionError:
            spark_lost_its_executor(standalone, events)
            raise
        converge = time.monotonic() - restarted_at
        # Back, the Master may start an executor on the free core unasked (it forgot the target). The
        # load needs it: it is kept. (In a run before 8167c1f the load read on both executors was
        # within the band: the target held at 1, that executor was removed, and the scale-up to 2
        # came 39 s after the Master's return. Other runs of that code scaled up before any such
        # reading, and this passes; test_evaluator.py has the case itself.)
        removed = {e: x["removedMs"] for e, x in bridge.snapshot()["executors"].items()
                   if x["removedMs"] is not None and x["removedMs"] >= restarted_ms}
        assert not removed, ("no executor removed after the Master came back", removed)
        recovered = [e for e in events.events if e.situation == "cluster-manager-available"]
        assert recovered, [e.reason for e in events.events]
        assert not rollbacks(scaler) and not bad_verdicts(events), bad_verdicts(events)
        status = scaler.status()
        assert not status["paused"] and status["errors"] == 0, status
        assert job.query.isActive and job.query.exception() is None

        rows_in = drain_and_stop(job)
        rows_out = check_exact(job, rows_in)
        failed = bridge.snapshot()["totals"]["tasksFailed"]
        print(f"FIGURES master-down: rows_in={rows_in} rows_out={rows_out} failed_tasks={failed} "
              f"actions={len(applied(scaler))} rollbacks={len(rollbacks(scaler))} "
              f"failed_requests={recovered[0].details['attempts']} "
              f"master_down_s={restarted_at - down_at:.1f} "
              f"converge_s={converge:.1f} (Master restart -> 2 executors)")
    finally:
        if job is not None:
            job.stop()
        if standalone.master is not None and standalone.master.poll() is not None:
            standalone.start_master()  # lets the application end cleanly on the Worker
        spark.stop()
        for pid in executor_pids(app_id).values():  # none should be left; never leak one
            os.kill(pid, signal.SIGKILL)
