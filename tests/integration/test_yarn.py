"""Spark on a real YARN cluster: Apache Hadoop's ResourceManager and NodeManager on loopback
(tests/yarn_cluster.py), jobs submitted with ``spark-submit --master yarn`` as users do.

The cluster's Spark configuration is what EMR and Dataproc ship: ``spark-defaults.conf`` names
YARN and turns dynamic allocation on. A job that keeps that default is refused before it asks
YARN for anything; a job that turns it off (the README's advice) is scaled by the autoscaler in
YARN containers, in a queue too small for what its load asks: the executors YARN cannot place
are a capacity limit, the target is held at what the queue gave, and a later scale-down gives a
container back. Every row reaches the sink exactly once and no task fails. Every wait is a
condition with a deadline.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyspark
import pytest
from spark_cluster import QUICK_SCALE_DOWN, TEST_JVM_OPTIONS
from yarn_cluster import Queue, YarnCluster

from sparkscale_listener.testing.demo import read_event_log

pytestmark = pytest.mark.spark
REPO = Path(__file__).resolve().parents[2]
JOB = REPO / "tests" / "yarn" / "yarn_job.py"
SPARK_HOME = Path(pyspark.__file__).parent
# Containers are sized in memory (the CapacityScheduler's default calculator ignores vcores). An
# executor (512m heap + 384m overhead) and the ApplicationMaster each take 896 MB; the streaming
# queue, half of the node's 6144 MB, holds the ApplicationMaster and 2 executors, not 3.
NODE_MEMORY_MB = 6144
QUEUES = (Queue("default", 50), Queue("streaming", 50))
QUEUE_EXECUTORS = 2
# The autoscaler's limit: past the queue's room, but only by one (see submit()).
MAX_EXECUTORS = QUEUE_EXECUTORS + 1


@pytest.fixture(scope="module")
def yarn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[YarnCluster]:
    cluster = YarnCluster(tmp_path_factory.mktemp("yarn"), node_memory_mb=NODE_MEMORY_MB, queues=QUEUES)
    with cluster.start():
        yield cluster


@pytest.fixture(scope="module")
def spark_conf_dir(yarn: YarnCluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The cluster's SPARK_CONF_DIR, as a managed platform ships it: YARN, dynamic allocation on.

    The containers take Spark's jars from the pyspark wheel's own folder (``local:``: present on
    every node, which is this machine), and the staging directory is a local path: no HDFS.
    """
    conf_dir = tmp_path_factory.mktemp("spark-conf")
    defaults = {
        "spark.master": "yarn",
        "spark.dynamicAllocation.enabled": "true",  # as EMR and Dataproc set it
        "spark.yarn.jars": f"local:{SPARK_HOME / 'jars'}/*",
        "spark.yarn.stagingDir": (conf_dir / "staging").as_uri(),
        "spark.yarn.am.memory": "512m",
        "spark.executor.memory": "512m",
        "spark.executor.cores": "1",
        "spark.driver.host": "127.0.0.1",
        # Everything on loopback: the driver in cluster mode and the executors bind there too.
        "spark.yarn.appMasterEnv.SPARK_LOCAL_IP": "127.0.0.1",
        "spark.executorEnv.SPARK_LOCAL_IP": "127.0.0.1",
        # The ApplicationMaster and the executors report to the ResourceManager every second
        # (the default, 3 s, only slows the test).
        "spark.yarn.scheduler.heartbeat.interval-ms": "1000",
        "spark.yarn.scheduler.initial-allocation.interval": "200ms",
        # Every container's JVM and the driver's with the suite's options (the ApplicationMaster of
        # client mode has a key of its own).
        "spark.driver.extraJavaOptions": TEST_JVM_OPTIONS,
        "spark.executor.extraJavaOptions": TEST_JVM_OPTIONS,
        "spark.yarn.am.extraJavaOptions": TEST_JVM_OPTIONS,
    }
    (conf_dir / "spark-defaults.conf").write_text("".join(f"{k} {v}\n" for k, v in defaults.items()),
                                                   encoding="utf-8")
    return conf_dir


def submit(yarn: YarnCluster, conf_dir: Path, workdir: Path, *args: str,
           timeout_s: float = 420) -> subprocess.CompletedProcess[str]:
    """``spark-submit --master yarn`` of the job, with the cluster's configuration directories."""
    venv_bin = Path(sys.executable).parent
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_CONF_DIR")}
    env.update(HADOOP_CONF_DIR=str(yarn.conf_dir), YARN_CONF_DIR=str(yarn.conf_dir),
               SPARK_CONF_DIR=str(conf_dir), SPARK_HOME=str(SPARK_HOME), PYSPARK_PYTHON=sys.executable,
               SPARK_LOCAL_IP="127.0.0.1",
               PATH=f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}")
    # The suite's faster autoscaler settings (a tick a second), as the other files use them, with a
    # shorter scale-down delay: the job ends on its scale-down. maxExecutors 3 (the job's own is 4)
    # is still past the queue's 2, and the first scale-up reaches it: with 4 a second one (3 -> 4)
    # came while the first's executors were awaited and started provisioningTimeout's 30 s over,
    # and the backlog of those 20 s more (batches of 400 rows at the high rate) took the low phase
    # seconds more to work off.
    conf = {**QUICK_SCALE_DOWN, "spark.sparkscale.maxExecutors": str(MAX_EXECUTORS)}
    settings = [f"{k}={v}" for k, v in conf.items() if k.startswith("spark.sparkscale.")]
    command = [str(venv_bin / "spark-submit"), *args, str(JOB), str(workdir), yarn.web_url, *settings]

    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    return subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout_s)


