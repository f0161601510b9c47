"""What the real-Spark files share: the autoscaler's test speed, and one application per file.

``FAST`` makes the control loop decide within seconds (a tick a second, a 6-second window); a file
that needs slower settings for a scenario overrides them there. :class:`SharedCluster` is one
local-cluster application that a file's scenarios share (starting one costs 15-20 s on 2 cores):
each scenario gets an autoscaler of its own, started through the user's ``autoscale(spark)`` on the
running session with the scenario's ``spark.sparkscale.*`` keys, so its decisions, status and
checkers know nothing of the scenarios before it. Spark's own settings (workers, excludeOnFailure)
are the application's, fixed when it starts: scenarios that need other ones need their own.

The fixtures are ``cluster`` and ``class_cluster`` in tests/integration/conftest.py; a file (or test
class) says how its application is made with ``CLUSTER = {"workers": 3, "conf": {...}}``.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sparkscale_listener import autoscale, autoscaler, stop_autoscaler
from sparkscale_listener.config.options import PREFIX
from sparkscale_listener.spark.bridge import JvmBridge
from sparkscale_listener.testing.demo import (
    build_session,
    cluster_conf,
    quiet_executor_removal_noise,
    read_event_log,
    wait_for,
)

# The test JVMs live a minute or two on 2 cores: there C2's compilations and the parallel collector's
# threads cost more CPU than they give back (a session of 3 executors running a few jobs took 48 s of
# CPU with Java's defaults, 27 s with these). The Kafka tools and the YARN daemons use the same.
TEST_JVM_OPTIONS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"

# The driver removes a standalone executor whose connection closed only after this delay (5 s by
# default), waiting for the Worker's account of its exit. For an executor it killed itself no such
# account comes (the Master has forgotten it): every executor a scale-down removed took 5 s to
# leave. Its removal reason stays "Executor killed by driver."; one lost any other way may read
# "disassociated" instead of its exit code: a loss all the same.
QUICK_REMOVAL: dict[str, str] = {"spark.standalone.executorRemoveDelayOnDisconnection": "1s"}

# The demo's settings (testing/demo.py), faster: every wait of a scenario is a few ticks long; and
# the test JVMs' options.
FAST: dict[str, str] = {
    "spark.driver.extraJavaOptions": TEST_JVM_OPTIONS,
    "spark.executor.extraJavaOptions": TEST_JVM_OPTIONS,
    "spark.ui.enabled": "false",
    "spark.sparkscale.interval": "1s",
    "spark.sparkscale.metricsWindow": "6s",
    "spark.sparkscale.stabilizationInterval": "2s",
    "spark.sparkscale.scaleDownInterval": "8s",
    **QUICK_REMOVAL,
}

# FAST with a shorter scale-down delay, for a job whose scale-down is only the event it waits for
# (how long the delay is is the policy's tests').
QUICK_SCALE_DOWN: dict[str, str] = {**FAST, "spark.sparkscale.scaleDownInterval": "4s"}


# The Spark settings of the first cluster of this process. pyspark launched the driver JVM with
# them as system properties, and every later SparkConf of the process reads those as defaults: a
# second cluster (a file's second test class) would otherwise run with the first one's
# excludeOnFailure and task.maxFailures instead of Spark's defaults.
_launched_with: dict[str, str] = {}


def clear_settings_left_in_the_jvm(conf: Mapping[str, str]) -> None:
    """Before a later cluster of this process starts: drop the first cluster's settings that
    ``conf`` does not set itself from the driver JVM's system properties."""
    from pyspark import SparkContext

    jvm = SparkContext._jvm
    if jvm is None or SparkContext._active_spark_context is not None:
        return  # no JVM yet (nothing left over), or a running session getOrCreate() would return
    for key in set(_launched_with) - set(conf):
        jvm.java.lang.System.clearProperty(key)


def fast_conf(workdir: Path, workers: int = 3, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """:func:`~sparkscale_listener.testing.demo.cluster_conf` with :data:`FAST` and ``extra`` on top."""
    return cluster_conf(workdir, workers=workers, extra={**FAST, **(extra or {})})


def applied(scaler: Any, action: str | None = None) -> list[dict[str, Any]]:
    """The applied decisions (of one action, or all)."""
    return [d for d in scaler.decisions() if d["applied"] and (action is None or d["action"] == action)]


def rollbacks(scaler: Any) -> list[dict[str, Any]]:
    return [d for d in scaler.decisions() if d["action"] == "rollback"]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def live_executor_ids(spark: Any) -> list[int]:
    """The executors the SparkContext has now, by numeric id (executors added later get higher ids)."""
    text = spark.sparkContext._jsc.sc().getExecutorIds().mkString(",")
    return sorted(int(e) for e in text.split(",") if e)


class SharedCluster:
    """One local-cluster application for a file's scenarios; :meth:`scenario` starts each one."""

    def __init__(self, workdir: Path, name: str, workers: int = 3,
                 conf: Mapping[str, str] | None = None) -> None:
        self.workdir = workdir
        self.conf = fast_conf(workdir, workers=workers, extra=conf)
        from pyspark import SparkContext

        first = SparkContext._jvm is None  # this session launches the process's driver JVM
        clear_settings_left_in_the_jvm(self.conf)
        self.spark = build_session(name, self.conf)
        if first:
            _launched_with.update(self.conf)
        self.spark.sparkContext.setLogLevel("ERROR")
        quiet_executor_removal_noise(self.spark)
        self.bridge = JvmBridge(self.spark.sparkContext)
        self.events_dir = workdir / "events"
        self.started_ms = time.time() * 1000.0  # the current scenario's start
        self._scenario_keys: set[str] = set()

    def scenario(self, **keys: str) -> Any:
        """End the scenario before (its queries stopped, its autoscaler stopped) and start a fresh
        autoscaler with the file's settings and ``keys`` (``spark.sparkscale.*`` names without the
        prefix). Returns it once it has set its executor baseline."""
        self.end_scenario()
        live = self.spark.sparkContext._jsc.sc().conf()  # the running application's own SparkConf
        for key in self._scenario_keys:  # the scenario before's keys back to the file's settings
            if key in self.conf:
                live.set(key, self.conf[key])
            else:
                live.remove(key)
        self._scenario_keys = {PREFIX + k for k in keys}
        for key, value in keys.items():
            live.set(PREFIX + key, value)
        self.started_ms = time.time() * 1000.0
        autoscale(self.spark)
        scaler = autoscaler(self.spark)
        wait_for(lambda: scaler.status()["initial_executors"] is not None, 120,
                 what="the new autoscaler's executor baseline")
        return scaler

    def end_scenario(self) -> None:
        for query in self.spark.streams.active:
            query.stop()
        stop_autoscaler(self.spark)

    def events(self, suffix: str) -> list[dict[str, Any]]:
        """The current scenario's events of a kind in the event log (``ScalingEvent``,
        ``AutoscalerEvent``): Spark writes our events to it as they are posted."""
        return [e for e in read_event_log(self.events_dir) if e["Event"].endswith(suffix)
                and e.get("timestampMs", 0) >= self.started_ms]

    def tasks_failed(self) -> int:
        """Failed tasks of the application so far (scenarios compare before and after)."""
        return int(self.bridge.snapshot()["totals"]["tasksFailed"])

    def stop(self) -> None:
        try:
            self.end_scenario()
        finally:
            self.spark.stop()

    def __enter__(self) -> SharedCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
