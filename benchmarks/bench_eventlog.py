"""How fast an event log is read: a 1-hour log of a 2 s trigger query, stretched from a real one.

The real log (``tests/data/eventlogs/spark4-sparkscale-rolling``: a 2 s trigger query on the test
source, a 5 s rate query, sparkscale's ticks and scalings, a batch job, executors coming and
going) is tiled until it spans an hour: each copy's times, job, stage, task, batch and executor
ids are shifted so that the result reads as one long application, every event Spark wrote kept
(SQL plans, stage and task-start events included: the reader must skip them fast). It is written
as Spark writes it (zstd, one frame per flush; and plain), then read with
:func:`sparkscale_listener.replay.read_event_log`. A benchmark, not a test: run it through the
heavy-run lock::

    /work/shared/tools/serial .venv/bin/python benchmarks/bench_eventlog.py [--hours 1]

It prints the reading time, the log's size and the load average, and writes them to
``benchmarks/results/eventlog.md``; the budget of a whole replay is 30 s.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sparkscale_listener.replay import read_event_log  # noqa: E402
from sparkscale_listener.replay.codecs import decompressed_chunks, find_log_files  # noqa: E402

SOURCE = REPO / "tests" / "data" / "eventlogs" / "spark4-sparkscale-rolling"
RESULTS = REPO / "benchmarks" / "results" / "eventlog.md"
STREAMING = "org.apache.spark.sql.streaming.StreamingQueryListener$"
LINES_PER_FRAME = 4  # Spark's zstd stream closes a frame at each flush, every few events


def source_lines(path: Path) -> list[bytes]:
    data = b"".join(chunk for log in find_log_files(path).files
                    for chunk in decompressed_chunks(log, lambda n: None))
    return [line for line in data.splitlines() if line.strip()]


def _iso_shift(stamp: str, seconds: float) -> str:
    t = datetime.fromisoformat(stamp.replace("Z", "+00:00")) + timedelta(seconds=seconds)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


class Shift:
    """One copy's offsets: times (ms), and the ids Spark counts up per application."""

    def __init__(self, copy_index: int, span_ms: int, jobs: int, stages: int, tasks: int, batches: int,
                 executors: int, tiled_executors: set[str]) -> None:
        self.ms = copy_index * span_ms
        self.tiled_executors = tiled_executors  # added within the tiled part: new ids in each copy
        self.job, self.stage, self.task = copy_index * jobs, copy_index * stages, copy_index * tasks
        self.batch, self.executor = copy_index * batches, copy_index * executors

    def time(self, value: Any) -> Any:
        return value + self.ms if isinstance(value, int) and value > 0 else value

    def executor_id(self, value: Any) -> Any:
        if value in self.tiled_executors:
            return str(int(value) + self.executor)
        return value

    def stage_info(self, info: dict[str, Any]) -> None:
        info["Stage ID"] += self.stage
        for key in ("Submission Time", "Completion Time"):
            if key in info:
                info[key] = self.time(info[key])

    def properties(self, properties: dict[str, Any] | None) -> None:
        if properties and properties.get("streaming.sql.batchId") is not None:
            properties["streaming.sql.batchId"] = str(int(properties["streaming.sql.batchId"]) + self.batch)

    def event(self, event: dict[str, Any]) -> dict[str, Any]:
        name = event["Event"]
        if name == "SparkListenerJobStart":
            event["Job ID"] += self.job
            event["Submission Time"] = self.time(event.get("Submission Time"))
            event["Stage IDs"] = [s + self.stage for s in event["Stage IDs"]]
            for info in event.get("Stage Infos") or ():
                self.stage_info(info)
            self.properties(event.get("Properties"))
        elif name == "SparkListenerJobEnd":
            event["Job ID"] += self.job
            event["Completion Time"] = self.time(event.get("Completion Time"))
        elif name in ("SparkListenerStageSubmitted", "SparkListenerStageCompleted"):
            self.stage_info(event["Stage Info"])
            self.properties(event.get("Properties"))
        elif name in ("SparkListenerTaskStart", "SparkListenerTaskEnd"):
            event["Stage ID"] += self.stage
            info = event["Task Info"]
            info["Task ID"] += self.task
            info["Launch Time"] = self.time(info["Launch Time"])
            info["Finish Time"] = self.time(info["Finish Time"])
            info["Executor ID"] = self.executor_id(info["Executor ID"])
        elif name in ("SparkListenerExecutorAdded", "SparkListenerExecutorRemoved",
                      "SparkListenerBlockManagerAdded", "SparkListenerBlockManagerRemoved"):
            event["Timestamp"] = self.time(event.get("Timestamp"))
            if "Executor ID" in event:
                event["Executor ID"] = self.executor_id(event["Executor ID"])
        elif name == STREAMING + "QueryProgressEvent":
            progress = event["progress"]
            progress["timestamp"] = _iso_shift(progress["timestamp"], self.ms / 1000)
            progress["batchId"] += self.batch
        elif name == STREAMING + "QueryIdleEvent":
            event["timestamp"] = _iso_shift(event["timestamp"], self.ms / 1000)
        elif name.startswith("io.sparkscale.bridge."):
            event["timestampMs"] = self.time(event.get("timestampMs"))
        return event


