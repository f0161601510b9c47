"""Records the real Spark event logs under ``tests/data/eventlogs/`` that
``tests/unit/replay/test_eventlog.py`` reads.

Each recording is a small streaming application on ``local-cluster`` (real executor JVMs), run in a
process of its own with the pyspark it names, its event log copied here under a name that says
what it is (``tests/data/README.md`` describes each). Spark starts, so run it through the heavy-run
lock::

    /work/shared/tools/serial .venv/bin/python tests/record_event_logs.py [NAME ...]

No NAME records them all. A Spark 3.5 recording makes (once) a virtualenv with that pyspark under
``.venv-spark/``, as ``tests/integration/test_spark_versions.py`` does.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "tests" / "data" / "eventlogs"
SPARK_35 = "3.5.7"


@dataclass(frozen=True)
class Recording:
    name: str  # the file (plus the codec's extension) or folder under tests/data/eventlogs/
    pyspark: str | None  # None: the project's venv (pyspark 4.x); else a version from PyPI
    scenario: str  # a function of this module, run in the child process


RECORDINGS = (
    Recording("spark4-sparkscale-rolling", None, "sparkscale_step"),
    Recording("spark4-static", None, "static_step"),
    Recording("spark35-sparkscale", SPARK_35, "sparkscale_files_udf"),
    Recording("spark4-tiny", None, "tiny_plain"),
    Recording("spark4-tiny-lzf", None, "tiny_lzf"),
    Recording("spark4-tiny-snappy", None, "tiny_snappy"),
)


def event_log_conf(workdir: Path, codec: str | None, rolling: bool = False) -> dict[str, str]:
    """Where and how Spark writes the event log: every setting explicit, so that the recording
    does not depend on one Spark line's defaults (Spark 4 compresses with zstd and rolls)."""
    (workdir / "events").mkdir(parents=True, exist_ok=True)
    conf = {"spark.eventLog.enabled": "true", "spark.eventLog.dir": str(workdir / "events"),
            "spark.eventLog.compress": "true" if codec else "false",
            "spark.eventLog.rolling.enabled": "true" if rolling else "false",
            "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"}
    if codec:
        conf["spark.eventLog.compression.codec"] = codec
    return conf


# ---------------------------------------------------------------------------------------------
# Scenarios (child process)
# ---------------------------------------------------------------------------------------------


def _small_cluster_conf() -> dict[str, str]:
    """Up to 3 one-core executors on local-cluster, 1 at the start, with the integration tests'
    fast control loop (tests/spark_cluster.py's FAST: a tick a second, decisions within seconds)."""
    return {
        "spark.master": "local-cluster[3,1,1024]", "spark.executor.cores": "1",
        "spark.executor.memory": "512m", "spark.ui.showConsoleProgress": "false",
        "spark.sparkscale.minExecutors": "1", "spark.sparkscale.maxExecutors": "3",
        "spark.sparkscale.initialExecutors": "1", "spark.sparkscale.catchUpDuration": "30s",
        "spark.sparkscale.provisioningTimeout": "60s", "spark.sparkscale.interval": "1s",
        "spark.sparkscale.metricsWindow": "6s", "spark.sparkscale.stabilizationInterval": "2s",
        "spark.sparkscale.scaleDownInterval": "8s",
    }


def _applied(scaler: Any, action: str) -> list[dict[str, Any]]:
    return [d for d in scaler.decisions() if d["applied"] and d["action"] == action]


def _start_ticks_query(spark: Any, trigger_s: float = 2.0) -> Any:
    """A second query on the built-in rate source (a generator: no backlog), noop sink."""
    return (spark.readStream.format("rate").option("rowsPerSecond", 10).option("numPartitions", 1).load()
            .writeStream.format("noop").queryName("ticks").trigger(processingTime=f"{trigger_s} seconds")
            .start())


