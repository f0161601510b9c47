"""Checkers that roll a bad scaling back (FLINK-37411), end to end on a real multi-executor cluster.

Each case injects its own fault through the ``sparkscale_test`` source, waits for the autoscaler
to scale, and checks that a checker rolled the scaling back to the right target, that automatic
scaling is paused with a reason, that the query still runs where it can, and that every input
row reached the file sink exactly once. (A cluster without room for more executors is not a
fault of the scaling but a capacity limit: tests/integration/test_kubernetes.py, pods that never
schedule, and test_yarn.py, a full queue.)

Case 3 runs here, on an application with Spark's defaults on 2 workers (a query that fails
everywhere: with one executor left, excludeOnFailure would make its retries unschedulable rather
than failed). Case 1, executors that fail every task a scale-up gives them, is the History Server's
job (test_history_server.py): the same rollback, the failing executor removed, no row lost. Which
target a rollback goes back to after quick scale-downs whose watches were cut short (case 5), and
maxRollbacks stopping the autoscaler until resume() (case 4), are the guard's logic, the same on
any cluster: tests/unit/check/test_rollback.py and tests/unit/sim/test_sim_rollback.py.
Every wait is a condition with a generous deadline; nothing depends on how fast this machine is.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest
from spark_cluster import SharedCluster, applied, live_executor_ids, rollbacks

from sparkscale_listener.testing import source as testing_source
from sparkscale_listener.testing.demo import StreamingJob, exactly_once, wait_for
from sparkscale_listener.testing.demo import wait_for_autoscaler as wait

logging.getLogger("sparkscale").setLevel(logging.INFO)  # one line per event, shown on failure

# Short checker windows so that a scaling is judged within seconds, not minutes. Every checker's
# window is set: the guard watches a scaling for the longest of them.
FAST_CHECKERS: dict[str, str] = {
    "spark.sparkscale.checkers.taskFailures.window": "30s",
    "spark.sparkscale.checkers.executorFailures.window": "30s",
    "spark.sparkscale.checkers.queryFailure.window": "30s",
    "spark.sparkscale.checkers.throughputRegression.window": "20s",
    "spark.sparkscale.checkers.gcPressure.window": "30s",
    "spark.sparkscale.checkers.heapUsage.window": "30s",
    "spark.sparkscale.rollback.pauseDuration": "10min",
}


def assert_exactly_once(job: StreamingJob) -> list[int]:
    ids = job.written_ids()
    assert ids, "the sink got rows"
    assert exactly_once(ids), "every input row written exactly once"
    return ids


def logged_rollbacks(cluster: SharedCluster) -> list[dict]:
    """The scenario's rollbacks in the event log (Spark writes our events to it as they come)."""
    return [e for e in cluster.events("ScalingEvent") if e["action"] == "rollback"]


def assert_paused(scaler: Any, checker: str) -> dict:
    status = scaler.status()
    assert status["paused"], status
    assert status["pause_reason"] and checker in status["pause_reason"], status
    return status


# ------------------------------------------------------------------------------------------------
# The fault injection itself (no Spark)
# ------------------------------------------------------------------------------------------------


def test_executor_id_is_found_in_an_ancestor_command_line() -> None:
    probe = ("import sys; from sparkscale_listener.testing.source import current_executor_id as f; "
             "print(f(), f())")
    # sh stays the parent (the trailing `true` prevents an exec): the id is in its command line.
    out = subprocess.run(["sh", "-c", f'"{sys.executable}" -c "{probe}"; true', "sh", "--executor-id", "7"],
                         capture_output=True, text=True, check=True, cwd=Path(__file__).parents[2])
    assert out.stdout.split() == ["7", "7"]
    # No executor among this process's ancestors: no id, so no injected failure.
    assert testing_source.executor_id_from_process_tree(os.getpid()) is None


# ------------------------------------------------------------------------------------------------
# On a real cluster
# ------------------------------------------------------------------------------------------------


@pytest.mark.spark
class TestSparksDefaultsOnTwoWorkers:
    """Case 3: a query that fails everywhere, on a cluster of Spark's defaults with 2 workers."""

    CLUSTER: ClassVar = {"workers": 2, "conf": FAST_CHECKERS}

    def test_query_failure_after_a_scale_down_rolls_back_to_the_initial_target(
            self, class_cluster: SharedCluster, tmp_path: Path) -> None:
        """Case 3: the query fails after a scale-down (a marker file makes every task fail once the
        test saw the scale-down). queryFailure rolls back to the initial target (rollback.target=
        initial); the rows committed before the failure are in the sink exactly once."""
        cluster, spark = class_cluster, class_cluster.spark
        # Spark's task retries as they come: a failed task retried anywhere, 4 attempts, then the
        # query fails (not excludeOnFailure: see the module's docstring).
        conf = spark.sparkContext.getConf()
        assert conf.get("spark.excludeOnFailure.enabled", "false") == "false", conf.toDebugString()
        assert conf.get("spark.task.maxFailures") is None, conf.toDebugString()
        marker = tmp_path / "fail-now"
        scaler = cluster.scenario(**{
            "initialExecutors": "2", "maxExecutors": "2", "rollback.target": "initial",
            # The failed task attempts before the query gives up must not fire taskFailures first:
            # this case is about the query failing.
            "checkers.taskFailures.maxFailures": "1000"})
        wait(scaler, lambda: scaler.status()["target_executors"] == 2 and len(live_executor_ids(spark)) == 2,
             120, "the baseline of 2 executors (initialExecutors=2)")
        # Few rows in few tasks (each task's fixed cost counts as busy time): 2 slots mostly idle.
        job = StreamingJob(spark, cluster.workdir, name="query-failure", rows_per_second=10, partitions=2,
                           trigger_s=2.0, source_options={"failIfFileExists": str(marker)}).start()
        wait(scaler, lambda: applied(scaler, "scale_down"), 150, "a scale-down under low load")
        down = applied(scaler, "scale_down")[0]
        assert (down["from_executors"], down["to_executors"]) == (2, 1), down
        marker.touch()
        try:
            wait(scaler, lambda: not job.query.isActive, 120, "the query to fail")
        except AssertionError as e:
            # Whether a batch is stuck (and in what) or none runs: the query's own view.
            raise AssertionError(f"{e}\nquery status: {job.query.status}\n"
                                 f"last progress: {job.query.lastProgress}") from None
        assert job.query.exception() is not None
        wait(scaler, lambda: rollbacks(scaler), 90, "a rollback after the query failed")
        rollback = rollbacks(scaler)[0]
        assert rollback["applied"], rollback
        assert (rollback["from_executors"], rollback["to_executors"]) == (1, 2), rollback
        assert "queryFailure" in rollback["reason"] and "terminated" in rollback["reason"], rollback
        status = assert_paused(scaler, "queryFailure")
        assert status["target_executors"] == 2 == status["initial_executors"], status
        assert not status["stopped"], status
        wait(scaler, lambda: len(live_executor_ids(spark)) == 2, 90, "2 live executors again")
        assert_exactly_once(job)
        logged = wait_for(lambda: logged_rollbacks(cluster), 30, what="the rollback in the event log")
        assert len(logged) == 1 and "queryFailure" in logged[0]["reason"], logged
        assert (logged[0]["fromExecutors"], logged[0]["toExecutors"]) == (1, 2), logged
