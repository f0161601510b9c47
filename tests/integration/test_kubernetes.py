"""Spark on Kubernetes: Spark's own Kubernetes backend against an API server on loopback, executor pods
run by a test kubelet as local processes (tests/kubernetes_cluster.py says what each stands in for).

One client-mode application (the README's one line, ``--master k8s://http://127.0.0.1:PORT``) runs the
scenarios in turn, each with an autoscaler of its own: a load step on a stateful query scaled up
through pod batches, an executor pod OOM-killed under the load, and the executors given back by graceful
decommission (their pods deleted); pods Pending while a node is provisioned; pods that never schedule
(a full node).
A second application runs in cluster mode (``spark-submit --deploy-mode cluster``, its driver a pod of
the kubelet's): the driver pod is killed and the application submitted again, and the new driver starts
at the last healthy size kept in a ConfigMap (``stateStore=kubernetes``). Every scenario asserts the
pods created and deleted on the server, the executor processes started and ended, and the decisions.
Every wait is a condition with a deadline.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_cluster import SPARK_HOME, ApiServer, TestKubelet
from spark_cluster import FAST, TEST_JVM_OPTIONS, SharedCluster, applied, rollbacks

from sparkscale_listener.testing import source as testing_source
from sparkscale_listener.testing.demo import (
    StreamingJob,
    cost_learned,
    exactly_once,
    read_event_log,
    wait_for,
    wait_for_autoscaler,
)

pytestmark = pytest.mark.spark

BATCH_SIZE = 1  # spark.kubernetes.allocation.batch.size: every scale-up of 2 or more takes several batches
BATCH_DELAY_S = 1.0
CLUSTER_JOB = Path(__file__).resolve().parents[1] / "kubernetes" / "cluster_job.py"
PENDING_S = 30  # how long a node takes to come in the Pending scenario (6x the provisioningTime it sets)


@pytest.fixture(scope="module")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ApiServer, TestKubelet]]:
    workdir = tmp_path_factory.mktemp("kubernetes")
    with ApiServer(workdir / "apiserver").start() as server, \
            TestKubelet(server, workdir / "node").start() as kubelet:
        yield server, kubelet
        assert not kubelet.errors, "the test kubelet failed:\n" + "\n".join(kubelet.errors[-3:])


@pytest.fixture(scope="module")
def app(kube: tuple[ApiServer, TestKubelet],
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedCluster]:
    server, _ = kube
    conf = {
        "spark.master": f"k8s://{server.url}",
        # Never pulled: the test kubelet runs the pods' command with the pyspark folder as SPARK_HOME.
        "spark.kubernetes.container.image": "apache/spark:test",
        "spark.kubernetes.namespace": "default",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.executor.instances": "1",
        "spark.kubernetes.allocation.batch.size": str(BATCH_SIZE),
        "spark.kubernetes.allocation.batch.delay": f"{BATCH_DELAY_S:g}s",
        # Spark deletes the Pending pods beyond a lowered target only once they are this old (60 s by
        # default, read even with dynamic allocation off): the never-scheduling scenario waited 40 s.
        "spark.dynamicAllocation.executorIdleTimeout": "15s",
        # Graceful decommission, as Kubernetes users give executors back (the first scenario does).
        "spark.decommission.enabled": "true",
        "spark.storage.decommission.enabled": "true",
        "spark.storage.decommission.shuffleBlocks.enabled": "true",
        "spark.storage.decommission.rddBlocks.enabled": "true",
        # A decommissioned executor exits once a migration round finds nothing left after its last
        # task; rounds are this far apart (30 s by default, most of what a scale-down waited).
        "spark.storage.decommission.replicationReattemptInterval": "5s",
        "spark.sparkscale.maxExecutors": "5",
        "spark.sparkscale.provisioningTimeout": "120s",
    }
    cluster = SharedCluster(tmp_path_factory.mktemp("k8s-app"), "k8s-scenarios", conf=conf)
    try:
        yield cluster
    finally:
        cluster.stop()


def app_pods(server: ApiServer, cluster: SharedCluster) -> list[dict[str, Any]]:
    return server.pods("default", **{"spark-app-selector": cluster.spark.sparkContext.applicationId,
                                     "spark-role": "executor"})


def phases(server: ApiServer, cluster: SharedCluster) -> Counter[str]:
    return Counter(p["status"]["phase"] + ("/deleting" if p["metadata"].get("deletionTimestamp") else "")
                   for p in app_pods(server, cluster))


def test_a_stateful_step_scales_up_through_pod_batches_and_back_by_graceful_decommission(
        kube: tuple[ApiServer, TestKubelet], app: SharedCluster) -> None:
    """A load step on a query with a shuffle and state: scaled up through pod batches; one executor
    pod OOM-killed under the load; the quiet phase gives the executors back by graceful decommission
    (Spark's block migration), their pods deleted and their processes ended; the windowed counts
    exact."""
    from test_autoscaler_spark import TRIGGER_S, StatefulQuery, check_exact

    server, kubelet = kube
    spark = app.spark
    scaler = app.scenario(**{"scaleDown.decommission": "true", "scaleDown.maxFactor": "1.0",
                             "scaleDownInterval": "4s"})
    failed_before = app.tasks_failed()
    wait_for(lambda: scaler.status()["live_executors"] == 1 and phases(server, app) == {"Running": 1}, 120,
             what="the first executor pod running")
    started_before = set(kubelet.started)
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    query = StatefulQuery(spark, app.workdir, "hdfs").start()
    try:
        wait_for(lambda: cost_learned(scaler), 180, what="the model of the query's batch cost")
        # Its 3 source partitions at 10 ms a row: 3 executors, more than one allocation batch brings.
        # (Not more: batches of at most 500 rows every 4 s keep up with 160 rows/s on 3 executors;
        # at 220 a backlog grew all through the step, and the quiet phase waited 20 s to drain it.)
        # The step is timed at a trigger (every TRIGGER_S s since the epoch while the query keeps
        # up), so that the batch after it reads the new rate whole and the scale-up is one action:
        # a batch that straddled the step read 86 rows/s and asked for 2 executors, then 3.
        stepped = (math.floor(time.time() / TRIGGER_S) + 1) * TRIGGER_S
        testing_source.set_rate(str(query.control), 160, at=stepped)

        def step_scale_ups() -> list[dict[str, Any]]:
            # (The query's fixed cost per batch may have asked for a second executor before.)
            return [d for d in applied(scaler, "scale_up") if d["time"] >= stepped]

        wait_for_autoscaler(scaler, step_scale_ups, 120, what="a scale-up under the step")
        up = step_scale_ups()[0]
        # Assumed until measured (or measured on that earlier executor): what the status adds the
        # later batches' wait to.
        provisioning_s = scaler.status()["provisioning_time_s"]
        added = up["to_executors"] - up["from_executors"]
        assert added > BATCH_SIZE, f"the step must need more pods than one allocation batch: {up}"
        said: list[str] = []

        def registered() -> bool:
            status = scaler.status()
            said.append(status["waiting_for"] or "")
            return status["live_executors"] >= up["to_executors"]

        wait_for_autoscaler(scaler, registered, 120, what=f"{up['to_executors']} executors registered")
        # Expected: the provisioning time, and the later batches' wait.
        expected_s = provisioning_s + (math.ceil(added / BATCH_SIZE) - 1) * BATCH_DELAY_S
        batches = [w for w in said if f"{BATCH_SIZE} at a time, {BATCH_DELAY_S:g} s apart" in w]
        assert batches and all(f" {expected_s:.0f} s" in w for w in batches), f"the batches expected: {said}"

        # The rising rate may ask for one more; once the executors match the target, every pod is counted.
        def at_target() -> bool:
            status = scaler.status()
            return (status["live_executors"] == status["target_executors"]
                    and phases(server, app) == {"Running": status["target_executors"]})

        wait_for_autoscaler(scaler, at_target, 120, what="the executors at the target, every pod running")
        target = scaler.status()["target_executors"]
        new_pods = [k for k in kubelet.started if k not in started_before]
        # One pod per executor asked for, in batches, and no second request for the same executors.
        assert len(new_pods) == target - 1, f"pods started for the scale-ups to {target}: {new_pods}"
        registered_at = sorted(e["Timestamp"] for e in read_event_log(app.events_dir)
                               if e["Event"] == "SparkListenerExecutorAdded"
                               and e["Timestamp"] >= up["time"] * 1000)
        took = (registered_at[added - 1] / 1000 - up["time"]) if len(registered_at) >= added else float("nan")
        print(f"FIGURES k8s step: {up['from_executors']} -> {up['to_executors']} executors "
              f"({math.ceil(added / BATCH_SIZE)} allocation batches of {BATCH_SIZE}, expected within "
              f"{expected_s:.0f} s), request->registered {took:.1f} s; final target {target}, "
              f"pods {len(new_pods)}; the status said: {batches[0]}")

        # Under the load, the node OOM-kills one executor's container: Spark replaces the pod; the
        # autoscaler counts the executor lost (not a scale-down of its own) and rolls nothing back.
        assert app.tasks_failed() == failed_before, "adding executors fails no task"
        decisions_before = len(applied(scaler))
        victim = sorted(kubelet.running)[-1].split("/")[1]
        killed_at = time.time()
        kubelet.oom_kill(victim)
        wait_for(lambda: victim not in {p["metadata"]["name"] for p in app_pods(server, app)}, 60,
                 what="the OOM-killed pod removed by Spark")
        # (The load may ask for one executor more meanwhile: the target is read afresh.)
        wait_for_autoscaler(scaler, lambda: len(kubelet.started) > len(new_pods) + len(started_before)
                            and at_target(), 120,
                            what="a replacement pod running, the executors at the target")

        def lost() -> list[Any]:
            """The executors the autoscaler's last sample knows as lost (removed, not by the driver)."""
            return [e for e in scaler._history[-1].cluster.executors if e.lost_since(killed_at - 1)]

        wait_for(lost, 30, what="the OOM-killed executor in the autoscaler's sample, as lost")
        assert len(lost()) == 1 and "137" in (lost()[0].removed_reason or ""), f"one executor lost: {lost()}"
        assert not [d for d in applied(scaler)[decisions_before:] if d["action"] == "scale_down"]
        assert not rollbacks(scaler)
        target = scaler.status()["target_executors"]
        new_pods = [k for k in kubelet.started if k not in started_before]
        assert len(new_pods) == target, f"the scale-ups' pods to {target} and one replacement: {new_pods}"
        reason = (lost()[0].removed_reason or "").strip().splitlines()[0]
        print(f"FIGURES k8s oom: {victim} OOM-killed, removal reason {reason!r}, replaced by Spark")

        # The quiet phase: the executors given back by graceful decommission, their blocks (shuffle
        # output, state) migrated first; from here on no task may fail, FetchFailed included.
        failed_before = app.tasks_failed()
        before = set(kubelet.running)
        query.set_rate(5)
        wait_for_autoscaler(scaler, lambda: applied(scaler, "scale_down")
                            and scaler.status()["live_executors"] < len(before), 240,
                            what="a scale-down by decommission")
        down = applied(scaler, "scale_down")[-1]
        wait_for(lambda: phases(server, app) == {"Running": down["to_executors"]}, 60,
                 what="the removed executors' pods deleted")
        wait_for(lambda: len(set(kubelet.ended) & before) == len(before) - down["to_executors"], 120,
                 what="the removed executors' processes ended")
        gone = sorted(set(kubelet.ended) & before)
        query.query.stop()
        windows = check_exact(query)
    finally:
        if query.query is not None and query.query.isActive:
            query.query.stop()
        spark.conf.set("spark.sql.shuffle.partitions", app.conf["spark.sql.shuffle.partitions"])
    logs = {k: (kubelet.runs[k].log.read_text(errors="replace") if kubelet.runs[k].log else "") for k in gone}
    migrated = [k for k, text in logs.items() if "all blocks migrated" in text]
    print(f"FIGURES k8s decommission: removed {gone}, ended {[kubelet.ended[k] for k in gone]}, "
          f"migrated {migrated}, windows {windows}")
    assert migrated, "a decommissioned executor migrated its blocks before it stopped"
    assert app.tasks_failed() == failed_before, "no task fails while the executors are decommissioned"
    assert not rollbacks(scaler)
    assert windows >= 3
    scaling = app.events("ScalingEvent")
    assert {"scale_up", "scale_down"} <= {e["action"] for e in scaling}
    assert all({"fromExecutors", "toExecutors", "reason"} <= set(e) for e in scaling), scaling


def test_pods_pending_while_a_node_is_provisioned_are_waited_for_not_rolled_back(
        kube: tuple[ApiServer, TestKubelet], app: SharedCluster) -> None:
    server, kubelet = kube
    # (maxExecutors 4: the scale-up is one request, not a second one for the rising arrivals too.)
    scaler = app.scenario(provisioningTime="5s", maxExecutors="4")
    job = StreamingJob(app.spark, app.workdir, name="k8s-pending", rows_per_second=30).start()
    wait_for(lambda: cost_learned(scaler), 120, what="the model of the query's batch cost")
    created_before = {p["metadata"]["name"] for p in app_pods(server, app)}
    kubelet.hold_pending(PENDING_S)
    created_while_waiting: set[str] = set()
    targets: list[int] = []
    said: list[str] = []
    try:
        job.set_rate(250)
        wait_for_autoscaler(scaler, lambda: applied(scaler, "scale_up"), 120, what="a scale-up")
        up = applied(scaler, "scale_up")[0]

        def arrived() -> bool:
            status = scaler.status()
            if status["live_executors"] < up["to_executors"]:
                created_while_waiting.update(p["metadata"]["name"] for p in app_pods(server, app))
                targets.append(status["target_executors"])
                said.append(status["waiting_for"] or "")
                return False
            return True

        wait_for_autoscaler(scaler, arrived, PENDING_S + 90, what="the pods scheduled once the node came")
    finally:
        kubelet.hold_pending(0)
    asked = up["to_executors"] - up["from_executors"]
    # One pod per executor asked for, each asked for once, while they waited. (Arrivals that outgrow
    # what the scale-up was sized for may ask for more meanwhile: more pods, not the same ones again.)
    new = created_while_waiting - created_before
    assert len(new) == max(targets) - up["from_executors"], (sorted(new), max(targets))
    assert said and all(f"{asked} of {up['to_executors']} requested executors not registered yet" in w
                        for w in said[:5]), said[:5]
    assert not rollbacks(scaler)
    assert not [d for d in scaler.decisions() if d["action"] == "scale_down"]
    wait_for(lambda: scaler.status()["waiting_for"] is None
             and scaler.status()["live_executors"] == scaler.status()["target_executors"], 90,
             what="every requested executor registered")
    learned = scaler.status()["provisioning_time_s"]
    assert learned >= PENDING_S, f"the provisioning time learned from the wait: {learned}"
    print(f"FIGURES k8s pending: {asked} pods Pending {PENDING_S} s, learned provisioning {learned:.1f} s; "
          f"the tab said: {said[len(said) // 2]}")
    job.stop()


def test_pods_that_never_schedule_are_a_capacity_limit_and_none_is_left_behind(
        kube: tuple[ApiServer, TestKubelet], app: SharedCluster) -> None:
    server, kubelet = kube
    scaler = app.scenario(provisioningTimeout="20s", capacityRetryInterval="10min")
    job = StreamingJob(app.spark, app.workdir, name="k8s-full", rows_per_second=30).start()
    wait_for(lambda: cost_learned(scaler), 120, what="the model of the query's batch cost")
    kubelet.set_capacity(len(kubelet.running) + 1)  # room for one more executor pod, no more
    try:
        job.set_rate(300)
        wait_for_autoscaler(scaler, lambda: applied(scaler, "scale_up"), 120, what="a scale-up")
        up = applied(scaler, "scale_up")[0]
        assert up["to_executors"] > up["from_executors"] + 1, up
        wait_for_autoscaler(scaler, lambda: scaler.status()["capacity_limit"], 90, what="the capacity limit")
        held = scaler.status()["target_executors"]
        assert held == up["from_executors"] + 1, f"the target held at what the node gave: {held}"
        # The pods beyond the held target are deleted by Spark once the target comes down to it.
        wait_for(lambda: phases(server, app) == {"Running": held}, 60, what="no Pending pod left behind")
        assert not rollbacks(scaler)
        status = scaler.status()
        assert status["capacity_limit"]["executors"] == held
        assert not status["paused"] and not status["stopped"]
        capacity = wait_for(lambda: [e for e in app.events("AutoscalerEvent") if e.get("kind") == "capacity"],
                            30, what="the capacity event in the event log")
        assert f"gave {held} of" in capacity[0]["reason"], capacity
        assert not [e for e in app.events("AutoscalerEvent")
                    if e.get("kind") in ("rollback", "pause", "stopped")]
        print(f"FIGURES k8s full node: asked {up['to_executors']}, held at {held}, "
              f"pods left {dict(phases(server, app))}")
    finally:
        kubelet.set_capacity(1000)
        job.stop()
    assert exactly_once(job.written_ids())


def submit_cluster_mode(server: ApiServer, workdir: Path, run: str) -> subprocess.CompletedProcess[str]:
    """``spark-submit --deploy-mode cluster`` of the job: Spark creates the driver pod and returns."""
    venv_bin = Path(sys.executable).parent
    settings = {
        **{k: v for k, v in FAST.items() if k.startswith("spark.sparkscale.")},
        # The first driver runs at 2, a size healthy from its start (the baseline); the restarted
        # driver's own settings would start it at 1: it runs at 2 only if the ConfigMap says so.
        "spark.sparkscale.minExecutors": "2" if run == "first" else "1", "spark.sparkscale.maxExecutors": "3",
        "spark.sparkscale.initialExecutors": "2" if run == "first" else "1",
        "spark.sparkscale.stateStore": "kubernetes",
        "spark.sparkscale.checkers": "",  # a scaling is healthy at once: the restart is the subject
        "spark.kubernetes.driver.master": server.url,  # what the driver pod reaches the API server at
        "spark.kubernetes.container.image": "apache/spark:test",
        "spark.kubernetes.submission.waitAppCompletion": "false",
        "spark.kubernetes.executor.deleteOnTermination": "true",
        "spark.executor.instances": "1", "spark.executor.memory": "512m", "spark.driver.memory": "1g",
        "spark.driver.extraJavaOptions": TEST_JVM_OPTIONS,
        "spark.executor.extraJavaOptions": TEST_JVM_OPTIONS,
        "spark.ui.enabled": "false",
    }
    command = [str(venv_bin / "spark-submit"), "--master", f"k8s://{server.url}",
               "--deploy-mode", "cluster", "--name", "k8s-cluster-mode",
               *(arg for k, v in settings.items() for arg in ("--conf", f"{k}={v}")),
               f"local://{CLUSTER_JOB}", str(workdir), run]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_CONF_DIR")}
    env.update(SPARK_HOME=str(SPARK_HOME), PATH=f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}")
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=180)