def _batch_job(spark: Any) -> None:
    """A job outside any streaming query, sharing the executors (a report, a model fit)."""
    spark.sparkContext.setJobDescription("nightly report")
    spark.range(0, 3_000_000, numPartitions=4).selectExpr("sum(id * 7 % 13)").collect()
    spark.sparkContext.setJobDescription(None)


def sparkscale_step(workdir: Path) -> dict[str, Any]:
    """pyspark 4.x with sparkscale: the test source steps 30 -> 220 -> 10 rows/s (one executor
    does about 100), so the autoscaler scales up on the backlog and back down; a rate-source
    query and a batch job share the cluster. Rolling event log, zstd. Short intervals and no wait
    beyond what the scalings need: each batch adds about 9 KB to the log."""
    from sparkscale_listener import autoscaler
    from sparkscale_listener.testing.demo import (
        StreamingJob,
        build_session,
        cluster_conf,
        quiet_executor_removal_noise,
        wait_for_autoscaler,
    )

    extra = {"spark.sparkscale.scaleDownInterval": "8s", "spark.sparkscale.stabilizationInterval": "3s",
             "spark.sparkscale.metricsWindow": "8s", "spark.io.compression.zstd.level": "9"}
    conf = cluster_conf(workdir, extra=event_log_conf(workdir, "zstd", rolling=True) | extra)
    spark = build_session("replay-sparkscale", conf)
    spark.sparkContext.setLogLevel("ERROR")
    quiet_executor_removal_noise(spark)
    scaler = autoscaler(spark)
    job = StreamingJob(spark, workdir, name="orders", rows_per_second=30, partitions=3, trigger_s=2,
                       max_rows_per_batch=1000).start()
    ticks = _start_ticks_query(spark, trigger_s=10)
    try:
        wait_for_autoscaler(scaler, lambda: scaler.status()["live_executors"] == 1, 120, "1 executor")
        time.sleep(4)  # a few batches at the low load
        job.set_rate(220)
        wait_for_autoscaler(scaler, lambda: _applied(scaler, "scale_up"), 120, "a scale-up")
        wait_for_autoscaler(scaler, lambda: scaler.status()["live_executors"] >= 2, 90, "new executors")
        peak = scaler.status()["live_executors"]
        _batch_job(spark)
        job.set_rate(10)
        wait_for_autoscaler(scaler, lambda: _applied(scaler, "scale_down")
                            and scaler.status()["live_executors"] < peak, 180, "the scale-down")
        time.sleep(2)
        applied = [(d["action"], d["from_executors"], d["to_executors"]) for d in scaler.decisions()
                   if d["applied"]]
    finally:
        ticks.stop()
        job.stop()
        spark.stop()
    return {"applied": applied}


def _session_without_sparkscale(app: str, workdir: Path, workers: int, codec: str | None) -> Any:
    """A local-cluster session of 1-core executors, static (no autoscaler), with its event log."""
    from pyspark.sql import SparkSession

    from sparkscale_listener.testing.demo import cluster_conf

    conf = {k: v for k, v in cluster_conf(workdir, workers=workers).items()
            if not k.startswith("spark.sparkscale.")} | event_log_conf(workdir, codec)
    builder = SparkSession.builder.appName(app)
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def static_step(workdir: Path) -> dict[str, Any]:
    """pyspark 4.x without sparkscale, 2 static executors: the test source steps 20 -> 260 -> 20
    rows/s (more than 2 executors read: a backlog builds, then drains), a rate query beside it
    and a batch job in the middle. Single lz4 file."""
    from sparkscale_listener.testing.demo import StreamingJob

    spark = _session_without_sparkscale("replay-static", workdir, workers=2, codec="lz4")
    job = StreamingJob(spark, workdir, name="orders", rows_per_second=20, partitions=3, trigger_s=2).start()
    ticks = _start_ticks_query(spark, trigger_s=5)
    try:
        time.sleep(12)
        job.set_rate(260)
        time.sleep(20)
        _batch_job(spark)
        job.set_rate(20)
        time.sleep(20)
    finally:
        ticks.stop()
        job.stop()
        spark.stop()
    return {}


