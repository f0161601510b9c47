"""The autoscaler beside drivers that run no Python of the user's, enabled by configuration alone
(the plugin and ``spark.sparkscale.launch=agent``), each on a local-cluster:

- a Spark Connect server, a Spark Connect client in this process running a streaming query, then
  ``spark-pipelines run`` of a small pipeline against the same server (a streaming table over a
  backlog of files, with no Python function);
- a Java streaming job (tests/jvm_job/RateLoadJob.java, compiled here), whose agent is killed under
  load: restarted, it takes over the last healthy size from the driver's heap, and the job loses no
  row; and the same job with a key the autoscaler refuses, which stops its driver at the start.

The plugin starts the agent (``python -m sparkscale_listener agent``) over a gateway of its own; the
agent reads every session's queries from the JVM (no listener in any client). Every wait is a
condition with a deadline, read from the driver's event log, log and output.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyspark
import pytest
from spark_cluster import FAST, TEST_JVM_OPTIONS, free_port

from sparkscale_listener.testing.demo import read_event_log, wait_for

REPO = Path(__file__).resolve().parents[2]
JAR = REPO / "sparkscale_listener" / "jars" / "sparkscale-bridge-spark4_2.13.jar"
SPARK_HOME = Path(pyspark.__file__).parent
CONNECT_SERVER = "org.apache.spark.sql.connect.service.SparkConnectServer"
AGENT_LINE = "autoscaler started (mode="
SCALING = "io.sparkscale.bridge.ScalingEvent"
NOTICE = "io.sparkscale.bridge.AutoscalerEvent"
pytestmark = pytest.mark.spark

# The queries' load: 1.2 executors' work (a row waits 25 ms), so one executor falls behind and two
# keep up at the utilization target. No more: on one executor each batch takes longer than the one
# before it, and the scale-up waits for three of them (the model of the query's cost).
LOAD_ROWS_PER_S = 48
ROW_WAIT_MS = 25

# Three one-core executors on the machine's 2 cores: each row's work is a wait, not CPU.
CLUSTER = {
    **FAST,
    "spark.master": "local-cluster[3,1,1024]",
    "spark.executor.cores": "1",
    "spark.executor.memory": "512m",
    "spark.sql.shuffle.partitions": "3",
    "spark.eventLog.enabled": "true",
    "spark.eventLog.compress": "false",
    # One file, named .inprogress while the application runs: its last line may be half written.
    "spark.eventLog.rolling.enabled": "false",
    "spark.jars": str(JAR),
    "spark.plugins": "io.sparkscale.bridge.SparkscalePlugin",
    "spark.sparkscale.launch": "agent",
    "spark.sparkscale.initialExecutors": "1",
    "spark.sparkscale.maxExecutors": "3",
    # One scale-down straight back, as soon as the load is gone: the scale-down is what is waited for.
    "spark.sparkscale.scaleDownInterval": "4s",
    "spark.sparkscale.scaleDown.maxFactor": "1.0",
}


@dataclass
class Driver:
    """A driver JVM started by spark-submit, its output in ``log`` and its event log in ``events``."""

    process: subprocess.Popen[bytes]
    log: Path
    events: Path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def event_log(self) -> list[dict[str, Any]]:
        return read_event_log(self.events)

    def alive(self) -> None:
        if self.process.poll() is not None:
            raise RuntimeError(f"the driver exited with {self.process.returncode}:\n"
                               f"{self.log_text()[-4000:]}")

    def scalings(self, action: str) -> list[dict[str, Any]]:
        self.alive()
        return [e for e in self.event_log() if e.get("Event") == SCALING and e.get("applied")
                and e["action"] == action]

    def notices(self, situation: str) -> list[dict[str, Any]]:
        """The AutoscalerEvents of ``situation`` (``scaling-healthy`` matches ``scaling-healthy:3``)."""
        return [e for e in self.event_log() if e.get("Event") == NOTICE
                and e["details"].get("situation", "").split(":")[0] == situation]

    def agents_started(self) -> int:
        self.alive()
        return self.log_text().count(AGENT_LINE)

    def agent_pids(self) -> list[int]:
        """The agents the driver's JVM runs now (its child processes)."""
        children: list[int] = []
        for task in Path(f"/proc/{self.process.pid}/task").iterdir():
            try:
                children += [int(p) for p in (task / "children").read_text().split()]
            except FileNotFoundError:  # a JVM thread that ended meanwhile
                continue
        return [pid for pid in children
                if b"sparkscale_listener" in Path(f"/proc/{pid}/cmdline").read_bytes()]

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
        print(self.log_text()[-3000:])