def without_stacks(output: str) -> str:
    """spark-submit's output, its Java stack frames left out (the messages are what tells)."""
    return "\n".join(line for line in output.splitlines() if not line.lstrip().startswith("at "))[-4000:]


def test_a_cluster_mode_driver_pod_restarted_keeps_the_last_healthy_size_in_a_config_map(
        kube: tuple[ApiServer, TestKubelet], app: SharedCluster, tmp_path: Path) -> None:
    app.end_scenario()  # the client-mode application idles meanwhile (its autoscaler stopped)
    server, kubelet = kube
    first = submit_cluster_mode(server, tmp_path, "first")
    assert first.returncode == 0, without_stacks(first.stderr)
    wait_for(lambda: kubelet.driver("k8s-cluster-mode") is not None, 60, what="the driver pod started")
    driver = kubelet.driver("k8s-cluster-mode")
    assert driver is not None

    def first_healthy() -> bool:
        if driver.process is not None and driver.process.poll() is not None:
            raise AssertionError(f"the driver pod's process ended: {driver.log.read_text()[-4000:]}"
                                 if driver.log else "the driver pod's process ended")
        return (tmp_path / "first.json").exists()

    wait_for(first_healthy, 360, what="the first driver at its healthy size")
    healthy = json.loads((tmp_path / "first.json").read_text())

    def stored_healthy() -> int | None:
        """The last healthy size in the autoscaler's ConfigMap (its rollback guard's entry)."""
        state = server.request("GET", "/api/v1/namespaces/default/configmaps/sparkscale-k8s-cluster-mode")
        entries = [json.loads(text) for text in ((state or {}).get("data") or {}).values()]
        return next((e["value"].get("healthy_target") for e in entries
                     if isinstance(e, dict) and e.get("key") == "guard"), None)

    wait_for(lambda: stored_healthy() == healthy["healthy"], 30, what="the healthy size in the ConfigMap")
    kubelet.kill(driver.key.split("/")[1])  # the driver pod's container crashes
    second = submit_cluster_mode(server, tmp_path, "second")  # the operator starts the driver again
    assert second.returncode == 0, without_stacks(second.stderr)
    wait_for(lambda: (tmp_path / "second.json").exists(), 300, what="the restarted driver's baseline")
    restarted = json.loads((tmp_path / "second.json").read_text())
    print(f"FIGURES k8s cluster mode: first driver healthy at {healthy['healthy']} executors "
          f"({healthy['app_id']}); restarted driver ({restarted['app_id']}) started at "
          f"{restarted['initial']}; {restarted['rows']} rows, each once")
    assert restarted["app_id"] != healthy["app_id"]
    assert restarted["initial"] == healthy["healthy"], "the last healthy size survives the driver pod"
    assert restarted["rows"] > 0 and restarted["exactly_once"], "the query resumed, every row once"
    assert restarted["failed_tasks"] == 0