def stretch(lines: list[bytes], hours: float) -> Iterator[bytes]:
    """The log's streaming part, tiled (with shifted times and ids) to span ``hours``."""
    events = [json.loads(line) for line in lines]
    names = [e["Event"] for e in events]
    first = next(i for i, n in enumerate(names) if n == "SparkListenerJobStart")
    last = max(i for i, n in enumerate(names) if n == STREAMING + "QueryProgressEvent")
    head, middle, tail = lines[:first], events[first:last + 1], lines[last + 1:]
    times = [e["Submission Time"] for e in middle if e["Event"] == "SparkListenerJobStart"]
    span_ms = max(times) - min(times) + 2000
    jobs = 1 + max(e["Job ID"] for e in events if e["Event"] == "SparkListenerJobStart")
    stages = 1 + max(s for e in events if e["Event"] == "SparkListenerJobStart" for s in e["Stage IDs"])
    tasks = 1 + max(e["Task Info"]["Task ID"] for e in events if e["Event"] == "SparkListenerTaskEnd")
    batches = 1 + max(e["progress"]["batchId"] for e in events
                      if e["Event"] == STREAMING + "QueryProgressEvent")
    executors = 1 + max(int(e["Executor ID"]) for e in events if e["Event"] == "SparkListenerExecutorAdded")
    tiled_executors = {e["Executor ID"] for e in middle if e["Event"] == "SparkListenerExecutorAdded"
                       and e["Executor ID"].isdigit()}
    # Executors a copy adds and never removes leave before the next copy starts, or each copy
    # would leave more of them running.
    removed = {e["Executor ID"] for e in middle if e["Event"] == "SparkListenerExecutorRemoved"}
    staying = tiled_executors - removed
    copies = max(1, round(hours * 3_600_000 / span_ms))
    yield from head
    for index in range(copies):
        shift = Shift(index, span_ms, jobs, stages, tasks, batches, executors, tiled_executors)
        for event in middle:
            yield json.dumps(shift.event(copy.deepcopy(event)), separators=(",", ":")).encode()
        if index < copies - 1:
            for executor_id in sorted(staying):
                removed = {"Event": "SparkListenerExecutorRemoved", "Timestamp": min(times) + span_ms - 1,
                           "Executor ID": executor_id, "Removed Reason": "Executor killed by driver."}
                yield json.dumps(shift.event(removed), separators=(",", ":")).encode()
    for line in tail:
        event = json.loads(line)
        if event["Event"] == "SparkListenerApplicationEnd":
            event["Timestamp"] += (copies - 1) * span_ms
        yield json.dumps(event, separators=(",", ":")).encode()


def write_logs(lines: Iterator[bytes], folder: Path) -> tuple[Path, Path]:
    import zstandard

    plain, packed = folder / "app-1", folder / "app-1.zstd"
    compressor = zstandard.ZstdCompressor(level=1)  # Spark's default zstd level
    group: list[bytes] = []
    with plain.open("wb") as p, packed.open("wb") as z:
        for line in lines:
            p.write(line + b"\n")
            group.append(line + b"\n")
            if len(group) == LINES_PER_FRAME:
                z.write(compressor.compress(b"".join(group)))
                group = []
        if group:
            z.write(compressor.compress(b"".join(group)))
    return plain, packed


def timed_read(path: Path) -> tuple[float, Any]:
    start = time.perf_counter()
    app = read_event_log(path)
    return time.perf_counter() - start, app


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hours", type=float, default=1.0)
    parser.add_argument("--source", type=Path, default=SOURCE, help="the real log to stretch")
    parser.add_argument("--no-results", action="store_true", help="print only")
    args = parser.parse_args()
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-eventlog-") as tmp:
        plain, packed = write_logs(stretch(source_lines(args.source), args.hours), Path(tmp))
        results = []
        for path in (packed, plain):
            seconds, app = timed_read(path)
            orders = max(app.queries, key=lambda q: len(q.batches))  # the 2 s trigger query
            span = (orders.batches[-1].timestamp - orders.batches[0].timestamp) / 3600
            results.append((path.name, path.stat().st_size, seconds, app, orders, span))
    load_end = os.getloadavg()
    lines = []
    for name, size, seconds, app, orders, span in results:
        tasks = sum(b.tasks.tasks for q in app.queries for b in q.batches if b.tasks)
        lines.append(
            f"{name:<12} {size / 1e6:7.1f} MB  read in {seconds:5.2f} s ({size / 1e6 / seconds:5.1f} MB/s): "
            f"{span:.2f} h of query {orders.name!r} ({len(orders.batches)} batches, trigger "
            f"{orders.trigger_interval_s} s), {sum(len(q.batches) for q in app.queries)} batches in all, "
            f"{tasks} tasks, {len(app.executors)} executors, {len(app.scalings)} scalings, "
            f"{len(app.ticks)} ticks")
    lines.append(f"load average: {' '.join(f'{x:.2f}' for x in load_start)} at the start, "
                 f"{' '.join(f'{x:.2f}' for x in load_end)} at the end (2 cores)")
    print("\n".join(lines))
    if args.no_results:
        return 0
    command = "benchmarks/bench_eventlog.py" + (f" --hours {args.hours:g}" if args.hours != 1.0 else "")
    RESULTS.write_text(f"# Reading an event log\n\n`{command}`: {args.hours:g} h stretched from "
                       f"`{args.source.name}`, read with `read_event_log`.\n\n```\n"
                       + "\n".join(lines) + "\n```\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