def sparkscale_files_udf(workdir: Path) -> dict[str, Any]:
    """Any pyspark (3.5 has no Python data sources): the file source, fed three small files a
    second whose rows step 20 -> 150 -> 20 rows/s, through a Python UDF of 10 ms a row, with
    sparkscale. The arrivals step and the cost of a row stays the same, as the replay assumes
    (a cost per row that changes in the middle of a run is not something it can replay). Single
    zstd file."""
    import threading

    from pyspark.sql import SparkSession
    from pyspark.sql.functions import col, udf
    from pyspark.sql.types import LongType

    from sparkscale_listener import autoscale, autoscaler

    incoming, staging = workdir / "incoming", workdir / "staging"
    incoming.mkdir()
    staging.mkdir()
    rate = [20.0]  # rows/s the writer produces, changed by the scenario
    stop = threading.Event()

    def write_files() -> None:
        n, owed = 0, 0.0
        while not stop.wait(1.0 / 3):
            owed += rate[0] / 3
            rows, owed = int(owed), owed - int(owed)
            staged = staging / f"part-{n:06d}.txt"
            staged.write_text("".join(f"{n * 1000 + i}\n" for i in range(rows)))
            staged.rename(incoming / staged.name)  # whole files only: the source may list it now
            n += 1

    conf = _small_cluster_conf() | event_log_conf(workdir, "zstd") | {
        "spark.sql.shuffle.partitions": "2", "spark.io.compression.zstd.level": "9"}
    builder = SparkSession.builder.appName("replay-spark35")
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = autoscale(builder)
    spark.sparkContext.setLogLevel("ERROR")
    scaler = autoscaler(spark)

    @udf(LongType(), useArrow=False)  # one row at a time, whatever the executors' Python has
    def work(value: str) -> int:
        time.sleep(0.01)
        return int(value)

    writer = threading.Thread(target=write_files, daemon=True)
    writer.start()
    query = (spark.readStream.text(str(incoming)).select(work(col("value")).alias("value"))
             .writeStream.format("noop").queryName("enrich").trigger(processingTime="1 second").start())
    try:
        _wait(lambda: scaler.status()["live_executors"] == 1, 120, "1 executor")
        # The step comes once the autoscaler decides on a learnt cost: a step during its learning
        # and the start's stabilization made the recorded scale-up's moment hang on how the
        # start's extra executors went, which the replay does not reproduce to the second.
        _wait(lambda: [d for d in scaler.decisions()[-1:] if d["reason"] and "not ready" not in d["reason"]],
              120, "a decision on a learnt cost")
        time.sleep(3)  # a few batches at the low load
        rate[0] = 150.0  # 1.5 s of work a second: more than one executor can do
        _wait(lambda: _applied(scaler, "scale_up"), 180, "a scale-up")
        _wait(lambda: scaler.status()["live_executors"] >= 2, 90, "new executors")
        # The high load holds a few batches on the new executors: a step of a few batches only,
        # ending as the scale-up lands, left the replay's own batches too few to tell it.
        time.sleep(8)
        rate[0] = 20.0
        _wait(lambda: _applied(scaler, "scale_down"), 180, "a scale-down")
        time.sleep(2)
        applied = [(d["action"], d["from_executors"], d["to_executors"]) for d in scaler.decisions()
                   if d["applied"]]
    finally:
        stop.set()
        query.stop()
        spark.stop()
    return {"applied": applied, "spark": spark.version}


def _tiny(workdir: Path, codec: str | None) -> dict[str, Any]:
    """pyspark 4.x, one executor, the test source at 50 rows/s: six batches, then stop."""
    from sparkscale_listener.testing.demo import StreamingJob

    spark = _session_without_sparkscale(f"replay-tiny-{codec or 'plain'}", workdir, workers=1, codec=codec)
    job = StreamingJob(spark, workdir, name="tiny", rows_per_second=50, partitions=2, cost_ms=2).start()
    try:
        _wait(lambda: job.query.lastProgress and job.query.lastProgress["batchId"] >= 5, 120, "six batches")
    finally:
        job.stop()
        spark.stop()
    return {}