def environment() -> dict[str, str]:
    # The agent and the executors' Python workers run this Python, with this tree's package.
    return {**os.environ, "SPARK_HOME": str(SPARK_HOME), "PYSPARK_PYTHON": sys.executable,
            "PYTHONPATH": str(REPO), "SPARK_LOCAL_IP": "127.0.0.1"}


def submit(work: Path, main: list[str], conf: Mapping[str, str]) -> Driver:
    """``spark-submit`` of ``main`` (``--class X`` and its jar or arguments) with ``conf``."""
    work.mkdir(parents=True, exist_ok=True)
    events = work / "events"
    events.mkdir()
    confs = [arg for key, value in {**conf, "spark.eventLog.dir": str(events)}.items()
             for arg in ("--conf", f"{key}={value}")]
    log = work / "driver.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [str(SPARK_HOME / "bin" / "spark-submit"), "--driver-java-options", TEST_JVM_OPTIONS, *confs,
             *main],
            cwd=work, env=environment(), stdout=out, stderr=subprocess.STDOUT)
    return Driver(process, log, events)


# -------------------------------------------------------------------------------- Spark Connect


@dataclass
class ConnectServer:
    driver: Driver
    url: str
    ui: str

    def tab_document(self) -> dict[str, Any]:
        """The document the Autoscaler tab's page carries (what its script renders)."""
        with urllib.request.urlopen(f"{self.ui}/autoscaler/", timeout=30) as response:
            page = response.read().decode("utf-8")
        match = re.search(r'<script type="application/json" id="sparkscale-document">(.*?)</script>', page,
                          re.S)
        assert match, "the tab's page carries no document"
        return dict(json.loads(match.group(1)))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    """The Connect server: the bridge jar, the plugin and launch=agent."""
    work = tmp_path_factory.mktemp("connect")
    port, ui_port = free_port(), free_port()
    driver = submit(work, ["--class", CONNECT_SERVER], {
        **CLUSTER,
        "spark.ui.enabled": "true",
        "spark.ui.port": str(ui_port),
        "spark.sql.warehouse.dir": str(work / "warehouse"),
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
    })
    try:
        yield ConnectServer(driver, f"sc://127.0.0.1:{port}", f"http://127.0.0.1:{ui_port}")
    finally:
        driver.stop()


def test_the_agent_beside_a_connect_server_scales_the_clients_query_up_and_down(server: ConnectServer,
                                                                               tmp_path: Path) -> None:
    driver = server.driver
    wait_for(lambda: driver.agents_started() >= 1, 120, what="the agent to start beside the Connect server")
    # The driver log carries the agent's own lines, on the logger the in-job launch's go to.
    assert f"INFO sparkscale: {AGENT_LINE}" in driver.log_text()

    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    client = SparkSession.builder.remote(server.url).getOrCreate()
    try:
        @F.udf("long")
        def work(value: int) -> int:
            import time

            time.sleep(0.025)  # ROW_WAIT_MS (a literal: the function runs on the executors)
            return value

        query = (client.readStream.format("rate").option("rowsPerSecond", LOAD_ROWS_PER_S)
                 .option("numPartitions", 3)
                 .load().select(work("value").alias("value"))
                 .writeStream.format("parquet").option("path", str(tmp_path / "out"))
                 .option("checkpointLocation", str(tmp_path / "checkpoint"))
                 .queryName("connect-load").start())
        try:
            [scaled, *_] = wait_for(lambda: driver.scalings("scale_up"), 180,
                                    what="a scale-up for the client's query")
            assert scaled["fromExecutors"] == 1 and scaled["toExecutors"] >= 2, scaled
            assert "connect-load" in scaled["reason"], scaled["reason"]
        finally:
            query.stop()
        # The query gone, the executors go back.
        [down, *_] = wait_for(lambda: driver.scalings("scale_down"), 120,
                              what="the scale-down once the client's query stopped")
        assert down["toExecutors"] == 1, down
        # Every value the rate source made, once, across the scalings.
        [row] = client.read.parquet(str(tmp_path / "out")).selectExpr(
            "count(*) AS n", "count(DISTINCT value) AS ids", "max(value) AS top").collect()
        assert row.n > 0 and (row.ids, row.top) == (row.n, row.n - 1), row
    finally:
        client.stop()
    # The server's Autoscaler tab shows the decisions the agent made.
    shown = {(d["action"], d["reason"]) for d in server.tab_document()["decisions"]}
    assert {("scale_up", scaled["reason"]), ("scale_down", down["reason"])} <= shown, shown


