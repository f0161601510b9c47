"""The autoscaler end to end on a real multi-executor cluster (local-cluster: real executor JVMs
under an in-process standalone Master).

Every wait is a condition with a deadline; no test depends on how fast this machine is beyond the
generous deadlines."""

from __future__ import annotations

import pytest
from pyspark import SparkContext
from pyspark.sql import SparkSession
from spark_cluster import SharedCluster, applied

from sparkscale_listener import ConfigError, autoscale, autoscaler
from sparkscale_listener.spark.bridge import BridgeNotInstalledError
from sparkscale_listener.testing.demo import StreamingJob, exactly_once, wait_for

pytestmark = pytest.mark.spark
# The scenarios on a cluster share one application (conftest.py's ``cluster``), each with its own
# autoscaler: 3 one-core executors at most, 1 at the start.
CLUSTER = {"workers": 3}


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("spark.sparkscale.minExecutors", "two", "not an integer"),
        ("spark.sparkscale.utilization.target", "1.5", "(0, 1]"),
        ("spark.sparkscale.interval", "10 parsecs", "not a valid duration"),
        ("spark.sparkscale.mode", "turbo", "autoscale, recommend, reactive"),
        ("spark.sparkscale.maxExecuters", "4", "not a known key"),
        ("spark.sparkscale.metricsWindow", "-5s", "not a valid duration"),
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


def test_scales_up_under_backlog_and_down_after_load_drops_with_nothing_lost(cluster: SharedCluster) -> None:
    # Executors given back in one step, not halved tick by tick (that is the policy's unit tests' and
    # test_rollback_spark's case 5): this is about whether the load's fall is answered.
    scaler = cluster.scenario(**{"scaleDown.maxFactor": "1.0"})
    failed_before = cluster.tasks_failed()
    job = StreamingJob(cluster.spark, cluster.workdir, name="up-down", rows_per_second=30).start()
    wait_for(lambda: scaler.status()["live_executors"] == 1 and scaler.status()["target_executors"] == 1,
             120, what="the baseline of 1 executor (initialExecutors=1)")
    job.set_rate(220)  # > 2x what one executor can do: the backlog grows
    wait_for(lambda: applied(scaler, "scale_up"), 120, what="a scale-up under growing backlog")
    wait_for(lambda: scaler.status()["live_executors"] >= 2, 90, what="the new executors")
    # The load stops. (A trickle would do on a quiet machine; on a busy one each of a batch's 6
    # tasks costs tenths of a second however few its rows, and that keeps 2-3 executors busy.)
    job.set_rate(0)
    wait_for(lambda: applied(scaler, "scale_down") and scaler.status()["live_executors"] == 1, 180,
             what="scale-down back to 1 executor after the load stopped")
    up, down = applied(scaler, "scale_up")[0], applied(scaler, "scale_down")[-1]
    assert up["to_executors"] > up["from_executors"] and "query 'up-down'" in up["reason"]
    assert down["to_executors"] < down["from_executors"]
    assert cluster.tasks_failed() == failed_before, "killing idle executors must not fail a task"
    job.stop()
    ids = job.written_ids()
    assert ids, "the sink got rows"
    assert exactly_once(ids), "every input row written exactly once"
    scaling = cluster.events("ScalingEvent")
    actions = {e["action"] for e in scaling}
    assert {"scale_up", "scale_down"} <= actions
    for e in scaling:
        assert {"fromExecutors", "toExecutors", "reason"} <= set(e)


def test_steady_load_inside_the_band_takes_no_action(cluster: SharedCluster) -> None:
    # A wide band: what a row really costs here (10 ms of work plus Spark's and Python's own
    # per-row and per-task overhead) depends on the machine, and the test is about holding still
    # under a steady load, not about where the band is.
    scaler = cluster.scenario(**{"initialExecutors": "2", "maxExecutors": "2",
                                 "utilization.target": "0.5", "utilization.max": "0.98"})
    # 10 ms of work per row, 100 rows/s: a slot busy at least the whole time, so one executor
    # cannot keep within the target 0.5 and two (the most allowed) hold.
    StreamingJob(cluster.spark, cluster.workdir, name="steady", rows_per_second=100).start()
    wait_for(lambda: sum((d["reason"] or "").startswith("hold 2") for d in scaler.decisions()) >= 8, 240,
             what="several evaluated decisions that hold the 2 executors")
    assert not applied(scaler), scaler.decisions()[-3:]
    assert scaler.status()["target_executors"] == 2
    assert not scaler.status()["paused"]


def test_two_concurrent_queries_get_one_combined_target(cluster: SharedCluster) -> None:
    scaler = cluster.scenario()
    # 10 ms per row: "orders" needs ~1.0 busy slot, "clicks" ~0.6. Alone, each would fit in 2
    # executors at 70 % utilization; together they need 3.
    StreamingJob(cluster.spark, cluster.workdir, name="orders", rows_per_second=100).start()
    StreamingJob(cluster.spark, cluster.workdir, name="clicks", rows_per_second=60).start()

    def combined_scale_up() -> dict | None:
        for d in applied(scaler, "scale_up"):
            queries = d.get("queries") or {}
            if len(queries) == 2 and all(q["required_slots"] > 0 for q in queries.values()):
                return d
        return None

    decision = wait_for(combined_scale_up, 180, what="a scale-up driven by both queries")
    per_query = {q["name"]: q["required_slots"] for q in decision["queries"].values()}
    assert set(per_query) == {"orders", "clicks"}
    # Each query's figure counts the other's tasks beside its batches; the application's covers both.
    assert decision["required_slots"] >= max(per_query.values()), decision
    wait_for(lambda: scaler.status()["target_executors"] >= 3, 180,
             what="a target covering both queries (3 executors)")
