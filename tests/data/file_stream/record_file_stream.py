"""Record what the autoscaler sees of a stateful query over a file source: every control tick's
figures of the query and every batch, for the evaluator's unit tests
(tests/unit/evaluator/test_file_stream_series.py).

Run on purpose (through the machine's heavy-run lock), never by pytest:

    /work/shared/tools/serial .venv/bin/python tests/data/file_stream/record_file_stream.py

The shape of the real-Spark test (tests/integration/test_file_stream_spark.py,
sparkscale_listener/testing/file_job.py): JSON files of 200 rows, a Python function of 4 ms a row,
``dropDuplicates`` on the id, a Parquet sink, a 1 s trigger, ``maxFilesPerTrigger`` 6, on
``local-cluster[4,1,1024]`` with the tests' fast settings and the test's keys (:data:`KEYS`),
sparkscale starting on all 4 executors. Files arrive at 0.3 a second for 90 s (quiet), 1.5 a
second for 90 s (heavy), then none for 60 s after the last one is read. An observer of the
control loop writes each tick's sample (``series.json``): the time, the live executors, the
query's cumulative task time, backlog and trigger, the id of its latest completed batch and the
batch running; and each batch as the collector last gave it.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # tests/: spark_cluster

from spark_cluster import fast_conf  # noqa: E402

from sparkscale_listener import autoscaler, stop_autoscaler  # noqa: E402
from sparkscale_listener.testing.demo import build_session, wait_for  # noqa: E402
from sparkscale_listener.testing.file_job import FileStreamJob  # noqa: E402

PHASES = (("quiet", 0.3, 90.0), ("heavy", 1.5, 90.0))
# The real-Spark test's keys (on top of the tests' fast settings).
KEYS = {"initialExecutors": "4", "maxExecutors": "4", "backlogThreshold": "60s", "metricsWindow": "20s",
        "scaleDownInterval": "20s"}
IDLE_S = 60.0


class Recorder:
    """A control-loop observer: each tick's figures of every query, each batch once (its last version)."""

    def __init__(self) -> None:
        self.ticks: list[dict[str, Any]] = []
        self.batches: dict[str, dict[int, dict[str, Any]]] = {}

    def __call__(self, scaler: Any, sample: Any, decisions: Any) -> None:
        queries = {}
        for qid, q in sample.queries.items():
            kept = self.batches.setdefault(q.name or qid, {})
            for b in q.recent_batches:
                kept[b.batch_id] = asdict(b)
            queries[q.name or qid] = {
                "trigger_interval_ms": q.trigger_interval_ms, "backlog": q.backlog,
                "backlog_problem": q.backlog_problem, "busy_ms": q.busy_ms,
                "max_stage_tasks": q.max_stage_tasks,
                "last_batch": q.recent_batches[-1].batch_id if q.recent_batches else None,
                "in_flight": asdict(q.in_flight) if q.in_flight is not None else None, "active": q.active}
        self.ticks.append({"time": sample.time, "live_executors": sample.cluster.live_executors,
                           "cores_per_executor": sample.cluster.cores_per_executor,
                           "other_tasks": sample.cluster.other_tasks, "queries": queries,
                           "decision": [d.reason for d in decisions][-1:]})


def main() -> int:
    workdir = Path(tempfile.mkdtemp(prefix="record-file-stream-"))
    conf = fast_conf(workdir, workers=4, extra={f"spark.sparkscale.{k}": v for k, v in KEYS.items()})
    spark = build_session("record-file-stream", conf)
    spark.sparkContext.setLogLevel("ERROR")
    scaler = autoscaler(spark)
    recorder = Recorder()
    scaler.observers.append(recorder)
    job = FileStreamJob(spark, workdir, files_per_second=PHASES[0][1]).start()
    marks: dict[str, list[float]] = {}
    try:
        wait_for(lambda: scaler.status()["live_executors"] == 4, 120, what="4 executors")
        for name, rate, seconds in PHASES:
            job.set_rate(rate)
            until = time.time() + seconds
            wait_for(lambda until=until: time.time() >= until, seconds + 10, poll_s=0.5, what=name)
            job.rows_read()
            marks[name] = [until - seconds, time.time()]
        job.set_rate(0.0)
        stopped = time.time()
        wait_for(lambda: job.rows_read() >= job.rows_written(), 300, poll_s=0.5, what="every file read")
        read = time.time()
        wait_for(lambda: time.time() - read >= IDLE_S, IDLE_S + 10, poll_s=0.5, what="idle")
        marks["none"] = [stopped, time.time()]
        marks["all_read"] = [read, read]
    finally:
        stop_autoscaler(spark)
        job.stop()
    ids = job.written_ids()
    exact = sorted(ids) == list(range(job.rows_written()))
    version = spark.version
    spark.stop()
    out = {"recorded_by": "tests/data/file_stream/record_file_stream.py", "spark": version,
           "conf": {k: v for k, v in conf.items() if k.startswith("spark.sparkscale.")},
           "phases": marks, "rows_written": job.rows_written(), "exactly_once": exact,
           "ticks": recorder.ticks,
           "batches": {name: [kept[i] for i in sorted(kept)] for name, kept in recorder.batches.items()}}
    (HERE / "series.json").write_text(json.dumps(out, indent=None, separators=(",", ":")) + "\n")
    print(f"recorded {len(recorder.ticks)} ticks, "
          f"{sum(len(b) for b in recorder.batches.values())} batches; exactly once: {exact}")
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