# 15 batches of 2 files. The scale-up comes after the 5th (2 warm-up batches, then the 3 the model
# of the flow's cost needs; 2026-12-03: the scale-up at the 5th of 18, 13 batches before the end):
# the 10 after it are the margin for a slower machine.
PIPELINE_FILES = 30
PIPELINE_ROWS_PER_FILE = 40

PIPELINE_SPEC = """\
name: sparkscale_test_pipeline
storage: {storage}
configuration:
  waited_rows.source: {source}
libraries:
  - glob:
      include: transformations/**
"""

# A streaming table over JSON files, 2 a batch; each row waits 25 ms on an executor (Java's
# Thread.sleep through the SQL function reflect: no Python function runs on the executors).
PIPELINE_FLOW = """\
from pyspark import pipelines as dp
from pyspark.sql import SparkSession

spark = SparkSession.active()


@dp.table
def waited_rows():
    source = spark.conf.get("waited_rows.source")
    return (spark.readStream.format("json").schema("id LONG").option("maxFilesPerTrigger", 2)
            .load(source).repartition(3)
            .selectExpr("id", "reflect('java.lang.Thread', 'sleep', CAST(25 AS BIGINT)) AS slept"))
"""


def test_a_pipeline_run_against_the_server_is_scaled_on_its_flow_and_writes_each_row_once(
        server: ConnectServer, tmp_path: Path) -> None:
    driver = server.driver
    wait_for(lambda: driver.agents_started() >= 1, 120, what="the agent to start beside the Connect server")

    def back_at_one() -> bool:
        # The previous test's last reads are batch jobs the agent may have scaled up for.
        applied = [e for e in driver.event_log() if e.get("Event") == SCALING and e.get("applied")]
        return not applied or applied[-1]["toExecutors"] == 1

    wait_for(back_at_one, 120, what="the server back at 1 executor")
    scaled_before = len(driver.scalings("scale_up"))
    source = tmp_path / "source"
    source.mkdir()
    for n in range(PIPELINE_FILES):  # a backlog: the run reads what is there when it starts
        rows = range(n * PIPELINE_ROWS_PER_FILE, (n + 1) * PIPELINE_ROWS_PER_FILE)
        (source / f"part-{n:03d}.json").write_text("".join(json.dumps({"id": i}) + "\n" for i in rows))
    project = tmp_path / "pipeline"
    (project / "transformations").mkdir(parents=True)
    (project / "pipeline.yml").write_text(PIPELINE_SPEC.format(storage=(tmp_path / "storage").as_uri(),
                                                              source=source))
    (project / "transformations" / "waited_rows.py").write_text(PIPELINE_FLOW)

    log = tmp_path / "pipeline.log"
    with open(log, "wb") as out:
        run = subprocess.run([str(SPARK_HOME / "bin" / "spark-pipelines"), "--remote", server.url, "run",
                              "--spec", str(project / "pipeline.yml")],
                             cwd=project, env=environment(), stdout=out, stderr=subprocess.STDOUT,
                             timeout=600)
    assert run.returncode == 0, log.read_text(errors="replace")[-4000:]

    ups = driver.scalings("scale_up")[scaled_before:]
    decided = [(e["action"], e["fromExecutors"], e["toExecutors"], e["applied"], e["reason"])
               for e in driver.event_log() if e.get("Event") == SCALING][-12:]
    assert ups, f"no scale-up during the pipeline's run; the last decisions: {decided}"
    assert "waited_rows" in ups[0]["reason"], ups[0]["reason"]

    from pyspark.sql import SparkSession

    client = SparkSession.builder.remote(server.url).getOrCreate()
    try:
        [row] = client.sql("SELECT count(*) AS n, count(DISTINCT id) AS ids FROM waited_rows").collect()
    finally:
        client.stop()
    assert (row.n, row.ids) == (PIPELINE_FILES * PIPELINE_ROWS_PER_FILE,) * 2


# -------------------------------------------------------------------------------- a JVM job


