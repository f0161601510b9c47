"""The autoscaler beside a driver that runs no Python of the user's: a Spark Connect server started
with the plugin and ``spark.sparkscale.launch=agent`` alone, on a local-cluster, and a Spark Connect
client in this process running a streaming query.

The plugin starts the agent (``python -m sparkscale_listener agent``) over a gateway of its own; the
agent reads the client session's query from the JVM (no listener in the client) and scales the
application up for it. Killed, the agent is started again and says so in the event log. Every wait
is a condition with a deadline, read from the server's event log and log.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyspark
import pytest
from spark_cluster import FAST, TEST_JVM_OPTIONS, free_port

from sparkscale_listener.testing.demo import read_event_log, wait_for

REPO = Path(__file__).resolve().parents[2]
JAR = REPO / "sparkscale_listener" / "jars" / "sparkscale-bridge-spark4_2.13.jar"
CONNECT_SERVER = "org.apache.spark.sql.connect.service.SparkConnectServer"
AGENT_LINE = "autoscaler started (mode="
pytestmark = pytest.mark.spark


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    url: str
    log: Path
    events: Path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def event_log(self) -> list[dict[str, Any]]:
        return read_event_log(self.events)

    def alive(self) -> None:
        if self.process.poll() is not None:
            raise RuntimeError(f"the Connect server exited with {self.process.returncode}:\n"
                               f"{self.log_text()[-4000:]}")

    def agent_pids(self) -> list[int]:
        """The agents the server's JVM runs now (its child processes)."""
        children: list[int] = []
        for task in Path(f"/proc/{self.process.pid}/task").iterdir():
            try:
                children += [int(p) for p in (task / "children").read_text().split()]
            except FileNotFoundError:  # a JVM thread that ended meanwhile
                continue
        return [pid for pid in children
                if b"sparkscale_listener" in Path(f"/proc/{pid}/cmdline").read_bytes()]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The Connect server: the bridge jar, the plugin and launch=agent, FAST's settings."""
    work = tmp_path_factory.mktemp("connect")
    events = work / "events"
    events.mkdir()
    port = free_port()
    conf = {
        **FAST,
        "spark.master": "local-cluster[3,1,1024]",
        "spark.executor.cores": "1",
        "spark.executor.memory": "512m",
        "spark.sql.shuffle.partitions": "3",
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": str(events),
        "spark.eventLog.compress": "false",
        "spark.jars": str(JAR),
        "spark.plugins": "io.sparkscale.bridge.SparkscalePlugin",
        "spark.sparkscale.launch": "agent",
        "spark.sparkscale.initialExecutors": "1",
        "spark.sparkscale.maxExecutors": "3",
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
    }
    spark_home = Path(pyspark.__file__).parent
    # The agent and the executors' Python workers run this Python, with this tree's package.
    env = {**os.environ, "SPARK_HOME": str(spark_home), "PYSPARK_PYTHON": sys.executable,
           "PYTHONPATH": str(REPO), "SPARK_LOCAL_IP": "127.0.0.1"}
    log = work / "server.log"
    confs = [arg for key, value in conf.items() for arg in ("--conf", f"{key}={value}")]
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [str(spark_home / "bin" / "spark-submit"), "--class", CONNECT_SERVER,
             "--driver-java-options", TEST_JVM_OPTIONS, *confs],
            cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    running = Server(process, f"sc://127.0.0.1:{port}", log, events)
    try:
        yield running
    finally:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
        print(running.log_text()[-3000:])


def agent_started(server: Server, times: int) -> bool:
    server.alive()
    return server.log_text().count(AGENT_LINE) >= times


def test_the_agent_beside_a_connect_server_scales_the_clients_query_and_comes_back_when_killed(
        server: Server, tmp_path: Path) -> None:
    wait_for(lambda: agent_started(server, 1), 120, what="the agent to start beside the Connect server")
    # The driver log carries the agent's own lines, on the logger the in-job launch's go to.
    assert f"INFO sparkscale: {AGENT_LINE}" in server.log_text()

    [pid] = server.agent_pids()
    os.kill(pid, signal.SIGKILL)
    restarted = wait_for(lambda: [e for e in server.event_log() if e.get("Event") == "io.sparkscale.bridge."
                                  "AutoscalerEvent" and e["details"].get("situation") == "agent-restarted"],
                         60, what="the event of the agent's restart")
    assert restarted[0]["details"]["exitCode"] == 128 + signal.SIGKILL  # as Java reports a killed process
    wait_for(lambda: agent_started(server, 2), 60, what="the agent to start again")

    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    client = SparkSession.builder.remote(server.url).getOrCreate()
    try:
        @F.udf("long")
        def work(value: int) -> int:
            import time

            time.sleep(0.025)  # a row's work: a wait, not CPU, so that 2 cores can run 3 executors
            return value

        query = (client.readStream.format("rate").option("rowsPerSecond", 60).option("numPartitions", 3)
                 .load().select(work("value").alias("value"))
                 .writeStream.format("noop").option("checkpointLocation", str(tmp_path / "checkpoint"))
                 .queryName("connect-load").start())
        try:
            scaled = wait_for(lambda: server.alive() or [
                e for e in server.event_log() if e.get("Event") == "io.sparkscale.bridge.ScalingEvent"
                and e.get("applied") and e["action"] == "scale_up"], 180,
                what="a scale-up for the client's query")
            assert scaled[0]["fromExecutors"] == 1 and scaled[0]["toExecutors"] >= 2, scaled[0]
            assert "connect-load" in scaled[0]["reason"], scaled[0]["reason"]
        finally:
            query.stop()
    finally:
        client.stop()
