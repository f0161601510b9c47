"""The older supported Spark lines, 3.5 and 4.0, each with one real-Spark smoke test (every other
file runs the project's own pyspark, the newest 4.x).

Each line runs tests/older_line_smoke.py in a driver of its own, in a virtualenv with that pyspark
(tests/spark_lines.py): the line's bridge jar loads through the same ``autoscale()`` call, Spark's
Kafka connector of that line reads a topic with records waiting at start, the autoscaler scales up
for the lag and gives the executors back once it is worked off, every record reaches the sink
once with no failed task, the bridge reads the topic's latest offsets between batches, and the
ScalingEvents are in the event log. The two lines run side by side (their work is mostly sleeping
tasks), each on a topic of its own of one broker.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from kafka_broker import KafkaBroker, connector_jars
from spark_cluster import QUICK_SCALE_DOWN
from spark_lines import OLDER_LINES, REPO, pyspark_home, python_with_pyspark

pytestmark = pytest.mark.spark
SMOKE_JOB = REPO / "tests" / "older_line_smoke.py"
RECORDS = 3000  # 30 s of work for one executor at 10 ms a record


def test_older_lines_start_read_kafka_scale_up_for_its_lag_and_down_after(broker: KafkaBroker,
                                                                          tmp_path: Path) -> None:
    runs = {}
    for version, scala in OLDER_LINES.items():
        python = python_with_pyspark(version)
        connector_version, jars = connector_jars(version, scala, pyspark_home(version) / "jars")
        topic = f"smoke-{version.replace('.', '-')}"
        broker.create_topic(topic, 8)
        with broker.producer(topic) as backlog:
            backlog.send(RECORDS)
        env = {**os.environ, "PYTHONPATH": str(REPO), "SPARK_LOCAL_IP": "127.0.0.1"}
        env.pop("SPARK_HOME", None)
        workdir = tmp_path / version
        workdir.mkdir()
        out = open(workdir / "stdout", "w+", encoding="utf-8")  # closed in the finally below
        err = open(workdir / "stderr", "w+", encoding="utf-8")
        process = subprocess.Popen([python, str(SMOKE_JOB), str(workdir / "work"), broker.bootstrap, topic,
                                    str(RECORDS), ",".join(map(str, jars)), json.dumps(QUICK_SCALE_DOWN)],
                                   cwd=workdir, env=env, stdout=out, stderr=err, text=True)
        runs[version] = (process, out, err, connector_version)
    try:
        for version, (process, out, err, connector_version) in runs.items():
            process.wait(timeout=600)
            out.seek(0)
            err.seek(0)
            stdout, stderr = out.read(), err.read()
            lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
            assert lines, f"{version}: exit {process.returncode}\n{stdout[-2000:]}\n{stderr[-4000:]}"
            result = json.loads(lines[-1][len("RESULT "):])
            print(f"Spark {version}, connector {connector_version}:", result)
            assert result["spark"] == version
            actions = [action for action, _ in result["applied"]]
            ups = [reason for action, reason in result["applied"] if action == "scale_up"]
            assert ups and re.search(r"backlog [1-9][\d,]* rows", ups[0]), result["applied"]
            assert "scale_down" in actions[actions.index("scale_up"):], actions
            assert result["count"] == RECORDS and result["distinct"] == RECORDS, result
            assert result["latest_offsets"] == [RECORDS, 8], result
            assert result["failed_tasks"] == 0, result
            logged = [e["action"] for e in result["scaling_events"]]
            assert "scale_up" in logged and "scale_down" in logged[logged.index("scale_up"):], result
            assert process.returncode == 0
    finally:
        for process, out, err, _ in runs.values():
            if process.poll() is None:
                process.kill()
                process.wait(60)
            out.close()
            err.close()