@pytest.fixture(scope="module")
def jvm_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/jvm_job/RateLoadJob.java, compiled against this pyspark's jars, in a jar."""
    build = tmp_path_factory.mktemp("jvm-job")
    classes = build / "classes"
    subprocess.run(["javac", "-d", str(classes), "-cp", str(SPARK_HOME / "jars" / "*"),
                    str(REPO / "tests" / "jvm_job" / "RateLoadJob.java")], check=True)
    jar = build / "rate-load-job.jar"
    subprocess.run(["jar", "cf", str(jar), "-C", str(classes), "."], check=True)
    return jar


def job_args(jar: Path, work: Path) -> list[str]:
    control = work / "control"
    control.mkdir(parents=True)
    return ["--class", "RateLoadJob", str(jar), str(control), str(work / "out"), str(LOAD_ROWS_PER_S),
            str(ROW_WAIT_MS)]


# No checker: a scaling is healthy at once (the restart is the subject, not the checkers' windows).
HEALTHY_AT_ONCE = {"spark.sparkscale.checkers": ""}


def test_the_agent_beside_a_jvm_job_comes_back_when_killed_under_load_with_the_last_healthy_size(
        jvm_job: Path, tmp_path: Path) -> None:
    driver = submit(tmp_path, job_args(jvm_job, tmp_path), {**CLUSTER, **HEALTHY_AT_ONCE})
    try:
        [up, *_] = wait_for(lambda: driver.scalings("scale_up"), 180, what="a scale-up for the job's load")
        assert up["fromExecutors"] == 1 and up["toExecutors"] >= 2 and "jvm-load" in up["reason"], up
        wait_for(lambda: driver.notices("scaling-healthy"), 120, what="the scale-up judged healthy")

        [pid] = driver.agent_pids()
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: driver.notices("agent-restarted"), 60, what="the event of the agent's restart")
        events = driver.event_log()
        restart = next(i for i, e in enumerate(events) if e.get("Event") == NOTICE
                       and e["details"].get("situation") == "agent-restarted")
        # As Java reports a killed process.
        assert events[restart]["details"]["exitCode"] == 128 + signal.SIGKILL
        # The last size judged healthy before the kill.
        size = [e for e in events[:restart] if e.get("Event") == NOTICE and e["details"].get(
            "situation", "").startswith("scaling-healthy:")][-1]["details"]["healthyTarget"]
        assert size >= 2
        baselines = wait_for(lambda: driver.notices("baseline")[1:], 60,
                             what="the restarted agent's baseline")
        # The restarted agent went on from that size (kept in the driver's heap), not from initialExecutors.
        assert f"restored last healthy target {size}" in baselines[0]["reason"], baselines[0]

        (tmp_path / "control" / "quiet").touch()
        wait_for(lambda: driver.scalings("scale_down"), 120, what="the scale-down in the quiet phase")
        (tmp_path / "control" / "end").touch()
        driver.process.wait(timeout=120)
        assert driver.process.returncode == 0, driver.log_text()[-4000:]
        [counted] = re.findall(r"rows=(\d+) distinct=(\d+) min=(-?\d+) max=(-?\d+)", driver.log_text())
        rows, distinct, low, high = map(int, counted)
        assert rows > 0 and (distinct, low, high) == (rows, 0, rows - 1), counted  # every value once
        assert not [e for e in driver.event_log() if e.get("Event") == "SparkListenerTaskEnd"
                    and e["Task End Reason"]["Reason"] != "Success" and e["Stage ID"] >= 0
                    and "killed" not in json.dumps(e["Task End Reason"]).lower()], "a task failed"
    finally:
        driver.stop()


def test_a_key_the_autoscaler_refuses_stops_the_jvm_jobs_driver_at_the_start(jvm_job: Path,
                                                                            tmp_path: Path) -> None:
    driver = submit(tmp_path, job_args(jvm_job, tmp_path),
                    {**CLUSTER, "spark.sparkscale.maxExecutors": "lots"})
    try:
        driver.process.wait(timeout=120)
        text = driver.log_text()
        assert driver.process.returncode != 0, text[-4000:]
        # The in-job launch's message, naming the key and the value.
        assert "spark.sparkscale.maxExecutors" in text and "'lots'" in text, text[-4000:]
        assert not (tmp_path / "out" / "load").exists()  # stopped before the job's query started
    finally:
        driver.stop()