def tiny_plain(workdir: Path) -> dict[str, Any]:
    return _tiny(workdir, None)


def tiny_lzf(workdir: Path) -> dict[str, Any]:
    return _tiny(workdir, "lzf")


def tiny_snappy(workdir: Path) -> dict[str, Any]:
    return _tiny(workdir, "snappy")


def _wait(condition: Callable[[], Any], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(0.5)


# ---------------------------------------------------------------------------------------------
# Driver (parent process)
# ---------------------------------------------------------------------------------------------


def _python_for(pyspark: str | None) -> str:
    if pyspark is None:
        return sys.executable
    sys.path.insert(0, str(REPO / "tests"))
    from spark_lines import python_with_pyspark

    return python_with_pyspark(pyspark)


def _copy_log(events: Path, name: str) -> Path:
    """The one event log Spark wrote under ``events`` -> ``OUT/name`` (a single file keeps its
    codec extension; a rolling log's folder keeps its files, without Hadoop's .crc files)."""
    logs = [p for p in events.iterdir() if not p.name.startswith(".")]
    if len(logs) != 1:
        raise RuntimeError(f"expected one event log in {events}, found {[p.name for p in logs]}")
    log = logs[0]
    if log.name.endswith(".inprogress"):
        raise RuntimeError(f"{log} is still in progress: the application did not stop cleanly")
    for old in [OUT / name, *(OUT / f"{name}.{codec}" for codec in ("zstd", "lz4", "lzf", "snappy"))]:
        if old.is_dir():
            shutil.rmtree(old)
        elif old.exists():
            old.unlink()
    if log.is_dir():
        target = OUT / name
        target.mkdir(parents=True)
        for part in log.iterdir():
            if not part.name.startswith("."):
                shutil.copy2(part, target / part.name)
        return target
    suffix = log.name.split(".", 1)[1] if "." in log.name else ""
    target = OUT / (f"{name}.{suffix}" if suffix else name)
    shutil.copy2(log, target)
    return target


def record(recording: Recording) -> Path:
    python = _python_for(recording.pyspark)
    workdir = Path(tempfile.mkdtemp(prefix=f"record-{recording.name}-"))
    env = {**os.environ, "PYTHONPATH": str(REPO), "SPARK_LOCAL_IP": "127.0.0.1"}
    env.pop("SPARK_HOME", None)
    try:
        run = subprocess.run([python, __file__, "--child", recording.scenario, str(workdir)], cwd=workdir,
                             env=env, capture_output=True, text=True, timeout=900)
        results = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
        if run.returncode != 0 or not results:
            raise RuntimeError(f"{recording.name}: exit {run.returncode}\n{run.stdout[-3000:]}\n"
                               f"{run.stderr[-5000:]}")
        print(f"{recording.name}: {results[-1]}", flush=True)
        OUT.mkdir(parents=True, exist_ok=True)
        return _copy_log(workdir / "events", recording.name)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--child"]:
        scenario, workdir = argv[1], Path(argv[2])
        result = globals()[scenario](workdir)
        print("RESULT " + json.dumps(result), flush=True)
        return 0
    wanted = set(argv) or {r.name for r in RECORDINGS}
    unknown = wanted - {r.name for r in RECORDINGS}
    if unknown:
        print(f"unknown recordings {sorted(unknown)}; known: {[r.name for r in RECORDINGS]}", file=sys.stderr)
        return 2
    for recording in RECORDINGS:
        if recording.name in wanted:
            path = record(recording)
            size = sum(p.stat().st_size for p in ([path] if path.is_file() else path.iterdir()))
            print(f"  -> {path.relative_to(REPO)} ({size / 1024:.0f} KiB)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
