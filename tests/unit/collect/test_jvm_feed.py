"""The JVM's streaming-query events of every session into the progress recorder
(:mod:`sparkscale_listener.collect.jvm_feed`): the replies are shaped as the bridge's
``QueryEvents`` writes them (its JUnit test checks that side)."""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any

from sparkscale_listener.collect.jvm_feed import JvmProgressFeed
from sparkscale_listener.collect.progress import ProgressRecorder

QID = "11111111-1111-1111-1111-111111111111"
RUN = "22222222-2222-2222-2222-222222222222"


def progress_event(seq: int, batch_id: int, rows: int, time_ms: int) -> dict[str, Any]:
    progress = {"id": QID, "runId": RUN, "name": "orders", "batchId": batch_id, "numInputRows": rows,
                "timestamp": "2026-12-02T10:00:00.000Z", "durationMs": {"triggerExecution": 400},
                "sources": []}
    return {"seq": seq, "type": "progress", "progress": json.dumps(progress), "timeMs": time_ms}


class ScriptedJvm:
    """Answers each read with the events numbered after what the reader has seen."""

    def __init__(self, events: list[dict[str, Any]], missed: int = 0) -> None:
        self.events = events
        self.missed = missed
        self.reads: list[int] = []

    def query_events(self, seen: int, wait_ms: int) -> Mapping[str, Any]:
        self.reads.append(seen)
        last = self.events[-1]["seq"] if self.events else 0
        return {"last": last, "missed": self.missed,
                "events": [e for e in self.events if e["seq"] > seen]}


def test_every_kind_of_event_reaches_the_recorder_with_the_time_the_driver_saw_it() -> None:
    recorder = ProgressRecorder()
    jvm = ScriptedJvm([
        {"seq": 1, "type": "started", "id": QID, "runId": RUN, "name": "orders", "timeMs": 1000},
        progress_event(2, 0, 50, 2000),
        {"seq": 3, "type": "idle", "id": QID, "runId": RUN, "timeMs": 3000},
        {"seq": 4, "type": "terminated", "id": QID, "runId": RUN, "exception": "boom", "timeMs": 4000},
    ])
    feed = JvmProgressFeed(recorder, jvm)

    assert feed.read_once() == 4

    query = recorder.get(QID)
    assert query is not None
    assert (query.name, query.run_id, query.batches, query.input_rows) == ("orders", RUN, 1, 50)
    assert (query.started_time, query.last_progress_time, query.terminated_time) == (1.0, 3.0, 4.0)
    assert not query.active and query.exception == "boom"


def test_each_event_is_recorded_once_across_reads() -> None:
    recorder = ProgressRecorder()
    jvm = ScriptedJvm([progress_event(1, 0, 10, 1000)])
    feed = JvmProgressFeed(recorder, jvm)
    feed.read_once()
    jvm.events.append(progress_event(2, 1, 20, 2000))

    assert feed.read_once() == 1
    assert feed.read_once() == 0
    assert jvm.reads == [0, 1, 2]
    query = recorder.get(QID)
    assert query is not None and (query.batches, query.input_rows) == (2, 30)


def test_events_gone_before_they_were_read_are_counted_and_the_rest_recorded() -> None:
    recorder = ProgressRecorder()
    feed = JvmProgressFeed(recorder, ScriptedJvm([progress_event(9, 8, 10, 1000)], missed=8))

    feed.read_once()

    assert feed.missed == 8
    assert recorder.get(QID) is not None


def test_a_malformed_event_is_skipped_and_the_next_recorded() -> None:
    recorder = ProgressRecorder()
    jvm = ScriptedJvm([{"seq": 1, "type": "progress", "progress": "not json", "timeMs": 1},
                       {"seq": 2, "type": "something-newer", "timeMs": 2},
                       progress_event(3, 0, 10, 3000)])

    assert JvmProgressFeed(recorder, jvm).read_once() == 3
    query = recorder.get(QID)
    assert query is not None and query.batches == 1


def test_the_feed_is_the_recorders_source_until_it_is_detached() -> None:
    recorder = ProgressRecorder()
    read = threading.Event()

    class Jvm(ScriptedJvm):
        def query_events(self, seen: int, wait_ms: int) -> Mapping[str, Any]:
            read.set()
            return super().query_events(seen, 0)

    feed = JvmProgressFeed(recorder, Jvm([progress_event(1, 0, 10, 1000)])).start()
    assert recorder.attached
    assert read.wait(5)

    recorder.detach()

    assert not recorder.attached
    feed._thread.join(5)
    assert not feed._thread.is_alive()


def test_without_the_plugin_running_the_feed_waits_before_it_asks_again() -> None:
    recorder = ProgressRecorder()
    sleeps: list[float] = []

    class NoPlugin:
        def query_events(self, seen: int, wait_ms: int) -> Mapping[str, Any]:
            return {}

    def sleep(seconds: float) -> bool:
        sleeps.append(seconds)
        return len(sleeps) >= 2  # stopped after the second wait

    JvmProgressFeed(recorder, NoPlugin(), sleep=sleep)._run()

    assert sleeps == [1.0, 1.0]
