"""Listener-bus overload on a real cluster: Spark drops events from the autoscaler's queue, and the
autoscaler must notice, say so, and decide nothing from the incomplete window.

The queue is made small (``spark.scheduler.listenerbus.eventqueue.sparkscale.capacity``) and slow:
a second listener on it, in Python, answers every event through py4j after 20 ms (at most 50
events/s), so a burst of thousands of tiny tasks arrives faster than the queue drains on any
machine and Spark drops what does not fit.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from spark_cluster import fast_conf

from sparkscale_listener import autoscaler
from sparkscale_listener.testing.demo import StreamingJob, build_session, wait_for

pytestmark = pytest.mark.spark

QUEUE_CAPACITY = 100
BURST_TASKS = 2000


class SlowListener:
    """Any SparkListenerInterface event, answered from Python with a pause (py4j calls back by
    method name, so one ``__getattr__`` serves every on* method)."""

    class Java:
        implements = ("org.apache.spark.scheduler.SparkListenerInterface",)

    def __getattr__(self, name: str) -> Any:
        if not name.startswith("on"):
            raise AttributeError(name)
        return lambda *args: time.sleep(0.02)


def events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_dropped_listener_events_are_reported_and_no_decision_rests_on_them(tmp_path: Path) -> None:
    jsonl = tmp_path / "sparkscale-events.jsonl"
    spark = build_session("it-overload", fast_conf(tmp_path, workers=2, extra={
        "spark.scheduler.listenerbus.eventqueue.sparkscale.capacity": str(QUEUE_CAPACITY),
        "spark.sparkscale.eventHandlers": "logging,listenerBus,jsonl",
        "spark.sparkscale.eventHandlers.jsonl.path": str(jsonl),
    }))
    scaler = autoscaler(spark)
    job = StreamingJob(spark, tmp_path, rows_per_second=10).start()
    sc = spark.sparkContext
    bus = sc._jsc.sc().listenerBus()
    slow = SlowListener()
    try:
        wait_for(lambda: scaler.status()["initial_executors"] is not None
                 and any(d["reason"] and "not ready" not in d["reason"] for d in scaler.decisions()),
                 120, what="a first evaluated decision")
        assert scaler.status()["events_lost"] == 0
        bus.addToQueue(slow, "sparkscale")
        started = time.time()
        spark.range(0, BURST_TASKS, 1, BURST_TASKS).count()
        bus.removeListener(slow)
        lost = wait_for(lambda: [e for e in events(jsonl)
                                 if (e.get("details") or {}).get("situation") == "events-lost"],
                        60, what="an events-lost warning")[0]
        wait_for(lambda: scaler.status()["events_lost"] > 0, 30, what="status() to count the lost events")
        window = scaler.config.metrics_window_s
        wait_for(lambda: any(d["time"] >= lost["epoch"] + window for d in scaler.decisions()), 60,
                 what="a decision after a fresh window")
        after = [d for d in scaler.decisions() if lost["epoch"] <= d["time"] < lost["epoch"] + window]
        print(f"FIGURES listener-overload: burst_tasks={BURST_TASKS} queue={QUEUE_CAPACITY} "
              f"events_lost={scaler.status()['events_lost']} decisions_in_window={len(after)} "
              f"applied_in_window={sum(d['applied'] for d in after)} "
              f"reported_after_s={lost['epoch'] - started:.1f}")
        assert lost["severity"] == "warning" and "lost" in lost["reason"]
        assert after, "the control loop kept ticking through the loss"
        assert not [d for d in after if d["applied"]], "a decision was applied from an incomplete window"
        assert all("not ready" in d["reason"] for d in after), [d["reason"] for d in after]
        assert job.query.isActive and job.query.exception() is None
    finally:
        try:
            bus.removeListener(slow)
        finally:
            job.stop()
            spark.stop()
