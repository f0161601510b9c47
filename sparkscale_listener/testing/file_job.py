"""A stateful query over a directory of files, with files arriving at a rate: a common shape whose
source reports no backlog.

Spark's file source reports nothing of the files still to read (its offsets count the batches of
its own log), and ``maxFilesPerTrigger`` caps what a batch reads: what waits behind the cap is
unseen. The query deduplicates on a key (a shuffle into ``spark.sql.shuffle.partitions`` state
stores) after a Python function of ``cost_ms`` a row, and writes Parquet, exactly once; a batch
has a fixed cost (planning, opening the state stores, the sink's commit) that no executor count
brings under a short trigger. A thread writes files of ``rows_per_file`` rows at
``files_per_second`` (:meth:`FileStreamJob.set_rate`), each row's id one more than the last, so the
sink must hold ids 0..n-1 once each.

Used by the real-Spark test of the fresh-and-frugal decisions and by the script that records its
batches for the unit tests (``tests/data/file_stream/``).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA = "id long, payload string"


@dataclass
class FileStreamJob:
    """One stateful query over a directory that a thread of this process fills with JSON files."""

    spark: Any
    workdir: Path
    name: str = "files"
    rows_per_file: int = 200
    files_per_second: float = 0.0
    max_files_per_trigger: int = 6
    cost_ms: float = 4.0
    trigger_s: float = 1.0
    query: Any = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.in_dir = self.workdir / f"{self.name}-in"
        self.out_dir = self.workdir / f"{self.name}-out"
        self.checkpoint = self.workdir / f"{self.name}-checkpoint"
        self.in_dir.mkdir(parents=True, exist_ok=True)
        self.files_written = 0
        self._read: dict[int, int] = {}  # batch id -> rows read
        self._rate = self.files_per_second
        self._stop = threading.Event()
        self._changed = threading.Event()
        self._writer = threading.Thread(target=self._write_files, name=f"{self.name}-files", daemon=True)

    def start(self) -> FileStreamJob:
        from pyspark.sql import functions as F
        from pyspark.sql.types import LongType

        cost_s = self.cost_ms / 1000.0

        def enrich(row_id: int) -> int:  # a call to a service: I/O-bound, as many streaming jobs' work
            time.sleep(cost_s)
            return row_id

        rows = (self.spark.readStream.schema(SCHEMA)
                .option("maxFilesPerTrigger", str(self.max_files_per_trigger)).json(str(self.in_dir)))
        # One row at a time: with pandas and pyarrow beside the driver, Spark 4 makes a UDF Arrow-
        # optimized by default, and the executors' Python then needs them too.
        enriched = rows.withColumn("id", F.udf(enrich, LongType(), useArrow=False)("id"))
        self.query = (enriched.dropDuplicates(["id"]).writeStream.format("parquet").queryName(self.name)
                      .option("path", str(self.out_dir)).option("checkpointLocation", str(self.checkpoint))
                      .trigger(processingTime=f"{self.trigger_s:g} seconds").start())
        self._writer.start()
        return self

    def set_rate(self, files_per_second: float) -> None:
        """Files from now on arrive at this rate (0: none)."""
        self._rate = files_per_second
        self._changed.set()

    def rows_written(self) -> int:
        return self.files_written * self.rows_per_file

    def rows_read(self) -> int:
        """Rows the query's completed batches read, from their progress (Spark keeps the latest 100:
        call this at least that often, in batches)."""
        for progress in self.query.recentProgress if self.query is not None else ():
            self._read[progress["batchId"]] = progress["numInputRows"]
        return sum(self._read.values())

    def stop(self) -> None:
        self._stop.set()
        self._changed.set()
        if self._writer.is_alive():
            self._writer.join(10)
        if self.query is not None and self.query.isActive:
            self.query.stop()

    def written_ids(self) -> list[int]:
        """Every id in the sink (read through the sink's own log, so only committed files)."""
        return [row.id for row in self.spark.read.parquet(str(self.out_dir)).select("id").collect()]

    def _write_files(self) -> None:
        """Each file written aside and renamed into the directory (the file source must never see a
        file half written), one every 1 / rate seconds."""
        next_at = time.monotonic()
        while not self._stop.is_set():
            rate = self._rate
            if rate <= 0:
                self._changed.wait()
                self._changed.clear()
                next_at = time.monotonic()
                continue
            wait = next_at - time.monotonic()
            if wait > 0:
                if self._changed.wait(min(wait, 1.0 / rate)):
                    self._changed.clear()
                    next_at = min(next_at, time.monotonic() + 1.0 / max(self._rate, 1e-9))
                continue
            first = self.files_written * self.rows_per_file
            text = "\n".join(json.dumps({"id": first + i, "payload": f"row {first + i}"})
                             for i in range(self.rows_per_file))
            aside = self.in_dir / f".{self.files_written:06d}.json.tmp"
            aside.write_text(text + "\n")
            aside.rename(self.in_dir / f"{self.files_written:06d}.json")
            self.files_written += 1
            next_at += 1.0 / rate
