"""The streaming queries of every SparkSession of the driver, from the JVM bridge, into a
:class:`~.progress.ProgressRecorder`.

Where the autoscaler runs beside the driver (``spark.sparkscale.launch=agent``) there is no session
of the user's to add a Python listener to: a Spark Connect server makes one session per client,
pipelines make their own. The bridge's listener sees every session's query events on the driver's
listener bus and keeps the latest ones numbered; :class:`JvmProgressFeed` reads those after the last
it read, on a thread that waits in the JVM for the next (so a batch's progress is recorded as it
comes, as the Python listener would, and the loop wakes on a rise at once), and hands each to the
recorder's ``record_*`` methods: the one path by which progress becomes the collector's state.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from .progress import ProgressRecorder

log = logging.getLogger("sparkscale")

# How long one read waits in the JVM for a new event: a stop is seen within it.
WAIT_MS = 2000
# After a failed read (the bridge not installed yet, the JVM busy), the next one waits this long.
RETRY_S = 1.0


class QueryEventSource(Protocol):
    """What the feed reads: :meth:`~sparkscale_listener.spark.bridge.JvmBridge.query_events`."""

    def query_events(self, seen: int, wait_ms: int) -> Mapping[str, Any]: ...


def record_event(recorder: ProgressRecorder, event: Mapping[str, Any]) -> None:
    """One JVM event (``StreamingEvents`` in the bridge) into the recorder; an event of an
    unknown type is skipped (a newer bridge may report more)."""
    kind = event.get("type")
    now = float(event.get("timeMs", 0)) / 1000.0
    if kind == "progress":
        recorder.record_progress(json.loads(str(event["progress"])), now)
    elif kind == "started":
        recorder.record_started(str(event["id"]), event.get("name"), str(event.get("runId")), now)
    elif kind == "idle":
        recorder.record_idle(str(event["id"]), now)
    elif kind == "terminated":
        recorder.record_terminated(str(event["id"]), event.get("exception"), now)


class JvmProgressFeed:
    """Feeds ``recorder`` from ``source`` on a daemon thread until :meth:`stop` (the recorder's
    ``detach`` calls it). Each event is recorded once, in the order the driver saw them."""

    def __init__(self, recorder: ProgressRecorder, source: QueryEventSource,
                 sleep: Callable[[float], bool] | None = None) -> None:
        self.recorder = recorder
        self.source = source
        self._stopped = threading.Event()
        self._sleep = sleep or self._stopped.wait
        self._seen = 0
        self.missed = 0  # events the JVM no longer had when they were read (the feed fell behind)
        self._thread = threading.Thread(target=self._run, name="sparkscale-query-events", daemon=True)

    def start(self) -> JvmProgressFeed:
        self.recorder.fed_by(self.stop)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()

    def read_once(self, wait_ms: int = 0) -> int | None:
        """Record the events after the last read (waiting up to ``wait_ms`` for one); returns how
        many, None when the plugin is not running (yet, or any more). Raises what the source
        raises."""
        reply = self.source.query_events(self._seen, wait_ms)
        if not reply:
            return None
        missed = int(reply.get("missed", 0))
        if missed:
            self.missed += missed
            log.warning("%d streaming query events were gone before they were read; the queries' "
                        "next progress restores their state", missed)
        events = reply.get("events") or []
        for event in events:
            try:
                record_event(self.recorder, event)
            except Exception:  # one malformed event must not stop the feed
                log.warning("could not record a streaming query event %s", event.get("type"),
                            exc_info=True)
        self._seen = int(reply.get("last", self._seen))
        return len(events)

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                read = self.read_once(WAIT_MS)
            except Exception:
                log.debug("could not read the streaming query events", exc_info=True)
                read = None
            if read is None and self._sleep(RETRY_S):
                return