def result_of(run: subprocess.CompletedProcess[str], workdir: Path) -> dict[str, Any]:
    """The job's result.json (in cluster mode the driver's stdout is a container's log)."""
    path = workdir / "result.json"
    assert path.exists(), f"no result; exit {run.returncode}\n{run.stdout[-3000:]}\n{run.stderr[-5000:]}"
    return json.loads(path.read_text(encoding="utf-8"))


def test_a_cluster_default_of_dynamic_allocation_is_refused_before_yarn_is_asked(
        yarn: YarnCluster, spark_conf_dir: Path, tmp_path: Path) -> None:
    before = {a["id"] for a in yarn.applications()}
    run = submit(yarn, spark_conf_dir, tmp_path / "work", "--queue", "streaming", timeout_s=180)
    output = run.stdout + run.stderr
    assert run.returncode != 0, output[-3000:]
    assert "ConfigError: spark.dynamicAllocation.enabled=true" in output, output[-3000:]
    assert "spark.dynamicAllocation.enabled=false" in output  # what to do
    # Refused before the SparkContext: no application reached the ResourceManager.
    assert {a["id"] for a in yarn.applications()} == before
    assert "RESULT " not in run.stdout


# Cluster mode, as a streaming job is submitted to a cluster: the driver, with the wheel's Python and
# the autoscaler, runs in the ApplicationMaster's container. (Client mode, the driver in
# spark-submit's JVM, is the refusal above and every local-cluster file; the scale-up and
# scale-down are the same calls on the same backend in both.)
def test_scaled_in_yarn_containers_and_held_at_the_queues_capacity(
        yarn: YarnCluster, spark_conf_dir: Path, tmp_path: Path) -> None:
    work = tmp_path / "work"
    # In cluster mode the driver runs in the ApplicationMaster's container: the same 896 MB.
    run = submit(yarn, spark_conf_dir, work, "--deploy-mode", "cluster", "--queue", "streaming",
                 "--driver-memory", "512m",
                 "--num-executors", "1", "--conf", "spark.dynamicAllocation.enabled=false")
    print(run.stdout[-4000:])
    result = result_of(run, work)
    print(f"phases (s): {result['phases_s']}")
    assert run.returncode == 0, run.stderr[-5000:]
    app_id = result["app_id"]
    assert app_id.startswith("application_"), app_id
    applied = [(a["action"], a["from_executors"], a["to_executors"]) for a in result["applied"]]
    # Up from 1 past the queue's room (in one or two steps: the first may come while the batch
    # reading across the step still runs); held at what it gave; down again at low load.
    ups = [a for a in applied if a[0] == "scale_up"]
    assert applied[0][:2] == ("scale_up", 1) and max(to for _, _, to in ups) > QUEUE_EXECUTORS, applied
    assert len(ups) == 1 or (len(ups) == 2 and ups[1][1] == ups[0][2]), applied  # no scaling up beyond
    # What YARN itself reports: the ApplicationMaster's container and one per executor, in the
    # queue the job was submitted to.
    at_capacity = result["yarn"]["at_capacity"]
    assert at_capacity["queue"] in ("streaming", "root.streaming"), at_capacity
    assert at_capacity["runningContainers"] == 1 + QUEUE_EXECUTORS, at_capacity
    assert applied[-1][0] == "scale_down" and applied[-1][2] < QUEUE_EXECUTORS, applied
    after = result["yarn"]["after_scale_down"]
    assert after["runningContainers"] == 1 + applied[-1][2], after
    assert result["exactly_once"] and result["rows"] > 0, result

    events = read_event_log(work / "events")
    added = [e["Executor ID"] for e in events if e["Event"] == "SparkListenerExecutorAdded"]
    removed = [e["Executor ID"] for e in events if e["Event"] == "SparkListenerExecutorRemoved"]
    assert len(added) == QUEUE_EXECUTORS, added
    assert removed, "the scale-down removed an executor"
    failed = [e for e in events if e["Event"] == "SparkListenerTaskEnd" and e["Task Info"]["Failed"]]
    assert not failed, failed[:3]
    ours = [e for e in events if e["Event"].endswith("AutoscalerEvent")]
    capacity = [e for e in ours if e.get("kind") == "capacity"]
    assert capacity and f"gave {QUEUE_EXECUTORS} of" in capacity[0]["reason"], capacity
    assert not [e for e in ours if e.get("kind") in ("rollback", "pause", "stopped")], ours
    # Every executor came in a container of its own, launched by the NodeManager: the
    # ApplicationMaster's and one per executor, no more.
    assert len(yarn.containers_launched(app_id)) == 1 + len(added), yarn.containers_launched(app_id)
    report = next(a for a in yarn.applications() if a["id"] == app_id)
    assert (report["state"], report["finalStatus"]) == ("FINISHED", "SUCCEEDED"), report
